//! glibc's heap kept from shrinking between calls. A simulated call allocates the
//! devices' memory and its results afresh (MiBs at a time); with glibc's defaults such
//! blocks are mapped and unmapped, or trimmed off the heap, on every call, and touching
//! them again costs a page fault per 4 KiB: at 128 KiB per device and 8 devices that was
//! most of a call's time (`python/bench/interpret_vs_tpusim.py`). Blocks under 64 MiB
//! then come from the heap, and up to 256 MiB of freed heap stays with the process.
//! A user's own `MALLOC_MMAP_THRESHOLD_`/`MALLOC_TRIM_THRESHOLD_` (or
//! `TPUSIM_KEEP_HEAP=0`) leave glibc as it is.

/// Sets glibc's thresholds once, when the module loads (Linux with glibc only).
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let set_by_user = ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"]
            .iter()
            .any(|v| std::env::var_os(v).is_some());
        if set_by_user || std::env::var("TPUSIM_KEEP_HEAP").is_ok_and(|v| v == "0") {
            return;
        }
        // SAFETY: mallopt only sets allocator parameters; it is called once, at import.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
        }
    }
}
