//! What the kernel call and the shipped collectives both do with a job, as Python
//! asks for it: its model spec from Python's arguments, a modeled run as Python data,
//! and the verifier's counts and run.

use crate::args::Whole;
use crate::arrays::to_py_data;
use crate::errors::{BadInput, OrPy};
use pyo3::prelude::*;
use tpusim::model::{Knob, ModelSpec, Topology};
use tpusim::run::{Job, Modeled};
use tpusim::sched::ScheduleSpec;

/// The model Python asks for: `preset`, `(name, value)` overrides in the knobs' units
/// (`link_gbps`, …) and a topology (`ring`, `full`, `torus:AxB`).
pub fn model_spec(
    preset: &str,
    overrides: Option<Vec<(String, f64)>>,
    topology: Option<&str>,
) -> PyResult<ModelSpec> {
    let overrides = overrides
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| Ok((Knob::parse(&k)?, v)))
        .collect::<tpusim::Result<Vec<_>>>()
        .py()?;
    Ok(ModelSpec {
        preset: preset.to_string(),
        overrides,
        topology: topology.map(Topology::parse).transpose().py()?,
    })
}

/// A modeled run as Python data, with its Chrome trace when `timeline`.
pub fn modeled<'py>(
    py: Python<'py>,
    m: &Modeled,
    name: &str,
    timeline: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let mut v = serde_json::to_value(m).map_err(|e| BadInput::new_err(e.to_string()))?;
    if let Some(line) = m.compute_line() {
        v["compute"] = line.into();
    }
    if timeline {
        v["timeline"] = m.chrome_trace(name);
    }
    to_py_data(py, &v)
}

/// A check's `schedules` and `seed` as Python gave them, checked by the command line's
/// rules.
pub fn check_counts(schedules: &Whole, seed: &Whole) -> PyResult<(usize, u64)> {
    Ok((
        schedules.check_usize(&tpusim::args::SCHEDULES, "schedules")?,
        seed.check(&tpusim::args::SEED, "seed")?,
    ))
}

/// The verifier on `job` under `schedules` schedules (every deterministic one, then
/// seeded random ones; counted by the budget before they are listed), or exactly
/// `replay`.
pub fn check_job(
    job: &Job,
    schedules: usize,
    seed: u64,
    replay: Option<&str>,
) -> tpusim::Result<tpusim::verify::Report> {
    match replay {
        Some(s) => job.check(&[ScheduleSpec::parse(s)?]),
        None => job.check_set(schedules, seed),
    }
}
