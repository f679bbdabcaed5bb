"""Result objects print short; the executor default; shapes; the driver kept quiet."""

import os
import subprocess
import sys

import numpy as np
import pytest

import tpusim


def test_reprs_are_short_and_the_timeline_is_an_attribute(tmp_path):
    run = tpusim.model("psum", 4, timeline=str(tmp_path / "t.json"))
    text = repr(run)
    assert len(text) < 400, text
    assert "traceEvents" not in text and "'ph'" not in text
    assert run.timeline is not None and len(run.timeline["traceEvents"]) > 100
    assert str(run) == text
    table = tpusim.trace("psum", 4)
    assert repr(table) == f"Table(collective='psum', devices=4, columns={len(table.columns)}, rows={len(table.rows)})"
    report = tpusim.check("all_gather", 4, variant="shared-recv-sem", schedules=20)
    assert repr(report).startswith("Report('all_gather --variant shared-recv-sem P=4', schedules=20, findings=[")
    assert "race" in repr(report) and len(repr(report)) < 300


@pytest.mark.parametrize("name", ["psum", "ring_allreduce", "ring_allreduce_push"])
def test_all_reduces_keep_the_input_shape(name):
    xs = [np.arange(8, dtype=np.float32) + 10 * d for d in range(4)]
    out = tpusim.run(name, xs, backend="cpu")
    want = sum(xs)
    for o in out:
        assert o.shape == (8,)
        np.testing.assert_array_equal(o, want)
    xs2 = [x.reshape(2, 4) for x in xs]
    out = tpusim.run(name, xs2, backend="cpu")
    for o in out:
        assert o.shape == (2, 4)
        np.testing.assert_array_equal(o, want.reshape(2, 4))


def test_backend_auto_is_the_default_and_says_what_it_chose():
    assert tpusim.config.backend == os.environ.get("TPUSIM_BACKEND", "auto")
    rows = tpusim.bench("psum", 4, min_bytes="4K", max_bytes="4K", iters=2, warmup=0, backend="auto").rows
    assert rows[0]["wrong"] == 0
    rows = tpusim.bench("psum", 4, min_bytes="4K", max_bytes="4K", iters=2, warmup=0, backend="cpu").rows
    assert rows[0]["roof_us"] > 0 and rows[0]["rates"]["copy_gbps"] > 0


def test_the_driver_says_nothing_about_xdg_runtime_dir():
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    code = (
        "import numpy as np, tpusim\n"
        "xs = [np.ones(8, np.float32)] * 4\n"
        "print(tpusim.run('psum', xs, backend='gpu')[0][0])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "4.0"
    assert "XDG_RUNTIME_DIR" not in r.stderr, r.stderr


def test_plot_draws_bench_rows_and_timelines(tmp_path):
    results = tpusim.bench("psum", 4, min_bytes="4K", max_bytes="16K", iters=2, warmup=0, backend="cpu")
    rows = results.rows
    png = tmp_path / "busbw.png"
    assert tpusim.plot(rows, png) == "1 lines"
    # What bench returned, as the rows and the command line's files are.
    assert tpusim.plot(results, tmp_path / "r.svg") == "1 lines"
    assert tpusim.plot([results, results], tmp_path / "r2.svg") == "2 lines"
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    # 1200 wide; the panels 520 high with the legend's row under them, outside the data.
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width == 1200 and 520 < height < 600, (width, height)
    t = tmp_path / "t.json"
    tpusim.model("ppermute", 2, timeline=str(t))
    svg = tmp_path / "t.svg"
    assert tpusim.plot(str(t), svg).endswith(" lanes")
    import xml.etree.ElementTree as ET

    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    with pytest.raises(tpusim.BadInput):
        tpusim.plot(rows, tmp_path / "x.gif")
