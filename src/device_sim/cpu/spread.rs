//! Parts of one step spread over the calling thread and rayon's workers, the caller
//! working too. A parallel iterator started from a thread outside the pool (a call
//! through JAX, the command line's main thread) hands every part to the workers and
//! sleeps until they are done: each call pays a worker's wake-up and its own, and on a
//! busy machine a part waits for a core while the caller's sits idle (a 1024x1024 exp
//! measured slower on two threads than on one, at load 5 on 2 cores). Here the caller
//! claims parts as the workers do, from one counter, so a worker that starts late
//! finds fewer parts (or none) left, and the caller waits only for parts a worker has
//! already claimed.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// What the caller and its helpers share: the next part to claim, the parts done, and
/// the work (a pointer to the caller's closure, which a helper calls only for a part it
/// has claimed: the caller does not return before that part is done).
struct Shared {
    next: AtomicUsize,
    done: AtomicUsize,
    panicked: AtomicBool,
    parts: usize,
    work: *const (dyn Fn(usize) + Sync),
}

// SAFETY: `work` is a `Sync` closure, called by a helper only while the caller waits
// for the part it runs (see `Shared`).
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    /// Runs parts until none is left to claim.
    ///
    /// # Safety
    /// `self.work` is alive while a claimed part is not done.
    unsafe fn take(&self) {
        loop {
            let c = self.next.fetch_add(1, Ordering::Relaxed);
            if c >= self.parts {
                return;
            }
            // SAFETY: part `c` is claimed and not done, so the caller still waits.
            let work = unsafe { &*self.work };
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(c))).is_err() {
                self.panicked.store(true, Ordering::Relaxed);
            }
            // Release: the part's writes before the caller's return.
            self.done.fetch_add(1, Ordering::Release);
        }
    }
}

/// Runs `work(c)` for every part `c` in `0..parts`, each once, on the calling thread
/// and on up to `helpers` of rayon's workers; returns when all are done. A part that
/// panics panics here, after the others are done.
pub(super) fn spread(parts: usize, helpers: usize, work: &(dyn Fn(usize) + Sync)) {
    if ALONE.get() {
        return (0..parts).for_each(work);
    }
    // SAFETY (of the lifetime's erasure): helpers call `work` only for parts claimed
    // before the wait below ends.
    let work: &'static (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(work) };
    let shared = Arc::new(Shared {
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        panicked: AtomicBool::new(false),
        parts,
        work,
    });
    for _ in 0..helpers.min(parts.saturating_sub(1)) {
        let s = Arc::clone(&shared);
        // SAFETY: as `take`'s: the wait below outlasts every claimed part.
        rayon::spawn(move || unsafe { s.take() });
    }
    // SAFETY: `work` lives until this function returns, after the wait.
    unsafe { shared.take() };
    let mut spins = 0u32;
    while shared.done.load(Ordering::Acquire) < parts {
        // A worker is running its last part: spin briefly, then give the core away.
        if spins < 64 {
            spins += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    assert!(
        !shared.panicked.load(Ordering::Relaxed),
        "a part of a spread step panicked"
    );
}

/// Runs `work(c, chunk)` for every `per`-long chunk `c` of `dst` (the last one shorter),
/// as [`spread`] runs parts.
pub(super) fn spread_chunks<T: Send>(
    dst: &mut [T],
    per: usize,
    helpers: usize,
    work: &(dyn Fn(usize, &mut [T]) + Sync),
) {
    let (at, len, per) = (dst.as_mut_ptr() as usize, dst.len(), per.max(1));
    spread(len.div_ceil(per), helpers, &|c| {
        let start = c * per;
        // SAFETY: chunk `c` is `dst[start..start + per]` cut at its end: inside `dst`,
        // no other part's, and run once while `dst` stays borrowed here.
        let chunk = unsafe {
            std::slice::from_raw_parts_mut((at as *mut T).add(start), per.min(len - start))
        };
        work(c, chunk)
    });
}

/// Whether work of about `ns` nanoseconds on one core is worth spreading over the
/// machine's cores. Below [`LEAST_SPREAD_NS`] the second core gives less than waking
/// it and its spinning afterwards cost: ring attention (256x128x512 products, row
/// reductions of 128 Ki elements, thousands a call) ran 1.5-2x faster on one core
/// than with those spread.
pub(super) fn worth(ns: f64) -> bool {
    ns >= least_ns() && rayon::current_num_threads() > 1 && !ALONE.get()
}

thread_local! {
    /// Set while this thread runs steps that other threads' steps run beside
    /// ([`super::device_lanes`]): its steps are not spread.
    static ALONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with this thread's steps unspread: [`worth`] is false and [`spread`] runs
/// every part on this thread (the cores are busy with lanes of devices).
pub(super) fn alone<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            ALONE.set(self.0);
        }
    }
    let _restore = Restore(ALONE.replace(true));
    f()
}

/// The least work, in nanoseconds on one core, that [`worth`] spreads by default.
pub(super) const LEAST_SPREAD_NS: f64 = 200_000.0;

/// Names the least work [`worth`] spreads, in microseconds (0 to 10^9; read once):
/// 0 spreads every step that has parts, as tests of the spread paths need.
pub(super) const SPREAD_FROM_ENV: &str = "TPUSIM_SPREAD_FROM_US";

/// [`LEAST_SPREAD_NS`], or what [`SPREAD_FROM_ENV`] names.
fn least_ns() -> f64 {
    static LEAST: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *LEAST.get_or_init(|| {
        let Some(v) = std::env::var_os(SPREAD_FROM_ENV) else {
            return LEAST_SPREAD_NS;
        };
        match v.to_string_lossy().trim().parse::<f64>() {
            Ok(us) if (0.0..=1e9).contains(&us) => us * 1e3,
            _ => {
                eprintln!(
                    "tpusim: ignoring {SPREAD_FROM_ENV}={v:?} (microseconds from 0 to 10^9); {} us",
                    LEAST_SPREAD_NS / 1e3
                );
                LEAST_SPREAD_NS
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::{spread, spread_chunks};
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_part_runs_once_whatever_the_helpers() {
        for parts in [0, 1, 2, 7, 64] {
            for helpers in [0, 1, 3] {
                let runs: Vec<AtomicUsize> = (0..parts).map(|_| AtomicUsize::new(0)).collect();
                spread(parts, helpers, &|c| {
                    runs[c].fetch_add(1, Ordering::Relaxed);
                });
                assert!(runs.iter().all(|r| r.load(Ordering::Relaxed) == 1));
            }
        }
    }

    #[test]
    fn every_chunk_is_its_own_part() {
        for (len, per) in [(0, 3), (1, 3), (7, 3), (9, 3), (5, 0)] {
            let mut v = vec![usize::MAX; len];
            spread_chunks(&mut v, per, 1, &|c, chunk| {
                for (i, x) in chunk.iter_mut().enumerate() {
                    *x = c * per.max(1) + i;
                }
            });
            assert_eq!(v, (0..len).collect::<Vec<_>>());
        }
    }

    #[test]
    #[should_panic(expected = "a part of a spread step panicked")]
    fn a_part_that_panics_panics_the_caller_after_the_rest() {
        spread(8, 1, &|c| assert!(c != 5, "part 5"));
    }
}
