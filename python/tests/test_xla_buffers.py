"""A call runs in XLA's own buffers (4-byte types on the CPU executor): the caller's
operands stay as they were even where the kernel writes its input refs, and what the
kernel leaves unwritten of an output reads as in JAX's interpret mode (NaN, the largest
integer; zero with TPUSIM_UNINIT=zero) on every call, whatever the buffer XLA hands the
call held before."""

import jax
import numpy as np
import pytest
from jax import numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import tpusim

P = jax.sharding.PartitionSpec
ROWS = 8


def mapped(kernel, out_dtype, scratch):
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, 128), out_dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=scratch,
    )
    mesh = jax.make_mesh((4,), ("x",))
    f = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    return f, jax.NamedSharding(mesh, P("x"))


def half_then_overwrite(x_ref, o_ref, v_ref, sem):
    # The input's first half of rows into the output's; then the input itself is
    # overwritten (from a filled VMEM scratch).
    half = pltpu.make_async_copy(x_ref.at[pl.ds(0, ROWS // 2)], o_ref.at[pl.ds(0, ROWS // 2)], sem)
    half.start()
    half.wait()
    v_ref[...] = jnp.full(v_ref.shape, 7, v_ref.dtype)
    over = pltpu.make_async_copy(v_ref, x_ref, sem)
    over.start()
    over.wait()


@pytest.mark.parametrize("uninit", ["nan", "zero"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.int32, jnp.bfloat16])
def test_inputs_stay_and_unwritten_outputs_read_the_same_on_every_call(cpu, dtype, uninit, monkeypatch):
    monkeypatch.setenv("TPUSIM_UNINIT", uninit)
    blank = 0 if uninit == "zero" else np.iinfo(np.int32).max if dtype == jnp.int32 else np.nan
    f, sharding = mapped(half_then_overwrite, dtype, [pltpu.VMEM((ROWS, 128), dtype), pltpu.SemaphoreType.DMA])
    with tpusim.simulate():
        for k in range(4):
            host = (np.arange(4 * ROWS * 128).reshape(4 * ROWS, 128) % 251 + 100 * k).astype(dtype)
            x = jax.device_put(host, sharding)
            got = np.asarray(f(x))
            np.testing.assert_array_equal(np.asarray(x), host, err_msg=f"call {k}: the operand changed")
            want = np.full(host.shape, blank, np.float64)
            for d in range(4):
                want[d * ROWS : d * ROWS + ROWS // 2] = host[d * ROWS : d * ROWS + ROWS // 2]
            # Widened: numpy knows bfloat16's NaN as one once it is a float64.
            np.testing.assert_array_equal(got.astype(np.float64), want, err_msg=f"call {k}")
            del got
