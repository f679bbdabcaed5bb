"""The cost model against block sizes tuned on a real TPU v6e: vllm-project/tpu-inference's
``TUNED_BLOCK_SIZES`` of its all-gather matmul
(``tpu_inference/kernels/collectives/all_gather_matmul_tuned_block_sizes.py``), keyed
``(tpu_version, m, n, k, dtype, tp_size) -> (bn, bk)``, m, n, k global. For each tuned
shape our kernel of the same structure (``python/examples/all_gather_matmul_grid.py``)
is swept, model-only on ``v6e``, over the block sizes a tuner would try (multiples of
128 dividing ``n/tp`` and ``k``, from 1024 up), and the tuned choice's rank among the
candidates that fit is reported, with how much slower than the modeled best the model
thinks it is.

    python python/validation/tuned_v6e.py            # the table, Markdown
    python python/validation/tuned_v6e.py --json     # the rows
"""

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import tpusim  # noqa: E402

TP = 8
SOURCE = (
    "vllm-project/tpu-inference, tpu_inference/kernels/collectives/all_gather_matmul_tuned_block_sizes.py "
    "(commit a4501672a64d2976a339b9bff4c8c34418304bfc), TUNED_BLOCK_SIZES"
)
# (m, n, k) global, bf16, tp 8, on TPU v6e -> the tuned (bn, bk).
TUNED = {
    (1024, 51200, 5120): (6400, 2560),
    (1024, 57344, 8192): (7168, 8192),
    (2048, 51200, 5120): (1280, 5120),
    (2048, 57344, 8192): (1024, 8192),
    (4096, 51200, 5120): (3200, 5120),
    (8192, 51200, 5120): (1280, 5120),
}
FLOOR = 1024  # the smallest block a candidate list starts at


def shape_row(agmm, mesh, m, n, k, tuned):
    bn_c, bk_c = agmm.candidates(n // TP, FLOOR), agmm.candidates(k, FLOOR)
    args = agmm.operands(
        mesh, "x", jax.ShapeDtypeStruct((m, k), jnp.bfloat16), jax.ShapeDtypeStruct((k, n), jnp.bfloat16)
    )
    t0 = time.perf_counter()
    s = tpusim.sweep(
        lambda x, y, bn, bk: agmm.all_gather_matmul(mesh, "x", m, k, n, bn=bn, bk=bk)(x, y),
        args,
        params={"bn": bn_c, "bk": bk_c},
        preset="v6e",
    )
    secs = time.perf_counter() - t0
    ranked = s.ranked
    mine = next((p for p in s if (p.params["bn"], p.params["bk"]) == tuned), None)
    rank = next((i + 1 for i, p in enumerate(ranked) if p is mine), None)
    return {
        "m": m,
        "n": n,
        "k": k,
        "tuned": list(tuned),
        "candidates": len(s),
        "fit": len(ranked),
        "skipped": [(p.label(), p.skipped) for p in s.skipped],
        "rank": rank,
        "tuned_us": None if mine is None or mine.seconds is None else mine.seconds * 1e6,
        "tuned_skipped": None if mine is None else mine.skipped,
        "best": ranked[0].label() if ranked else None,
        "best_us": ranked[0].seconds * 1e6 if ranked else None,
        "ranking": [(p.label(), p.seconds * 1e6) for p in ranked],
        "sweep_seconds": secs,
    }


def markdown(rows):
    lines = [
        "| m, n, k (global) | tuned (bn, bk) | rank of tuned | tuned modeled (us) | best modeled | best (us) | slower than best |",
        "|---|---|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        if r["rank"] is None:
            lines.append(
                f"| {r['m']}, {r['n']}, {r['k']} | {tuple(r['tuned'])} | refused: {r['tuned_skipped']} | | "
                f"{r['best']} | {r['best_us']:.1f} | |"
            )
            continue
        slower = r["tuned_us"] / r["best_us"] - 1
        lines.append(
            f"| {r['m']}, {r['n']}, {r['k']} | {tuple(r['tuned'])} | {r['rank']} of {r['fit']} "
            f"({r['candidates']} tried) | {r['tuned_us']:.1f} | {r['best']} | {r['best_us']:.1f} | {100 * slower:+.1f}% |"
        )
    return "\n".join(lines)


def main():
    rows = []
    with tpusim.simulate(devices=TP):
        import all_gather_matmul_grid as agmm

        mesh = jax.make_mesh((TP,), ("x",))
        for (m, n, k), tuned in TUNED.items():
            rows.append(shape_row(agmm, mesh, m, n, k, tuned))
            print(f"{m} {n} {k}: {rows[-1]['sweep_seconds']:.0f} s", file=sys.stderr)
    print(json.dumps(rows, indent=1) if "--json" in sys.argv else markdown(rows))


if __name__ == "__main__":
    main()
