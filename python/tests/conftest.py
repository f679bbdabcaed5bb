"""Shared helpers. The test process runs JAX with 8 CPU devices and tpusim's hook
installed; scripts that size their mesh from JAX's device count (the seeds) run in
processes of their own at each P (``run_script``)."""

import json
import os
import re
import subprocess
import sys
import tempfile

if not os.environ.get("XDG_RUNTIME_DIR"):
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="tpusim-xdg-")

import jax  # noqa: E402

jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_num_cpu_devices", 8)
# Started now: a test entering `tpusim.simulate(devices=1)` first would otherwise set
# the count for every test after it.
jax.devices()

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tpusim  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SEED_DIR = os.path.join(HERE, "seed")
SEEDS = ["ppermute", "all_gather", "psum", "psum_scatter"]
_cache = {}


def run_script(path, p, backend="cpu", check=0, like=None, replace=()):
    """Runs JAX script `path` under tpusim with `p` devices in a process of its own:
    (its input_arr / pallas_result / xla_result arrays, info on its pallas_calls)."""
    key = (path, p, backend, check, like, tuple(replace))
    if key in _cache:
        return _cache[key]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out")
        cmd = [
            sys.executable,
            os.path.join(HERE, "_script.py"),
            str(p),
            out,
            path,
            "--backend",
            backend,
            "--check",
            str(check),
        ]
        if like:
            cmd += ["--like", like]
        for old, new in replace:
            cmd += ["--replace", old, new]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-4000:]
        info = json.load(open(out + ".json"))
        arrays = {}
        for k, v in np.load(out + ".npz").items():
            if info["dtypes"][k] == "bfloat16":
                import ml_dtypes

                v = v.view(ml_dtypes.bfloat16)
            arrays[k] = v
    _cache[key] = (arrays, info)
    return arrays, info


def seed_path(name):
    return os.path.join(SEED_DIR, f"seed_{name}.py")


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


@pytest.fixture
def sim(cpu):
    """Every pallas_call inside runs on tpusim (CPU executor)."""
    with tpusim.simulate():
        yield


def against_interpret(fn, *args, schedules=20):
    """`fn(*args)` jitted on tpusim and on JAX's TPU interpret mode: (tpusim's result,
    interpret's); tpusim's verifier must find every pallas_call clean under `schedules`.
    The pallas_calls are made inside `fn`, so the mode it is traced under decides who runs
    them."""
    import jax
    from jax.experimental.pallas import tpu as pltpu

    with tpusim.simulate(backend="cpu"):
        got = jax.tree.map(np.asarray, jax.jit(fn)(*args))
    reports = tpusim.check(jax.jit(fn), *args, schedules=schedules)
    assert reports and reports.clean, str(reports)
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams()):
        want = jax.tree.map(np.asarray, jax.jit(fn)(*args))
    return got, want


@pytest.fixture
def recordings(monkeypatch):
    """The recording each native kernel call is made from, in order (captured as
    ``_native.KernelCall`` is called; every kernel planned afresh, whatever ran it before)."""
    from tpusim import _hook, _native

    monkeypatch.setattr(_hook, "_plans", {})

    caught = []
    real = _native.KernelCall

    def capture(*args, **kw):
        caught.append(args[7])  # the recording
        return real(*args, **kw)

    capture.steered = real.steered
    monkeypatch.setattr(_native, "KernelCall", capture)
    return caught
