"""The seed's four kernels, side by side: JAX's TPU interpret mode against tpusim's
Python path, same kernel text, same sizes, in one run.

Needs a Python with both `jax[cpu]` and `tpusim` installed (not CI's: JAX is large):

    python3 -m venv /tmp/jaxenv && /tmp/jaxenv/bin/pip install "jax[cpu]" numpy
    VIRTUAL_ENV=/tmp/jaxenv PATH=/tmp/jaxenv/bin:$PATH maturin develop --release   # in python/
    /tmp/jaxenv/bin/python python/bench/interpret_vs_tpusim.py --sizes 4K,32K,128K -p 4

Every case runs in its own process with a time limit (interpret mode can hang). The
kernels come from python/tests/seed/ (the seed's scripts with tpusim's imports); for
JAX the imports are turned back into the seed's own and `pl.pallas_call` gets
`interpret=pltpu.InterpretParams()`. Shapes are scaled by substituting the seed's
literal shard shapes (8, 128) and block_size (16, 128). Each case reports the first
call (import: the seed script runs its pallas_result, including JAX's compilation) and
the mean of the next calls, and counts wrong elements against numpy.
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
IMPORTS = [
    ("import tpusim.jax as jax", "import jax"),
    ("from tpusim.jax import lax", "from jax import lax"),
    ("from tpusim.jax import numpy as jnp", "from jax import numpy as jnp"),
    ("from tpusim.jax.experimental import pallas as pl", "from jax.experimental import pallas as pl"),
    (
        "from tpusim.jax.experimental.pallas import tpu as pltpu",
        "from jax.experimental.pallas import tpu as pltpu",
    ),
]


def source(kernel, mode, shard_bytes, p):
    src = open(os.path.join(SEED, f"seed_{kernel}.py")).read()
    if kernel == "psum_scatter":
        rows = max(2, shard_bytes // (4 * 128 * p) // 2 * 2)
        src = src.replace("block_size = (16, 128)", f"block_size = ({rows}, 128)")
    else:
        rows = max(1, shard_bytes // (4 * 128))
        src = src.replace("8, 128", f"{rows}, 128").replace("(8 * num_devices", f"({rows} * num_devices")
    if mode == "jax":
        for ours, theirs in IMPORTS:
            assert ours in src
            src = src.replace(ours, theirs)
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


def child(mode, kernel, p, shard_bytes, reps):
    if mode == "jax":
        os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={p}"
        import functools

        import jax
        from jax.experimental import pallas as pl
        from jax.experimental.pallas import tpu as pltpu

        pl.pallas_call = functools.partial(pl.pallas_call, interpret=pltpu.InterpretParams())
        ready = jax.block_until_ready
    else:
        import tpusim

        tpusim.config.devices = p
        tpusim.config.backend = mode.split("-")[1]
        ready = lambda y: y  # noqa: E731
    import numpy as np

    mod = {"__name__": f"seed_{kernel}"}
    t0 = time.perf_counter()
    exec(compile(source(kernel, mode, shard_bytes, p), f"seed_{kernel}.py", "exec"), mod)
    ready(mod["pallas_result"])
    first = time.perf_counter() - t0
    jax_ = mod["jax"]
    part = mod["partition"]
    f, ins, outs = {
        "ppermute": (mod.get("right_shift"), part, part),
        "all_gather": (mod.get("all_gather"), part, part),
        "psum": (mod.get("psum_pallas"), part, part),
        "psum_scatter": (mod.get("pallas_reduce_scatter"), mod["P"](None, "x"), mod["P"]("x", None)),
    }[kernel]
    g = jax_.jit(jax_.shard_map(f, mesh=mod["mesh"], in_specs=ins, out_specs=outs, check_vma=False))
    x = mod["input_arr"]
    times, wrong = [], 0
    want = reference(kernel, np.asarray(x), p)
    for _ in range(reps):
        t0 = time.perf_counter()
        y = ready(g(x))
        times.append(time.perf_counter() - t0)
        y = np.asarray(y[0] if kernel == "psum" else y)
        wrong += int(np.sum(~np.isclose(y, want, rtol=1e-5, atol=1e-6)))
    print(json.dumps({"first": first, "per_call": sum(times) / len(times), "wrong": wrong, "reps": reps}))


def broken_child(mode, p, seed):
    """The all_gather with one shared receive semaphore (tests/shared_recv_sem.py) once:
    JAX interpret mode with its race detector, or tpusim's verifier."""
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    import numpy as np

    x = np.random.default_rng(seed).uniform(size=(8 * p, 128)).astype(np.float32)
    want = np.concatenate([np.stack(np.split(x, p))] * p)
    src = open(os.path.join(HERE, "..", "tests", "shared_recv_sem.py")).read()
    src = src.replace("num_devices = 4  # set by the test", f"num_devices = {p}")
    if mode == "jax":
        os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={p}"
        import functools

        import jax
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
        from jax.experimental import pallas as pl
        from jax.experimental.pallas import tpu as pltpu

        params = pltpu.InterpretParams(detect_races=True, random_seed=seed)
        pl.pallas_call = functools.partial(pl.pallas_call, interpret=params)
        for ours, theirs in IMPORTS:
            src = src.replace(ours, theirs)
    else:
        import tpusim
        import tpusim.jax as jax

        tpusim.config.backend = "cpu"
    mod = {"__name__": "shared_recv_sem"}
    exec(compile(src, "shared_recv_sem.py", "exec"), mod)
    P = jax.sharding.PartitionSpec
    mesh = jax.make_mesh((p,), ("x",))
    x = jax.device_put(x, jax.sharding.NamedSharding(mesh, P("x", None)))
    f = jax.shard_map(mod["all_gather"], mesh=mesh, in_specs=P("x", None),
                      out_specs=P("x", None), check_vma=False)
    t0 = time.perf_counter()
    if mode == "jax":
        y = np.asarray(jax.block_until_ready(jax.jit(f)(x)))
        found = bool(ipc.races is not None and ipc.races.races_found)
        line = "race detector: " + ("race" if found else "nothing")
    else:
        report = f.check(x)
        y = f(x)
        found = not report.clean
        line = f"{report.findings[0].kind} at {', '.join(os.path.basename(l) for l in report.findings[0].locations)}" if found else "clean"
    dt = time.perf_counter() - t0
    wrong = int(np.sum(y != want))
    print(json.dumps({"found": found, "wrong": wrong, "seconds": dt, "what": line}))


def broken(a):
    print(f"\nall_gather with one shared receive semaphore, P={a.p}, 4 KiB per device, {a.broken} runs")
    for mode in ("jax", "tpusim"):
        found = wrong = 0
        secs, what = [], set()
        for seed in range(a.broken):
            cmd = [sys.executable, __file__, "--broken-child", mode, str(a.p), str(seed)]
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
        print(f"- {label}: reported in {found} of {a.broken} runs, wrong data in {wrong} of {a.broken}, "
              f"{mean:.3f} s per run; {'; '.join(sorted(what))}")


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20}.get(s[-1].upper(), 1)
    return int(s[:-1] if s[-1].upper() in "KM" else s) * mult


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    ap.add_argument("-p", type=int, default=4)
    ap.add_argument("--sizes", default="4K,32K,128K")
    ap.add_argument("--kernels", default=",".join(KERNELS))
    ap.add_argument("--modes", default="jax,tpusim-cpu,tpusim-gpu")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--broken", type=int, default=0, help="also run the shared-semaphore all_gather N times")
    ap.add_argument("--broken-child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.broken_child:
        mode, p, seed = a.broken_child
        broken_child(mode, int(p), int(seed))
        return
    if a.child:
        mode, kernel, p, size, reps = a.child
        child(mode, kernel, int(p), int(size), int(reps))
        return
    print(f"P={a.p}; per-device shard size; first call (includes compilation) / mean of {a.reps} more calls; wrong elements")
    print("| kernel | size | " + " | ".join(a.modes.split(",")) + " |")
    print("|---|---|" + "---|" * len(a.modes.split(",")))
    for kernel in filter(None, a.kernels.split(",")):
        for size in a.sizes.split(","):
            cells = []
            for mode in a.modes.split(","):
                cmd = [sys.executable, __file__, "--child", mode, kernel, str(a.p), str(parse_size(size)), str(a.reps)]
                try:
                    r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
                    if r.returncode != 0:
                        cells.append(f"failed: {r.stderr.strip().splitlines()[-1][:80]}")
                    else:
                        d = json.loads(r.stdout.strip().splitlines()[-1])
                        cells.append(f"{d['first']:.3f} s / {d['per_call'] * 1e3:.1f} ms, {d['wrong']} wrong")
                except subprocess.TimeoutExpired:
                    cells.append(f"no result in {a.timeout:.0f} s (killed)")
            print(f"| {kernel} | {size} | " + " | ".join(cells) + " |", flush=True)
    if a.broken:
        broken(a)


if __name__ == "__main__":
    main()
