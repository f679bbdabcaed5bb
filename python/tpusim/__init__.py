"""tpusim for Python: simulated TPU devices for Pallas distributed kernels.

Two ways in:

- JAX programs, unchanged: ``python -m tpusim run script.py`` (or ``with
  tpusim.simulate(devices=N):``) runs every ``pallas_call`` on tpusim's engine, with
  JAX itself around it (meshes, ``shard_map``, ``jit``, ``jnp``, collectives, ``grad``);
  ``tpusim.check(fn, *args)``, ``trace`` and ``model`` apply the verifier, step tables
  and the cost model to every ``pallas_call`` a function makes.
- the shipped collectives (``psum``, ``all_gather``, …) on numpy or jax arrays: ``run``,
  ``shard_map``, ``check``, ``trace``, ``model`` and ``bench`` by name.

Errors are exceptions carrying the Rust core's messages: :class:`BadInput`,
:class:`KernelError` (and :class:`UnsupportedError`), :class:`DeadlockError`,
:class:`ExitError`, :class:`LimitError`, :class:`NoAdapter`, :class:`GpuError`, all
subclasses of :class:`TpusimError`.
"""

import os as _os


def _quiet_driver():
    """Mesa's Wayland client (loaded with the GL backend even when nothing is displayed)
    prints ``error: XDG_RUNTIME_DIR is invalid or not set in the environment.`` when that
    variable is unset or not an absolute directory; tpusim never opens a window, so it
    points the variable at a private temporary directory for this process, before any
    GPU instance is made (as the command line does)."""
    v = _os.environ.get("XDG_RUNTIME_DIR")
    if v and _os.path.isabs(v) and _os.path.isdir(v):
        return
    import atexit
    import shutil
    import tempfile

    d = tempfile.mkdtemp(prefix="tpusim-runtime-")
    _os.environ["XDG_RUNTIME_DIR"] = d
    atexit.register(shutil.rmtree, d, True)


_quiet_driver()

import numpy as _np

from . import (
    _native,
    _tools,
    config,
)
from ._hook import last_error, simulate
from ._native import (
    BadInput,
    DeadlockError,
    ExitError,
    GpuError,
    KernelError,
    LimitError,
    Mesh,
    NoAdapter,
    TpusimError,
    UnsupportedError,
)
from ._plot import plot
from ._step import trace_step
from ._sweep import Sweep, SweepPoint, param, sweep
from ._tools import repeat_suffix as _repeat
from .results import BenchResults, Finding, ModelRun, Report, Row, Site, Table

__all__ = [
    "Mesh",
    "collectives",
    "variants",
    "presets",
    "adapters",
    "run",
    "shard_map",
    "check",
    "trace",
    "model",
    "bench",
    "plot",
    "random_inputs",
    "config",
    "Report",
    "Finding",
    "Site",
    "Table",
    "Row",
    "ModelRun",
    "BenchResults",
    "TpusimError",
    "BadInput",
    "KernelError",
    "UnsupportedError",
    "DeadlockError",
    "ExitError",
    "LimitError",
    "NoAdapter",
    "GpuError",
    "simulate",
    "last_error",
    "trace_step",
    "sweep",
    "param",
    "Sweep",
    "SweepPoint",
]


def collectives():
    """The shipped collectives: ``[{"name", "summary", "takes_op", "takes_perm", "apply_dims"}]``."""
    return _native.collectives()


def variants():
    """The deliberately broken variants ``check(..., variant=...)`` knows."""
    return _native.variants()


def presets():
    """The cost-model presets (figures and sources)."""
    return _native.presets()


def adapters():
    """The GPU adapters wgpu sees and the chosen one's limits (text)."""
    return _native.adapters()


def _mesh(mesh, devices):
    if mesh is not None:
        return mesh
    return Mesh(devices)


def _is_jax(x):
    return type(x).__module__.startswith(("jax", "jaxlib"))


def _like(outs, given):
    """Outputs as jax arrays when the inputs were."""
    if not any(_is_jax(g) for g in given):
        return outs
    import jax.numpy as jnp

    def conv(x):
        return [conv(y) for y in x] if isinstance(x, list) else jnp.asarray(x)

    return conv(outs)


def _arrays(xs):
    out = []
    for a in xs:
        a = _np.asarray(a)
        if a.dtype == _np.float64:
            a = a.astype(_np.float32)
        elif a.dtype == _np.int64:
            a = a.astype(_np.int32)
        # Not ascontiguousarray: it makes a 0-d array 1-d.
        out.append(_np.require(a, requirements="C"))
    return out


def _perm(perm):
    if isinstance(perm, str):
        return _native.parse_perm(perm)
    return None if perm is None else [tuple(p) for p in perm]


def run(name, inputs, *, mesh=None, axis=None, op="sum", perm=None, backend=None, schedule=None, all_outputs=False):
    """Runs shipped collective `name` on one array per device (``inputs[d]``, in mesh
    order); returns XLA's result per device (with `all_outputs`, every output ref of the
    kernel per device, e.g. psum's ``o_ref`` and ``hbm_buf``). On a multi-axis `mesh` a
    ring collective runs along `axis` (default ``"x"``; ``"x,y"``: one ring through
    both), every group of devices an independent ring; ``allreduce_2d`` and
    ``allreduce_torus`` run on the whole mesh."""
    mesh = _mesh(mesh, len(inputs))
    per = [_arrays([d]) for d in inputs]
    out = _native.collective_run(
        name,
        mesh,
        per,
        op,
        _perm(perm),
        backend or config.backend,
        schedule or config.schedule,
        axis,
    )
    # The all-reduces' result has the input's shape (as lax.psum's): the ring kernels view
    # their input as (1, N) and give the result back in the input's shape.
    if name in _ALL_REDUCES:
        for d, o in zip(per, out):
            if o and o[0].size == d[0].size:
                o[0] = o[0].reshape(d[0].shape)
    return _like(out if all_outputs else [d[0] for d in out], inputs)


_ALL_REDUCES = {"psum", "ring_allreduce", "ring_allreduce_push", "allreduce_2d", "allreduce_torus"}


def shard_map(
    name, x, *, mesh=None, devices=4, in_dim=None, out_dim=None, op="sum", perm=None, backend=None, axis=None
):
    """Like ``jax.shard_map(lambda x: lax.<collective>(x, "x"), …)`` on a global array:
    split along `in_dim`, run shipped collective `name` on every device, join along
    `out_dim` (defaults: the seed's partition specs, as ``tpusim apply`` uses)."""
    given = x
    (x,) = _arrays([x])
    out = _native.collective_shard_map(
        name, _mesh(mesh, devices), x, in_dim, out_dim, op, _perm(perm), backend or config.backend, axis
    )
    return _like([out], [given])[0]


def _devices(mesh, devices):
    return mesh.size if mesh is not None else devices


def check(
    name,
    *args,
    schedules=200,
    seed=0,
    variant=None,
    shape=None,
    replay=None,
    mesh=None,
    axis=None,
    repeat=1,
    devices=None,
    sequence=False,
):
    """The verifier on shipped collective `name` (or its broken `variant`), on a ring of
    `devices` (default 4; also the first positional argument) or on `mesh` (along
    `axis` for a ring collective on a multi-axis mesh); `repeat`: that many invocations
    back to back (the barrier semaphore carries over).

    ``check(fn, *args)``: every pallas_call the JAX function `fn(*args)` makes, verified
    under the default schedules (`replay`: under the one schedule a finding names): one
    :class:`Report` per distinct call (a list); with `sequence`, one report of all its
    calls in order as one sequence (each device entering the next call when it leaves
    one), `repeat` times. A function that makes no pallas_call is a :class:`BadInput`. `name` may also be a
    list of native kernel calls, checked as one sequence."""
    if callable(name):
        return _tools.check(
            name,
            *args,
            schedules=schedules,
            seed=seed,
            devices=devices,
            sequence=sequence,
            repeat=repeat,
            replay=replay,
        )
    devices = args[0] if args else (devices or 4)
    if isinstance(name, (list, tuple)):
        return _tools.check_calls(name, _devices(mesh, devices), schedules, seed, replay, repeat)
    r = _native.collective_check(name, devices, schedules, seed, variant, shape, replay, mesh, axis, repeat)
    title = f"{name}{' --variant ' + variant if variant else ''}{_repeat(repeat)} P={_devices(mesh, devices)}"
    return Report.from_dict(r, title)


def trace(name, *args, mesh=None, axis=None, dtype="f32", repeat=1, devices=None):
    """The step table of shipped collective `name` at P = `devices` (or on `mesh`);
    `repeat`: that many invocations back to back, rows per invocation.
    ``trace(fn, *args)``: the table of every pallas_call the JAX function makes."""
    if callable(name):
        return _tools.trace(name, *args, devices=devices)
    devices = args[0] if args else (devices or 4)
    return Table.from_dict(_native.collective_trace(name, devices, mesh, axis, dtype, repeat))


def model(
    name,
    *args,
    shape=None,
    dtype="f32",
    op="sum",
    preset="v5e",
    timeline=None,
    mesh=None,
    axis=None,
    topology=None,
    devices=None,
    **overrides,
):
    """Shipped collective `name` on the cost model's clock: modeled time, nccl-tests'
    algbw and busbw, the ideal ring bound; `timeline` writes the Chrome trace there.
    On `mesh` it is placed and wired as ``tpusim run --mesh … --model`` does it (a
    multi-axis mesh on its own torus unless `topology` says otherwise).

    ``model(fn, *args, preset=...)``: every pallas_call the JAX function makes on the
    cost model's clock (`timeline`: a directory for one Chrome trace per call),
    model-only: `fn` is lowered, not run, so `args` may be ``jax.ShapeDtypeStruct``s of
    production sizes (``execute=True`` runs it, for kernels whose schedule depends on
    operand values). Overrides: ``link_gbps``, ``vmem_bytes`` (the chip's VMEM) and the
    rest of ``tpusim run --model``'s figures."""
    if callable(name):
        return _tools.model(
            name, *args, preset=preset, timeline=timeline, topology=topology, devices=devices, **overrides
        )
    devices = args[0] if args else (devices or 4)
    # Checked (a stream opened) before the run, written whole after it.
    out = None if timeline is None else _native.check_output(timeline, "timeline")
    r = _native.collective_model(
        name,
        devices,
        shape,
        dtype,
        op,
        preset,
        list(overrides.items()) or None,
        timeline is not None,
        mesh,
        axis,
        topology,
    )
    return ModelRun.from_dict(r, out)


def bench(
    name,
    *args,
    devices=None,
    min_bytes="4K",
    max_bytes="64K",
    factor=4,
    iters=20,
    warmup=5,
    checks=1,
    dtype="f32",
    backend=None,
    schedule=None,
    mesh=None,
    axis=None,
    sizes=None,
    preset=None,
    reference=None,
    rtol=None,
    atol=None,
    traffic=None,
    label=None,
    topology=None,
    json=None,
    plot=None,
    **overrides,
):
    """``tpusim bench``: a size sweep of shipped collective `name` on `devices` (also
    the second positional argument; default 4), as a :class:`BenchResults` (what ran,
    where, and ``.rows``: one dict per size, ``size``, ``time_us``, ``algbw_gbps``,
    ``busbw_gbps``, ``roof_us``, ``wrong``, …; ``str()`` is the command line's table).

    ``bench(fn, make, sizes=[...])``: a sweep of a JAX function of your own, a row per
    size ``s`` of ``fn(*make(s))`` (``bench(fn, *args)``: one row of those arguments):
    ``size`` is the bytes of fn's arguments, ``time_us`` the time per call measured on
    tpusim's executor (``iters`` timed calls after ``warmup``; `backend` and `schedule`
    as :func:`simulate` takes them), or with ``preset=`` the modeled time of the
    pallas_calls it makes (model-only: ``make`` may return ``jax.ShapeDtypeStruct``s),
    ``algbw`` size / time, ``busbw`` algbw times the bus factor of ``traffic``
    (``all_gather``, ``all_reduce``, … on the call's devices; none: algbw), ``wrong`` the
    elements not within ``rtol``/``atol`` of ``reference(*args)`` (None without one).

    Both kinds: ``json=PATH`` writes the results as ``tpusim bench --json`` does (whole or
    not at all, checked before anything runs), ``plot=PATH`` draws them as
    ``tpusim plot`` does (.svg or .png)."""
    from . import _bench

    if callable(name):
        return _bench.bench(
            name,
            *args,
            sizes=sizes,
            preset=preset,
            iters=iters,
            warmup=warmup,
            reference=reference,
            rtol=rtol,
            atol=atol,
            traffic=traffic,
            devices=devices,
            backend=backend,
            schedule=schedule,
            name=label,
            json_path=json,
            plot=plot,
            topology=topology,
            **overrides,
        )
    mine = dict(sizes=sizes, preset=preset, reference=reference, rtol=rtol, atol=atol, traffic=traffic, label=label)
    given = [k for k, v in mine.items() if v is not None] + list(overrides) + (["topology"] if topology else [])
    if given:
        raise BadInput(
            f"bad input: {', '.join(given)} apply to a function of your own (bench(fn, ...)), "
            f"not to shipped collective `{name}`"
        )
    devices = args[0] if args else (devices or 4)
    out = None if json is None else _native.check_output(json, "bench results")
    results = BenchResults.from_dict(
        _native.collective_bench(
            name,
            devices,
            str(min_bytes),
            str(max_bytes),
            factor,
            iters,
            warmup,
            checks,
            dtype,
            backend or config.backend,
            schedule or "eager",
            mesh,
            axis,
        )
    )
    return _bench.save(results, out, plot)


def random_inputs(name, mesh, shape, dtype="f32", seed=0):
    """The deterministic random inputs ``tpusim run`` uses: ``[device][operand]``."""
    return _native.collective_inputs(name, mesh, list(shape), dtype, seed)
