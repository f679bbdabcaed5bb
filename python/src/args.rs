//! Counts, seeds, shapes and schedules as Python gives them, checked by the core's one
//! rule for each (`tpusim::args`, which the command line uses too): `tpusim.check(...,
//! schedules=-5)` and `python -m tpusim check --schedules -5` are the command line's
//! `BadInput` with its message, not an `OverflowError` from the conversion to Rust.

use crate::errors::OrPy;
use pyo3::prelude::*;
use pyo3::types::PyBool;
use tpusim::args::{self, Count};

/// A whole number as Python gave it (of any size or sign; anything else is kept as its
/// `repr`, for the message that refuses it).
#[derive(Clone, Debug)]
pub struct Whole(String);

impl<'a, 'py> FromPyObject<'a, 'py> for Whole {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        // Python's bools are ints: `True` as a count is a mistake, shown as written.
        if !obj.is_instance_of::<PyBool>() {
            let index = obj.py().import("operator")?.getattr("index")?;
            if let Ok(i) = index.call1((obj,)) {
                return Ok(Whole(i.str()?.to_string()));
            }
        }
        Ok(Whole(obj.repr()?.to_string()))
    }
}

impl Whole {
    /// `v`, as a default.
    pub fn of(v: u64) -> Self {
        Whole(v.to_string())
    }

    /// The number, checked by `count`'s rule and named `name` in its message.
    pub fn check(&self, count: &Count, name: &str) -> PyResult<u64> {
        count.parse_as(name, &self.0).py()
    }

    /// A mesh axis's size: any whole number a `usize` holds; zero and sizes whose
    /// product is past counting are left to the mesh to refuse, with its messages.
    pub fn check_axis(&self, name: &str) -> PyResult<usize> {
        const AXIS: Count = Count {
            flag: "axis",
            min: 0,
            max: usize::MAX as u64,
        };
        self.check_usize(&AXIS, name)
    }

    /// As [`Whole::check`], as a `usize`.
    pub fn check_usize(&self, count: &Count, name: &str) -> PyResult<usize> {
        self.check(count, name).map(|v| v as usize)
    }
}

/// A shape as Python gave it, checked by the command line's rule for `--shape`.
pub fn shape(dims: &[Whole]) -> PyResult<Vec<usize>> {
    let text: Vec<&str> = dims.iter().map(|d| d.0.as_str()).collect();
    tpusim::array::parse_shape(&text.join("x")).py()
}

/// The rule of count `kind` (`devices`, `schedules`, `seed`, `repeat`, `iters`,
/// `warmup`, `checks`, `factor`).
fn rule(kind: &str) -> PyResult<&'static Count> {
    Ok(match kind {
        "devices" => &args::DEVICES,
        "schedules" => &args::SCHEDULES,
        "seed" => &args::SEED,
        "repeat" => &args::REPEAT,
        "iters" => &args::ITERS,
        "warmup" => &args::WARMUP,
        "checks" => &args::CHECKS,
        "factor" => &args::FACTOR,
        _ => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "no count `{kind}`"
            )))
        }
    })
}

/// `value` (an int, or text such as an environment variable's) checked as count `kind`
/// (`devices`, `schedules`, `seed`, …), named `name` in the message (`--schedules`,
/// `TPUSIM_DEVICES`).
#[pyfunction]
pub fn count(kind: &str, name: &str, value: &Bound<'_, PyAny>) -> PyResult<u64> {
    let rule = rule(kind)?;
    match value.extract::<String>() {
        Ok(text) => rule.parse_as(name, &text).py(),
        Err(_) => value.extract::<Whole>()?.check(rule, name),
    }
}

/// Schedule `text` checked (for a mesh of `devices` devices when known; `name`: the
/// environment variable it came from, for the message): its canonical spelling.
#[pyfunction]
#[pyo3(signature = (text, devices=None, name=None))]
pub fn schedule(text: &str, devices: Option<usize>, name: Option<&str>) -> PyResult<String> {
    args::schedule(text, devices)
        .map_err(|e| match name {
            Some(n) => args::named(n, text, e),
            None => e,
        })
        .map(|s| s.to_string())
        .py()
}

/// Backend `text` checked (`auto`, `gpu`, `cpu`; `name` as for [`schedule`]).
#[pyfunction]
#[pyo3(signature = (text, name=None))]
pub fn backend(text: &str, name: Option<&str>) -> PyResult<String> {
    tpusim::exec::Backend::parse(text)
        .map_err(|e| match name {
            Some(n) => args::named(n, text, e),
            None => e,
        })
        .map(|_| text.to_string())
        .py()
}
