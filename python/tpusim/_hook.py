"""tpusim as the engine behind ``pallas_call``.

JAX lowers a ``pallas_call`` through one rule (``pallas_call._pallas_call_lowering``,
which ``pl.kernel`` and ``pl.core_map`` reach too). :func:`install` wraps it: a call
whose ``interpret`` is :class:`TpusimParams` — what :func:`simulate` makes every
``pallas_call`` get, as JAX's ``force_tpu_interpret_mode`` does for its interpreter —
lowers to one XLA custom call per device (``jax.ffi.ffi_call`` of tpusim's handler),
with the device's index and its operands. The P devices' calls meet in Rust, without
the GIL (:class:`Meeting`, ``xla_call.rs``); the last to arrive hands every device's
buffers to Python once, which evaluates the kernel jaxpr (once per kernel, shapes,
mesh and SMEM values: the plan is cached) and runs the Rust pipeline, which reads the
operands and writes the results in XLA's buffers; the rounds after it with the same SMEM
values run that run again from Rust alone. Everything around the kernel is JAX's.
"""

import contextlib
import dataclasses
import functools
import threading

import numpy as np

from . import _native, config

_installed = False
_lock = threading.Lock()
#: Set by :func:`simulate_globally` (``python -m tpusim``): every pallas_call of the
#: process runs on tpusim, also under a ``force_tpu_interpret_mode`` or
#: ``set_tpu_interpret_mode`` of the script's own, which would otherwise replace
#: tpusim's params and run the call in JAX's interpreter.
_everywhere = False


def _jax():
    import jax

    return jax


# The interpret value that routes a pallas_call here (a subclass of JAX's TPU interpret
# params, so the effects and checks JAX applies to interpreted calls apply).
TpusimParams = None


def install():
    """Wraps JAX's pallas_call lowering (once)."""
    global _installed, TpusimParams
    with _lock:
        if _installed:
            return
        from jax._src.interpreters import mlir
        from jax._src.pallas import pallas_call as pc
        from jax._src.pallas.mosaic.interpret import params as tpu_params

        @dataclasses.dataclass(frozen=True)
        class _TpusimParams(tpu_params.InterpretParams):
            """``interpret=`` value of a pallas_call that tpusim runs. `planning`: a
            model-only lowering's number (part of jit's cache key, so that each one
            lowers, and plans, its calls afresh)."""

            planning: int = 0

        _TpusimParams.__name__ = _TpusimParams.__qualname__ = "TpusimParams"
        TpusimParams = _TpusimParams
        original = pc._pallas_call_lowering

        from jax._src import config as jax_config

        def lowering(ctx, *in_nodes, interpret, **params):
            # A pallas_call made (constructed) outside `simulate` but lowered inside it
            # runs here too: the context's value is part of jit's cache key.
            active = jax_config.pallas_tpu_interpret_mode_context_manager.value
            if _everywhere or isinstance(interpret, TpusimParams) or isinstance(active, TpusimParams):
                impl = functools.partial(_impl, **params)
                return mlir.lower_fun(impl, multiple_results=True)(ctx, *in_nodes)
            return original(ctx, *in_nodes, interpret=interpret, **params)

        pc._pallas_call_lowering = lowering
        # JAX gives interpreted calls the IO effects of its callbacks; tpusim's custom
        # call has none, and with none jit keeps its C++ fast path (no runtime token).
        from jax._src import effects as jax_effects
        from jax._src.pallas import core as pallas_core

        interpret_effects = pallas_core.get_interpret_effects

        def effects_of(interpret):
            if _everywhere or isinstance(interpret, TpusimParams):
                return jax_effects.no_effects
            return interpret_effects(interpret)

        pallas_core.get_interpret_effects = effects_of
        mlir.register_lowering(pc.pallas_call_p, lowering)
        jax = _jax()
        jax.ffi.register_ffi_target(_TARGET, jax.ffi.pycapsule(_native.ffi_handler_address()), platform="cpu")
        _installed = True


#: The custom call target of every simulated pallas_call (``xla_call.rs``).
_TARGET = "tpusim_pallas_call"


def _impl(*args, out_avals, **params):
    """The traced body of a pallas_call: one custom call per device."""
    jax = _jax()
    import jax.numpy as jnp
    from jax import lax
    from jax._src import core as jax_core

    from ._plan import CallSpec

    axis_sizes = dict(jax_core.get_axis_env().axis_sizes)
    params = dict(params, out_avals=out_avals)
    spec = CallSpec(params, axis_sizes)
    meeting = Meeting(spec, [(a.shape, _host_dtype(a.dtype)) for a in (x.aval for x in args)])
    if _planning is not None:  # model-only: planned now, never run
        _planning.append(meeting.plan_without_data())
    device = jnp.int32(0)
    for k, n in axis_sizes.items():  # row-major over the mesh axes, as Meeting numbers them
        device = device * n + lax.axis_index(k).astype(jnp.int32)
    header = jnp.stack([jnp.int32(meeting.id), device])
    shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in out_avals]
    outs = jax.ffi.ffi_call(_TARGET, shapes, has_side_effect=True)(header, *args)
    return list(outs)


def _host_dtype(dtype):
    """The numpy dtype of an operand's bytes: a semaphore's count is an int32."""
    from ._jaxpr import sem_kind

    return np.dtype(np.int32) if sem_kind(dtype) else np.dtype(dtype)


# ---------------------------------------------------------------- meeting


#: Plans by kernel, shapes, mesh and SMEM values (any lowering of the same call).
_plans = {}


class Meeting:
    """Where the P devices' calls of one lowered pallas_call meet, call after call: the
    rendezvous is Rust's (``xla_call.rs``); :meth:`run_bytes` runs the gathered call."""

    timeout = 120.0

    def __init__(self, spec, in_avals):
        self.spec = spec
        self.in_avals = in_avals
        self.P = 1
        for _, n in spec.axes:
            self.P *= n
        self.id = _native.meeting_register(spec.name, self.P, self.run_round, _failed, self.timeout)

    def run_round(self, bufs):
        """Runs the gathered call on one round's buffers (``CallBuffers``: every device's
        operands, read in place, and results, written in place)."""
        try:
            # On the GPU, run_into runs on the GPU executor's own thread (Rust's).
            self._run(bufs)
        except BaseException as e:  # every device's call fails with it
            global _last_error
            _last_error = e
            # Ctrl-C stopped the call (tpusim._native.check_interrupt): as it is.
            if isinstance(e, (_native.TpusimError, KeyboardInterrupt)):
                raise
            # A bug of tpusim's own: JAX's error carries the message only, so say where.
            import traceback

            raise RuntimeError(f"tpusim internal error: {''.join(traceback.format_exception(e)).strip()}") from e

    def plan(self, smem):
        """The cached plan for these SMEM operand values (`smem[device]`: operand index →
        array, for the scalar prefetch and SMEM operands, per Rust device)."""
        from ._plan import Plan
        from ._steer import NeedsSteering

        key = (self.spec.key(), tuple(a.tobytes() for per in smem for _, a in sorted(per.items())))
        plan = _plans.get(key)
        if plan is None:
            try:
                plan = Plan(self.spec, smem)
            except NeedsSteering:
                # The kernel decides by values it computes: traced at each call as it runs.
                plan = Plan(self.spec, smem, steered=True)
            if len(_plans) >= 64:
                _plans.pop(next(iter(_plans)))
            _plans[key] = plan
            _observe("planned", plan)
            if _vetting:
                _vet(plan)
        return plan

    def plan_without_data(self):
        """The plan of a call that model-only looks at: made from the kernel alone, when
        its schedule does not depend on operand values (SMEM, scalar prefetch) or on
        what it computes; otherwise a BadInput saying so."""
        spec = self.spec
        keys = sorted(set(range(spec.num_index)) | set(spec.smem_inputs))
        if keys:
            raise NeedsValues(
                f"`{spec.name}` reads SMEM or scalar-prefetch operands (operands {keys}), "
                "whose values decide its schedule"
            )
        plan = self.plan([{} for _ in range(self.P * spec.cores)])
        if plan.steered:
            raise NeedsValues(f"`{spec.name}` decides what it does by values it computes")
        return plan

    def _run(self, bufs):
        epoch = _native.settings_epoch()  # before the settings this run follows are read
        backend, schedule = _backend(), config.schedule
        spec, cores = self.spec, self.spec.cores
        keys = sorted(set(range(spec.num_index)) | set(spec.smem_inputs))
        smem = [
            {k: np.frombuffer(bufs.operand_bytes(d, k), self.in_avals[k][1]).reshape(self.in_avals[k][0]) for k in keys}
            for d in range(self.P)
        ]
        # The cores of a chip are devices of the Rust mesh, reading their chip's operands.
        rows = [r // cores for r in range(self.P * cores)]
        plan = self.plan([smem[x] for x in rows])
        if not plan.steered:
            _observe("call", plan)
            if _skip_runs:  # a script under `python -m tpusim model`: timed, not run
                bufs.zero_results()
                return
        out_rows = [x * cores for x in range(self.P)]
        try:
            plan.call.run_into(
                bufs, rows, plan.input_operands, out_rows, plan.result_sources, backend=backend, schedule=schedule
            )
        except _native.TpusimError:
            if not _tolerant:
                raise
            # The tools report what went wrong; the program goes on with zeros.
            bufs.zero_results()
        else:
            plan.print_texts()
            if not plan.smem_results and not _observers and not plan.prints_any() and not plan.steered:
                # Nothing of this plan is read per call but its key operands' values: the
                # next rounds with the same values run it from Rust (chosen by their bytes).
                _native.meeting_save_run(
                    self.id,
                    epoch,
                    bufs,
                    keys,
                    plan.call,
                    rows,
                    plan.input_operands,
                    out_rows,
                    plan.result_sources,
                    backend,
                    schedule,
                )
        for k, buf in plan.smem_results:
            a = spec.out_avals[k]
            for x, r in enumerate(out_rows):
                v = np.ascontiguousarray(np.asarray(buf.smem[r]).astype(a.dtype).reshape(a.shape))
                bufs.write_result(x, k, v.reshape(-1).view(np.uint8))
        if plan.steered:
            # Traced at this call from its inputs, which a tool looking at it goes by.
            _observe("call", plan)


class NeedsValues(_native.BadInput):
    """A call model-only cannot plan without operand values (`why` says which): on
    concrete arrays ``tpusim.model`` then runs it; on shapes alone it is bad input."""

    def __init__(self, why):
        super().__init__(
            f"bad input: {why}: model it on concrete arrays, which tpusim.model then runs "
            "(execute=True; python -m tpusim model --execute)"
        )
        self.why = why


_last_error = None

#: While a model-only lowering runs (:func:`plan_calls`): the plans of its calls, in order.
_planning = None
#: Set by ``python -m tpusim model`` (without ``--execute``): each call is planned and
#: handed to the tools, and returns zeros instead of running.
_skip_runs = False
_plannings = [0]


def plan_calls(fn, args, devices=None):
    """Model-only: the plans of every pallas_call `fn(*args)` makes, from lowering it
    (`args` may be ``jax.ShapeDtypeStruct``s: no data is made, none is run)."""
    global _planning
    jax = _jax()
    from jax._src import config as jax_config

    with simulate(devices=devices):
        _plannings[0] += 1
        prev = jax_config.pallas_tpu_interpret_mode_context_manager.swap_local(TpusimParams(planning=_plannings[0]))
        _planning = plans = []
        try:
            jax.jit(fn).lower(*args)
        finally:
            _planning = None
            jax_config.pallas_tpu_interpret_mode_context_manager.set_local(prev)
    return plans


#: Set by ``python -m tpusim run``: each new plan is held to the verifier on the one
#: schedule the run follows (:func:`_vet`). Not an observer, so that repeated calls keep
#: running from Rust.
_vetting = False
#: The kernels `_vet` has spoken of.
_vetted = set()


def _vet(plan):
    """Says on stderr, once per kernel, when the verifier finds a problem that the run's
    one schedule need not show (happens-before does not depend on the schedule that
    ran), or, for a kernel too large to vet in a run, that ``check`` verifies it."""
    import sys

    from .results import Report

    title = plan.title()
    if title in _vetted:
        return
    _vetted.add(title)
    schedule = config.schedule
    try:
        r = plan.call.vet(schedule)
    except _native.TpusimError:
        return  # the run itself says what is wrong
    if r is None:
        print(
            f"tpusim: {title}: `run` followed one schedule ({schedule}); "
            "`python -m tpusim check` with the same arguments verifies the kernel under many",
            file=sys.stderr,
        )
        return
    r = Report.from_dict(r, title)
    if not r.clean:
        n = len(r.findings)
        print(
            f"tpusim: warning: {title}: `run` followed one schedule ({schedule}), which need not show what "
            f"the verifier finds in this kernel: {n} problem{'' if n == 1 else 's'} "
            f"({', '.join(sorted(set(r.kinds())))}); `python -m tpusim check` with the same arguments "
            f"reports {'it' if n == 1 else 'them'}",
            file=sys.stderr,
        )


def _failed(message):
    """A call that failed in the meeting itself (a device that never came)."""
    global _last_error
    _last_error = _native.BadInput(message)


#: While the tools (check, trace, model) look at a function in code, a call that fails
#: to run returns zeros: its report says why (``_tools.collecting``).
_tolerant = 0


def last_error():
    """The tpusim error the last failed pallas_call raised (JAX re-raises it as a
    runtime error of its own)."""
    return _last_error


def _backend():
    """`config.backend`, with `auto` resolved as the command line resolves it (the GPU
    executor on a hardware adapter, else the CPU one): ``"gpu"`` or ``"cpu"``."""
    return _native.resolve_backend(config.backend)


# ---------------------------------------------------------------- observers

#: Callbacks told of every plan made ("planned") and every call run ("call").
_observers = []


def _observe(what, plan):
    for f in list(_observers):
        f(what, plan)


@contextlib.contextmanager
def observing(f):
    _observers.append(f)
    _native.forget_saved_runs()  # every call is observed: none may run unseen
    try:
        yield
    finally:
        _observers.remove(f)


# ---------------------------------------------------------------- simulate


#: The TPU generation code that asks JAX about its chip sees (``--chip``): its JAX
#: device kind and TensorCores per chip.
CHIPS = {"v4": ("TPU v4", 2), "v5e": ("TPU v5 lite", 1), "v5p": ("TPU v5", 2), "v6e": ("TPU v6 lite", 1)}
_chip = ["v5e"]


def set_chip(name):
    """Makes JAX's questions about the TPU (``pltpu.get_tpu_info()``, a TensorCoreMesh's
    default core count, ``emit_pipeline``'s tiling) answer for chip `name` while the
    devices are JAX's CPU devices; a real TPU's answers are kept."""
    if name not in CHIPS:
        raise _native.BadInput(f"bad input: chip `{name}`; tpusim knows {', '.join(CHIPS)}")
    _chip[0] = name
    from jax._src import tpu_info
    from jax._src.pallas.mosaic import core as mosaic_core

    if getattr(tpu_info, "_tpusim", False):
        return
    kind, num = tpu_info.get_device_kind, tpu_info.get_num_device_cores

    def device_kind():
        k = kind()
        return CHIPS[_chip[0]][0] if tpu_info.chip_version_from_device_kind(k) is None and k.lower() == "cpu" else k

    def num_cores():
        try:
            return num()
        except AttributeError:  # a CPU device has no core count
            return CHIPS[_chip[0]][1]

    def default_cores():
        # A CPU device has no core count; inside a shard_map the abstract device's is None.
        try:
            n = default()
        except AttributeError:
            n = None
        return CHIPS[_chip[0]][1] if n is None else n

    default = mosaic_core._get_default_num_cores
    from jaxlib import _jax

    if not hasattr(_jax.Device, "num_cores"):
        # A CPU device has no TensorCore count; code asking the device gets the chip's.
        _jax.Device.num_cores = property(lambda self: CHIPS[_chip[0]][1])
    tpu_info.get_device_kind = device_kind
    tpu_info.get_num_device_cores = num_cores
    mosaic_core._get_default_num_cores = default_cores
    # TensorCoreMesh's dataclass default was bound to the original function.
    mesh_init = mosaic_core.TensorCoreMesh.__init__

    def tensorcore_mesh_init(self, *, axis_name, num_cores=None, **kw):
        mesh_init(self, axis_name=axis_name, num_cores=default_cores() if num_cores is None else num_cores, **kw)

    mosaic_core.TensorCoreMesh.__init__ = tensorcore_mesh_init
    tpu_info._tpusim = True


def ensure_devices(n, name="devices"):
    """Makes JAX start with `n` CPU devices (before its first use), or checks it has;
    `n` (called `name` in messages) is checked as the command line checks ``-p``, and
    against what this system can start."""
    if n is None:
        return
    n = _native.count("devices", name, n)
    jax = _jax()
    from jax._src import xla_bridge

    if not xla_bridge.backends_are_initialized():
        # What JAX cannot start is refused before it is asked (it aborts the process,
        # or runs for minutes, past the system's threads or memory).
        _native.ensure_host_devices_fit(name, n)
        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", int(n))
        return
    have = len(jax.devices())
    if have < n:
        raise _native.BadInput(
            f"bad input: JAX already started with {have} devices, fewer than the {n} asked for: "
            "enter tpusim.simulate(devices=N) before JAX's first use, or run the script "
            "with `python -m tpusim run --devices N`"
        )


@contextlib.contextmanager
def simulate(devices=None, backend=None, schedule=None, chip="v5e"):
    """Runs every ``pallas_call`` made (traced) inside on tpusim's engine, whatever its
    ``interpret=``; `devices`: JAX's CPU device count (set before JAX's first use);
    `chip`: the TPU generation JAX's TPU queries answer for (see :func:`set_chip`)."""
    # Checked as the command line checks them, before anything changes.
    if backend is not None:
        _native.backend(backend, name="backend")
    if schedule is not None:
        _native.schedule(schedule, name="schedule")
    install()
    prev_chip = _chip[0]
    set_chip(chip)
    from jax._src import config as jax_config

    ensure_devices(devices)
    prev_cfg = (config.backend, config.schedule)
    if backend is not None:
        config.backend = backend
    if schedule is not None:
        config.schedule = schedule
    prev = jax_config.pallas_tpu_interpret_mode_context_manager.swap_local(TpusimParams())
    try:
        yield
    except Exception as e:
        raise_ours(e)
        raise
    finally:
        jax_config.pallas_tpu_interpret_mode_context_manager.set_local(prev)
        config.backend, config.schedule = prev_cfg
        _chip[0] = prev_chip


def wait_for_calls(report=False):
    """Waits for the pallas_calls JAX dispatched asynchronously. tpusim's calls have no
    effects (so jit keeps its fast path), so ``jax.effects_barrier`` alone does not wait
    for them: every live array is waited for, then a computation on every device, which
    JAX's CPU client starts only after the multi-device computations before it (those
    whose results were dropped). With `report` (a script's end), the first error of a
    call whose result is still alive (one the script kept but may never have looked at)
    is raised; a call whose result is gone raised its error where it was used, if it was."""
    jax = _jax()
    first = None
    for a in jax.live_arrays():
        try:
            a.block_until_ready()
        except Exception as e:
            first = first or e
    devices = jax.devices()
    if len(devices) > 1:
        try:
            jax.block_until_ready(_barrier(tuple(devices))())
        except Exception:
            pass
    jax.effects_barrier()
    if report and first is not None:
        raise first


@functools.lru_cache(maxsize=4)
def _barrier(devices):
    jax = _jax()
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(devices), ("tpusim_barrier",))
    spec = PartitionSpec("tpusim_barrier")
    x = jax.device_put(np.zeros(len(devices), np.int32), NamedSharding(mesh, spec))
    f = jax.jit(jax.shard_map(lambda v: v + 1, mesh=mesh, in_specs=spec, out_specs=spec))
    return lambda: f(x)


def raise_ours(e):
    """Re-raises JAX's runtime error for a failed call as tpusim's own exception (with
    its kind, sites and details), when it is one."""
    ours = _last_error
    if ours is None or isinstance(e, _native.TpusimError):
        return
    if type(e).__name__ in ("JaxRuntimeError", "XlaRuntimeError") and str(ours).split("\n")[0] in str(e):
        if isinstance(ours, _native.TpusimError):
            raise ours.with_traceback(None) from e
        raise ours from e


def simulate_globally(chip="v5e"):
    """What ``python -m tpusim run`` does before the script: every pallas_call of the
    process runs on tpusim, whatever its ``interpret=`` and whatever interpret mode the
    script sets (``force_tpu_interpret_mode``, ``set_tpu_interpret_mode``)."""
    global _everywhere
    install()
    set_chip(chip)
    _everywhere = True
    from jax._src import config as jax_config

    jax_config.pallas_tpu_interpret_mode_context_manager.set_global(TpusimParams())
