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

/// A setting's text as Python gave it: a `str`, else its `repr` (`tpusim.config.schedule
/// = 5` is refused as the schedule `5`, as the command line would refuse it, not with a
/// `TypeError`).
fn text_of(value: &Bound<'_, PyAny>) -> PyResult<String> {
    match value.extract::<String>() {
        Ok(s) => Ok(s),
        Err(_) => Ok(value.repr()?.to_string()),
    }
}

/// Schedule `value` checked (for a mesh of `devices` devices when known; `name`: the
/// environment variable it came from, for the message): its canonical spelling.
#[pyfunction]
#[pyo3(signature = (value, devices=None, name=None))]
pub fn schedule(
    value: &Bound<'_, PyAny>,
    devices: Option<usize>,
    name: Option<&str>,
) -> PyResult<String> {
    let text = &text_of(value)?;
    args::schedule(text, devices)
        .map_err(|e| match name {
            Some(n) => args::named(n, text, e),
            None => e,
        })
        .map(|s| s.to_string())
        .py()
}

/// Backend `value` checked (`auto`, `gpu`, `cpu`; `name` as for [`schedule`]).
#[pyfunction]
#[pyo3(signature = (value, name=None))]
pub fn backend(value: &Bound<'_, PyAny>, name: Option<&str>) -> PyResult<String> {
    let text = &text_of(value)?;
    tpusim::device_sim::Backend::parse(text)
        .map_err(|e| match name {
            Some(n) => args::named(n, text, e),
            None => e,
        })
        .map(|_| text.to_string())
        .py()
}
