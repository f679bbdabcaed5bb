"""The stand-ins a Pallas kernel body sees, and what its calls record.

A kernel is called once per device and grid point with concrete scalars
(``pl.program_id``, ``lax.axis_index``: numpy int32) and symbolic refs and semaphores.
Every call that does something (a DMA descriptor, ``start``/``wait``, a signal, a ref
store) is recorded with the kernel's file and line; the Rust core replays the
recording on its kernel context (``src/replay.rs``), so its checks, scheduler,
verifier, step tables, cost model and executors see an ordinary kernel.
"""

import numpy as np

from . import _sites
from ._sites import caller, kernel_error, unsupported


class Eval:
    """One kernel invocation: a device at a grid point, and the calls it recorded."""

    def __init__(self, mesh_axes, device, coords, grid, point):
        self.mesh_axes = mesh_axes  # [(name, size)]
        self.device = device
        self.coords = coords
        self.grid = grid
        self.point = point
        self.ops = []
        self.stack = [self.ops]
        self.ndesc = 0
        self.nbarrier = 0
        self.depth = 0

    def record(self, op, **fields):
        fields["op"] = op
        fields["at"] = list(caller())
        self.stack[-1].append(fields)
        return fields


def ctx(construct):
    """The invocation in progress; calling `construct` outside one is an error."""
    c = _sites.current
    if c is None:
        raise unsupported(
            construct, "it is only meaningful inside a kernel that tpusim is running"
        )
    return c


# ---------------------------------------------------------------- scalars


def concrete_int(v, construct):
    """A Python int from a kernel scalar (a Python or numpy integer)."""
    if isinstance(v, Value):
        raise unsupported(
            construct,
            "a value loaded from a ref cannot decide an index, a device or a count "
            "(control flow and addressing must depend only on program_id, axis_index "
            "and constants)",
        )
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, np.ndarray) and v.shape == () and np.issubdtype(v.dtype, np.integer):
        return int(v)
    raise unsupported(construct, f"expected an integer scalar, got {type(v).__name__}")


def concrete_bool(v, construct):
    """A Python bool from a kernel condition."""
    if isinstance(v, Value):
        raise unsupported(
            construct,
            "a condition computed from loaded data (data-dependent control flow); "
            "conditions must depend only on program_id, axis_index and constants",
        )
    if isinstance(v, np.ndarray):
        if v.shape != ():
            raise unsupported(construct, f"a condition of shape {v.shape}")
        v = v[()]
    if isinstance(v, (bool, np.bool_, int, np.integer)):
        return bool(v)
    raise unsupported(construct, f"a condition of type {type(v).__name__}")


# ---------------------------------------------------------------- dtypes


def dtype_name(dt, what):
    """`f32` / `i32` / `f16` / `bf16` for float32, int32, float16 and bfloat16 (ml_dtypes',
    which is jnp.bfloat16); anything else is an error naming `what`."""
    try:
        d = np.dtype(dt)
    except TypeError:
        d = None
    if d == np.float32:
        return "f32"
    if d == np.int32:
        return "i32"
    if d == np.float16:
        return "f16"
    if d is not None and d.name == "bfloat16":
        return "bf16"
    raise _native_bad_input(
        f"{what} has dtype {dt}; tpusim supports float32, int32, float16 and bfloat16"
    )


def _native_bad_input(msg):
    from . import _native

    return _native.BadInput(f"bad input: {msg}")


# ---------------------------------------------------------------- index keys


class Slice:
    """``pl.ds(start, size)``: rows ``start .. start + size`` of a dimension."""

    __slots__ = ("start", "size")

    def __init__(self, start, size):
        self.start = start
        self.size = size

    def __repr__(self):
        return f"pl.ds({self.start}, {self.size})"


def ds(start, size=None):
    """``pl.ds(start, size)`` (or ``pl.ds(size)`` from 0)."""
    if size is None:
        start, size = 0, start
    return Slice(start, size)


def _view(ref, key, construct):
    """The contiguous view `ref[key]` / `ref.at[key]`: integers on leading dimensions,
    then at most one slice (``pl.ds`` or ``a:b``), then whole dimensions."""
    if not isinstance(key, tuple):
        key = (key,)
    nell = sum(1 for k in key if k is Ellipsis)
    if nell > 1:
        raise unsupported(construct, "more than one `...` in an index")
    if nell:
        i = next(i for i, k in enumerate(key) if k is Ellipsis)
        fill = max(len(ref.shape) - (len(key) - 1), 0)
        key = key[:i] + (slice(None),) * fill + key[i + 1 :]
    if len(key) > len(ref.shape):
        raise kernel_error(
            "out of bounds",
            f"`{ref.name}` has {len(ref.shape)} dimensions but is indexed with {len(key)}",
            construct,
        )
    steps = list(ref.steps)
    shape = list(ref.shape)
    offset = ref.offset
    dim = 0  # position in `shape` of the dimension `k` indexes
    narrowed = False  # a slice was taken: only whole dimensions may follow
    for k in key:
        whole = isinstance(k, slice) and k == slice(None)
        if whole:
            narrowed = True
            dim += 1
            continue
        if isinstance(k, (Slice, slice)):
            if isinstance(k, slice):
                if k.step not in (None, 1):
                    raise unsupported(construct, f"a strided slice {k}")
                start = 0 if k.start is None else concrete_int(k.start, construct)
                stop = shape[dim] if k.stop is None else concrete_int(k.stop, construct)
                if start < 0 or stop < 0:
                    raise unsupported(construct, f"a slice with negative bounds {k}")
                size = stop - start
            else:
                start = concrete_int(k.start, construct)
                size = concrete_int(k.size, construct)
            if narrowed or dim != 0:
                if start == 0 and size == shape[dim]:
                    narrowed = True
                    dim += 1
                    continue
                raise unsupported(
                    construct,
                    "a slice after another slice selects a non-contiguous region; tpusim "
                    "refs are contiguous views (integers on leading dimensions, then one "
                    "slice, then whole dimensions)",
                )
            row = int(np.prod(shape[1:], dtype=np.int64))
            steps.append((1, start, size))
            offset += start * row
            shape[0] = size
            narrowed = True
            dim += 1
            continue
        if isinstance(k, Value) or isinstance(k, (int, np.integer)) or (
            isinstance(k, np.ndarray) and k.shape == ()
        ):
            i = concrete_int(k, construct)
            if narrowed:
                raise unsupported(
                    construct,
                    "an integer index after a slice selects a non-contiguous region; "
                    "index leading dimensions first",
                )
            row = int(np.prod(shape[1:], dtype=np.int64))
            steps.append((0, i, 0))
            offset += i * row
            if shape:
                shape.pop(0)
            continue
        raise unsupported(construct, f"an index of type {type(k).__name__}")
    return Ref(ref.arg, ref.name, tuple(shape), ref.dtype, ref.space, tuple(steps), offset)


# ---------------------------------------------------------------- refs and values


class _At:
    __slots__ = ("_owner",)

    def __init__(self, owner):
        self._owner = owner

    def __getitem__(self, key):
        return self._owner._at(key)


class Ref:
    """A kernel's ref: a contiguous view of one of its operands or VMEM scratch."""

    __slots__ = ("arg", "name", "shape", "dtype", "space", "steps", "offset")

    def __init__(self, arg, name, shape, dtype, space, steps=(), offset=0):
        self.arg = arg
        self.name = name
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.space = space
        self.steps = steps
        self.offset = offset

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def at(self):
        """``ref.at[i]``, ``ref.at[i, pl.ds(a, n)]``: a view."""
        return _At(self)

    def _at(self, key):
        return _view(self, key, f"{self.name}.at[...]")

    def __getitem__(self, key):
        return Load(_view(self, key, f"{self.name}[...]"))

    def __setitem__(self, key, value):
        store(_view(self, key, f"{self.name}[...] ="), value)

    def path(self):
        return [self.arg, [list(s) for s in self.steps]]

    def same_view(self, other):
        return (self.arg, self.offset, self.shape) == (other.arg, other.offset, other.shape)

    def __repr__(self):
        return f"Ref({self.name}, shape={self.shape}, dtype={self.dtype}, {self.space})"

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise unsupported(f"ref.{name}")

    def __bool__(self):
        raise unsupported("bool(ref)", "a ref is not a condition")


class Value:
    """A value in a kernel's registers: only ever stored into a ref."""

    __slots__ = ()

    def _no(self, what):
        raise unsupported(
            what,
            "kernel values may only be stored: `a[...] = b[...]`, `a[...] = jnp.zeros_like(a)`, "
            "`a[...] += b[...]`, `a[...] = jnp.maximum(a[...], b[...])` (or minimum)",
        )

    def __add__(self, other):
        if isinstance(self, Load) and isinstance(other, Load):
            return Combine("sum", self, other)
        self._no("+ on kernel values (other than ref[...] + ref[...])")

    def __radd__(self, other):
        if isinstance(self, Load) and isinstance(other, Load):
            return Combine("sum", other, self)
        self._no("+ on kernel values (other than ref[...] + ref[...])")

    def __bool__(self):
        self._no("a loaded value as a condition")

    def __index__(self):
        self._no("a loaded value as an index")

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        self._no(f"value.{name}")


def _refuse(symbol):
    def op(self, *args):
        self._no(symbol)

    return op


for _name, _symbol in [
    ("__sub__", "-"), ("__rsub__", "-"), ("__mul__", "*"), ("__rmul__", "*"),
    ("__truediv__", "/"), ("__rtruediv__", "/"), ("__floordiv__", "//"), ("__mod__", "%"),
    ("__pow__", "**"), ("__neg__", "unary -"), ("__matmul__", "@"), ("__lt__", "<"),
    ("__le__", "<="), ("__gt__", ">"), ("__ge__", ">="), ("__and__", "&"), ("__or__", "|"),
    ("__invert__", "~"),
]:
    setattr(Value, _name, _refuse(_symbol))


class Load(Value):
    """``ref[...]``: the contents of a view."""

    __slots__ = ("ref",)

    def __init__(self, ref):
        self.ref = ref

    @property
    def shape(self):
        return self.ref.shape

    @property
    def dtype(self):
        return self.ref.dtype


class Full(Value):
    """``jnp.zeros_like(x)``, ``jnp.full(shape, v)``: every element `value`."""

    __slots__ = ("shape", "dtype", "value")

    def __init__(self, shape, dtype, value):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.value = value


class Combine(Value):
    """``a + b``, ``jnp.maximum(a, b)``, ``jnp.minimum(a, b)`` of two loads."""

    __slots__ = ("reduce", "a", "b")

    def __init__(self, reduce, a, b):
        self.reduce = reduce
        self.a = a
        self.b = b


def store(dst, value):
    """``dst[...] = value``: a copy, a fill or an accumulate."""
    c = ctx(f"{dst.name}[...] =")
    if isinstance(value, Load):
        c.record("copy", dst=dst.path(), src=value.ref.path())
        return
    if isinstance(value, (bool, int, float, np.number, np.bool_)) or isinstance(value, Full):
        shape = value.shape if isinstance(value, Full) else ()
        v = value.value if isinstance(value, Full) else value
        if shape not in ((), dst.shape):
            raise kernel_error(
                "shape mismatch",
                f"`{dst.name}` is {dst.shape} but the value stored into it is {shape}",
                "fill",
            )
        c.record("fill", dst=dst.path(), value=float(v))
        return
    if isinstance(value, Combine):
        if isinstance(value.a, Load) and value.a.ref.same_view(dst):
            src = value.b
        elif isinstance(value.b, Load) and value.b.ref.same_view(dst):
            src = value.a
        else:
            raise unsupported(
                f"{dst.name}[...] = x {'+' if value.reduce == 'sum' else value.reduce} y",
                "an accumulate must read the ref it writes: `dst[...] += src[...]` or "
                "`dst[...] = jnp.maximum(dst[...], src[...])`",
            )
        c.record("accumulate", dst=dst.path(), src=src.ref.path(), reduce=value.reduce)
        return
    if isinstance(value, Ref):
        raise unsupported(f"{dst.name}[...] = ref", "store `ref[...]`, not the ref itself")
    raise unsupported(
        f"{dst.name}[...] = {type(value).__name__}",
        "stores take `ref[...]`, `jnp.zeros_like/ones_like/full_like(...)`, a scalar, "
        "`a[...] + b[...]`, `jnp.maximum` or `jnp.minimum` of two loads",
    )


# ---------------------------------------------------------------- semaphores


class Semaphore:
    """A semaphore, an array of them, the barrier semaphore or a scoped one."""

    __slots__ = ("src", "name", "kind", "count", "index")

    def __init__(self, src, name, kind, count=None, index=None):
        self.src = src  # {"Arg": i} | {"Barrier": n} | {"Scoped": depth}
        self.name = name
        self.kind = kind
        self.count = count  # None: one semaphore; n: an array
        self.index = index

    @property
    def at(self):
        """``sems.at[i]``: one semaphore of an array."""
        return _At(self)

    def _at(self, key):
        construct = f"{self.name}.at[...]"
        if isinstance(key, tuple):
            if len(key) != 1:
                raise unsupported(construct, "semaphore arrays have one dimension")
            key = key[0]
        if self.index is not None:
            raise kernel_error(
                "out of bounds",
                f"`{self.name}.at(..)` on a semaphore that is already one element",
                construct,
            )
        return Semaphore(self.src, self.name, self.kind, None, concrete_int(key, construct))

    def path(self):
        return [self.src, self.index]

    def __repr__(self):
        n = "" if self.count is None else f"[{self.count}]"
        i = "" if self.index is None else f".at[{self.index}]"
        return f"Semaphore({self.name}{n}{i}, {self.kind})"

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise unsupported(f"semaphore.{name}")


def _sem(s, construct, what):
    if not isinstance(s, Semaphore):
        raise kernel_error(
            "misuse", f"`{what}` of `{construct}` must be a semaphore, got {s!r}", construct
        )
    return s.path()


def _ref(r, construct, what):
    if not isinstance(r, Ref):
        raise kernel_error(
            "misuse", f"`{what}` of `{construct}` must be a ref, got {type(r).__name__}", construct
        )
    return r.path()


# ---------------------------------------------------------------- device ids


MESH = "mesh"
LOGICAL = "logical"


def device_id(dev, id_type, construct):
    """The recorded form of ``device_id=…, device_id_type=…``."""
    c = ctx(construct)
    kind = getattr(id_type, "value", id_type)
    if kind == LOGICAL:
        if isinstance(dev, (tuple, list)):
            if len(dev) != 1:
                raise unsupported(construct, "a LOGICAL device id is one integer")
            dev = dev[0]
        return {"Logical": concrete_int(dev, construct)}
    if kind != MESH:
        raise unsupported(construct, f"device_id_type={id_type!r}")
    if isinstance(dev, dict):
        names = [a for a, _ in c.mesh_axes]
        coords = list(c.coords)
        for name, v in dev.items():
            if name not in names:
                raise kernel_error(
                    "misuse",
                    f"the mesh has no axis `{name}` (axes: {c.mesh_axes})",
                    construct,
                )
            coords[names.index(name)] = concrete_int(v, construct)
        return {"Mesh": coords}
    if not isinstance(dev, (tuple, list)):
        dev = (dev,)
    return {"Mesh": [concrete_int(v, construct) for v in dev]}


# ---------------------------------------------------------------- DMA descriptors


class AsyncCopy:
    """The descriptor ``make_async_copy`` / ``make_async_remote_copy`` return."""

    __slots__ = ("id", "remote")

    def __init__(self, id, remote):
        self.id = id
        self.remote = remote

    def _rec(self, op):
        ctx(op).record(op, id=self.id)

    def start(self):
        """Starts the DMA."""
        self._rec("start")

    def wait(self):
        """Waits for the DMA (a remote one: ``wait_send`` then ``wait_recv``)."""
        self._rec("wait")

    def _remote(self, op):
        if not self.remote:
            raise unsupported(op, "a local copy has one completion: use `wait()`")
        self._rec(op)

    def wait_send(self):
        """Waits until the source has been read (remote copies)."""
        self._remote("wait_send")

    def wait_recv(self):
        """Waits until the destination has been written (remote copies)."""
        self._remote("wait_recv")

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        raise unsupported(f"descriptor.{name}")


def make_async_copy(src_ref, dst_ref, sem):
    """``pltpu.make_async_copy(src_ref, dst_ref, sem)``."""
    op = "make_async_copy"
    c = ctx(op)
    d = AsyncCopy(c.ndesc, False)
    c.ndesc += 1
    c.record(
        "local_copy",
        id=d.id,
        src=_ref(src_ref, op, "src_ref"),
        dst=_ref(dst_ref, op, "dst_ref"),
        sem=_sem(sem, op, "sem"),
    )
    return d


def make_async_remote_copy(src_ref, dst_ref, send_sem, recv_sem, device_id, device_id_type=MESH):
    """``pltpu.make_async_remote_copy(src_ref, dst_ref, send_sem, recv_sem, device_id, …)``."""
    op = "make_async_remote_copy"
    c = ctx(op)
    dev = _device(device_id, device_id_type, op)
    d = AsyncCopy(c.ndesc, True)
    c.ndesc += 1
    c.record(
        "remote_copy",
        id=d.id,
        src=_ref(src_ref, op, "src_ref"),
        dst=_ref(dst_ref, op, "dst_ref"),
        send_sem=_sem(send_sem, op, "send_sem"),
        recv_sem=_sem(recv_sem, op, "recv_sem"),
        dev=dev,
    )
    return d


_device = device_id


def semaphore_signal(sem, inc=1, *, device_id=None, device_id_type=MESH, core_index=None):
    """``pl.semaphore_signal(sem, inc, device_id=…, device_id_type=…)``."""
    op = "semaphore_signal"
    c = ctx(op)
    if core_index is not None:
        raise unsupported(f"{op}(core_index=...)", "tpusim simulates one core per device")
    dev = None if device_id is None else _device(device_id, device_id_type, op)
    c.record("signal", sem=_sem(sem, op, "sem"), inc=concrete_int(inc, op), dev=dev)


def semaphore_wait(sem, value=1):
    """``pl.semaphore_wait(sem, value)``."""
    op = "semaphore_wait"
    c = ctx(op)
    c.record("sem_wait", sem=_sem(sem, op, "sem"), value=concrete_int(value, op))


def get_barrier_semaphore():
    """``pltpu.get_barrier_semaphore()`` (needs ``CompilerParams(collective_id=…)``)."""
    c = ctx("get_barrier_semaphore")
    c.record("barrier")
    s = Semaphore({"Barrier": c.nbarrier}, "barrier_semaphore", "barrier")
    c.nbarrier += 1
    return s


# ---------------------------------------------------------------- control


def _grid_axis(axis, op):
    """The invocation and a checked grid axis for `program_id` / `num_programs`."""
    c = ctx(op)
    axis = concrete_int(axis, op)
    if not 0 <= axis < len(c.grid):
        raise kernel_error(
            "out of bounds", f"grid axis {axis} does not exist (the grid is {list(c.grid)})", op
        )
    return c, axis


def program_id(axis):
    """``pl.program_id(axis)``: this grid point's index on `axis` (int32)."""
    c, axis = _grid_axis(axis, "program_id")
    return np.int32(c.point[axis])


def num_programs(axis):
    """``pl.num_programs(axis)``: the grid's size on `axis` (int32)."""
    c, axis = _grid_axis(axis, "num_programs")
    return np.int32(c.grid[axis])


def axis_index(axis_name):
    """``lax.axis_index(name)``: this device's coordinate on mesh axis `name` (int32);
    a tuple of names gives the row-major index over those axes."""
    c = ctx("axis_index")
    names = [a for a, _ in c.mesh_axes]
    sizes = dict(c.mesh_axes)
    wanted = axis_name if isinstance(axis_name, (tuple, list)) else (axis_name,)
    idx = 0
    for n in wanted:
        if n not in sizes:
            axes = "[" + ", ".join(f'("{a}", {s})' for a, s in c.mesh_axes) + "]"
            raise kernel_error(
                "misuse", f"the mesh has no axis `{n}` (axes: {axes})", "axis_index"
            )
        idx = idx * sizes[n] + c.coords[names.index(n)]
    return np.int32(idx)


def when(condition):
    """``@pl.when(cond)``: runs the decorated function now when `cond` holds."""
    cond = concrete_bool(condition, "pl.when")

    def decorate(f):
        if cond:
            f()

    return decorate


def run_scoped(f, *types, **named_types):
    """``pl.run_scoped(f, pltpu.SemaphoreType.REGULAR, …)``: calls `f` with scoped
    REGULAR semaphores (one scope level each)."""
    c = ctx("run_scoped")
    kinds = list(types) + list(named_types.values())
    for t in kinds:
        if getattr(t, "scoped_kind", None) != "regular":
            raise unsupported(
                f"pl.run_scoped({t!r})",
                "tpusim scopes REGULAR semaphores only (VMEM and DMA scratch belong in "
                "scratch_shapes)",
            )
    sems = []
    for _ in kinds:
        body = []
        c.record("scoped", body=body)
        c.stack.append(body)
        sems.append(Semaphore({"Scoped": c.depth}, f"run_scoped[{c.depth}]", "regular"))
        c.depth += 1
    try:
        pos = sems[: len(types)]
        named = dict(zip(named_types.keys(), sems[len(types) :]))
        return f(*pos, **named)
    finally:
        for _ in kinds:
            c.stack.pop()
            c.depth -= 1
