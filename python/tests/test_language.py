"""The parts of the Pallas TPU language a new user reaches for first, each in a kernel
of the project's own on odd shapes and the dtypes it takes, against JAX: its TPU
interpret mode on the same kernel (``both``), or the same jnp code jitted on the CPU
(``against_jnp``). Constants of any shape (iota tables, masks, literals), inf and NaN,
Python scalars in selects, the pinned JAX's implicit size-1 broadcasting, ``lax.top_k``,
``jax.nn``'s activations, BARRIER scratch semaphores, ``pl.empty``,
``pl.debug_print``, ``lax.cond`` with operands, bitcasts of values and of refs, and
``.reshape`` of refs."""

import functools

import jax
import ml_dtypes
import numpy as np
import pytest
from jax import lax
from jax import numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import tpusim

P = jax.sharding.PartitionSpec
DMA, REGULAR, BARRIER = pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR, pltpu.SemaphoreType.BARRIER
BF16 = jnp.bfloat16


def later(*args, **kw):
    """A function making `pl.pallas_call(*args, **kw)` when called and calling it: the
    mode it is traced under (tpusim's or JAX's interpret mode) decides who runs it."""
    return lambda *xs: pl.pallas_call(*args, **kw)(*xs)


def vmem_call(kernel, out, n_in=1, **kw):
    """`later` of a pallas_call of `kernel` with `n_in` whole-VMEM inputs and outputs `out`."""
    many = isinstance(out, (tuple, list))
    return later(
        kernel,
        out_shape=out,
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)] * n_in,
        out_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)] * len(out) if many else pl.BlockSpec(memory_space=pltpu.VMEM),
        **kw,
    )


def on_tpusim(fn, *args):
    with tpusim.simulate(backend="cpu"):
        return jax.tree.map(np.asarray, jax.jit(fn)(*args))


def on_interpret(fn, *args):
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams()):
        return jax.tree.map(np.asarray, jax.jit(fn)(*args))


def both(fn, *args, check=True):
    """(tpusim's result, interpret mode's); tpusim's verifier must find it clean."""
    got = on_tpusim(fn, *args)
    if check:
        reports = tpusim.check(jax.jit(fn), *args, schedules=6)
        assert reports and reports.clean, str(reports)
    return got, on_interpret(fn, *args)


def assert_same(got, want, rtol=0.0):
    def one(g, w):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        if g.dtype == ml_dtypes.bfloat16:  # numpy's comparisons know bfloat16's NaN as f32
            g, w = g.astype(np.float32), w.astype(np.float32)
        if rtol:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=rtol)
        else:
            np.testing.assert_array_equal(g, w)

    jax.tree.map(one, got, want)


def data(shape, dtype, seed=0, lo=-50, hi=50):
    rng = np.random.default_rng(seed)
    a = rng.integers(lo, hi, size=shape)
    return jnp.asarray(a.astype(np.float32) / 4 if np.dtype(dtype).kind != "i" else a, dtype=dtype)


# ------------------------------------------------------------------ constants


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.int32, BF16])
def test_array_constants_iota_tables_masks_and_literals(dtype):
    shape = (5, 13)

    def kernel(x_ref, o_ref):
        x = x_ref[...]
        rows = lax.broadcasted_iota(jnp.int32, shape, 0)
        cols = lax.broadcasted_iota(jnp.int32, shape, 1)
        causal = cols <= rows  # an iota-built mask: a constant array
        # A literal (JAX refuses captured arrays: one element traced makes it a
        # concatenation of scalars, which tpusim folds into a constant).
        table = jnp.array([3, -1, 4, 1, -5 + pl.program_id(0)], dtype)[:, None] * jnp.ones(shape, dtype)
        picked = jnp.where(cols == 3, x, table)  # `where(iota == k, a, b)`
        o_ref[...] = jnp.where(causal, picked, jnp.zeros_like(x)) + (rows * 2 + cols).astype(dtype)

    f = vmem_call(kernel, jax.ShapeDtypeStruct(shape, dtype), grid=(1,))
    assert_same(*both(f, data(shape, dtype)))


def test_a_non_uniform_constant_stored_into_a_ref():
    def kernel(o_ref):
        o_ref[...] = lax.broadcasted_iota(jnp.int32, (5, 7), 1) * 3 - lax.broadcasted_iota(jnp.int32, (5, 7), 0)
        o_ref[1, 2:5] = jnp.array([9, 8, 7 + pl.program_id(0)], jnp.int32)

    f = vmem_call(kernel, jax.ShapeDtypeStruct((5, 7), jnp.int32), n_in=0, grid=(1,))
    assert_same(*both(lambda: f()))


@pytest.mark.parametrize("dtype", [jnp.float32, BF16, jnp.float16])
def test_inf_and_nan_constants(dtype):
    shape = (3, 17)

    def kernel(x_ref, o_ref, m_ref):
        x = x_ref[...]
        o_ref[...] = jnp.where(x > 0, x, -jnp.inf) + jnp.where(x < -5, jnp.inf, 0.0).astype(dtype)
        m = jnp.full((3, 1), -jnp.inf, dtype)
        m = jnp.maximum(m, jnp.max(x, axis=1, keepdims=True))
        m_ref[...] = jnp.where(x == 0, jnp.nan, m).astype(dtype)

    f = vmem_call(kernel, (jax.ShapeDtypeStruct(shape, dtype),) * 2)
    assert_same(*both(f, data(shape, dtype)))


# ------------------------------------------------------------------ selects and broadcasting


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.int32, BF16, jnp.int8])
def test_python_scalars_in_selects_and_zeros_like(dtype):
    shape = (7, 9)
    zero = 0.0 if np.dtype(dtype).kind == "f" or dtype == BF16 else 0

    def kernel(x_ref, o_ref):
        x = x_ref[...]
        a = jnp.where(x > 0, x, zero)  # a Python scalar takes the values' dtype, not bool
        b = lax.select(x > 1, x, jnp.zeros_like(x))
        c = jnp.where(x < 0, 3, x)
        o_ref[...] = a + b + c

    f = vmem_call(kernel, jax.ShapeDtypeStruct(shape, dtype))
    assert_same(*both(f, data(shape, dtype, lo=-20, hi=20)))


def test_select_n_of_three_cases_with_an_integer_selector():
    shape = (4, 11)

    def kernel(x_ref, o_ref):
        x = x_ref[...]
        which = lax.rem(jnp.abs(x), 3)
        o_ref[...] = lax.select_n(which, x, x * 2, jnp.full(shape, -7, jnp.int32))

    f = vmem_call(kernel, jax.ShapeDtypeStruct(shape, jnp.int32))
    assert_same(*both(f, data(shape, jnp.int32)))


def test_size_one_dimensions_broadcast_implicitly_and_softmax():
    shape = (6, 130)

    def kernel(x_ref, o_ref, s_ref):
        x = x_ref[...]
        o_ref[...] = jnp.maximum(x, x[:, :1]) - jnp.minimum(x[:1, :], x) * x[:, 2:3]
        s_ref[...] = jax.nn.softmax(x, axis=-1)

    f = vmem_call(kernel, (jax.ShapeDtypeStruct(shape, jnp.float32),) * 2)
    (got, got_s), (want, want_s) = both(f, data(shape, jnp.float32))
    assert_same(got, want)
    assert_same(got_s, want_s, rtol=2e-6)


@pytest.mark.parametrize("fn", ["sigmoid", "silu", "gelu", "gelu_exact", "softmax", "log_softmax", "relu"])
def test_jax_nn_activations(fn):
    act = {"gelu_exact": functools.partial(jax.nn.gelu, approximate=False)}.get(fn) or getattr(jax.nn, fn)
    shape = (5, 33)

    def kernel(x_ref, o_ref):
        o_ref[...] = act(x_ref[...])

    f = vmem_call(kernel, jax.ShapeDtypeStruct(shape, jnp.float32))
    x = data(shape, jnp.float32, lo=-40, hi=40)
    assert_same(on_tpusim(f, x), np.asarray(jax.jit(act)(x)), rtol=3e-6)


# ------------------------------------------------------------------ top_k


@pytest.mark.parametrize(
    "dtype, shape, k",
    [(jnp.float32, (5, 13), 2), (jnp.int32, (3, 9), 3), (BF16, (4, 8), 1), (jnp.float32, (2, 3, 7), 4)],
)
def test_top_k_against_lax(dtype, shape, k):
    def kernel(x_ref, v_ref, i_ref):
        v, i = lax.top_k(x_ref[...], k)
        v_ref[...] = v
        i_ref[...] = i

    out = (jax.ShapeDtypeStruct(shape[:-1] + (k,), dtype), jax.ShapeDtypeStruct(shape[:-1] + (k,), jnp.int32))
    f = vmem_call(kernel, out)
    x = data(shape, dtype, lo=-6, hi=6)  # many ties: the lower index comes first
    got = on_tpusim(f, x)
    want = jax.tree.map(np.asarray, jax.jit(lambda a: lax.top_k(a, k))(x))
    assert_same(tuple(got), tuple(want))


def test_top_k_routing_in_a_kernel_matches_interpret_mode():
    def kernel(x_ref, w_ref, i_ref):
        probs = jax.nn.softmax(x_ref[...], axis=-1)
        w, i = lax.top_k(probs, 2)
        w_ref[...] = w / jnp.sum(w, axis=-1, keepdims=True)
        i_ref[...] = i

    f = vmem_call(kernel, (jax.ShapeDtypeStruct((9, 2), jnp.float32), jax.ShapeDtypeStruct((9, 2), jnp.int32)))
    (gw, gi), (ww, wi) = both(f, data((9, 6), jnp.float32, seed=3))
    assert_same(gi, wi)
    assert_same(gw, ww, rtol=2e-6)


# ------------------------------------------------------------------ semaphores and DMAs


def test_barrier_scratch_semaphores_with_a_collective_id_and_no_custom_barrier():
    n = 4
    mesh = jax.make_mesh((n,), ("x",))

    def kernel(x_ref, y_ref, bar, send, recv):
        me = lax.axis_index("x")
        right = lax.rem(me + 1, n)
        # A kernel-local semaphore (as Mosaic allocates a BARRIER scratch), signalled here.
        pl.semaphore_signal(bar, 2)
        pl.semaphore_wait(bar, 2)
        copy = pltpu.async_remote_copy(
            x_ref, y_ref, send, recv, device_id=(right,), device_id_type=pl.DeviceIdType.MESH
        )
        copy.wait()

    call = later(
        kernel,
        out_shape=jax.ShapeDtypeStruct((3, 20), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[BARRIER, DMA, DMA],
        compiler_params=pltpu.CompilerParams(collective_id=0, allow_collective_id_without_custom_barrier=True),
    )
    # Without a handshake the verifier rightly reports the send (a collective_id kernel
    # gets no entry barrier): the run is what is compared here.
    f = jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    x = jax.device_put(data((3 * n, 20), jnp.float32), jax.NamedSharding(mesh, P("x")))
    got, want = both(f, x, check=False)
    assert_same(got, want)
    np.testing.assert_array_equal(got, np.roll(np.asarray(x).reshape(n, 3, 20), 1, axis=0).reshape(-1, 20))


def test_empty_has_memory_space_and_memory_space_constraints_on_operands():
    shape = (5, 6)

    def kernel(x_ref, o_ref, buf):
        pltpu.sync_copy(x_ref, buf)
        e = pl.empty(shape, jnp.float32)
        e = lax.dynamic_update_slice(e, buf[...] * 2, (0, 0))
        in_hbm = pltpu.has_memory_space(x_ref, pltpu.HBM)
        o_ref[...] = e + jnp.where(in_hbm, 1.0, 0.0)

    call = later(
        kernel,
        out_shape=jax.ShapeDtypeStruct(shape, jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM(shape, jnp.float32)],
    )
    f = lambda x: call(pltpu.with_memory_space_constraint(x, pltpu.HBM))  # noqa: E731
    x = data(shape, jnp.float32)
    # JAX's interpret mode has no rule for `has_memory_space`: numpy is the reference.
    np.testing.assert_array_equal(on_tpusim(f, x), np.asarray(x) * 2 + 1)
    assert tpusim.check(jax.jit(f), x, schedules=4).clean


def test_debug_print_prints_with_the_device_and_grid_point(capsys):
    def kernel(x_ref, o_ref):
        pl.debug_print("step {} of {}", pl.program_id(0), pl.num_programs(0))
        o_ref[...] = x_ref[...]

    f = later(
        kernel,
        out_shape=jax.ShapeDtypeStruct((2, 8), jnp.int32),
        grid=(2,),
        in_specs=[pl.BlockSpec((1, 8), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((1, 8), lambda i: (i, 0)),
    )
    x = data((2, 8), jnp.int32)
    for _ in range(2):  # printed at every call, as a TPU prints
        np.testing.assert_array_equal(on_tpusim(f, x), x)
    lines = [l for l in capsys.readouterr().out.splitlines() if "step" in l]
    assert lines == ["[device 0, grid point [0]] step 0 of 2", "[device 0, grid point [1]] step 1 of 2"] * 2


def test_cond_with_operands_and_async_remote_copy_wait():
    def kernel(x_ref, o_ref):
        x = x_ref[...]
        o_ref[...] = lax.cond(pl.program_id(0) == 0, lambda a, b: a * b, lambda a, b: a - b, x, x + 1)

    f = later(
        kernel,
        out_shape=jax.ShapeDtypeStruct((2, 3, 5), jnp.int32),
        grid=(2,),
        in_specs=[pl.BlockSpec((None, 3, 5), lambda i: (i, 0, 0))],
        out_specs=pl.BlockSpec((None, 3, 5), lambda i: (i, 0, 0)),
    )
    assert_same(*both(f, data((2, 3, 5), jnp.int32)))


# ------------------------------------------------------------------ bitcasts and reshapes


@pytest.mark.parametrize(
    "src, dst", [(jnp.float32, jnp.int32), (jnp.int32, jnp.float32), (BF16, jnp.float16), (jnp.int8, jnp.uint8)]
)
def test_value_bitcasts_of_one_width(src, dst):
    shape = (3, 10)

    def kernel(x_ref, o_ref, p_ref):
        o_ref[...] = lax.bitcast_convert_type(x_ref[...], dst)
        p_ref[...] = pltpu.bitcast(x_ref[...], dst)

    f = vmem_call(kernel, (jax.ShapeDtypeStruct(shape, dst),) * 2)
    assert_same(*both(f, data(shape, src)))


def test_ref_bitcast_and_reshape_for_loads_stores_and_dmas():
    def kernel(x_ref, o_ref, r_ref, buf, sem):
        bits = x_ref.bitcast(jnp.int32)  # f32 -> i32: the same words
        o_ref[...] = (bits[...] & 0xFFFF) + bits[1:2, :]
        flat = x_ref.reshape(4, 15)  # [6, 10] -> [4, 15]
        r_ref[...] = flat[...] * 2.0
        r_ref.reshape(60)[7:12] = jnp.arange(5, dtype=jnp.float32)
        pltpu.sync_copy(x_ref.bitcast(jnp.int32), buf)
        o_ref.reshape(5, 12)[0, :] = buf.reshape(60)[12:24]

    f = later(
        kernel,
        out_shape=(jax.ShapeDtypeStruct((6, 10), jnp.int32), jax.ShapeDtypeStruct((4, 15), jnp.float32)),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)] * 2,
        scratch_shapes=[pltpu.VMEM((6, 10), jnp.int32), DMA],
    )
    x = data((6, 10), jnp.float32)
    got = on_tpusim(f, x)
    xb = np.asarray(x).view(np.int32)
    o = (xb & 0xFFFF) + xb[1:2, :]
    o.reshape(5, 12)[0, :] = xb.reshape(60)[12:24]
    r = np.asarray(x).reshape(4, 15) * 2
    r.reshape(60)[7:12] = np.arange(5)
    np.testing.assert_array_equal(got[0], o)
    np.testing.assert_array_equal(got[1], r)
    assert tpusim.check(jax.jit(f), x, schedules=4).clean
