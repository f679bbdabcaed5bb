"""The two rings the suite's kernels are made of: a reduce-scatter (partial sums passed
right, each device adding its own contribution) and a pass-around (blocks passed right
while each device computes with the one it holds), both double-buffered in VMEM with a
capacity handshake so no device writes a slot its right neighbour still reads."""

from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .common import neighbour_barrier, neighbours, signal

MESH = pl.DeviceIdType.MESH


def remote(src, dst, send_sem, recv_sem, device):
    return pltpu.make_async_remote_copy(src, dst, send_sem, recv_sem, device_id=(device,), device_id_type=MESH)


def ring_reduce(p, contribution, acc, recv, send_sem, recv_sems, capacity):
    """The sum over devices of contribution(b) for this device's block b = its index:
    at step s (0 .. p-2) a device adds its contribution to block (me - s - 1) mod p to
    the partial sum it received (none at step 0) and sends it right. `acc` is a VMEM
    (rows, cols) scratch, `recv` (2, rows, cols), `recv_sems` two DMA semaphores,
    `capacity` a REGULAR one. Needs the call's collective_id (a neighbour barrier)."""
    me, left, right = neighbours()
    neighbour_barrier(left, right)

    def step(s, carry):
        blk = lax.rem(me - s - 1 + 2 * p, p)
        slot = lax.rem(s, 2)

        @pl.when(s == 0)
        def _():
            acc[...] = contribution(blk)

        @pl.when(s > 0)
        def _():
            acc[...] = recv[1 - slot] + contribution(blk)

            @pl.when(s <= p - 3)  # the left neighbour writes this slot again at its step s + 1
            def _():
                signal(capacity, left)

        @pl.when(s >= 2)  # the right neighbour's slot held our step s - 2: wait until it is read
        def _():
            pl.semaphore_wait(capacity, 1)

        copy = remote(acc, recv.at[slot], send_sem, recv_sems.at[slot], right)
        copy.start()
        copy.wait()
        return carry

    lax.fori_loop(0, p - 1, step, 0)
    return recv[(p - 2) % 2] + contribution(me)


def ring_pass(p, bufs, send_sems, recv_sems, capacity, compute):
    """compute(s, owner, slot) for s = 0 .. p-1, with bufs[i].at[slot] holding device
    owner's block (owner = (me - s) mod p) while the same block travels to the right
    neighbour's other slot. Each of `bufs` is a VMEM (2, ...) scratch whose slot 0 the
    caller filled with this device's own block; `send_sems`, `recv_sems` one DMA
    semaphore per buffer; `capacity` a REGULAR one. Needs the call's collective_id."""
    me, left, right = neighbours()
    neighbour_barrier(left, right)

    def step(s, carry):
        slot = lax.rem(s, 2)
        owner = lax.rem(me - s + p, p)
        copies = [
            remote(b.at[slot], b.at[1 - slot], send_sems.at[i], recv_sems.at[i], right) for i, b in enumerate(bufs)
        ]

        @pl.when(s < p - 1)
        def _():
            @pl.when(s >= 1)  # the right neighbour computed with that slot at its step s - 1
            def _():
                pl.semaphore_wait(capacity, 1)

            for c in copies:
                c.start()

        compute(s, owner, slot)

        @pl.when(s < p - 1)
        def _():
            for c in copies:
                c.wait()

        @pl.when(s <= p - 3)  # the left neighbour sends into this slot at its step s + 1
        def _():
            signal(capacity, left)

        return carry

    lax.fori_loop(0, p, step, 0)
