"""``tpusim.sweep``: a kernel on the cost model's clock over a grid of its parameters
(block sizes, buffer counts, directions), model-only, ranked by modeled time; the
points that do not fit (VMEM, or a kernel that cannot be built) are listed with why."""

import dataclasses
import html
import itertools
import os
from typing import Optional

from . import _native, _tools

#: The combination ``python -m tpusim sweep`` is running the script for.
current = None


def param(name, default=None):
    """The value of parameter `name` in the combination ``python -m tpusim sweep`` runs
    the script for (``--param NAME=...``); `default` outside a sweep."""
    if current is None:
        return default
    if name not in current:
        raise _native.BadInput(
            f"bad input: the script reads parameter `{name}`, which the sweep does not set "
            f"(--param {name}=...); it sets {', '.join(current)}"
        )
    return current[name]


@dataclasses.dataclass
class SweepPoint:
    """One combination of parameters: its modeled time (every call it makes, summed),
    the share of communication its compute hid, its MXU TFLOP/s per device; or why it
    was skipped."""

    params: dict
    seconds: Optional[float] = None
    hidden: Optional[float] = None
    tflops: Optional[float] = None
    calls: int = 0
    skipped: Optional[str] = None

    def label(self):
        return ", ".join(f"{k}={v}" for k, v in self.params.items())


class Sweep(list):
    """The points of a sweep: those that fit ranked fastest first, then the skipped."""

    @property
    def ranked(self):
        return [p for p in self if p.skipped is None]

    @property
    def skipped(self):
        return [p for p in self if p.skipped is not None]

    @property
    def best(self):
        r = self.ranked
        return r[0] if r else None

    def markdown(self):
        """The ranking as a Markdown table (skipped points last, with the reason)."""
        lines = ["| rank | parameters | modeled time (us) | comm hidden | MXU TFLOP/s |", "|---:|---|---:|---:|---:|"]
        for i, p in enumerate(self.ranked, 1):
            hid = "-" if p.hidden is None else f"{100 * p.hidden:.0f}%"
            tf = "-" if p.tflops is None else f"{p.tflops:.1f}"
            lines.append(f"| {i} | {p.label()} | {p.seconds * 1e6:.1f} | {hid} | {tf} |")
        for p in self.skipped:
            lines.append(f"| - | {p.label()} | skipped: {p.skipped} | | |")
        return "\n".join(lines)

    __str__ = markdown

    def plot(self, path):
        """An SVG bar chart of the ranked points' modeled times, fastest first (written
        whole, never half)."""
        pts = self.ranked
        if not pts:
            raise _native.BadInput("bad input: no point of the sweep fits: nothing to plot")
        w, bar, gap, left = 720, 18, 6, 220
        h = 40 + len(pts) * (bar + gap) + 30
        top = max(p.seconds for p in pts)
        out = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
            f'<text x="{left}" y="20">modeled time (us), fastest first; shade: communication hidden</text>',
        ]
        for i, p in enumerate(pts):
            y = 32 + i * (bar + gap)
            length = (w - left - 90) * p.seconds / top
            shade = 0.35 + 0.65 * (p.hidden or 0.0)
            out.append(f'<text x="{left - 6}" y="{y + 13}" text-anchor="end">{html.escape(p.label())}</text>')
            out.append(
                f'<rect x="{left}" y="{y}" width="{length:.1f}" height="{bar}" '
                f'fill="rgb(40,90,170)" fill-opacity="{shade:.2f}"/>'
            )
            out.append(f'<text x="{left + length + 4:.1f}" y="{y + 13}">{p.seconds * 1e6:.1f}</text>')
        out.append("</svg>")
        text = "\n".join(out) + "\n"
        tmp = f"{os.fspath(path)}.tmp-{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
        return path


def _grid(params):
    if not isinstance(params, dict) or not params:
        raise _native.BadInput("bad input: params must be a dict of parameter name -> list of values")
    for k, vs in params.items():
        if not isinstance(vs, (list, tuple)) or not vs:
            raise _native.BadInput(f"bad input: parameter `{k}` needs a non-empty list of values, got {vs!r}")
    keys = list(params)
    for combo in itertools.product(*(params[k] for k in keys)):
        yield dict(zip(keys, combo))


def point(params, runs):
    """A point from the model runs of its calls (in the order made)."""
    secs = sum(r.seconds for r in runs)
    comm = sum((r.overlap or {}).get("comm_seconds", 0.0) for r in runs)
    hid = sum((r.overlap or {}).get("hidden_seconds", 0.0) for r in runs)
    # MXU TFLOP/s per device over the whole: each call's, weighted by its time.
    timed = [(r.seconds, r.tflops) for r in runs if r.tflops]
    tflops = sum(s * t for s, t in timed) / secs if timed and secs > 0 else None
    return SweepPoint(params, secs, hid / comm if comm > 0 else None, tflops, len(runs))


def sweep(fn, args, params, preset="v5e", devices=None, topology=None, **overrides):
    """Models ``fn(*args, **p)`` for every combination `p` of `params` (name -> list of
    values), model-only (`args` may be ``jax.ShapeDtypeStruct``s), and ranks them by
    modeled time: a :class:`Sweep`. A combination that does not fit (the chip's VMEM or
    the kernel's ``vmem_limit_bytes``) or cannot be built is skipped, with the reason."""
    tool = _tools.model_tool(preset, None, topology, **overrides)
    out = []
    for p in _grid(params):
        try:
            calls = _tools.model_calls(lambda *a, _p=p: fn(*a, **_p), list(args), tool, devices)
            if not calls:
                raise _native.BadInput("bad input: the function made no pallas_call: nothing to model")
            out.append(point(p, [r for _, r in calls]))
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - every reason a point does not fit is reported
            reason = str(e).removeprefix("bad input: ")
            if not isinstance(e, _native.TpusimError):
                reason = f"{type(e).__name__}: {reason}"
            out.append(SweepPoint(p, skipped=reason.splitlines()[0] if reason else type(e).__name__))
    ranked = sorted((x for x in out if x.skipped is None), key=lambda x: x.seconds)
    return Sweep(ranked + [x for x in out if x.skipped is not None])


__all__ = ["sweep", "param", "Sweep", "SweepPoint"]
