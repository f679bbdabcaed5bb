"""float16 and bfloat16 (ml_dtypes', which is jnp.bfloat16) from Python: shipped
collectives and the seed's own psum kernel, exact on integer data, results in the
input's dtype; reductions of 16-bit values in a kernel."""

import jax
import ml_dtypes
import numpy as np
import pytest
from conftest import run_script, seed_path
from jax import numpy as jnp
from jax.experimental import pallas as pl

import tpusim

DTYPES = [np.float16, ml_dtypes.bfloat16]


@pytest.mark.parametrize("backend", ["cpu", "gpu"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_shipped_collectives_in_16_bit(backend, dtype):
    rng = np.random.default_rng(3)
    xs = [rng.integers(-30, 30, size=(8, 128)).astype(dtype) for _ in range(4)]
    exact = [x.astype(np.float64) for x in xs]
    out = tpusim.run("psum", xs, backend=backend)
    assert out[0].dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out[3].astype(np.float64), np.sum(exact, axis=0))
    out = tpusim.run("psum", xs, op="max", backend=backend)
    np.testing.assert_array_equal(out[0].astype(np.float64), np.max(exact, axis=0))
    out = tpusim.run("all_gather", xs, backend=backend)
    np.testing.assert_array_equal(out[1].astype(np.float64), np.stack(exact))


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_the_seed_psum_kernel_in_16_bit(name):
    # The seed as written with every jnp.float32 replaced, on small integers (exact sums
    # in either format), against numpy.
    p = 4
    arrays, _ = run_script(
        seed_path("psum"),
        p,
        replace=[
            ("jnp.float32", f"jnp.{name}"),
            (
                "input_arr = jax.device_put(input_arr, sharding)",
                f"input_arr = jax.device_put((input_arr * 8).round().astype(jnp.{name}), sharding)",
            ),
        ],
    )
    x = arrays["input_arr"]
    assert x.dtype.name == name
    got = arrays["pallas_result"]
    assert got.dtype.name == name
    shards = np.split(x.astype(np.float64), p, axis=1)
    want = np.concatenate([np.sum(shards, axis=0)] * p, axis=1)
    np.testing.assert_array_equal(got.astype(np.float64), want)


def test_other_dtypes_are_refused_with_the_supported_list():
    with pytest.raises(tpusim.BadInput) as e:
        tpusim.run("psum", [np.zeros((8, 128), np.uint8)] * 2)
    assert "f32, i32, f16 or bf16, not u8" in str(e.value)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("shape,axis", [((300, 1000), -1), ((3, 7, 40000), -1), ((64, 33, 9), (1, 2)), ((50, 20), 0)])
def test_reductions_of_16_bit_values_accumulate_in_f32_and_round_once(dtype, shape, axis):
    # Long rows (more than one run the executor widens at a time) and other axes.
    x = jnp.asarray(np.random.default_rng(1).standard_normal(shape) * 4, dtype)
    for f in (jnp.max, jnp.min, jnp.sum):

        def body(x_ref, o_ref, f=f):
            o_ref[...] = f(x_ref[...], axis=axis)

        def want(v, f=f):
            return f(v.astype(jnp.float32), axis=axis).astype(dtype)

        out = jax.ShapeDtypeStruct(jax.eval_shape(want, x).shape, dtype)
        with tpusim.simulate(devices=1, backend="cpu"):
            got = pl.pallas_call(body, out_shape=out)(x)
        np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want(x), np.float32), err_msg=f.__name__)
