//! `tpusim._native`: the Rust core of tpusim for Python, one module per concern:
//! [`errors`] (exceptions), [`budget`] (what the front end asks the budget), [`args`] (counts, seeds and schedules checked by the core's
//! rules), [`interrupts`] (Ctrl-C in long calls), [`outputs`] (files written whole, or
//! streams in place), [`progress`], [`arrays`] (numpy in and out), [`executors`], [`kernel`]
//! (a Pallas kernel written in Python, its jaxpr recorded by `tpusim._jaxpr`,
//! see [`replay`]), [`xla_call`] (the custom call a pallas_call lowers to) and
//! [`collectives`] (the shipped ones). Every step is a job of the
//! core's pipeline (`tpusim::run::Job`), as on the command line; structured results
//! cross as Python data (dicts and lists, through `pythonize`) in the core's formats.

mod args;
mod arrays;
mod budget;
mod collectives;
mod errors;
mod executors;
mod heap;
mod interrupts;
mod kernel;
mod outputs;
mod progress;
mod replay;
mod steer;
mod xla_call;
mod xla_ffi;

use errors::{BadInput, OrPy};
use pyo3::prelude::*;
use tpusim::{Error, Mesh};

/// A mesh of devices on named axes (row-major; the last axis varies fastest).
#[pyclass(module = "tpusim._native", name = "Mesh", frozen)]
#[derive(Clone)]
pub struct PyMesh {
    pub(crate) mesh: Mesh,
}

#[pymethods]
impl PyMesh {
    /// `Mesh(4)` (axis `x`), `Mesh(4, "y")`, or `Mesh(axes=[("x", 2), ("y", 4)])`.
    #[new]
    #[pyo3(signature = (devices=None, axis="x", *, axes=None))]
    fn new(
        devices: Option<args::Whole>,
        axis: &str,
        axes: Option<Vec<(String, args::Whole)>>,
    ) -> PyResult<Self> {
        let mesh = match (devices, axes) {
            (Some(n), None) => Mesh::new(n.check_axis("devices")?, axis),
            (None, Some(a)) => {
                let sizes = a
                    .iter()
                    .map(|(n, s)| s.check_axis(&format!("axis `{n}`")))
                    .collect::<PyResult<Vec<_>>>()?;
                let a: Vec<(&str, usize)> = a
                    .iter()
                    .zip(sizes)
                    .map(|((n, _), s)| (n.as_str(), s))
                    .collect();
                Mesh::with_axes(&a)
            }
            _ => Err(Error::bad_input(
                "give a mesh either a device count or axes=[(name, size), ...]",
            )),
        }
        .py()?;
        Ok(Self { mesh })
    }

    /// Number of devices.
    #[getter]
    fn size(&self) -> usize {
        self.mesh.size()
    }

    /// `[(axis name, size), ...]`.
    #[getter]
    fn axes(&self) -> Vec<(String, usize)> {
        self.mesh.axes().to_vec()
    }

    /// Mesh coordinates of linear device `device`.
    fn coords(&self, device: usize) -> PyResult<Vec<usize>> {
        if device >= self.mesh.size() {
            return Err(BadInput::new_err(format!(
                "bad input: device {device} is outside the mesh of {} devices",
                self.mesh.size()
            )));
        }
        Ok(self.mesh.coords(device))
    }

    fn __repr__(&self) -> String {
        let axes: Vec<String> = self
            .mesh
            .axes()
            .iter()
            .map(|(n, s)| format!("'{n}': {s}"))
            .collect();
        format!("Mesh({{{}}})", axes.join(", "))
    }

    fn __eq__(&self, other: &Self) -> bool {
        self.mesh == other.mesh
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    heap::keep_freed_memory();
    interrupts::install(m.py())?;
    m.add_function(wrap_pyfunction!(interrupts::check_interrupt, m)?)?;
    m.add_function(wrap_pyfunction!(args::count, m)?)?;
    m.add_function(wrap_pyfunction!(args::schedule, m)?)?;
    m.add_function(wrap_pyfunction!(args::backend, m)?)?;
    m.add_function(wrap_pyfunction!(budget::ensure_loop_fits, m)?)?;
    m.add_function(wrap_pyfunction!(budget::ensure_host_devices_fit, m)?)?;
    m.add_class::<outputs::PyOutput>()?;
    m.add_function(wrap_pyfunction!(outputs::write_output, m)?)?;
    m.add_function(wrap_pyfunction!(outputs::check_output, m)?)?;
    m.add_function(wrap_pyfunction!(outputs::check_output_dir, m)?)?;
    m.add_class::<progress::Progress>()?;
    m.add_class::<PyMesh>()?;
    m.add_class::<kernel::KernelCall>()?;
    m.add_function(wrap_pyfunction!(kernel::check_sequence, m)?)?;
    m.add_function(wrap_pyfunction!(budget::ensure_recording_fits, m)?)?;
    m.add_function(wrap_pyfunction!(kernel::iteration_text, m)?)?;
    m.add_function(wrap_pyfunction!(executors::resolve_backend, m)?)?;
    m.add_class::<xla_call::CallBuffers>()?;
    m.add_function(wrap_pyfunction!(xla_call::meeting_register, m)?)?;
    m.add_function(wrap_pyfunction!(xla_call::meeting_save_run, m)?)?;
    m.add_function(wrap_pyfunction!(xla_call::settings_epoch, m)?)?;
    m.add_function(wrap_pyfunction!(xla_call::forget_saved_runs, m)?)?;
    m.add_function(wrap_pyfunction!(xla_call::saved_rounds, m)?)?;
    m.add_function(wrap_pyfunction!(xla_call::ffi_handler_address, m)?)?;
    use collectives as c;
    m.add_function(wrap_pyfunction!(c::collectives, m)?)?;
    m.add_function(wrap_pyfunction!(c::variants, m)?)?;
    m.add_function(wrap_pyfunction!(c::presets, m)?)?;
    m.add_function(wrap_pyfunction!(c::check_preset, m)?)?;
    m.add_function(wrap_pyfunction!(c::adapters, m)?)?;
    m.add_function(wrap_pyfunction!(c::collective_run, m)?)?;
    m.add_function(wrap_pyfunction!(c::collective_shard_map, m)?)?;
    m.add_function(wrap_pyfunction!(c::collective_check, m)?)?;
    m.add_function(wrap_pyfunction!(c::collective_trace, m)?)?;
    m.add_function(wrap_pyfunction!(c::collective_model, m)?)?;
    m.add_function(wrap_pyfunction!(c::collective_bench, m)?)?;
    m.add_function(wrap_pyfunction!(c::collective_inputs, m)?)?;
    m.add_function(wrap_pyfunction!(c::parse_perm, m)?)?;
    m.add_function(wrap_pyfunction!(c::plot, m)?)?;
    errors::register(m)
}
