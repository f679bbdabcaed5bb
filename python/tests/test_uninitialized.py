"""Reads of memory nothing wrote: an accumulator that one grid point forgets to zero
(the bug of the distributed-Pallas docs' `reduce_scatter_large_hbm`, whose accumulator is
zeroed on some grid points only) is reported with the kernel's line; the same kernel
with its initialisation is clean and equal to JAX's interpret mode."""

import jax
import numpy as np
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
