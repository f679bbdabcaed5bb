//! Pages a zero fill may leave alone: memory that no one has touched yet reads as zero.
//!
//! XLA allocates a call's results anew, and glibc maps large ones afresh: a result's
//! pages are not there until first written, and each first write faults one in,
//! zeroed by the kernel (about 12 us a 4 KiB page on this project's VMs, where a huge
//! page cannot be used: the 2 MiB ranges that hold the allocator's header or run past
//! the mapping). A kernel that zeroes its output (a ragged all-to-all's
//! `o_ref[...] = 0`) then faults in every page of it only to write the zeros the
//! kernel wrote already. A page of a private anonymous mapping that has never been
//! faulted in (neither present nor swapped out: Linux's `/proc/self/pagemap`) reads as
//! zero, so a zero fill may skip it; the page stays unmapped until someone writes it
//! (a reader gets the shared zero page). Everything else is filled: shared or
//! file-backed memory (a page not there is the file's), pages present or swapped, and
//! all of it where the kernel cannot say (Linux before 6.11, without the
//! `PROCMAP_QUERY` ioctl that tells a mapping's kind; other systems). Memory that a
//! `userfaultfd` serves (a process being restored lazily) is not told apart: a process
//! that registers tpusim's buffers or XLA's with it must not rely on this.

use std::ops::Range;

/// Fills smaller than this (bytes) are written whole: the look-up (about 10 us, two
/// files opened) stays a few percent of a fill of memory already there.
pub const LEAST_BYTES: usize = 4 << 20;

/// The ranges of `words` (indices, whole pages, in order) that read as zero without
/// being written: pages of private anonymous memory never faulted in. Empty where that
/// cannot be known (see the module's comment) or `words` is under [`LEAST_BYTES`].
pub fn zero_pages(words: &[u32]) -> Vec<Range<usize>> {
    if std::mem::size_of_val(words) < LEAST_BYTES {
        return Vec::new();
    }
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    {
        linux::zero_pages(words).unwrap_or_default()
    }
    #[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
    Vec::new()
}

#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
mod linux {
    use std::fs::File;
    use std::ops::Range;
    use std::os::unix::fs::FileExt;
    use std::os::unix::io::AsRawFd;

    /// `struct procmap_query` of Linux's `uapi/linux/fs.h` (6.11).
    #[repr(C)]
    #[derive(Default)]
    struct ProcmapQuery {
        size: u64,
        query_flags: u64,
        query_addr: u64,
        vma_start: u64,
        vma_end: u64,
        vma_flags: u64,
        vma_page_size: u64,
        vma_offset: u64,
        inode: u64,
        dev_major: u32,
        dev_minor: u32,
        vma_name_size: u32,
        build_id_size: u32,
        vma_name_addr: u64,
        build_id_addr: u64,
    }

    /// `_IOWR('f', 17, struct procmap_query)`.
    const PROCMAP_QUERY: u64 = 0xC068_6611;
    /// `PROCMAP_QUERY_VMA_SHARED`.
    const VMA_SHARED: u64 = 0x08;
    /// Bits of a pagemap entry that say nothing about the page's contents: soft-dirty
    /// (bit 55), which a never-touched page may carry.
    const SOFT_DIRTY: u64 = 1 << 55;

    /// The mapping around `addr`: its end, and whether it is private anonymous memory
    /// in pages of `page` bytes. None where the kernel cannot say.
    fn mapping(maps: &File, addr: usize, page: usize) -> Option<(usize, bool)> {
        let mut q = ProcmapQuery {
            size: std::mem::size_of::<ProcmapQuery>() as u64,
            query_addr: addr as u64,
            ..Default::default()
        };
        // SAFETY: the ioctl reads and writes `q`, of the size it is told, and nothing
        // else (no name or build id asked for).
        let r = unsafe { libc::ioctl(maps.as_raw_fd(), PROCMAP_QUERY as _, &mut q) };
        if r != 0 || q.vma_start as usize > addr || q.vma_end as usize <= addr {
            return None;
        }
        let private_anonymous = q.vma_flags & VMA_SHARED == 0
            && q.inode == 0
            && q.dev_major == 0
            && q.dev_minor == 0
            && q.vma_page_size as usize == page;
        Some((q.vma_end as usize, private_anonymous))
    }

    pub(super) fn zero_pages(words: &[u32]) -> Option<Vec<Range<usize>>> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
        let start = words.as_ptr() as usize;
        let end = start + std::mem::size_of_val(words);
        let (lo, hi) = (start.next_multiple_of(page), end / page * page);
        if hi <= lo {
            return Some(Vec::new());
        }
        // Opened anew each time: a descriptor kept across a fork would be the parent's.
        let maps = File::open("/proc/self/maps").ok()?;
        let pagemap = File::open("/proc/self/pagemap").ok()?;
        let mut out: Vec<Range<usize>> = Vec::new();
        let mut entries = Vec::new();
        let mut at = lo;
        while at < hi {
            let (vma_end, anonymous) = mapping(&maps, at, page)?;
            let stop = vma_end.min(hi);
            if anonymous {
                let n = (stop - at) / page;
                entries.resize(n * 8, 0u8);
                pagemap
                    .read_exact_at(&mut entries, (at / page * 8) as u64)
                    .ok()?;
                for (k, e) in entries.chunks_exact(8).enumerate() {
                    let e = u64::from_ne_bytes(e.try_into().expect("8 bytes"));
                    if e & !SOFT_DIRTY != 0 {
                        continue;
                    }
                    // Word indices of page k (whole pages lie on word boundaries).
                    let a = (at + k * page - start) / 4;
                    let b = a + page / 4;
                    match out.last_mut() {
                        Some(r) if r.end == a => r.end = b,
                        _ => out.push(a..b),
                    }
                }
            }
            at = stop;
        }
        Some(out)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Words of a page.
    #[cfg(target_os = "linux")]
    pub fn page_words() -> usize {
        // SAFETY: sysconf has no preconditions.
        unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize / 4 }
    }

    /// A fresh private anonymous mapping of `bytes`, as glibc makes for large blocks
    /// (in 4 KiB pages).
    #[cfg(target_os = "linux")]
    pub fn fresh(bytes: usize) -> &'static mut [u32] {
        mapped(bytes, libc::MAP_PRIVATE)
    }

    /// A fresh anonymous mapping of `bytes`, private or shared (`sharing`), in 4 KiB
    /// pages whatever the system's huge-page setting (so that a write touches one).
    #[cfg(target_os = "linux")]
    fn mapped(bytes: usize, sharing: libc::c_int) -> &'static mut [u32] {
        // SAFETY: a new anonymous mapping, never unmapped (a test's few MiB).
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                sharing | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            libc::madvise(p, bytes, libc::MADV_NOHUGEPAGE);
            std::slice::from_raw_parts_mut(p as *mut u32, bytes / 4)
        }
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn only_pages_never_written_are_zero_pages() {
        let words = fresh(4 << 20);
        let page = page_words();
        // Page 3 touched; a zero written (page 10) is a page touched too.
        words[3 * page + 5] = 7;
        words[10 * page] = 0;
        // SAFETY: a word of the mapping. A read maps the zero page: present, not skipped.
        let _ = unsafe { std::ptr::read_volatile(&words[20 * page]) };
        let zero = zero_pages(words);
        if zero.is_empty() {
            return; // a kernel that cannot say (before 6.11): every page filled
        }
        let n = words.len() / page;
        let skipped = |p: usize| zero.iter().any(|r| r.contains(&(p * page)));
        for p in 0..n {
            let touched = [3, 10, 20].contains(&p);
            assert_eq!(skipped(p), !touched, "page {p}");
        }
        assert!(zero
            .iter()
            .all(|r| r.start % page == 0 && r.end % page == 0));
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn shared_memory_and_small_fills_are_never_skipped() {
        let shared = mapped(2 * LEAST_BYTES, libc::MAP_SHARED);
        assert!(zero_pages(shared).is_empty());
        let small = fresh(LEAST_BYTES / 2);
        assert!(zero_pages(small).is_empty());
    }
}
