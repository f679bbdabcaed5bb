"""One op per kernel against XLA on the same math: how far tpusim's CPU executor is from
the machine's roof for each op a kernel computes.

    python/.venv/bin/python python/bench/ops.py --sizes 1024,2048 --dtypes f32,bf16

Each op is a one-device `pallas_call` whose body reads an (n, n) block, applies the op
and stores it (a reduction broadcast back to the block, a dot product of the block with
itself); it runs under `tpusim.simulate(devices=1, backend="cpu")`, and the same op as
jitted `jax.numpy` on the same input is the roof. Both are timed alike, in the same
process, alternating (A B A B ...) so that a busy machine slows both: the first call,
then calls until `--seconds` have passed (at least `--reps`), keeping the least and the
median. The table gives the medians, their ratio (tpusim / XLA: 1.0 is XLA's speed), and
tpusim's greatest difference from XLA's result relative to the result's largest
magnitude. `--json` writes the rows.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402


def rowwise(f):
    return lambda x: f(x) + jnp.zeros_like(x)


OPS = {
    "x*2+1": lambda x: x * 2 + 1,
    "exp": jnp.exp,
    "tanh": jnp.tanh,
    "logistic": jax.nn.sigmoid,
    "erf": jax.lax.erf,
    "log(|x|+1)": lambda x: jnp.log(jnp.abs(x) + 1),
    "gelu": jax.nn.gelu,
    "softmax": lambda x: jax.nn.softmax(x.astype(jnp.float32), axis=-1).astype(x.dtype),
    "sum_rows": rowwise(lambda x: jnp.sum(x, axis=-1, keepdims=True)),
    "max_rows": rowwise(lambda x: jnp.max(x, axis=-1, keepdims=True)),
    "transpose": lambda x: x.T,
    "dot": lambda x: jnp.dot(x, x, preferred_element_type=jnp.float32).astype(x.dtype),
}

DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16}


def kernel_of(f, n, dtype):
    def body(x_ref, o_ref):
        o_ref[...] = f(x_ref[...])

    return jax.jit(pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((n, n), dtype)))


def timed(g, x):
    t = time.perf_counter()
    jax.block_until_ready(g(x))
    return time.perf_counter() - t


def measure(pair, x, reps, seconds):
    """First call and the calls after it of each of `pair`, alternating."""
    firsts = [timed(g, x) for g in pair]
    times = [[], []]
    start = time.perf_counter()
    while min(len(t) for t in times) < reps or time.perf_counter() - start < seconds:
        for k, g in enumerate(pair):
            times[k].append(timed(g, x))
    return firsts, times


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--sizes", default="1024,2048")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    ops = a.ops.split(",")
    unknown = [o for o in ops if o not in OPS] + [d for d in a.dtypes.split(",") if d not in DTYPES]
    if unknown:
        sys.exit(f"unknown op or dtype: {', '.join(unknown)} (ops: {', '.join(OPS)}; dtypes: f32, bf16)")

    import tpusim

    rows = []
    print(
        "| op | n | dtype | XLA median (ms) | tpusim median (ms) | tpusim / XLA | tpusim first call (ms) | max diff / max abs |"
    )
    print("|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for n in [int(s) for s in a.sizes.split(",")]:
        for dname in a.dtypes.split(","):
            dtype = DTYPES[dname]
            x = jnp.asarray(rng.standard_normal((n, n)), dtype=dtype)
            for op in ops:
                f = OPS[op]
                xla = jax.jit(f)
                with tpusim.simulate(devices=1, backend="cpu"):
                    sim = kernel_of(f, n, dtype)
                    (f_xla, f_sim), (t_xla, t_sim) = measure((xla, sim), x, a.reps, a.seconds)
                    got = np.asarray(sim(x), dtype=np.float64)
                want = np.asarray(xla(x), dtype=np.float64)
                diff = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))
                m_xla, m_sim = float(np.median(t_xla)), float(np.median(t_sim))
                row = dict(
                    op=op,
                    n=n,
                    dtype=dname,
                    xla_median_s=m_xla,
                    tpusim_median_s=m_sim,
                    xla_best_s=min(t_xla),
                    tpusim_best_s=min(t_sim),
                    ratio=m_sim / m_xla,
                    tpusim_first_s=f_sim,
                    xla_first_s=f_xla,
                    calls=len(t_sim),
                    rel_diff=diff,
                )
                rows.append(row)
                print(
                    f"| {op} | {n} | {dname} | {m_xla * 1e3:.2f} | {m_sim * 1e3:.2f} | "
                    f"{m_sim / m_xla:.2f} | {f_sim * 1e3:.0f} | {diff:.1e} |",
                    flush=True,
                )
    if a.json:
        tmp = a.json + ".partial"
        with open(tmp, "w") as fh:
            json.dump(rows, fh, indent=1)
        os.replace(tmp, a.json)


if __name__ == "__main__":
    main()
