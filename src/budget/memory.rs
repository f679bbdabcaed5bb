//! How much host memory this process may use, read when a command starts: the
//! `TPUSIM_MEMORY_LIMIT` override, else `MemAvailable` in `/proc/meminfo`, lowered to
//! what the process's cgroup (v2) still allows and to what its address-space limit
//! (`ulimit -v`) leaves: work the budget passes must not abort on an allocation.

use crate::error::{Error, Result};
use std::path::Path;

/// The environment variable that sets the memory limit (e.g. `512M`, `8G`).
pub const LIMIT_VAR: &str = "TPUSIM_MEMORY_LIMIT";

/// Host memory a command may use, and where that figure comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Available {
    /// Bytes.
    pub bytes: u64,
    /// Where the figure comes from, for messages.
    pub source: String,
}

/// The host memory available now, or `None` where it cannot be read (not Linux).
/// A malformed `TPUSIM_MEMORY_LIMIT` is bad input.
pub fn available() -> Result<Option<Available>> {
    if let Ok(v) = std::env::var(LIMIT_VAR) {
        let bytes = crate::units::parse_size(&v).map_err(|_| {
            Error::bad_input(format!(
                "{LIMIT_VAR}=`{v}` is not a size (expected e.g. 512M or 8G)"
            ))
        })?;
        return Ok(Some(Available {
            bytes,
            source: format!("{LIMIT_VAR}={v}"),
        }));
    }
    let Some(mut avail) = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| meminfo_available(&s))
        .map(|bytes| Available {
            bytes,
            source: "MemAvailable in /proc/meminfo".into(),
        })
    else {
        return Ok(None);
    };
    if let Some(left) = cgroup_left(Path::new("/sys/fs/cgroup")) {
        if left < avail.bytes {
            avail = Available {
                bytes: left,
                source: "what this process's cgroup memory.max leaves".into(),
            };
        }
    }
    if let Some(left) = address_space_left() {
        if left < avail.bytes {
            avail = Available {
                bytes: left,
                source: "what the address-space limit (ulimit -v) leaves this process".into(),
            };
        }
    }
    Ok(Some(avail))
}

/// Bytes the address-space limit (RLIMIT_AS, `ulimit -v`) still leaves the process for
/// the budget: two thirds of the limit less what it has mapped (`VmSize` in
/// `/proc/self/status`), if limited.
pub(super) fn address_space_left() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit only writes the struct it is given.
        if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut r) } != 0
            || r.rlim_cur == libc::RLIM_INFINITY
        {
            return None;
        }
        // The worker threads that run steps (lanes of devices) with their malloc arenas
        // mapped first (each maps one at its first allocation), so that every look at
        // what is mapped sees them, and the same figure.
        rayon::broadcast(|_| drop(std::hint::black_box(Box::new(0u8))));
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let mapped = vm_size(&status)?;
        // Two thirds of it: address space also holds what memory use does not
        // count, a vector's old and new buffers while it grows and allocators' arenas
        // (psum's largest P by the whole figure, or three quarters, aborted under `ulimit -v
        // 1048576`).
        // rlim_t is u64 on Linux, not everywhere.
        #[allow(clippy::unnecessary_cast)]
        let limit = r.rlim_cur as u64;
        Some(limit.saturating_sub(mapped) / 3 * 2)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// `VmSize` (the address space mapped) from the text of `/proc/self/status`, in bytes.
fn vm_size(status: &str) -> Option<u64> {
    let v = status.lines().find_map(|l| l.strip_prefix("VmSize:"))?;
    let kib: u64 = v.trim().strip_suffix("kB")?.trim().parse().ok()?;
    kib.checked_mul(1024)
}

/// `MemAvailable` from the text of `/proc/meminfo`, in bytes.
pub fn meminfo_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut words = line.split_whitespace().skip(1);
    let n: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => n.checked_mul(1024),
        None => Some(n),
        Some(_) => None,
    }
}

/// Bytes the process's cgroup v2 still allows (`memory.max` − `memory.current`), if limited.
fn cgroup_left(root: &Path) -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = root.join(rel.trim_start_matches('/'));
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let max: u64 = read("memory.max")?.trim().parse().ok()?;
    let current: u64 = read("memory.current")?.trim().parse().ok()?;
    Some(max.saturating_sub(current))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mem_available_in_kib() {
        let text = "MemTotal:       24683656 kB\nMemFree:  100 kB\nMemAvailable:   24237164 kB\n";
        assert_eq!(meminfo_available(text), Some(24237164 * 1024));
        assert_eq!(meminfo_available("MemTotal: 5 kB\n"), None);
        assert_eq!(meminfo_available("MemAvailable: x kB\n"), None);
    }

    #[test]
    fn reads_the_mapped_address_space() {
        assert_eq!(
            vm_size("Name:\ttpusim\nVmPeak:\t 9 kB\nVmSize:\t  123456 kB\n"),
            Some(123456 * 1024)
        );
        assert_eq!(vm_size("VmRSS:\t 5 kB\n"), None);
    }
}
