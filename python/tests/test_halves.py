"""bf16 and f16 operands that only fused regions read and write are lent to the CPU
executor at their own width (two bytes an element, widened and narrowed a block at a
time): the results equal values computed here bit for bit (NaNs as NaNs), for every 16-bit
pattern of the input (NaNs, infinities, -0, subnormals: read as zero by arithmetic, as
XLA's CPU code does), at odd shapes, call after call, and the
operand stays as it was; a transpose moves the 16-bit elements as stored."""

import jax
import ml_dtypes
import numpy as np
import pytest
from jax import numpy as jnp
from jax.experimental import pallas as pl

import tpusim


def kernel_of(f, shape, dtype):
    def body(x_ref, o_ref):
        o_ref[...] = f(x_ref[...])

    out = jax.eval_shape(f, jax.ShapeDtypeStruct(shape, dtype))
    return jax.jit(pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(out.shape, dtype)))


def every_pattern(shape, dtype, seed):
    """All 65536 bit patterns in a shuffled order, then repeated to fill `shape`."""
    n = int(np.prod(shape))
    bits = np.random.default_rng(seed).permutation(65536).astype(np.uint16)
    return np.resize(bits, n).reshape(shape).view(dtype)


def small_ints(shape, dtype, seed):
    return np.random.default_rng(seed).integers(-8, 9, size=shape).astype(dtype)


def same_bits_or_both_nan(got, want):
    g, w = got.astype(np.float64), want.astype(np.float64)
    both_nan = np.isnan(g) & np.isnan(w)
    eq = got.view(np.uint16) == want.view(np.uint16)
    bad = np.flatnonzero(~(both_nan | eq))
    assert bad.size == 0, f"{bad.size} differ, first at {bad[0]}: {got.flat[bad[0]]} for {want.flat[bad[0]]}"


DTYPES = [jnp.bfloat16, jnp.float16]
SHAPES = [(7, 2500), (300, 613), (1100, 1024)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_exact_elementwise_ops_on_every_pattern(cpu, dtype, shape):
    ops = {
        "x*2": (lambda x: x * 2, lambda v: v * np.float32(2)),
        "-x": (lambda x: -x, lambda v: -v),
        "max(x,0)": (lambda x: jnp.maximum(x, 0), None),
    }
    np_dtype = ml_dtypes.bfloat16 if dtype == jnp.bfloat16 else np.float16
    with tpusim.simulate(backend="cpu"):
        for name, (f, ref) in ops.items():
            g = kernel_of(f, shape, dtype)
            for call in range(2):
                host = every_pattern(shape, np_dtype, seed=call)
                x = jnp.asarray(host)
                got = np.asarray(g(x))
                v = host.astype(np.float32)
                if name != "-x":
                    # Arithmetic as XLA's on a CPU: f32 subnormals read as zero (a
                    # negation only flips the sign bit).
                    tiny = (v != 0) & (np.abs(v) < np.finfo(np.float32).tiny)
                    v = np.where(tiny, np.copysign(np.float32(0), v), v)
                if ref is None:
                    # XLA's max: NaN stays NaN, and max(-0, 0) is +0.
                    want = np.where(np.isnan(v), v, np.where(v > 0, v, np.float32(0))).astype(np_dtype)
                else:
                    want = ref(v).astype(np_dtype)
                same_bits_or_both_nan(got, want)
                np.testing.assert_array_equal(np.asarray(x).view(np.uint16), host.view(np.uint16))


@pytest.mark.parametrize("shape", SHAPES)
def test_row_sums_and_maxes_of_small_integers_are_exact(cpu, shape):
    rowwise = {
        "sum": (lambda x: jnp.sum(x, axis=-1, keepdims=True) + jnp.zeros_like(x), np.sum),
        "max": (lambda x: jnp.max(x, axis=-1, keepdims=True) + jnp.zeros_like(x), np.max),
    }
    with tpusim.simulate(backend="cpu"):
        for name, (f, ref) in rowwise.items():
            g = kernel_of(f, shape, jnp.bfloat16)
            for call in range(2):
                host = small_ints(shape, ml_dtypes.bfloat16, seed=call)
                got = np.asarray(g(jnp.asarray(host))).astype(np.float64)
                v = host.astype(np.float64)
                # Sums of at most 2500 integers of |x| <= 8: exact in f32, then rounded
                # once to bf16.
                want = np.broadcast_to(ref(v, axis=-1, keepdims=True), shape)
                want = want.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
                np.testing.assert_array_equal(got, want, err_msg=f"{name} call {call}")


# Edges of the 32x32 tiles a transpose of 16-bit elements moves in registers.
@pytest.mark.parametrize("shape", [*SHAPES, (33, 95), (2048, 64)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_transposes_move_every_pattern_as_stored(cpu, dtype, shape):
    np_dtype = ml_dtypes.bfloat16 if dtype == jnp.bfloat16 else np.float16
    g = kernel_of(lambda x: x.T, shape, dtype)
    with tpusim.simulate(backend="cpu"):
        for call in range(2):
            host = every_pattern(shape, np_dtype, seed=call)
            got = np.asarray(g(jnp.asarray(host)))
            np.testing.assert_array_equal(got.view(np.uint16), host.T.view(np.uint16))


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_transpose_feeding_a_region_is_exact(cpu, dtype):
    np_dtype = ml_dtypes.bfloat16 if dtype == jnp.bfloat16 else np.float16
    shape = (300, 613)
    g = kernel_of(lambda x: x.T + 1, shape, dtype)
    with tpusim.simulate(backend="cpu"):
        host = small_ints(shape, np_dtype, seed=3)
        got = np.asarray(g(jnp.asarray(host)))
    np.testing.assert_array_equal(got.astype(np.float64), host.T.astype(np.float64) + 1)
