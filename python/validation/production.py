"""Model-only at a production shape: the all-gather matmul of
``python/examples/all_gather_matmul.py`` at 8192x5120 @ 5120x51200 bf16 over 8 devices,
timed end to end (lowering, tracing, scheduling, the clock).

    python python/validation/production.py [PRESET] [BN] [BK]
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import jax  # noqa: E402

import tpusim  # noqa: E402


def main():
    preset = sys.argv[1] if len(sys.argv) > 1 else "v6e"
    bn = int(sys.argv[2]) if len(sys.argv) > 2 else 1280
    bk = int(sys.argv[3]) if len(sys.argv) > 3 else 1024
    with tpusim.simulate(devices=8):
        import all_gather_matmul as agmm

        mesh = jax.make_mesh((8,), ("x",))
        f = agmm.all_gather_matmul(mesh, "x", 8192, 5120, 51200, bn=bn, bk=bk)
        t0 = time.perf_counter()
        (r,) = tpusim.model(f, *agmm.production_args(mesh, "x"), preset=preset)
        secs = time.perf_counter() - t0
    print(
        f"all_gather_matmul 8192x5120 @ 5120x51200 bf16, 8 devices, bn={bn} bk={bk}, {preset}: "
        f"{r.seconds * 1e3:.3f} ms modeled, {r.tflops:.1f} TFLOP/s per device, "
        f"communication hidden {100 * (r.hidden or 0):.0f}%, {r.events} events; modeled in {secs:.1f} s"
    )


if __name__ == "__main__":
    main()
