"""The Python chapter's examples run as written: the quick start's script through
`python -m tpusim` prints what the chapter shows, and the collectives example runs. The
repository's README.md shows the same quick start, word for word."""

import os
import re
import subprocess
import sys

import numpy as np
from conftest import HERE

README = os.path.join(HERE, "..", "..", "docs", "src", "python.md")
FRONT = os.path.join(HERE, "..", "..", "README.md")


def text(path=README):
    return open(path).read()


def blocks(path=README):
    return re.findall(r"```python\n(.*?)```", text(path), re.S)


def session(path=README):
    return re.search(r"```\n(\$ python -m tpusim run .*?)```", text(path), re.S).group(1)


def test_the_front_readme_shows_the_chapters_quick_start():
    # What README.md shows is what the test below runs.
    assert blocks(FRONT) == blocks()[:1]
    assert session(FRONT) == session()


def test_quick_start_script_prints_what_the_readme_shows(tmp_path):
    (tmp_path / "right_permute.py").write_text(blocks()[0])
    shown = {}
    cmd = None
    for line in session().splitlines():
        if line.startswith("$ "):
            cmd = line[2:].split("#")[0].split()
            shown[tuple(cmd)] = []
        else:
            shown[tuple(cmd)].append(line)
    assert len(shown) == 4
    env = dict(os.environ, TPUSIM_BACKEND="cpu")
    for cmd, want in shown.items():
        r = subprocess.run(
            [sys.executable, *cmd[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env
        )
        assert r.returncode == 0, r.stderr[-3000:]
        got = r.stdout.splitlines()
        if "trace" in cmd:
            assert got[0] == "equal to lax.ppermute: True" and "| after | D0 | D1 | D2 | D3 |" in r.stdout
        else:
            assert got == want, (cmd, got)


def test_shipped_collectives_example_runs(cpu, tmp_path, monkeypatch):
    import tpusim

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(8, 512)).astype(np.float32)
    x0, x1, x2, x3 = np.split(x, 4, axis=1)
    scope = {"tpusim": tpusim, "x": x, "x0": x0, "x1": x1, "x2": x2, "x3": x3}
    exec(compile(blocks()[2], README, "exec"), scope)
    total = sum(np.split(x.astype(np.float64), 4, axis=1))
    np.testing.assert_allclose(scope["y"], np.concatenate([total] * 4, axis=1), rtol=1e-5)
    np.testing.assert_array_equal(scope["outs"][2], np.stack([x0, x1, x2, x3]))
    assert (tmp_path / "psum.json").exists() and scope["res"].rows[-1]["wrong"] == 0
