//! Ctrl-C (and SIGTERM, SIGHUP) while a native call runs long. Python runs its signal
//! handlers on the main thread between instructions, so a call that stays in Rust (a
//! check of many schedules, a big run) would see Ctrl-C only when it ends, and a call
//! on an XLA thread (every simulated `pallas_call`), whose main thread waits inside JAX,
//! not at all. So every long call is [`watched`] (`tpusim::interrupt`): on the main
//! thread the core's loops ask Python's `PyErr_CheckSignals` every few tens of
//! milliseconds (Python's own handlers decide, `KeyboardInterrupt` by default); on other
//! threads a SIGINT the process received since the call began stops it (the handler
//! that counts it keeps Python's, which still raises on the main thread). The call ends
//! as from any error: temporary files removed, nothing half-written.
//!
//! SIGTERM and SIGHUP, whose default ends the process at once, remove the temporary
//! files of outputs being written first (as on the command line), where Python has
//! left them at their default.

use pyo3::prelude::*;
use std::sync::OnceLock;
use std::thread::ThreadId;

/// The interpreter's main thread (where its signal handlers run).
static MAIN: OnceLock<ThreadId> = OnceLock::new();

/// Installs the handlers (at the module's import, on the thread importing it).
pub fn install(py: Python<'_>) -> PyResult<()> {
    let threading = py.import("threading")?;
    let main = threading.call_method0("main_thread")?;
    let current = threading.call_method0("current_thread")?;
    if main.is(&current) {
        let _ = MAIN.set(std::thread::current().id());
    }
    #[cfg(unix)]
    {
        tpusim::interrupt::count_signals(&[libc::SIGINT]).map_err(crate::errors::to_py)?;
        let defaults: Vec<i32> = [libc::SIGTERM, libc::SIGHUP]
            .into_iter()
            .filter(|&s| at_default(s))
            .collect();
        tpusim::files::remove_temporaries_on(&defaults).map_err(crate::errors::to_py)?;
    }
    Ok(())
}

/// True when signal `sig` has its default action (no handler of Python's or anyone's).
#[cfg(unix)]
fn at_default(sig: i32) -> bool {
    // SAFETY: reads the action only (a null new action), into a zeroed struct.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_DFL
    }
}

/// Runs Python's signal handlers (on the main thread, with the GIL): true when one
/// raised, its exception kept for the call to raise.
fn poll() -> bool {
    Python::attach(|py| match py.check_signals() {
        Ok(()) => false,
        Err(e) => {
            crate::errors::keep_raised(e);
            true
        }
    })
}

/// Runs `f` watched for Ctrl-C (see the module docs).
pub fn watched<T>(f: impl FnOnce() -> T) -> T {
    let on_main = MAIN.get() == Some(&std::thread::current().id());
    let _watch = tpusim::interrupt::watch(on_main.then_some(poll as tpusim::interrupt::Poll));
    f()
}

/// Raises `KeyboardInterrupt` when this thread's watched work was asked to stop (for
/// the front end's own long loops, on whichever thread records a kernel).
#[pyfunction]
pub fn check_interrupt() -> PyResult<()> {
    tpusim::interrupt::check().map_err(crate::errors::to_py)
}
