"""A suite kernel's first call split into its parts: planning (recording the kernel in
Python, then the native call reading the records), the first run (of it, the native
plan: budget, lowering, schedule and the CPU executor's plan), and the rest (JAX's
tracing and compilation), against the median of later calls; and the page faults of each part (fresh memory
touched: the first run's buffers, the plan's own memory), against a later call's.

    python bench/first_call.py ring_attention 16M -p 4 --calls 3

Set ``TPUSIM_LOOPS=each`` to record every loop iteration on its own (``tpusim/_batch.py``)."""

import argparse
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernel", help="a suite kernel (bench/suite_kernels)")
    ap.add_argument("size", help="bytes of the main operand per device: small, 16M, …")
    ap.add_argument("-p", type=int, default=4, help="devices")
    ap.add_argument("--calls", type=int, default=3, help="later calls timed")
    a = ap.parse_args()
    import jax
    import numpy as np

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", a.p)
    from tpusim import _hook, _native, _plan

    spent = {"plan": 0.0, "record": 0.0, "read": 0.0, "run": 0.0}
    faults = {"plan": 0, "run": 0}  # minor page faults of the process in each part

    calls = []  # the native calls made (their `planning_seconds`)

    def timed(cls, name, key):
        orig = getattr(cls, name)

        def wrapper(*args, **kw):
            t, f = time.perf_counter(), _faults()
            try:
                got = orig(*args, **kw)
                if key == "read":
                    calls.append(got)
                return got
            finally:
                spent[key] += time.perf_counter() - t
                if key in faults:
                    faults[key] += _faults() - f

        if hasattr(orig, "steered"):  # the native call's other constructor, untimed
            wrapper.steered = orig.steered
        setattr(cls, name, wrapper)

    timed(_plan.Plan, "__init__", "plan")
    timed(_plan.Plan, "_device", "record")
    timed(_native, "KernelCall", "read")  # the native call reading the records
    timed(_hook.Meeting, "_run", "run")  # the plan (first call only) and the run
    with suite.context("tpusim-cpu", a.p):
        case = suite.cases().KERNELS[a.kernel](a.p, suite.parse_size(a.size))
        from suite_kernels import AXIS

        mesh = jax.make_mesh((a.p,), (AXIS,))
        args = [
            jax.device_put(x, jax.sharding.NamedSharding(mesh, s))
            for x, s in zip(case.inputs(np.random.default_rng(0)), case.in_specs)
        ]
        f = jax.jit(
            jax.shard_map(case.kernel, mesh=mesh, in_specs=case.in_specs, out_specs=case.out_specs, check_vma=False)
        )
        t0, f0 = time.perf_counter(), _faults()
        jax.block_until_ready(f(*args))
        first, first_faults = time.perf_counter() - t0, _faults() - f0
        # Taken now: a kernel whose later calls go through Python (`_hook.Meeting._run`)
        # adds to `spent` at each of them.
        first_spent, first_run_faults = dict(spent), faults["run"] - faults["plan"]
        run = spent["run"] - spent["plan"]
        native = sum(c.planning_seconds or 0.0 for c in calls)
        times, later_faults = [], []
        for _ in range(a.calls):
            t0, f0 = time.perf_counter(), _faults()
            jax.block_until_ready(f(*args))
            times.append(time.perf_counter() - t0)
            later_faults.append(_faults() - f0)
    later = float(np.median(times)) if times else float("nan")
    print(
        f"{a.kernel} {a.size} P={a.p}: first {first:.2f} s = plan {first_spent['plan']:.2f} "
        f"(recording {first_spent['record']:.2f}, native read {first_spent['read']:.2f}) + first run {run:.2f} (native plan {native:.2f}, run {run - native:.2f}) "
        f"+ rest {first - first_spent['run']:.2f}; "
        f"later calls' median {later:.2f} s; first - later {first - later:.2f} s, "
        f"less the rest {first - later - (first - first_spent['run']):+.2f} s"
    )
    print(
        f"page faults: first {first_faults} (plan {faults['plan']}, first run {first_run_faults}), "
        f"later calls' median {int(np.median(later_faults)) if later_faults else 0}"
    )


def _faults():
    """The process's minor page faults so far (a fresh page touched is one)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


if __name__ == "__main__":
    main()
