"""What tpusim reports, as Python objects (built from the core's data: dicts): the verifier's :class:`Report`, step
:class:`Table`, and a modeled run (:class:`ModelRun`). Each keeps the Rust core's text
(``str(report)``, ``finding.message``, ``table.markdown``)."""

import json
from dataclasses import dataclass, field
from typing import List, Optional


@dataclass(frozen=True)
class Site:
    """Where in a kernel: device, grid point, API call and ``file:line``; in a sequence of
    kernel invocations, which one (``invocation``, else None); inside loops, which
    iteration of each (``iteration``: ``iteration 2 of the loop at kernel.py:40``,
    else empty); in a ``pl.core_map`` on chips of several TensorCores, the core
    (``core``, else None; ``device`` is then JAX's device, the chip)."""

    device: Optional[int]
    grid: tuple
    op: str
    location: str
    invocation: Optional[int] = None
    iteration: str = ""
    core: Optional[int] = None

    @property
    def file(self):
        return self.location.rsplit(":", 1)[0]

    @property
    def line(self):
        tail = self.location.rsplit(":", 1)
        return int(tail[1]) if len(tail) == 2 and tail[1].isdigit() else 0

    @classmethod
    def from_dict(cls, d):
        return cls(
            d.get("device"),
            tuple(d.get("grid") or ()),
            d.get("op"),
            d.get("location"),
            d.get("invocation"),
            d.get("iteration", ""),
            d.get("core"),
        )

    def __str__(self):
        inv = "" if self.invocation is None else f" in invocation {self.invocation}"
        it = f" in {self.iteration}" if self.iteration else ""
        core = "" if self.core is None else f" core {self.core}"
        return f"device {self.device}{core}{inv} at grid point {list(self.grid)}{it}, `{self.op}` ({self.location})"


@dataclass
class Finding:
    """One distinct problem: its kind (``race``, ``deadlock``, ``semaphore not zero at
    exit``, ``DMA never waited``, ``device id out of range``, …), the Rust core's message,
    the schedule that shows it (None: found while tracing), how many schedules did, the
    kernel sites it names and its details."""

    kind: str
    message: str
    schedule: Optional[str]
    schedules: int
    sites: List[Site]
    details: dict

    @property
    def locations(self):
        """Every ``file:line`` the problem names, in order, without repeats."""
        seen = []
        for s in self.sites:
            if s.location not in seen:
                seen.append(s.location)
        return seen

    @classmethod
    def from_dict(cls, d):
        return cls(
            d["kind"],
            d["message"],
            d["schedule"],
            d["schedules"],
            [Site.from_dict(s) for s in d["sites"]],
            d["details"],
        )


@dataclass
class Report:
    """The verifier's report on one kernel."""

    title: str
    schedules: int
    findings: List[Finding] = field(default_factory=list)

    @property
    def clean(self):
        return not self.findings

    def kinds(self):
        return [f.kind for f in self.findings]

    @classmethod
    def from_dict(cls, d, title):
        return cls(title, d["schedules"], [Finding.from_dict(f) for f in d["findings"]])

    def __repr__(self):
        kinds = ", ".join(self.kinds())
        return f"Report({self.title!r}, schedules={self.schedules}, findings=[{kinds}])"

    def __str__(self):
        if self.clean:
            return f"{self.title}: clean under {self.schedules} schedules"
        n = len(self.findings)
        lines = [
            f"{self.title}: {n} problem{'' if n == 1 else 's'} in {self.schedules} "
            f"schedule{'' if self.schedules == 1 else 's'}"
        ]
        for i, f in enumerate(self.findings):
            if f.schedule is None:
                how = "found while tracing: every schedule has it"
            else:
                how = f"in {f.schedules} of {self.schedules} schedules; replay: check(..., replay={f.schedule!r})"
            lines.append(f"[{i + 1}] {f.kind} ({how})")
            lines.extend("    " + l for l in f.message.splitlines())
        return "\n".join(lines)


@dataclass
class Row:
    """The state after grid point `after` (None: before the grid); `cells[device][column]`
    as data (None never written, [] zero, [[device, block], …] a sum, "mixed"), and
    `notation` in the seeds' notation (``x3+x2``, ``T2(2+1+0)``)."""

    after: Optional[tuple]
    step: Optional[str]
    cells: list
    notation: list


@dataclass
class Table:
    """A step table: what every device holds after every grid point."""

    collective: str
    devices: int
    columns: List[str]
    rows: List[Row]
    markdown: str

    @classmethod
    def from_dict(cls, d):
        rows = [
            Row(tuple(r["after"]) if r["after"] is not None else None, r.get("step"), r["cells"], n)
            for r, n in zip(d["rows"], d["notation"])
        ]
        return cls(d["collective"], d["devices"], d["columns"], rows, d["markdown"])

    def steps(self):
        """(columns, [(after, step, cells)]): the table without its name, for comparing."""
        return self.columns, [(r.after, r.step, r.cells) for r in self.rows]

    def json(self):
        return {
            "collective": self.collective,
            "devices": self.devices,
            "columns": self.columns,
            "rows": [
                {"after": None if r.after is None else list(r.after), "step": r.step, "cells": r.cells}
                for r in self.rows
            ],
        }

    def __str__(self):
        return self.markdown

    def __repr__(self):
        return (
            f"Table(collective={self.collective!r}, devices={self.devices}, "
            f"columns={len(self.columns)}, rows={len(self.rows)})"
        )


@dataclass
class ModelRun:
    """A kernel on the cost model's clock: modeled seconds; with a traffic class,
    nccl-tests' size, algbw and busbw (bytes/s) and the ideal ring bound; the Chrome
    trace when one was asked for (also written to `timeline_path`); `compute`: where the
    kernel computes, the line the command line prints under the modeled time (MXU and VPU
    time per device, TFLOP/s, how much communication compute hid)."""

    model: str
    seconds: float
    events: int
    topology: Optional[str] = None
    size: Optional[float] = None
    algbw: Optional[float] = None
    busbw: Optional[float] = None
    ideal_seconds: Optional[float] = None
    timeline: Optional[dict] = field(default=None, repr=False)
    timeline_path: Optional[str] = None
    compute: Optional[str] = field(default=None, repr=False)
    #: Share of the communication that compute hid (0..1; None without communication).
    hidden: Optional[float] = None
    #: Matrix-unit TFLOP/s per device over the run (None without a matmul).
    tflops: Optional[float] = None
    #: Seconds summed over devices: ``comm_seconds``, ``hidden_seconds``, ``mxu_seconds``,
    #: ``vpu_seconds``, ``load_store_seconds``; and ``macs``.
    overlap: Optional[dict] = field(default=None, repr=False)
    #: Set when the call was run to be timed although model-only was asked for (its
    #: schedule depends on values), saying why: ``executed: `kernel` reads SMEM …``.
    note: Optional[str] = None

    @classmethod
    def from_dict(cls, d, path=None):
        """`path`: where to write the timeline (a path, or an output
        ``_native.check_output`` checked before the run): whole or not at all, a
        stream (``/dev/stdout``) in place."""
        run = cls(
            d["model"],
            d["seconds"],
            d["events"],
            d.get("topology"),
            d.get("size"),
            d.get("algbw"),
            d.get("busbw"),
            d.get("ideal_seconds"),
            d.get("timeline"),
            None,
            d.get("compute"),
            d.get("hidden"),
            d.get("tflops"),
            d.get("overlap"),
        )
        if path is not None and run.timeline is not None:
            from . import _native

            out = path if isinstance(path, _native.Output) else _native.check_output(path, "timeline")
            out.write(json.dumps(run.timeline))
            run.timeline_path = str(out.path)
        return run


@dataclass
class BenchResults:
    """A :func:`tpusim.bench` sweep, self-describing as ``tpusim bench --json``'s file:
    what ran (tpusim version, the call, the date it started, devices, mesh, axis, dtype,
    schedule, iterations, sizes), where (the backend asked for, the executor that ran,
    ``gpu`` or ``cpu``, and its adapter; ``timing`` is ``measured``), and ``rows``: one
    dict per size (``size``, ``time_us``, ``busbw_gbps``, ``roof_us``, ``wrong``, …).
    ``json()`` is the object the command line writes; :func:`tpusim.plot` draws it."""

    tpusim: str
    command: List[str]
    date: str
    devices: int
    mesh: str
    axis: Optional[str]
    group_devices: Optional[int]
    dtype: str
    schedule: str
    iters: Optional[int]
    warmup: Optional[int]
    checks: Optional[int]
    repeat: int
    min_bytes: int
    max_bytes: int
    factor: int
    backend: Optional[str]
    executor: Optional[str]
    adapter: Optional[str]
    timing: str
    rows: List[dict] = field(repr=False)
    model: Optional[str] = None
    topology: Optional[str] = None
    #: A kernel of one's own (``tpusim.bench(fn, ...)``): its name, the traffic class
    #: its busbw follows (None: busbw = algbw), the sizes given to ``make`` (None: one
    #: row of the arguments as given). Each row adds ``param`` (its size) and ``wrong``;
    #: modeled, ``calls``, ``tflops`` and ``hidden``.
    kernel: Optional[str] = None
    traffic: Optional[str] = None
    sizes: Optional[list] = None
    #: The command line's table (``str(results)``); not part of the JSON file.
    table: Optional[str] = field(default=None, repr=False)
    #: Where ``json=`` wrote the results.
    json_path: Optional[str] = field(default=None, repr=False)

    @classmethod
    def from_dict(cls, d):
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__})

    def json(self):
        """The results as ``tpusim bench --json`` writes them (a dict)."""
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        del d["table"], d["json_path"]
        if self.timing != "modeled":
            del d["model"], d["topology"]
        if self.kernel is None:  # a shipped collective's: the command line's keys only
            del d["kernel"], d["traffic"], d["sizes"]
        return d

    def __str__(self):
        return self.table or repr(self)

    def __repr__(self):
        names = sorted({r["collective"] for r in self.rows})
        return (
            f"BenchResults({', '.join(names)}, devices={self.devices}, dtype={self.dtype}, "
            f"executor={self.executor}, rows={len(self.rows)})"
        )
