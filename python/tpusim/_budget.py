"""The time and memory of evaluating a kernel's jaxpr on every device and grid point,
held to the native budget (``_native.ensure_recording_fits`` and ``ensure_loop_fits``,
one rule for both, in Rust) before and while it runs: asked first at what a kernel that
does nothing costs, then again after 1, 2, 4, 8, … calls at what the calls were
counted to do (equations evaluated, loop iterations, the bytes of their records), and
in a loop of known length after its 1, 2, 4, … 1024th iteration and every 1024th after
that. Counts, not clock time: the answer is the same in every run, whatever the
machine's load, and huge work is refused in well under a second, before anything
proportional to it is made. A terminal shows the progress of long work, and Ctrl-C
stops it (``_native.check_interrupt``) on whichever thread records the kernel."""

from . import _batch, _native

#: Iterations (or calls) between two looks at progress, and the last count of the
#: doubling check-ins.
EVERY = 1024

#: Iterations (or calls) between two looks at Ctrl-C (tens of microseconds each).
STOP_EVERY = 64


def points(grid):
    """The points of `grid` in row-major order, made one at a time (a list of them
    would be as large as the grid)."""
    if any(n == 0 for n in grid):
        return
    point = [0] * len(grid)
    while True:
        yield tuple(point)
        for k in reversed(range(len(grid))):
            point[k] += 1
            if point[k] < grid[k]:
                break
            point[k] = 0
        else:
            return


def _due(n):
    """Whether the count `n` is a check-in: 1, 2, 4, … EVERY, then every EVERY."""
    return n % EVERY == 0 or (n & (n - 1) == 0)


class RecordingBudget:
    """Counts the (device, grid point) calls of one kernel and what they evaluate, and
    asks the budget."""

    def __init__(self, name, devices, grid):
        self.name, self.devices, self.grid = name, devices, list(grid)
        if any(g >= 2**64 for g in grid):
            raise _native.LimitError(f"`{name}` has a grid of {self.grid}: more grid points than can be counted")
        _native.ensure_recording_fits(name, devices, self.grid)
        total = devices
        for g in self.grid:
            total *= g
        self.calls = 0
        # Counted over every call so far: equations evaluated, loop iterations.
        self.eqns, self.iterations = 0, 0
        self.least_bytes, self.sampled = 0, 0
        self.loops = []  # the loops being evaluated: LoopBudget each, outermost first
        self.loop_bytes = {}  # per loop site, its records' bytes an iteration, once measured
        self.progress = _native.Progress(f"recording `{name}`: kernel calls", total)

    def called(self, ops):
        """Counts one call that recorded `ops`, and asks the budget again when due."""
        self.calls += 1
        if self.sampled < 16:
            # What a call's records take at least: their text (a measure of the Python
            # objects the native call reads); the least of the first calls, as a kernel
            # may record ops at a few grid points only.
            size = _text_size(ops)
            self.least_bytes = size if self.sampled == 0 else min(self.least_bytes, size)
            self.sampled += 1
        if self.calls % STOP_EVERY == 0:
            _native.check_interrupt()
        if self.calls % EVERY == 0:
            self.progress.set(self.calls)
        if not _due(self.calls):
            return
        n = self.calls
        _native.ensure_recording_fits(
            self.name, self.devices, self.grid, (self.eqns / n, self.iterations / n, self.least_bytes)
        )

    def done(self):
        """The recording ended (or failed): its progress line goes."""
        self.progress.close()

    def loop(self, site, count, point):
        """A loop at `site` of `count` iterations (None: not known before it ends, a
        ``while_loop``'s) about to run at `point`: its LoopBudget."""
        return LoopBudget(self, site, count, point)


class LoopBudget:
    """Counts the iterations of one loop and asks the budget, at check-ins, whether the
    whole loop fits (at every kernel call, as every call runs the same code)."""

    def __init__(self, budget, site, count, point):
        self.b, self.count, self.point = budget, count, point
        self.at = f"{site[0]}:{site[1]}"
        self.n = 0
        self.eqns0, self.iterations0, self.ops0 = budget.eqns, budget.iterations, len(point.ops)
        self.bytes = 0.0
        # How often one call runs this loop: the known counts of the loops around it.
        self.runs = 1
        for outer in budget.loops:
            self.runs *= outer.count or 1
        budget.loops.append(self)

    def iterated(self):
        """Counts one iteration done, and asks the budget when due."""
        b = self.b
        self.n += 1
        b.iterations += 1
        n = self.n
        if n % STOP_EVERY == 0:
            _native.check_interrupt()
        if not _due(n):
            return
        if n <= 16:
            # The records' bytes an iteration, from the first ones (their text), or as
            # an earlier run of this loop measured them (a text costs time to make).
            known = b.loop_bytes.get(self.at)
            self.bytes = known if known is not None else _text_size(self.point.ops[self.ops0 :]) / n
        if n >= EVERY:
            of = f" of {self.count:,}" if self.count is not None else ""
            b.progress.set(b.calls, f"the loop at {self.at}: iteration {n:,}{of}")
        if self.count is not None and n < self.count:
            per = ((b.eqns - self.eqns0) / n, (b.iterations - self.iterations0) / n, self.bytes)
            _native.ensure_loop_fits(b.name, b.devices, b.grid, self.at, self.count, float(self.runs), per)

    def close(self):
        self.b.loops.remove(self)
        if self.bytes:
            self.b.loop_bytes.setdefault(self.at, self.bytes)


#: Records whose text is measured in whole; of longer lists, as many spread evenly.
SAMPLE = 256


def _text_size(ops):
    """The length of `ops`' text: measured in whole for a short list, else from
    records spread evenly over it (a long call's records repeat a few shapes; the whole
    text took a second at ~50,000 records a call)."""
    ops = _batch.flat(ops)
    n = len(ops)
    if n <= SAMPLE:
        return len(repr(list(ops)))
    step = n / SAMPLE
    sample = [ops[int(i * step)] for i in range(SAMPLE)]
    return len(repr(sample)) * n / SAMPLE
