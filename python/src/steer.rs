//! A Python kernel traced while it runs (`tpusim/_steer.py`), as the core's
//! [`Steering`]: each tracer is the plan's `tracer()`, whose `update()` hands over the
//! grid points whose records changed (typed Python objects, as [`replay`] reads them)
//! and whose `answer(device, words)` traces on from a read's value. A Python exception
//! raised while tracing is kept and raised again as it was, once the core's pipeline
//! returns.

use crate::replay::{self, Operand, Recording, Scratch};
use numpy::PyArray1;
use pyo3::prelude::*;
use std::sync::{Arc, Mutex};
use tpusim::kernel::GridSpec;
use tpusim::steer::{Steering, Traced, Tracer};
use tpusim::{Error, HostArray, Mesh, Result};

/// What a steered kernel's spec is made of, besides its scratch (which tracing may add to).
pub struct Shape {
    /// Kernel name.
    pub name: String,
    /// Grid.
    pub grid: Vec<usize>,
    /// Inputs.
    pub inputs: Vec<Operand>,
    /// Outputs.
    pub outputs: Vec<Operand>,
    /// `collective_id`.
    pub collective_id: Option<u32>,
    /// TensorCores per chip.
    pub cores: usize,
    /// `input_output_aliases` pairs.
    pub aliases: Vec<(usize, usize)>,
    /// `vmem_limit_bytes` of its compiler params.
    pub vmem_limit: Option<u64>,
    /// Some dimension of its `dimension_semantics` is parallel.
    pub parallel: bool,
}

impl Shape {
    /// The grid spec with `scratch`.
    pub fn spec(&self, scratch: &[Scratch]) -> Result<GridSpec> {
        let mut spec = replay::grid_spec(
            &self.grid,
            &self.inputs,
            &self.outputs,
            scratch,
            self.collective_id,
        )?
        .cores(self.cores);
        for &(i, o) in &self.aliases {
            spec = spec.alias(i, o);
        }
        if let Some(l) = self.vmem_limit {
            spec = spec.vmem_limit(l);
        }
        Ok(spec.parallel_grid(self.parallel))
    }
}

/// A Python plan traced while it runs, with the inputs of its last call.
pub struct PySteering {
    plan: Py<PyAny>,
    shape: Shape,
    inputs: Mutex<Arc<Vec<Vec<HostArray>>>>,
    /// A Python exception raised while tracing: the error to raise.
    raised: Mutex<Option<PyErr>>,
}

impl PySteering {
    /// `plan` (a `_plan.Plan` made with `steered=True`) of kernel `shape`.
    pub fn new(plan: Py<PyAny>, shape: Shape) -> Self {
        Self {
            plan,
            shape,
            inputs: Mutex::new(Arc::new(Vec::new())),
            raised: Mutex::new(None),
        }
    }

    /// The kernel's input operands.
    pub fn input_specs(&self) -> &[Operand] {
        &self.shape.inputs
    }

    /// The inputs the next runs steer by.
    pub fn set_inputs(&self, inputs: Vec<Vec<HostArray>>) {
        *self.inputs.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(inputs);
    }

    /// `e` as a Python exception: the one Python raised while tracing, if that was it.
    pub fn py_err(&self, e: Error) -> PyErr {
        match self.raised.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(err) => err,
            None => crate::errors::to_py(e),
        }
    }

    /// `r`'s Python exception kept, as the core's error.
    fn kept<T>(&self, r: PyResult<T>) -> Result<T> {
        r.map_err(|err| {
            let msg = Python::attach(|py| err.value(py).to_string());
            *self.raised.lock().unwrap_or_else(|e| e.into_inner()) = Some(err);
            Error::bad_input(format!("tracing the kernel failed: {msg}"))
        })
    }
}

impl Steering for PySteering {
    fn name(&self) -> String {
        self.shape.name.clone()
    }

    fn tracer(&self) -> Result<Box<dyn Tracer + '_>> {
        let obj = self.kept(Python::attach(|py| self.plan.call_method0(py, "tracer")))?;
        Ok(Box::new(PyTracer {
            owner: self,
            obj,
            scratch: Vec::new(),
            recording: Arc::new(Vec::new()),
            constants: Vec::new(),
        }))
    }

    fn inputs(&self) -> Result<Arc<Vec<Vec<HostArray>>>> {
        Ok(self
            .inputs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone())
    }
}

/// One trace (`_steer.Tracer`) and what it recorded so far.
struct PyTracer<'s> {
    owner: &'s PySteering,
    obj: Py<PyAny>,
    scratch: Vec<Scratch>,
    recording: Arc<Recording>,
    constants: Vec<Arc<[u32]>>,
}

/// What `_steer.Tracer.update()` returns.
type Update<'py> = (
    Vec<Scratch>,
    Vec<(usize, usize, Bound<'py, PyAny>)>,
    Vec<Bound<'py, PyAny>>,
    Vec<bool>,
);

impl Drop for PyTracer<'_> {
    fn drop(&mut self) {
        // Devices still waiting for an answer (a run that ended early) stop tracing.
        Python::attach(|py| {
            let _ = self.obj.call_method0(py, "close");
        });
    }
}

impl Tracer for PyTracer<'_> {
    fn traced(&mut self, mesh: &Mesh) -> Result<Traced> {
        let points = tpusim::array::numel(&self.owner.shape.grid).unwrap_or(0);
        let open = self
            .owner
            .kept(Python::attach(|py| -> PyResult<Vec<bool>> {
                let got = self.obj.call_method0(py, "update")?;
                let (scratch, changed, constants, open): Update = got.bind(py).extract()?;
                self.scratch = scratch;
                let rec = Arc::make_mut(&mut self.recording);
                if rec.len() != mesh.size() {
                    *rec = vec![vec![Vec::new(); points]; mesh.size()];
                }
                for (d, g, ops) in changed {
                    let ops = crate::records::read_ops(&ops).map_err(crate::errors::to_py)?;
                    rec[d][g] = ops;
                }
                for a in &constants {
                    self.constants.push(crate::arrays::to_host(a)?.words.into());
                }
                Ok(open)
            }))?;
        let spec = self.owner.shape.spec(&self.scratch)?;
        let call = replay::python_call(
            &self.owner.shape.name,
            spec,
            self.recording.clone(),
            self.constants.clone(),
        );
        let (program, errors) = call.trace(mesh)?;
        Ok(Traced {
            program,
            errors,
            open,
        })
    }

    fn answer(&mut self, device: usize, words: Vec<u32>) -> Result<()> {
        self.owner.kept(Python::attach(|py| {
            let a = PyArray1::from_vec(py, words);
            self.obj.call_method1(py, "answer", (device, a)).map(|_| ())
        }))
    }
}
