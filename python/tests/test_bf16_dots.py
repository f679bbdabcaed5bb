"""bf16 matrix products in a kernel (plain, `+=` into f32, right operand transposed,
batched, bf16 result) at shapes that are not whole AMX tiles, on small integers whose
sums are exact in f32: equal to numpy's sums, on the AMX tiles (where the CPU has them;
JAX's threads flush subnormals, which is when tpusim uses them) and with
``TPUSIM_AMX=0`` (the widened gemm path, in a child process: the switch is read once)."""

import os
import subprocess
import sys

import jax
import ml_dtypes
import numpy as np
from jax import numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import tpusim

BF16 = ml_dtypes.bfloat16
F32 = jnp.float32


def kernel(x, y, z, a, b, acc, o1, o2, o3, o4):
    o1[...] = acc[...]
    o1[...] += jnp.dot(x[...], y[...], preferred_element_type=F32)
    o2[...] = jax.lax.dot_general(x[...], z[...], (((1,), (1,)), ((), ())), preferred_element_type=F32)
    o3[...] = jnp.einsum("bmk,bkn->bmn", a[...], b[...], preferred_element_type=F32)
    o4[...] = jnp.dot(x[...], y[...], preferred_element_type=F32).astype(BF16)


def check(m=130, k=100, n=70):
    rng = np.random.default_rng(3)
    ints = lambda *s: rng.integers(-4, 5, s).astype(BF16)  # noqa: E731
    x, y, z = ints(m, k), ints(k, n), ints(n, k)
    a, b = ints(3, 40, 64), ints(3, 64, 48)
    acc = rng.integers(-50, 50, (m, n)).astype(np.float32)
    f = lambda v: np.asarray(v, np.float64)  # noqa: E731
    want = [
        f(acc) + f(x) @ f(y),
        f(x) @ f(z).T,
        np.einsum("bmk,bkn->bmn", f(a), f(b)),
        (f(x) @ f(y)).astype(BF16),
    ]
    call = pl.pallas_call(
        kernel,
        out_shape=[jax.ShapeDtypeStruct(w.shape, np.float32 if w.dtype == np.float64 else w.dtype) for w in want],
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)] * 6,
        out_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)] * 4,
    )
    with tpusim.simulate(backend="cpu"):
        got = [np.asarray(o) for o in jax.jit(call)(x, y, z, a, b, acc)]
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype or w.dtype == np.float64, i
        np.testing.assert_array_equal(f(g), f(w), err_msg=f"output {i}")


def test_bf16_dots_give_the_exact_sums():
    check()


def test_bf16_dots_give_the_exact_sums_on_the_gemm_path():
    env = {**os.environ, "TPUSIM_AMX": "0"}
    subprocess.run([sys.executable, __file__], env=env, check=True, timeout=300)


def test_bf16_dots_spread_over_the_cores_give_the_exact_sums():
    # Every product (packing and tiles) and the gemm path's spread over the cores, as
    # large products are (both switches are read once: in child processes).
    for amx in ("1", "0"):
        env = {**os.environ, "TPUSIM_AMX": amx, "TPUSIM_SPREAD_FROM_US": "0", "RAYON_NUM_THREADS": "2"}
        subprocess.run([sys.executable, __file__, "200", "300", "150"], env=env, check=True, timeout=300)


if __name__ == "__main__":
    check(*map(int, sys.argv[1:]))
