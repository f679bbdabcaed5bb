"""Every construct of the jaxpr front end, each in a small kernel of the project's own,
run on tpusim and on JAX's TPU interpret mode (the reference) with the same inputs:
integer data, so the results must be equal. Each kernel is also clean under the
verifier. The pallas_calls are made inside the traced functions, so the mode the
function is traced under (``tpusim.simulate`` or ``pltpu.force_tpu_interpret_mode``)
decides who runs them."""

import functools

import jax
import numpy as np
import pytest
from conftest import against_interpret
from jax import lax
from jax import numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import tpusim

P = jax.sharding.PartitionSpec
DMA, REGULAR = pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR


def mesh1(n=4):
    return jax.make_mesh((n,), ("x",))


def put(a, mesh, spec):
    return jax.device_put(jnp.asarray(a), jax.NamedSharding(mesh, spec))


def both(fn, *args, schedules=20, unwritten=0):
    """`fn(*args)` on tpusim and on JAX's interpret mode: (tpusim's, interpret's);
    tpusim's verifier must find the kernels clean but for `unwritten` outputs the
    kernel writes in part (on purpose)."""
    with tpusim.simulate(backend="cpu"):
        got = jax.tree.map(np.asarray, jax.jit(fn)(*args))
    reports = tpusim.check(jax.jit(fn), *args, schedules=schedules)
    kinds = [k for r in reports for k in r.kinds()]
    assert reports and kinds == ["output not written"] * unwritten, str(reports)
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams()):
        want = jax.tree.map(np.asarray, jax.jit(fn)(*args))
    return got, want


def same(fn, *args, **kw):
    got, want = against_interpret(fn, *args, **kw)
    jax.tree.map(np.testing.assert_array_equal, got, want)
    return got


def iota(shape, dtype=jnp.int32):
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)


# ------------------------------------------------------------------ DMAs and semaphores


def test_remote_copy_ring_with_a_barrier_semaphore():
    n = 4

    def kernel(x_ref, y_ref, send, recv):
        me = lax.axis_index("x")
        right = lax.rem(me + 1, n)
        left = lax.rem(me + n - 1, n)
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, device_id=(left,), device_id_type=pl.DeviceIdType.MESH)
        pl.semaphore_signal(barrier, device_id=(right,), device_id_type=pl.DeviceIdType.MESH)
        pl.semaphore_wait(barrier, 2)
        dma = pltpu.make_async_remote_copy(
            x_ref, y_ref, send, recv, device_id=(right,), device_id_type=pl.DeviceIdType.MESH
        )
        dma.start()
        dma.wait()

    def f(x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[DMA, DMA],
            compiler_params=pltpu.CompilerParams(collective_id=3),
        )
        return jax.shard_map(call, mesh=mesh1(), in_specs=P(None, "x"), out_specs=P(None, "x"), check_vma=False)(x)

    x = put(iota((8, 128 * n)), mesh1(), P(None, "x"))
    got = same(f, x)
    np.testing.assert_array_equal(got, np.roll(np.asarray(x).reshape(8, n, 128), 1, axis=1).reshape(8, -1))


def test_async_remote_copy_logical_ids_run_scoped_semaphores_and_axis_size():
    def kernel(x_ref, y_ref):
        def body(ready, send, recv):
            n = lax.axis_size("x")
            other = lax.rem(lax.axis_index("x") + n - 1, n)
            pl.semaphore_signal(ready, device_id=other, device_id_type=pl.DeviceIdType.LOGICAL)
            pl.semaphore_wait(ready)
            copy = pltpu.async_remote_copy(x_ref, y_ref, send, recv, other, device_id_type=pl.DeviceIdType.LOGICAL)
            copy.wait_send()
            copy.wait_recv()

        pl.run_scoped(body, REGULAR, DMA, DMA)

    def f(x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        )
        return jax.shard_map(call, mesh=mesh1(), in_specs=P("x"), out_specs=P("x"), check_vma=False)(x)

    x = put(iota((32, 128)), mesh1(), P("x"))
    got = same(f, x)
    np.testing.assert_array_equal(got, np.roll(np.asarray(x), -8, axis=0))


def test_local_copies_nested_run_scoped_vmem_and_stores():
    def kernel(x_ref, o_ref):
        def outer(buf, sem):
            pltpu.async_copy(x_ref, buf, sem).wait()

            def inner(acc, sem2):
                acc[...] = jnp.zeros_like(acc)
                acc[...] += buf[...]
                acc[...] += buf[...]
                acc[pl.ds(0, 2)] = jnp.full((2, 128), 7, jnp.int32)
                c = pltpu.make_async_copy(acc, o_ref.at[0], sem2)
                c.start()
                c.wait()

            pl.run_scoped(inner, pltpu.VMEM((8, 128), jnp.int32), DMA)
            pltpu.sync_copy(buf, o_ref.at[1])

        pl.run_scoped(outer, pltpu.VMEM((8, 128), jnp.int32), DMA)

    def f(x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((2, 8, 128), jnp.int32),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
        )
        return jax.shard_map(call, mesh=mesh1(2), in_specs=P("x"), out_specs=P("x"), check_vma=False)(x)

    x = put(iota((16, 128)), mesh1(2), P("x"))
    got = same(f, x)
    a = np.asarray(x).reshape(2, 8, 128)
    want0 = 2 * a
    want0[:, :2] = 7
    np.testing.assert_array_equal(got.reshape(2, 2, 8, 128)[:, 0], want0)
    np.testing.assert_array_equal(got.reshape(2, 2, 8, 128)[:, 1], a)


def test_2d_mesh_axes_and_every_device_id_form():
    # mesh ("x", "y") = (2, 2); each device sends four blocks, each with one id form.
    mesh = jax.make_mesh((2, 2), ("x", "y"))

    def kernel(x_ref, o_ref, send, recv):
        x, y = lax.axis_index("x"), lax.axis_index("y")
        lin = lax.axis_index(("x", "y"))
        nxt = lax.rem(lin + 1, 4)
        barrier = pltpu.get_barrier_semaphore()
        for k in range(4):  # every device tells every device it has entered
            pl.semaphore_signal(barrier, device_id=k, device_id_type=pl.DeviceIdType.LOGICAL)
        pl.semaphore_wait(barrier, 4)
        ids = [
            ((1 - x, y), pl.DeviceIdType.MESH),  # a tuple of coordinates
            ({"y": 1 - y}, pl.DeviceIdType.MESH),  # a dict: x stays this device's
            ({("x", "y"): nxt}, pl.DeviceIdType.MESH),  # a tuple key: row-major over both
            (nxt, pl.DeviceIdType.LOGICAL),
        ]
        # Receivers of the four sends: (1-x, y), (x, 1-y), next, next.
        for k, (dev, kind) in enumerate(ids):
            c = pltpu.make_async_remote_copy(
                x_ref.at[k], o_ref.at[k], send.at[k], recv.at[k], device_id=dev, device_id_type=kind
            )
            c.start()
        for k, (dev, kind) in enumerate(ids):
            pltpu.make_async_remote_copy(
                x_ref.at[k], o_ref.at[k], send.at[k], recv.at[k], device_id=dev, device_id_type=kind
            ).wait()

    def f(x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((4, 8, 128), jnp.int32),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA((4,)), pltpu.SemaphoreType.DMA((4,))],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )
        return jax.shard_map(call, mesh=mesh, in_specs=P(("x", "y")), out_specs=P(("x", "y")), check_vma=False)(x)

    x = put(iota((16, 8, 128)), mesh, P(("x", "y")))
    got = same(f, x).reshape(4, 4, 8, 128)
    a = np.asarray(x).reshape(4, 4, 8, 128)  # [device, block]
    for d in range(4):
        dx, dy = divmod(d, 2)
        np.testing.assert_array_equal(got[d, 0], a[(1 - dx) * 2 + dy, 0])
        np.testing.assert_array_equal(got[d, 1], a[dx * 2 + 1 - dy, 1])
        np.testing.assert_array_equal(got[d, 2], a[(d - 1) % 4, 2])
        np.testing.assert_array_equal(got[d, 3], a[(d - 1) % 4, 3])


def test_semaphore_arrays_of_two_dimensions():
    def kernel(x_ref, o_ref, sems):
        for i in range(2):
            for j in range(3):
                c = pltpu.make_async_copy(x_ref.at[i, j], o_ref.at[j, i], sems.at[i, j])
                c.start()
        for i in range(2):
            for j in range(3):
                pltpu.make_async_copy(x_ref.at[i, j], o_ref.at[j, i], sems.at[i, j]).wait()

    def f(x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((3, 2, 8, 128), jnp.int32),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA((2, 3))],
        )
        return jax.shard_map(call, mesh=mesh1(2), in_specs=P("x"), out_specs=P("x"), check_vma=False)(x)

    x = put(iota((4, 3, 8, 128)), mesh1(2), P("x"))
    got = same(f, x)
    np.testing.assert_array_equal(
        got.reshape(2, 3, 2, 8, 128), np.asarray(x).reshape(2, 2, 3, 8, 128).transpose(0, 2, 1, 3, 4)
    )


def test_select_ref_and_strided_windows():
    # JAX's interpret mode has no select_ref: numpy is the reference here.
    def kernel(x0, x1, o_ref, sems):
        me = lax.axis_index("x")
        src = pl.select_ref(lax.rem(me, 2), x0, x1)
        # Columns 64.. of the chosen input into columns ..64 of the output and back.
        a = pltpu.make_async_copy(src.at[:, pl.ds(64, 64)], o_ref.at[:, pl.ds(0, 64)], sems.at[0])
        b = pltpu.make_async_copy(src.at[:, pl.ds(0, 64)], o_ref.at[:, pl.ds(64, 64)], sems.at[1])
        a.start()
        b.start()
        a.wait()
        b.wait()

    def f(x0, x1):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * 2,
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA((2,))],
        )
        return jax.shard_map(call, mesh=mesh1(2), in_specs=(P("x"), P("x")), out_specs=P("x"), check_vma=False)(x0, x1)

    m = mesh1(2)
    x0, x1 = put(iota((16, 128)), m, P("x")), put(iota((16, 128)) + 10000, m, P("x"))
    with tpusim.simulate(backend="cpu"):
        got = np.asarray(jax.jit(f)(x0, x1)).reshape(2, 8, 128)
    assert tpusim.check(jax.jit(f), x0, x1, schedules=20).clean
    src = [np.asarray(x0).reshape(2, 8, 128)[0], np.asarray(x1).reshape(2, 8, 128)[1]]
    for d in range(2):
        np.testing.assert_array_equal(got[d], np.concatenate([src[d][:, 64:], src[d][:, :64]], axis=1))


def test_a_window_of_rows_is_one_dma_and_a_window_of_planes_one_per_plane():
    # Rows 2..6 of columns 32..96 (one stride): one DMA. Planes 0..2 of rows 0..4 of
    # columns 0..64 (two strides): a DMA per plane. Each from HBM into VMEM and back.
    def kernel(x_ref, y_ref, o_ref, p_ref, v, w, sem):
        rows = pltpu.make_async_copy(x_ref.at[pl.ds(2, 4), pl.ds(32, 64)], v, sem)
        rows.start()
        rows.wait()
        back = pltpu.make_async_copy(v, o_ref.at[pl.ds(2, 4), pl.ds(32, 64)], sem)
        back.start()
        back.wait()
        planes = pltpu.make_async_copy(y_ref.at[pl.ds(0, 2), pl.ds(0, 4), pl.ds(0, 64)], w, sem)
        planes.start()
        planes.wait()
        out = pltpu.make_async_copy(w, p_ref.at[pl.ds(0, 2), pl.ds(0, 4), pl.ds(0, 64)], sem)
        out.start()
        out.wait()

    def f(x, y):
        call = pl.pallas_call(
            kernel,
            out_shape=(jax.ShapeDtypeStruct((8, 128), jnp.int32), jax.ShapeDtypeStruct((4, 8, 128), jnp.int32)),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * 2,
            out_specs=(pl.BlockSpec(memory_space=pl.ANY),) * 2,
            scratch_shapes=[pltpu.VMEM((4, 64), jnp.int32), pltpu.VMEM((2, 4, 64), jnp.int32), DMA],
        )
        return jax.shard_map(
            call, mesh=mesh1(2), in_specs=(P("x"), P("x")), out_specs=(P("x"), P("x")), check_vma=False
        )(x, y)

    from tpusim import _hook

    m = mesh1(2)
    x, y = put(iota((16, 128)) + 1, m, P("x")), put(iota((8, 8, 128)) + 1, m, P("x"))
    plans = []
    with _hook.observing(lambda what, plan: what == "call" and plans.append(plan)):
        # Most of both outputs is never written: reported, and the largest int32 there
        # under tpusim as under interpret mode.
        (o, q), (io, iq) = both(f, x, y, unwritten=2)
    np.testing.assert_array_equal(o, io)
    np.testing.assert_array_equal(q, iq)
    # Per device: 2 DMAs of rows, 2 x 2 of planes; the same per device at both devices.
    assert {p.call.lower()["dmas"] for p in plans} == {2 * (2 + 4)}
    xs, ys = np.asarray(x).reshape(2, 8, 128), np.asarray(y).reshape(2, 4, 8, 128)
    blank = np.iinfo(np.int32).max
    for d in range(2):
        want = np.full((8, 128), blank, np.int32)
        want[2:6, 32:96] = xs[d][2:6, 32:96]
        np.testing.assert_array_equal(o.reshape(2, 8, 128)[d], want)
        want = np.full((4, 8, 128), blank, np.int32)
        want[:2, :4, :64] = ys[d][:2, :4, :64]
        np.testing.assert_array_equal(q.reshape(2, 4, 8, 128)[d], want)


# ------------------------------------------------------------------ SMEM and scalars


def test_smem_operands_scalar_prefetch_and_smem_scratch_decide_control_and_indices():
    # Scalar prefetch `route` says which device each sends to; an SMEM operand `pick`
    # says which of the input's blocks. An SMEM scratch counts the receives.
    n = 4

    def kernel(route, pick, x_ref, o_ref, count_ref, send, recv, count):
        me = lax.axis_index("x")
        count[0] = 0
        for src in range(n):
            count[0] = count[0] + jnp.where(route[src] == me, 1, 0)
        barrier = pltpu.get_barrier_semaphore()
        for d in range(n):
            pl.semaphore_signal(barrier, device_id=(d,))
        pl.semaphore_wait(barrier, n)
        dma = pltpu.make_async_remote_copy(x_ref.at[pick[me]], o_ref, send, recv, device_id=(route[me],))
        dma.start()
        dma.wait_send()

        @pl.when(count[0] > 0)
        def _():
            dma.wait_recv()

        count_ref[0] = count[0]

    def f(route, pick, x):
        call = pl.pallas_call(
            kernel,
            out_shape=(jax.ShapeDtypeStruct((8, 128), jnp.int32), jax.ShapeDtypeStruct((1,), jnp.int32)),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1,
                in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pl.ANY)],
                out_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pltpu.SMEM)],
                scratch_shapes=[DMA, DMA, pltpu.SMEM((1,), jnp.int32)],
            ),
            compiler_params=pltpu.CompilerParams(collective_id=1),
        )
        return jax.shard_map(
            call, mesh=mesh1(), in_specs=(P(), P(), P("x")), out_specs=(P("x"), P("x")), check_vma=False
        )(route, pick, x)

    m = mesh1()
    x = put(iota((n * 3, 8, 128)), m, P("x"))
    route = jnp.array([1, 2, 3, 0], jnp.int32)  # a ring
    pick = jnp.array([2, 0, 1, 2], jnp.int32)
    out, counts = same(f, route, pick, x)
    a = np.asarray(x).reshape(n, 3, 8, 128)
    for d in range(n):
        s = (d - 1) % n
        np.testing.assert_array_equal(out.reshape(n, 8, 128)[d], a[s, pick[s]])
    np.testing.assert_array_equal(counts, [1] * n)
    # Other scalars, another plan: every device sends to device 0 (its receives race).
    route2 = jnp.array([0, 0, 0, 0], jnp.int32)
    (r,) = tpusim.check(jax.jit(f), route2, pick, x, schedules=20)
    assert "race" in r.kinds(), str(r)


# ------------------------------------------------------------------ control flow


def test_control_flow_loops_nested_jit_named_scope_and_delay():
    # Every form moves a different block of x into o with a local DMA.
    def kernel(x_ref, o_ref, sem):
        def move(i):
            pltpu.sync_copy(x_ref.at[i], o_ref.at[i])

        me = lax.axis_index("x")
        lax.cond(me == 0, lambda: move(0), lambda: move(1))  # block 0 or 1

        @pl.when(me != 0)
        def _():
            move(0)

        @pl.when(me == 0)
        def _():
            move(1)

        def fori_body(i, carry):
            move(2 + i)
            return carry + 1

        n = lax.fori_loop(0, 2, fori_body, 0)  # blocks 2, 3

        @pl.loop(4, 6)  # blocks 4, 5
        def _(i):
            move(i)

        def cond(c):
            return c < 8

        def body(c):
            move(c)
            return c + 1

        lax.while_loop(cond, body, n + 4)  # blocks 6, 7

        def step(c, k):
            move(k)
            return c, k * 2

        lax.scan(step, 0, jnp.arange(8, 10))  # blocks 8, 9

        @jax.jit
        def nested(i):
            move(i)

        nested(10)
        with jax.named_scope("last"):
            pl.delay(100)
            move(11)

    def f(x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((12, 8, 128), jnp.int32),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[DMA],
        )
        return jax.shard_map(call, mesh=mesh1(2), in_specs=P("x"), out_specs=P("x"), check_vma=False)(x)

    x = put(iota((24, 8, 128)), mesh1(2), P("x"))
    np.testing.assert_array_equal(same(f, x), np.asarray(x))


# ------------------------------------------------------------------ blocked operands


def test_block_specs_copy_blocks_in_and_out_around_each_grid_point():
    # o[i, j] = sum over k of x[i, k, j] blocks: the output block stays resident over k.
    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)

        o_ref[...] += x_ref[...]

    def f(x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((16, 256), jnp.int32),
            grid=(2, 2, 3),
            in_specs=[pl.BlockSpec((8, None, 128), lambda i, j, k: (i, k, j))],
            out_specs=pl.BlockSpec((8, 128), lambda i, j, k: (i, j)),
        )
        return jax.shard_map(call, mesh=mesh1(2), in_specs=P("x"), out_specs=P("x"), check_vma=False)(x)

    x = put(iota((32, 3, 256)), mesh1(2), P("x"))
    got = same(f, x)
    np.testing.assert_array_equal(got, np.asarray(x).reshape(2, 16, 3, 256).sum(axis=2).reshape(32, 256))


def test_emit_pipeline_inside_a_kernel():
    def kernel(x_hbm, o_hbm):
        def inner(x_ref, o_ref):
            @pl.when(pl.program_id(1) == 0)
            def _():
                o_ref[...] = jnp.zeros_like(o_ref)

            o_ref[...] += x_ref[...]

        pltpu.emit_pipeline(
            inner,
            grid=(2, 4),
            in_specs=[pl.BlockSpec((8, 128), lambda i, k: (i, k))],
            out_specs=[pl.BlockSpec((8, 128), lambda i, k: (i, 0))],
        )(x_hbm, o_hbm)

    def f(x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((16, 128), jnp.int32),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
        )
        return jax.shard_map(call, mesh=mesh1(2), in_specs=P("x"), out_specs=P("x"), check_vma=False)(x)

    x = put(iota((32, 512)), mesh1(2), P("x"))
    got = same(f, x)
    np.testing.assert_array_equal(got, np.asarray(x).reshape(32, 4, 128).sum(axis=1))


def test_input_output_aliases():
    def kernel(x_ref, y_ref, o_ref, sem):
        # o aliases x: it starts as x; block 1 is overwritten with y's.
        c = pltpu.make_async_copy(y_ref, o_ref.at[1], sem)
        c.start()
        c.wait()

    def f(x, y):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((2, 8, 128), jnp.int32),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * 2,
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[DMA],
            input_output_aliases={0: 0},
        )
        return jax.shard_map(call, mesh=mesh1(2), in_specs=(P("x"), P("x")), out_specs=P("x"), check_vma=False)(x, y)

    m = mesh1(2)
    x, y = put(iota((4, 8, 128)), m, P("x")), put(-iota((16, 128)), m, P("x"))
    got = same(f, x, y).reshape(2, 2, 8, 128)
    np.testing.assert_array_equal(got[:, 0], np.asarray(x).reshape(2, 2, 8, 128)[:, 0])
    np.testing.assert_array_equal(got[:, 1], np.asarray(y).reshape(2, 8, 128))


# ------------------------------------------------------------------ vector compute


def test_vector_compute_on_loaded_values():
    # Integer math, comparisons, selects, casts, iota, reductions and a matmul: exact.
    def kernel(x_ref, w_ref, o_ref, r_ref):
        x = x_ref[...]
        y = lax.div(x * 3 + 1, 2) - lax.rem(x, 5)
        y = jnp.where(y > 100, y, -y) + lax.broadcasted_iota(jnp.int32, (8, 128), 1)
        y = jnp.maximum(y, jnp.int32(-50)).astype(jnp.float32).astype(jnp.int32)
        o_ref[...] = y + jnp.dot(w_ref[...], x, preferred_element_type=jnp.int32)
        r_ref[...] = jnp.sum(x, axis=0, keepdims=True) + jnp.max(y, axis=0, keepdims=True)

    def f(x, w):
        call = pl.pallas_call(
            kernel,
            out_shape=(jax.ShapeDtypeStruct((8, 128), jnp.int32), jax.ShapeDtypeStruct((1, 128), jnp.int32)),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)] * 2,
            out_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)] * 2,
        )
        return jax.shard_map(
            call, mesh=mesh1(2), in_specs=(P("x"), P("x")), out_specs=(P("x"), P("x")), check_vma=False
        )(x, w)

    m = mesh1(2)
    x = put(iota((16, 128)) % 211 - 90, m, P("x"))
    w = put(iota((16, 8)) % 7 - 3, m, P("x"))
    same(f, x, w)


def test_float_compute_is_close_to_interpret_mode():
    def kernel(x_ref, o_ref):
        x = x_ref[...]
        o_ref[...] = jnp.tanh(x) * jnp.exp(-x * x) + jnp.sqrt(jnp.abs(x)) / 3.0

    def f(x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        )
        return jax.shard_map(call, mesh=mesh1(2), in_specs=P("x"), out_specs=P("x"), check_vma=False)(x)

    x = put((iota((16, 128)) % 97 - 48).astype(np.float32) / 17, mesh1(2), P("x"))
    got, want = against_interpret(f, x)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


# ------------------------------------------------------------------ cores


def test_core_map_cores_share_their_chips_hbm():
    # pl.kernel over a TensorCoreMesh of 2 cores on every device: each core moves its half
    # of the device's rows through its own VMEM, after a barrier among the chip's cores.
    def f(x):
        @functools.partial(
            pl.kernel,
            mesh=pltpu.TensorCoreMesh(axis_name="core", num_cores=2),
            out_type=jax.ShapeDtypeStruct((16, 128), jnp.int32),
            scratch_types=[pltpu.VMEM((8, 128), jnp.int32), DMA, REGULAR],
        )
        def k(x_ref, o_ref, buf, dma, sem):
            core = lax.axis_index("core")
            for c in range(2):
                pl.semaphore_signal(sem, 1, core_index=c)
            pl.semaphore_wait(sem, 2)
            rows = pl.ds(core * 8, 8)
            pltpu.async_copy(x_ref.at[rows], buf, dma).wait()
            buf[...] = buf[...] + (core + 1) * 1000
            pltpu.async_copy(buf, o_ref.at[rows], dma).wait()

        return jax.shard_map(k, mesh=mesh1(2), in_specs=P("x"), out_specs=P("x"), check_vma=False)(x)

    x = put(iota((32, 128)), mesh1(2), P("x"))
    got = same(f, x).reshape(2, 2, 8, 128)
    a = np.asarray(x).reshape(2, 2, 8, 128)
    for c in range(2):
        np.testing.assert_array_equal(got[:, c], a[:, c] + (c + 1) * 1000)


def test_a_tensorcore_mesh_of_the_chips_default_core_count_inside_shard_map():
    # TensorCoreMesh(axis_name=...) with no num_cores, made inside the shard_map body
    # (where JAX's abstract device has no core count): the count is the simulated chip's
    # (v5p: 2), read by the kernel through lax.axis_size.
    def body(x):
        @functools.partial(
            pl.kernel,
            mesh=pltpu.TensorCoreMesh(axis_name="core"),
            out_type=jax.ShapeDtypeStruct((16, 128), jnp.int32),
            scratch_types=[pltpu.VMEM((8, 128), jnp.int32), DMA],
        )
        def k(x_ref, o_ref, buf, dma):
            n = lax.axis_size("core")
            rows = pl.ds(lax.axis_index("core") * (16 // n), 16 // n)
            pltpu.async_copy(x_ref.at[rows], buf.at[pl.ds(0, 16 // n)], dma).wait()
            buf[...] = buf[...] + n * 1000
            pltpu.async_copy(buf.at[pl.ds(0, 16 // n)], o_ref.at[rows], dma).wait()

        return k(x)

    x = put(iota((32, 128)), mesh1(2), P("x"))
    f = jax.jit(jax.shard_map(body, mesh=mesh1(2), in_specs=P("x"), out_specs=P("x"), check_vma=False))
    with tpusim.simulate(chip="v5p"):
        got = np.asarray(f(x))
    np.testing.assert_array_equal(got, np.asarray(x) + 2 * 1000)


# ------------------------------------------------------------------ what is still missing


def test_a_missing_construct_names_the_primitive_and_line():
    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.cumsum(x_ref[...], axis=0)  # <- cumsum

    def f(x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        )
        return jax.shard_map(call, mesh=mesh1(2), in_specs=P("x"), out_specs=P("x"), check_vma=False)(x)

    from conftest import marked_line

    with pytest.raises(tpusim.UnsupportedError) as e, tpusim.simulate(backend="cpu"):
        jax.block_until_ready(jax.jit(f)(put(iota((16, 128)), mesh1(2), P("x"))))
    assert "`cumsum`" in str(e.value)
    assert f"{__file__}:{marked_line(__file__, 'cumsum')}" in str(e.value)


def semaphore_count(kernel):
    def f(x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[REGULAR],
        )
        return jax.shard_map(call, mesh=mesh1(4), in_specs=P("x"), out_specs=P("x"), check_vma=False)(x)

    return jax.jit(f)


def test_semaphore_read_gives_the_value_when_it_runs():
    """JAX's interpret mode has no CPU lowering of `semaphore_read`: the reference is the
    count each device signalled itself (d + 1) added to its input."""

    def kernel(x_ref, o_ref, sem):
        n = lax.axis_index("x") + 1
        pl.semaphore_signal(sem, n)
        o_ref[...] = x_ref[...] + jnp.full_like(o_ref, pl.semaphore_read(sem))
        pl.semaphore_wait(sem, n)

    x = put(iota((32, 128)), mesh1(4), P("x"))
    with tpusim.simulate(backend="cpu"):
        got = np.asarray(semaphore_count(kernel)(x))
    want = iota((32, 128)) + np.repeat(np.arange(1, 5, dtype=np.int32), 8)[:, None]
    np.testing.assert_array_equal(got, want)
    assert tpusim.check(semaphore_count(kernel), x, schedules=10).clean


def test_a_semaphore_value_deciding_control_flow_is_read_while_the_kernel_runs():
    """Run while tracing (``test_steer.py``): the value the read finds under the schedule
    decides the branch."""

    def kernel(x_ref, o_ref, sem):
        pl.semaphore_signal(sem, 1)
        o_ref[...] = jnp.zeros_like(o_ref)

        @pl.when(pl.semaphore_read(sem) > 0)
        def _():
            o_ref[...] = x_ref[...]

        pl.semaphore_wait(sem, 1)

    x = put(iota((32, 128)), mesh1(4), P("x"))
    with tpusim.simulate(backend="cpu"):
        np.testing.assert_array_equal(np.asarray(semaphore_count(kernel)(x)), np.asarray(x))
