"""Run while tracing: kernels steered by values they compute themselves (a loop bound
reduced from a vector, SMEM a DMA or a store wrote, a semaphore's value), against JAX's
TPU interpret mode on the same kernel; DMAs between VMEM, SMEM and HBM in every
direction; the verifier on a read that races; the step tables, the cost model and the
GPU executor on such a kernel."""

import jax
import numpy as np
from conftest import against_interpret
from jax import lax
from jax import numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import tpusim

P = jax.sharding.PartitionSpec
DMA, REGULAR = pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR
VMEM, SMEM, ANY = pltpu.VMEM, pltpu.SMEM, pl.ANY


def later(*args, **kw):
    """`pl.pallas_call(*args, **kw)` made when called (the mode decides who runs it)."""
    return lambda *xs: pl.pallas_call(*args, **kw)(*xs)


def same(fn, *args, schedules=6):
    got, want = against_interpret(fn, *args, schedules=schedules)
    jax.tree.map(np.testing.assert_array_equal, got, want)
    return got


def ints(shape, seed=0, lo=-9, hi=10):
    return np.random.default_rng(seed).integers(lo, hi, size=shape).astype(np.int32)


def test_a_loop_bound_and_a_branch_reduced_from_a_vector():
    def kernel(x_ref, o_ref):
        n = jnp.sum((x_ref[:, 0] > 0).astype(jnp.int32))  # how many rows, from the data
        o_ref[...] = jnp.zeros_like(o_ref)

        @pl.loop(0, n)
        def _(i):
            o_ref[pl.ds(i, 1), :] = x_ref[pl.ds(i, 1), :] * 2

        @pl.when(jnp.max(x_ref[...]) > 5)
        def _():
            o_ref[pl.ds(6, 1), :] = jnp.full((1, 5), -1, jnp.int32)

    f = later(
        kernel,
        out_shape=jax.ShapeDtypeStruct((7, 5), jnp.int32),
        in_specs=[pl.BlockSpec(memory_space=VMEM)],
        out_specs=pl.BlockSpec(memory_space=VMEM),
    )
    for seed in range(3):
        same(f, ints((7, 5), seed))


def test_dmas_between_vmem_smem_and_hbm_in_every_direction_steer_the_kernel():
    def kernel(h_ref, v_ref, oh_ref, ov_ref, s1, s2, vbuf, sem):
        pltpu.sync_copy(v_ref.at[0], s1)  # VMEM -> SMEM
        pltpu.sync_copy(h_ref.at[1], s2)  # HBM -> SMEM
        k = s1[2] + s2[3]  # SMEM written by DMAs
        s1[0] = k  # a scalar store into it
        pltpu.sync_copy(s1, oh_ref.at[0])  # SMEM -> HBM
        pltpu.sync_copy(s2, s1)  # SMEM -> SMEM
        pltpu.sync_copy(s1, vbuf)  # SMEM -> VMEM
        ov_ref[...] = jnp.zeros_like(ov_ref)
        ov_ref[0:1, :] = vbuf[...].reshape(1, 6)

        @pl.loop(0, lax.rem(jnp.abs(s1[1]), 4))
        def _(i):
            ov_ref[pl.ds(i + 1, 1), :] = jnp.full((1, 6), k, jnp.int32)

        pltpu.sync_copy(h_ref.at[pl.ds(0, 1)], oh_ref.at[pl.ds(1, 1)])  # HBM -> HBM

    f = later(
        kernel,
        out_shape=(jax.ShapeDtypeStruct((2, 6), jnp.int32), jax.ShapeDtypeStruct((5, 6), jnp.int32)),
        in_specs=[pl.BlockSpec(memory_space=ANY), pl.BlockSpec(memory_space=VMEM)],
        out_specs=(pl.BlockSpec(memory_space=ANY), pl.BlockSpec(memory_space=VMEM)),
        scratch_shapes=[SMEM((6,), jnp.int32), SMEM((6,), jnp.int32), VMEM((6,), jnp.int32), DMA],
    )
    for seed in range(3):
        same(f, ints((2, 6), seed), ints((3, 6), seed + 10))


def test_remote_dmas_into_smem_decide_what_each_device_sends():
    n = 4
    mesh = jax.make_mesh((n,), ("x",))

    def kernel(x_ref, o_ref, cnt, got, send, recv, s2, r2):
        me = lax.axis_index("x")
        right = lax.rem(me + 1, n)
        cnt[...] = jnp.sum((x_ref[...] > 0).astype(jnp.int32), axis=1, keepdims=True)[0:1, :].reshape(1)
        o_ref[...] = jnp.zeros_like(o_ref)  # before my count goes out: no row lands before
        c = pltpu.make_async_remote_copy(cnt, got, send, recv, device_id=(right,), device_id_type=pl.DeviceIdType.MESH)
        c.start()
        c.wait()
        k = got[0]  # my left neighbour's count: how many rows it wants back

        @pl.loop(0, k)
        def _(i):
            r = pltpu.make_async_remote_copy(
                x_ref.at[pl.ds(i, 1)],
                o_ref.at[pl.ds(i, 1)],
                s2,
                r2,
                device_id=(lax.rem(me + n - 1, n),),
                device_id_type=pl.DeviceIdType.MESH,
            )
            r.start()
            r.wait_send()

        mine = cnt[0]

        @pl.loop(0, mine)
        def _(i):
            pltpu.make_async_remote_copy(
                x_ref.at[pl.ds(0, 1)],
                o_ref.at[pl.ds(0, 1)],
                s2,
                r2,
                device_id=(right,),
                device_id_type=pl.DeviceIdType.MESH,
            ).wait_recv()

    def f(x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((6, 3), jnp.int32),
            in_specs=[pl.BlockSpec(memory_space=VMEM)],
            out_specs=pl.BlockSpec(memory_space=VMEM),
            scratch_shapes=[VMEM((1,), jnp.int32), SMEM((1,), jnp.int32), DMA, DMA, DMA, DMA],
        )
        return jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)(x)

    x = jax.device_put(ints((6 * n, 3), 4), jax.NamedSharding(mesh, P("x")))
    same(f, x)


def test_a_semaphore_value_decides_the_loop_that_takes_it_back():
    def kernel(x_ref, o_ref, sem):
        k = lax.rem(jnp.abs(jnp.sum(x_ref[...])), 5) + 1  # signals, counted from the data
        pl.semaphore_signal(sem, k)
        v = pl.semaphore_read(sem)
        o_ref[...] = jnp.zeros_like(o_ref)

        @pl.loop(0, v)
        def _(i):
            pl.semaphore_wait(sem, 1)
            o_ref[pl.ds(i, 1), :] = jnp.full((1, 4), i + 1, jnp.int32)

    f = later(
        kernel,
        out_shape=jax.ShapeDtypeStruct((6, 4), jnp.int32),
        in_specs=[pl.BlockSpec(memory_space=VMEM)],
        out_specs=pl.BlockSpec(memory_space=VMEM),
        scratch_shapes=[REGULAR],
    )
    # JAX's interpret mode has no CPU rule for `semaphore_read`: numpy is the reference.
    for seed in range(2):
        x = ints((3, 4), seed)
        k = abs(int(x.sum())) % 5 + 1
        want = np.zeros((6, 4), np.int32)
        want[:k] = np.arange(1, k + 1)[:, None]
        with tpusim.simulate(backend="cpu"):
            np.testing.assert_array_equal(np.asarray(jax.jit(f)(x)), want)
        assert tpusim.check(jax.jit(f), x, schedules=4).clean


def test_debug_print_of_a_vector_prints_its_values(capsys):
    def kernel(x_ref, o_ref):
        v = x_ref[...] * 2
        pl.debug_print("twice {}", v)
        o_ref[...] = v

    f = later(
        kernel,
        out_shape=jax.ShapeDtypeStruct((2, 3), jnp.int32),
        in_specs=[pl.BlockSpec(memory_space=VMEM)],
        out_specs=pl.BlockSpec(memory_space=VMEM),
    )
    x = ints((2, 3))
    with tpusim.simulate(backend="cpu"):
        np.testing.assert_array_equal(np.asarray(jax.jit(f)(x)), x * 2)
    out = capsys.readouterr().out
    assert f"[device 0, grid point []] twice {x * 2}" in out, out


def test_a_read_that_races_its_dma_is_a_race_and_each_schedule_traces_its_own_program():
    n = 2
    mesh = jax.make_mesh((n,), ("x",))

    def kernel(x_ref, o_ref, got, send, recv):
        me = lax.axis_index("x")
        got[0] = 0
        pl.semaphore_signal(pltpu.get_barrier_semaphore(), device_id=(1 - me,), device_id_type=pl.DeviceIdType.MESH)
        pl.semaphore_wait(pltpu.get_barrier_semaphore(), 1)
        c = pltpu.make_async_remote_copy(
            x_ref.at[0], got, send, recv, device_id=(1 - me,), device_id_type=pl.DeviceIdType.MESH
        )
        c.start()
        k = got[0]  # <- too early: before the receive
        o_ref[...] = jnp.full_like(o_ref, k)
        c.wait()

    def f(x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((1, 4), jnp.int32),
            in_specs=[pl.BlockSpec(memory_space=VMEM)],
            out_specs=pl.BlockSpec(memory_space=VMEM),
            scratch_shapes=[SMEM((4,), jnp.int32), DMA, DMA],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )
        return jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)(x)

    x = jax.device_put(np.array([[5, 6, 7, 8], [9, 1, 2, 3]], np.int32), jax.NamedSharding(mesh, P("x")))
    report = tpusim.check(jax.jit(f), x, schedules=8)[0]
    races = [g for g in report.findings if g.kind == "race"]
    assert races and "`got (SMEM)`" in races[0].message and "`read`" in races[0].message, str(report)
    # The value the read finds is the schedule's: eager lands the DMA at its start.
    outs = {}
    for s in ("eager", "lazy"):
        with tpusim.simulate(backend="cpu", schedule=s):
            outs[s] = np.asarray(jax.jit(f)(x))
    assert (outs["eager"] == np.array([[9] * 4, [5] * 4])).all(), outs
    assert (outs["lazy"] == 0).all(), outs


def rows_by_count():
    """A small steered kernel for the tools: each of 2 devices sends the other its rows
    whose first element is positive (as many as it counted), after telling it how many."""
    n = 2
    mesh = jax.make_mesh((n,), ("x",))

    def kernel(x_ref, o_ref, cnt, theirs, send, recv, csend, crecv):
        other = (1 - lax.axis_index("x"),)
        o_ref[...] = jnp.zeros_like(o_ref)
        cnt[...] = jnp.sum((x_ref[:, 0:1] > 0).astype(jnp.int32), keepdims=True).reshape(1)
        pltpu.async_remote_copy(cnt, theirs, csend, crecv, device_id=other, device_id_type=pl.DeviceIdType.MESH).wait()
        row = pltpu.make_async_remote_copy(
            x_ref.at[pl.ds(0, 1)],
            o_ref.at[pl.ds(0, 1)],
            send,
            recv,
            device_id=other,
            device_id_type=pl.DeviceIdType.MESH,
        )

        @pl.loop(0, jnp.sum(cnt[...]))
        def _(i):
            pltpu.make_async_remote_copy(
                x_ref.at[pl.ds(i, 1)],
                o_ref.at[pl.ds(i, 1)],
                send,
                recv,
                device_id=other,
                device_id_type=pl.DeviceIdType.MESH,
            ).start()

        @pl.loop(0, jnp.sum(cnt[...]))
        def _(i):
            row.wait_send()

        @pl.loop(0, theirs[0])
        def _(i):
            row.wait_recv()

    def f(x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((4, 3), jnp.int32),
            in_specs=[pl.BlockSpec(memory_space=VMEM)],
            out_specs=pl.BlockSpec(memory_space=VMEM),
            scratch_shapes=[VMEM((1,), jnp.int32), SMEM((1,), jnp.int32), DMA, DMA, DMA, DMA],
        )
        return jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)(x)

    return f, mesh


def test_step_tables_the_model_and_the_gpu_executor_see_the_program_the_run_traced():
    f, mesh = rows_by_count()
    host = np.array(
        [[1, 2, 3], [-1, 0, 0], [4, 5, 6], [0, 0, 0], [2, 1, 1], [3, 3, 3], [7, 7, 7], [-8, 1, 1]], np.int32
    )
    x = jax.device_put(host, jax.NamedSharding(mesh, P("x")))
    with tpusim.simulate(backend="cpu"):
        cpu = np.asarray(jax.jit(f)(x))
    want = np.zeros((8, 3), np.int32)
    want[0:3] = host[4:7]  # device 1 counts three positive rows: sends its first three
    want[4:6] = host[0:2]  # device 0 counts two
    np.testing.assert_array_equal(cpu, want)
    assert tpusim.check(jax.jit(f), x, schedules=6).clean
    with tpusim.simulate(backend="gpu"):
        gpu = np.asarray(jax.jit(f)(x))
    np.testing.assert_array_equal(cpu, gpu)
    (table,) = tpusim.trace(jax.jit(f), x)
    text = str(table)
    assert "o_ref" in text and table.rows, text
    (run,) = tpusim.model(jax.jit(f), x, preset="v5e", execute=True)
    assert run.seconds > 0


def counting_traces(monkeypatch):
    """How many traces while running the kernels make from now on (one per call that
    finds no plan of a call before whose reads find the same), their plans made anew."""
    from tpusim import _hook, _plan

    monkeypatch.setattr(_hook, "_plans", {})

    n = [0]
    tracer = _plan.Plan.tracer

    def counted(self):
        n[0] += 1
        return tracer(self)

    monkeypatch.setattr(_plan.Plan, "tracer", counted)
    return n


def test_a_call_whose_reads_find_what_one_before_found_runs_its_plan(monkeypatch):
    f, mesh = rows_by_count()
    f = jax.jit(f)
    rng = np.random.default_rng(7)

    def data(counts):  # each device's rows, its first `count` of them positive
        host = rng.integers(1, 9, size=(8, 3)).astype(np.int32)
        for d, c in enumerate(counts):
            host[4 * d + c : 4 * d + 4, 0] = -host[4 * d + c : 4 * d + 4, 0]
        return host

    def want(host, counts):
        w = np.zeros_like(host)
        w[0 : counts[1]] = host[4 : 4 + counts[1]]
        w[4 : 4 + counts[0]] = host[0 : counts[0]]
        return w

    traces = counting_traces(monkeypatch)
    # New data each call; the counts the devices read decide the plan.
    for backend, counts in [
        ("cpu", (2, 3)),
        ("cpu", (1, 3)),
        ("cpu", (2, 3)),
        ("cpu", (1, 3)),
        ("gpu", (2, 3)),
        ("cpu", (3, 0)),
    ]:
        host = data(counts)
        with tpusim.simulate(backend=backend):
            got = np.asarray(f(jax.device_put(host, jax.NamedSharding(mesh, P("x")))))
        np.testing.assert_array_equal(got, want(host, counts), err_msg=f"{backend} {counts}")
    assert traces[0] == 3  # (2, 3), (1, 3) and (3, 0): the others ran a plan before


def test_a_kernel_that_prints_is_traced_at_every_call(monkeypatch, capsys):
    def kernel(x_ref, o_ref):
        n = jnp.sum((x_ref[:, 0] > 0).astype(jnp.int32))
        o_ref[...] = jnp.zeros_like(o_ref)

        @pl.loop(0, n)
        def _(i):
            o_ref[pl.ds(i, 1), :] = x_ref[pl.ds(i, 1), :] + 1

        @pl.when(n > 0)
        def _():
            pl.debug_print("rows {}", n)

    f = jax.jit(
        later(
            kernel,
            out_shape=jax.ShapeDtypeStruct((5, 2), jnp.int32),
            in_specs=[pl.BlockSpec(memory_space=VMEM)],
            out_specs=pl.BlockSpec(memory_space=VMEM),
        )
    )
    traces = counting_traces(monkeypatch)
    for n in (3, 4, 3):
        x = np.full((5, 2), -1, np.int32)
        x[:n] = np.arange(2 * n).reshape(n, 2) + 1
        with tpusim.simulate(backend="cpu"):
            got = np.asarray(f(x))
        np.testing.assert_array_equal(got, np.where(np.arange(5)[:, None] < n, x + 1, 0))
        assert f"[device 0, grid point []] rows {n}" in capsys.readouterr().out
    assert traces[0] == 3
