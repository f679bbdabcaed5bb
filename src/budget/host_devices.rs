//! Devices a front end starts as host threads: JAX's CPU devices (`python -m tpusim
//! --devices N`, `tpusim.simulate(devices=N)`), one XLA thread each. Checked before JAX
//! is asked for them, against what this system can start: threads (3.3 a device; its thread and
//! process-id limits, less those running; the memory maps of a thread's stack), memory
//! (and address space under `ulimit -v`: a thread's stack reserves its size) and the
//! time to start them. JAX itself, past these, aborts the process or runs for minutes
//! with no word (10 000 CPU devices took 198 s and 3.3 GB to start here; 30 000 could
//! not be started: `pid_max` is 32 768).

use super::memory;
use super::time::time_limit;
use crate::error::{Error, Result};

/// Host memory one JAX CPU device holds once started (measured: 310-330 KiB a device
/// at 1 000 and 10 000 devices).
pub const BYTES_PER_DEVICE: f64 = 256.0 * 1024.0;

/// Seconds to start one JAX CPU device (measured: 3-20 ms a device at 1 000 and 10 000
/// devices on the 2-core CI machine, under load).
pub const SECONDS_PER_DEVICE: f64 = 1e-3;

/// Threads JAX's CPU client starts per device (measured: 3 258 threads for 1 000
/// devices).
pub const THREADS_PER_DEVICE: f64 = 3.3;

/// Threads kept free for everything else the process and the system start.
const SPARE_THREADS: u64 = 256;

/// How many more threads this system can start, and why (Linux; `None` elsewhere).
fn thread_room() -> Option<(u64, String)> {
    let read = |p: &str| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    // The fourth field of /proc/loadavg: running/total scheduling entities (threads).
    let running: u64 = std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .nth(3)?
        .split('/')
        .nth(1)?
        .parse()
        .ok()?;
    let mut limits = vec![];
    if let Some(n) = read("/proc/sys/kernel/pid_max") {
        limits.push((
            n.saturating_sub(running),
            format!("pid_max {n}, {running} threads running"),
        ));
    }
    if let Some(n) = read("/proc/sys/kernel/threads-max") {
        limits.push((
            n.saturating_sub(running),
            format!("threads-max {n}, {running} threads running"),
        ));
    }
    #[cfg(unix)]
    {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit only writes the struct it is given.
        if unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut r) } == 0
            && r.rlim_cur != libc::RLIM_INFINITY
        {
            #[allow(clippy::unnecessary_cast)]
            let n = r.rlim_cur as u64;
            limits.push((
                n.saturating_sub(running),
                format!("ulimit -u {n}, {running} threads running"),
            ));
        }
    }
    if let Some(n) = read("/proc/sys/vm/max_map_count") {
        // A thread's stack is two maps (the stack and its guard page).
        let maps =
            std::fs::read_to_string("/proc/self/maps").map_or(0, |m| m.lines().count() as u64);
        limits.push((
            n.saturating_sub(maps) / 2,
            format!("max_map_count {n}, two maps a thread"),
        ));
    }
    limits
        .into_iter()
        .min_by_key(|l| l.0)
        .map(|(n, why)| (n.saturating_sub(SPARE_THREADS), why))
}

/// The address space one thread's stack reserves (its soft limit, `ulimit -s`).
fn stack_bytes() -> f64 {
    #[cfg(unix)]
    {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit only writes the struct it is given.
        if unsafe { libc::getrlimit(libc::RLIMIT_STACK, &mut r) } == 0
            && r.rlim_cur != libc::RLIM_INFINITY
        {
            #[allow(clippy::unnecessary_cast)]
            return r.rlim_cur as f64;
        }
    }
    8.0 * 1024.0 * 1024.0
}

/// Refuses to start `n` host-thread devices (`name`: how the caller was asked for them,
/// `--devices`): more threads than this system has room for, more memory (or address
/// space) than is available, or longer to start than the time limit. The message names
/// the limit and the most devices that fit.
pub fn ensure_host_devices_fit(name: &str, n: u64) -> Result<()> {
    let asked = format!("{name} {n} asks JAX for {n} CPU devices");
    if let Some((room, why)) = thread_room() {
        let threads = (n as f64 * THREADS_PER_DEVICE).ceil();
        if threads > room as f64 {
            return Err(Error::TooLarge(format!(
                "too many devices: {asked}, which start about {} threads ({THREADS_PER_DEVICE} each), but this system has room for about {room} more ({why}); the most devices that fit are {}",
                crate::units::count(threads),
                (room as f64 / THREADS_PER_DEVICE).floor()
            )));
        }
    }
    if let Some(avail) = memory::available()? {
        let need = n as f64 * BYTES_PER_DEVICE;
        if need > avail.bytes as f64 {
            return Err(Error::TooLarge(format!(
                "not enough memory: {asked}, which hold about {} ({} each), but {} are available ({}); the most devices that fit are {}",
                crate::units::bytes(need),
                crate::units::bytes(BYTES_PER_DEVICE),
                crate::units::bytes(avail.bytes as f64),
                avail.source,
                (avail.bytes as f64 / BYTES_PER_DEVICE).floor()
            )));
        }
    }
    if let Some(left) = memory::address_space_left() {
        let stack = stack_bytes() * THREADS_PER_DEVICE;
        if n as f64 * stack > left as f64 {
            return Err(Error::TooLarge(format!(
                "not enough address space: {asked}, whose threads' stacks reserve {} a device (ulimit -s), but the address-space limit (ulimit -v) leaves {}; the most devices that fit are {}",
                crate::units::bytes(stack),
                crate::units::bytes(left as f64),
                (left as f64 / stack).floor()
            )));
        }
    }
    let limit = time_limit()?;
    let seconds = n as f64 * SECONDS_PER_DEVICE;
    if seconds > limit.seconds {
        return Err(Error::TooLarge(format!(
            "too long: {asked}, which take about {} to start, beyond the time limit of {} ({}); the most devices that fit are {}",
            crate::units::seconds(seconds),
            crate::units::seconds(limit.seconds),
            limit.source,
            (limit.seconds / SECONDS_PER_DEVICE).floor()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_devices_fit_and_a_billion_do_not() {
        assert!(ensure_host_devices_fit("--devices", 4).is_ok());
        let e = ensure_host_devices_fit("--devices", 1_000_000_000)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--devices 1000000000") && e.contains("the most devices that fit are"),
            "{e}"
        );
    }
}
