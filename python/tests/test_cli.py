"""`python -m tpusim`: an unchanged JAX script run, checked, traced and modeled, with
the exit status a shell can use."""

import os
import subprocess
import sys

import pytest
from conftest import HERE, marked_line, seed_path

SHARED = os.path.join(HERE, "shared_recv_sem.py")


def tpusim_cli(*args, timeout=300):
    env = dict(os.environ, TPUSIM_BACKEND="cpu")
    r = subprocess.run(
        [sys.executable, "-m", "tpusim", *args], capture_output=True, text=True, timeout=timeout, env=env
    )
    return r.returncode, r.stdout, r.stderr


def test_run_an_unchanged_script_at_p_devices(tmp_path):
    script = tmp_path / "show.py"
    script.write_text(
        open(seed_path("ppermute")).read() + "\nimport numpy as np\n"
        "print('devices', jax.device_count(), 'equal', bool(np.array_equal(pallas_result, xla_result)))\n"
    )
    code, out, err = tpusim_cli("run", "--devices", "3", str(script))
    assert code == 0, err
    assert "devices 3 equal True" in out


def test_check_prints_every_call_and_exits_1_on_a_finding():
    code, out, err = tpusim_cli("check", "--devices", "4", "--schedules", "30", seed_path("psum"))
    assert code == 0, err
    assert "psum_kernel P=4 (4)" in out and "clean under 30 schedules" in out
    code, out, err = tpusim_cli("check", "--devices", "4", "--schedules", "30", SHARED)
    assert code == 1, err
    assert "race" in out and f"{SHARED}:{marked_line(SHARED, 'start')}" in out


def test_run_warns_once_when_the_verifier_finds_what_its_schedule_hid():
    # The race of a receive semaphore shared by every step: the eager run is right.
    code, out, err = tpusim_cli("run", "--devices", "4", SHARED)
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("tpusim: warning:")]
    assert len(warnings) == 1, err
    assert "`run` followed one schedule (eager)" in warnings[0] and "(race)" in warnings[0], err
    assert "`python -m tpusim check` with the same arguments reports" in warnings[0], err
    # A clean kernel: nothing to say.
    code, out, err = tpusim_cli("run", "--devices", "4", seed_path("psum"))
    assert code == 0 and "tpusim" not in err, err


def test_trace_and_model(tmp_path):
    code, out, err = tpusim_cli("trace", "--devices", "4", seed_path("all_gather"))
    assert code == 0, err
    assert "| after | D0 | D1 | D2 | D3 |" in out and "(x0, x1, x2, x3)" in out
    code, out, err = tpusim_cli(
        "model", "--devices", "4", "--preset", "v5e", "--timeline", str(tmp_path), seed_path("psum_scatter")
    )
    assert code == 0, err
    assert "us modeled on v5e" in out
    (trace,) = list(tmp_path.iterdir())
    assert trace.name.startswith("reduce_scatter_kernel") and trace.stat().st_size > 100


def test_a_failed_call_the_script_caught_is_not_raised_again_at_its_end(tmp_path):
    # As JAX's own tests of failing kernels do: the error is expected, caught, and the
    # result dropped; the script succeeds.
    script = tmp_path / "caught.py"
    src = (
        open(seed_path("ppermute"))
        .read()
        .replace("target = lax.rem(my_id + 1, num_devices)", "target = lax.rem(my_id - 1, num_devices)")
    )
    head, _, _ = src.partition("pallas_result = jax.jit(")
    script.write_text(
        head
        + (
            "f = jax.jit(jax.shard_map(right_shift, mesh=mesh, in_specs=partition, out_specs=partition,"
            " check_vma=False))\n"
            "try:\n    f(input_arr).block_until_ready()\nexcept Exception as e:\n    print('caught', type(e).__name__)\n"
        )
    )
    code, out, err = tpusim_cli("run", "--devices", "4", str(script))
    assert code == 0, err
    assert "caught" in out
    # Under check the script runs as under run (the error reaches its `except`), and the
    # report names the mistake: exit 1 for the finding.
    code, out, err = tpusim_cli("check", "--devices", "4", "--schedules", "5", str(script))
    assert code == 1, err
    assert "caught" in out and "device id out of range" in out, out


def test_a_call_refused_before_it_runs_is_not_a_script_without_calls(tmp_path):
    script = tmp_path / "refused.py"
    script.write_text(
        "import jax, jax.numpy as jnp\n"
        "from jax.experimental import pallas as pl\n"
        "from jax.experimental.pallas import tpu as pltpu\n"
        "def kernel(x_ref, o_ref):\n"
        "    o_ref[...] = jnp.cumsum(x_ref[...], axis=0)\n"
        "call = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32))\n"
        "mesh = jax.make_mesh((4,), ('x',))\n"
        "f = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=jax.P('x'), out_specs=jax.P('x'), check_vma=False))\n"
        "x = jax.device_put(jnp.ones((32, 128), jnp.int32), jax.NamedSharding(mesh, jax.P('x')))\nprint(f(x))\n"
    )
    for cmd in ("run", "check"):
        code, out, err = tpusim_cli(cmd, "--devices", "4", str(script))
        assert code == 1, err
        assert "unsupported" in err and "cumsum" in err, err
        assert "made no pallas_call" not in err, err


def test_a_failing_kernel_is_tpusims_message_and_exit_1(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text(
        open(seed_path("ppermute"))
        .read()
        .replace("target = lax.rem(my_id + 1, num_devices)", "target = lax.rem(my_id - 1, num_devices)")
    )
    code, out, err = tpusim_cli("run", "--devices", "4", str(script))
    assert code == 1
    assert "tpusim: device id out of range" in err and f"{script}:" in err


@pytest.mark.parametrize(
    "args, words",
    [
        (["run", "--devices", "0", "x.py"], "--devices must be between 1 and 4294967294 (got 0)"),
        # Issue 37's: the command line's rules and words (tpusim::args), not a traceback.
        (
            ["run", "--devices", "100000000000", seed_path("ppermute")],
            "tpusim: bad input: --devices must be between 1 and 4294967294 (got 100000000000)",
        ),
        (["run", "--devices", "abc", seed_path("ppermute")], "--devices must be between 1 and 4294967294 (got `abc`)"),
        # More devices than JAX can start here (threads, memory): it aborted or ran on.
        (["run", "--devices", "1000000000", seed_path("ppermute")], "the most devices that fit are"),
        (
            ["check", "--schedules", "-5", seed_path("psum")],
            "tpusim: bad input: --schedules must be between 1 and 1000000 (got -5)",
        ),
        (
            ["check", "--seed", "-1", seed_path("psum")],
            "tpusim: bad input: --seed must be a whole number from 0 to 2^64 - 1 (got -1)",
        ),
        (["check", "--repeat", "0", seed_path("psum")], "--repeat must be a whole number of at least 1 (got 0)"),
        (["run", "--schedule", "sideways", seed_path("ppermute")], "unknown schedule `sideways`"),
        (
            ["run", "--schedule", "run-ahead:9", "--devices", "4", seed_path("ppermute")],
            "schedule `run-ahead:9` names device 9, but the mesh has 4 devices",
        ),
        (["model", "--preset", "v9", seed_path("ppermute")], "unknown model `v9`"),
        (
            ["model", "--timeline", seed_path("ppermute"), seed_path("ppermute")],
            "cannot write timelines to",
        ),
        (
            ["model", "--timeline", "/nonexistent/dir/child", seed_path("ppermute")],
            "cannot write timelines to /nonexistent/dir/child: No such file or directory",
        ),
        (["run", HERE], f"{HERE} is a directory without a __main__.py"),
        (["run", "/nonexistent/x.py"], "no script /nonexistent/x.py"),
        (["run", "--chip", "v9", seed_path("ppermute")], "chip `v9`"),
    ],
)
def test_bad_input_is_exit_2(args, words):
    code, out, err = tpusim_cli(*args)
    assert code == 2 and words in err, err
    assert "Traceback" not in err, err


@pytest.mark.parametrize(
    "var, value, words",
    [
        ("TPUSIM_DEVICES", "abc", "tpusim: bad input: TPUSIM_DEVICES must be between 1 and 4294967294 (got `abc`)"),
        ("TPUSIM_SCHEDULE", "sideways", "TPUSIM_SCHEDULE=`sideways`: unknown schedule"),
        ("TPUSIM_BACKEND", "tpu", "TPUSIM_BACKEND=`tpu`: unknown backend `tpu`"),
    ],
)
def test_a_bad_environment_is_exit_2_naming_the_variable(var, value, words, monkeypatch):
    # TPUSIM_DEVICES=abc was a ValueError traceback at import, the variable not named.
    monkeypatch.setenv(var, value)
    env = dict(os.environ, **{var: value})
    r = subprocess.run(
        [sys.executable, "-m", "tpusim", "run", seed_path("ppermute")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_directory_with_a_main_runs_as_a_script(tmp_path):
    (tmp_path / "__main__.py").write_text(open(seed_path("ppermute")).read() + "\nprint('ran')\n")
    code, out, err = tpusim_cli("run", str(tmp_path))
    assert code == 0 and "ran" in out, err


def test_a_limit_passed_exits_2_as_bad_input(monkeypatch):
    # As the Rust CLI: a check that would run past the time limit is refused up front.
    monkeypatch.setenv("TPUSIM_TIME_LIMIT", "1s")
    code, out, err = tpusim_cli("check", "--devices", "8", "--schedules", "1000000", seed_path("psum"))
    assert code == 2 and "too long" in err and "the largest --schedules that fits is" in err, (code, err)


MATMUL = """
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def kernel(x_ref, w_ref, y_ref):
    y_ref[...] = jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)


x = jnp.ones((128, 256), jnp.bfloat16)
w = jnp.ones((256, 128), jnp.bfloat16)
y = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((128, 128), jnp.float32))(x, w)
print(float(y[0, 0]))
"""


def test_model_prints_the_compute_line_the_command_line_prints(tmp_path):
    # The Rust CLI's `run --model` prints `compute: MXU …, VPU … per device, … TFLOP/s
    # …` under the modeled time of a kernel that computes; `python -m tpusim model` the
    # same line (one text, `Modeled::compute_line`), and ModelRun.compute holds it.
    script = tmp_path / "mm.py"
    script.write_text(MATMUL)
    code, out, err = tpusim_cli("model", "--execute", "--devices", "1", "--preset", "v5e", str(script))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "256.0", out
    (compute,) = [line for line in lines if line.startswith("compute: MXU ")]
    assert " us, VPU " in compute and "TFLOP/s per chip" in compute, compute
    assert lines[lines.index(compute) - 1].endswith("us modeled on v5e"), out


def test_a_name_the_pinned_jax_removed_is_explained(tmp_path):
    # A TPU script written for an older JAX: `pltpu.DeviceIdType` is gone from the pinned
    # JAX (it is `pl.DeviceIdType` now). Exit 2 with what to use and the script's line,
    # not a traceback from tpusim's entry point.
    script = tmp_path / "old.py"
    src = open(seed_path("ppermute")).read()
    assert "pl.DeviceIdType" in src
    script.write_text(src.replace("pl.DeviceIdType", "pltpu.DeviceIdType", 1))
    line = next(i + 1 for i, s in enumerate(script.read_text().splitlines()) if "pltpu.DeviceIdType" in s)
    code, out, err = tpusim_cli("run", "--devices", "4", str(script))
    assert code == 2, err
    assert "Traceback" not in err, err
    assert "`pltpu.DeviceIdType` is not in JAX 0.12.0.1, which tpusim pins" in err, err
    assert "use `pl.DeviceIdType`" in err and f"old.py:{line})" in err, err
    # A name no JAX version has is named too, without a replacement.
    script.write_text(src.replace("pl.DeviceIdType", "pltpu.NoSuchName", 1))
    code, out, err = tpusim_cli("run", "--devices", "4", str(script))
    assert code == 2 and "`pltpu.NoSuchName` is not in JAX" in err and "Traceback" not in err, err
