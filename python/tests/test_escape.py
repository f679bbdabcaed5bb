"""Never silently elsewhere: under `python -m tpusim`, a pallas_call the script puts in
JAX's interpret mode itself runs on tpusim (its check reports it); a check, trace or model
that saw no call exits 2 (`tpusim.check` of such a function raises BadInput);
`tpusim.check(fn, replay=...)` replays the one schedule."""

import numpy as np
import pytest
from broken_kernels import call, mapped, race_kernel, sharded
from jax.experimental.pallas import tpu as pltpu
from test_cli import tpusim_cli

import tpusim

SCRIPT = """
import sys
import jax
import numpy as np
from jax import numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

P = jax.sharding.PartitionSpec


def kernel(x_ref, y_ref):
    y_ref[:4] = x_ref[:4] + 1  # the rest of y is never written


def run(x, interpret=False):
    # The pallas_call is made here, where the script's interpret mode is in force.
    call = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), interpret=interpret)
    f = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    return np.asarray(f(x))


mode = sys.argv[1]
mesh = jax.make_mesh((4,), ("x",))
x = jax.device_put(jnp.ones((32, 128), jnp.float32), jax.NamedSharding(mesh, P("x")))
if mode == "force":
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams()):
        y = run(x)
elif mode == "set":
    pltpu.set_tpu_interpret_mode(pltpu.InterpretParams())
    y = run(x)
elif mode == "argument":
    y = run(x, interpret=pltpu.InterpretParams())
else:  # no pallas_call at all
    y = np.asarray(x + 1)
print("written", int((y == 2).sum()), "nan", int(np.isnan(y).sum()))
"""


@pytest.fixture
def script(tmp_path):
    p = tmp_path / "interpreted.py"
    p.write_text(SCRIPT)
    return str(p)


@pytest.mark.parametrize("mode", ["force", "set", "argument"])
def test_a_call_the_script_puts_in_interpret_mode_runs_on_tpusim(script, mode):
    code, out, err = tpusim_cli("check", "--devices", "4", "--schedules", "5", script, mode)
    # tpusim's verifier saw the call: it names the output the kernel half writes.
    assert code == 1, out + err
    assert "kernel P=4 (4)" in out and "output not written" in out, out
    # 4 of 8 rows per device written, the rest NaN, as in JAX's interpret mode.
    assert "written 2048 nan 2048" in out, out


def test_check_trace_and_model_of_a_script_without_a_call_exit_2(script):
    for cmd in ("check", "trace", "model"):
        code, out, err = tpusim_cli(cmd, "--devices", "4", script, "none")
        assert code == 2, f"{cmd}: {out}{err}"
        assert f"made no pallas_call: nothing to {cmd}" in err, err
    code, out, err = tpusim_cli("run", "--devices", "4", script, "none")
    assert code == 0, err


def test_check_of_a_function_without_a_call_is_bad_input():
    for sequence in (False, True):
        with pytest.raises(tpusim.BadInput, match="made no pallas_call: nothing to check"):
            tpusim.check(lambda v: v + 1, np.ones(4, np.float32), sequence=sequence)


def test_check_of_a_function_replays_the_schedule_a_finding_names():
    dma = pltpu.SemaphoreType.DMA
    f = mapped(call(race_kernel, scratch=[dma, dma], space=pltpu.VMEM))
    x = sharded(np.arange(8 * 512, dtype=np.float32).reshape(8, 512))
    (r,) = tpusim.check(f, x, schedules=20)
    assert r.kinds() == ["race"], str(r)
    finding = r.findings[0]
    (again,) = tpusim.check(f, x, replay=finding.schedule)
    # One schedule, the one named, with the same race.
    assert again.schedules == 1 and again.kinds() == ["race"], str(again)
    assert again.findings[0].locations == finding.locations
    with pytest.raises(tpusim.BadInput):
        tpusim.check(f, x, replay="sideways")
