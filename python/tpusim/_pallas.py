"""``pl.pallas_call`` and its specs: what a kernel's operands, scratch and grid are,
and how a call records the kernel on every device and grid point."""

import enum
import inspect
import json
import time

import numpy as np

from . import _kernel, _native, _sites
from ._sites import caller, unsupported


class MemorySpace:
    """A memory space: ``pl.ANY`` (HBM), ``pltpu.VMEM`` (also a scratch constructor:
    ``pltpu.VMEM((8, 128), jnp.float32)``), ``pltpu.SMEM`` (not supported)."""

    def __init__(self, name, kind):
        self.name = name
        self.kind = kind  # "any" | "vmem" | None (unsupported)

    def __call__(self, shape, dtype):
        return MemoryRef(tuple(shape), dtype, self, caller())

    def __repr__(self):
        return self.name


ANY = MemorySpace("ANY", "any")
HBM = MemorySpace("HBM", "any")
VMEM = MemorySpace("VMEM", "vmem")
SMEM = MemorySpace("SMEM", None)
SEMAPHORE = MemorySpace("SEMAPHORE", None)


class MemoryRef:
    """A scratch buffer: ``pltpu.VMEM(shape, dtype)``."""

    def __init__(self, shape, dtype, space, site):
        self.shape = shape
        self.dtype = dtype
        self.memory_space = space
        self.site = site

    def __repr__(self):
        return f"{self.memory_space!r}({self.shape}, {np.dtype(self.dtype)})"


class SemaphoreKind:
    """``pltpu.SemaphoreType.DMA`` / ``REGULAR``; called with a shape, an array of them."""

    def __init__(self, name, kind):
        self.name = name
        self.scoped_kind = kind

    def __call__(self, shape):
        return SemaphoreArray(self, tuple(shape) if isinstance(shape, (tuple, list)) else (shape,), caller())

    def __repr__(self):
        return f"SemaphoreType.{self.name}"


class SemaphoreArray:
    """``pltpu.SemaphoreType.DMA((n,))``."""

    def __init__(self, kind, shape, site):
        self.kind = kind
        self.shape = shape
        self.site = site

    def __repr__(self):
        return f"{self.kind!r}({self.shape})"


class SemaphoreType:
    """``pltpu.SemaphoreType``."""

    DMA = SemaphoreKind("DMA", "dma")
    REGULAR = SemaphoreKind("REGULAR", "regular")
    BARRIER = SemaphoreKind("BARRIER", "barrier")


class DeviceIdType(enum.Enum):
    """``pl.DeviceIdType``: MESH coordinates or a LOGICAL linear id."""

    MESH = _kernel.MESH
    LOGICAL = _kernel.LOGICAL


class BlockSpec:
    """``pl.BlockSpec(memory_space=…)``: the whole operand in that memory space.
    Blocked specs (``block_shape``/``index_map``, pipelining) are not supported."""

    def __init__(self, block_shape=None, index_map=None, *, memory_space=None, pipeline_mode=None, **kw):
        self.block_shape = block_shape
        self.index_map = index_map
        self.memory_space = memory_space
        self.pipeline_mode = pipeline_mode
        self.extra = kw
        self.site = caller()

    def kind(self, what):
        if self.block_shape is not None or self.index_map is not None:
            raise unsupported(
                "pl.BlockSpec(block_shape, index_map)",
                f"{what}: tpusim runs whole operands (memory_space=pl.ANY or pltpu.VMEM), "
                "not pipelined blocks",
                self.site,
            )
        if self.pipeline_mode is not None or self.extra:
            raise unsupported("pl.BlockSpec(pipeline_mode=...)", what, self.site)
        space = VMEM if self.memory_space is None else self.memory_space
        if not isinstance(space, MemorySpace) or space.kind is None:
            raise unsupported(
                f"pl.BlockSpec(memory_space={space!r})",
                f"{what}: tpusim supports pl.ANY (HBM) and pltpu.VMEM",
                self.site,
            )
        return space.kind


class GridSpec:
    """``pl.GridSpec(grid, in_specs, out_specs, scratch_shapes)``."""

    def __init__(self, grid=(), in_specs=None, out_specs=None, scratch_shapes=()):
        self.num_scalar_prefetch = 0
        self.grid = grid
        self.in_specs = in_specs
        self.out_specs = out_specs
        self.scratch_shapes = scratch_shapes
        self.site = caller()


class PrefetchScalarGridSpec(GridSpec):
    """``pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=0, grid, in_specs, out_specs,
    scratch_shapes)``; scalar prefetch (``num_scalar_prefetch > 0``) is not supported."""

    def __init__(self, num_scalar_prefetch, grid=(), in_specs=None, out_specs=None, scratch_shapes=()):
        super().__init__(grid, in_specs, out_specs, scratch_shapes)
        self.num_scalar_prefetch = num_scalar_prefetch
        self.site = caller()


class CompilerParams:
    """``pltpu.CompilerParams(collective_id=…)``; other fields are accepted and ignored
    (they tune Mosaic's compilation, which tpusim does not do)."""

    def __init__(self, collective_id=None, **kw):
        self.collective_id = collective_id
        self.other = kw


class ShapeDtypeStruct:
    """``jax.ShapeDtypeStruct(shape, dtype)``."""

    def __init__(self, shape, dtype):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)

    def __repr__(self):
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype})"


def _flat(x):
    """(list, was it a sequence)."""
    if isinstance(x, (list, tuple)):
        return list(x), True
    return [x], False


def _specs(specs, n, what, site):
    if specs is None:
        return [BlockSpec()] * n
    flat, _ = _flat(specs)
    if len(flat) != n:
        raise _native.BadInput(
            f"bad input: {what} has {len(flat)} entries but there are {n} {what.split('_')[0]}puts"
            f"{_sites.where(site)}"
        )
    out = []
    for s in flat:
        if s is None:
            s = BlockSpec()
        if not isinstance(s, BlockSpec):
            raise unsupported(f"{what} entry {s!r}", "expected pl.BlockSpec(memory_space=...)", site)
        out.append(s)
    return out


def _points(grid):
    """The points of `grid` in row-major order, made one at a time: only as many as the
    budget lets run exist (``itertools.product`` would first list every axis's range)."""
    if any(n == 0 for n in grid):
        return
    point = [0] * len(grid)
    while True:
        yield tuple(point)
        for k in reversed(range(len(grid))):
            point[k] += 1
            if point[k] < grid[k]:
                break
            point[k] = 0
        else:
            return


class _RecordingBudget:
    """The time and memory of recording a kernel (its Python runs once per device and
    grid point), held to the native budget: asked before the first call at a typical
    kernel's cost, then again as the calls measure this kernel's (after 16, 32, 64, …
    calls, or 50 ms, 100 ms, 200 ms, … of them), so huge work is refused in well under a
    second, before anything proportional to it is made."""

    def __init__(self, name, devices, grid, site):
        self.name, self.devices, self.grid = name, devices, grid
        if any(g < 0 for g in grid):
            raise _native.BadInput(
                f"bad input: `{name}` has a grid of {list(grid)}: grid sizes must be zero or more"
                + _sites.where(site)
            )
        if any(g >= 2**64 for g in grid):
            raise _native.LimitError(
                f"`{name}` has a grid of {list(grid)}: more grid points than can be counted"
                + _sites.where(site)
            )
        _native.ensure_recording_fits(name, devices, list(grid))
        self.calls, self.start = 0, time.perf_counter()
        self.next_calls, self.next_seconds = 16, 0.05
        self.least_bytes, self.sampled = 0, 0

    def called(self, ops):
        """Counts one call that recorded `ops`, and asks the budget again when due."""
        self.calls += 1
        if self.calls == 1:
            # The first call pays for what later ones reuse (imports, caches): timed from
            # its end, the rate is the kernel's own.
            self.start = time.perf_counter()
        if self.sampled < 16:
            # What a call's records take at least: their JSON, which the native call
            # parses; the least of the first calls, as a kernel may record ops at a few
            # grid points only.
            size = len(json.dumps(ops))
            self.least_bytes = size if self.sampled == 0 else min(self.least_bytes, size)
            self.sampled += 1
        took = time.perf_counter() - self.start
        if self.calls < self.next_calls and took < self.next_seconds:
            return
        self.next_calls, self.next_seconds = 2 * self.calls, 2 * max(took, self.next_seconds)
        _native.ensure_recording_fits(
            self.name, self.devices, list(self.grid), took / (self.calls - 1), self.least_bytes
        )


class PallasCall:
    """``pl.pallas_call(kernel, out_shape, grid_spec=…)``: call it inside tpusim's
    ``jax.shard_map`` on per-device values; every device runs the kernel."""

    def __init__(self, kernel, out_shape, *, grid_spec=None, grid=None, in_specs=None,
                 out_specs=None, scratch_shapes=None, compiler_params=None, interpret=False,
                 name=None, input_output_aliases=None, debug=False, cost_estimate=None, **kw):
        self.site = caller()
        if kw:
            raise unsupported(f"pl.pallas_call({', '.join(kw)}=...)", site=self.site)
        if input_output_aliases:
            raise unsupported(
                "pl.pallas_call(input_output_aliases=...)",
                "tpusim gives outputs their own buffers",
                self.site,
            )
        if grid_spec is not None and any(v is not None for v in (grid, in_specs, out_specs, scratch_shapes)):
            raise _native.BadInput(
                "bad input: pass either grid_spec or grid/in_specs/out_specs/scratch_shapes, not both"
                + _sites.where(self.site)
            )
        if grid_spec is None:
            grid_spec = GridSpec(grid or (), in_specs, out_specs, scratch_shapes or ())
        self.kernel = kernel
        self.name = name or getattr(kernel, "__name__", "kernel")
        self.out_shape = out_shape
        self.grid_spec = grid_spec
        cid = None
        if compiler_params is not None:
            if isinstance(compiler_params, dict):
                cid = compiler_params.get("mosaic", compiler_params).get("collective_id")
            else:
                cid = getattr(compiler_params, "collective_id", None)
        self.collective_id = cid

    def __call__(self, *args):
        from . import _shard_map

        return _shard_map.call_kernel(self, args)

    def record(self, mesh, arrays):
        """Evaluates the kernel on every device and grid point of `mesh` for inputs of
        the shapes and dtypes of `arrays` (one device's); returns the native call."""
        gs = self.grid_spec
        site = getattr(gs, "site", self.site)
        if gs.num_scalar_prefetch:
            raise unsupported(
                f"PrefetchScalarGridSpec(num_scalar_prefetch={gs.num_scalar_prefetch})",
                "scalar prefetch",
                site,
            )
        grid = gs.grid if isinstance(gs.grid, (tuple, list)) else (gs.grid,)
        grid = [_kernel.concrete_int(g, "grid") for g in grid]
        outs, _ = _flat(self.out_shape)
        in_specs = _specs(gs.in_specs, len(arrays), "in_specs", site)
        out_specs = _specs(gs.out_specs, len(outs), "out_specs", site)
        scratch, _ = _flat(gs.scratch_shapes or ())

        names = self._names(len(arrays) + len(outs) + len(scratch))
        inputs, outputs, scratch_list, args = [], [], [], []
        pos = 0
        for a, s in zip(arrays, in_specs):
            kind = s.kind("in_specs")
            dt = _kernel.dtype_name(a.dtype, f"input `{names[pos]}`")
            inputs.append((names[pos], kind, list(a.shape), dt))
            args.append(_kernel.Ref(pos, names[pos], a.shape, a.dtype, kind))
            pos += 1
        for o, s in zip(outs, out_specs):
            kind = s.kind("out_specs")
            if not hasattr(o, "shape") or not hasattr(o, "dtype"):
                raise _native.BadInput(
                    f"bad input: out_shape entries must be jax.ShapeDtypeStruct, got {o!r}"
                    + _sites.where(self.site)
                )
            dt = _kernel.dtype_name(o.dtype, f"output `{names[pos]}`")
            outputs.append((names[pos], kind, list(o.shape), dt))
            args.append(_kernel.Ref(pos, names[pos], tuple(o.shape), o.dtype, kind))
            pos += 1
        for s in scratch:
            name = names[pos]
            if isinstance(s, SemaphoreKind):
                s = SemaphoreArray(s, (), site)
            if isinstance(s, MemoryRef):
                if s.memory_space.kind != "vmem":
                    raise unsupported(
                        f"scratch {s!r}", "scratch buffers live in VMEM", s.site
                    )
                dt = _kernel.dtype_name(s.dtype, f"scratch `{name}`")
                scratch_list.append((name, "vmem", list(s.shape), dt))
                args.append(_kernel.Ref(pos, name, s.shape, s.dtype, "vmem"))
            elif isinstance(s, SemaphoreArray):
                kind = s.kind.scoped_kind
                if kind not in ("dma", "regular"):
                    raise unsupported(f"scratch {s!r}", "DMA and REGULAR semaphores only", s.site)
                if len(s.shape) > 1:
                    raise unsupported(
                        f"scratch {s!r}", "semaphore arrays have one dimension", s.site
                    )
                count = s.shape[0] if s.shape else None
                scratch_list.append((name, kind, [] if count is None else [count], "i32"))
                args.append(_kernel.Semaphore({"Arg": pos}, name, kind, count))
            else:
                raise unsupported(
                    f"scratch_shapes entry {s!r}",
                    "expected pltpu.VMEM(shape, dtype) or pltpu.SemaphoreType.DMA/REGULAR",
                    site,
                )
            pos += 1

        axes = mesh.axes
        budget = _RecordingBudget(self.name, mesh.size, grid, site)
        recording = []
        for device in range(mesh.size):
            coords = mesh.coords(device)
            per_point = []
            for point in _points(grid):
                ev = _kernel.Eval(axes, device, coords, grid, point)
                prev, _sites.current = _sites.current, ev
                try:
                    self.kernel(*args)
                finally:
                    _sites.current = prev
                per_point.append(ev.ops)
                budget.called(ev.ops)
            recording.append(per_point)
        return _native.KernelCall(
            self.name,
            mesh,
            grid,
            inputs,
            outputs,
            scratch_list,
            self.collective_id,
            json.dumps(recording),
        )

    def _names(self, n):
        """The kernel's parameter names (Pallas order: inputs, outputs, scratch)."""
        try:
            params = list(inspect.signature(self.kernel).parameters.values())
        except (TypeError, ValueError):
            params = []
        plain = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        star = any(p.kind == p.VAR_POSITIONAL for p in params)
        required = [p for p in plain if p.default is p.empty]
        if not star and not (len(required) <= n <= len(plain)):
            code = getattr(self.kernel, "__code__", None)
            loc = (code.co_filename, code.co_firstlineno) if code else self.site
            raise _native.BadInput(
                f"bad input: kernel `{self.name}` takes {len(plain)} refs but the call gives "
                f"{n} (inputs, outputs, then scratch_shapes){_sites.where(loc)}"
            )
        names = [p.name for p in plain[:n]]
        return names + [f"arg{i}" for i in range(len(names), n)]
