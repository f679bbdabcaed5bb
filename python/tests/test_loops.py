"""Loops in step tables and reports: a kernel that loops over ring steps with
``fori_loop`` gets a row of its step table per iteration (no marks written by the
user), a mistake inside a loop is reported with its iteration, and
``tpusim.trace_step`` marks a row where the kernel says (and does nothing under JAX's
own interpret mode)."""

import jax
import numpy as np
from conftest import marked_line
from jax import lax
from jax import numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import tpusim

P = jax.sharding.PartitionSpec
DMA = pltpu.SemaphoreType.DMA
N = 4
HERE = __file__


def mesh():
    return jax.make_mesh((N,), ("x",))


def ring_gather(steps=N - 1, racy_step=None, marks=False):
    """An all-gather around the ring: device d's shard goes into block d of its
    output, then at step k every device pushes block d-k to its right neighbour's
    block d-k (`steps` steps). With `racy_step`, the device overwrites the block it is
    pushing at that step (a local copy into it) before the push has read it. With `marks`, the kernel marks
    each step with `tpusim.trace_step` itself."""

    def kernel(x_ref, o_ref, local, send, recv):
        me = lax.axis_index("x")
        right = lax.rem(me + 1, N)
        left = lax.rem(me + N - 1, N)
        # Both neighbours have entered the kernel before anyone pushes into them.
        barrier = pltpu.get_barrier_semaphore()
        for n in (left, right):
            pl.semaphore_signal(barrier, device_id=(n,), device_id_type=pl.DeviceIdType.MESH)
        pl.semaphore_wait(barrier, 2)
        first = pltpu.make_async_copy(x_ref, o_ref.at[me], local)
        first.start()
        first.wait()

        def step(k, carry):
            b = lax.rem(me - k + N, N)
            # A receive semaphore per step: a neighbour one step ahead cannot satisfy this one.
            dma = pltpu.make_async_remote_copy(
                o_ref.at[b], o_ref.at[b], send, recv.at[k], device_id=(right,), device_id_type=pl.DeviceIdType.MESH
            )
            dma.start()
            if racy_step is not None:

                @pl.when(k == racy_step)
                def _():
                    again = pltpu.make_async_copy(x_ref, o_ref.at[b], local)
                    again.start()  # <- racy overwrite
                    again.wait()

            dma.wait()
            if marks:
                tpusim.trace_step("step")
            return carry

        lax.fori_loop(0, steps, step, 0)  # <- ring loop

    def f(x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((N, 8, 128), jnp.float32),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[DMA, DMA, pltpu.SemaphoreType.DMA((N - 1,))],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )
        return jax.shard_map(call, mesh=mesh(), in_specs=P("x"), out_specs=P("x"), check_vma=False)(x)

    return jax.jit(f)


def shards():
    x = np.arange(N * 8 * 128, dtype=np.float32).reshape(N * 8, 128)
    return jax.device_put(x, jax.NamedSharding(mesh(), P("x")))


def holds_after(k):
    """Which device's shard each device holds in each block after ring step k (None:
    never written): its own, and those of the k+1 devices to its left."""
    return [[b if (d - b) % N <= k + 1 else None for b in range(N)] for d in range(N)]


def cells_of(table, row):
    """Per device, the device whose shard each `o_ref[b]` column holds (None: never
    written)."""
    cols = [table.columns.index(f"o_ref[{b}]") for b in range(N)]
    out = []
    for cells in row.cells:
        dev = []
        for c in cols:
            cell = cells[c]
            if cell is None:
                dev.append(None)
            else:
                assert len(cell) == 1 and cell[0][1] == 0, cell  # one whole input shard
                dev.append(cell[0][0])
        out.append(dev)
    return out


def test_a_fori_loop_over_ring_steps_has_a_row_per_iteration():
    (t,) = tpusim.trace(ring_gather(), shards())
    loop = f"test_loops.py:{marked_line(HERE, 'ring loop')}"
    steps = [r for r in t.rows if r.step is not None]
    assert [r.step for r in steps] == [f"{loop} iteration {k}" for k in range(N - 1)], t.markdown
    for k, r in enumerate(steps):
        assert cells_of(t, r) == holds_after(k), (k, t.markdown)
    # The last row (after the grid point) is the whole gather.
    assert cells_of(t, t.rows[-1]) == [list(range(N))] * N
    (r,) = tpusim.check(ring_gather(), shards(), schedules=20)
    assert r.clean, str(r)


def test_explicit_trace_steps_replace_the_loop_s_own_rows():
    (t,) = tpusim.trace(ring_gather(steps=2, marks=True), shards())
    steps = [r for r in t.rows if r.step is not None]
    # One mark per iteration, the kernel's own: no second row for the same iteration.
    assert [r.step for r in steps] == ["step", "step"], t.markdown
    assert [cells_of(t, r) for r in steps] == [holds_after(0), holds_after(1)]


def test_trace_step_does_nothing_under_jax_interpret_mode():
    x = shards()
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams()):
        want = np.asarray(ring_gather(marks=True)(x))
    with tpusim.simulate(backend="cpu"):
        got = np.asarray(ring_gather(marks=True)(x))
    np.testing.assert_array_equal(got, want)
    full = np.asarray(x).reshape(N, 8, 128)
    np.testing.assert_array_equal(want.reshape(N, N, 8, 128), np.stack([full] * N))


def test_a_race_in_a_loop_names_the_iteration():
    for bad in (1, 2):
        (r,) = tpusim.check(ring_gather(racy_step=bad), shards(), schedules=20)
        assert r.kinds() == ["race"], str(r)
        msg = r.findings[0].message
        loop = f"{HERE}:{marked_line(HERE, 'ring loop')}"
        assert f"in iteration {bad} of the loop at {loop}" in msg, msg
        others = [k for k in range(N - 1) if k != bad]
        assert not any(f"iteration {k} of the loop" in msg for k in others), msg
        # The sites carry it too.
        assert any(s.iteration == f"iteration {bad} of the loop at {loop}" for s in r.findings[0].sites)


def nested_uneven():
    """Two rounds (outer loop); in each, device d copies its shard into blocks 0..d of
    its output, one local DMA per iteration of an inner loop of d+1 iterations."""

    def kernel(x_ref, o_ref, sem):
        me = lax.axis_index("x")

        def round_(j, carry):
            def one(i, c):
                pltpu.sync_copy(x_ref, o_ref.at[i])
                return c

            lax.fori_loop(0, me + 1, one, 0)  # <- inner loop
            return carry

        lax.fori_loop(0, 2, round_, 0)  # <- outer loop

    def f(x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((N, 8, 128), jnp.float32),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[DMA],
        )
        return jax.shard_map(call, mesh=mesh(), in_specs=P("x"), out_specs=P("x"), check_vma=False)(x)

    return jax.jit(f)


def test_nested_loops_of_different_lengths_get_a_row_per_inner_iteration():
    (t,) = tpusim.trace(nested_uneven(), shards())
    outer = f"test_loops.py:{marked_line(HERE, 'outer loop')}"
    inner = f"test_loops.py:{marked_line(HERE, 'inner loop')}"
    steps = [r for r in t.rows if r.step is not None]
    label = lambda j, i: f"{outer} iteration {j}, {inner} iteration {i}"  # noqa: E731
    # Every (round, inner iteration) some device runs, once; no row of the outer loop's
    # own (nothing communicates after its inner loop).
    want = {label(j, i) for j in range(2) for i in range(N)}
    assert sorted(r.step for r in steps) == sorted(want), t.markdown
    for i in range(N):
        r = next(r for r in steps if r.step == label(0, i))
        got = cells_of(t, r)
        for d in range(i, N):  # the devices that ran this iteration hold blocks 0..i
            assert got[d] == [d if b <= i else None for b in range(N)], (i, d, t.markdown)
    # No race; blocks d+1.. of device d's output are never written, and that is said.
    (rep,) = tpusim.check(nested_uneven(), shards(), schedules=10)
    assert rep.kinds() == ["output not written"], str(rep)
    # 3 devices leave 3, 2, 1 blocks of 8 x 128 float32 unwritten (the last none).
    assert rep.findings[0].details["devices"] == N - 1, rep.findings[0].details
    assert rep.findings[0].details["total"] == sum(N - 1 - d for d in range(N)) * 8 * 128 * 4


def looped_mistake(kind):
    """A loop of 3 whose iteration 2 makes a mistake: a remote copy to device id k+2
    (4: outside the mesh) found while tracing, or (`unsupported`) in iteration 1 a
    `semaphore_wait` that does not decrement, which tpusim refuses."""

    def kernel(x_ref, o_ref, send, recv, reg):
        def step(k, carry):
            if kind == "unsupported":

                @pl.when(k == 1)
                def _():
                    pl.semaphore_wait(reg, 0, decrement=False)
            else:
                dma = pltpu.make_async_remote_copy(
                    x_ref, o_ref, send, recv, device_id=(k + 2,), device_id_type=pl.DeviceIdType.MESH
                )
                dma.start()
                dma.wait()
            return carry

        lax.fori_loop(0, 3, step, 0)  # <- mistake loop

    def f(x):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[DMA, DMA, pltpu.SemaphoreType.REGULAR],
        )
        return jax.shard_map(call, mesh=mesh(), in_specs=P("x"), out_specs=P("x"), check_vma=False)(x)

    return jax.jit(f)


def test_mistakes_found_while_tracing_a_loop_name_the_iteration():
    import pytest

    loop = f"{HERE}:{marked_line(HERE, 'mistake loop')}"
    x = jax.device_put(np.zeros((N * 8, 128), np.float32), jax.NamedSharding(mesh(), P("x")))
    (r,) = tpusim.check(looped_mistake("device id"), x, schedules=5)
    assert "device id out of range" in r.kinds(), str(r)
    f = r.findings[r.kinds().index("device id out of range")]
    assert f"in iteration 2 of the loop at {loop}" in f.message, f.message
    assert f.sites[0].iteration == f"iteration 2 of the loop at {loop}"
    # Raised by the front end itself (before the core sees the kernel): the same words.
    with pytest.raises(tpusim.UnsupportedError) as e:
        tpusim.check(looped_mistake("unsupported"), x, schedules=5)
    assert f"at grid point [] in iteration 1 of the loop at {loop}, `semaphore_wait`" in str(e.value), str(e.value)
    assert "waits that do not decrement" in str(e.value), str(e.value)
    assert e.value.site["iteration"] == f"iteration 1 of the loop at {loop}"
