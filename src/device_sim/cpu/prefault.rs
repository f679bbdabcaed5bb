//! A first run's fresh buffers faulted in on a second core while the run starts. Fresh
//! buffers of [`super::words::LAZY_FROM`] bytes and more are pages the kernel maps, one
//! fault per 4 KiB, when the run first writes them: a run of ring attention at 16 MiB
//! per device and four devices writes about 460 MiB of them in its first call (a
//! quarter of the call), and later calls none (their buffers are kept,
//! [`super::spare`]). The faults are the kernel's work, not the run's: a helper thread
//! asks for the pages ahead of the run (`MADV_POPULATE_WRITE`, Linux 5.14, a chunk at a
//! time, in the order the run first writes them), so the run finds most of them there. Only buffers the
//! run writes are asked for (nothing becomes resident that would not), and only where
//! there is a second core to do it. Contents never change: a populated page of a fresh
//! mapping is zero, as the untouched page was. Where lanes of devices
//! ([`super::device_lanes`]) keep every core busy, the pages are asked for before the
//! run instead, on every core ([`Prefault::now`]).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

/// Bytes asked for at a time: the helper looks whether the run has ended between them.
/// A multiple of the page.
const CHUNK: usize = 1 << 20;

/// Parts of fresh buffers to fault in ahead of a run, in the order it first writes them:
/// chunks' addresses and bytes, and the chunks of each buffer queued so far (by address).
#[derive(Debug, Default)]
pub struct Prefault {
    chunks: Vec<(usize, usize)>,
    queued: HashMap<usize, Vec<bool>>,
}

impl Prefault {
    /// Queues words `range` of `buf`, a fresh buffer the run writes there next (the
    /// chunks of it not queued yet).
    pub fn add(&mut self, buf: &[u32], range: Range<usize>) {
        let bytes = std::mem::size_of_val(buf);
        if bytes < super::words::LAZY_FROM || range.is_empty() {
            return;
        }
        let at = buf.as_ptr() as usize;
        let queued = self
            .queued
            .entry(at)
            .or_insert_with(|| vec![false; bytes.div_ceil(CHUNK)]);
        let (first, last) = (range.start * 4 / CHUNK, (range.end * 4 - 1) / CHUNK);
        for c in first..=last.min(queued.len() - 1) {
            if !std::mem::replace(&mut queued[c], true) {
                self.chunks
                    .push((at + c * CHUNK, CHUNK.min(bytes - c * CHUNK)));
            }
        }
    }

    /// Faults every queued chunk in now, spread over the cores: for a run whose lanes
    /// of devices ([`super::device_lanes`]) keep every core busy. Faulted in by the run
    /// itself, each page would be a trap on a busy core, and a page read before it is
    /// written (the zero page mapped) a second, flushing every core's TLB.
    pub fn now(self) {
        if self.chunks.is_empty() || !cfg!(target_os = "linux") {
            return;
        }
        let helpers = rayon::current_num_threads() - 1;
        super::spread::spread(self.chunks.len(), helpers, &|c| {
            let (at, bytes) = self.chunks[c];
            populate_write(at, bytes);
        });
    }

    /// Runs `f` while a helper thread faults the buffers in (all of them where there is
    /// one core only or the system cannot: `f` alone). The helper stops when `f` returns.
    pub fn during<R>(self, f: impl FnOnce() -> R) -> R {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if self.chunks.is_empty() || cores < 2 || !cfg!(target_os = "linux") {
            return f();
        }
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| self.populate(&done));
            // The helper stops however `f` ends (an error, an unwind).
            let _stop = Stop(&done);
            f()
        })
    }

    /// Faults the chunks in, in order, until all are or `done`.
    fn populate(&self, done: &AtomicBool) {
        for &(at, bytes) in &self.chunks {
            if done.load(Ordering::Relaxed) || !populate_write(at, bytes) {
                return; // ended, or not supported here: the run faults them in itself
            }
        }
    }
}

/// Tells the helper to stop when dropped.
struct Stop<'a>(&'a AtomicBool);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Asks the kernel to fault in `len` bytes at `at` for writing; false where it cannot.
fn populate_write(at: usize, len: usize) -> bool {
    #[cfg(target_os = "linux")]
    {
        // Whole pages only: the buffers start on a page, and a last partial page is
        // left to the run.
        let len = len / super::words::PAGE * super::words::PAGE;
        if len == 0 {
            return true;
        }
        // SAFETY: pages of a buffer the caller's run owns and keeps mapped until the
        // helper has stopped ([`Prefault::during`] joins it first); populating changes
        // no contents (fresh pages fault in as zero, present ones stay as they are).
        unsafe { libc::madvise(at as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (at, len);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::super::words::{Words, LAZY_FROM};
    use super::*;

    /// Pages of `w` in memory.
    #[cfg(target_os = "linux")]
    fn resident(w: &Words) -> usize {
        w.resident_bytes()
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn buffers_fault_in_beside_a_run_and_keep_their_contents() {
        let (mut a, mut b) = (
            Words::zeroed(4 * LAZY_FROM / 4).unwrap(),
            Words::zeroed(LAZY_FROM / 4 + 3).unwrap(),
        );
        let mut p = Prefault::default();
        p.add(&b, 5..LAZY_FROM / 4 + 3); // both chunks of `b`
        p.add(&a, 300_000..600_000); // `a`'s chunks 1 and 2
        p.add(&a, 0..a.len()); // then 0 and 3
        p.add(&b, 0..10); // queued already
        p.add(&Words::zeroed(10).unwrap(), 0..10); // small: left alone
        let (at_a, at_b) = (a.as_ptr() as usize, b.as_ptr() as usize);
        let want = [
            (at_b, CHUNK),
            (at_b + CHUNK, 12),
            (at_a + CHUNK, CHUNK),
            (at_a + 2 * CHUNK, CHUNK),
            (at_a, CHUNK),
            (at_a + 3 * CHUNK, CHUNK),
        ];
        assert_eq!(p.chunks, want);
        let before = resident(&a);
        // The "run" writes while the helper populates, and waits a while for it.
        let (pa, pb) = (a.as_mut_ptr() as usize, b.as_mut_ptr() as usize);
        p.during(|| {
            // SAFETY: word 7 of `a` and the last of `b`, both alive here.
            unsafe {
                *(pa as *mut u32).add(7) = 5;
                *(pb as *mut u32).add(LAZY_FROM / 4 + 2) = 6;
            }
            let t = std::time::Instant::now();
            while resident(&a) < a.len() * 4 && t.elapsed().as_secs() < 10 {
                std::thread::yield_now();
            }
        });
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let probe = Words::zeroed(LAZY_FROM / 4).unwrap();
        if cores > 1 && populate_write(probe.as_ptr() as usize, LAZY_FROM) {
            assert!(resident(&a) > before, "{before} -> {}", resident(&a));
        }
        assert_eq!((a[7], b[LAZY_FROM / 4 + 2]), (5, 6));
        assert_eq!(a.iter().map(|&x| x as u64).sum::<u64>(), 5);
        assert_eq!(b.iter().map(|&x| x as u64).sum::<u64>(), 6);
        a[0] = 1;
        b[0] = 1;
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn buffers_fault_in_before_a_run_and_keep_their_contents() {
        let mut a = Words::zeroed(3 * LAZY_FROM / 4 + 5).unwrap();
        a[LAZY_FROM / 4 + 1] = 7;
        let mut p = Prefault::default();
        p.add(&a, 0..a.len());
        let before = resident(&a);
        p.now();
        let probe = Words::zeroed(LAZY_FROM / 4).unwrap();
        if populate_write(probe.as_ptr() as usize, LAZY_FROM) {
            // Every whole page (the last partial one is left to the run).
            let pages = a.len() * 4 / super::super::words::PAGE * super::super::words::PAGE;
            assert!(
                resident(&a) >= pages && resident(&a) > before,
                "{before} -> {}",
                resident(&a)
            );
        }
        assert_eq!(a.iter().map(|&x| x as u64).sum::<u64>(), 7);
        assert_eq!(a[LAZY_FROM / 4 + 1], 7);
    }
}
