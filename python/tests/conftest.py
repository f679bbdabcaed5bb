"""Shared helpers: load a seed script at P devices, find a marked line of a kernel."""

import importlib.util
import os
import re

import pytest

import tpusim

HERE = os.path.dirname(os.path.abspath(__file__))
SEED_DIR = os.path.join(HERE, "seed")
SEEDS = ["ppermute", "all_gather", "psum", "psum_scatter"]


def load_seed(name, p, backend="cpu", replace=None):
    """Runs the seed script `seed/seed_<name>.py` with P = `p` simulated devices (what its
    `jax.local_device_count()` answers) and returns it as a fresh module. `replace`:
    (old, new) text, or a list of them, substituted in the script's source before it
    runs: a smaller block_size for psum_scatter, or another dtype for every array (the
    kernels' code stays as it is); each `old` must occur."""
    path = os.path.join(SEED_DIR, f"seed_{name}.py")
    prev = (tpusim.config.devices, tpusim.config.backend)
    tpusim.config.devices, tpusim.config.backend = p, backend
    try:
        spec = importlib.util.spec_from_file_location(f"seed_{name}_{p}", path)
        mod = importlib.util.module_from_spec(spec)
        if replace is None:
            spec.loader.exec_module(mod)
        else:
            src = open(path).read()
            for old, new in [replace] if isinstance(replace, tuple) else replace:
                assert src.count(old) >= 1, old
                src = src.replace(old, new)
            code = compile(src, path, "exec")
            exec(code, mod.__dict__)
        return mod
    finally:
        tpusim.config.devices, tpusim.config.backend = prev


def marked_line(path, marker):
    """The 1-based line of `path` that ends with the comment `# <- marker`."""
    lines = [
        i + 1
        for i, l in enumerate(open(path).read().splitlines())
        if re.search(r"#\s*<-\s*" + re.escape(marker) + r"\s*$", l)
    ]
    assert len(lines) == 1, f"marker {marker!r} appears {len(lines)} times in {path}"
    return lines[0]


@pytest.fixture
def cpu():
    """Runs the test on the CPU executor (the oracle), restoring the backend after."""
    prev = tpusim.config.backend
    tpusim.config.backend = "cpu"
    yield
    tpusim.config.backend = prev
