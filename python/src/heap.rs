//! glibc's heap kept whole between calls, when the user asks for it
//! (`TPUSIM_KEEP_HEAP=1` in the environment the process starts with). A plan's own
//! buffers are kept from one call to the next (`CpuPlan`), but what remains per call
//! (XLA's result buffers, results a call copies out, the GPU executor's staging) is
//! mapped and unmapped by glibc each time, and page-faulted afresh: at 16 MiB per
//! device that fault traffic is most of a data-movement call through JAX. The
//! setting is process-wide, so importing tpusim alone never makes it. It is read once,
//! when tpusim is imported, and should be there before JAX starts its threads (an
//! arena a thread made before keeps its own settings). A user's own
//! `MALLOC_ARENA_MAX`/`MALLOC_MMAP_THRESHOLD_`/`MALLOC_TRIM_THRESHOLD_` take precedence.

/// The environment variable that opts in.
const OPT_IN: &str = "TPUSIM_KEEP_HEAP";

/// Blocks up to this size come from the heap, not from a mapping of their own.
const MMAP_THRESHOLD: i32 = 1 << 30;

/// Freed heap kept before glibc gives the top back: 2 GiB (the largest `mallopt` takes).
const TRIM_THRESHOLD: i32 = i32::MAX;

/// Sets glibc's heap once, when the module loads, if `TPUSIM_KEEP_HEAP=1` (Linux with
/// glibc only): one malloc arena (so freed blocks are found again by every thread),
/// blocks up to 1 GiB from the heap, up to 2 GiB of freed heap kept.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var(OPT_IN).map_or(true, |v| v != "1") {
            return;
        }
        let settings = [
            ("MALLOC_ARENA_MAX", libc::M_ARENA_MAX, 1),
            (
                "MALLOC_MMAP_THRESHOLD_",
                libc::M_MMAP_THRESHOLD,
                MMAP_THRESHOLD,
            ),
            (
                "MALLOC_TRIM_THRESHOLD_",
                libc::M_TRIM_THRESHOLD,
                TRIM_THRESHOLD,
            ),
        ];
        for (user, param, value) in settings {
            if std::env::var_os(user).is_none() {
                // SAFETY: mallopt only sets allocator parameters; called once, at import.
                unsafe {
                    libc::mallopt(param, value);
                }
            }
        }
    }
}
