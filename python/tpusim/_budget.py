"""The time and memory of evaluating a kernel's jaxpr on every device and grid point,
held to the native budget (``_native.ensure_recording_fits``) before and while it runs:
asked first at a typical kernel's cost, then again as the points measure this kernel's
(after 16, 32, 64, … points, or 50 ms, 100 ms, 200 ms, … of them), so huge work is
refused in well under a second, before anything proportional to it is made."""

import time

from . import _native


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


class RecordingBudget:
    """Counts the (device, grid point) evaluations of one call and asks the budget."""

    def __init__(self, name, devices, grid):
        self.name, self.devices, self.grid = name, devices, list(grid)
        if any(g >= 2**64 for g in grid):
            raise _native.LimitError(
                f"`{name}` has a grid of {self.grid}: more grid points than can be counted")
        _native.ensure_recording_fits(name, devices, self.grid)
        self.calls, self.start = 0, time.perf_counter()
        self.next_calls, self.next_seconds = 16, 0.05
        self.least_bytes, self.sampled = 0, 0

    def called(self, ops):
        """Counts one point that recorded `ops`, and asks the budget again when due."""
        self.calls += 1
        if self.calls == 1:
            # The first point pays for what later ones reuse (caches): timed from its
            # end, the rate is the kernel's own.
            self.start = time.perf_counter()
        if self.sampled < 16:
            # What a point's records take at least: their text (a measure of the Python
            # objects the native call reads); the least of the first points, as a
            # kernel may record ops at a few grid points only.
            size = len(repr(ops))
            self.least_bytes = size if self.sampled == 0 else min(self.least_bytes, size)
            self.sampled += 1
        took = time.perf_counter() - self.start
        # A rate needs a point timed after the first (a descheduled first point could
        # otherwise look slow here with no point to divide by).
        if self.calls == 1 or (self.calls < self.next_calls and took < self.next_seconds):
            return
        self.next_calls, self.next_seconds = 2 * self.calls, 2 * max(took, self.next_seconds)
        _native.ensure_recording_fits(
            self.name, self.devices, self.grid, took / (self.calls - 1), self.least_bytes)
