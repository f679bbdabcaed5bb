//! One step of a push ring (reduce or gather) along any ring of the mesh: the building
//! block of `ring_allreduce_push` (one ring over the 1-D mesh) and `allreduce_2d` (rings
//! along x, then y, then x again, addressed by mesh coordinates).

use crate::kernel::{Ctx, ReduceOp, Ref, Sem};
use crate::mesh::DeviceId;

/// A device's place on one ring: its position, the ring's length and its neighbours.
#[derive(Clone, Debug)]
pub struct RingPos {
    /// Position on the ring, `0..n`.
    pub me: i64,
    /// Devices on the ring.
    pub n: i64,
    /// The neighbour that pushes to this device.
    pub left: DeviceId,
    /// The neighbour this device pushes to.
    pub right: DeviceId,
}

/// The buffers and semaphores one ring step uses. `slot` is this step's half of the
/// HBM double buffer (the right neighbour's copy of it receives the push) and `stage`
/// the VMEM buffer a received chunk is added from; both have the chunk's shape.
#[derive(Clone, Copy, Debug)]
pub struct StepBufs {
    /// Receive slot in HBM.
    pub slot: Ref,
    /// VMEM staging buffer for the accumulate.
    pub stage: Ref,
    /// Local DMA semaphore.
    pub local_sem: Sem,
    /// Send-completion semaphore.
    pub send_sem: Sem,
    /// Receive-completion semaphore.
    pub recv_sem: Sem,
    /// Capacity handshake (REGULAR): one per ring, so that a neighbour on another ring
    /// cannot stand in for this ring's.
    pub capacity_sem: Sem,
}

/// Step `t` of a ring reduce-scatter (`reducing`: push chunk `me−t`, add the received
/// chunk `me−t−1`) or all-gather (push the reduced chunk `me+1−t`, store the received
/// chunk `me−t`) over the chunks `block(c)`, `c` in `0..n`. After `n−1` reducing steps
/// chunk `me+1` holds the ring's reduction; `n−1` gathering steps spread it.
pub fn ring_step(
    pl: &Ctx,
    op: ReduceOp,
    ring: &RingPos,
    reducing: bool,
    t: i64,
    block: &dyn Fn(i64) -> Ref,
    b: StepBufs,
) {
    let n = ring.n;
    let me = ring.me;
    let (send_c, recv_c) = if reducing {
        ((me - t).rem_euclid(n), (me - t - 1).rem_euclid(n))
    } else {
        ((me + 1 - t).rem_euclid(n), (me - t).rem_euclid(n))
    };

    // My slot is free again: the left neighbour may write it. Then wait until the
    // right neighbour says the same before pushing into its slot.
    pl.semaphore_signal(b.capacity_sem, 1, ring.left.clone());
    pl.semaphore_wait(b.capacity_sem, 1);

    let remote = pl.make_async_remote_copy(
        block(send_c),
        b.slot,
        b.send_sem,
        b.recv_sem,
        ring.right.clone(),
    );
    remote.start();
    remote.wait_recv();

    if reducing {
        let local = pl.make_async_copy(b.slot, b.stage, b.local_sem);
        local.start();
        local.wait();
        pl.accumulate(block(recv_c), b.stage, op);
    } else {
        let local = pl.make_async_copy(b.slot, block(recv_c), b.local_sem);
        local.start();
        local.wait();
    }
    remote.wait_send();
}
