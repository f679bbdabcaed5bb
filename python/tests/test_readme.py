"""The package README's examples run as written."""

import os
import re

import numpy as np

from conftest import HERE

README = os.path.join(HERE, "..", "README.md")


def blocks():
    return re.findall(r"```python\n(.*?)```", open(README).read(), re.S)


def test_ten_line_example_runs(cpu, capsys):
    code = blocks()[0]
    scope = {}
    exec(compile(code, README, "exec"), scope)
    x, y = scope["x"], scope["y"]
    shards = np.split(x, 4, axis=1)
    np.testing.assert_array_equal(y, np.concatenate([shards[(d - 1) % 4] for d in range(4)], axis=1))
    out = capsys.readouterr().out
    assert "right_shift_kernel P=4: clean under 200 schedules" in out
    assert "| D0 |" in out


def test_shipped_collectives_example_runs(cpu, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(8, 512)).astype(np.float32)
    x0, x1, x2, x3 = np.split(x, 4, axis=1)
    scope = {"x": x, "x0": x0, "x1": x1, "x2": x2, "x3": x3}
    exec(compile(blocks()[1], README, "exec"), scope)
    total = sum(np.split(x.astype(np.float64), 4, axis=1))
    np.testing.assert_allclose(scope["y"], np.concatenate([total] * 4, axis=1), rtol=1e-5)
    np.testing.assert_array_equal(scope["outs"][2], np.stack([x0, x1, x2, x3]))
    assert (tmp_path / "psum.json").exists() and scope["rows"][-1]["wrong"] == 0
