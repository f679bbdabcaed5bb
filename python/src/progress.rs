//! Progress of the front end's long work on a terminal (`tpusim::progress`): shown on
//! standard error when it is a terminal and the work has taken a second.

use pyo3::prelude::*;
use std::sync::Mutex;

/// The progress of one piece of work.
#[pyclass(module = "tpusim._native", frozen)]
pub struct Progress(Mutex<Option<tpusim::progress::Progress>>);

#[pymethods]
impl Progress {
    /// Work called `what` (`recording `k``), of `total` steps when known.
    #[new]
    #[pyo3(signature = (what, total=None))]
    fn new(what: String, total: Option<u64>) -> Self {
        Progress(Mutex::new(Some(tpusim::progress::Progress::new(
            what, total,
        ))))
    }

    /// `done` steps are done (`note`: what the current one is, when it says more).
    #[pyo3(signature = (done, note=None))]
    fn set(&self, done: u64, note: Option<&str>) {
        if let Some(p) = self.0.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            p.set(done, note);
        }
    }

    /// Ends it: its line is removed.
    fn close(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}
