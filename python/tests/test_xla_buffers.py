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


def rotate_rows(x_ref, o_ref, sem):
    # o = x with its rows rotated up by one: two DMAs of unequal parts.
    n = x_ref.shape[0]
    rest = pltpu.make_async_copy(x_ref.at[pl.ds(1, n - 1)], o_ref.at[pl.ds(0, n - 1)], sem)
    rest.start()
    rest.wait()
    first = pltpu.make_async_copy(x_ref.at[pl.ds(0, 1)], o_ref.at[pl.ds(n - 1, 1)], sem)
    first.start()
    first.wait()


def random_host(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    if dtype == jnp.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if jnp.issubdtype(dtype, jnp.integer):
        info = jnp.iinfo(dtype)
        return rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)
    # Every bit pattern of a finite float, not only values a conversion would round to.
    return (rng.standard_normal(shape) * 1e3).astype(np.float32).astype(dtype)


# Rows of 129 elements, 5 rows a device: an odd count of 16-bit elements (a half word).
SHAPE = (5, 129)


@pytest.mark.parametrize("backend", ["cpu", "gpu"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.int32, jnp.float16, jnp.bfloat16, jnp.int8, jnp.uint8, jnp.bool_])
def test_every_dtype_goes_in_and_out_of_xla_buffers_at_its_width(dtype, backend):
    call = pl.pallas_call(
        rotate_rows,
        out_shape=jax.ShapeDtypeStruct(SHAPE, dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA],
    )
    mesh = jax.make_mesh((4,), ("x",))
    f = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    with tpusim.simulate(backend=backend):
        for k in range(2):  # a second call runs the saved run, without Python
            host = random_host(dtype, (4 * SHAPE[0], SHAPE[1]), seed=k)
            x = jax.device_put(host, jax.NamedSharding(mesh, P("x")))
            got = np.asarray(f(x))
            want = np.concatenate([np.roll(b, -1, axis=0) for b in np.split(host, 4)])
            assert got.dtype == want.dtype
            # Compared bit for bit (as bytes): NaN-free, but -0.0 and 0.0 told apart.
            np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=f"call {k}")
            np.testing.assert_array_equal(np.asarray(x).view(np.uint8), host.view(np.uint8))


def accumulate_in_vmem(x_ref, o_ref):
    # o starts as unwritten memory reads (zero here): o = x on every call, whatever an
    # earlier call left in the buffers.
    o_ref[...] += x_ref[...]


def writes_its_vmem_input(x_ref, o_ref):
    x_ref[...] = x_ref[...] + 1
    o_ref[...] = x_ref[...] * 2


@pytest.mark.parametrize("backend", ["cpu", "gpu"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.int32])
@pytest.mark.parametrize("kernel", [accumulate_in_vmem, writes_its_vmem_input])
def test_whole_vmem_operands_give_each_calls_answer_and_leave_the_operand(kernel, dtype, backend, monkeypatch):
    # Whole blocks in VMEM: on the CPU executor the VMEM buffers may be XLA's own
    # operand and result; on the GPU the run is kept from call to call.
    monkeypatch.setenv("TPUSIM_UNINIT", "zero")
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, 128), dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
    )
    mesh = jax.make_mesh((4,), ("x",))
    f = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    with tpusim.simulate(backend=backend):
        for k in range(3):
            host = (np.arange(4 * ROWS * 128).reshape(4 * ROWS, 128) % 97 - 40 + 1000 * k).astype(dtype)
            x = jax.device_put(host, jax.NamedSharding(mesh, P("x")))
            got = np.asarray(f(x))
            want = host if kernel is accumulate_in_vmem else (host + 1) * 2
            np.testing.assert_array_equal(got, want, err_msg=f"call {k}")
            np.testing.assert_array_equal(np.asarray(x), host, err_msg=f"call {k}: the operand changed")


@pytest.mark.parametrize("backend", ["cpu", "gpu"])
def test_results_of_several_huge_pages_come_out_whole(backend):
    # 8 MiB and a row per device: results spanning whole 2 MiB pages (advised as huge
    # pages before the run writes them) and a part page at each end.
    shape = (2049, 1024)
    call = pl.pallas_call(
        rotate_rows,
        out_shape=jax.ShapeDtypeStruct(shape, jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA],
    )
    mesh = jax.make_mesh((4,), ("x",))
    f = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    with tpusim.simulate(backend=backend):
        for k in range(2):
            host = random_host(jnp.float32, (4 * shape[0], shape[1]), seed=10 + k)
            got = np.asarray(f(jax.device_put(host, jax.NamedSharding(mesh, P("x")))))
            want = np.concatenate([np.roll(b, -1, axis=0) for b in np.split(host, 4)])
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=f"call {k}")
