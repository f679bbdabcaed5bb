"""The command line and the Python package go through one pipeline: the same modeled
time for the same collective on the same mesh and topology, and the same refusal of
work that cannot fit."""

import os
import re
import subprocess

import pytest

import tpusim

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args, env=None):
    """Runs the `tpusim` binary of this checkout (built when missing)."""
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    binary = os.path.join(target, "release", "tpusim")
    if not os.path.exists(binary):
        subprocess.run(["cargo", "build", "--release", "--bin", "tpusim"], cwd=ROOT, check=True)
    return subprocess.run([binary, *args], capture_output=True, text=True, env=env)


def modeled_us(text):
    m = re.search(r"model .*? on (\S+): ([0-9.]+) us modeled", text)
    assert m, text
    return m.group(1), float(m.group(2))


@pytest.mark.parametrize("axis", [None, "y", "x,y"])
def test_the_model_of_a_mesh_run_is_the_same_from_python_and_the_cli(axis):
    args = ["run", "psum", "--mesh", "2x4", "--model", "v5e", "--backend", "cpu"]
    if axis:
        args += ["--axis", axis]
    r = cli(*args)
    assert r.returncode == 0, r.stderr
    topology, us = modeled_us(r.stdout)
    mesh = tpusim.Mesh(axes=[("x", 2), ("y", 4)])
    py = tpusim.model("psum", mesh=mesh, axis=axis, preset="v5e")
    assert py.topology == topology == "torus:4x2"
    # The CLI prints three decimals of microseconds.
    assert abs(py.seconds * 1e6 - us) < 5e-4, (py.seconds * 1e6, us)


def test_overrides_mean_the_same_in_both():
    r = cli(
        "run",
        "ring_allreduce_push",
        "-p",
        "8",
        "--model",
        "v5e",
        "--link-gbps",
        "12.5",
        "--link-latency-us",
        "3",
        "--topology",
        "full",
        "--backend",
        "cpu",
    )
    assert r.returncode == 0, r.stderr
    topology, us = modeled_us(r.stdout)
    py = tpusim.model("ring_allreduce_push", 8, preset="v5e", topology="full", link_gbps=12.5, link_latency_us=3)
    assert py.topology == topology == "full"
    assert abs(py.seconds * 1e6 - us) < 5e-4
    with pytest.raises(tpusim.BadInput, match="unknown model override `link_gbs`"):
        tpusim.model("psum", 4, link_gbs=1)


def test_python_refuses_work_that_cannot_fit_with_the_cli_message(monkeypatch):
    limit = "256M"
    env = dict(os.environ, TPUSIM_MEMORY_LIMIT=limit)
    monkeypatch.setenv("TPUSIM_MEMORY_LIMIT", limit)
    for cmd, call in [
        (["check", "psum", "-p", "20000"], lambda: tpusim.check("psum", 20000)),
        (["trace", "all_gather", "-p", "5000"], lambda: tpusim.trace("all_gather", 5000)),
        (["run", "psum", "-p", "20000", "--model", "v5e", "--backend", "cpu"], None),
    ]:
        r = cli(*cmd, env=env)
        assert r.returncode == 2, r.stdout + r.stderr
        message = r.stderr.strip().removeprefix("tpusim: ")
        assert "not enough memory" in message and "TPUSIM_MEMORY_LIMIT" in message, message
        if call is None:
            continue
        with pytest.raises(tpusim.LimitError) as e:
            call()
        assert str(e.value) == message
    # A run on numpy arrays is refused the same way, before any data is made for it.
    mesh = tpusim.Mesh(20000)
    r = cli("run", "psum", "-p", "20000", "--shape", "1x128", "--backend", "cpu", env=env)
    assert r.returncode == 2
    import numpy as np

    x = [np.zeros((1, 128), np.float32)] * 20000
    with pytest.raises(tpusim.LimitError) as e:
        tpusim.run("psum", x, mesh=mesh, backend="cpu")
    assert str(e.value) == r.stderr.strip().removeprefix("tpusim: ")
