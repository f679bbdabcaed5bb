"""Files from Python, by the command line's rules (issue 37): an output that is one of
the inputs (also through a link) is refused before anything is written; outputs that are
devices, FIFOs or pipes (``/dev/stdout``) are written in place, opened once; inputs that
never end (``/dev/zero``) are refused at their first bytes; bench rows of size zero are
refused, not drawn forever."""

import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest

import tpusim

ROW = {"collective": "psum", "size": 4096, "busbw_gbps": 1.5, "time_us": 3.0}


def test_a_figure_onto_its_own_input_through_a_link_is_refused_and_the_input_kept(tmp_path):
    bench = tmp_path / "bench.json"
    text = json.dumps([ROW, dict(ROW, size=65536)])
    bench.write_text(text)
    link = tmp_path / "link.svg"
    link.symlink_to("bench.json")
    os.link(bench, tmp_path / "hard.svg")
    for out in (link, tmp_path / "hard.svg"):
        with pytest.raises(tpusim.BadInput, match="is the input file"):
            tpusim.plot(str(bench), str(out))
    assert bench.read_text() == text
    assert sorted(os.listdir(tmp_path)) == ["bench.json", "hard.svg", "link.svg"]
    # Elsewhere it is drawn.
    assert tpusim.plot(str(bench), str(tmp_path / "f.svg")) == "1 lines"


def test_bench_rows_of_size_zero_are_refused_not_drawn_forever(tmp_path):
    # A log axis from 0 to 0: the figure was laid out for minutes on end.
    with pytest.raises(tpusim.BadInput, match="none with a size above zero"):
        tpusim.plot([dict(ROW, size=0), dict(ROW, size=0)], str(tmp_path / "z.svg"))
    # Rows of size zero among others are left out of the figure.
    assert tpusim.plot([dict(ROW, size=0), ROW], str(tmp_path / "f.svg")) == "1 lines"


@pytest.mark.parametrize("stream", ["/dev/zero", "/dev/urandom"])
def test_endless_inputs_are_refused_at_their_first_bytes(tmp_path, stream):
    # They were read to the end of memory (4 GB in seconds).
    with pytest.raises(tpusim.BadInput, match=f"{stream} is not JSON"):
        tpusim.plot(stream, str(tmp_path / "f.svg"))


@pytest.mark.parametrize("font", ["/dev/zero", "/dev/urandom"])
def test_an_endless_font_is_refused_at_its_first_bytes(tmp_path, monkeypatch, font):
    monkeypatch.setenv("TPUSIM_FONT", font)
    code = f"import tpusim; tpusim.plot([{ROW!r}], {str(tmp_path / 'f.png')!r})"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and f"font {font} is not a TrueType or OpenType font" in r.stderr, r.stderr


def test_a_timeline_to_standard_output_is_written_in_place():
    # `/dev/stdout` into a pipe: the write-then-rename could not rename onto it.
    code = "import tpusim; tpusim.model('psum', 4, timeline='/dev/stdout')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    trace = json.loads(r.stdout)
    assert trace["traceEvents"], trace


def test_a_fifo_with_a_reader_gets_the_whole_timeline_once(tmp_path):
    fifo = tmp_path / "timeline.fifo"
    os.mkfifo(fifo)
    got = []

    def read():
        # Every open of the writing end is an end of file here.
        while not got:
            with open(fifo, "rb") as f:
                got.append(f.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    run = tpusim.model("psum", 4, timeline=str(fifo))
    reader.join(timeout=60)
    assert len(got) == 1 and json.loads(got[0])["traceEvents"], got
    assert run.timeline_path == str(fifo)


def test_timelines_go_where_they_can(tmp_path):
    afile = tmp_path / "a_file"
    afile.write_text("kept")
    for bad, words in [(afile, "it is a file, not a directory"), (tmp_path / "missing" / "child", "No such file")]:
        with pytest.raises(tpusim.BadInput, match=words):
            tpusim.model(lambda: None, timeline=str(bad))
    assert afile.read_text() == "kept" and sorted(os.listdir(tmp_path)) == ["a_file"]
    with pytest.raises(tpusim.BadInput, match="is a directory"):
        tpusim.model("psum", 4, timeline=str(tmp_path))


def test_a_killed_writer_leaves_no_temporary_file(tmp_path):
    """SIGTERM while a Python process writes an output removes its temporary file, as on
    the command line (the target is left as it was)."""
    out = tmp_path / "big.json"
    out.write_text("the old output")
    code = textwrap.dedent(f"""
        import sys, tpusim
        o = tpusim._native.check_output({str(out)!r}, "result")
        print("writing", flush=True)
        o.write(b"x" * (1 << 28))
    """)
    import signal
    import time

    for _ in range(10):
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "writing"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and p.poll() is None:
            tmp = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
            if tmp and os.path.getsize(tmp_path / tmp[0]) > 0:
                p.send_signal(signal.SIGTERM)
                break
            time.sleep(0.0005)
        if p.wait(timeout=60) == -signal.SIGTERM:
            break
    else:
        raise AssertionError("never caught a write in progress")
    assert sorted(os.listdir(tmp_path)) == ["big.json"]
    assert out.read_text() == "the old output"
