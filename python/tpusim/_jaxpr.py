"""The kernel of a ``pallas_call``, read from its jaxpr.

The kernel jaxpr is evaluated once per device and grid point with concrete scalars:
program ids, axis indices, constants and SMEM contents (scalar prefetch and SMEM
operands are known when the call runs) are numpy values, so every ``pl.when``,
``lax.cond``, loop bound, index and device id is decided here. Refs, semaphores and
vector values stay symbolic: every equation that moves data (a DMA start or wait, a
semaphore signal or wait, a ref store) becomes one record of the recording that the
Rust side (``python/src/replay.rs``) replays on its kernel API, each with the
``file:line`` of the equation's source information. From there the kernel is an
ordinary tpusim program: the scheduler, verifier, step tables, cost model and both
executors are the Rust ones.

JAX's own TPU interpret mode (``jax/_src/pallas/mosaic/interpret/``) gives the
meaning of each primitive; this module follows it.
"""

import contextlib
import functools
import math
import os

import jax
import numpy as np
from jax._src import core as jax_core
from jax._src.pallas import core as pallas_core
from jax._src.pallas.mosaic import core as mosaic_core
from jax._src.state import indexing
from jax._src.state import types as state_types

try:
    from jax._src.pallas.mosaic import pipeline as mosaic_pipeline
except ImportError:  # pragma: no cover - older JAX
    mosaic_pipeline = None

from . import _batch, _compose, _native, _steer
from ._views import RefV

_JAX_DIR = os.path.dirname(os.path.abspath(jax.__file__)) + os.sep
_JAX_OPS = os.path.join(_JAX_DIR, "experimental", "pallas", "ops") + os.sep
_PKG = os.path.dirname(os.path.abspath(__file__)) + os.sep


# ---------------------------------------------------------------- source lines


def site_of(source_info, outer=("<unknown>", 0)):
    """(file, line) of the innermost frame of `source_info` that is the user's: not in
    JAX itself (JAX's own example kernels under ``pallas/ops`` count as the user's)
    and not in tpusim; else `outer` (an equation inside a jitted JAX function, such as
    ``jnp.cumsum``'s, is the user's call of that function)."""
    # An equation's source info lives as long as its jaxpr: its answer is kept by id,
    # with the object itself so that a reused id is not mistaken for it.
    got = _users_site.get(id(source_info))
    if got is not None and got[0] is source_info:
        found = got[1]
        return outer if found is None else found
    tb = getattr(source_info, "traceback", None)
    if tb is None:
        return outer
    found = _users_frame.get(tb, _MISSING)  # jaxlib's tracebacks hash by their frames
    if found is _MISSING:
        found = next(((fr.file_name, fr.line_num) for fr in tb.frames if _users_file(fr.file_name)), None)
        if len(_users_frame) > 200_000:
            _users_frame.clear()
        _users_frame[tb] = found
    if len(_users_site) > 200_000:
        _users_site.clear()
    _users_site[id(source_info)] = (source_info, found)
    return outer if found is None else found


#: Per traceback, its user's frame (an equation's is looked up at every point it runs).
_users_frame = {}
#: Per source info (by id, with the object), its user's frame: the lookup above without
#: hashing the traceback's frames.
_users_site = {}
_MISSING = object()


@functools.lru_cache(maxsize=4096)
def _users_file(name):
    if name.startswith("<frozen"):
        return False
    f = os.path.abspath(name)
    if f.startswith(_PKG):
        return False
    return not (f.startswith(_JAX_DIR) and not f.startswith(_JAX_OPS))


class _Where:
    """The current device, grid point and line, for error messages."""

    def __init__(self, point, site, op):
        self.point, self.site, self.op = point, site, op

    def iteration(self):
        """The loop iterations of the current call as a site prints them ('' outside loops)."""
        p = self.point
        if p is None or not p.loops:
            return ""
        return _native.iteration_text([((f, int(l)), n) for (f, l), n in p.loops])

    def __str__(self):
        p = self.point
        loc = f"{self.site[0]}:{self.site[1]}"
        if p is None:
            return f" ({loc})"
        it = self.iteration()
        it = f" in {it}" if it else ""
        chip, core = p.name()
        dev = f"device {chip}" + ("" if core is None else f" core {core}")
        return f" in {dev} at grid point {list(p.index)}{it}, `{self.op}` ({loc})"


def _error(cls, kind, detail, where):
    e = cls(f"{kind}: {detail}{where}")
    e.kind = kind
    e.detail = detail
    p = where.point
    e.site = {
        "device": p.name()[0] if p else None,
        "core": p.name()[1] if p else None,
        "grid": list(p.index) if p else None,
        "op": where.op,
        "location": f"{where.site[0]}:{where.site[1]}",
    }
    if where.iteration():  # as the core's sites: only inside a loop
        e.site["iteration"] = where.iteration()
    return e


def unsupported(construct, why, where):
    """An UnsupportedError naming the construct (usually the primitive) and the line."""
    detail = f"`{construct}` is not supported by tpusim"
    if why:
        detail += f": {why}"
    return _error(_native.UnsupportedError, "unsupported", detail, where)


def kernel_error(kind, detail, where):
    return _error(_native.KernelError, kind, detail, where)


# ---------------------------------------------------------------- dtypes


_CORE_DTYPES = {
    "float32": "f32",
    "int32": "i32",
    "float16": "f16",
    "bfloat16": "bf16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "bool",
}
_dtype_names = {}  # dtype -> the core's name (asked for every value a kernel computes)


def dtype_name(dt):
    """The core's name of a numpy/JAX dtype, or None."""
    try:
        return _dtype_names[dt]
    except (KeyError, TypeError):  # new, or not hashable
        pass
    try:
        d = np.dtype(dt)
    except TypeError:
        return None
    name = _CORE_DTYPES.get(d.name)
    try:
        _dtype_names[dt] = name
    except TypeError:
        pass
    return name


def sem_kind(dtype):
    """`dma`, `regular` or `barrier` for a semaphore dtype, else None."""
    try:
        if jax.numpy.issubdtype(dtype, pallas_core.barrier_semaphore):
            return "barrier"
        if jax.numpy.issubdtype(dtype, mosaic_core.dma_semaphore):
            return "dma"
        if jax.numpy.issubdtype(dtype, pallas_core.semaphore):
            return "regular"
    except TypeError:
        return None
    return None


def space_of(ms):
    """`hbm`, `vmem`, `smem`, `sem` (or the space's own name) of a memory space."""
    if ms is None:
        return None
    v = str(getattr(ms, "value", ms)).lower()
    return {"any": "hbm", "hbm": "hbm", "vmem": "vmem", "smem": "smem", "semaphore_mem": "sem", "semaphore": "sem"}.get(
        v, v
    )


# ---------------------------------------------------------------- buffers and views


class Buffer:
    """A kernel buffer: an operand, a scratch buffer or semaphore array, a pipeline
    block or a ``run_scoped`` allocation. `pos` is its argument position in the Rust
    spec (None for SMEM, which lives here: its values decide control flow). A ref's
    ``.reshape`` or ``.bitcast`` is an alias (:meth:`alias`): the same allocation
    (`root`) from element `base` on, with its own shape and dtype."""

    __slots__ = ("kind", "name", "shape", "dtype", "pos", "sem", "smem", "barrier", "root", "base", "known", "scratch")

    def __init__(self, kind, name, shape, dtype, pos=None, sem=None, barrier=False):
        self.kind = kind  # "hbm" | "vmem" | "smem" | "sem"
        self.name = name
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.pos = pos
        self.sem = sem  # "dma" | "regular" | "barrier" for semaphores
        self.smem = None  # {device: numpy array} for SMEM
        self.barrier = barrier
        self.root = self
        self.base = 0
        self.known = None  # device SMEM: {device: flat mask of what tracing knows} (``_steer``)
        self.scratch = False  # SMEM scratch (device memory in a kernel traced while it runs)

    def alias(self, base, shape, dtype):
        """The elements of this buffer's allocation from `base` on as an array of
        `shape` and `dtype` (of the allocation's element width)."""
        root = self.root
        a = Buffer(root.kind, root.name, shape, dtype, root.pos, root.sem, root.barrier)
        a.root, a.base = root, int(base)
        n = math.prod(a.shape)
        if root.smem is not None:
            a.smem = {
                d: arr.reshape(-1)[a.base : a.base + n].reshape(a.shape).view(np.dtype(dtype))
                for d, arr in root.smem.items()
            }
        return a

    def aliased(self):
        """True when this buffer is not its allocation as the Rust spec shapes it."""
        return self.base != 0 or self.shape != self.root.shape

    def __repr__(self):
        return f"Buffer({self.kind} {self.name} {self.shape})"


def _concrete_int(v, what, where):
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):  # most indices: a scalar already
        return int(v)
    if type(v) is _batch.Batched:
        v = _batch.concrete(v)
    if isinstance(v, Sym):
        v = sym_value(v, what, where)
    if isinstance(v, RefV):
        raise kernel_error("misuse", f"a ref where {what} needs an integer", where)
    a = np.asarray(v)
    if a.shape != ():
        raise unsupported(what, f"an index of shape {a.shape} (gathers)", where)
    return int(a)


def apply_indexer(view, idx, where, check=True):
    """`view` indexed by NDIndexer `idx` (ints and slices over its dims); `check`:
    an index outside the view raises _OutOfBounds (a wait's view only gives a size)."""
    if not isinstance(idx, indexing.NDIndexer):
        raise unsupported(
            f"ref transform {type(idx).__name__}",
            "tpusim's refs take integer and slice indexing, `.reshape` and `.bitcast` (no transpose)",
            where,
        )
    if idx.int_indexer_shape not in ((), None) and tuple(idx.int_indexer_shape) != ():
        raise unsupported("gather indexing of a ref", "indices must be scalars and slices", where)
    dims = list(view.dims)
    vis = [i for i, d in enumerate(dims) if isinstance(d, tuple)]
    if len(idx.indices) != len(vis):
        raise kernel_error(
            "out of bounds",
            f"`{view.buf.name}` has {len(vis)} dimensions but is indexed with {len(idx.indices)}",
            where,
        )
    for j, ix in zip(vis, idx.indices):
        start, size, stride = dims[j]
        if isinstance(ix, indexing.Slice):
            s = _concrete_int(ix.start, "a slice start", where)
            n = _concrete_int(ix.size, "a slice size", where)
            st = int(ix.stride)
            if check and (s < 0 or n < 0 or (n > 0 and s + (n - 1) * st >= size)):
                raise _OutOfBounds(f"`{view.buf.name}` slice pl.ds({s}, {n}) leaves a dimension of size {size}")
            dims[j] = (start + s * stride, n, stride * st)
        else:
            i = _concrete_int(ix, "an index", where)
            if check and (i < 0 or i >= size):
                raise _OutOfBounds(f"`{view.buf.name}` index {i} on a dimension of size {size} (valid 0..={size - 1})")
            dims[j] = start + i * stride
    return RefV(view.buf, dims, view.barrier_n)


def sym_value(v, what, where):
    """The value of `v`, a value the kernel computes, where `what` needs it: asked of
    the run when the kernel is traced while it runs (``_steer``); a plan made ahead of
    the run is made again that way (``NeedsSteering``)."""
    p = where.point
    if p is not None and p.asker is not None:
        return p.asker.value(v, where)
    if p is not None and not p.plan.steered:
        raise _steer.NeedsSteering(what)
    raise unsupported(
        where.op,
        f"{what} is computed from data loaded from VMEM or HBM or read from a semaphore "
        "(only program ids, axis indices, constants and SMEM values are known here)",
        where,
    )


class _Aval:
    """A shape and dtype where a rule wants an aval."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), dtype


class _OutOfBounds(Exception):
    """An index outside its ref: recorded as the kernel's error at that line."""


def transform(ref, transforms, where, check=True):
    """`ref` (a RefV, or a TransformedRef of one) with `transforms` applied; a
    `pl.select_ref` picks its ref by its (concrete) index."""
    ts = list(transforms)
    while True:
        if isinstance(ref, state_types.TransformedRef):
            ts = [*ref.transforms, *ts]
            ref = ref.ref
        elif isinstance(ref, (tuple, list)):
            if not ts or not isinstance(ts[0], state_types.SelectTransform):
                raise kernel_error("misuse", "a tuple of refs where one ref is needed", where)
            i = _concrete_int(ts[0].idx, "the index of `pl.select_ref`", where)
            if not 0 <= i < len(ref):
                raise _OutOfBounds(f"`pl.select_ref` index {i} picks from {len(ref)} refs")
            ref, ts = ref[i], ts[1:]
        else:
            break
    if not isinstance(ref, RefV):
        if type(ref) is _batch.BView:
            raise _batch.Unbatchable()
        raise kernel_error("misuse", f"expected a ref, got {type(ref).__name__}", where)
    for t in ts:
        if isinstance(t, state_types.ReshapeTransform):
            ref = _reshaped(ref, t.shape, where)
        elif isinstance(t, state_types.BitcastTransform):
            ref = _bitcast(ref, t.dtype, where)
        else:
            ref = apply_indexer(ref, t, where, check)
    return ref


def _reshaped(view, shape, where):
    """`ref.reshape(*shape)`: a view of contiguous elements as another shape."""
    if view.buf.kind == "sem":
        raise unsupported("reshape of a semaphore ref", "", where)
    runs = view.runs()
    if len(runs) > 1:
        raise unsupported("reshape of a ref", "of a window whose elements are not contiguous", where)
    base = runs[0][0] if runs else view.buf.base
    return RefV(view.buf.alias(base, shape, view.dtype), None, view.barrier_n)


def _bitcast(view, dtype, where):
    """`ref.bitcast(dtype)` to a dtype of the same element width: the same elements."""
    src, dst = np.dtype(view.dtype), np.dtype(dtype)
    if view.buf.kind == "sem":
        raise unsupported("bitcast of a semaphore ref", "", where)
    if src.itemsize != dst.itemsize:
        raise unsupported("bitcast of a ref", f"from {src} to {dst}: bitcasts keep the element width here", where)
    b = view.buf
    return RefV(b.alias(b.base, b.shape, dst), view.dims, view.barrier_n)


# ---------------------------------------------------------------- symbolic values


class Sym:
    """A vector value the kernel computes from data in VMEM (unknown until the
    executors run): a load, or a primitive applied to values. Each is recorded when it
    is made (`rec`, value `id`, at position `pos` of its grid point's calls); a store
    that is a plain copy or accumulate of loads takes their records back and records
    the core's copy or accumulate instead (data ops every executor runs)."""

    __slots__ = ("prim", "args", "params", "shape", "dtype", "site", "view", "id", "rec", "pos", "uses", "value")

    def __init__(self, prim, args, shape, dtype, site, params=None, view=None):
        self.prim = prim
        self.args = args
        self.params = params or {}
        self.shape = tuple(shape)
        self.dtype = dtype
        self.site = site
        self.view = view
        self.id = None
        self.rec = None
        self.pos = 0
        self.uses = 0
        self.value = None  # its data, once a run while tracing read it (``_steer``)

    def __repr__(self):
        return f"Sym({self.prim} {self.shape})"


# ---------------------------------------------------------------- scalar rules


def _c_div(a, b):
    if np.issubdtype(a.dtype, np.integer):
        q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
        return np.where(b == 0, -1, np.sign(a) * np.sign(b) * q).astype(a.dtype)
    return np.true_divide(a, b).astype(a.dtype)


def _c_rem(a, b):
    if np.issubdtype(a.dtype, np.integer):
        return np.fmod(a, np.where(b == 0, 1, b)).astype(a.dtype)
    return np.fmod(a, b)


def _select_n(which, *cases):
    which = np.asarray(which)
    if which.dtype == np.bool_:
        which = which.astype(np.int32)
    return np.choose(which, np.broadcast_arrays(*cases))


def _shift_right_logical(a, b):
    u = a.view(np.uint32) if a.dtype == np.int32 else a
    return (u >> b).view(a.dtype) if a.dtype == np.int32 else u >> b


def _convert(x, new_dtype, **_):
    return np.asarray(x).astype(np.dtype(new_dtype))


def _broadcast_in_dim(x, shape, broadcast_dimensions, **_):
    x = np.asarray(x)
    exp = [1] * len(shape)
    for src, dst in enumerate(broadcast_dimensions):
        exp[dst] = x.shape[src]
    return np.broadcast_to(x.reshape(exp), shape)


class _Iota(np.ndarray):
    """An iota's concrete value that remembers it is one (`iota_dim`), so that kernel
    compute on it records the core's iota (derived arrays forget it)."""

    def __array_finalize__(self, obj):
        self.iota_dim = None


def _iota(dtype, shape, dimension, **_):
    a = np.arange(shape[dimension], dtype=np.dtype(dtype))
    exp = [1] * len(shape)
    exp[dimension] = shape[dimension]
    out = np.broadcast_to(a.reshape(exp), shape).view(_Iota)
    out.iota_dim = dimension
    return out


def _reduce(f):
    def rule(x, axes, **_):
        return f(np.asarray(x), axis=tuple(axes))

    return rule


def _slice(x, start_indices, limit_indices, strides=None, **_):
    strides = strides or (1,) * len(start_indices)
    return np.asarray(x)[tuple(slice(s, l, st) for s, l, st in zip(start_indices, limit_indices, strides))]


def _dynamic_slice(x, *idx, slice_sizes, **_):
    x = np.asarray(x)
    starts = [min(max(int(i), 0), x.shape[d] - slice_sizes[d]) for d, i in enumerate(idx)]
    return x[tuple(slice(s, s + n) for s, n in zip(starts, slice_sizes))]


def _dynamic_update_slice(x, upd, *idx, **_):
    x = np.array(x)
    upd = np.asarray(upd)
    starts = [min(max(int(i), 0), x.shape[d] - upd.shape[d]) for d, i in enumerate(idx)]
    x[tuple(slice(s, s + n) for s, n in zip(starts, upd.shape))] = upd
    return x


def _dot_general(a, b, dimension_numbers, preferred_element_type=None, **_):
    (ca, cb), (ba, bb) = dimension_numbers
    if ba or bb:
        raise NotImplementedError("batched dot_general")
    out = np.tensordot(np.asarray(a), np.asarray(b), axes=(list(ca), list(cb)))
    return out.astype(preferred_element_type or out.dtype)


def _clamp(lo, x, hi):
    return np.clip(x, lo, hi)


def _same(x, *_, **__):
    return x


def _as(f):
    return lambda *a, **_: f(*[np.asarray(x) for x in a])


SCALAR_RULES = {
    "add": _as(np.add),
    "sub": _as(np.subtract),
    "mul": _as(np.multiply),
    "div": _as(_c_div),
    "rem": _as(_c_rem),
    "neg": _as(np.negative),
    "max": _as(np.maximum),
    "min": _as(np.minimum),
    "abs": _as(np.abs),
    "sign": _as(np.sign),
    "eq": _as(np.equal),
    "ne": _as(np.not_equal),
    "lt": _as(np.less),
    "le": _as(np.less_equal),
    "gt": _as(np.greater),
    "ge": _as(np.greater_equal),
    "and": _as(np.bitwise_and),
    "or": _as(np.bitwise_or),
    "xor": _as(np.bitwise_xor),
    "not": _as(lambda x: np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)),
    "shift_left": _as(np.left_shift),
    "shift_right_arithmetic": _as(np.right_shift),
    "shift_right_logical": _as(_shift_right_logical),
    "select_n": _as(_select_n),
    "convert_element_type": _convert,
    "broadcast_in_dim": _broadcast_in_dim,
    "iota": _iota,
    "reshape": lambda x, new_sizes, **_: np.asarray(x).reshape(new_sizes),
    "squeeze": lambda x, dimensions, **_: np.squeeze(np.asarray(x), axis=tuple(dimensions)),
    "expand_dims": lambda x, dimensions, **_: np.expand_dims(np.asarray(x), tuple(dimensions)),
    "transpose": lambda x, permutation, **_: np.transpose(np.asarray(x), permutation),
    "reduce_sum": _reduce(np.sum),
    "reduce_max": _reduce(np.max),
    "reduce_min": _reduce(np.min),
    "reduce_and": _reduce(np.all),
    "reduce_or": _reduce(np.any),
    "integer_pow": lambda x, y, **_: np.asarray(x) ** y,
    "square": _as(np.square),
    "sqrt": _as(np.sqrt),
    "exp": _as(np.exp),
    "log": _as(np.log),
    "floor": _as(np.floor),
    "ceil": _as(np.ceil),
    "round": lambda x, **_: np.round(x),
    "pow": _as(np.power),
    "clamp": _as(_clamp),
    "concatenate": lambda *xs, dimension, **_: np.concatenate([np.asarray(x) for x in xs], dimension),
    "slice": _slice,
    "dynamic_slice": _dynamic_slice,
    "dynamic_update_slice": _dynamic_update_slice,
    "dot_general": _dot_general,
    "copy": _same,
    "copy_p": _same,
    "optimization_barrier": _same,
    "multiple_of": lambda x, **_: x,
    "pvary": _same,
    "reduce_precision": _same,
    "reshard": _same,
    "stop_gradient": _same,
    "tanh": _as(np.tanh),
    "logistic": _as(lambda x: 1 / (1 + np.exp(-x))),
    "argmax": lambda x, axes, index_dtype, **_: np.argmax(x, axis=axes[0]).astype(index_dtype),
    "argmin": lambda x, axes, index_dtype, **_: np.argmin(x, axis=axes[0]).astype(index_dtype),
    "sort": lambda *xs, dimension, **_: [np.sort(np.asarray(x), axis=dimension) for x in xs],
    "cumsum": lambda x, axis, reverse=False, **_: np.cumsum(x, axis=axis),
    "empty": lambda shape, dtype, **_: np.zeros(shape, dtype),
    "stack": lambda *xs, axis, **_: np.stack([np.asarray(x) for x in xs], axis),
    "unstack": lambda x, axis, **_: list(np.moveaxis(np.asarray(x), axis, 0)),
    "bitcast_convert_type": lambda x, new_dtype, **_: np.ascontiguousarray(x).view(np.dtype(new_dtype)),
}

# Primitives that act on every value unchanged (what a value is does not change).
IDENTITY = {
    "pvary",
    "copy",
    "copy_p",
    "optimization_barrier",
    "multiple_of",
    "stop_gradient",
    "reduce_precision",
    "reshard",
}


# ---------------------------------------------------------------- one grid point


# The records of calls that communicate: a loop iteration with one gets a step mark.
_COMMUNICATES = frozenset(("start", "wait", "wait_send", "wait_recv", "dma_wait", "signal", "sem_wait"))


# The records of waits (after which a device may see what others wrote).
_WAITS = frozenset(("wait", "wait_send", "wait_recv", "dma_wait", "sem_wait"))


def loop_label(loops):
    """A step mark's label for loop iterations ((file, line), n), outermost first:
    ``kernel.py:40 iteration 2``, nested ones after a comma."""
    for k, (_, n) in enumerate(loops):
        if type(n) is _batch.PerIter:  # a batched body's: one label per iteration
            return _batch.PerIter([loop_label(loops[:k] + ((loops[k][0], v),) + loops[k + 1 :]) for v in n.vals])
    return ", ".join(f"{os.path.basename(f)}:{l} iteration {n}" for (f, l), n in loops)


class Point:
    """One device at one grid point: its scalars, and the calls it records."""

    def __init__(self, plan, device, index):
        self.plan = plan
        self.device = device  # linear id in the tpusim mesh
        self.index = tuple(index)
        self.ops = []
        self.prints = []  # `pl.debug_print` texts, in order
        # Traced while it runs (``_steer``): who answers its questions (its device's
        # trace), and the records before the last one asked, which nothing may take back.
        self.asker = None
        self.frozen = 0
        self.nbarrier = 0
        self.nvalues = 0
        self.syms = []
        # The loop iterations being evaluated, outermost first: ((file, line), n) each;
        # the context the last record was made in; whether a call that communicates
        # (a DMA or semaphore op) was recorded since the last step mark.
        self.loops = ()
        self._recorded_in = ()
        self._communicated = False
        self._marks = 0
        self.batch = None  # the loop body being recorded for many iterations (``_batch``)

    def use(self, v):
        """Counts a use of value `v` (once per iteration a batched body stands for)."""
        if self.batch is None:
            v.uses += 1
        else:
            self.batch.use(v)

    def name(self):
        """(chip, core): how reports name this device (the core is None on chips of one;
        a ``pl.core_map``'s cores are consecutive devices of the tpusim mesh)."""
        cores = self.plan.spec.cores
        return (self.device, None) if cores <= 1 else (self.device // cores, self.device % cores)

    def drop_unused(self):
        """Takes back the records of values nothing used (`jnp.zeros_like(o_ref[...])`
        loads `o_ref` for its shape only): a load no one reads is no access."""
        work = [v for v in self.syms if v.uses == 0]
        while work:
            v = work.pop()
            if v.rec is None or v.rec.get("dead") or v.pos < self.frozen:
                continue
            v.rec["dead"] = True
            for a in v.args:
                if isinstance(a, Sym):
                    a.uses -= 1
                    if a.uses == 0:
                        work.append(a)

    def record(self, op, site, **fields):
        if self.loops != self._recorded_in:
            # The calls that follow are in these iterations (the Rust side's sites say so).
            self.ops.append({"op": "iter", "loops": [[[f, int(l)], n] for (f, l), n in self.loops]})
            self._recorded_in = self.loops
        fields["op"] = op
        fields["at"] = [site[0], int(site[1])]
        self.ops.append(fields)
        if op in _COMMUNICATES:
            self._communicated = True
        if op in _WAITS and self.asker is not None:
            # What other agents wrote into this device's SMEM may be ordered before
            # what follows: tracing no longer knows its values.
            self.plan.smem_forget(self.device)

    def mark(self, label, site):
        """A step mark (a row of the step table once every device passed it)."""
        self.record("mark", site, label=label)
        self._communicated = False
        self._marks += 1

    @contextlib.contextmanager
    def iteration(self, site, n):
        """Evaluates iteration `n` (0-based, in the order run) of the loop at `site`;
        an iteration that communicated ends with a step mark naming it, so the step
        table has a row per iteration (a nested loop's marks stand for the iteration
        around them when nothing communicated after its last one)."""
        outer, pending, marks = self.loops, self._communicated, self._marks
        self.loops = outer + ((tuple(site), n),)
        self._communicated = False
        try:
            yield
            if self._communicated:
                self.mark(loop_label(self.loops), site)
            if self._marks > marks:
                pending = False  # a mark's row shows what came before it too
        finally:
            self.loops = outer
            self._communicated = pending


#: Per primitive name, the Evaluator's rule for it (None: none of its own).
_RULE_OF = {}


class Evaluator:
    """Evaluates a jaxpr at one Point."""

    # What the composed rules (``_compose``, below this module) raise and read through
    # the evaluator they are given.
    unsupported = staticmethod(unsupported)
    concrete_int = staticmethod(_concrete_int)

    def __init__(self, plan, point):
        self.plan = plan
        self.p = point
        self.outer = [("<unknown>", 0)]  # the user's lines of the calls being evaluated
        # (indices, sizes) that program_id / num_programs answer: the kernel's grid, or
        # an emit_pipeline's inner grid inside its body.
        self.grid_env = [(point.index, plan.grid)]
        self.pipeline_grids = []
        self.used = []  # per jaxpr being evaluated, the variables something reads

    def unused(self, var):
        """True when nothing reads `var` (a store's old value JAX names but drops)."""
        return isinstance(var, jax_core.DropVar) or (bool(self.used) and var not in self.used[-1])

    # -- helpers

    def site(self, eqn):
        return site_of(eqn.source_info, self.outer[-1])

    def where(self, eqn, op=None):
        return _Where(self.p, self.site(eqn), op or eqn.primitive.name)

    def read(self, env, v):
        if isinstance(v, jax_core.Literal):
            return v.val
        return env[v]

    def run(self, jaxpr, consts, args):
        env = {}
        for v, a in zip(jaxpr.constvars, consts):
            env[v] = a
        for v, a in zip(jaxpr.invars, args):
            env[v] = a
        return self._eqns(jaxpr, env)

    def _eqns(self, jaxpr, env):
        self.used.append(_used_vars(jaxpr))
        try:
            return self._eqns_in(jaxpr, env)
        finally:
            self.used.pop()

    def _eqns_in(self, jaxpr, env):
        if self.plan.budget is not None:  # counted: the budget's measure of the work
            self.plan.budget.eqns += len(jaxpr.eqns)
        # The loop every recorded equation goes through: `read` and `site` inlined.
        outer, literal = self.outer, jax_core.Literal
        for eqn in jaxpr.eqns:
            ins = [v.val if isinstance(v, literal) else env[v] for v in eqn.invars]
            outer.append(site_of(eqn.source_info, outer[-1]))
            try:
                outs = self.eqn(eqn, ins)
            finally:
                outer.pop()
            if eqn.primitive.multiple_results:
                for v, o in zip(eqn.outvars, outs):
                    env[v] = o
            else:
                env[eqn.outvars[0]] = outs
        return [self.read(env, v) for v in jaxpr.outvars]

    def run_closed(self, closed, args):
        # A jaxpr carries its constants (JAX 0.12; before, a ClosedJaxpr wrapped one).
        # Where the equation passes them itself (run_scoped's closed-over values), the
        # arguments cover every input.
        jx = getattr(closed, "jaxpr", closed)
        all_in = getattr(jx, "all_invars", None)
        if all_in is not None and len(args) == len(all_in) and len(all_in) != len(jx.invars):
            env_vars = all_in
            return self.run_vars(jx, env_vars, args)
        return self.run(jx, list(getattr(closed, "consts", None) or []), args)

    def run_vars(self, jaxpr, vars, args):
        return self._eqns(jaxpr, dict(zip(vars, args)))

    # -- one equation

    def eqn(self, eqn, ins):
        name = eqn.primitive.name
        rule = _RULE_OF.get(name, _MISSING)
        if rule is _MISSING:
            rule = _RULE_OF[name] = getattr(Evaluator, "p_" + name.replace("-", "_"), None)
        if rule is not None:
            return rule(self, eqn, ins)
        vector = False
        for x in ins:
            if isinstance(x, Sym):
                vector = True
            elif isinstance(x, RefV):
                raise unsupported(name, "this primitive on a ref", self.where(eqn))
        if vector:
            return self.vector(eqn, ins)
        f = SCALAR_RULES.get(name)
        if self.p.batch is not None and _batch.has_batched(ins):
            return _batch.scalar(eqn, ins, f)
        if f is None:
            raise unsupported(
                name,
                "tpusim's jaxpr front end has no rule for this primitive",
                self.where(eqn),
            )
        try:
            out = f(*ins, **eqn.params)
        except Exception as e:  # a rule that cannot take these values
            raise unsupported(name, f"on these values ({e})", self.where(eqn)) from None
        if eqn.primitive.multiple_results:
            return [np.asarray(o) for o in out]
        aval = eqn.outvars[0].aval
        if isinstance(out, _Iota):
            return out
        out = np.asarray(out)
        dt = getattr(aval, "dtype", None)
        if dt is not None and out.dtype != dt:
            try:
                out = out.astype(dt)
            except TypeError:
                pass
        return out

    def vector(self, eqn, ins):
        """A primitive on values loaded from refs: one compute record (or a few, for
        the primitives ``_compose`` builds from the core's ops)."""
        name = eqn.primitive.name
        if name in IDENTITY:
            return ins if eqn.primitive.multiple_results else ins[0]
        if name == "convert_element_type" and np.dtype(eqn.params["new_dtype"]) == np.dtype(ins[0].dtype):
            return ins[0]
        where = self.where(eqn)
        avals = [getattr(v, "aval", None) for v in eqn.invars]
        composed = _compose.RULES.get(name)
        if composed is not None:
            return composed(self, eqn, ins, avals, where)
        if eqn.primitive.multiple_results:
            raise unsupported(name, "on values loaded from refs", where)
        aval = eqn.outvars[0].aval
        kind, picks = compute_kind(name, eqn.params, ins, aval, where)
        return self.compute(
            name, kind, [ins[i] for i in picks], aval.shape, aval.dtype, where, [avals[i] for i in picks]
        )

    def compute(self, prim, kind, args, shape, dtype, where, avals=None):
        """One compute record of `kind` on `args` (values, or concrete operands made into
        constants of their equation's type, `avals`) into a value of `shape`, `dtype`.
        Elementwise operands of size-1 dimensions are broadcast first (the pinned JAX
        broadcasts them implicitly: `max` of [8, 128] and [8, 1])."""
        ids = []
        like = next((x.dtype for x in args if isinstance(x, Sym)), dtype)
        k = kind.get("k")
        for n, a in enumerate(args):
            if isinstance(a, Sym):
                v = a
            else:
                av = avals[n] if avals is not None and n < len(avals) else None
                want = getattr(av, "dtype", None)
                if want is None:  # no type to go by: a select's predicate is bool, its cases and
                    # an arithmetic op's operands the result's dtype, a comparison's its values'
                    want = np.bool_ if k == "select" and n == 0 else dtype if k in ("select", "binary") else like
                v = self.constant(a, want, where)
            if v.prim == "poison":
                return v
            if k in _ELEMENTWISE and v.shape and tuple(v.shape) != tuple(shape):
                v = self.broadcast(v, shape, where)
            self.p.use(v)
            ids.append(v.id)
        out = Sym(prim, list(args), shape, dtype, where.site)
        self.emit(out, "compute", where, kind=kind, args=ids, shape=list(shape), dtype=_dt(dtype, where))
        return out

    def broadcast(self, v, shape, where):
        """`v` broadcast to `shape` along its size-1 dimensions (same rank), or along new
        leading ones."""
        r = len(v.shape)
        if r > len(shape) or any(a not in (1, b) for a, b in zip(v.shape, shape[len(shape) - r :])):
            raise kernel_error(
                "shape mismatch", f"a value of shape {list(v.shape)} does not broadcast to {list(shape)}", where
            )
        return self.compute(
            "broadcast_in_dim",
            {"k": "broadcast", "dims": list(range(len(shape) - r, len(shape)))},
            [v],
            shape,
            v.dtype,
            where,
        )

    def constant(self, value, dtype, where):
        """A value for a concrete operand of a vector op: an iota (when it is one), a
        uniform `jnp.full`, or any other array: a constant of the call (``Plan.constant``)."""
        if (
            isinstance(value, _Iota)
            and value.iota_dim is not None
            and value.ndim
            and np.dtype(value.dtype) == np.dtype(dtype)
        ):
            out = Sym("iota", [], value.shape, value.dtype, where.site)
            self.emit(
                out,
                "compute",
                where,
                kind={"k": "iota", "dim": int(value.iota_dim)},
                args=[],
                shape=list(value.shape),
                dtype=_dt(value.dtype, where),
            )
            return out
        if type(value) is _batch.Batched:  # a scalar that differs between iterations
            vals = value.vals.astype(dtype)
            v = [float(bool(x)) if vals.dtype == np.bool_ else float(x) for x in vals]
            out = Sym("full", [], (), vals.dtype, where.site)
            self.emit(out, "full", where, shape=[], value=_batch.per_iter(v), dtype=_dt(vals.dtype, where))
            return out
        a = np.asarray(value).astype(dtype)
        dt = _dt(a.dtype, where)
        flat = a.reshape(-1)
        if not _uniform(flat):
            out = Sym("const", [], a.shape, a.dtype, where.site)
            self.emit(out, "const", where, data=self.plan.constant(a), shape=list(a.shape), dtype=dt)
            return out
        v = flat[0] if a.size else 0
        v = float(bool(v)) if a.dtype == np.bool_ else float(v)
        out = Sym("full", [], a.shape, a.dtype, where.site)
        self.emit(out, "full", where, shape=list(a.shape), value=v, dtype=dt)
        return out

    def emit(self, sym, op, where, **fields):
        sym.id = self.p.nvalues
        self.p.nvalues += 1
        self.p.record(op, where.site, id=sym.id, **fields)
        sym.pos = len(self.p.ops) - 1
        sym.rec = self.p.ops[-1]
        self.p.syms.append(sym)

    # -- grid and mesh

    def p_program_id(self, eqn, ins):
        index, _ = self.grid_env[-1]
        return np.int32(index[eqn.params["axis"]])

    def p_num_programs(self, eqn, ins):
        _, sizes = self.grid_env[-1]
        return np.int32(sizes[eqn.params["axis"]])

    def p_axis_index(self, eqn, ins):
        name = eqn.params["axis_name"]
        names = name if isinstance(name, (tuple, list)) else (name,)
        idx = 0
        for n in names:
            size, coord = self.plan.axis_coord(self.p, n, self.where(eqn))
            idx = idx * size + coord
        return np.int32(idx)

    def p_axis_size(self, eqn, ins):
        name = eqn.params["axis_name"]
        names = name if isinstance(name, (tuple, list)) else (name,)
        return np.int32(math.prod(self.plan.axis_coord(self.p, n, self.where(eqn))[0] for n in names))

    def p_psum(self, eqn, ins):
        # `lax.psum(1, axis)` in a kernel is the axis size (what `lax.axis_size` was).
        axes = eqn.params["axes"]
        if any(isinstance(x, (Sym, RefV)) for x in ins):
            raise unsupported("psum", "a collective on kernel values", self.where(eqn))
        n = math.prod(self.plan.axis_coord(self.p, a, self.where(eqn))[0] for a in axes)
        return [np.asarray(x) * n for x in ins]

    # -- control flow

    def p_cond(self, eqn, ins):
        which = _concrete_int(ins[0], "the predicate of `lax.cond` / `pl.when`", self.where(eqn))
        branches = eqn.params["branches"]
        which = min(max(which, 0), len(branches) - 1)
        return self.run_closed(branches[which], ins[1:])

    def p_while(self, eqn, ins):
        cn, bn = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
        cc, bc, val = list(ins[:cn]), ins[cn : cn + bn], list(ins[cn + bn :])
        where = self.where(eqn)
        n = 0
        # A computed bound is asked once (when traced while running), not at every step.
        asks = [i for i in _steer.used_inputs(eqn.params["cond_jaxpr"])] if self.p.asker else []
        budget = self.plan.budget.loop(where.site, None, self.p)
        try:
            while True:
                for i in asks:
                    x = cc[i] if i < cn else val[i - cn]
                    if isinstance(x, Sym) and math.prod(x.shape) == 1:
                        x = np.asarray(sym_value(x, "the bound of a loop", where)).reshape(x.shape)
                        if i < cn:
                            cc[i] = x
                        else:
                            val[i - cn] = x
                (c,) = self.run_closed(eqn.params["cond_jaxpr"], [*cc, *val])
                if not _concrete_int(c, "the condition of a `while_loop` / `fori_loop`", where):
                    return val
                with self.p.iteration(where.site, n):
                    val = self.run_closed(eqn.params["body_jaxpr"], [*bc, *val])
                budget.iterated()
                n += 1
                if n > self.plan.max_iterations:
                    raise unsupported("while_loop", f"more than {self.plan.max_iterations} iterations", where)
        finally:
            budget.close()

    def p_scan(self, eqn, ins):
        p = eqn.params
        if "ft_in" in p:
            consts, carry, xs = (list(g) for g in p["ft_in"].update(ins).unpack())
        else:
            nc, ncar = p["num_consts"], p["num_carry"]
            consts, carry, xs = ins[:nc], ins[nc : nc + ncar], ins[nc + ncar :]
        length = p["length"]
        where = self.where(eqn)
        if any(isinstance(x, Sym) for x in xs):
            raise unsupported("scan", "scanning over values loaded from refs", where)
        ys = []
        order = range(length - 1, -1, -1) if p.get("reverse") else range(length)
        budget = self.plan.budget.loop(where.site, length, self.p)
        # The iterations after the first two recorded as one where the body allows
        # (``_batch``): the carry's inputs at those two give its step.
        batchable = _batch.ENABLED and length >= _batch.MIN_ITERATIONS
        batchable = batchable and self.p.batch is None and self.p.asker is None and not self.plan.steered
        seen = []

        def split(out):  # an iteration's outputs: (carry, per-iteration outputs)
            if "ft_out" in p:
                return (list(g) for g in p["ft_out"].update(out).unpack())
            return out[: len(carry)], out[len(carry) :]

        try:
            for n, i in enumerate(order):
                if batchable and n == 2:
                    got = _batch.run_scan(
                        self, p["jaxpr"], where, consts, [seen[1], carry], xs, order[2:], split, budget
                    )
                    if got is not None:
                        carry, more = got
                        ys.extend(more)
                        break
                if batchable and n < 2:
                    seen.append(list(carry))
                x_i = [np.asarray(x)[i] for x in xs]
                with self.p.iteration(where.site, n):
                    out = self.run_closed(p["jaxpr"], [*consts, *carry, *x_i])
                carry, y = split(out)
                ys.append(y)
                budget.iterated()
        finally:
            budget.close()
        if p.get("reverse"):
            ys.reverse()
        nys = len(eqn.outvars) - len(carry)
        stacked = []
        for j in range(nys):
            col = [y[j] for y in ys]
            if any(isinstance(c, Sym) for c in col):
                raise unsupported("scan", "stacking values loaded from refs", where)
            aval = eqn.outvars[len(carry) + j].aval
            stacked.append(np.stack(col) if col else np.zeros(aval.shape, aval.dtype))
        return [*carry, *stacked]

    def _call(self, eqn, ins):
        jaxpr = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr") or eqn.params.get("fun_jaxpr")
        return self.run_closed(jaxpr, ins)

    p_pjit = p_jit = p_closed_call = p_core_call = p_remat = p_checkpoint = p_eval_jaxpr = _call
    p_custom_jvp_call = p_custom_vjp_call = p_custom_vjp_call_jaxpr = _call

    def p_run_scoped(self, eqn, ins):
        body = eqn.params["jaxpr"]
        where = self.where(eqn)
        if eqn.params.get("collective_axes"):
            raise unsupported("run_scoped(collective_axes=...)", "", where)
        all_in = getattr(body, "all_invars", None) or body.invars
        allocs = self.plan.scoped(eqn, all_in[len(ins) :], where)
        refs = [RefV(b) for b in allocs]
        return self.run_closed(body, [*ins, *refs])

    def p_emit_pipeline(self, eqn, ins):
        jx = self.plan.pipeline_jaxpr(eqn)
        self.pipeline_grids.append(tuple(int(g) for g in eqn.params["grid_mapping"].grid))
        try:
            self.run_closed(jx, ins)
        finally:
            self.pipeline_grids.pop()
        return []

    def p_pipeline_body(self, eqn, ins):
        p = eqn.params
        ps, body_consts, refs = p["in_tree"].unflatten(ins)
        if p.get("_explicit_indices", False):
            flat, _ = jax.tree_util.tree_flatten(ps)
            args = (*body_consts, *flat, *refs)
        else:
            args = (*body_consts, *refs)
        where = self.where(eqn)
        index = tuple(_concrete_int(i, "a pipeline index", where) for i in ps.index)
        sizes = self.pipeline_grids[-1] if self.pipeline_grids else self.grid_env[-1][1]
        self.grid_env.append((index, sizes))
        try:
            self.run_closed(p["jaxpr"], list(args))
        finally:
            self.grid_env.pop()
        return []

    # -- refs

    def _view(self, ref, flat, tree, eqn):
        where = self.where(eqn)
        if self.p.batch is not None and _batch.has_batched(flat):
            return self._batched_view(ref, flat, tree, where)
        transforms = jax.tree_util.tree_unflatten(tree, flat) if tree is not None else ()
        return transform(ref, transforms, where)

    def _batched_view(self, ref, flat, tree, where):
        """`ref` indexed by scalars that differ between batched iterations: a BView,
        or the RefV they all give (an index out of bounds in any is recorded per
        iteration)."""
        n = self.p.batch.n
        transforms = jax.tree_util.tree_unflatten(tree, flat)
        if not isinstance(ref, RefV) or not all(isinstance(t, indexing.NDIndexer) for t in transforms):
            raise _batch.Unbatchable()
        dims = ref.dims
        for t in transforms:
            dims = _batch.index(ref.buf, dims, t, n)
        if any(type(d) is np.ndarray or type(d) is tuple and type(d[0]) is np.ndarray for d in dims):
            return _batch.BView(ref.buf, dims, ref.barrier_n, n)
        return RefV(ref.buf, dims, ref.barrier_n)

    def p_get(self, eqn, ins):
        where = self.where(eqn, "load")
        try:
            view = self._view(ins[0], ins[1:], eqn.params["tree"], eqn)
        except _OutOfBounds as e:
            return self._oob(e, where, eqn.outvars[0].aval)
        return self.load(view, eqn, where)

    def p_swap(self, eqn, ins):
        where = self.where(eqn, "store")
        try:
            view = self._view(ins[0], ins[2:], eqn.params["tree"], eqn)
        except _OutOfBounds as e:
            return self._oob(e, where, eqn.outvars[0].aval)
        old = None if self.unused(eqn.outvars[0]) else self.load(view, eqn, where)
        self.store(view, ins[1], where)
        return old

    def p_addupdate(self, eqn, ins):
        where = self.where(eqn, "store")
        try:
            view = self._view(ins[0], ins[2:], eqn.params["tree"], eqn)
        except _OutOfBounds as e:
            self._oob(e, where, None)
            return []
        old = self.load(view, eqn, where)
        kind, _ = compute_kind("add", {}, [old, ins[1]], view, where)
        self.store(
            view,
            self.compute(
                "add", kind, [old, ins[1]], view.shape, view.dtype, where, [None, getattr(eqn.invars[1], "aval", None)]
            ),
            where,
        )
        return []

    def p_masked_load(self, eqn, ins):
        ref, transforms, mask, _ = jax.tree_util.tree_unflatten(eqn.params["args_tree"], ins)
        where = self.where(eqn, "load")
        if mask is not None:
            raise unsupported("pl.load(mask=...)", "masked loads", where)
        try:
            view = transform(ref, transforms, where)
        except _OutOfBounds as e:
            return self._oob(e, where, eqn.outvars[0].aval)
        return self.load(view, eqn, where)

    def p_masked_swap(self, eqn, ins):
        ref, transforms, val, mask = jax.tree_util.tree_unflatten(eqn.params["args_tree"], ins)
        where = self.where(eqn, "store")
        if mask is not None:
            raise unsupported("pl.store(mask=...)", "masked stores", where)
        try:
            view = transform(ref, transforms, where)
        except _OutOfBounds as e:
            return self._oob(e, where, eqn.outvars[0].aval)
        old = None if self.unused(eqn.outvars[0]) else self.load(view, eqn, where)
        self.store(view, val, where)
        return old

    def _oob(self, e, where, aval):
        self.p.record("error", where.site, kind="out_of_bounds", detail=str(e), what=where.op)
        if aval is None:
            return None
        return Sym("poison", [], aval.shape, aval.dtype, where.site)

    def load(self, view, eqn, where):
        if type(view) is _batch.BView:
            return self._batched_load(view, where)
        buf = view.buf
        if buf.kind == "smem":
            return self.plan.smem_read(self.p, view, where)
        if buf.kind == "sem":
            raise kernel_error("misuse", f"`{buf.name}` is a semaphore: read it with pl.semaphore_read", where)
        root = np.dtype(buf.root.dtype)
        v = self._load_as(view, root, where)
        if np.dtype(view.dtype) != root:  # a `.bitcast` ref: the same bits as its dtype
            v = self.bitcast(v, view.dtype, where)
        return v

    def _batched_load(self, view, where):
        """A load of a BView: one record whose source differs between iterations (of
        SMEM: the value at each)."""
        buf = view.buf
        if buf.kind == "smem":
            vals = [self.plan.smem_read(self.p, v, where) for v in view.views]
            if any(np.shape(v) != () for v in vals):
                raise _batch.Unbatchable()
            return _batch.collapse(np.array(vals))
        if buf.kind == "sem" or np.dtype(view.dtype) != np.dtype(buf.root.dtype):
            raise _batch.Unbatchable()
        steps = view.steps()
        if steps is None:
            raise _batch.Unbatchable()
        v = Sym("get", [], view.shape, buf.root.dtype, where.site, view=view)
        self.emit(v, "load", where, src=_batch.per_iter([[buf.pos, s] for s in steps]))
        return v

    def _load_as(self, view, dtype, where):
        """A load of `view` as the allocation's `dtype`."""
        buf = view.buf
        v = Sym("get", [], view.shape, dtype, where.site, view=view)
        steps = view.steps()
        if steps is not None:
            self.emit(v, "load", where, src=[buf.pos, steps])
            return v
        if buf.aliased():  # a `.reshape` ref: its elements as one run of the allocation
            runs = view.runs()
            if len(runs) != 1:
                raise unsupported("a window of a reshaped ref", "windows of contiguous elements only", where)
            ((off, n),) = runs
            v.shape = (n,)
            self.emit(v, "load", where, src=[buf.pos, [[2, int(off), int(n)]]])
        else:
            start, shape, strides, keep = view.window()
            self.emit(v, "load", where, src=[buf.pos, []], window={"start": start, "shape": shape, "strides": strides})
            v.shape = tuple(shape)
        if tuple(v.shape) != tuple(view.shape):  # integer indices drop their dimensions
            w = Sym("reshape", [v], view.shape, dtype, where.site, view=view)
            self.p.use(v)
            self.emit(
                w, "compute", where, kind={"k": "reshape"}, args=[v.id], shape=list(view.shape), dtype=_dt(dtype, where)
            )
            return w
        return v

    def store(self, view, value, where):
        buf = view.buf
        if self.p.batch is not None and (buf.kind == "smem" or type(view) is _batch.BView and buf.aliased()):
            raise _batch.Unbatchable()  # SMEM's values decide what later iterations do
        if buf.kind == "smem":
            if not (isinstance(value, Sym) and buf.root.pos is not None):
                self.plan.smem_write(self.p, view, value, where)
                return
            # A vector into device SMEM (traced while running): stored as data, and no
            # longer known here.
            self.plan.smem_unknown(self.p, view)
        if buf.kind == "sem":
            raise kernel_error("misuse", f"`{buf.name}` is a semaphore, not a buffer", where)
        if not isinstance(value, Sym):
            a = np.asarray(value)
            if (
                a.size
                and not _uniform(a.reshape(-1))
                or buf.aliased()
                or np.dtype(view.dtype) != np.dtype(buf.root.dtype)
            ):
                # a table or mask (or a store through an alias): a constant value
                value = self.constant(np.broadcast_to(a, view.shape), view.dtype, where)
        if value.prim == "poison" if isinstance(value, Sym) else False:
            return
        if isinstance(value, Sym) and np.dtype(value.dtype) != np.dtype(buf.root.dtype):
            value = self.bitcast(value, buf.root.dtype, where)  # into a `.bitcast` ref
        if buf.aliased():  # into a `.reshape` ref: one run of the allocation
            runs = view.runs()
            if len(runs) != 1:
                raise unsupported(
                    "a store into a window of a reshaped ref", "windows of contiguous elements only", where
                )
            ((off, n),) = runs
            flat = self.compute("reshape", {"k": "reshape"}, [value], (n,), value.dtype, where)
            self.p.use(flat)
            self.p.record("store", where.site, dst=[buf.pos, [[2, int(off), int(n)]]], src=flat.id)
            return
        self.plan.lower_store(self.p, view, value, where)

    def bitcast(self, v, dtype, where):
        """Value `v` as `dtype` of the same element width."""
        kind, _ = compute_kind("bitcast", {}, [v], _Aval((), dtype), where)
        return self.compute("bitcast", kind, [v], v.shape, dtype, where)

    # -- semaphores

    def sem_path(self, ref, where):
        """The recorded form of one semaphore."""
        if not isinstance(ref, RefV) or ref.buf.kind != "sem":
            raise kernel_error("misuse", f"expected a semaphore, got {ref!r}", where)
        if ref.buf.barrier:
            return [{"Barrier": ref.barrier_n}, None]
        if ref.shape != ():
            raise kernel_error(
                "misuse",
                f"`{ref.buf.name}` is an array of semaphores of shape {ref.shape}: pick one with `.at[i]`",
                where,
            )
        if not ref.buf.shape:
            return [{"Arg": ref.buf.pos}, None]
        strides = [math.prod(ref.buf.shape[i + 1 :]) for i in range(len(ref.buf.shape))]
        lin = sum(int(d) * s for d, s in zip(ref.dims, strides))
        return [{"Arg": ref.buf.pos}, lin]

    def p_get_barrier_semaphore(self, eqn, ins):
        where = self.where(eqn)
        self.p.record("barrier", where.site)
        n = self.p.nbarrier
        self.p.nbarrier += 1
        return RefV(self.plan.barrier_buf, (), barrier_n=n)

    def p_semaphore_signal(self, eqn, ins):
        where = self.where(eqn)
        sem, sem_t, inc, dev, core_index = jax.tree_util.tree_unflatten(eqn.params["args_tree"], ins)
        try:
            sem = transform(sem, sem_t, where)
        except _OutOfBounds as e:
            self._oob(e, where, None)
            return []
        inc = _concrete_int(inc, "the increment of semaphore_signal", where)
        target = self.plan.device_id(self.p, dev, eqn.params.get("device_id_type"), where, core_index=core_index)
        if target is _BAD:
            return []
        self.p.record("signal", where.site, sem=self.sem_path(sem, where), inc=inc, dev=target)
        return []

    def p_semaphore_wait(self, eqn, ins):
        where = self.where(eqn)
        sem, sem_t, value, decrement = jax.tree_util.tree_unflatten(eqn.params["args_tree"], ins)
        if not decrement:
            raise unsupported("semaphore_wait(decrement=False)", "waits that do not decrement", where)
        try:
            sem = transform(sem, sem_t, where)
        except _OutOfBounds as e:
            self._oob(e, where, None)
            return []
        value = _concrete_int(value, "the value of semaphore_wait", where)
        self.p.record("sem_wait", where.site, sem=self.sem_path(sem, where), value=value)
        return []

    def p_semaphore_read(self, eqn, ins):
        # The value depends on the schedule, decided after tracing: the read writes it into
        # a one-element scratch when it runs, and the kernel gets a load of that, a value
        # it can compute with and store (not a number to branch on).
        where = self.where(eqn, "semaphore_read")
        sem, sem_t = jax.tree_util.tree_unflatten(eqn.params["args_tree"], ins)
        try:
            sem = transform(sem, sem_t, where)
        except _OutOfBounds as e:
            return self._oob(e, where, eqn.outvars[0].aval)
        buf = self.plan.semaphore_value_buf(eqn, where)
        self.p.record("sem_read", where.site, sem=self.sem_path(sem, where), dst=[buf.pos, []])
        return self.load(RefV(buf, (0,)), eqn, where)  # its one element, a scalar

    def p_tpusim_trace_step(self, eqn, ins):
        self.p.mark(eqn.params["label"], self.site(eqn))
        return []

    def p_delay(self, eqn, ins):
        return []

    def p_debug_print(self, eqn, ins):
        """`pl.debug_print(fmt, *args)`: the text is kept with the plan and printed, with
        the device and grid point, every time the call runs."""
        where = self.where(eqn)
        p = eqn.params
        if any(isinstance(a, RefV) for a in ins):
            raise kernel_error("misuse", "`debug_print` of a ref: load it first", where)
        ins = [sym_value(a, "a value `debug_print` prints", where) if isinstance(a, Sym) else a for a in ins]
        with np.printoptions(**dict(p.get("np_printoptions") or ())):
            vals = [np.asarray(a) for a in ins]
            fmt = p["fmt"]
            if p.get("has_placeholders", "{" in fmt):
                text = fmt.format(*[v.item() if v.ndim == 0 else v for v in vals])
            else:
                text = " ".join([fmt, *(str(v) for v in vals)])
        self.p.prints.append(text)
        return []

    def p_has_memory_space(self, eqn, ins):
        ref = transform(ins[0], (), self.where(eqn))
        return np.bool_(ref.buf.kind == space_of(eqn.params["memory_space"]))

    def p_trace_value(self, eqn, ins):
        return []

    def p_prng_seed(self, eqn, ins):
        return []

    # -- DMAs

    def _dma_parts(self, eqn, ins, where):
        src, dst, dst_sem, src_sem, dev = _unflatten(eqn.params["tree"], ins)
        src = transform(src, (), where)
        dst = transform(dst, (), where)
        dst_sem = transform(dst_sem, (), where) if dst_sem is not None else None
        src_sem = transform(src_sem, (), where) if src_sem is not None else None
        return src, dst, dst_sem, src_sem, dev

    def p_dma_start(self, eqn, ins):
        where = self.where(eqn, "start")
        if eqn.params.get("add"):
            raise unsupported("async_copy(add=True)", "DMAs that add into their destination", where)
        try:
            src, dst, dst_sem, src_sem, dev = self._dma_parts(eqn, ins, where)
        except _OutOfBounds as e:
            self._oob(e, where, None)
            return []
        # A REGULAR semaphore gains one per completion (TPU v6+): the core's rule.
        self.plan.lower_dma(self.p, eqn, "start", src, dst, dst_sem, src_sem, dev, where, self)
        return []

    def p_dma_wait(self, eqn, ins):
        # A wait names a semaphore and a size (its view's bytes; as in JAX's interpret
        # mode the view need not be in bounds): the tree's first ref and `dst_sem`,
        # which for `wait_send` are the copy's destination and send semaphore.
        send = bool(eqn.params.get("is_wait_send"))
        where = self.where(eqn, "wait_send" if send else "wait")
        src, dst, dst_sem, src_sem, dev = _unflatten(eqn.params["tree"], ins)
        try:
            view = transform(src, (), where, check=False)
            sem = transform(dst_sem, (), where)
        except _OutOfBounds as e:
            self._oob(e, where, None)
            return []
        side = "send" if send else ("recv" if dev is not None else "local")
        if side == "recv":
            where.op = "wait_recv"
        nbytes = view.numel() * np.dtype(view.dtype).itemsize
        self.p.record("dma_wait", where.site, sem=self.sem_path(sem, where), bytes=int(nbytes), side=side)
        return []


_BAD = object()


_used = {}


def _used_vars(jaxpr):
    """The variables `jaxpr`'s equations or outputs read (made once per jaxpr)."""
    got = _used.get(id(jaxpr))
    if got is None or got[0] is not jaxpr:
        vs = {v for e in jaxpr.eqns for v in e.invars if not isinstance(v, jax_core.Literal)}
        vs.update(v for v in jaxpr.outvars if not isinstance(v, jax_core.Literal))
        if len(_used) > 4096:
            _used.clear()
        got = _used[id(jaxpr)] = (jaxpr, vs)
    return got[1]


#: Unsigned integers by width: an element's bits as one number.
_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _uniform(flat):
    """True when every element of 1-D `flat` has the same bits (NaNs and signed zeros
    included). Compared as one unsigned integer per element: as bytes (an n x itemsize
    comparison) a production block's `jnp.zeros` took 15 ms, most of a model-only plan."""
    if flat.size <= 1:
        return True
    if flat.strides[0] == 0:
        # One element broadcast (a kernel's `jnp.zeros` or `jnp.full` as the evaluator
        # makes it): uniform without being made whole (a 32 MiB accumulator's zeros
        # were a tenth of ring attention's first call in Python).
        return True
    a = np.ascontiguousarray(flat)
    bits = _BITS.get(a.dtype.itemsize)
    if bits is None:
        rows = a.view(np.uint8).reshape(a.size, -1)
        return bool((rows == rows[0]).all())
    v = a.view(bits)
    return bool((v == v[0]).all())


def _dt(dtype, where):
    d = dtype_name(dtype)
    if d is None:
        raise unsupported(f"dtype {np.dtype(dtype)}", "kernel compute runs f32, i32, f16, bf16, i8, u8 and bool", where)
    return d


_UNARY = {
    "neg",
    "abs",
    "sign",
    "floor",
    "ceil",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log1p",
    "sqrt",
    "rsqrt",
    "tanh",
    "logistic",
    "sin",
    "cos",
    "erf",
    "not",
}
_BINARY = {
    "add",
    "sub",
    "mul",
    "div",
    "rem",
    "pow",
    "max",
    "min",
    "and",
    "or",
    "xor",
    "shift_left",
    "shift_right_arithmetic",
    "shift_right_logical",
    "atan2",
}
_COMPARE = {"eq", "ne", "lt", "le", "gt", "ge"}
# The kinds whose operands are elementwise (a size-1 dimension broadcasts).
_ELEMENTWISE = {"binary", "compare", "select"}


def compute_kind(name, params, ins, aval, where):
    """(the core's kind as a record, the positions of its operands among `ins`, in the
    kind's order) for lax primitive `name`."""
    p = params
    every = list(range(len(ins)))
    if name in _UNARY:
        return {"k": "unary", "op": name}, every
    if name == "round":
        m = str(p.get("rounding_method", ""))
        return {"k": "unary", "op": "round_even" if "EVEN" in m.upper() or m == "1" else "round"}, every
    if name == "square":
        return {"k": "unary", "op": "integer_pow", "n": 2}, every
    if name == "integer_pow":
        return {"k": "unary", "op": "integer_pow", "n": int(p["y"])}, every
    if name in _BINARY:
        return {"k": "binary", "op": name}, every
    if name in _COMPARE:
        return {"k": "compare", "op": name}, every
    if name == "convert_element_type":
        return {"k": "convert"}, every
    if name in ("bitcast_convert_type", "bitcast"):
        src, dst = np.dtype(ins[0].dtype), np.dtype(aval.dtype)
        if src.itemsize != dst.itemsize:
            raise unsupported(name, f"from {src} to {dst}: bitcasts keep the element width here", where)
        if src.kind in "iub" and dst.kind in "iub":  # i8 <-> u8: the same bits, wrapped
            return {"k": "convert"}, every
        return {"k": "bitcast"}, every
    if name in ("broadcast_in_dim", "broadcast_to"):
        dims = p.get("broadcast_dimensions")
        if dims is None:  # state's broadcast_to: numpy's rule, trailing dimensions line up
            r = len(ins[0].shape)
            dims = range(len(aval.shape) - r, len(aval.shape))
        return {"k": "broadcast", "dims": list(dims)}, [0]
    if name in ("reshape", "squeeze", "expand_dims"):
        return {"k": "reshape"}, [0]
    if name == "transpose":
        return {"k": "transpose", "dims": list(p["permutation"])}, every
    if name == "slice":
        st = p.get("strides") or (1,) * len(p["start_indices"])
        return {"k": "slice", "start": list(p["start_indices"]), "strides": list(st)}, every
    if name == "dynamic_slice":
        x, *idx = ins
        sizes = p["slice_sizes"]
        start = [
            min(max(_concrete_int(i, "a dynamic_slice index", where), 0), x.shape[d] - sizes[d])
            for d, i in enumerate(idx)
        ]
        return {"k": "slice", "start": start, "strides": [1] * len(start)}, [0]
    if name == "dynamic_update_slice":
        x, upd, *idx = ins
        start = [
            min(max(_concrete_int(i, "a dynamic_update_slice index", where), 0), x.shape[d] - upd.shape[d])
            for d, i in enumerate(idx)
        ]
        return {"k": "update_slice", "start": start}, [0, 1]
    if name == "concatenate":
        return {"k": "concat", "dim": int(p["dimension"])}, every
    if name in ("reduce_sum", "reduce_max", "reduce_min"):
        return {"k": "reduce", "op": name[7:], "dims": sorted(int(a) for a in p["axes"])}, every
    if name in ("reduce_and", "reduce_or"):  # of bools: the least and the largest
        if np.dtype(ins[0].dtype) != np.bool_:
            raise unsupported(name, "of integers (bitwise reductions)", where)
        op = "min" if name == "reduce_and" else "max"
        return {"k": "reduce", "op": op, "dims": sorted(int(a) for a in p["axes"])}, every
    if name in ("argmax", "argmin"):
        return {"k": "arg_reduce", "op": name[3:], "dim": int(p["axes"][0])}, every
    if name == "dot_general":
        (lc, rc), (lb, rb) = p["dimension_numbers"]
        return {
            "k": "dot",
            "lhs_contract": list(lc),
            "rhs_contract": list(rc),
            "lhs_batch": list(lb),
            "rhs_batch": list(rb),
        }, every
    if name == "iota":
        return {"k": "iota", "dim": int(p["dimension"])}, []
    raise unsupported(name, "tpusim has no compute op for this primitive on values loaded from refs", where)


def _unflatten(tree, flat):
    if hasattr(tree, "unflatten"):
        return tree.unflatten(flat)
    return jax.tree_util.tree_unflatten(tree, flat)
