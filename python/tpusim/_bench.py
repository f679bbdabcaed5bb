"""``tpusim.bench(fn, ...)``: a size sweep of a JAX function of one's own, in the terms of
``tpusim bench``: a row per size (the bytes of the function's arguments, its time,
algbw and busbw), measured on tpusim's executor or on the cost model's clock, written as
the command line's JSON file and drawn by its plot."""

import json
import time

import numpy as np

from . import _hook, _native, _plot, _sweep, _tools, config
from .results import BenchResults


def _leaves(args):
    import jax

    return jax.tree_util.tree_leaves(args)


def _nbytes(x):
    """Bytes of an array or a ``jax.ShapeDtypeStruct`` (a number: its own size)."""
    shape = getattr(x, "shape", ())
    dtype = np.dtype(getattr(x, "dtype", None) or np.asarray(x).dtype)
    return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


def _dtype_name(args):
    leaves = [x for x in _leaves(args) if hasattr(x, "dtype")]
    return str(np.dtype(leaves[0].dtype)) if leaves else "-"


def _points(args, sizes):
    """(size label, the arguments) per row: ``sizes`` given, `args` is one callable
    ``make(size) -> arguments``; else one row of `args` as they are."""
    if sizes is None:
        if len(args) == 1 and callable(args[0]) and not hasattr(args[0], "shape"):
            raise _native.BadInput("bad input: bench(fn, make) needs sizes=[...]: make(size) gives fn's arguments")
        return [(None, tuple(args))]
    if len(args) != 1 or not callable(args[0]) or hasattr(args[0], "shape"):
        raise _native.BadInput(
            "bad input: with sizes=, give one callable after fn, make(size) -> fn's arguments "
            "(e.g. lambda n: (np.ones((n, 128), np.float32),))"
        )
    sizes = list(sizes)
    if not sizes:
        raise _native.BadInput("bad input: sizes is empty: give at least one size")
    out = []
    for s in sizes:
        made = args[0](s)
        out.append((s, made if isinstance(made, tuple) else (made,)))
    return out


def _wrong(got, want, rtol, atol):
    """Elements of `got` not within tolerance of `want` (leaf by leaf; a shape that
    differs counts every element)."""
    got, want = _leaves(got), _leaves(want)
    if len(got) != len(want):
        raise _native.BadInput(
            f"bad input: the reference returned {len(want)} arrays, the function {len(got)}: they must match"
        )
    n = 0
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            n += max(g.size, w.size)
            continue
        if np.issubdtype(g.dtype, np.floating) or g.dtype.kind == "V" or "bfloat16" in str(g.dtype):
            close = np.isclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
        else:
            close = g == w
        n += int(np.size(close) - np.count_nonzero(close))
    return n


def _tolerance(dtype, rtol, atol):
    """(rtol, atol) for results of `dtype`: what was given, else f32's 1e-5 (bf16, f16: 2e-2)."""
    half = dtype in ("bfloat16", "float16")
    return (2e-2 if half else 1e-5) if rtol is None else rtol, (2e-2 if half else 1e-5) if atol is None else atol


def _timed(fn, args, iters, warmup, devices, backend, schedule):
    """(seconds per call of `fn(*args)` under tpusim, each call waited for; the last
    call's result; the plans of the first call's pallas_calls). The first call (JAX
    compiles, tpusim plans) and `warmup` more are not timed; only the first is observed,
    so that the timed calls run as a program's would."""
    import jax

    def call():
        res = fn(*args)
        jax.block_until_ready(res)
        _hook.wait_for_calls()
        return res

    plans = []
    with _hook.simulate(devices=devices, backend=backend, schedule=schedule):
        with _hook.observing(lambda what, plan: what == "call" and plans.append(plan)):
            res = call()
        for _ in range(warmup):
            call()
        start = time.perf_counter()
        for _ in range(iters):
            res = call()
        seconds = (time.perf_counter() - start) / iters
    return seconds, res, plans


def _row(name, size_label, args, seconds, factor):
    size = sum(_nbytes(x) for x in _leaves(args))
    first = _leaves(args)[:1]
    count = int(np.prod(getattr(first[0], "shape", ()), dtype=np.int64)) if first else 0
    algbw = size / seconds if seconds > 0 else 0.0
    return {
        "collective": name,
        "size": size,
        "count": count,
        "param": size_label,
        "time_us": seconds * 1e6,
        "algbw_gbps": algbw / 1e9,
        "busbw_gbps": algbw * factor / 1e9,
    }


def bench(
    fn,
    *args,
    sizes=None,
    preset=None,
    iters=10,
    warmup=2,
    reference=None,
    rtol=None,
    atol=None,
    traffic=None,
    devices=None,
    backend=None,
    schedule=None,
    name=None,
    json_path=None,
    plot=None,
    topology=None,
    **overrides,
):
    """See :func:`tpusim.bench`."""
    iters = _native.count("iters", "iters", iters)
    warmup = _native.count("warmup", "warmup", warmup)
    if iters < 1:
        raise _native.BadInput("bad input: iters (timed calls per size) must be at least 1")
    modeled = preset is not None
    if not modeled and (overrides or topology is not None):
        raise _native.BadInput(
            f"bad input: {', '.join(list(overrides) + (['topology'] if topology else []))} "
            "apply to the cost model: give preset="
        )
    # Checked before anything runs: the output files, the preset, the traffic class.
    out = None if json_path is None else _native.check_output(json_path, "bench results")
    tool = _tools.model_tool(preset, None, topology, **overrides) if modeled else None
    if traffic is not None:
        _native.bus_factor(traffic, 2)
    points = _points(args, sizes)
    name = name or getattr(fn, "__name__", None) or "kernel"
    if backend is not None:
        _native.backend(backend, name="backend")
    if schedule is not None:
        _native.schedule(schedule, name="schedule")
    backend = backend or config.backend
    schedule = schedule or config.schedule
    ctx = _native.bench_context(backend)
    rows, p, mesh, notes = [], None, None, []
    for label, a in points:
        if modeled:
            calls = _tools.model_calls(fn, a, tool, devices)
            if not calls:
                raise _native.BadInput("bad input: the function made no pallas_call: nothing to bench")
            runs = [r for _, r in calls]
            pt = _sweep.point(None, runs)
            seconds, plan = pt.seconds, calls[0][0]
            notes += [r.note for r in runs if r.note and r.note not in notes]
            res = None
            if reference is not None:
                res = _tools._run(fn, a, devices)
        else:
            seconds, res, plans = _timed(fn, a, iters, warmup, devices, backend, schedule)
            if not plans:
                raise _native.BadInput("bad input: the function made no pallas_call: nothing to bench")
            plan = plans[0]
        p = plan.P
        mesh = ",".join(f"{k}={n}" for k, n in plan.spec.axes) or "x=1"
        factor = 1.0 if traffic is None else _native.bus_factor(traffic, p)
        row = _row(name, label, a, seconds, factor)
        if res is not None:
            rt, at = _tolerance(_dtype_name(res), rtol, atol)
            row["wrong"] = _wrong(res, reference(*a), rt, at)
        else:
            row["wrong"] = None
        if modeled:
            row["calls"] = pt.calls
            row["tflops"] = pt.tflops
            row["hidden"] = pt.hidden
        rows.append(row)
    sizes_b = [r["size"] for r in rows]
    d = {
        "tpusim": ctx["tpusim"],
        "command": [_call_text(name, sizes, preset, iters, warmup, traffic, devices, overrides)],
        "date": ctx["date"],
        "devices": p,
        "mesh": mesh,
        "axis": None,
        "group_devices": p,
        "dtype": _dtype_name(points[0][1]),
        "schedule": schedule,
        "iters": None if modeled else iters,
        "warmup": None if modeled else warmup,
        "checks": int(reference is not None),
        "repeat": 1,
        "min_bytes": min(sizes_b),
        "max_bytes": max(sizes_b),
        "factor": None,
        "backend": None if modeled else backend,
        "executor": None if modeled else ctx["executor"],
        "adapter": None if modeled else ctx["adapter"],
        "timing": "modeled" if modeled else "measured",
        "model": preset,
        "topology": topology,
        "kernel": name,
        "traffic": traffic,
        "sizes": None if sizes is None else list(sizes),
        "rows": rows,
    }
    d["table"] = table(d, notes)
    return save(BenchResults.from_dict(d), out, plot)


def save(results, out, plot):
    """Writes `results` to `out` (a checked output, or None) and draws them to `plot`
    (a path, or None): `results`."""
    if out is not None:
        out.write(json.dumps(results.json(), indent=2))
        results.json_path = str(out.path)
    if plot is not None:
        _plot.plot(results, plot)
    return results


def _call_text(name, sizes, preset, iters, warmup, traffic, devices, overrides):
    parts = [name]
    if sizes is not None:
        parts.append(f"sizes={list(sizes)!r}")
    if preset is not None:
        parts.append(f"preset={preset!r}")
    else:
        parts += [f"iters={iters}", f"warmup={warmup}"]
    if traffic is not None:
        parts.append(f"traffic={traffic!r}")
    if devices is not None:
        parts.append(f"devices={devices}")
    parts += [f"{k}={v!r}" for k, v in overrides.items()]
    return f"tpusim.bench({', '.join(parts)})"


def table(d, notes=()):
    """The command line's table of a kernel's sweep: a header saying what ran, then a
    line per size."""
    modeled = d["timing"] == "modeled"
    where = (
        f"on the cost model {d['model']}" if modeled else f"iters={d['iters']} warmup={d['warmup']} on {d['adapter']}"
    )
    bus = f"busbw: algbw x {d['traffic']}'s bus factor" if d["traffic"] else "busbw: algbw (no traffic= named)"
    lines = [
        f"# tpusim bench: {d['kernel']} P={d['devices']} ({d['mesh']}) dtype={d['dtype']} {where}",
        f"# size: bytes of the function's arguments; time: {'modeled, every pallas_call it makes, summed' if modeled else 'measured per call'}; {bus}",
    ]
    lines += [f"# {n}" for n in notes]
    head = f"{'kernel':<21} {'param':>8} {'size':>12} {'count':>12} {'time(us)':>11} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'#wrong':>7}"
    if modeled:
        head += f" {'TFLOP/s':>9} {'hidden%':>8}"
    lines.append(head)
    for r in d["rows"]:
        label = "-" if r["param"] is None else str(r["param"])
        wrong = "-" if r["wrong"] is None else str(r["wrong"])
        line = (
            f"{r['collective']:<21} {label:>8} {r['size']:>12} {r['count']:>12} {r['time_us']:>11.3f} "
            f"{r['algbw_gbps']:>12.3f} {r['busbw_gbps']:>12.3f} {wrong:>7}"
        )
        if modeled:
            tf = "-" if r["tflops"] is None else f"{r['tflops']:.2f}"
            hid = "-" if r["hidden"] is None else f"{100 * r['hidden']:.0f}"
            line += f" {tf:>9} {hid:>8}"
        lines.append(line)
    return "\n".join(lines)
