//! A first run's fresh pages faulted in on another thread while it runs. A buffer of
//! the run's own from [`LAZY_FROM`](super::words::LAZY_FROM) bytes is pages the kernel
//! has not given yet ([`Words`](super::words::Words)): the run's first write to each
//! faults it in, zeroed, at 2-3 us a 4 KiB page on this project's VMs (asking for pages
//! in bulk is barely cheaper, 2.1-2.5 us): 0.3-0.5 s of a ring attention's first call
//! at 16 MiB per device (about 580 MB). Much of a run leaves a core idle (ops too small
//! to spread), so a thread of its own asks the kernel for those pages ahead of the run
//! (`MADV_POPULATE_WRITE`: faulted in as a write would, contents untouched), in the
//! order the run first writes them; a page the run reaches first faults as before. Only
//! pages the run writes are asked for: none that a zero fill leaves untouched
//! ([`super::untouched`]), that a stretch keeps in the cores' blocks, or that only a
//! skipped step writes. Contents and results are the same either way.

use std::sync::atomic::{AtomicBool, Ordering};

/// The environment variable that, set to `0`, leaves every page to the run's own first
/// write (no thread asks for them ahead).
pub const PREFAULT_ENV: &str = "TPUSIM_PREFAULT";

/// Bytes asked for at a time: between two looks at whether the run has ended.
const CHUNK: usize = 2 << 20;

/// The pages of a run's fresh buffers it writes, in the order it first writes them.
#[derive(Debug, Default)]
pub struct Pages {
    /// By memory slot: its fresh buffer, if it has one.
    slots: Vec<Option<Fresh>>,
    /// Byte ranges of whole pages (address, length), in order, each page once.
    ranges: Vec<(usize, usize)>,
}

/// A fresh buffer: where it starts, bytes an element, and the pages listed so far.
#[derive(Debug)]
struct Fresh {
    base: usize,
    elem: usize,
    pages: usize,
    listed: Vec<u64>,
}

impl Pages {
    /// No pages yet, of a run with `slots` memory slots.
    pub fn new(slots: usize) -> Self {
        Pages {
            slots: (0..slots).map(|_| None).collect(),
            ranges: Vec::new(),
        }
    }

    /// Slot `slot` holds a fresh buffer: `bytes` bytes from `base` (page-aligned, its
    /// own pages), `elem` bytes an element.
    pub fn fresh(&mut self, slot: usize, base: *const u8, bytes: usize, elem: usize) {
        let pages = bytes.div_ceil(super::words::PAGE);
        self.slots[slot] = Some(Fresh {
            base: base as usize,
            elem,
            pages,
            listed: vec![0; pages.div_ceil(64)],
        });
    }

    /// The run writes `len` elements of slot `slot` from element `offset`: their pages
    /// not listed yet are listed next (nothing where the slot holds no fresh buffer).
    pub fn written(&mut self, slot: usize, offset: usize, len: usize) {
        let Some(Some(f)) = self.slots.get_mut(slot) else {
            return;
        };
        if len == 0 {
            return;
        }
        let page = super::words::PAGE;
        let (first, end) = (
            offset * f.elem / page,
            ((offset + len) * f.elem).div_ceil(page).min(f.pages),
        );
        let mut p = first;
        while p < end {
            if f.listed[p / 64] & (1 << (p % 64)) != 0 {
                p += 1;
                continue;
            }
            let start = p;
            while p < end && f.listed[p / 64] & (1 << (p % 64)) == 0 {
                f.listed[p / 64] |= 1 << (p % 64);
                p += 1;
            }
            let (at, bytes) = (f.base + start * page, (p - start) * page);
            match self.ranges.last_mut() {
                Some((a, b)) if *a + *b == at => *b += bytes,
                _ => self.ranges.push((at, bytes)),
            }
        }
    }

    /// The byte ranges listed (address, length), in order.
    pub fn ranges(self) -> Vec<(usize, usize)> {
        self.ranges
    }
}

/// True when pages are asked for ahead of a run: more than one core, and
/// [`PREFAULT_ENV`] not `0`.
pub fn on() -> bool {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores > 1 && std::env::var_os(PREFAULT_ENV).is_none_or(|v| v != "0")
}

/// `run()`, with a thread asking the kernel for the pages of `ranges` meanwhile, until
/// they are all there or `run` has returned.
///
/// The ranges must be whole pages of private anonymous memory that stays mapped until
/// this returns.
pub fn alongside<R>(ranges: &[(usize, usize)], run: impl FnOnce() -> R) -> R {
    if ranges.is_empty() {
        return run();
    }
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let asking = std::thread::Builder::new()
            .name("tpusim-prefault".into())
            .spawn_scoped(s, || populate(ranges, &done));
        let got = run();
        done.store(true, Ordering::Relaxed);
        // Joined by the scope; a thread that could not start leaves the run as it was.
        drop(asking);
        got
    })
}

/// Asks the kernel for the pages of `ranges` in order, a [`CHUNK`] at a time, until
/// `done` is set or the kernel refuses (a kernel before Linux 5.14, or memory short:
/// the run then faults the rest in itself).
pub fn populate(ranges: &[(usize, usize)], done: &AtomicBool) {
    #[cfg(target_os = "linux")]
    for &(at, bytes) in ranges {
        let mut k = 0;
        while k < bytes {
            if done.load(Ordering::Relaxed) {
                return;
            }
            let n = CHUNK.min(bytes - k);
            // SAFETY: whole pages of mapped private anonymous memory (the caller's
            // promise); the advice faults them in writable and changes no contents.
            let r = unsafe {
                libc::madvise((at + k) as *mut libc::c_void, n, libc::MADV_POPULATE_WRITE)
            };
            if r != 0 {
                return;
            }
            k += n;
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ranges, done);
}

#[cfg(test)]
mod tests {
    use super::super::words::{Words, PAGE};
    use super::*;

    /// Which of `w`'s pages are in memory.
    #[cfg(target_os = "linux")]
    fn resident(w: &Words) -> Vec<bool> {
        let bytes = w.len() * 4;
        let mut v = vec![0u8; bytes.div_ceil(PAGE)];
        // SAFETY: `w`'s own mapping; `v` has a byte per page.
        let r = unsafe { libc::mincore(w.as_ptr() as *mut _, bytes, v.as_mut_ptr()) };
        assert_eq!(r, 0);
        v.iter().map(|&x| x & 1 == 1).collect()
    }

    #[test]
    fn pages_are_listed_once_in_the_order_first_written_and_only_fresh_slots() {
        let w = PAGE / 4; // words a page
        let mut pages = Pages::new(3);
        pages.fresh(0, (16 * PAGE) as *const u8, 8 * PAGE, 4);
        pages.fresh(2, (64 * PAGE) as *const u8, 4 * PAGE, 2);
        pages.written(0, 3 * w + 5, w); // pages 3 and 4
        pages.written(1, 0, 1 << 20); // not fresh
        pages.written(2, 0, 2 * w); // 16-bit elements: page 0 only
        pages.written(0, 0, 4 * w); // pages 0-2 (3 listed already)
        pages.written(0, 5 * w, 100 * w); // pages 5-7, clipped to the buffer
        pages.written(2, 2 * w, 0);
        assert_eq!(
            pages.ranges(),
            [
                (19 * PAGE, 2 * PAGE),
                (64 * PAGE, PAGE),
                (16 * PAGE, 3 * PAGE),
                (21 * PAGE, 3 * PAGE)
            ]
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn populating_brings_in_the_listed_pages_alone_and_leaves_them_zero() {
        let w = Words::zeroed(1 << 20).unwrap(); // 4 MiB, fresh pages
        let words = PAGE / 4;
        let mut pages = Pages::new(1);
        pages.fresh(0, w.as_ptr().cast(), w.len() * 4, 4);
        pages.written(0, 10 * words, 3 * words);
        pages.written(0, 700 * words + 1, 1);
        assert!(resident(&w).iter().all(|&r| !r));
        populate(&pages.ranges(), &AtomicBool::new(false));
        let r = resident(&w);
        let want: Vec<usize> = vec![10, 11, 12, 700];
        let got: Vec<usize> = (0..r.len()).filter(|&p| r[p]).collect();
        assert_eq!(got, want);
        assert!(w.iter().all(|&x| x == 0));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_run_alongside_finds_its_pages_coming_in_while_it_runs() {
        let w = Words::zeroed(1 << 20).unwrap();
        let ranges = [(w.as_ptr() as usize, w.len() * 4)];
        // The run waits (up to a minute) for the other thread to bring every page in.
        let waited = alongside(&ranges, || {
            let t = std::time::Instant::now();
            while !resident(&w).iter().all(|&r| r) && t.elapsed().as_secs() < 60 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            resident(&w).iter().all(|&r| r)
        });
        assert!(waited);
        assert!(w.iter().all(|&x| x == 0));
    }
}
