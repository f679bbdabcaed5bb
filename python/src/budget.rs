//! The front end's questions to the budget (`tpusim::budget`): whether recording a
//! kernel (its calls, its loops) fits, at what the recorder counted, and whether JAX
//! can start the CPU devices asked for. One rule each, in Rust, as the command line's.

use crate::errors::OrPy;
use pyo3::prelude::*;

/// What a front end counted while it recorded (per call, or per loop iteration):
/// `(equations, loop iterations, record bytes)`.
type Counted = (f64, f64, f64);

fn recorded((eqns, iterations, bytes): Counted) -> tpusim::budget::Recorded {
    tpusim::budget::Recorded {
        eqns,
        iterations,
        bytes,
    }
}

/// Refuses, before a front end records kernel `name` by calling its Python once per
/// device of `devices` and grid point of `grid` (and again as it counts the calls),
/// work whose calls would exceed the time limit or whose records would not fit in
/// memory, at what each call was counted to do (`per_call`: the mean of the calls so
/// far, `(equations, loop iterations, record bytes)`; before any, a kernel that does
/// nothing): a `LimitError` with the estimate and the most grid points that fit.
#[pyfunction]
#[pyo3(signature = (name, devices, grid, per_call=None))]
pub fn ensure_recording_fits(
    name: &str,
    devices: usize,
    grid: Vec<usize>,
    per_call: Option<Counted>,
) -> PyResult<()> {
    tpusim::budget::ensure_recording_fits(name, devices, &grid, per_call.map(recorded)).py()
}

/// Refuses a loop of kernel `name` the front end is recording (at `at`, `count`
/// iterations, run `runs` times a call by the loops around it) once its first
/// iterations are counted (`per_iteration`: their mean, as for
/// [`ensure_recording_fits`]): a `LimitError` with the estimate and the largest count
/// that fits (`tpusim::budget::ensure_loop_fits`).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn ensure_loop_fits(
    name: &str,
    devices: usize,
    grid: Vec<usize>,
    at: &str,
    count: u64,
    runs: f64,
    per_iteration: Counted,
) -> PyResult<()> {
    let lp = tpusim::budget::RecordedLoop { at, count, runs };
    tpusim::budget::ensure_loop_fits(name, devices, &grid, lp, recorded(per_iteration)).py()
}

/// Refuses to start `n` JAX CPU devices (`name`: how they were asked for, `--devices`)
/// that this system has no room, memory or time for
/// (`tpusim::budget::ensure_host_devices_fit`).
#[pyfunction]
pub fn ensure_host_devices_fit(name: &str, n: u64) -> PyResult<()> {
    tpusim::budget::ensure_host_devices_fit(name, n).py()
}
