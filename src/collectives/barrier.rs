//! The seed's `neighbor_barrier`: both neighbours signal the barrier semaphore, and
//! a second round through a `run_scoped` REGULAR semaphore makes it a double barrier.

use crate::kernel::Ctx;

/// `neighbor_barrier(left, right, double_barrier)`, line for line.
pub fn neighbor_barrier(pl: &Ctx, left: i64, right: i64, double_barrier: bool) {
    let barrier = pl.get_barrier_semaphore();
    for nbr in [left, right] {
        pl.semaphore_signal(barrier, 1, nbr);
    }
    pl.semaphore_wait(barrier, 2);

    if double_barrier {
        pl.run_scoped(|second| {
            for nbr in [left, right] {
                pl.semaphore_signal(second, 1, nbr);
            }
            pl.semaphore_wait(second, 2);
        });
    }
}
