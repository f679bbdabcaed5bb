"""The tools on a JAX program: every ``pallas_call`` it makes, verified (``check``),
traced into step tables (``trace``) or put on the cost model's clock (``model``).

Each runs the program under :func:`tpusim.simulate` and looks at every distinct plan
the program's calls make (a repeated call with the same kernel, shapes, mesh and SMEM
values is one plan); the calls still execute, so the program runs to its end.
"""

import contextlib
import os

from . import _hook, _native
from .results import ModelRun, Report, Table


class Results(list):
    """One result per distinct ``pallas_call`` the program made, in order."""

    @property
    def clean(self):
        return all(getattr(r, "clean", True) for r in self)

    def __str__(self):
        return "\n".join(str(r) for r in self)


def repeat_suffix(repeat):
    """A report title's note of `repeat` invocations back to back."""
    return f" --repeat {repeat}" if repeat != 1 else ""


def check_plan(plan, schedules=200, seed=0, replay=None, repeat=1):
    r = plan.call.check(schedules, seed, replay, repeat)
    return Report.from_dict(r, plan.title() + repeat_suffix(repeat))


def check_calls(calls, p, schedules=200, seed=0, replay=None, repeat=1):
    """Native kernel calls on `p` devices verified as one sequence (each device entering
    the next call when it leaves one), `repeat` times."""
    r = _native.check_sequence(list(calls), schedules, seed, replay, repeat)
    return Report.from_dict(r, " then ".join(c.name for c in calls) + repeat_suffix(repeat) + f" P={p}")


def trace_plan(plan):
    shard = list(plan.inputs[0][2]) if plan.inputs else []
    t = Table.from_dict(plan.call.trace(shard, None))
    t.title = plan.title()
    return t


def model_plan(plan, preset="v5e", timeline=None, topology=None, **overrides):
    r = plan.call.model(preset, list(overrides.items()) or None, None, timeline is not None, topology)
    m = ModelRun.from_dict(r, timeline)
    m.title = plan.title()
    return m


@contextlib.contextmanager
def collecting(tool, tolerant=True, **kw):
    """Applies `tool` to every plan made inside; yields the Results. `tolerant`: a call
    that fails to run returns zeros (its result says why) so that a function under
    ``tpusim.check`` goes on; the command line runs a script as ``run`` does, errors
    raised where the script can catch them."""
    out = Results()
    seen = set()

    def on(what, plan):
        if what == "call" and id(plan) not in seen:
            seen.add(id(plan))
            out.append(tool(plan, **kw))

    _hook._tolerant += int(tolerant)
    try:
        with _hook.observing(on):
            yield out
    finally:
        _hook._tolerant -= int(tolerant)


@contextlib.contextmanager
def sequence_report(schedules=200, seed=0, repeat=1, tolerant=True, replay=None):
    """Collects every ``pallas_call`` made inside, in the order made (a repeated call as
    often as it runs), and verifies them as one sequence when the block ends: yields the
    Results, which then hold that one Report (none when no call was made)."""
    out = Results()
    calls = []
    _hook._tolerant += int(tolerant)
    try:
        with _hook.observing(lambda what, plan: what == "call" and calls.append(plan)):
            yield out
    finally:
        _hook._tolerant -= int(tolerant)
    if calls:
        out.append(check_calls([p.call for p in calls], calls[0].P, schedules, seed, replay, repeat))


def _run(fn, args, devices):
    import jax

    # A call the tools cannot even plan (an unsupported construct) raises tpusim's error.
    with _hook.simulate(devices=devices):
        res = fn(*args)
        jax.block_until_ready(res)
        _hook.wait_for_calls()
    return res


def check_counts(schedules, seed, repeat):
    """A check's counts, checked by the command line's rules before anything runs."""
    return (
        _native.count("schedules", "schedules", schedules),
        _native.count("seed", "seed", seed),
        _native.count("repeat", "repeat", repeat),
    )


def check(fn, *args, schedules=200, seed=0, devices=None, sequence=False, repeat=1, replay=None):
    """Verifies every pallas_call `fn(*args)` makes: a :class:`Report` per distinct
    call; with `sequence`, one report of all the calls in order, as one sequence.
    `replay`: the one schedule a finding names, instead of the default ones."""
    schedules, seed, repeat = check_counts(schedules, seed, repeat)
    if sequence:
        collect = sequence_report(schedules=schedules, seed=seed, repeat=repeat, replay=replay)
    else:
        collect = collecting(check_plan, schedules=schedules, seed=seed, repeat=repeat, replay=replay)
    with collect as got:
        _run(fn, args, devices)
    if not got:  # a check that checked nothing must not pass
        raise _native.BadInput("bad input: the function made no pallas_call: nothing to check")
    return got


def trace(fn, *args, devices=None):
    """The step table of every pallas_call `fn(*args)` makes."""
    with collecting(trace_plan) as got:
        _run(fn, args, devices)
    return got


def model(fn, *args, preset="v5e", timeline=None, topology=None, devices=None, execute=False, **overrides):
    """Every pallas_call `fn(*args)` makes on the cost model's clock; `timeline`: a
    directory for one Chrome trace per call. Model-only unless `execute`: `fn` is lowered,
    not run, so `args` may be ``jax.ShapeDtypeStruct``s of any size and no data is made.
    A kernel whose schedule depends on values (SMEM or scalar-prefetch operands, values
    it computes) is run instead when `args` are concrete arrays, and its result's
    ``note`` says so; on shapes alone it is a BadInput."""
    tool = model_tool(preset, timeline, topology, **overrides)
    got, seen = Results(), set()
    for plan, run in model_calls(fn, args, tool, devices, execute):
        if id(plan) not in seen:
            seen.add(id(plan))
            got.append(run)
    if not got:
        raise _native.BadInput("bad input: the function made no pallas_call: nothing to model")
    return got


def model_calls(fn, args, tool, devices=None, execute=False):
    """``(plan, ModelRun)`` of every pallas_call `fn(*args)` makes, as often as it runs
    (each plan modeled once): model-only (:func:`tpusim._hook.plan_calls`, the calls
    counted by :func:`call_counts`), or executed when `execute` or when model-only cannot
    plan a call and `args` are concrete arrays (each run's ``note`` says why)."""
    note = None
    if execute:
        plans = executed_plans(fn, args, devices)
    else:
        try:
            plans = _hook.plan_calls(fn, args, devices)
        except _hook.NeedsValues as e:
            if not concrete(args):
                raise _native.BadInput(
                    f"bad input: {e.why}; the arguments are shapes without values "
                    "(jax.ShapeDtypeStruct): give concrete arrays, and tpusim.model runs the function to time it"
                ) from None
            note = f"executed: {e.why}, which model-only cannot know without running it"
            plans = executed_plans(fn, args, devices)
    if note is None and not execute:
        plans = as_run(plans, call_counts(fn, args))
    runs = {}
    out = []
    for plan in plans:
        if id(plan) not in runs:
            runs[id(plan)] = tool(plan)
            if note is not None:
                runs[id(plan)].note = note
        out.append((plan, runs[id(plan)]))
    return out


def _call_key(name, kernel, out_avals):
    """Which pallas_call: the kernel's name, its jaxpr as text (two kernels of one
    function and name differ in their blocks) and the result types."""
    return name, str(kernel), tuple((tuple(a.shape), str(a.dtype)) for a in out_avals)


def call_counts(fn, args):
    """How often each pallas_call of `fn(*args)` runs, by kernel name, source line and
    result types, from its jaxpr: JAX lowers a function once however often it is called
    (a jitted function called twice, a ``scan``'s body `length` times), so the lowering
    alone undercounts. A ``cond`` counts its busiest branch; a ``while_loop``'s body,
    whose trip count is a value, once."""
    import collections

    import jax
    from jax._src import core as jax_core

    def walk(jaxpr, times, counts):
        for e in jaxpr.eqns:
            name = e.primitive.name
            if name == "pallas_call":
                kernel = e.params["jaxpr"]
                dbg = getattr(kernel, "debug_info", None)
                kname = e.params.get("name") or getattr(dbg, "func_name", None) or "kernel"
                counts[_call_key(kname, kernel, e.params["out_avals"])] += times
            elif name == "cond":
                branches = [walk(b.jaxpr, times, collections.Counter()) for b in e.params["branches"]]
                for k in set().union(*branches):
                    counts[k] += max(b[k] for b in branches)
            else:
                inner = times * e.params["length"] if name == "scan" else times
                for sub in jax_core.jaxprs_in_params(e.params):
                    walk(sub, inner, counts)
        return counts

    return walk(jax.make_jaxpr(fn)(*args).jaxpr, 1, collections.Counter())


def as_run(plans, counts):
    """`plans` (as lowered: one per lowering) repeated as often as `counts` says their
    calls run, in the order first lowered."""
    order, seen = [], {}
    for plan in plans:
        s = plan.spec
        key = _call_key(s.name, s.jaxpr, s.out_avals)
        if key not in seen:
            seen[key] = [plan, 0]
            order.append(key)
        seen[key][1] += 1
    out = []
    for key in order:
        plan, lowered = seen[key]
        out += [plan] * max(counts.get(key, 0), lowered)
    return out


def executed_plans(fn, args, devices=None):
    """The plans of every pallas_call `fn(*args)` makes as it runs under tpusim, in the
    order made (a call that fails returns zeros; its plan is still listed)."""
    plans = []
    _hook._tolerant += 1
    try:
        with _hook.observing(lambda what, plan: what == "call" and plans.append(plan)):
            _run(fn, args, devices)
    finally:
        _hook._tolerant -= 1
    return plans


def concrete(args):
    """True when every leaf of `args` has values (arrays, numbers), none a shape alone."""
    import jax
    import numpy as np

    return all(
        isinstance(x, (np.ndarray, np.generic, jax.Array, int, float, complex, bool))
        for x in jax.tree_util.tree_leaves(args)
    )


def model_tool(preset="v5e", timeline=None, topology=None, **overrides):
    """The tool ``model`` applies to each plan: with `timeline` (a directory: one that
    exists, or one made now in one that does; checked before any call), a Chrome trace
    per call in it, named for the kernel and numbered in call order."""
    n = [0]
    _native.check_preset(preset)
    if timeline is not None:
        timeline = os.fspath(_native.check_output_dir(timeline, "timelines"))

    def tool(plan):
        path = None
        if timeline is not None:
            path = os.path.join(timeline, f"{plan.spec.name}-{n[0]}.json")
            n[0] += 1
        m = model_plan(plan, preset=preset, timeline=path, topology=topology, **overrides)
        if _hook._skip_runs and plan.steered:  # `python -m tpusim model`: ran all the same
            m.note = f"executed: `{plan.spec.name}` decides what it does by values it computes"
        return m

    return tool


__all__ = [
    "check",
    "trace",
    "model",
    "Results",
    "collecting",
    "sequence_report",
    "check_plan",
    "check_calls",
    "trace_plan",
    "model_plan",
    "model_tool",
    "model_calls",
    "executed_plans",
    "concrete",
    "call_counts",
]
