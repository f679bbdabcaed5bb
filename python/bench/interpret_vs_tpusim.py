"""The seed's four kernels, side by side: JAX's TPU interpret mode against tpusim, the
same unchanged scripts (python/tests/seed/), the same sizes, in one run; with
`--kernels moe,ragged`, the kernels of python/examples/moe_ep.py that steer themselves.

Needs the package's Python (jax[cpu] and tpusim installed, as python/test.sh makes it):

    python/.venv/bin/python python/bench/interpret_vs_tpusim.py --sizes 4K,128K -p 4,8

Every case runs in its own process with a time limit (interpret mode can hang). For
JAX the script runs under `pltpu.force_tpu_interpret_mode(pltpu.InterpretParams())`, for
tpusim under `tpusim.simulate(devices=P)`; nothing in the scripts changes but their
literal shard shapes (8, 128) and block_size (16, 128), scaled to the size asked for.
Each case reports the first call (the script's own pallas_result, including JAX's
compilation and tpusim's planning); then untimed calls of the same jitted function on
the same input, at least `--warmup` of them and for at least `--warmup-seconds` (the
first calls after a compile run slower while the process's memory settles: tpusim's
all_gather at P=4, 128 KiB, averages 0.64 ms over calls 25-50 and 0.5-0.6 ms after);
then the mean and median per call of at least `--reps` timed calls lasting at least
`--seconds` (the same rule in both modes: interpret mode's 20 calls last about a second
or more, tpusim's take milliseconds, so it makes many more), and the wrong elements of
the script's first result and of the last timed one against numpy. The timed calls run
back to back: checking each result between them would time numpy's work too, the next
call starting on caches and an allocator the check has stirred (that all_gather: 0.81 ms
a call checked between calls, 0.56 ms back to back). The speed-up is the ratio of the
means.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = os.path.join(HERE, "..", "tests", "seed")
KERNELS = ["ppermute", "all_gather", "psum", "psum_scatter"]
# Kernels of the project's own steered by what they compute (run while tracing), from
# python/examples/moe_ep.py: `--kernels moe,ragged` (size: tokens of 128 bf16, rows of 8 i32).
STEERED = ["moe", "ragged"]


def source(kernel, shard_bytes, p):
    src = open(os.path.join(SEED, f"seed_{kernel}.py")).read()
    if kernel == "psum_scatter":
        rows = max(2, shard_bytes // (4 * 128 * p) // 2 * 2)
        src = src.replace("block_size = (16, 128)", f"block_size = ({rows}, 128)")
    else:
        rows = max(1, shard_bytes // (4 * 128))
        src = src.replace("8, 128", f"{rows}, 128").replace("(8 * num_devices", f"({rows} * num_devices")
    return src


def reference(kernel, x, p):
    import numpy as np

    if kernel == "ppermute":
        s = np.split(x, p, axis=1)
        return np.concatenate([s[(d - 1) % p] for d in range(p)], axis=1)
    if kernel == "all_gather":
        return np.concatenate([np.stack(np.split(x, p, axis=0))] * p, axis=0)
    if kernel == "psum":
        t = np.sum(np.stack(np.split(x.astype(np.float64), p, axis=1)), axis=0)
        return np.concatenate([t] * p, axis=1)
    s = [a.astype(np.float64).reshape(p, -1, a.shape[1]) for a in np.split(x, p, axis=1)]
    b = np.sum(np.stack(s), axis=0)
    return b.reshape(-1, b.shape[2])


def _context(mode, p, detect_races=False, seed=0):
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", p)
    if mode == "jax":
        from jax.experimental.pallas import tpu as pltpu

        return pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(detect_races=detect_races, random_seed=seed))
    import tpusim

    return tpusim.simulate(devices=p, backend=mode.split("-")[1])


def steered(kernel, p, shard_bytes):
    """(the jitted function, its inputs, a check of a result against the reference) of a
    kernel of moe_ep.py at `shard_bytes` per device."""
    import jax
    import numpy as np

    sys.path.insert(0, os.path.join(HERE, "..", "examples"))
    import moe_ep

    mesh = jax.make_mesh((p,), ("x",))
    if kernel == "moe":
        cfg = dict(T=max(2, shard_bytes // 256), H=128, F=256, E=max(8, p), K=2)
        args = moe_ep.moe_inputs(mesh, "x", **cfg)
        want = np.asarray(moe_ep.moe_reference(*args, K=2))
        return (
            moe_ep.moe_call(mesh, "x", **cfg),
            args,
            lambda y: int(np.sum(~np.isclose(np.asarray(y), want, rtol=1e-4, atol=1e-4))),
        )
    rows = max(1, shard_bytes // 32)
    host = np.random.default_rng(0).integers(0, 1000, size=(p * rows, 8)).astype(np.int32)
    x = jax.device_put(host, jax.NamedSharding(mesh, jax.sharding.PartitionSpec("x")))
    want, want_n = moe_ep.ragged_reference(host, p)
    return (
        moe_ep.ragged_call(mesh, "x", T=rows, H=8),
        (x,),
        lambda y: int(np.sum(np.asarray(y[0]) != want) + np.sum(np.asarray(y[1]) != want_n)),
    )


def steered_child(mode, kernel, p, shard_bytes, reps, warmup, seconds, warmup_seconds):
    with _context(mode, p):
        import jax

        t0 = time.perf_counter()
        g, args, wrong_in = steered(kernel, p, shard_bytes)
        first_y = jax.block_until_ready(g(*args))
        first = time.perf_counter() - t0
        calls(lambda a: g(*a), args, warmup, warmup_seconds)
        times, y = calls(lambda a: g(*a), args, reps, seconds)
        wrong = wrong_in(first_y) + wrong_in(y)
    median = sorted(times)[len(times) // 2]
    print(
        json.dumps(
            {"first": first, "per_call": sum(times) / len(times), "median": median, "wrong": wrong, "reps": len(times)}
        )
    )


def child(mode, kernel, p, shard_bytes, reps, warmup, seconds, warmup_seconds):
    import numpy as np

    if kernel in STEERED:
        return steered_child(mode, kernel, p, shard_bytes, reps, warmup, seconds, warmup_seconds)
    with _context(mode, p):
        import jax

        mod = {"__name__": "__main__"}
        t0 = time.perf_counter()
        exec(compile(source(kernel, shard_bytes, p), f"seed_{kernel}.py", "exec"), mod)
        jax.block_until_ready(mod["pallas_result"])
        first = time.perf_counter() - t0
        part, P = mod["partition"], mod["P"]
        f, ins, outs = {
            "ppermute": (mod.get("right_shift"), part, part),
            "all_gather": (mod.get("all_gather"), part, part),
            "psum": (mod.get("psum_pallas"), part, part),
            "psum_scatter": (mod.get("pallas_reduce_scatter"), P(None, "x"), P("x", None)),
        }[kernel]
        g = jax.jit(jax.shard_map(f, mesh=mod["mesh"], in_specs=ins, out_specs=outs, check_vma=False))
        x = mod["input_arr"]
        jax.block_until_ready(g(x))  # compiled (and planned) once, as a program calling it many times
        calls(g, x, warmup, warmup_seconds)
        want = reference(kernel, np.asarray(x), p)

        def wrong_in(y):
            return int(np.sum(~np.isclose(np.asarray(y), want, rtol=1e-5, atol=1e-6)))

        wrong = wrong_in(mod["pallas_result"])  # the script's own (psum's first result)
        # Back to back: checking a result between calls would time numpy's traces too.
        times, y = calls(g, x, reps, seconds)
        wrong += wrong_in(y[0] if kernel == "psum" else y)
    median = sorted(times)[len(times) // 2]
    print(
        json.dumps(
            {"first": first, "per_call": sum(times) / len(times), "median": median, "wrong": wrong, "reps": len(times)}
        )
    )


def calls(g, x, n, seconds):
    """Calls g(x) at least n times and until `seconds` have passed: each call's time, the last result."""
    import jax

    times, start, y = [], time.perf_counter(), None
    while len(times) < n or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        y = jax.block_until_ready(g(x))
        times.append(time.perf_counter() - t0)
    return times, y


def broken_child(mode, p, seed):
    """The all_gather with one shared receive semaphore (tests/shared_recv_sem.py) once:
    JAX interpret mode with its race detector, or tpusim's verifier and a run."""
    import numpy as np

    path = os.path.join(HERE, "..", "tests", "shared_recv_sem.py")
    src = open(path).read()
    with _context(mode, p, detect_races=True, seed=seed):
        import jax

        mod = {"__name__": "__main__"}
        exec(compile(src, "shared_recv_sem.py", "exec"), mod)
        P = jax.sharding.PartitionSpec
        mesh = mod["mesh"]
        x = np.random.default_rng(seed).uniform(size=(8 * p, 128)).astype(np.float32)
        want = np.concatenate([np.stack(np.split(x, p))] * p)
        x = jax.device_put(x, jax.sharding.NamedSharding(mesh, P("x", None)))
        f = jax.jit(
            jax.shard_map(mod["all_gather"], mesh=mesh, in_specs=P("x", None), out_specs=P("x", None), check_vma=False)
        )
        t0 = time.perf_counter()
        if mode == "jax":
            from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc

            y = np.asarray(jax.block_until_ready(f(x)))
            found = bool(ipc.races is not None and ipc.races.races_found)
            line = "race detector: " + ("race" if found else "nothing")
        else:
            import tpusim

            (report,) = tpusim.check(f, x)
            y = np.asarray(f(x))
            found = not report.clean
            line = (
                (f"{report.findings[0].kind} at {', '.join(os.path.basename(l) for l in report.findings[0].locations)}")
                if found
                else "clean"
            )
        dt = time.perf_counter() - t0
    wrong = int(np.sum(y != want))
    print(json.dumps({"found": found, "wrong": wrong, "seconds": dt, "what": line}))


def broken(a):
    p = a.p.split(",")[0]
    print(f"\nall_gather with one shared receive semaphore, P={p}, 4 KiB per device, {a.broken} runs")
    for mode in ("jax", "tpusim-cpu"):
        found = wrong = 0
        secs, what = [], set()
        for seed in range(a.broken):
            cmd = [sys.executable, __file__, "--broken-child", mode, p, str(seed)]
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
                d = json.loads(r.stdout.strip().splitlines()[-1])
                found += d["found"]
                wrong += d["wrong"] > 0
                secs.append(d["seconds"])
                what.add(d["what"])
            except (subprocess.TimeoutExpired, IndexError, ValueError):
                what.add("no result (killed or failed)")
        label = "JAX interpret (detect_races)" if mode == "jax" else "tpusim check + run (cpu)"
        mean = sum(secs) / len(secs) if secs else float("nan")
        print(
            f"- {label}: reported in {found} of {a.broken} runs, wrong data in {wrong} of {a.broken}, "
            f"{mean:.3f} s per run; {'; '.join(sorted(what))}"
        )


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20}.get(s[-1].upper(), 1)
    return int(s[:-1] if s[-1].upper() in "KM" else s) * mult


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", nargs=8, help=argparse.SUPPRESS)
    ap.add_argument("-p", default="4", help="device counts, comma-separated")
    ap.add_argument("--sizes", default="4K,128K")
    ap.add_argument("--kernels", default=",".join(KERNELS))
    ap.add_argument("--modes", default="jax,tpusim-cpu,tpusim-gpu")
    ap.add_argument("--reps", type=int, default=20, help="timed calls, at least")
    ap.add_argument("--seconds", type=float, default=1.0, help="timed calls for at least this long")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls after the first, at least")
    ap.add_argument("--warmup-seconds", type=float, default=0.5, help="untimed calls for at least this long")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--broken", type=int, default=0, help="also run the shared-semaphore all_gather N times")
    ap.add_argument("--broken-child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.broken_child:
        mode, p, seed = a.broken_child
        broken_child(mode, int(p), int(seed))
        return
    if a.child:
        mode, kernel, p, size, reps, warmup, seconds, warmup_seconds = a.child
        child(mode, kernel, int(p), int(size), int(reps), int(warmup), float(seconds), float(warmup_seconds))
        return
    print(
        f"per-device shard size; first call (includes compilation and planning) / mean (median) of at least "
        f"{a.reps} calls and {a.seconds:g} s of calls, after at least {a.warmup} and {a.warmup_seconds:g} s of "
        f"untimed ones; wrong elements; tpusim's speed-up per call (ratio of the means)"
    )
    modes = a.modes.split(",")
    print("| kernel | P | size | " + " | ".join(modes) + " | speed-up (cpu, gpu) |")
    print("|---|---|---|" + "---|" * (len(modes) + 1))
    for kernel in filter(None, a.kernels.split(",")):
        for p in a.p.split(","):
            for size in a.sizes.split(","):
                cells, per = [], {}
                for mode in modes:
                    cmd = [
                        sys.executable,
                        __file__,
                        "--child",
                        mode,
                        kernel,
                        p,
                        str(parse_size(size)),
                        str(a.reps),
                        str(a.warmup),
                        str(a.seconds),
                        str(a.warmup_seconds),
                    ]
                    try:
                        r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
                        if r.returncode != 0:
                            cells.append(f"failed: {r.stderr.strip().splitlines()[-1][:80]}")
                        else:
                            d = json.loads(r.stdout.strip().splitlines()[-1])
                            per[mode] = d["per_call"]
                            cells.append(
                                f"{d['first']:.3f} s / {d['per_call'] * 1e3:.2f} ({d['median'] * 1e3:.2f}) ms, "
                                f"{d['wrong']} wrong"
                            )
                    except subprocess.TimeoutExpired:
                        cells.append(f"no result in {a.timeout:.0f} s (killed)")
                ups = [
                    f"{per['jax'] / per[m]:.0f}x" if "jax" in per and m in per else "-"
                    for m in ("tpusim-cpu", "tpusim-gpu")
                ]
                print(f"| {kernel} | {p} | {size} | " + " | ".join(cells) + f" | {', '.join(ups)} |", flush=True)
    if a.broken:
        broken(a)


if __name__ == "__main__":
    main()
