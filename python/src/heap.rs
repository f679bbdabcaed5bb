//! glibc's heap kept from shrinking between calls, when the user asks for it
//! (`TPUSIM_KEEP_HEAP=1`). A plan's own buffers are kept from one call to the next
//! (`CpuPlan`), so a call no longer allocates and page-faults its devices' memory
//! afresh; what remains per call (results a call copies out, the GPU executor's staging)
//! can still be mapped and unmapped by glibc each time. The setting is process-wide, so
//! it is never made by importing tpusim alone. A user's own
//! `MALLOC_MMAP_THRESHOLD_`/`MALLOC_TRIM_THRESHOLD_` take precedence.

/// Sets glibc's thresholds once, when the module loads, if `TPUSIM_KEEP_HEAP=1` (Linux
/// with glibc only): blocks under 64 MiB from the heap, up to 256 MiB of freed heap kept.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let set_by_user = ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"]
            .iter()
            .any(|v| std::env::var_os(v).is_some());
        if set_by_user || std::env::var("TPUSIM_KEEP_HEAP").map_or(true, |v| v != "1") {
            return;
        }
        // SAFETY: mallopt only sets allocator parameters; it is called once, at import.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
        }
    }
}
