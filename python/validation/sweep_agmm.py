"""The all-gather matmul of ``python/examples/all_gather_matmul.py`` at a production
shape (8192 x 5120 @ 5120 x 51200 bf16 over 8 devices) swept over its block sizes on a
preset, model-only: the ranking (Markdown) and an SVG bar chart.

    python python/validation/sweep_agmm.py [PRESET] [SVG]
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import jax  # noqa: E402

import tpusim  # noqa: E402

M, K, N, TP = 8192, 5120, 51200, 8


def main():
    preset = sys.argv[1] if len(sys.argv) > 1 else "v6e"
    svg = sys.argv[2] if len(sys.argv) > 2 else None
    with tpusim.simulate(devices=TP):
        import all_gather_matmul as agmm

        mesh = jax.make_mesh((TP,), ("x",))
        args = agmm.production_args(mesh, "x", M, K, N)
        t0 = time.perf_counter()
        s = tpusim.sweep(
            lambda x, w, bn, bk: agmm.all_gather_matmul(mesh, "x", M, K, N, bn=bn, bk=bk)(x, w),
            args,
            params={"bn": [1280, 3200, 6400], "bk": [1024, 2560, 5120]},
            preset=preset,
        )
        secs = time.perf_counter() - t0
    print(s.markdown())
    print(f"\n{len(s)} points in {secs:.1f} s")
    if svg:
        s.plot(svg)


if __name__ == "__main__":
    main()
