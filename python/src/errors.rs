//! tpusim's errors as Python exceptions: one class per kind, each a `TpusimError`,
//! with the core's message and its details as attributes.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyKeyboardInterrupt};
use pyo3::prelude::*;
use std::cell::RefCell;
use tpusim::Error;

create_exception!(
    _native,
    TpusimError,
    PyException,
    "Every error tpusim raises."
);
create_exception!(
    _native,
    BadInput,
    TpusimError,
    "Bad input: a shape, P, dtype, name or option tpusim cannot take."
);
create_exception!(
    _native,
    NoAdapter,
    TpusimError,
    "No GPU adapter could be found or opened."
);
create_exception!(_native, GpuError, TpusimError, "A GPU operation failed.");
create_exception!(
    _native,
    LimitError,
    TpusimError,
    "A request larger than the adapter, the cost model's VMEM or the host allows."
);
create_exception!(
    _native,
    KernelError,
    TpusimError,
    "A kernel mistake found while tracing it (device id out of range, out of bounds, ...)."
);
create_exception!(
    _native,
    UnsupportedError,
    KernelError,
    "A construct the Pallas front end does not support, with the kernel's file and line."
);
create_exception!(
    _native,
    DeadlockError,
    TpusimError,
    "No device can make progress and no DMA is in flight."
);
create_exception!(
    _native,
    ExitError,
    TpusimError,
    "Leftovers at kernel exit: a semaphore not zero, a DMA never waited."
);

/// Sets attribute `name` of exception `err` to `value` as Python data.
fn attach(err: &PyErr, name: &str, value: &impl serde::Serialize) {
    Python::attach(|py| {
        if let Ok(v) = pythonize::pythonize(py, value) {
            let _ = err.value(py).setattr(name, v);
        }
    });
}

/// A Rust error as the Python exception of its kind, with the same message and its
/// details as attributes (`kind`, `site`, `detail`; `blocked`; `problems`; `requested`,
/// `limit`).
pub fn to_py(e: Error) -> PyErr {
    if let Error::Interrupted = e {
        return raised();
    }
    let msg = e.to_string();
    match &e {
        // A file that cannot be read or written is bad input, as on the command line
        // (exit 2); the message names the path and what was being done.
        Error::BadInput(_) | Error::File { .. } => BadInput::new_err(msg),
        Error::NoAdapter(_) => NoAdapter::new_err(msg),
        Error::Gpu(_) => GpuError::new_err(msg),
        Error::Limit {
            requested, limit, ..
        } => {
            let err = LimitError::new_err(msg);
            attach(&err, "requested", requested);
            attach(&err, "limit", limit);
            err
        }
        Error::TooLarge(_) => LimitError::new_err(msg),
        Error::Kernel(k) => {
            let err = KernelError::new_err(msg);
            attach(&err, "kind", &k.kind);
            attach(&err, "site", &k.site);
            attach(&err, "detail", &k.detail);
            err
        }
        Error::Deadlock(b) => {
            let err = DeadlockError::new_err(msg);
            attach(&err, "blocked", b);
            err
        }
        Error::Exit(p) => {
            let err = ExitError::new_err(msg);
            attach(&err, "problems", p);
            err
        }
        _ => TpusimError::new_err(msg),
    }
}

/// `?` on a tpusim result in a Python function.
pub trait OrPy<T> {
    /// The result with its error as a Python exception.
    fn py(self) -> PyResult<T>;
}

impl<T> OrPy<T> for tpusim::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// Registers the exception classes on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("TpusimError", py.get_type::<TpusimError>())?;
    m.add("BadInput", py.get_type::<BadInput>())?;
    m.add("NoAdapter", py.get_type::<NoAdapter>())?;
    m.add("GpuError", py.get_type::<GpuError>())?;
    m.add("LimitError", py.get_type::<LimitError>())?;
    m.add("KernelError", py.get_type::<KernelError>())?;
    m.add("UnsupportedError", py.get_type::<UnsupportedError>())?;
    m.add("DeadlockError", py.get_type::<DeadlockError>())?;
    m.add("ExitError", py.get_type::<ExitError>())?;
    Ok(())
}

thread_local! {
    /// The exception Python's handlers raised while a watched call polled them
    /// (`interrupts`), for the interrupted call to raise.
    static RAISED: RefCell<Option<PyErr>> = const { RefCell::new(None) };
}

/// Keeps `e`, which Python's signal handlers raised in a poll, for the call to raise.
pub fn keep_raised(e: PyErr) {
    RAISED.with(|r| *r.borrow_mut() = Some(e));
}

/// The exception an interrupted call raises: what Python's handler raised, else
/// `KeyboardInterrupt`.
fn raised() -> PyErr {
    RAISED
        .with(|r| r.borrow_mut().take())
        .unwrap_or_else(|| PyKeyboardInterrupt::new_err("interrupted"))
}
