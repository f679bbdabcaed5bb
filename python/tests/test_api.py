"""The Rust core from Python: meshes, the shipped collectives on numpy arrays, check,
trace, the cost model, bench, and errors as exceptions with the core's messages."""

import json

import numpy as np
import pytest

import tpusim


def test_mesh():
    m = tpusim.Mesh(axes=[("x", 2), ("y", 3)])
    assert m.size == 6 and m.axes == [("x", 2), ("y", 3)] and m.coords(5) == [1, 2]
    assert tpusim.Mesh(4).axes == [("x", 4)]
    with pytest.raises(tpusim.BadInput) as e:
        tpusim.Mesh(0)
    assert str(e.value) == "bad input: mesh axis `x` has 0 devices (P must be at least 1)"
    with pytest.raises(tpusim.BadInput):
        m.coords(6)


def test_listings():
    names = [c["name"] for c in tpusim.collectives()]
    assert names[:4] == ["ppermute", "all_gather", "psum", "psum_scatter"]
    assert any(v["name"] == "shared-recv-sem" for v in tpusim.variants())
    assert {p["name"] for p in tpusim.presets()} == {"v4", "v5e", "v5p", "v6e", "v7"}


@pytest.mark.parametrize("backend", ["cpu", "gpu"])
@pytest.mark.parametrize("p", [1, 3, 4])
def test_run_shipped_collectives_on_numpy(backend, p):
    rng = np.random.default_rng(p)
    xs = [rng.integers(-1000, 1000, size=(8, 128)).astype(np.int32) for _ in range(p)]
    out = tpusim.run("psum", xs, backend=backend)
    for d in range(p):
        np.testing.assert_array_equal(out[d], np.sum(xs, axis=0))
    out = tpusim.run("psum", xs, op="max", backend=backend)
    np.testing.assert_array_equal(out[0], np.max(xs, axis=0))
    both = tpusim.run("psum", xs, backend=backend, all_outputs=True)
    assert [a.shape for a in both[0]] == [(8, 128), (2, 8, 128)]
    out = tpusim.run("all_gather", xs, backend=backend)
    np.testing.assert_array_equal(out[p - 1], np.stack(xs))
    perm = [(d, (d + 2) % p) for d in range(p)]
    out = tpusim.run("ppermute", xs, perm=perm, backend=backend)
    for s, t in perm:
        np.testing.assert_array_equal(out[t], xs[s])


def test_shard_map_of_a_shipped_collective():
    x = np.arange(16 * 4 * 128 * 4, dtype=np.float32).reshape(16 * 4, 128 * 4) / 7
    y = tpusim.shard_map("psum_scatter", x, devices=4, backend="cpu")
    want = x.reshape(64, 4, 128).astype(np.float64).sum(axis=1)
    np.testing.assert_allclose(y, want, rtol=1e-5)
    with pytest.raises(tpusim.BadInput) as e:
        tpusim.shard_map("psum_scatter", x[:, :102], devices=4)
    assert "not divisible by 4 devices" in str(e.value)


def test_shipped_collectives_take_and_return_jax_arrays():
    import jax.numpy as jnp

    xs = [jnp.full((8, 128), d, jnp.int32) for d in range(4)]
    out = tpusim.run("psum", xs, backend="cpu")
    assert all(type(o).__module__.startswith("jax") for o in out)
    np.testing.assert_array_equal(np.asarray(out[2]), np.full((8, 128), 6))
    y = tpusim.shard_map(
        "all_gather", jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128), devices=4, backend="cpu"
    )
    assert type(y).__module__.startswith("jax") and y.shape == (16, 8, 128)


def test_check_shipped_and_broken_variants():
    r = tpusim.check("psum", 4, schedules=30)
    assert r.clean and r.schedules == 30 and str(r) == "psum P=4: clean under 30 schedules"
    r = tpusim.check("psum", 4, schedules=30, variant="no-capacity-sem")
    assert set(r.kinds()) == {"race"}
    f = r.findings[0]
    assert f.schedule is not None and all(s.file.endswith("psum.rs") for s in f.sites)
    assert "replay" in str(r)
    again = tpusim.check("psum", 4, variant="no-capacity-sem", replay=f.schedule)
    assert "race" in again.kinds() and again.schedules == 1
    with pytest.raises(tpusim.BadInput) as e:
        tpusim.check("nope")
    assert "unknown collective `nope`" in str(e.value)


def test_trace_of_a_shipped_collective():
    t = tpusim.trace("all_gather", 4)
    assert t.columns == [f"out_ref[{i}]" for i in range(4)]
    assert t.rows[0].after is None and t.rows[-1].after == (2,)
    assert t.rows[-1].notation[0] == ["x0", "x1", "x2", "x3"]
    assert t.rows[-1].cells[0][1] == [[1, 0]]
    assert "| D0 |" in t.markdown
    assert json.loads(json.dumps(t.json()))["devices"] == 4


def test_model_and_timeline(tmp_path):
    path = tmp_path / "psum.json"
    m = tpusim.model("psum", 4, shape=[64, 128], preset="v5e", timeline=str(path))
    assert m.seconds > 0 and m.busbw == pytest.approx(m.algbw * 1.5)
    assert m.ideal_seconds < m.seconds
    events = json.loads(path.read_text())["traceEvents"]
    assert m.timeline_path == str(path) and len(events) > 4 * 6
    # One process per device, and one for the links (pid 4) with a track per link used.
    assert {e["pid"] for e in events} == {0, 1, 2, 3, 4}
    links = [e for e in events if e["pid"] == 4 and e.get("ph") == "X"]
    assert links and all(e["name"].startswith("DMA ") for e in links)
    faster = tpusim.model("psum", 4, shape=[64, 128], preset="v5e", link_gbps=500)
    assert faster.seconds < m.seconds and faster.model == "v5e (overridden)"
    with pytest.raises(tpusim.BadInput):
        tpusim.model("psum", 4, warp_drive=1)
    with pytest.raises(tpusim.LimitError) as e:
        tpusim.model("psum", 2, shape=[1 << 16, 1024], preset="v5e")
    assert "VMEM of `psum` on v5e" in str(e.value) and e.value.limit == 128 << 20


def test_bench_rows():
    rows = tpusim.bench("psum", 4, min_bytes="4K", max_bytes="16K", iters=3, warmup=1, backend="cpu").rows
    assert [r["size"] for r in rows] == [4096, 16384]
    assert all(r["wrong"] == 0 and r["time_us"] > 0 for r in rows)


@pytest.mark.parametrize("backend", ["cpu", "gpu"])
def test_bench_results_say_what_ran_and_where(backend):
    import datetime

    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    r = tpusim.bench(
        "all_gather_matmul",
        2,
        min_bytes="8K",
        max_bytes="32K",
        iters=2,
        warmup=1,
        checks=1,
        dtype="bf16",
        backend=backend,
        schedule="lazy",
    )
    assert isinstance(r, tpusim.BenchResults)
    import pathlib
    import tomllib

    cargo = pathlib.Path(__file__).resolve().parents[2] / "Cargo.toml"
    assert r.tpusim == tomllib.loads(cargo.read_text())["package"]["version"]
    assert (r.devices, r.mesh, r.axis, r.group_devices) == (2, "x=2", None, 2)
    assert (r.dtype, r.schedule, r.iters, r.warmup, r.checks, r.repeat) == ("bf16", "lazy", 2, 1, 1, 1)
    assert (r.min_bytes, r.max_bytes, r.factor) == (8192, 32768, 4)
    assert (r.backend, r.executor, r.timing) == (backend, backend, "measured")
    if backend == "cpu":
        assert r.adapter == "cpu"
    else:  # the adapter's name, then wgpu's backend and device type
        assert any(f"({b}, " in r.adapter for b in ("Vulkan", "Metal", "Dx12", "Gl")), r.adapter
    date = datetime.datetime.strptime(r.date, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    assert before <= date <= datetime.datetime.now(datetime.timezone.utc)
    assert r.command[0].startswith('tpusim.bench("all_gather_matmul", devices=2, min_bytes="8K"')
    assert [row["size"] for row in r.rows] == [8192, 32768]
    assert all(row["collective"] == "all_gather_matmul" and row["macs"] > 0 for row in r.rows)
    assert repr(r) == (f"BenchResults(all_gather_matmul, devices=2, dtype=bf16, executor={backend}, rows=2)")
    # Along one axis of a 2 x 3 mesh: every device, each group of 3 one instance.
    m = tpusim.Mesh(axes=[("x", 2), ("y", 3)])
    g = tpusim.bench("psum", mesh=m, axis="y", min_bytes="4K", max_bytes="4K", iters=1, warmup=0, backend=backend)
    assert (g.devices, g.mesh, g.axis, g.group_devices) == (6, "x=2,y=3", "y", 3)
    assert g.command[0].endswith(', mesh=<mesh x=2,y=3>, axis="y")'), g.command
    assert [row["wrong"] for row in g.rows] == [0]
    # The object the command line writes.
    assert set(r.json()) == {
        "tpusim",
        "command",
        "date",
        "devices",
        "mesh",
        "axis",
        "group_devices",
        "dtype",
        "schedule",
        "iters",
        "warmup",
        "checks",
        "repeat",
        "min_bytes",
        "max_bytes",
        "factor",
        "backend",
        "executor",
        "adapter",
        "timing",
        "rows",
    }


@pytest.mark.parametrize("backend", ["cpu", "gpu"])
def test_collectives_on_a_2d_mesh(backend):
    # Devices in mesh order, x major: device d is (d // 3, d % 3).
    m = tpusim.Mesh(axes=[("x", 2), ("y", 3)])
    xs = [np.full((6, 128), d + 1, np.int32) for d in range(6)]
    # allreduce_2d: every device gets the sum over the whole mesh.
    out = tpusim.run("allreduce_2d", xs, mesh=m, backend=backend)
    assert all((o == 21).all() for o in out)
    # psum along y: each row of the mesh (same x) sums its own 3 devices.
    out = tpusim.run("psum", xs, mesh=m, axis="y", backend=backend)
    assert [int(o[0, 0]) for o in out] == [6, 6, 6, 15, 15, 15]
    # along x: columns (same y) of 2 devices.
    out = tpusim.run("psum", xs, mesh=m, axis="x", backend=backend)
    assert [int(o[0, 0]) for o in out] == [5, 7, 9, 5, 7, 9]
    with pytest.raises(tpusim.BadInput) as e:
        tpusim.run("allreduce_2d", xs, mesh=m, axis="x", backend=backend)
    assert "without --axis" in str(e.value)


# Issue 37: every entry point checks its counts, seeds and schedules by the command
# line's rules (tpusim::args), with its words, as BadInput (not an OverflowError or a
# TypeError from the conversion to Rust, not a schedule accepted at a P it names no
# device of).
XS = [np.ones((8, 128), np.float32)] * 4


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: tpusim.check("psum", 4, schedules=-5), "schedules must be between 1 and 1000000 (got -5)"),
        (lambda: tpusim.check("psum", 4, schedules=0), "schedules must be between 1 and 1000000 (got 0)"),
        (lambda: tpusim.check("psum", 4, schedules=2.5), "schedules must be between 1 and 1000000 (got `2.5`)"),
        (lambda: tpusim.check("psum", 4, schedules=True), "(got `True`)"),
        (lambda: tpusim.check("psum", 4, seed=-1), "seed must be a whole number from 0 to 2^64 - 1 (got -1)"),
        (lambda: tpusim.check("psum", 4, seed=2**64), "seed must be a whole number from 0 to 2^64 - 1"),
        (lambda: tpusim.check("psum", 4, repeat=0), "repeat must be a whole number of at least 1"),
        (lambda: tpusim.check("psum", 10**11), "devices must be between 1 and 4294967294 (got 100000000000)"),
        (lambda: tpusim.check(lambda: None, schedules=-5), "schedules must be between 1 and 1000000 (got -5)"),
        (lambda: tpusim.trace("psum", 4, repeat=-1), "repeat must be a whole number of at least 1"),
        (lambda: tpusim.trace("psum", -4), "devices must be between 1 and"),
        (lambda: tpusim.model("psum", 4, shape=[-1, 4]), "malformed shape `-1x4`"),
        (lambda: tpusim.bench("psum", 4, iters=-1), "iters must be a whole number of at least 1 (got -1)"),
        (lambda: tpusim.bench("psum", 4, checks=-1), "checks must be a whole number from 0 to 2^64 - 1"),
        (lambda: tpusim.bench("psum", 4, factor=1), "factor must be a whole number of at least 2 (got 1)"),
        (lambda: tpusim.random_inputs("psum", tpusim.Mesh(4), [8, 128], seed=-1), "seed must be"),
        (lambda: tpusim.Mesh(-1), "devices must be a whole number from 0"),
        (lambda: tpusim.Mesh(axes=[("x", 2), ("y", -2)]), "axis `y` must be a whole number from 0"),
        # The schedule of a run names a device of its mesh, wherever it is given.
        (
            lambda: tpusim.run("psum", XS, schedule="run-ahead:9", backend="cpu"),
            "schedule `run-ahead:9` names device 9, but the mesh has 4 devices (run-ahead:0 to run-ahead:3)",
        ),
        (lambda: tpusim.bench("psum", 4, schedule="run-ahead:9", backend="cpu", max_bytes="4K"), "names device 9"),
        (lambda: tpusim.run("psum", XS, schedule="sideways", backend="cpu"), "unknown schedule `sideways`"),
        (lambda: tpusim.simulate(schedule="sideways").__enter__(), "unknown schedule `sideways`"),
        (lambda: tpusim.simulate(backend="tpu").__enter__(), "unknown backend `tpu`"),
        (lambda: tpusim.simulate(devices=-1).__enter__(), "devices must be between 1 and"),
        (lambda: setattr(tpusim.config, "schedule", "sideways"), "tpusim.config.schedule=`sideways`: unknown schedule"),
        (lambda: setattr(tpusim.config, "devices", 0), "tpusim.config.devices must be between 1 and"),
        # A setting that is not text is refused as the text it shows, not with a TypeError.
        (lambda: setattr(tpusim.config, "schedule", None), "tpusim.config.schedule=`None`: unknown schedule `None`"),
        (lambda: tpusim.simulate(backend=3).__enter__(), "unknown backend `3`"),
    ],
)
def test_arguments_are_checked_as_the_command_line_checks_them(call, words):
    with pytest.raises(tpusim.TpusimError) as e:
        call()
    assert isinstance(e.value, (tpusim.BadInput, tpusim.LimitError)), repr(e.value)
    assert words in str(e.value), str(e.value)


def test_numpy_integers_are_counts_too():
    r = tpusim.check("psum", np.int64(4), schedules=np.int32(10), seed=np.uint64(3))
    assert r.clean and r.schedules == 10


@pytest.mark.parametrize(
    "var, value, words",
    [
        ("TPUSIM_DEVICES", "abc", "TPUSIM_DEVICES must be between 1 and 4294967294 (got `abc`)"),
        ("TPUSIM_DEVICES", "-3", "TPUSIM_DEVICES must be between 1 and 4294967294 (got -3)"),
        ("TPUSIM_SCHEDULE", "sideways", "TPUSIM_SCHEDULE=`sideways`: unknown schedule `sideways`"),
        ("TPUSIM_BACKEND", "tpu", "unknown backend `tpu`"),
    ],
)
def test_a_bad_environment_is_bad_input_where_it_is_used_naming_the_variable(var, value, words):
    # `import tpusim` itself succeeds (it was a ValueError traceback at import).
    import subprocess
    import sys

    setting = {"TPUSIM_DEVICES": "devices", "TPUSIM_SCHEDULE": "schedule", "TPUSIM_BACKEND": "backend"}[var]
    code = f"import tpusim\ntry:\n    tpusim.config.{setting}\nexcept tpusim.BadInput as e:\n    print('refused:', e)\n"
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(__import__("os").environ, **{var: value}),
    )
    assert r.returncode == 0 and "refused: bad input: " in r.stdout and words in r.stdout, r.stdout + r.stderr
