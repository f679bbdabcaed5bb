"""A ``pallas_call`` as a tpusim program: its buffers, its evaluation on every device
and grid point (``_jaxpr``), Pallas' own grid pipeline for blocked operands, and the
native ``KernelCall`` the recording becomes.

A :class:`CallSpec` holds what the lowering knows (the kernel jaxpr, grid mapping,
compiler params, mesh axes); a :class:`Plan` is that spec evaluated for one set of
SMEM values (scalar prefetch and SMEM operands decide control flow), and is what the
cache keeps: a repeated call with the same values reuses it and only executes.
"""

import contextlib
import functools
import gc
import math
import re

import numpy as np
from jax._src import core as jax_core

from . import _batch, _native, _steer
from ._budget import RecordingBudget
from ._budget import points as grid_points
from ._jaxpr import (
    _BAD,
    Buffer,
    Evaluator,
    Point,
    RefV,
    Sym,
    _concrete_int,
    _Where,
    dtype_name,
    kernel_error,
    sem_kind,
    site_of,
    space_of,
    unsupported,
)

try:
    from jax._src.pallas.mosaic import pipeline as mosaic_pipeline
except ImportError:  # pragma: no cover
    mosaic_pipeline = None

from jax._src.pallas import core as pallas_core


def _func_site(jaxpr, fallback=("<unknown>", 0)):
    """(file, line) of the kernel function, from the jaxpr's debug info."""
    dbg = getattr(jaxpr, "debug_info", None)
    info = getattr(dbg, "func_src_info", None) or ""
    m = re.search(r" at (.*):(\d+)$", info)
    if m:
        return (m.group(1), int(m.group(2)))
    return fallback


def _merge(a, b):
    """Common pieces of two run lists with the same number of elements:
    [((a_off, len), (b_off, len))]."""
    out = []
    i = j = 0
    ao, al = a[0] if a else (0, 0)
    bo, bl = b[0] if b else (0, 0)
    while i < len(a) and j < len(b):
        n = min(al, bl)
        out.append(((ao, n), (bo, n)))
        ao, al, bo, bl = ao + n, al - n, bo + n, bl - n
        if al == 0:
            i += 1
            if i < len(a):
                ao, al = a[i]
        if bl == 0:
            j += 1
            if j < len(b):
                bo, bl = b[j]
    return out


def _blocks(pieces):
    """The common pieces of an op between two views (``_merge``'s) grouped into blocks a
    DMA moves as one: runs of equal length whose offsets step by a fixed stride on each
    side. [((a_off, len, rows, a_stride), (b_off, len, rows, b_stride))]."""
    out = []
    for (ao, n), (bo, m) in pieces:
        if out:
            (a0, an, rows, sa), (b0, bn, _, sb) = out[-1]
            if n == an and m == bn:
                if rows == 1 and ao - a0 >= n and bo - b0 >= n:
                    out[-1] = ((a0, n, 2, ao - a0), (b0, n, 2, bo - b0))
                    continue
                if rows > 1 and ao == a0 + rows * sa and bo == b0 + rows * sb:
                    out[-1] = ((a0, n, rows + 1, sa), (b0, n, rows + 1, sb))
                    continue
        out.append(((ao, n, 1, n), (bo, m, 1, m)))
    return out


def _same_bits(a, b):
    """True when a copy between dtypes `a` and `b` moves the same elements: equal, or
    of the same width (f32 and i32, f16 and bf16: a DMA moves bytes)."""
    a, b = np.dtype(a), np.dtype(b)
    pairs = ({"float32", "int32"}, {"float16", "bfloat16"})
    return a == b or any({a.name, b.name} <= p for p in pairs)


@contextlib.contextmanager
def _no_cyclic_gc():
    """Python's cyclic collector paused while a kernel records: the records are many
    small objects without cycles, and the collections they set off scanned every live
    object again and again (a fifth of a long recording's time). Reference counting
    still frees what is dropped; the collector runs again as it was after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _is_parallel(semantics):
    """Whether one entry of `dimension_semantics` (a string or JAX's enum) lets the
    compiler split that grid dimension over cores."""
    name = getattr(semantics, "name", None) or getattr(semantics, "value", None) or str(semantics)
    return str(name).lower().endswith("parallel")


class CallSpec:
    """What the lowering of one ``pallas_call`` knows: kernel, grid, operands, mesh."""

    def __init__(self, params, axis_sizes):
        self.jaxpr = params["jaxpr"]
        self.gm = params["grid_mapping"]
        self.mesh = params.get("mesh")
        cp = params.get("compiler_params")
        self.collective_id = getattr(cp, "collective_id", None) if cp is not None else None
        # The VMEM the kernel asks the compiler for: the cost model's VMEM check holds it to it.
        limit = getattr(cp, "vmem_limit_bytes", None) if cp is not None else None
        self.vmem_limit = int(limit) if limit else None
        # A dimension the compiler may split over a megacore chip's TensorCores: the
        # cost model runs the grid on all of them, otherwise on one.
        sems = getattr(cp, "dimension_semantics", None) if cp is not None else None
        self.parallel = any(_is_parallel(s) for s in sems or ())
        self.aliases = dict(params.get("input_output_aliases") or ())
        self.out_avals = params["out_avals"]
        self.axes = [(str(k), int(v)) for k, v in axis_sizes.items()]
        self.axis_keys = list(axis_sizes.keys())
        self.site = _func_site(self.jaxpr)
        self._key = None
        name = params.get("name")
        dbg = getattr(self.jaxpr, "debug_info", None)
        self.name = name or (getattr(dbg, "func_name", None) or "kernel")
        names = getattr(dbg, "arg_names", None)
        self.arg_names = list(names) if names else None
        if self.gm.num_dynamic_grid_bounds:
            raise unsupported("pallas_call with dynamic grid bounds", "", _Where(None, self.site, "pallas_call"))
        self.core_axis = None
        self.cores = 1
        if self.mesh is not None:
            from jax._src.pallas.mosaic import core as mosaic_core

            if not isinstance(self.mesh, mosaic_core.TensorCoreMesh):
                raise unsupported(
                    f"pl.kernel over a {type(self.mesh).__name__}",
                    "TensorCore meshes only: tpusim models TensorCores, not SparseCores",
                    _Where(None, self.site, "pl.kernel"),
                )
            shape = dict(self.mesh.shape)
            if len(shape) != 1:
                raise unsupported(
                    f"pl.kernel over the mesh {self.mesh}", "one core axis", _Where(None, self.site, "pl.kernel")
                )
            ((self.core_axis, self.cores),) = shape.items()
        self.grid = tuple(int(g) for g in self.gm.grid)
        if self.mesh is not None:
            # A core_map's grid is its cores: each core is an agent with one point.
            self.grid = ()
        self.num_index = self.gm.num_index_operands
        self.num_inputs = self.gm.num_inputs
        self.num_outputs = self.gm.num_outputs
        # Positions (among the call's operands) of the inputs read here, when the call runs:
        # SMEM operands, and semaphores (their counts are the kernel's starting counts).
        self.smem_inputs = []
        for i, bm in enumerate(self.gm.block_mappings[: self.num_inputs]):
            if space_of(bm.transformed_block_aval.memory_space) in ("smem", "sem"):
                self.smem_inputs.append(self.num_index + i)

    def key(self):
        """What makes two lowerings of a pallas_call the same program: the kernel (its
        equations and their lines), grid mapping, operands, mesh and compiler params."""
        if self._key is None:
            sites = []

            def walk(jx):
                for e in jx.eqns:
                    sites.append(site_of(e.source_info))
                    for sub in jax_core.jaxprs_in_params(e.params):
                        walk(sub)

            walk(self.jaxpr)
            try:
                text = str(self.jaxpr)
            except Exception:  # JAX cannot print every jaxpr (a select_ref's): this one only
                text = ("unprintable", id(self.jaxpr))
            self._key = (
                text,
                tuple(sites),
                str(self.gm),
                tuple(self.axes),
                self.collective_id,
                self.vmem_limit,
                self.parallel,
                tuple(sorted(self.aliases.items())),
                tuple(str(a) for a in self.out_avals),
                self.name,
                str(self.mesh),
            )
        return self._key

    @functools.cached_property
    def prints(self):
        """True when the kernel has a `pl.debug_print`."""

        def walk(jx):
            return any(
                e.primitive.name == "debug_print" or any(walk(sub) for sub in jax_core.jaxprs_in_params(e.params))
                for e in jx.eqns
            )

        return walk(self.jaxpr)

    def tpusim_mesh(self):
        axes = list(self.axes)
        if self.cores > 1:
            axes.append((str(self.core_axis), self.cores))
        if not axes:
            return _native.Mesh(1)
        return _native.Mesh(axes=axes)

    def arg_name(self, i, default):
        if self.arg_names and i < len(self.arg_names) and self.arg_names[i]:
            n = self.arg_names[i]
            return n.split("[")[0] if n.startswith("args") else n
        return default


class Plan:
    """A CallSpec evaluated on every device and grid point for one set of SMEM values.
    A kernel that needs values it computes itself is `steered`: traced call by call
    while it runs (``_steer``), its SMEM scratch memory of the simulated devices too."""

    max_iterations = 1_000_000
    #: The recording's budget (made once the buffers are known, before any evaluation).
    budget = None

    def __init__(self, spec, smem_values, steered=False):
        self.spec = spec
        self.steered = steered
        self.smem_bufs = []  # every SMEM buffer (their values per device, see smem_snapshot)
        self.grid = spec.grid
        self.inputs, self.outputs, self.scratch = [], [], []
        self.kernel_bufs = []  # one per jaxpr invar
        self.blocked = []  # (buffer in VMEM, hbm buffer, block mapping, is_output)
        self.scoped_bufs = {}
        self.pipelines = {}
        self.smem_out = []  # (output index, buffer)
        self.out_sources = []  # per output: ("rust", k) | ("smem", buffer)
        self.pipeline_sem = None
        self.sem_inputs = []  # (semaphore, its counts per device): credited at entry
        self.sem_outputs = []  # (semaphore, its counts' Rust output): read at exit
        self._sem_scratch = []  # (semaphore operand, scratch kind, shape)
        self._pieces_made = {}  # see _pieces
        # `pl.debug_print`s: (device, g) -> ((chip, core), grid point, texts)
        self.prints = {}
        self._blocks_at = {}  # see _block_ids
        self.constants = []  # the constant arrays of compute, by position (``constant``)
        self._constant_ids = {}
        self.mesh = spec.tpusim_mesh()
        self.P = self.mesh.size
        self.devices = spec.axes
        self._build(smem_values)
        self.barrier_buf = Buffer("sem", "barrier_semaphore", (), None, sem="barrier", barrier=True)
        self.budget = RecordingBudget(spec.name, self.P, self.grid)
        if steered:
            self.budget.done()  # each run's trace has its own (``tracer``)
            # Traced at every call, as it runs: the native call asks for a tracer.
            self._smem_start = [self.smem_snapshot(d) for d in range(self.P)]
            # A call whose reads find what a call before found runs that call's plan,
            # unless the trace gives more than the program: texts, SMEM results.
            self.call = _native.KernelCall.steered(
                spec.name,
                self.mesh,
                list(self.grid),
                self.inputs,
                self.outputs,
                spec.collective_id,
                spec.cores,
                self.aliases,
                self,
                replayable=not (spec.prints or self.smem_results),
                vmem_limit=spec.vmem_limit,
                parallel=spec.parallel,
            )
            return
        # The records are read once, into the native call, and not kept: a plan that
        # held them (a long loop's are hundreds of thousands of small objects) had the
        # cyclic collector walk them at each of its later full collections.
        with _no_cyclic_gc():
            try:
                recording = [self._device(d) for d in range(self.P)]
            finally:
                self.budget.done()
            self.call = _native.KernelCall(
                spec.name,
                self.mesh,
                list(self.grid),
                self.inputs,
                self.outputs,
                self.scratch,
                spec.collective_id,
                recording,
                spec.cores,
                self.aliases,
                self.constants,
                vmem_limit=spec.vmem_limit,
                parallel=spec.parallel,
            )
            del recording

    def title(self):
        """How reports name this call: its kernel, P, mesh and source line."""
        s = self.spec
        axes = "x".join(str(n) for _, n in s.axes) or "1"
        if s.cores > 1:  # a core_map: the tpusim mesh's devices are the chips' cores
            return f"{s.name} P={self.P // s.cores} ({axes}) x {s.cores} cores at {s.site[0]}:{s.site[1]}"
        return f"{s.name} P={self.P} ({axes}) at {s.site[0]}:{s.site[1]}"

    def tracer(self):
        """A fresh trace of the kernel while it runs (one per run: each schedule's own),
        from the SMEM values the call starts with."""
        for d in range(self.P):
            self.smem_restore(d, self._smem_start[d])
        self.prints = {}
        self.budget.done()  # the trace before ended
        self.budget = RecordingBudget(self.spec.name, self.P, self.grid)  # this trace's time
        return _steer.Tracer(self)

    # -- buffers

    def constant(self, a):
        """The position of constant array `a` among the call's constants (each distinct
        one is kept once, whichever devices and grid points make it)."""
        a = np.ascontiguousarray(a)
        key = (a.dtype.str, a.shape, a.tobytes())
        got = self._constant_ids.get(key)
        if got is None:
            got = self._constant_ids[key] = len(self.constants)
            self.constants.append(a)
        return got

    def _add_scratch(self, kind, name, shape, dtype_s):
        pos = len(self.inputs) + len(self.outputs) + len(self.scratch)
        self.scratch.append((name, kind, list(shape), dtype_s))
        return pos

    def _dt(self, dtype, what):
        d = dtype_name(dtype)
        if d is None:
            raise unsupported(
                f"dtype {dtype}",
                f"{what}: tpusim runs f32, i32, f16, bf16, i8, u8 and bool",
                _Where(None, self.spec.site, "pallas_call"),
            )
        return d

    def _build(self, smem_values):
        """The kernel's buffers, one per jaxpr input, and the Rust spec's operands."""
        spec = self.spec
        invars = spec.jaxpr.invars
        where = _Where(None, spec.site, "pallas_call")
        # Scalar prefetch: SMEM, its values known here.
        for i in range(spec.num_index):
            v = invars[i]
            b = Buffer("smem", spec.arg_name(i, f"scalar{i}"), v.aval.shape, v.aval.dtype)
            b.smem = {d: np.array(smem_values[d][i]) for d in range(self.P)}
            self.smem_bufs.append(b)
            self.kernel_bufs.append(b)
        # Operands: SMEM ones live here; the others are Rust operands (inputs, then
        # outputs), in HBM, whole in VMEM, or in HBM with a VMEM block per grid point.
        ops = []  # (is_out, buffer the kernel sees, Rust operand or None)
        for j, bm in enumerate(spec.gm.block_mappings):
            is_out = j >= spec.num_inputs
            k = spec.num_index + j
            v = invars[k]
            name = spec.arg_name(k, f"out{j - spec.num_inputs}" if is_out else f"in{j}")
            ms = space_of(bm.transformed_block_aval.memory_space)
            arr = bm.array_aval
            if ms == "sem":
                ops.append((is_out, *self._sem_operand(name, arr, is_out, where)))
                if not is_out:
                    self.sem_inputs.append((ops[-1][1], [np.asarray(smem_values[d][k]) for d in range(self.P)]))
                continue
            if ms == "smem":
                b = Buffer("smem", name, arr.shape, arr.dtype)
                init = (lambda d: np.zeros(arr.shape, arr.dtype)) if is_out else (lambda d: np.array(smem_values[d][k]))
                b.smem = {d: init(d) for d in range(self.P)}
                self.smem_bufs.append(b)
                ops.append((is_out, b, None))
                continue
            dt = self._dt(arr.dtype, f"operand `{name}`")
            block = tuple(pallas_core._get_block_shape(bm.block_shape))
            whole = block == tuple(arr.shape) and all(
                isinstance(d, pallas_core.Blocked) or d is None for d in bm.block_shape
            )
            if ms == "hbm" and not whole:
                raise unsupported(f"a blocked spec in HBM for `{name}`", "blocks are copied into VMEM", where)
            kind = "vmem" if ms != "hbm" and whole else "any"
            operand = Buffer("hbm" if kind == "any" else "vmem", name, arr.shape, arr.dtype)
            seen = operand
            if kind == "any" and ms != "hbm":  # blocked: the kernel sees a VMEM block
                seen = Buffer("vmem", f"{name} (block)", v.aval.shape, v.aval.dtype)
                self.blocked.append((seen, operand, bm, is_out))
            ops.append((is_out, seen, (operand, (name, kind, list(arr.shape), dt))))
        for want_out, target in ((False, self.inputs), (True, self.outputs)):
            for is_out, _, rust in ops:
                if is_out == want_out and rust is not None:
                    rust[0].pos = len(self.inputs) + len(self.outputs)
                    target.append(rust[1])
        for sem, kind, dims in self._sem_scratch:
            sem.pos = self._add_scratch(kind, sem.name, dims, "i32")
        bufs = [seen for _, seen, _ in ops]
        # Aliased outputs: the output starts as the input (the Rust prologue copies it in);
        # the kernel's input ref is the output.
        self.aliases = []
        for i_idx, o_idx in spec.aliases.items():
            ii, oj = i_idx - spec.num_index, spec.num_inputs + o_idx
            if ii < 0:
                raise unsupported("input_output_aliases of a scalar prefetch operand", "", where)
            if bufs[ii].kind == "sem" and bufs[oj].kind == "sem":
                # One semaphore, its count carried in and out.
                self.sem_inputs = [(bufs[oj] if b is bufs[ii] else b, v) for b, v in self.sem_inputs]
                bufs[ii] = bufs[oj]
                continue
            if ops[ii][2] is None or ops[oj][2] is None:
                raise unsupported("input_output_aliases of SMEM operands", "", where)
            src, dst = ops[ii][2][0], ops[oj][2][0]
            if bufs[ii] is not src or bufs[oj] is not dst:
                raise unsupported("input_output_aliases of blocked operands", "whole operands only", where)
            self.aliases.append((src.pos, dst.pos - len(self.inputs)))
            bufs[ii] = bufs[oj]
        self.kernel_bufs.extend(bufs)
        # Where each output comes from: a Rust output (by position) or an SMEM buffer.
        self.out_sources = [
            ("smem", seen) if rust is None else ("rust", rust[0].pos - len(self.inputs))
            for is_out, seen, rust in ops
            if is_out
        ]
        # Scratch operands.
        for k in range(spec.num_index + spec.num_inputs + spec.num_outputs, len(invars)):
            v = invars[k]
            name = spec.arg_name(k, f"scratch{k}")
            self.kernel_bufs.append(self._alloc(v.aval, name, where))
        # Blocked operands' VMEM blocks, and the semaphore their copies use.
        for vb, hbm, bm, is_out in self.blocked:
            vb.pos = self._add_scratch("vmem", vb.name, vb.shape, self._dt(vb.dtype, vb.name))
        if self.blocked:
            self.pipeline_sem = self._add_scratch("dma", "pipeline_sem", [], "i32")

    def _sem_operand(self, name, arr, is_out, where):
        """A semaphore-typed operand: (the semaphore the kernel sees, the Rust operand or
        None). An input starts the kernel's semaphore at its counts (signals at entry);
        an output is a semaphore the kernel hands on, whose counts at exit (read when
        each device leaves) are an int32 Rust output."""
        kind = sem_kind(arr.dtype)
        if kind not in ("dma", "regular"):
            raise unsupported(f"a semaphore operand of type {arr.dtype}", "DMA and REGULAR semaphores", where)
        shape = tuple(arr.shape)
        n = math.prod(shape)
        sem = Buffer("sem", name, shape, arr.dtype, sem=kind)
        # Its scratch slot comes once the Rust operands are known (positions follow them).
        self._sem_scratch.append((sem, f"{kind}_out" if is_out else kind, [] if not shape else [n]))
        if not is_out:
            return sem, None
        counts = Buffer("vmem", f"{name} (counts)", (max(n, 1),), np.int32)
        self.sem_outputs.append((sem, counts))
        return sem, (counts, (f"{name} (counts)", "vmem", [max(n, 1)], "i32"))

    def _sem_paths(self, sem):
        """The recorded form of each semaphore of `sem`, in row-major order."""
        if not sem.shape:
            return [[{"Arg": sem.pos}, None]]
        return [[{"Arg": sem.pos}, i] for i in range(math.prod(sem.shape))]

    def _sem_entry(self, p, device):
        """The semaphore operands' counts, credited as the device enters the kernel."""
        where = _Where(p, self.spec.site, "pallas_call")
        for sem, values in self.sem_inputs:
            for path, v in zip(self._sem_paths(sem), np.asarray(values[device]).reshape(-1)):
                if v == 0:
                    continue
                if sem.sem == "dma" or v < 0:
                    raise unsupported(
                        f"a {sem.sem} semaphore operand `{sem.name}` with count {int(v)}",
                        "tpusim completes every DMA within its call: a DMA semaphore comes in at 0, a REGULAR one at a count of at least 0",
                        where,
                    )
                p.record("signal", self.spec.site, sem=path, inc=int(v), dev=None)

    def _sem_exit(self, p):
        """The semaphore outputs' counts, read as the device leaves the kernel."""
        for sem, counts in self.sem_outputs:
            for i, path in enumerate(self._sem_paths(sem)):
                p.record("sem_read", self.spec.site, sem=path, dst=[counts.pos, [[0, i, 0]]])

    def _alloc(self, aval, name, where):
        ms = space_of(getattr(aval, "memory_space", None))
        shape = tuple(aval.shape)
        if ms == "sem" or sem_kind(aval.dtype):
            kind = sem_kind(aval.dtype)
            if kind is None:
                raise unsupported(f"a scratch semaphore of type {aval.dtype}", "", where)
            if kind == "barrier":
                # A BARRIER scratch semaphore is one of the kernel's own, as Mosaic
                # allocates it (a `!tpu.semaphore`) and JAX's interpret mode does.
                kind = "regular"
            n = math.prod(shape)
            pos = self._add_scratch(kind, name, [] if not shape else [n], "i32")
            return Buffer("sem", name, shape, aval.dtype, pos=pos, sem=kind)
        if ms == "smem":
            b = Buffer("smem", name, shape, aval.dtype)
            b.smem = {d: np.zeros(shape, aval.dtype) for d in range(self.P)}
            b.scratch = True
            if self.steered:
                # Memory of the simulated devices too: DMAs and vector stores reach it.
                b.pos = self._add_scratch(
                    "vmem", f"{name} (SMEM)", shape or (1,), self._dt(aval.dtype, f"SMEM scratch `{name}`")
                )
                b.known = {d: np.ones(max(1, math.prod(shape)), bool) for d in range(self.P)}
            self.smem_bufs.append(b)
            return b
        if ms in ("vmem", None):
            if not shape or 0 in shape:
                shape = shape or (1,)
            pos = self._add_scratch("vmem", name, shape, self._dt(aval.dtype, f"scratch `{name}`"))
            b = Buffer("vmem", name, aval.shape, aval.dtype, pos=pos)
            if not aval.shape:
                b.shape = ()
            return b
        raise unsupported(f"scratch in memory space {ms}", f"`{name}`: tpusim has VMEM, SMEM and semaphores", where)

    def scoped(self, eqn, invars, where):
        key = id(eqn)
        bufs = self.scoped_bufs.get(key)
        if bufs is None:
            bufs = []
            for n, v in enumerate(invars):
                bufs.append(self._alloc(v.aval, f"run_scoped@{where.site[1]}[{n}]", where))
            self.scoped_bufs[key] = (eqn, bufs)
        else:
            bufs = bufs[1]
        return bufs

    def semaphore_value_buf(self, eqn, where):
        """The int32 scratch a `semaphore_read` equation writes its value into (one per
        equation, as `run_scoped` scratch is)."""
        key = ("semaphore_read", id(eqn))
        got = self.scoped_bufs.get(key)
        if got is None:
            name = f"semaphore_read@{where.site[1]}"
            pos = self._add_scratch("vmem", name, (1,), self._dt(np.dtype(np.int32), f"scratch `{name}`"))
            got = (eqn, Buffer("vmem", name, (1,), np.dtype(np.int32), pos=pos))
            self.scoped_bufs[key] = got
        return got[1]

    def pipeline_jaxpr(self, eqn):
        got = self.pipelines.get(id(eqn))
        if got is None:
            avals = [v.aval for v in eqn.invars]
            gm = self.spec.gm
            got = mosaic_pipeline.emit_pipeline_to_jaxpr(
                avals, grid_names=gm.grid_names, grid_sizes=gm.grid, **eqn.params
            )
            self.pipelines[id(eqn)] = (eqn, got)
        else:
            got = got[1]
        return got

    # -- mesh

    def coords(self, device):
        return self.mesh.coords(device)

    def axis_coord(self, p, name, where):
        """(size, this device's coordinate) of axis `name`: a mesh axis, the core axis
        of a core_map, or a named grid axis."""
        spec = self.spec
        for i, (k, key) in enumerate(zip(spec.axes, spec.axis_keys)):
            if key == name or k[0] == name:
                return k[1], self.coords(p.device)[i]
        if spec.core_axis is not None and name == spec.core_axis:
            if spec.cores == 1:
                return 1, 0
            return spec.cores, self.coords(p.device)[-1]
        gn = spec.gm.grid_names or ()
        if name in gn:
            i = gn.index(name)
            return self.grid[i], p.index[i]
        raise kernel_error("misuse", f"the mesh has no axis `{name}` (axes: {spec.axes})", where)

    def device_id(self, p, dev, dev_type, where, core_index=None, dma=False):
        """The recorded form of a device id (None: this device). With several cores per
        chip, a DMA lands on the same core of the target chip, a signal on core 0, unless
        the id names the core."""

        names = [a for a, _ in self.spec.axes]
        keys = self.spec.axis_keys
        sizes = [s for _, s in self.spec.axes]
        me = list(self.coords(p.device))
        ncores = self.spec.cores
        core = None
        if core_index is not None:
            core = _concrete_int(core_index, "core_index", where)
        if dev is None and core is None:
            return None
        logical = dev_type is not None and getattr(dev_type, "name", str(dev_type)) == "LOGICAL"
        if dev is None:
            coords = me[: len(names)]
        elif logical:
            n = _concrete_int(dev, "a LOGICAL device id", where)
            if ncores > 1:
                if n < 0 or n >= self.P // ncores:
                    self._bad(p, where, f"device id {n} is outside the mesh of {self.P // ncores} devices")
                    return _BAD
                coords = list(self.mesh.coords(n * ncores))[: len(names)]
            else:
                return {"Logical": n}
        elif isinstance(dev, dict):
            coords = me[: len(names)]
            for axis, idx in dev.items():
                if isinstance(axis, tuple) and len(axis) == 1:
                    axis = axis[0]
                if isinstance(axis, tuple):
                    pos = []
                    for a in axis:
                        if a not in keys:
                            raise kernel_error("misuse", f"the mesh has no axis `{a}` (axes: {self.spec.axes})", where)
                        pos.append(keys.index(a))
                    i = _concrete_int(idx, "a device id", where)
                    dims = [sizes[q] for q in pos]
                    for n_, q in enumerate(pos):
                        inner = math.prod(dims[n_ + 1 :])
                        coords[q] = (i // inner) % dims[n_]
                    continue
                i = _concrete_int(idx, "a device id", where)
                if axis in keys:
                    coords[keys.index(axis)] = i
                elif self.spec.core_axis is not None and axis == self.spec.core_axis:
                    core = i
                else:
                    raise kernel_error("misuse", f"the mesh has no axis `{axis}` (axes: {self.spec.axes})", where)
        else:
            t = list(dev) if isinstance(dev, (tuple, list)) else [dev]
            t = [_concrete_int(x, "a device id", where) for x in t]
            if len(t) != len(names):
                if len(t) == len(names) + 1 and ncores > 1:
                    core = t[-1]
                    t = t[:-1]
                else:
                    raise kernel_error(
                        "misuse",
                        f"a MESH device id has {len(t)} coordinates but the mesh has axes {self.spec.axes}",
                        where,
                    )
            coords = t
        if ncores > 1:
            c = core if core is not None else (me[-1] if dev is None or dma else 0)
            if c < 0 or c >= ncores:
                self._bad(p, where, f"core index {c} is outside the chip's {ncores} cores")
                return _BAD
            return {"Mesh": [int(x) for x in coords] + [int(c)]}
        if core not in (None, 0):
            self._bad(p, where, f"core index {core}: the chip has one core")
            return _BAD
        return {"Mesh": [int(x) for x in coords]}

    def _bad(self, p, where, detail, kind="device_id_out_of_range"):
        p.record("error", where.site, kind=kind, detail=detail, what=where.op)

    # -- SMEM

    def smem_read(self, p, view, where):
        root = view.buf.root
        if root.pos is not None and p.asker is not None:
            # Device SMEM: each read is an access; an element tracing does not know
            # asks for the whole buffer as this read finds it.
            paths = [self._path(view, r) for r in view.runs()]
            unknown = not root.known[p.device][self._flat(view)].all()
            for path in paths[:-1] if unknown else paths:
                p.record("read", where.site, src=path, fetch=path)
            if unknown:
                p.asker.fetch(p, where, src=paths[-1], fetch=[root.pos, []], buf=view.buf)
        arr = view.buf.smem[p.device]
        idx = tuple(d if not isinstance(d, tuple) else slice(d[0], d[0] + d[1] * d[2], d[2]) for d in view.dims)
        return np.array(arr[idx])

    def smem_write(self, p, view, value, where):
        if isinstance(value, Sym):
            if getattr(view.buf.root, "scratch", False) and not self.steered:
                raise _steer.NeedsSteering("a vector stored into SMEM")
            raise unsupported(
                "storing a value loaded from VMEM or HBM into an SMEM operand",
                "SMEM operands are read and written by scalars (SMEM scratch takes vectors)",
                where,
            )
        arr = view.buf.smem[p.device]
        idx = tuple(d if not isinstance(d, tuple) else slice(d[0], d[0] + d[1] * d[2], d[2]) for d in view.dims)
        arr[idx] = np.asarray(value)
        root = view.buf.root
        if root.pos is not None:
            # Device SMEM: the store is recorded (a DMA may read it) and known here.
            root.known[p.device][self._flat(view)] = True
            vals = np.broadcast_to(np.asarray(value, dtype=view.dtype), view.shape).reshape(-1)
            at = 0
            for off, n in view.runs():
                for k in range(n):
                    v = vals[at + k]
                    p.record(
                        "fill",
                        where.site,
                        dst=[root.pos, [[2, int(off + k), 1]]],
                        value=float(bool(v)) if vals.dtype == np.bool_ else float(v),
                    )
                at += n

    def smem_unknown(self, p, view):
        """`view`'s elements of device SMEM are no longer known to tracing on `p`'s device."""
        if p.batch is not None:
            raise _batch.Unbatchable()
        view.buf.root.known[p.device][self._flat(view)] = False

    def smem_forget(self, device):
        """Nothing of `device`'s device SMEM is known to tracing any more (after a wait)."""
        for b in self.smem_bufs:
            if b.pos is not None:
                b.known[device][:] = False

    @staticmethod
    def _flat(view):
        """The flat element indices of `view` in its allocation."""
        runs = view.runs()
        if not runs:
            return np.zeros(0, np.int64)
        return np.concatenate([np.arange(o, o + n) for o, n in runs])

    def smem_snapshot(self, device):
        """Every SMEM buffer's values (and what tracing knows of them) on `device`."""
        return {
            id(b): (b.smem[device].copy(), None if b.pos is None else b.known[device].copy()) for b in self.smem_bufs
        }

    def smem_restore(self, device, snap):
        """`device`'s SMEM as `snap` holds it (buffers made since: zeros, known)."""
        for b in self.smem_bufs:
            got = snap.get(id(b))
            if got is None:
                b.smem[device][...] = 0
                if b.pos is not None:
                    b.known[device][:] = True
                continue
            b.smem[device][...] = got[0]
            if b.pos is not None:
                b.known[device][...] = got[1]

    # -- refs as recorded

    def _path(self, view, run=None):
        if run is None:
            steps = view.steps()
            if steps is not None:
                return [view.buf.pos, steps]
            runs = view.runs()
            assert len(runs) == 1
            run = runs[0]
        return [view.buf.pos, [[2, int(run[0]), int(run[1])]]]

    def _pieces(self, a, b, blocks=False):
        """Pieces for an op between views `a` and `b` of equal element count: a list of
        (path_a, path_b); with `blocks` (a DMA's), runs at a fixed stride on both sides
        are one piece (``_blocks``). The same views recur at every device and grid point:
        made once."""
        key = (a.buf.pos, a.buf.base, a.buf.shape, a.dims, b.buf.pos, b.buf.base, b.buf.shape, b.dims, blocks)
        got = self._pieces_made.get(key)
        if got is None:
            ra, rb = a.runs(), b.runs()
            if len(ra) == 1 and len(rb) == 1:
                got = [(self._path(a), self._path(b))]
            elif blocks:
                got = [(self._block_path(a, x), self._block_path(b, y)) for x, y in _blocks(_merge(ra, rb))]
            else:
                got = [(self._path(a, x), self._path(b, y)) for x, y in _merge(ra, rb)]
            self._pieces_made[key] = got
        return got

    @staticmethod
    def _block_path(view, block):
        """The path of `block` (offset, len, rows, stride) of `view`'s buffer: its first
        run as rows of that run."""
        off, n, rows, stride = (int(x) for x in block)
        return [view.buf.pos, [[2, off, n], [4, rows, stride]]]

    def _check_same(self, p, a, b, where):
        if a.numel() != b.numel() or not _same_bits(a.dtype, b.dtype):
            self._bad(
                p,
                where,
                f"`{a.buf.name}` is {list(a.shape)} {np.dtype(a.dtype)} but `{b.buf.name}` is "
                f"{list(b.shape)} {np.dtype(b.dtype)}",
                kind="shape_mismatch",
            )
            return False
        return True

    @staticmethod
    def _untouched(p, bufs, since):
        """No call recorded after position `since` may have written any of `bufs`."""
        pos = {b.pos for b in bufs}
        for r in _batch.records_of(p.ops[since + 1 :]):
            if r.get("dead"):
                continue
            op = r["op"]
            if op in ("start", "dma_wait", "wait", "wait_send", "wait_recv"):
                return False
            if op in ("copy", "fill", "accumulate", "store", "sem_read"):
                dst = r["dst"]
                if type(dst) is _batch.PerIter:  # a batched body's: the same buffer at every iteration
                    dst = dst.vals[0]
                if dst[0] in pos:
                    return False
        return True

    def lower_store(self, p, view, value, where):
        site = where.site
        if isinstance(value, Sym):
            if value.prim == "poison":
                return
            if p.batch is not None:
                _batch_guard(p.batch, view, value)
            # A plain copy of a load, or an accumulate of two loads into one of them:
            # the core's copy and accumulate (every executor runs them), not values.
            if (
                value.prim == "get"
                and value.uses == 0
                and value.pos >= p.frozen
                and self._untouched(p, [value.view.buf], value.pos)
            ):
                if not self._check_same(p, view, value.view, where):
                    return
                value.rec["dead"] = True
                for d, s in self._pieces(view, value.view):
                    p.record("copy", site, dst=d, src=s)
                return
            if value.prim in ("add", "max", "min") and value.uses == 0 and len(value.args) == 2:
                a, b = value.args
                if (
                    isinstance(a, Sym)
                    and isinstance(b, Sym)
                    and a.prim == b.prim == "get"
                    and a.uses == 1
                    and b.uses == 1
                    and a is not b
                    and min(a.pos, b.pos) >= p.frozen
                ):
                    if b.view.key() == view.key():
                        a, b = b, a
                    if (
                        a.view.key() == view.key()
                        and np.dtype(a.dtype) == np.dtype(b.dtype)
                        and dtype_name(a.dtype) in ("f32", "i32", "f16", "bf16")
                        and self._untouched(p, [a.view.buf, b.view.buf], min(a.pos, b.pos))
                    ):
                        if not self._check_same(p, view, b.view, where):
                            return
                        for x in (a, b, value):
                            x.rec["dead"] = True
                        reduce = {"add": "sum", "max": "max", "min": "min"}[value.prim]
                        for d, s in self._pieces(view, b.view):
                            p.record("accumulate", site, dst=d, src=s, reduce=reduce)
                        return
            self._store_value(p, view, value, where)
            return
        arr = np.asarray(value)
        if arr.size == 0:
            return
        v = arr.reshape(-1)[0]  # uniform: the evaluator made any other constant a value
        v = float(v) if not isinstance(v, (np.bool_, bool)) else float(bool(v))
        if type(view) is _batch.BView:
            if any(len(w.runs()) != 1 for w in view.views):
                raise _batch.Unbatchable()
            paths = [self._path(w) for w in view.views]
            p.record("fill", site, dst=_batch.per_iter(paths), value=v)
            return
        runs = view.runs()
        if len(runs) == 1:
            p.record("fill", site, dst=self._path(view), value=v)
        else:
            for r in runs:
                p.record("fill", site, dst=self._path(view, r), value=v)

    def _store_value(self, p, view, value, where):
        """`view[...] = value`: a store of the value (or into its window of the buffer)."""
        from ._jaxpr import _dt

        p.use(value)
        if type(view) is _batch.BView:
            steps = view.steps()
            if steps is None:
                raise _batch.Unbatchable()
            p.record("store", where.site, dst=_batch.per_iter([[view.buf.pos, s] for s in steps]), src=value.id)
            return
        steps = view.steps()
        if steps is not None:
            p.record("store", where.site, dst=[view.buf.pos, steps], src=value.id)
            return
        start, shape, strides, _ = view.window()
        if any(s != 1 for s in strides):
            raise unsupported("a store into a strided window of a ref", "windows with unit steps only", where)
        src = value.id
        if list(value.shape) != shape:  # integer indices: the window has ones there
            src = p.nvalues
            p.nvalues += 1
            p.record(
                "compute",
                where.site,
                id=src,
                kind={"k": "reshape"},
                args=[value.id],
                shape=shape,
                dtype=_dt(value.dtype, where),
            )
        p.record("store", where.site, dst=[view.buf.pos, []], src=src, start=start)

    def lower_dma(self, p, eqn, kind, src, dst, dst_sem, src_sem, dev, where, ev):
        if kind == "wait_send":
            src, dst = dst, src
            send, recv = dst_sem, src_sem
        else:
            send, recv = src_sem, dst_sem
        for r in (src, dst):
            if r.buf.kind == "smem" and r.buf.root.pos is None:
                if getattr(r.buf.root, "scratch", False) and not self.steered:
                    raise _steer.NeedsSteering("a DMA into or out of SMEM")
                raise unsupported(
                    "a DMA into or out of an SMEM operand",
                    "DMAs reach SMEM scratch (scalar prefetch and SMEM operands are read by scalars)",
                    where,
                )
            if r.buf.kind == "sem":
                raise kernel_error("misuse", f"`{r.buf.name}` is a semaphore, not a buffer", where)
        target = self.device_id(p, dev, eqn.params.get("device_id_type"), where, dma=True)
        if target is _BAD:
            return
        remote = target is not None
        if not self._check_same(p, src, dst, where):
            return
        recv_p = ev.sem_path(recv, where)
        send_p = ev.sem_path(send, where) if send is not None else None
        if remote and send_p is None:
            raise kernel_error("misuse", "a remote copy needs a send semaphore", where)
        site = where.site
        if kind == "start" and dst.buf.kind == "smem" and not remote:
            self.smem_unknown(p, dst)  # the DMA lands in this device's SMEM at some point
        for s, d in self._pieces(src, dst, blocks=True):
            i = p.ndesc = getattr(p, "ndesc", 0)
            p.ndesc += 1
            if remote:
                p.record("remote_copy", site, id=i, src=s, dst=d, send_sem=send_p, recv_sem=recv_p, dev=target)
            else:
                p.record("local_copy", site, id=i, src=s, dst=d, sem=recv_p)
            op = {"start": "start", "wait_send": "wait_send"}.get(kind) or ("wait_recv" if remote else "wait")
            p.record(op, site, id=i)

    # -- the pipeline of blocked operands

    def _block_view(self, hbm, bm, idx):
        dims = []
        for b, i, n in zip(bm.block_shape, idx, hbm.shape):
            if isinstance(b, pallas_core.Squeezed) or b is None:
                dims.append(int(i))
            elif isinstance(b, pallas_core.Blocked):
                dims.append((int(i) * b.block_size, b.block_size, 1))
            else:
                raise unsupported(
                    f"block dimension {b}", "Blocked and squeezed dimensions", _Where(None, self.spec.site, "BlockSpec")
                )
        return RefV(hbm, dims)

    def _block_indices(self, ev, bm, index):
        jx = bm.index_map_jaxpr
        args = [np.int32(i) for i in index] + [RefV(b) for b in self.kernel_bufs[: self.spec.num_index]]
        out = ev.run(jx.jaxpr, jx.consts, args)
        where = _Where(ev.p, self.spec.site, "index_map")
        return tuple(_concrete_int(o, "a block index", where) for o in out)

    def _copy(self, p, src, dst, what):
        site = self.spec.site
        where = _Where(p, site, what)
        for s, d in self._pieces(src, dst, blocks=True):
            i = p.ndesc = getattr(p, "ndesc", 0)
            p.ndesc += 1
            p.record("local_copy", site, id=i, src=s, dst=d, sem=[{"Arg": self.pipeline_sem}, None])
            p.record("start", site, id=i)
            p.record("wait", site, id=i)
        del where

    # -- evaluation

    def _device(self, device):
        if _batch.CHECK:  # both ways, compared (TPUSIM_LOOPS=check)
            snap = self.smem_snapshot(device)
            _batch.ENABLED = False
            try:
                want = self._device_once(device)
            finally:
                _batch.ENABLED = True
            self.smem_restore(device, snap)
            got = self._device_once(device)
            flat = [_batch.expand(ops) for ops in got]
            if flat != want:
                raise RuntimeError(
                    f"`{self.spec.name}`: batched loops recorded device {device} differently "
                    f"({_batch.first_difference(want, flat)})"
                )
            return got
        return self._device_once(device)

    def _device_once(self, device):
        # Blocked operands look at a point's neighbours: their grids are listed (the
        # budget refused grids too large to list before this); others go lazily.
        points = list(grid_points(self.grid)) if self.blocked else grid_points(self.grid)
        n = math.prod(self.grid)
        out = []
        for g, pt in enumerate(points):
            out.append(self._point(device, g, pt, n, points))
            self.budget.called(out[-1])
        return out

    def grid_points(self):
        """The grid's points in row-major order, listed."""
        return list(grid_points(self.grid))

    def point(self, device, g, points, asker):
        """The records of device `device` at grid point `g` of `points`, its questions
        answered by `asker` (its ``_steer.DeviceTrace``)."""
        return self._point(device, g, points[g], len(points), points, asker)

    def _block_ids(self, device, points):
        """Per blocked operand, its block index at every point of `points` on `device`."""
        got = self._blocks_at.get(device)
        if got is None:
            probe = Point(self, device, points[0] if points else ())
            ev = Evaluator(self, probe)
            got = self._blocks_at[device] = [
                [self._block_indices(ev, bm, pt) for pt in points] for (vb, hbm, bm, is_out) in self.blocked
            ]
        return got

    def _point(self, device, g, pt, n, points, asker=None):
        spec = self.spec
        p = Point(self, device, pt)
        p.asker = asker
        ev = Evaluator(self, p)
        ids = self._block_ids(device, points) if self.blocked else ()
        for k, (vb, hbm, bm, is_out) in enumerate(self.blocked):
            if not is_out and (g == 0 or ids[k][g] != ids[k][g - 1]):
                view = self._block_view(hbm, bm, ids[k][g])
                self._check_block(p, view, vb)
                self._copy(p, view, RefV(vb), "BlockSpec")
        if g == 0:
            self._sem_entry(p, device)
        ev.run(spec.jaxpr, [], [RefV(b) for b in self.kernel_bufs])
        for k, (vb, hbm, bm, is_out) in enumerate(self.blocked):
            if is_out and (g == n - 1 or ids[k][g] != ids[k][g + 1]):
                view = self._block_view(hbm, bm, ids[k][g])
                self._check_block(p, view, vb)
                self._copy(p, RefV(vb), view, "BlockSpec")
        if g == n - 1:
            self._sem_exit(p)
        p.drop_unused()
        if p.prints or (device, g) in self.prints:
            self.prints[(device, g)] = (p.name(), pt, p.prints)
        return [r for r in p.ops if type(r) is _batch.Copies or not r.get("dead")]

    def _check_block(self, p, view, vb):
        for d, n in zip(view.dims, view.buf.shape):
            lo, size = (d[0], d[1]) if isinstance(d, tuple) else (d, 1)
            if lo < 0 or lo + size > n:
                raise kernel_error(
                    "out of bounds",
                    f"the block of `{vb.name}` at {lo}..{lo + size} leaves a dimension of size {n}",
                    _Where(p, self.spec.site, "BlockSpec"),
                )

    # -- results

    def prints_any(self):
        """True when the kernel printed (`pl.debug_print`)."""
        return any(texts for _, _, texts in self.prints.values())

    def print_texts(self):
        """Prints the kernel's `pl.debug_print` texts, each with its device and grid point
        (what a TPU prints as the call runs)."""
        for key in sorted(self.prints):
            (chip, core), point, texts = self.prints[key]
            dev = f"device {chip}" + ("" if core is None else f" core {core}")
            for text in texts:
                print(f"[{dev}, grid point {list(point)}] {text}", flush=True)

    @functools.cached_property
    def input_operands(self):
        """The call's operand index of each Rust input (its non-SMEM inputs, in order)."""
        spec = self.spec
        return [
            spec.num_index + j
            for j, bm in enumerate(spec.gm.block_mappings[: spec.num_inputs])
            if space_of(bm.transformed_block_aval.memory_space) not in ("smem", "sem")
        ]

    @functools.cached_property
    def result_sources(self):
        """Per result of the call, the Rust output it is (``None``: an SMEM one)."""
        return [x if kind == "rust" else None for kind, x in self.out_sources]

    @functools.cached_property
    def smem_results(self):
        """The results the kernel keeps in SMEM: (result index, buffer)."""
        return [(k, x) for k, (kind, x) in enumerate(self.out_sources) if kind == "smem"]


def _batch_guard(batch, view, value):
    """A store in a batched body that may take back the records of the loads it
    stores (a copy or accumulate of loads): batched only when those loads are the
    body's own and no view differs between iterations."""
    if value.prim == "get":
        parts = [value]
    elif value.prim in ("add", "max", "min") and len(value.args) == 2:
        parts = [a for a in value.args if isinstance(a, Sym) and a.prim == "get"]
        if len(parts) < 2:
            return
    else:
        return
    if type(view) is _batch.BView or any(batch.outer(a) or type(a.view) is _batch.BView for a in parts):
        raise _batch.Unbatchable()
