"""Reads of memory nothing wrote: an accumulator that one grid point forgets to zero
(the bug of the distributed-Pallas docs' `reduce_scatter_large_hbm`, whose accumulator is
zeroed on some grid points only) is reported with the kernel's line; the same kernel
with its initialisation is clean and equal to JAX's interpret mode. An output the kernel
half writes reads as in interpret mode (NaN, the largest integer; zeros with
TPUSIM_UNINIT=zero) and `check` names it."""

import jax
import numpy as np
import pytest
from jax import numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import tpusim

P = jax.sharding.PartitionSpec


def row_sums(init):
    """Sums the 4 column blocks of a (8, 512) block into one (8, 128) output block that
    stays in VMEM over the grid's second axis (Pallas copies it out once, at the end)."""

    def kernel(x_ref, o_ref):
        if init:

            @pl.when(pl.program_id(1) == 0)
            def _():
                o_ref[...] = jnp.zeros_like(o_ref)

        o_ref[...] += x_ref[...]  # accumulate

    def f(x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((16, 128), jnp.int32),
            grid=(2, 4),
            in_specs=[pl.BlockSpec((8, 128), lambda i, k: (i, k))],
            out_specs=pl.BlockSpec((8, 128), lambda i, k: (i, 0)),
        )
        return jax.shard_map(call, mesh=mesh(), in_specs=P("x"), out_specs=P("x"), check_vma=False)(x)

    return f


def accumulate_line():
    import inspect

    src, first = inspect.getsourcelines(row_sums)
    return first + next(i for i, l in enumerate(src) if "# accumulate" in l)


def mesh():
    return jax.make_mesh((4,), ("x",))


def data():
    x = np.arange(64 * 512, dtype=np.int32).reshape(64, 512) % 1000
    return jax.device_put(x, jax.NamedSharding(mesh(), P("x")))


def test_an_accumulator_zeroed_on_the_first_point_is_clean_and_right():
    x = data()
    f = row_sums(init=True)
    host = np.asarray(x)
    with tpusim.simulate(backend="cpu"):
        got = np.asarray(jax.jit(f)(x))
    want = host.reshape(4, 2, 8, 4, 128).sum(axis=3).reshape(64, 128)
    np.testing.assert_array_equal(got, want)
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams()):
        np.testing.assert_array_equal(np.asarray(jax.jit(f)(x)), got)
    (r,) = tpusim.check(jax.jit(f), x, schedules=10)
    assert r.clean, str(r)


def test_an_accumulator_never_zeroed_is_a_read_of_uninitialized_memory():
    (r,) = tpusim.check(jax.jit(row_sums(init=False)), data(), schedules=10)
    assert r.kinds() == ["read of uninitialized memory"], str(r)
    f = r.findings[0]
    assert f.schedules == 10
    assert f.locations == [f"{__file__}:{accumulate_line()}"], f.locations
    # The output block's VMEM buffer, read by `o_ref[...] +=` on the first grid point
    # before anything wrote it: all of its 8 x 128 int32.
    assert f.details["alloc"] == "o_ref (block)" and f.details["device"] == 0, f.details
    assert tuple(f.details["bytes"]) == (0, 8 * 128 * 4), f.details
    assert f.details["read"]["site"]["grid"] == [0, 0], f.details
    assert f.details["read"]["access"] == "read"
    assert "write these bytes before reading them" in f.message


def half_written(dtype):
    """Writes the first 4 of the 8 rows of each device's output block; the rest is
    memory nothing wrote. (Made inside an interpret mode for it to apply.)"""

    def kernel(x_ref, y_ref):
        y_ref[:4] = x_ref[:4]

    call = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), dtype))
    return jax.jit(jax.shard_map(call, mesh=mesh(), in_specs=P("x"), out_specs=P("x"), check_vma=False))


def ones(dtype):
    return jax.device_put(np.ones((32, 128), dtype), jax.NamedSharding(mesh(), P("x")))


@pytest.mark.parametrize("dtype", [np.float32, np.int32, jnp.bfloat16])
def test_an_output_the_kernel_half_writes_reads_as_in_interpret_mode(dtype):
    x = ones(dtype)
    with tpusim.simulate(backend="cpu"):
        got = np.asarray(half_written(dtype)(x))
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams()):
        want = np.asarray(half_written(dtype)(x))
    # NaN (the largest int32) where nothing wrote, in the same places (numpy knows
    # bfloat16's NaN as a NaN once widened).
    wide = np.float64 if dtype != np.int32 else np.int64
    np.testing.assert_array_equal(got.astype(wide), want.astype(wide))
    rows = got.reshape(4, 8, 128).astype(wide)
    assert (rows[:, :4] == 1).all()
    blank = np.nan if dtype != np.int32 else np.iinfo(np.int32).max
    np.testing.assert_array_equal(rows[:, 4:], np.full((4, 4, 128), blank))


def test_tpusim_uninit_zero_reads_zeros_as_interpret_modes_zero(monkeypatch):
    x = ones(np.float32)
    monkeypatch.setenv("TPUSIM_UNINIT", "zero")
    with tpusim.simulate(backend="cpu"):
        got = np.asarray(half_written(np.float32)(x))
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(uninitialized_memory="zero")):
        want = np.asarray(half_written(np.float32)(x))
    np.testing.assert_array_equal(got, want)
    assert (got.reshape(4, 8, 128)[:, 4:] == 0).all()
    monkeypatch.setenv("TPUSIM_UNINIT", "ones")
    with pytest.raises(tpusim.BadInput, match="TPUSIM_UNINIT"):
        with tpusim.simulate(backend="cpu"):
            np.asarray(half_written(np.int32)(ones(np.int32)))


def test_check_names_the_output_no_device_wrote_whole():
    (r,) = tpusim.check(half_written(np.float32), ones(np.float32), schedules=5)
    assert r.kinds() == ["output not written"], str(r)
    d = r.findings[0].details
    # Rows 4..8 of each device's (8, 128) float32 block: bytes 2048..4096, on all 4.
    assert tuple(d["bytes"]) == (4 * 128 * 4, 8 * 128 * 4) and d["devices"] == 4, d
    assert d["total"] == 4 * 4 * 128 * 4, d
