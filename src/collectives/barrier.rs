//! The seed's `neighbor_barrier`: both neighbours signal the barrier semaphore, and
//! a second round through a `run_scoped` REGULAR semaphore makes it a double barrier.

use crate::kernel::Ctx;
use crate::mesh::DeviceId;

/// `neighbor_barrier(left, right, double_barrier)`, line for line.
pub fn neighbor_barrier(pl: &Ctx, left: i64, right: i64, double_barrier: bool) {
    mesh_barrier(pl, &[left.into(), right.into()], double_barrier)
}

/// The same barrier with any set of neighbours (e.g. both neighbours on each axis of a
/// torus): each one is signalled once, and the wait is for one signal from each. A
/// neighbour listed twice (a ring of two) is signalled twice, as the seed's is.
pub fn mesh_barrier(pl: &Ctx, neighbours: &[DeviceId], double_barrier: bool) {
    let n = neighbours.len() as i64;
    let barrier = pl.get_barrier_semaphore();
    for nbr in neighbours {
        pl.semaphore_signal(barrier, 1, nbr.clone());
    }
    pl.semaphore_wait(barrier, n);

    if double_barrier {
        pl.run_scoped(|second| {
            for nbr in neighbours {
                pl.semaphore_signal(second, 1, nbr.clone());
            }
            pl.semaphore_wait(second, n);
        });
    }
}
