//! XLA's result buffers in huge pages: XLA allocates a call's results anew, and glibc
//! maps a block over its threshold (32 MiB at most) afresh each time, so every 4 KiB
//! page of a result faults when the run first writes it (most of an all-gather's time
//! at 16 MiB per device). Linux backs memory advised so with transparent huge pages
//! (its `madvise` mode): one fault per 2 MiB.

/// Huge pages' size (x86-64 and the common arm64 configuration).
const HUGE: usize = 2 << 20;

/// Advises the kernel to back the whole huge pages inside `bytes` (a result about to
/// be written) with huge pages. Advice only: the contents stay as they are, and
/// nothing changes where the kernel does not take it.
pub fn advise(bytes: &mut [u8]) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let start = bytes.as_ptr() as usize;
        let (lo, hi) = (
            start.next_multiple_of(HUGE),
            (start + bytes.len()) / HUGE * HUGE,
        );
        if hi > lo {
            // SAFETY: advice on whole pages inside memory this slice holds; it changes
            // no contents and no mapping.
            unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = (bytes, HUGE);
}
