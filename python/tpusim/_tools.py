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


def call_title(plan):
    """How reports name a call: its kernel, P, mesh and source line."""
    s = plan.spec
    axes = "x".join(str(n) for _, n in s.axes) or "1"
    if s.cores > 1:  # a core_map: the tpusim mesh's devices are the chips' cores
        return f"{s.name} P={plan.P // s.cores} ({axes}) x {s.cores} cores at {s.site[0]}:{s.site[1]}"
    return f"{s.name} P={plan.P} ({axes}) at {s.site[0]}:{s.site[1]}"


def repeat_suffix(repeat):
    """A report title's note of `repeat` invocations back to back."""
    return f" --repeat {repeat}" if repeat != 1 else ""


def check_plan(plan, schedules=200, seed=0, replay=None, repeat=1):
    r = plan.call.check(schedules, seed, replay, repeat)
    return Report.from_dict(r, call_title(plan) + repeat_suffix(repeat))


def check_calls(calls, p, schedules=200, seed=0, replay=None, repeat=1):
    """Native kernel calls on `p` devices verified as one sequence (each device entering
    the next call when it leaves one), `repeat` times."""
    r = _native.check_sequence(list(calls), schedules, seed, replay, repeat)
    return Report.from_dict(r, " then ".join(c.name for c in calls) + repeat_suffix(repeat) + f" P={p}")


def trace_plan(plan):
    shard = list(plan.inputs[0][2]) if plan.inputs else []
    t = Table.from_dict(plan.call.trace(shard, None))
    t.title = call_title(plan)
    return t


def model_plan(plan, preset="v5e", timeline=None, topology=None, **overrides):
    r = plan.call.model(preset, list(overrides.items()) or None, None, timeline is not None, topology)
    m = ModelRun.from_dict(r, timeline)
    m.title = call_title(plan)
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
    not run, so `args` may be ``jax.ShapeDtypeStruct``s of any size and no data is made
    (a kernel whose schedule depends on operand values needs `execute=True`)."""
    tool = model_tool(preset, timeline, topology, **overrides)
    if execute:
        with collecting(tool) as got:
            _run(fn, args, devices)
        return got
    got, seen = Results(), set()
    for plan in _hook.plan_calls(fn, args, devices):
        if id(plan) not in seen:
            seen.add(id(plan))
            got.append(tool(plan))
    if not got:
        raise _native.BadInput("bad input: the function made no pallas_call: nothing to model")
    return got


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
        return model_plan(plan, preset=preset, timeline=path, topology=topology, **overrides)

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
]
