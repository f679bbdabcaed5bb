"""float16 and bfloat16 (ml_dtypes', which is jnp.bfloat16) from Python: shipped
collectives and the seed's own psum kernel, exact on integer data, results in the
input's dtype."""

import ml_dtypes
import numpy as np
import pytest
from conftest import run_script, seed_path

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
