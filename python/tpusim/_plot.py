"""``tpusim.plot``: bench results and timelines drawn by the command line's own code
(``src/plot.rs``), from files or from what ``tpusim.bench`` returned."""

import json
import os
import tempfile

from . import _native
from .results import BenchResults


def plot(files, output):
    """``tpusim plot``: draws bench results (busbw and time against size, a line per
    collective and file) or one timeline (a lane per device track and link) to `output`
    (``.svg`` or ``.png``). Each of `files` is a path (``tpusim bench --json``, a
    ``timeline=`` file of :func:`model`), what :func:`bench` returned, or its rows.
    Returns what was drawn, e.g. ``"9 lines"``."""
    if isinstance(files, (str, os.PathLike, BenchResults)) or (
        isinstance(files, list) and files and isinstance(files[0], dict)
    ):
        files = [files]
    with tempfile.TemporaryDirectory(prefix="tpusim-plot-") as tmp:
        paths = []
        for i, f in enumerate(files):
            if isinstance(f, BenchResults):
                name = f.rows[0]["collective"] if len(files) == 1 and f.rows else f"results{i}"
                p = os.path.join(tmp, f"{name}.json")
                with open(p, "w") as out:
                    json.dump(f.json(), out)
                f = p
            elif isinstance(f, list):
                name = f[0]["collective"] if len(files) == 1 and f else f"rows{i}"
                p = os.path.join(tmp, f"{name}.json")
                with open(p, "w") as out:
                    json.dump(f, out)
                f = p
            paths.append(os.fspath(f))
        return _native.plot(paths, os.fspath(output))
