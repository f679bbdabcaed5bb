"""``python -m tpusim``: a JAX script, unchanged, with every ``pallas_call`` on tpusim.

    python -m tpusim run   [--devices N] [--backend auto|cpu|gpu] [--schedule S] SCRIPT [ARGS...]
    python -m tpusim check [--devices N] [--schedules N] [--seed S] [--sequence] SCRIPT [ARGS...]
    python -m tpusim trace [--devices N] SCRIPT [ARGS...]
    python -m tpusim model [--devices N] [--preset v4|v5e|v5p|v6e|v7] [--timeline DIR] [--execute] SCRIPT [ARGS...]
    python -m tpusim sweep [--devices N] [--preset P] --param NAME=V1,V2 [--param ...] [--plot SVG] SCRIPT [ARGS...]

The script runs as ``__main__`` with N JAX CPU devices (default: ``TPUSIM_DEVICES`` or
4; a script that asks JAX for its own count, as JAX's tests do, keeps it). ``check``
prints the verifier's report of every distinct call (exit 1 on a finding; with
``--sequence``, one report of all the calls in the order made, as consecutive kernels
on the same devices: a hazard between two calls is found too), ``trace``
each call's step table, ``model`` each call's modeled time (model-only: each call is
timed, not run, and returns zeros, unless ``--execute``), ``sweep`` the script once per
combination of its parameters (read with ``tpusim.param(NAME)``), model-only, ranked by
modeled time. Every pallas_call runs on
tpusim, also one the script puts in JAX's interpret mode itself. Exit status: the
script's own; 1 when a kernel fails; 2 for bad input, and for ``check``, ``trace`` and
``model`` of a script that made no pallas_call.
"""

import argparse
import contextlib
import os
import runpy
import sys


def _parser():
    p = argparse.ArgumentParser(prog="python -m tpusim", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    # Counts and schedules are taken as text and checked by the command line's own rules
    # (tpusim._native.count / schedule) once tpusim is imported, with its messages.
    def common(s):
        s.add_argument("--devices", default=None, help="JAX CPU devices (default TPUSIM_DEVICES or 4)")
        s.add_argument("--backend", default=None, choices=["auto", "cpu", "gpu"])
        s.add_argument("--schedule", default=None)
        s.add_argument("--chip", default="v5e", help="the TPU JAX's TPU queries answer for: v4, v5e, v5p, v6e")
        s.add_argument("script")
        s.add_argument("args", nargs=argparse.REMAINDER)

    common(sub.add_parser("run", help="run the script"))
    c = sub.add_parser("check", help="verify every pallas_call the script makes")
    c.add_argument("--schedules", default="200")
    c.add_argument("--seed", default="0")
    c.add_argument("--repeat", default="1", help="each call that many times back to back")
    c.add_argument(
        "--sequence", action="store_true", help="verify all the calls, in the order made, as one sequence of kernels"
    )
    common(c)
    common(sub.add_parser("trace", help="print each call's step table"))
    m = sub.add_parser("model", help="each call's modeled time")
    m.add_argument("--preset", default="v5e")
    m.add_argument("--timeline", default=None, help="directory for one Chrome trace per call")
    m.add_argument(
        "--execute", action="store_true", help="also run each call (default: model-only, each call returns zeros)"
    )
    common(m)
    w = sub.add_parser("sweep", help="each call's modeled time over a grid of the script's parameters, ranked")
    w.add_argument("--preset", default="v5e")
    w.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=V1,V2,...",
        help="a parameter the script reads with tpusim.param(NAME) and its values (repeatable)",
    )
    w.add_argument("--plot", default=None, help="an SVG bar chart of the ranking")
    common(w)
    return p


def _script(path):
    """The script to run, as runpy runs it: a file, or a directory or zip file with a
    ``__main__.py``; anything else is bad input."""
    import tpusim

    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "__main__.py")):
            raise tpusim.BadInput(f"bad input: {path} is a directory without a __main__.py: give the script to run")
    elif not os.path.exists(path):
        raise tpusim.BadInput(f"bad input: no script {path}")
    elif not os.path.isfile(path):
        raise tpusim.BadInput(f"bad input: {path} is not a file: give the script to run")
    return path


def _checked(a):
    """The arguments checked as the command line checks its own (the environment's
    settings checked by importing tpusim): the settings the run follows."""
    import tpusim
    from tpusim import _native

    a.devices = tpusim.config.devices if a.devices is None else _native.count("devices", "--devices", a.devices)
    a.backend = a.backend or tpusim.config.backend
    a.schedule = tpusim.config.schedule if a.schedule is None else _native.schedule(a.schedule)
    if a.cmd == "check":
        a.schedules = _native.count("schedules", "--schedules", a.schedules)
        a.seed = _native.count("seed", "--seed", a.seed)
        a.repeat = _native.count("repeat", "--repeat", a.repeat)
    if a.cmd == "sweep":
        _native.check_preset(a.preset)
        a.params = _sweep_params(a.param)
    if a.cmd == "model":
        _native.check_preset(a.preset)
        if a.timeline is not None:
            a.timeline = os.fspath(_native.check_output_dir(a.timeline, "timelines"))
    _script(a.script)


def main(argv=None):
    a = _parser().parse_args(argv)
    if not os.environ.get("XDG_RUNTIME_DIR"):
        # Mesa's Wayland client complains without one; tpusim never opens a window.
        import tempfile

        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="tpusim-xdg-")
    try:
        import tpusim
    except Exception as e:  # a bad TPUSIM_* variable, named in tpusim's message
        if type(e).__name__ != "BadInput":
            raise
        print(f"tpusim: {e}", file=sys.stderr)
        return 2
    from tpusim import _hook, _tools

    try:
        _checked(a)
        tpusim.config.backend = a.backend
        tpusim.config.schedule = a.schedule
        _hook.ensure_devices(a.devices, "--devices")
        _hook.simulate_globally(a.chip)
    except tpusim.TpusimError as e:
        print(f"tpusim: {e}", file=sys.stderr)
        return _status(e)
    except KeyboardInterrupt:
        return _interrupted()
    if a.cmd == "sweep":
        return _sweep(a)
    # What collects the Results of the script's calls, entered around it.
    if a.cmd == "run":
        collect = contextlib.nullcontext()
        _hook._vetting = True  # a run says when the verifier finds what its schedule hid
    elif a.cmd == "check":
        kw = dict(schedules=a.schedules, seed=a.seed, repeat=a.repeat)
        collect = (
            _tools.sequence_report(tolerant=False, **kw)
            if a.sequence
            else _tools.collecting(_tools.check_plan, tolerant=False, **kw)
        )
    elif a.cmd == "trace":
        collect = _tools.collecting(_tools.trace_plan, tolerant=False)
    else:
        collect = _tools.collecting(_tools.model_tool(a.preset, a.timeline), tolerant=False)
        _hook._skip_runs = not a.execute
    sys.argv = [a.script] + list(a.args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(a.script)))
    status = 0
    results = None
    try:
        with collect as results:
            try:
                try:
                    runpy.run_path(a.script, run_name="__main__")
                finally:
                    _hook.wait_for_calls(report=True)
            except SystemExit as e:
                status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except KeyboardInterrupt:
                raise
            except BaseException as e:  # the script failed: say why, in tpusim's words when ours
                status = _report_failure(e, os.path.abspath(a.script))
    except tpusim.TpusimError as e:  # the check of a --sequence, made when the script is done
        print(f"tpusim: {e}", file=sys.stderr)
        status = status or _status(e)
    except KeyboardInterrupt:
        return _interrupted()
    if results is not None:
        for r in results:
            print(_show(a.cmd, r))
        if a.cmd == "check" and not results.clean and status == 0:
            status = 1
        if not results and status == 0:
            # A check that checked nothing must not pass.
            print(f"tpusim: the script made no pallas_call: nothing to {a.cmd}", file=sys.stderr)
            status = 2
    return status


def _sweep_params(specs):
    """``--param NAME=V1,V2`` options as {name: [values]} (numbers where they parse)."""
    import tpusim

    if not specs:
        raise tpusim.BadInput("bad input: sweep needs at least one --param NAME=V1,V2,...")
    out = {}
    for spec in specs:
        name, eq, values = spec.partition("=")
        if not eq or not name or not values:
            raise tpusim.BadInput(f"bad input: --param `{spec}`: give NAME=V1,V2,...")

        def value(v):
            try:
                return int(v)
            except ValueError:
                try:
                    return float(v)
                except ValueError:
                    return v

        out[name] = [value(v) for v in values.split(",")]
    return out


def _sweep(a):
    """``sweep``: the script run once per combination of the parameters, model-only;
    each run's calls timed and summed; the ranking printed (and drawn with --plot)."""
    import tpusim
    from tpusim import _hook, _tools
    from tpusim import _sweep as sw

    _hook._skip_runs = True
    sys.argv = [a.script] + list(a.args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(a.script)))
    points = []
    for p in sw._grid(a.params):
        sw.current = p
        runs = []
        try:
            with _tools.collecting(lambda plan: runs.append(_tools.model_plan(plan, preset=a.preset)), tolerant=False):
                try:
                    runpy.run_path(a.script, run_name="__main__")
                finally:
                    _hook.wait_for_calls()
            if not runs:
                raise tpusim.BadInput("bad input: the script made no pallas_call")
            points.append(sw.point(p, runs))
        except KeyboardInterrupt:
            return _interrupted()
        except SystemExit as e:
            if e.code not in (None, 0):
                points.append(sw.SweepPoint(p, skipped=f"the script exited with {e.code}"))
            elif runs:
                points.append(sw.point(p, runs))
        except BaseException as e:  # noqa: BLE001 - every reason a point does not fit is reported
            err = _hook.last_error() or e
            points.append(sw.SweepPoint(p, skipped=str(err).removeprefix("bad input: ").splitlines()[0]))
        finally:
            sw.current = None
    ranked = sorted((x for x in points if x.skipped is None), key=lambda x: x.seconds)
    result = sw.Sweep(ranked + [x for x in points if x.skipped is not None])
    print(result.markdown())
    if a.plot and result.ranked:
        result.plot(a.plot)
    return 0 if result.ranked else 1


def _interrupted():
    """Ctrl-C: the calls stopped cleanly (nothing half-written); exit 130, as a shell
    reports a command ended by SIGINT, without a traceback."""
    print("tpusim: interrupted", file=sys.stderr)
    return 130


def _show(cmd, r):
    if cmd == "trace":
        return f"{r.title}\n{r.markdown}"
    if cmd == "model":
        s = f"{r.title}: {r.seconds * 1e6:.3f} us modeled on {r.model}"
        if r.timeline_path:
            s += f" (timeline {r.timeline_path})"
        if r.compute:
            s += f"\n{r.compute}"
        if r.note:
            s += f"\n{r.note}"
        return s
    return str(r)


def _report_failure(e, script):
    import traceback

    import tpusim

    from ._jax_names import missing_name

    missing = missing_name(e, script)
    if missing is not None:  # a name the pinned JAX lacks: bad input, not tpusim's failure
        print(f"tpusim: {missing}", file=sys.stderr)
        return 2
    err = tpusim._hook.last_error() or e
    if isinstance(err, KeyboardInterrupt):  # a call stopped by Ctrl-C (on its own thread)
        return _interrupted()
    if isinstance(err, tpusim.TpusimError):
        print(f"tpusim: {err}", file=sys.stderr)
        return _status(err)
    traceback.print_exception(e)
    return 1


def _status(err):
    """As the Rust CLI's: 2 for bad input (a limit passed, no GPU adapter included), else 1."""
    import tpusim

    return 2 if isinstance(err, (tpusim.BadInput, tpusim.LimitError, tpusim.NoAdapter)) else 1


if __name__ == "__main__":
    try:
        code = main()
    except KeyboardInterrupt:
        code = _interrupted()
    sys.exit(code)
