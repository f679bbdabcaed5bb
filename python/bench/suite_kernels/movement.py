"""The data-movement kernels: neighbour exchange, ring reduce-scatter, ring all-gather,
ragged all-to-all. Each moves f32 rows of 128 lanes; `size` is one device's main operand."""

import jax
import numpy as np
from jax import lax
from jax import numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .common import AXIS, COLLECTIVE, Case, P, all_barrier, neighbour_barrier, neighbours, rows_for
from .rings import remote, ring_reduce

ANY = pl.BlockSpec(memory_space=pl.ANY)
VMEM = pl.BlockSpec(memory_space=pltpu.VMEM)
SMEM = pl.BlockSpec(memory_space=pltpu.SMEM)  # where scalar-prefetch operands go
DMA = pltpu.SemaphoreType.DMA
ROW = 128 * 4  # bytes of one f32 row


def neighbour_exchange(p, size):
    """Every device sends its shard to its right neighbour (lax.ppermute by one)."""
    rows = rows_for(size, ROW)

    def kernel(x_ref, o_ref, send_sem, recv_sem):
        _, _, right = neighbours()
        copy = remote(x_ref, o_ref, send_sem, recv_sem, right)
        copy.start()
        copy.wait()

    scratch = [DMA, DMA]
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((rows, 128), jnp.float32),
        in_specs=[ANY],
        out_specs=ANY,
        scratch_shapes=scratch,
    )

    def reference(x):
        return lax.ppermute(x, AXIS, [(i, (i + 1) % p) for i in range(p)])

    shape = [((p * rows, 128), np.float32)]
    return Case(
        call,
        reference,
        (P(AXIS),),
        P(AXIS),
        shape,
        shape,
        lambda rng: [rng.standard_normal(shape[0][0], dtype=np.float32)],
        moved=p * rows * ROW,
        blocks=(ANY, ANY),
        scratch=scratch,
    )


def reduce_scatter(p, size):
    """Device d ends with block d of the sum over devices of their (p, rows, 128) inputs
    (rings.ring_reduce)."""
    rows = rows_for(size // p, ROW)

    def kernel(x_ref, o_ref, acc, recv, send_sem, recv_sems, capacity):
        o_ref[...] = ring_reduce(p, lambda b: x_ref[b], acc, recv, send_sem, recv_sems, capacity)

    scratch = [
        pltpu.VMEM((rows, 128), jnp.float32),
        pltpu.VMEM((2, rows, 128), jnp.float32),
        DMA,
        DMA((2,)),
        pltpu.SemaphoreType.REGULAR,
    ]
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((rows, 128), jnp.float32),
        in_specs=[VMEM],
        out_specs=VMEM,
        compiler_params=COLLECTIVE,
        scratch_shapes=scratch,
    )

    def reference(x):
        return lax.psum_scatter(x, AXIS, scatter_dimension=0, tiled=False)

    ins = [((p * p, rows, 128), np.float32)]
    # Small integers: every order of summation gives the same result, so it must be exact.
    return Case(
        call,
        reference,
        (P(AXIS),),
        P(AXIS),
        ins,
        [((p * rows, 128), np.float32)],
        lambda rng: [rng.integers(-64, 64, size=ins[0][0]).astype(np.float32)],
        moved=p * (p - 1) * rows * ROW,
        blocks=(VMEM, VMEM),
        scratch=scratch,
    )


def all_gather(p, size):
    """Every device ends with every device's shard: its own copied in place, then p - 1
    steps passing the newest block right (one receive semaphore per step, so a fast
    left neighbour's next block cannot satisfy this step's wait)."""
    rows = rows_for(size, ROW)

    def kernel(x_ref, o_ref, local_sem, send_sem, recv_sems):
        me, left, right = neighbours()
        neighbour_barrier(left, right)
        local = pltpu.make_async_copy(x_ref, o_ref.at[me], local_sem)
        local.start()
        local.wait()

        def step(s, carry):
            slot = lax.rem(me - s + p, p)
            copy = remote(o_ref.at[slot], o_ref.at[slot], send_sem, recv_sems.at[s], right)
            copy.start()
            copy.wait()
            return carry

        lax.fori_loop(0, p - 1, step, 0)

    scratch = [DMA, DMA, DMA((p - 1,))]
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((p, rows, 128), jnp.float32),
        in_specs=[ANY],
        out_specs=ANY,
        compiler_params=COLLECTIVE,
        scratch_shapes=scratch,
    )

    def reference(x):
        return lax.all_gather(x, AXIS)

    ins = [((p * rows, 128), np.float32)]
    return Case(
        call,
        reference,
        (P(AXIS),),
        P(AXIS),
        ins,
        [((p * p, rows, 128), np.float32)],
        lambda rng: [rng.standard_normal(ins[0][0], dtype=np.float32)],
        moved=p * (p - 1) * rows * ROW,
        blocks=(ANY, ANY),
        scratch=scratch,
    )


def ragged_tables(p, unit, seed=0):
    """A fixed routing: device i sends counts[i, j] units of `unit` rows to device j,
    its chunks in order of j, each landing in j's output after those of devices below i.
    Per device i: input offsets, send sizes, output offsets (in the receiver), receive sizes."""
    counts = np.random.default_rng(seed + p).integers(0, 8, size=(p, p))
    send = counts * unit
    in_off = np.cumsum(send, axis=1) - send
    out_off = np.cumsum(send, axis=0) - send  # [i, j]: rows of j's output before i's chunk
    recv = send.T
    return [t.astype(np.int32) for t in (in_off, send, out_off, recv)]


def ragged_all_to_all(p, size):
    """Device i sends a chunk of its own size to every device j (sizes fixed per call,
    scalar-prefetched into SMEM), as DMAs of `unit` rows each; the receiver's output is
    zero where nothing lands (what lax.ragged_all_to_all into zeros gives)."""
    rows = rows_for(size, ROW, 8 * p)
    unit = rows // (8 * p)  # at most 7 units to each of p devices fit in `rows`
    tables = ragged_tables(p, unit)

    def kernel(in_off, send, out_off, recv, x_ref, o_ref, send_sem, recv_sem):
        o_ref[...] = jnp.zeros_like(o_ref)
        all_barrier(p)  # every output is zeroed before anyone writes into it
        for j in range(p):

            def block(b, carry, j=j):
                src = x_ref.at[pl.ds(in_off[0, j] + b * unit, unit)]
                dst = o_ref.at[pl.ds(out_off[0, j] + b * unit, unit)]
                remote(src, dst, send_sem, recv_sem, j).start()
                return carry

            lax.fori_loop(0, send[0, j] // unit, block, 0)
        # Every DMA is `unit` rows: wait for as many as went out and as will come in.
        one = remote(x_ref.at[pl.ds(0, unit)], o_ref.at[pl.ds(0, unit)], send_sem, recv_sem, 0)
        sent = sum(send[0, j] for j in range(p)) // unit
        received = sum(recv[0, j] for j in range(p)) // unit
        lax.fori_loop(0, sent, lambda b, c: (one.wait_send(), c)[1], 0)
        lax.fori_loop(0, received, lambda b, c: (one.wait_recv(), c)[1], 0)

    scratch = [DMA, DMA]
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=4, in_specs=[ANY], out_specs=VMEM, scratch_shapes=scratch
    )
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((rows, 128), jnp.float32),
        grid_spec=grid_spec,
        compiler_params=COLLECTIVE,
    )

    def reference(in_off, send, out_off, recv, x):
        # XLA:CPU has no ragged-all-to-all: every device's rows and tables gathered, and
        # this device's output row r taken from sender i where i's chunk for it covers r.
        me = lax.axis_index(AXIS)
        xs = lax.all_gather(x, AXIS)
        starts, sizes, dests = (lax.all_gather(t[0], AXIS)[:, me] for t in (in_off, send, out_off))
        r = lax.broadcasted_iota(jnp.int32, (rows, 1), 0)
        out = jnp.zeros_like(x)
        for i in range(p):
            inside = (r >= dests[i]) & (r < dests[i] + sizes[i])
            src = jnp.clip(starts[i] + r[:, 0] - dests[i], 0, rows - 1)
            out = jnp.where(inside, xs[i][src], out)
        return out

    table = ((p, p), np.int32)
    ins = [table] * 4 + [((p * rows, 128), np.float32)]
    moved = int(tables[1].sum()) * ROW
    return Case(
        call,
        reference,
        (P(AXIS),) * 5,
        P(AXIS),
        ins,
        [((p * rows, 128), np.float32)],
        lambda rng: tables + [rng.standard_normal(ins[4][0], dtype=np.float32)],
        moved=moved,
        blocks=(SMEM,) * 4 + (ANY, VMEM),
        scratch=scratch,
    )
