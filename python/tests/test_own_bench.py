"""``tpusim.bench(fn, make, sizes=...)``: a size sweep of a kernel of one's own (the
all-gather matmul of python/examples), measured and modeled, in ``tpusim bench``'s
terms; its JSON file has the command line's keys and its plot is ``tpusim plot``'s.
Lean: two sizes of a 4-device 16..32-row matmul, two timed calls."""

import functools
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl

import tpusim

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import all_gather_matmul as agmm  # noqa: E402

K, N = 256, 4 * 128
MESH = jax.make_mesh((4,), ("x",), devices=jax.devices()[:4])


@functools.lru_cache
def _kernel(m):
    return agmm.all_gather_matmul(MESH, "x", m, K, N, bn=128, bk=128)


def agmm_fn(x, w):
    """all_gather(x) @ w for any row count of x (a kernel built per shape, once)."""
    return _kernel(x.shape[0])(x, w)


def make(m):
    rng = np.random.default_rng(m)
    x = rng.integers(-3, 4, (m, K)).astype(jnp.bfloat16)
    w = rng.integers(-3, 4, (K, N)).astype(jnp.bfloat16)
    return agmm.operands(MESH, "x", x, w)


def shapes(m):
    return agmm.operands(
        MESH, "x", jax.ShapeDtypeStruct((m, K), jnp.bfloat16), jax.ShapeDtypeStruct((K, N), jnp.bfloat16)
    )


def reference(x, w):
    # Small integers: exact in f32; the result rounded once, to bf16, as the kernel's.
    return (np.asarray(x, np.float64) @ np.asarray(w, np.float64)).astype(jnp.bfloat16)


def _consistent(row, m):
    size = (m * K + K * N) * 2  # the bytes of fn's two bf16 arguments
    assert row["size"] == size and row["count"] == m * K and row["param"] == m
    # algbw = size / time, in GB/s of the row's own microseconds.
    assert row["algbw_gbps"] == pytest.approx(size / (row["time_us"] * 1e-6) / 1e9, rel=1e-12)


def test_a_measured_sweep_of_ones_own_kernel(cpu, tmp_path):
    out, svg = tmp_path / "agmm.json", tmp_path / "agmm.svg"
    out.write_text("an older file, replaced whole")
    r = tpusim.bench(
        agmm_fn, make, sizes=[64, 128], iters=2, warmup=0, reference=reference, rtol=0, atol=0, json=out, plot=svg
    )
    assert [row["param"] for row in r.rows] == [64, 128]
    for row, m in zip(r.rows, [64, 128]):
        _consistent(row, m)
        assert row["busbw_gbps"] == row["algbw_gbps"]  # no traffic class named
        assert row["wrong"] == 0  # the kernel's results are numpy's
        assert row["collective"] == "agmm_fn"
    assert r.timing == "measured" and r.executor == "cpu" and r.devices == 4 and r.mesh == "x=4"
    assert r.dtype == "bfloat16" and (r.min_bytes, r.max_bytes) == (r.rows[0]["size"], r.rows[1]["size"])
    # The file is what .json() gives, with the command line's keys and the kernel's own.
    assert json.loads(out.read_text()) == r.json()
    cli = tpusim.bench("psum", 4, min_bytes="4K", max_bytes="4K", iters=1, warmup=0).json()
    assert set(r.json()) == set(cli) | {"kernel", "traffic", "sizes"}
    # Drawn by tpusim plot's code: a line named for the kernel.
    text = svg.read_text()
    assert text.lstrip().startswith("<") and "agmm_fn" in text
    # The table: a header, then one line per size with the size's bytes.
    lines = str(r).splitlines()
    assert lines[0].startswith("# tpusim bench: agmm_fn P=4")
    assert [ln.split()[2] for ln in lines[-2:]] == [str(row["size"]) for row in r.rows]


def test_wrong_elements_are_counted_against_the_reference(cpu):
    def off_by_one_row(x, w):
        want = reference(x, w).astype(np.float64)
        want[3] += 1.0
        return want.astype(jnp.bfloat16)

    # Exact (small integers): every element of the row is off; with bf16's default
    # tolerance, |got - want| <= 2e-2 + 2e-2 |want|, those of large magnitude pass.
    (row,) = tpusim.bench(agmm_fn, *make(64), iters=1, warmup=0, reference=off_by_one_row, rtol=0, atol=0).rows
    assert row["wrong"] == N and row["param"] is None
    x, w = make(64)
    got, want = reference(x, w).astype(np.float64)[3], off_by_one_row(x, w).astype(np.float64)[3]
    small = int(np.count_nonzero(np.abs(got - want) > 2e-2 + 2e-2 * np.abs(want)))
    assert 0 < small < N
    (row,) = tpusim.bench(agmm_fn, x, w, iters=1, warmup=0, reference=off_by_one_row).rows
    assert row["wrong"] == small


@functools.lru_cache
def _deep_kernel(m):
    return agmm.all_gather_matmul(MESH, "x", m, K, N, bn=128, bk=256)


def test_a_modeled_sweep_sums_its_calls_and_takes_shapes():
    def model(kernel, m):
        (run,) = tpusim.model(kernel(m), *shapes(m), preset="v6e")
        return run.seconds

    def both(x, w):  # two pallas_calls: block depths 128 and 256
        return _kernel(x.shape[0])(x, w), _deep_kernel(x.shape[0])(x, w)

    r = tpusim.bench(both, shapes, sizes=[64, 128], preset="v6e", traffic="all_gather")
    assert r.timing == "modeled" and r.model == "v6e" and r.iters is None
    for row, m in zip(r.rows, [64, 128]):
        _consistent(row, m)
        assert row["calls"] == 2 and row["wrong"] is None
        assert row["time_us"] == pytest.approx((model(_kernel, m) + model(_deep_kernel, m)) * 1e6, rel=1e-12)
        # nccl-tests' all-gather bus factor on 4 devices: (P - 1) / P.
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 3 / 4, rel=1e-12)


def _double(x):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def test_a_call_made_again_counts_again():
    # JAX lowers a jitted function once however often it is called, and a scan's body
    # once: model-only counts the calls from the jaxpr, 2 + 3 + 1 of the branch taken.
    double = jax.jit(_double)

    def f(x):
        y = double(double(x))
        y, _ = jax.lax.scan(lambda c, _: (double(c), None), y, None, length=3)
        return jax.lax.cond(y[0, 0] > 0, double, lambda v: v + 1.0, y)

    x = jax.ShapeDtypeStruct((64, 128), jnp.float32)
    (one,) = tpusim.model(_double, x, preset="v5e")
    (row,) = tpusim.bench(f, x, preset="v5e").rows
    assert row["calls"] == 6
    assert row["time_us"] == pytest.approx(6 * one.seconds * 1e6, rel=1e-12)
    got = tpusim.sweep(lambda x, k: f(x * k), [x], params={"k": [1.0]}, preset="v5e")
    assert got.best.calls == 6 and got.best.seconds == pytest.approx(6 * one.seconds, rel=1e-12)


def test_bad_bench_arguments_are_named(tmp_path):
    with pytest.raises(tpusim.BadInput, match="needs sizes="):
        tpusim.bench(agmm_fn, make)
    with pytest.raises(tpusim.BadInput, match="one callable after fn"):
        tpusim.bench(agmm_fn, *make(64), sizes=[64])
    with pytest.raises(tpusim.BadInput, match="unknown traffic"):
        tpusim.bench(agmm_fn, shapes, sizes=[64], preset="v6e", traffic="gather_all")
    with pytest.raises(tpusim.BadInput, match="backend"):
        tpusim.bench(agmm_fn, make, sizes=[64], backend="tpu")
    with pytest.raises(tpusim.BadInput, match="apply to a function of your own"):
        tpusim.bench("psum", sizes=[64])
    # The output is checked before anything runs.
    with pytest.raises(tpusim.TpusimError, match="bench results"):
        tpusim.bench(agmm_fn, shapes, sizes=[64], preset="v6e", json=tmp_path / "no" / "such" / "dir.json")
