"""A loop's body recorded once for its iterations after the first two (``_batch``):
every kernel here is recorded both ways (batched and one iteration at a time, the
``TPUSIM_LOOPS=check`` comparison, which raises on any difference in the records), its
result is held to numpy, and the counts say whether the body was batched or taken back
to per-iteration evaluation (control flow on the index, a carried vector, a copy of a
window that moves, a DMA whose source moves)."""

import jax
import numpy as np
import pytest
from jax import lax
from jax import numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import tpusim
from tpusim import _batch

ROWS, COLS = 8, 128


@pytest.fixture(autouse=True)
def compared(monkeypatch):
    monkeypatch.setattr(_batch, "CHECK", True)
    monkeypatch.setattr(_batch, "ENABLED", True)


def run(kernel, x, out_shape=None, scratch=()):
    """The kernel on `x` under tpusim, and how many loops were batched / taken back."""
    before = dict(_batch.STATS)
    f = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(out_shape or x.shape, jnp.float32),
        scratch_shapes=list(scratch),
    )
    with tpusim.simulate(backend="cpu", devices=1):
        y = np.asarray(f(x))
    return y, {k: _batch.STATS[k] - before[k] for k in before}


def blocks(n):
    return np.random.default_rng(n).standard_normal((n * ROWS, COLS)).astype(np.float32)


def counter_kernel(n):
    """A loop of `n` iterations writing block i of the output from block i of the input
    and a carried counter."""

    def kernel(x_ref, o_ref):
        def body(i, c):
            rows = pl.ds(pl.multiple_of(i * ROWS, ROWS), ROWS)
            o_ref[rows, :] = x_ref[rows, :] * 2.0 + c.astype(jnp.float32)
            return c + 3

        lax.fori_loop(0, n, body, 5)

    return kernel


def test_an_index_and_a_carried_counter_are_batched():
    n = 12
    x = blocks(n)
    y, stats = run(counter_kernel(n), x)
    want = x * np.float32(2) + (5 + 3 * (np.arange(n * ROWS) // ROWS))[:, None].astype(np.float32)
    np.testing.assert_array_equal(y, want)
    assert stats == {"batched": 1, "taken_back": 0}


def test_two_dimensional_indices_from_one_counter_are_batched():
    # The ring attention's pattern: head i // 2, rows (i % 2) * 8, a running sum in a ref.
    heads = 5

    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.zeros_like(o_ref)

        def body(i, c):
            h, rows = i // 2, pl.ds(pl.multiple_of(i % 2 * ROWS, ROWS), ROWS)
            o_ref[h, rows] = o_ref[h, rows] + jnp.exp(x_ref[h, rows]) * (i + 1).astype(jnp.float32)
            return c

        lax.fori_loop(0, heads * 2, body, 0)

    x = np.random.default_rng(1).standard_normal((heads, 2 * ROWS, COLS)).astype(np.float32)
    y, stats = run(kernel, x)
    scale = (np.arange(heads * 2) + 1).reshape(heads, 2, 1, 1).astype(np.float32)
    want = (np.exp(x).reshape(heads, 2, ROWS, COLS) * scale).reshape(x.shape)
    np.testing.assert_allclose(y, want, rtol=1e-6)
    assert stats == {"batched": 1, "taken_back": 0}


def test_a_scan_over_a_table_and_an_inner_loop_are_batched():
    table = np.arange(8) * 5 % 8  # a permutation, made in the kernel by an iota

    def kernel(x_ref, o_ref):
        def outer(c, t):
            def inner(j, c2):
                o_ref[t, pl.ds(j * ROWS, ROWS), :] = x_ref[c, pl.ds(j * ROWS, ROWS), :] + t.astype(jnp.float32)
                return c2

            lax.fori_loop(0, 6, inner, 0)
            return c + 1, t * 2

        lax.scan(outer, 0, jnp.arange(8, dtype=jnp.int32) * 5 % 8)

    x = np.random.default_rng(2).standard_normal((8, 6 * ROWS, COLS)).astype(np.float32)
    y, stats = run(kernel, x)
    want = np.zeros_like(y)
    for c, t in enumerate(table):
        want[t] = x[c] + np.float32(t)
    np.testing.assert_array_equal(y, want)
    # The scan's body holds a loop (run per iteration inside it): the inner loops of
    # its first two iterations are batched, then the scan's body is (with them in it).
    assert stats == {"batched": 3, "taken_back": 0}


def test_control_flow_on_the_index_is_taken_back():
    n = 8

    def kernel(x_ref, o_ref):
        def body(i, c):
            rows = pl.ds(i * ROWS, ROWS)
            o_ref[rows, :] = x_ref[rows, :]

            @pl.when(i == 5)
            def _():
                o_ref[rows, :] = -x_ref[rows, :]

            return c

        lax.fori_loop(0, n, body, 0)

    x = blocks(n)
    y, stats = run(kernel, x)
    want = x.copy()
    want[5 * ROWS : 6 * ROWS] *= -1
    np.testing.assert_array_equal(y, want)
    assert stats == {"batched": 0, "taken_back": 1}


def test_a_carried_vector_is_taken_back():
    n = 7

    def kernel(x_ref, o_ref):
        def body(i, acc):
            return acc + x_ref[pl.ds(i * ROWS, ROWS), :]

        o_ref[...] = lax.fori_loop(0, n, body, jnp.zeros((ROWS, COLS), jnp.float32))

    x = blocks(n)
    y, stats = run(kernel, x, out_shape=(ROWS, COLS))
    want = x.reshape(n, ROWS, COLS).astype(np.float64).sum(0)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    assert stats == {"batched": 0, "taken_back": 1}


def test_a_copy_of_a_moving_window_is_taken_back():
    n = 9

    def kernel(x_ref, o_ref):
        def body(i, c):
            o_ref[pl.ds((n - 1 - i) * ROWS, ROWS), :] = x_ref[pl.ds(i * ROWS, ROWS), :]
            return c

        lax.fori_loop(0, n, body, 0)

    x = blocks(n)
    y, stats = run(kernel, x)
    np.testing.assert_array_equal(y, x.reshape(n, ROWS, COLS)[::-1].reshape(x.shape))
    assert stats == {"batched": 0, "taken_back": 1}


def test_a_dma_whose_window_moves_is_taken_back():
    n = 6

    def kernel(x_ref, o_ref, sem):
        def body(i, c):
            copy = pltpu.make_async_copy(x_ref.at[pl.ds(i * ROWS, ROWS)], o_ref.at[pl.ds(i * ROWS, ROWS)], sem)
            copy.start()
            copy.wait()
            return c

        lax.fori_loop(0, n, body, 0)

    x = blocks(n)
    y, stats = run(kernel, x, scratch=[pltpu.SemaphoreType.DMA])
    np.testing.assert_array_equal(y, x)
    assert stats == {"batched": 0, "taken_back": 1}


def test_a_fixed_dma_in_the_body_is_batched():
    n = 6

    def kernel(x_ref, o_ref, buf, sem):
        def body(i, c):
            copy = pltpu.make_async_copy(x_ref.at[pl.ds(0, ROWS)], buf, sem)
            copy.start()
            copy.wait()
            o_ref[pl.ds(i * ROWS, ROWS), :] = buf[...] * i.astype(jnp.float32)
            return c

        lax.fori_loop(0, n, body, 0)

    x = blocks(n)
    y, stats = run(kernel, x, scratch=[pltpu.VMEM((ROWS, COLS), jnp.float32), pltpu.SemaphoreType.DMA])
    want = np.concatenate([x[:ROWS] * np.float32(i) for i in range(n)])
    np.testing.assert_array_equal(y, want)
    assert stats == {"batched": 1, "taken_back": 0}


def test_a_copy_after_a_moving_store_in_the_body_is_batched():
    # The copy of `buf` looks back over the body's records for writes into `buf`,
    # past the store whose window moves.
    n = 7

    def kernel(x_ref, o_ref, buf):
        buf[...] = x_ref[pl.ds(0, ROWS), :]

        def body(i, c):
            v = buf[...]
            o_ref[pl.ds(i * ROWS, ROWS), :] = x_ref[pl.ds(i * ROWS, ROWS), :] + 1.0
            o_ref[pl.ds(n * ROWS, ROWS), :] = v
            return c

        lax.fori_loop(0, n, body, 0)

    x = blocks(n + 1)
    y, stats = run(kernel, x, scratch=[pltpu.VMEM((ROWS, COLS), jnp.float32)])
    want = x.copy()
    want[: n * ROWS] += np.float32(1)
    want[n * ROWS :] = x[:ROWS]
    np.testing.assert_array_equal(y, want)
    assert stats == {"batched": 1, "taken_back": 0}


def test_a_field_holding_per_iteration_values_is_each_iterations_copy():
    # What a template's copies put in a record field: nested PerIters replaced by the
    # iteration's value, the parts that hold none the template's own objects.
    steps = [0, 1, 0]
    x = {"src": [4, [steps, [1, _batch.PerIter([256, 512]), 256]]], "loops": (3, _batch.PerIter([2, 3]))}
    assert _batch.subst(x, 0) == {"src": [4, [[0, 1, 0], [1, 256, 256]]], "loops": (3, 2)}
    at = _batch._at_iteration(x)
    got = at(1)
    assert got == {"src": [4, [[0, 1, 0], [1, 512, 256]]], "loops": (3, 3)}
    assert got["src"][1][0] is steps
    assert _batch.subst(7, 1) == 7


def test_a_batched_bodys_copies_are_left_to_the_native_reader(recordings):
    """The records hold the body once (`_batch.Copies`); what Python reads of them (the
    budget's text sizes, `flat`) is what the copies written out would give."""
    from tpusim import _budget

    n = 12
    run(counter_kernel(n), blocks(n))
    (point,) = recordings[-1][0]
    (copies,) = [r for r in point if type(r) is _batch.Copies]
    assert copies.n == n - 2  # the first two iterations are recorded on their own
    written = _batch.expand(point)
    assert len(written) == len(point) - 1 + copies.n * len(copies.records)
    flat = _batch.flat(point)
    assert len(flat) == len(written) and [flat[i] for i in range(len(flat))] == written
    assert _budget._text_size(point) == _budget._text_size(written)
    once = [x for r in point for x in (r.records if type(r) is _batch.Copies else [r])]
    assert list(_batch.records_of(point)) == once
