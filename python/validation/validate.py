"""The cost model against published measurements of real TPUs (``cases.json``): each
case's kernel modeled, model-only, and set beside the measured figure.

    python python/validation/validate.py            # the table, Markdown
    python python/validation/validate.py --json     # the rows

Cases marked ``calibrated`` are the ones the model's figures were set from; the others
are held out, and their median and worst error say how well the model predicts.
"""

import json
import os
import statistics
import sys

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import tpusim

HERE = os.path.dirname(os.path.abspath(__file__))
VMEM = pl.BlockSpec(memory_space=pltpu.VMEM)


def preset(name):
    return {p["name"]: p for p in tpusim.presets()}[name]


def dot_seconds(m, k, n, dtype, name):
    def kernel(a_ref, b_ref, o_ref):
        o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    f = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32), in_specs=[VMEM, VMEM], out_specs=VMEM
    )
    a, b = jax.ShapeDtypeStruct((m, k), dtype), jax.ShapeDtypeStruct((k, n), dtype)
    (r,) = tpusim.model(f, a, b, preset=name)
    return r.seconds


def elementwise_seconds(rows, cols, op, dtype, name):
    fn = {"mul": lambda x: x * x, "exp": jnp.exp}[op]

    def kernel(x_ref, o_ref):
        o_ref[...] = fn(x_ref[...])

    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((rows, cols), dtype), in_specs=[VMEM], out_specs=VMEM)
    (r,) = tpusim.model(f, jax.ShapeDtypeStruct((rows, cols), dtype), preset=name)
    return r


def ring4_body_seconds(s, name):
    """The kernel body as the source measured it: the looped call less the calibration
    loop (zeroing and handshake only), per iteration (the slope over 1 and 3 iterations)."""
    sys.path.insert(0, HERE)
    import ring4_matmuls as r4

    mesh = jax.make_mesh((r4.N,), (r4.AXIS,), devices=jax.devices()[: r4.N])
    sizes = {"batch": s["batch"], "k1": s["k1"], "k2": s["k2"]}
    args = r4.abstract(mesh, s["name"], **sizes)

    def t(iters, calibrate):
        fn = r4.sharded(mesh, s["name"], iters, calibrate, **sizes)
        (r,) = tpusim.model(fn, *args, preset=name)
        return r.seconds

    return ((t(3, False) - t(3, True)) - (t(1, False) - t(1, True))) / 2


def modeled(case):
    s, name = case["size"], case["preset"]
    p = preset(name)
    # A TensorCore's cycles: the tutorial's counts are one core's (4 MXUs of 128x128).
    cyc = p["mxu_flops"] / 2 / (p["mxus"] * p["mxu_dim"] ** 2)
    kind = case["kernel"]
    if kind == "dot_marginal":
        lo, hi = s["m"]
        dt = jnp.dtype(s["dtype"])
        return (dot_seconds(hi, s["k"], s["n"], dt, name) - dot_seconds(lo, s["k"], s["n"], dt, name)) * cyc
    if kind == "dot":
        return dot_seconds(s["m"], s["k"], s["n"], jnp.dtype(s["dtype"]), name) * cyc
    if kind == "elementwise":
        r = elementwise_seconds(s["rows"], s["cols"], s["op"], jnp.dtype(s["dtype"]), name)
        vregs = s["rows"] * s["cols"] / 1024
        return r.overlap["vpu_seconds"] * cyc / vregs
    if kind == "all_gather":
        elems = s["shard_bytes"] // jnp.dtype(s["dtype"]).itemsize
        r = tpusim.model("all_gather", s["devices"], shape=[elems // 1024, 1024], dtype="f32", preset=name)
        return r.busbw / 1e9  # a ring's busbw is what each link carries
    if kind == "ring4_body":
        return ring4_body_seconds(s, name) * 1e6
    raise ValueError(f"unknown kernel {kind}")


def rows():
    with open(os.path.join(HERE, "cases.json")) as f:
        cases = json.load(f)
    out = []
    for c in cases:
        m = modeled(c)
        out.append(dict(c, modeled=m, error=(m - c["measured"]) / c["measured"]))
    return out


def summary(rs):
    held = [abs(r["error"]) for r in rs if not r["calibrated"]]
    return {"held_out": len(held), "median": statistics.median(held), "worst": max(held)}


def markdown(rs):
    lines = ["| case | chip | measured | modeled | error | calibrated | source |", "|---|---|---:|---:|---:|---|---|"]
    for r in rs:
        lines.append(
            f"| {r['id']}: {r['what']} | {r['preset']} | {r['measured']:g} {r['unit']} | "
            f"{r['modeled']:.1f} {r['unit']} | {100 * r['error']:+.0f}% | "
            f"{'yes' if r['calibrated'] else 'held out'} | {r['source']} |"
        )
    s = summary(rs)
    lines.append("")
    lines.append(
        f"Held-out cases: {s['held_out']}; median |error| {100 * s['median']:.0f}%, worst {100 * s['worst']:.0f}%."
    )
    return "\n".join(lines)


if __name__ == "__main__":
    with tpusim.simulate(devices=4):
        rs = rows()
    print(json.dumps(rs, indent=1) if "--json" in sys.argv else markdown(rs))
