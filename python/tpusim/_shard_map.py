"""``jax.shard_map`` on simulated devices: a global numpy array is split over the mesh
(per ``in_specs``), the mapped function runs once on per-device values
(:class:`PerDevice`), a ``pallas_call`` inside it runs its kernel on every device, and
the per-device results are joined (per ``out_specs``).

Besides calling it, a mapped function can be checked (``.check``), traced into a step
table (``.trace``), run on the cost model's clock (``.model``) and timed (``.bench``);
each of these records the pallas_call the function makes (exactly one)."""

import contextlib

import numpy as np

from . import _native, config
from ._sites import unsupported
from .results import ModelRun, Report, Table


class PartitionSpec(tuple):
    """``jax.sharding.PartitionSpec(None, "x")``: per dimension, the mesh axis (or axes)
    it is split over, or None."""

    def __new__(cls, *parts):
        return super().__new__(cls, parts)

    def __repr__(self):
        return "PartitionSpec" + super().__repr__()


class NamedSharding:
    """``jax.sharding.NamedSharding(mesh, spec)``."""

    def __init__(self, mesh, spec):
        self.mesh = mesh
        self.spec = spec


class PerDevice:
    """One value per device inside a mapped function (what ``x`` is in
    ``shard_map(lambda x: …)``). numpy-like: ``shape``, ``dtype``, ``reshape``,
    ``astype``, indexing and arithmetic apply on every device."""

    __slots__ = ("arrays",)

    def __init__(self, arrays):
        self.arrays = list(arrays)

    shape = property(lambda self: self.arrays[0].shape)
    dtype = property(lambda self: self.arrays[0].dtype)
    ndim = property(lambda self: self.arrays[0].ndim)

    def _map(self, f, other=None):
        if isinstance(other, PerDevice):
            return PerDevice(f(a, b) for a, b in zip(self.arrays, other.arrays))
        return PerDevice(f(a, other) for a in self.arrays)

    def reshape(self, *shape):
        return self._map(lambda a, _: a.reshape(*shape))

    def astype(self, dtype):
        return self._map(lambda a, _: a.astype(dtype))

    def __getitem__(self, key):
        return self._map(lambda a, _: a[key])

    def __add__(self, o):
        return self._map(np.add, o)

    __radd__ = __add__

    def __sub__(self, o):
        return self._map(np.subtract, o)

    def __mul__(self, o):
        return self._map(np.multiply, o)

    __rmul__ = __mul__

    def __truediv__(self, o):
        return self._map(np.true_divide, o)

    def __neg__(self):
        return self._map(lambda a, _: -a)

    def __repr__(self):
        return f"PerDevice({len(self.arrays)} x {self.shape} {self.dtype})"

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise unsupported(
            f"per-device value.{name}",
            "inside tpusim's shard_map, values support shape, dtype, reshape, astype, "
            "indexing and + - * /",
        )


# ------------------------------------------------------------------ modes

#: What a pallas_call does: None runs it; a list records (call, inputs) and returns zeros.
_capture = None


@contextlib.contextmanager
def capturing():
    global _capture
    prev, _capture = _capture, []
    try:
        yield _capture
    finally:
        _capture = prev


#: The mesh of the shard_map in progress.
_mesh = None


def _as_native(x):
    """A C-contiguous float32/int32 array (float64/int64 narrowed, as JAX does without x64)."""
    a = np.asarray(x)
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    elif a.dtype == np.int64:
        a = a.astype(np.int32)
    # Not ascontiguousarray: it makes a 0-d array 1-d.
    return np.require(a, requirements="C")


def call_kernel(pcall, args):
    """Runs (or records) `pcall` on per-device arguments."""
    if _mesh is None:
        raise unsupported(
            "calling a pallas_call outside shard_map",
            "tpusim runs a kernel on every device of a mesh: call it inside "
            "jax.shard_map(f, mesh=..., in_specs=..., out_specs=...)",
            pcall.site,
        )
    per = []
    for a in args:
        if not isinstance(a, PerDevice):
            raise unsupported(
                f"pallas_call argument {type(a).__name__}",
                "pass the per-device values shard_map gives the function",
                pcall.site,
            )
        per.append(PerDevice(_as_native(x) for x in a.arrays))
    first = [p.arrays[0] for p in per]
    for p in per:
        if any(x.shape != p.arrays[0].shape or x.dtype != p.arrays[0].dtype for x in p.arrays):
            raise _native.BadInput("bad input: per-device values differ in shape or dtype")
    call = pcall.record(_mesh, first)
    inputs = [[p.arrays[d] for p in per] for d in range(_mesh.size)]
    outs, seq = (list(pcall.out_shape), True) if isinstance(pcall.out_shape, (list, tuple)) else ([pcall.out_shape], False)
    if _capture is not None:
        _capture.append((call, inputs, first))
        results = [[np.zeros(o.shape, o.dtype) for o in outs] for _ in range(_mesh.size)]
    else:
        results = call.run(inputs, backend=config.backend, schedule=config.schedule)
    values = [PerDevice(results[d][i] for d in range(_mesh.size)) for i in range(len(outs))]
    return tuple(values) if seq else values[0]


# ------------------------------------------------------------------ sharding


def _axes_of(entry):
    if entry is None:
        return ()
    if isinstance(entry, (tuple, list)):
        return tuple(entry)
    return (entry,)


def _blocks(mesh, spec, ndim, device, what):
    """Per dimension of an array: (block index, number of blocks) on `device`."""
    names = [a for a, _ in mesh.axes]
    sizes = dict(mesh.axes)
    coords = mesh.coords(device)
    spec = tuple(spec) if spec is not None else ()
    if len(spec) > ndim:
        raise _native.BadInput(
            f"bad input: {what} {spec!r} has {len(spec)} entries for an array of rank {ndim}"
        )
    out = []
    for d in range(ndim):
        axes = _axes_of(spec[d]) if d < len(spec) else ()
        idx, n = 0, 1
        for a in axes:
            if a not in sizes:
                raise _native.BadInput(
                    f"bad input: {what} {spec!r} names axis `{a}`, not in the mesh {mesh.axes}"
                )
            idx = idx * sizes[a] + coords[names.index(a)]
            n *= sizes[a]
        out.append((idx, n))
    return out


def shard(x, mesh, spec):
    """Splits global array `x` over `mesh` per `spec`: one array per device."""
    x = np.asarray(x)
    shards = []
    for dev in range(mesh.size):
        sl = []
        for d, (i, n) in enumerate(_blocks(mesh, spec, x.ndim, dev, "in_specs")):
            if x.shape[d] % n:
                raise _native.BadInput(
                    f"bad input: dimension {d} of shape {x.shape} has {x.shape[d]} entries, "
                    f"not divisible by the {n} devices of {spec!r}"
                )
            b = x.shape[d] // n
            sl.append(slice(i * b, (i + 1) * b))
        shards.append(x[tuple(sl)])
    return PerDevice(shards)


def unshard(v, mesh, spec):
    """Joins per-device arrays into the global array per `spec`."""
    if not isinstance(v, PerDevice):
        v = PerDevice([np.asarray(v)] * mesh.size)
    first = v.arrays[0]
    blocks = [_blocks(mesh, spec, first.ndim, dev, "out_specs") for dev in range(mesh.size)]
    shape = tuple(s * n for s, (_, n) in zip(first.shape, blocks[0]))
    out = np.zeros(shape, first.dtype)
    for dev, a in enumerate(v.arrays):
        sl = tuple(slice(i * s, (i + 1) * s) for s, (i, _) in zip(first.shape, blocks[dev]))
        out[sl] = a
    return out


def _tree(specs, values, f, what):
    """Applies f(value, spec) over matching tuples/lists; one spec applies to all."""
    if isinstance(values, (tuple, list)) and not isinstance(values, PerDevice):
        if isinstance(specs, (tuple, list)) and not isinstance(specs, PartitionSpec):
            if len(specs) != len(values):
                raise _native.BadInput(
                    f"bad input: {what} has {len(specs)} entries for {len(values)} values"
                )
            return type(values)(_tree(s, v, f, what) for s, v in zip(specs, values))
        return type(values)(_tree(specs, v, f, what) for v in values)
    return f(values, specs)


class ShardMapped:
    """``jax.shard_map(f, mesh=…, in_specs=…, out_specs=…)``: call it on global numpy
    arrays; ``.check``, ``.trace``, ``.model`` and ``.bench`` do the same with the
    pallas_call inside `f`."""

    def __init__(self, f, mesh, in_specs, out_specs):
        self.f = f
        self.mesh = getattr(mesh, "native", mesh)
        self.in_specs = in_specs
        self.out_specs = out_specs

    def _apply(self, args):
        global _mesh
        per = _tree(self.in_specs, tuple(args), lambda x, s: shard(x, self.mesh, s), "in_specs")
        prev, _mesh = _mesh, self.mesh
        try:
            out = self.f(*per)
        finally:
            _mesh = prev
        return _tree(self.out_specs, out, lambda v, s: unshard(v, self.mesh, s), "out_specs")

    def __call__(self, *args):
        return self._apply(args)

    def kernel(self, *args):
        """(the native KernelCall, per-device inputs, one device's inputs) of the one
        pallas_call `f` makes on `args`."""
        with capturing() as got:
            self._apply(args)
        if len(got) != 1:
            raise _native.BadInput(
                f"bad input: the mapped function made {len(got)} pallas_calls; check, trace, "
                "model and bench take a function that makes exactly one"
            )
        return got[0]

    def kernels(self, *args):
        """The native KernelCalls of every pallas_call `f` makes on `args`, in order."""
        with capturing() as got:
            self._apply(args)
        return [g[0] for g in got]

    def check(self, *args, schedules=200, seed=0, replay=None, repeat=1):
        """The verifier: every deterministic schedule, then seeded random ones up to
        `schedules` (or exactly the one `replay` names). When `f` makes several
        pallas_calls they are checked as one sequence, each device entering the next
        when it leaves one; `repeat` runs the whole of it that many times back to back.
        Returns a :class:`Report`."""
        calls = self.kernels(*args)
        if not calls:
            raise _native.BadInput(
                "bad input: the mapped function made 0 pallas_calls; check takes a function "
                "that makes at least one"
            )
        r = _native.check_sequence(calls, schedules, seed, replay, repeat)
        title = " then ".join(c.name for c in calls)
        again = f" --repeat {repeat}" if repeat != 1 else ""
        return Report.from_dict(r, f"{title}{again} P={self.mesh.size}")

    def trace(self, *args, like=None):
        """The step table: every device's buffers after every grid point (lockstep
        schedule). `like="psum"` uses that shipped collective's columns and notation."""
        call, _, first = self.kernel(*args)
        shard0 = list(first[0].shape) if first else []
        return Table.from_dict(call.trace(shard0, like))

    def model(self, *args, preset="v5e", traffic=None, timeline=None, topology=None, **overrides):
        """The kernel on the cost model's clock (`preset` with overrides such as
        ``link_gbps=…``; a multi-axis mesh on its own torus unless `topology` says
        otherwise). `traffic` (``all_reduce``, ``all_gather``, ``reduce_scatter``,
        ``send_recv``) adds nccl-tests' bandwidths for the first input's size; `timeline`
        writes the Chrome trace."""
        call, _, _ = self.kernel(*args)
        r = call.model(preset, list(overrides.items()) or None, traffic, timeline is not None, topology)
        return ModelRun.from_dict(r, timeline)

    def bench(self, *args, iters=20, warmup=5, backend=None, schedule="eager"):
        """Times the kernel's schedule on the executor (built and prepared once)."""
        call, inputs, _ = self.kernel(*args)
        return call.bench(inputs, backend or config.backend, iters, warmup, schedule)


def shard_map(f=None, *, mesh, in_specs, out_specs, check_vma=True, check_rep=None, axis_names=None):
    """``jax.shard_map``; usable as a decorator factory too."""
    if f is None:
        return lambda g: ShardMapped(g, mesh, in_specs, out_specs)
    return ShardMapped(f, mesh, in_specs, out_specs)


def current_mesh(construct):
    if _mesh is None:
        raise unsupported(construct, "only inside shard_map")
    return _mesh
