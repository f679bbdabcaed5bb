//! Output files for Python, by the core's rules (`tpusim::files`): checked before the
//! work that fills them, a regular file written whole or not at all (a temporary file
//! renamed over it), a device, FIFO or pipe (`/dev/stdout`) opened once and written in
//! place; a directory for several outputs exists, or is made in one that does.

use crate::errors::OrPy;
use crate::interrupts::watched;
use pyo3::prelude::*;
use std::path::PathBuf;

/// An output file, checked (a stream opened) and not yet written.
#[pyclass(module = "tpusim._native", name = "Output", frozen)]
pub struct PyOutput(tpusim::files::Output);

#[pymethods]
impl PyOutput {
    /// Writes `data` (bytes, or text as UTF-8): whole, or not at all.
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let bytes: Vec<u8> = match data.extract::<String>() {
            Ok(s) => s.into_bytes(),
            Err(_) => data.extract::<Vec<u8>>()?,
        };
        py.detach(|| watched(|| self.0.write(&bytes))).py()
    }

    /// The path as given.
    #[getter]
    fn path(&self) -> PathBuf {
        self.0.path().to_path_buf()
    }
}

/// Checks output `path` (`what` names it in errors: "timeline") before the work that
/// fills it: an `Output` to write once the work is done.
#[pyfunction]
pub fn check_output(py: Python<'_>, path: PathBuf, what: &str) -> PyResult<PyOutput> {
    // Detached: a FIFO without a reader yet is waited for, Ctrl-C ends the wait.
    py.detach(|| watched(|| tpusim::files::Output::check(&path, what)))
        .py()
        .map(PyOutput)
}

/// Writes `data` to output `path` at once (see [`check_output`]).
#[pyfunction]
pub fn write_output(
    py: Python<'_>,
    path: PathBuf,
    what: &str,
    data: &Bound<'_, PyAny>,
) -> PyResult<()> {
    check_output(py, path, what)?.write(py, data)
}

/// Checks that `path` can hold outputs (`what` names them: "timelines"), making it when
/// its parent directory exists: its path.
#[pyfunction]
pub fn check_output_dir(path: PathBuf, what: &str) -> PyResult<PathBuf> {
    tpusim::files::output_dir(&path, what).py()
}
