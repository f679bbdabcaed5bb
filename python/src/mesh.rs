//! A mesh of devices on named axes, as Python builds it.

use crate::args;
use crate::errors::{BadInput, OrPy};
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
