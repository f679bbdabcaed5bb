"""The kernels the cost model is validated with (docs/src/cost-model-validation.md):
they compute what they claim on the executor, and the model accepts them at the sizes
they ran at on real TPUs (a kernel that ran on a chip is never refused for its VMEM)."""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tpusim

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "validation"))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
import all_gather_matmul_grid as grid  # noqa: E402
import ring4_matmuls as r4  # noqa: E402


def _mesh(p, axis):
    return jax.make_mesh((p,), (axis,), devices=jax.devices()[:p])


def _ints(rng, shape):
    return jnp.asarray(rng.integers(-1, 2, shape), jnp.bfloat16)


# Small integers keep every bf16 partial sum exact (|sum| <= 128), so the results are
# the exact products: ag_matmul sums 4 blocks of 32 terms, matmul_rs 4 partials of 32.
@pytest.mark.parametrize("name,sizes", [("ag_matmul", (16, 128, 64)), ("matmul_rs", (16, 128, 32))])
def test_ring4_collective_matmuls_are_exact(name, sizes):
    b, k1, k2 = sizes
    sz = dict(batch=b, k1=k1, k2=k2)
    mesh = _mesh(r4.N, r4.AXIS)
    rng = np.random.default_rng(1)
    args = [_ints(rng, s) for s in r4.global_shapes(name, **sz)]
    with tpusim.simulate():
        got = np.asarray(r4.sharded(mesh, name, 2, **sz)(*r4.place(mesh, name, args)), np.float64)
    want = np.asarray(args[0], np.float64) @ np.asarray(args[1], np.float64)
    np.testing.assert_array_equal(got, want)


def test_ring4_mlp_matches_numpy():
    sz = dict(batch=16, k1=128, k2=64)
    mesh = _mesh(r4.N, r4.AXIS)
    rng = np.random.default_rng(2)
    shapes = r4.global_shapes("mlp", **sz)
    args = [jnp.asarray(rng.standard_normal(s) / np.sqrt(s[-2]), jnp.bfloat16) for s in shapes]
    with tpusim.simulate():
        got = np.asarray(r4.sharded(mesh, "mlp", 1, **sz)(*r4.place(mesh, "mlp", args)), np.float64)
    x, w1, w2 = (np.asarray(a, np.float64) for a in args)
    for i in range(w1.shape[0]):  # gelu, tanh form (jax.nn.gelu's default)
        h = x @ w1[i]
        h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
        x = h @ w2[i]
    # bf16 activations rounded at every layer: the source's own check was rel. RMSE < 1e-2.
    assert np.linalg.norm(got - x) / np.linalg.norm(x) < 2e-2


def test_ring4_mlp_is_race_free():
    # Its phases reuse buffers: each phase's DMAs have semaphores of their own, so a
    # neighbour already in the next phase cannot satisfy a wait of this one.
    sz = dict(batch=16, k1=128, k2=64)
    mesh = _mesh(r4.N, r4.AXIS)
    rng = np.random.default_rng(4)
    args = [_ints(rng, s) for s in r4.global_shapes("mlp", **sz)]
    rep = tpusim.check(r4.sharded(mesh, "mlp", 2, **sz), *r4.place(mesh, "mlp", args), schedules=10)
    assert rep.clean, str(rep)


def test_the_mlp_that_ran_on_a_v5p_fits_its_vmem_limit():
    # 50 MB of weights and 5 MB of scratch in VMEM under the kernel's own 60 MiB limit:
    # it ran on a 2x2 v5p, so the model must accept it (loads of the weights feeding the
    # dots are the weights' own bytes, not copies).
    mesh = _mesh(r4.N, r4.AXIS)
    (r,) = tpusim.model(r4.sharded(mesh, "mlp", 1), *r4.abstract(mesh, "mlp"), preset="v5p")
    assert r.seconds > 0
    # ...and refuses it below its buffers alone.
    with pytest.raises(tpusim.LimitError, match="VMEM"):
        tpusim.model(r4.sharded(mesh, "mlp", 1), *r4.abstract(mesh, "mlp"), preset="v5p", vmem_bytes=50 << 20)


@pytest.mark.parametrize("bn,bk", [(128, 256), (256, 128), (256, 256)])
def test_grid_all_gather_matmul_is_exact(bn, bk):
    mesh = _mesh(4, "x")
    m, k, n = 4 * 32, 256, 4 * 256
    rng = np.random.default_rng(3)
    x = rng.integers(-3, 4, (m, k)).astype(jnp.bfloat16)
    y = rng.integers(-3, 4, (k, n)).astype(jnp.bfloat16)
    f = grid.all_gather_matmul(mesh, "x", m, k, n, bn=bn, bk=bk)
    with tpusim.simulate():
        got = np.asarray(f(*grid.operands(mesh, "x", x, y))).astype(np.float64)
    # f32 sums of small integers are exact; the result is rounded once, to bf16.
    want = (x.astype(np.float64) @ y.astype(np.float64)).astype(jnp.bfloat16).astype(np.float64)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("m,n,k,bn,bk", [(1024, 57344, 8192, 7168, 8192), (2048, 57344, 8192, 1024, 8192)])
def test_block_sizes_tuned_on_v6e_are_not_refused(m, n, k, bn, bk):
    # vllm-project/tpu-inference's tuned (bn, bk) at its two largest shapes: all of y's
    # shard (117 MB) in VMEM, under the chip's 128 MiB; they ran on v6e.
    mesh = _mesh(8, "x")
    f = grid.all_gather_matmul(mesh, "x", m, k, n, bn=bn, bk=bk)
    args = grid.operands(
        mesh, "x", jax.ShapeDtypeStruct((m, k), jnp.bfloat16), jax.ShapeDtypeStruct((k, n), jnp.bfloat16)
    )
    (r,) = tpusim.model(f, *args, preset="v6e")
    flops = 2 * m * k * n / 8
    preset = {p["name"]: p for p in tpusim.presets()}["v6e"]
    assert r.seconds >= flops / preset["mxu_flops"]
