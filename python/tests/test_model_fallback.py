"""Model-only (``tpusim.model``'s default) on a kernel whose schedule depends on values:
given concrete arrays it runs the function to time it, and says so in the result and on
the command line; given shapes alone it is bad input naming why."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from test_steer import rows_by_count

import tpusim

ROWS = 8


def gather_rows(idx, x):
    """Row block `idx[i]` of x to row block i: the grid's blocks chosen by a scalar-
    prefetch operand, whose values the schedule depends on."""

    def kernel(idx_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS * 8, 128), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(ROWS,),
            in_specs=[pl.BlockSpec((8, 128), lambda i, idx: (idx[i], 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i, idx: (i, 0)),
        ),
    )(idx, x)


def test_a_scalar_prefetch_kernel_runs_when_its_arguments_have_values(cpu):
    idx = jnp.array([7, 0, 3, 3, 1, 6, 2, 5], jnp.int32)
    x = jnp.arange(ROWS * 8 * 128, dtype=jnp.float32).reshape(ROWS * 8, 128)
    with tpusim.simulate():
        got = np.asarray(jax.jit(gather_rows)(idx, x))
    want = 2.0 * np.asarray(x).reshape(ROWS, 8, 128)[np.asarray(idx)].reshape(ROWS * 8, 128)
    np.testing.assert_array_equal(got, want)
    (ran,) = tpusim.model(gather_rows, idx, x, preset="v5e", execute=True)
    (fell,) = tpusim.model(gather_rows, idx, x, preset="v5e")
    assert ran.note is None
    assert fell.note.startswith("executed: `") and "scalar-prefetch operands (operands [0])" in fell.note
    assert fell.seconds == ran.seconds and fell.events == ran.events
    with pytest.raises(tpusim.BadInput) as e:
        tpusim.model(gather_rows, jax.ShapeDtypeStruct(idx.shape, idx.dtype), x, preset="v5e")
    assert "scalar-prefetch operands" in str(e.value) and "shapes without values" in str(e.value)


def test_a_kernel_steered_by_what_it_computes_runs_too(cpu):
    f, mesh = rows_by_count()
    host = np.arange(8 * 3, dtype=np.int32).reshape(8, 3) - 5
    x = jax.device_put(host, jax.NamedSharding(mesh, jax.sharding.PartitionSpec("x")))
    (ran,) = tpusim.model(jax.jit(f), x, preset="v5e", execute=True)
    (fell,) = tpusim.model(jax.jit(f), x, preset="v5e")
    assert "decides what it does by values it computes" in fell.note
    assert fell.seconds == ran.seconds
    shape = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    with pytest.raises(tpusim.BadInput, match="values it computes; the arguments are shapes without values"):
        tpusim.model(jax.jit(f), shape, preset="v5e")


STEERED_SCRIPT = """
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def kernel(x_ref, o_ref, n_ref):
    n_ref[0] = jnp.sum((x_ref[0:1, :] > 0).astype(jnp.int32))  # a loop bound it computes
    o_ref[...] = jnp.zeros_like(o_ref)

    @pl.loop(0, n_ref[0])
    def _(i):
        o_ref[...] += x_ref[...]


x = jnp.ones((8, 128), jnp.float32)
o = pl.pallas_call(
    kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), scratch_shapes=[pltpu.SMEM((1,), jnp.int32)]
)(x)
print(float(o[0, 0]))
"""


def test_the_command_line_says_which_call_it_ran(tmp_path):
    from test_cli import tpusim_cli

    script = tmp_path / "steered.py"
    script.write_text(STEERED_SCRIPT)
    code, out, err = tpusim_cli("model", "--devices", "1", "--preset", "v5e", str(script))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "128.0", out  # run, not zeros: 128 positive elements, 128 sums of ones
    assert "executed: `kernel` decides what it does by values it computes" in lines, out
