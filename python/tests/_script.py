"""Runs a JAX script under tpusim in a process of its own (JAX's device count is fixed
once per process) and writes what the tests compare: the script's arrays (npz) and,
for every distinct pallas_call, the verifier's report and the step table (json).

    python _script.py P OUT SCRIPT [--backend B] [--check N] [--like NAME] [--replace OLD NEW]...
"""

import argparse
import json
import sys

import numpy as np


def main():
    a = argparse.ArgumentParser()
    a.add_argument("p", type=int)
    a.add_argument("out")
    a.add_argument("script")
    a.add_argument("--backend", default="cpu")
    a.add_argument("--check", type=int, default=0)
    a.add_argument("--like", default=None)
    a.add_argument("--replace", nargs=2, action="append", default=[])
    a = a.parse_args()

    import tpusim
    from tpusim import _hook, _tools

    tpusim.config.backend = a.backend
    plans = []
    src = open(a.script).read()
    for old, new in a.replace:
        assert old in src, old
        src = src.replace(old, new)
    with _hook.simulate(devices=a.p), _hook.observing(lambda w, p: w == "call" and p not in plans and plans.append(p)):
        g = {"__name__": "__main__", "__file__": a.script}
        exec(compile(src, a.script, "exec"), g)

        _hook.wait_for_calls()  # calls dispatched asynchronously have run
    arrays = {}
    for k in ("input_arr", "pallas_result", "xla_result"):
        v = g.get(k)
        if isinstance(v, (tuple, list)):
            v = v[0]
        if v is not None:
            arrays[k] = np.asarray(v)
    info = {"plans": [], "dtypes": {k: v.dtype.name for k, v in arrays.items()}}
    # npz has no bfloat16: such arrays travel as their bits.
    np.savez(a.out + ".npz", **{k: v.view(np.uint16) if v.dtype.name == "bfloat16" else v for k, v in arrays.items()})
    for plan in plans:
        d = {"name": plan.spec.name, "p": plan.P}
        if a.check:
            r = _tools.check_plan(plan, schedules=a.check)
            d["report"] = {
                "clean": r.clean,
                "schedules": r.schedules,
                "text": str(r),
                "kinds": r.kinds(),
                "findings": [
                    {"kind": f.kind, "locations": f.locations, "message": f.message, "details": f.details}
                    for f in r.findings
                ],
            }
        if a.like is not None:
            shard = list(plan.inputs[0][2]) if plan.inputs else []
            t = tpusim.Table.from_dict(plan.call.trace(shard, a.like))
            d["table"] = {"columns": t.columns, "rows": [[r.after, r.step, r.cells, r.notation] for r in t.rows]}
        info["plans"].append(d)
    with open(a.out + ".json", "w") as f:
        json.dump(info, f)


if __name__ == "__main__":
    sys.exit(main())
