//! `tpusim._native`: the Rust core of tpusim for Python. Meshes, the shipped
//! collectives on numpy arrays, the verifier, step tables, the cost model and bench,
//! and [`KernelCall`], a Pallas kernel written in Python and recorded by the stand-ins
//! of the `tpusim.jax` package (see `replay`). Structured results cross as JSON text
//! that the Python side turns into objects; arrays cross as numpy arrays.

mod json;
mod replay;

use numpy::{PyArray1, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use serde_json::{json as js, Value};
use std::cell::OnceCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;
use tpusim::bench::{self, BenchConfig};
use tpusim::collectives::variants::{variant, variants as all_variants};
use tpusim::collectives::{random_inputs, Collective, Options, Placement, Ppermute, Registry};
use tpusim::ir::Program;
use tpusim::sched::{schedule, ScheduleSpec};
use tpusim::exec::cpu::CpuExecutor;
use tpusim::exec::gpu::{adapters_report, GpuExecutor};
use tpusim::exec::{check_inputs, Backend, Executor};
use tpusim::kernel::{PallasCall, ReduceOp};
use tpusim::model::{presets as model_presets, CostModel, Timed, Traffic};
use tpusim::sharded::{shard_map as rust_shard_map, ShardedArray};
use tpusim::trace::{Labels, TraceLayout};
use tpusim::{verify, DType, Error, HostArray, Mesh};

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

/// A Rust error as the Python exception of its kind, with the same message and its
/// details as attributes (`kind`, `site`, `detail`; `blocked`; `problems`).
fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    let (err, extra): (PyErr, Vec<(&str, Value)>) = match &e {
        Error::BadInput(_) => (BadInput::new_err(msg), vec![]),
        Error::NoAdapter(_) => (NoAdapter::new_err(msg), vec![]),
        Error::Gpu(_) => (GpuError::new_err(msg), vec![]),
        Error::Limit {
            requested, limit, ..
        } => (
            LimitError::new_err(msg),
            vec![("requested", js!(requested)), ("limit", js!(limit))],
        ),
        Error::Kernel(k) => (
            KernelError::new_err(msg),
            vec![
                ("kind", js!(json::kernel_kind(k))),
                ("site", json::site(&k.site)),
                ("detail", js!(k.detail)),
            ],
        ),
        Error::Deadlock(b) => (
            DeadlockError::new_err(msg),
            vec![("blocked", b.iter().map(json::blocked).collect())],
        ),
        Error::Exit(p) => (
            ExitError::new_err(msg),
            vec![("problems", p.iter().map(json::exit_problem).collect())],
        ),
        _ => (TpusimError::new_err(msg), vec![]),
    };
    if !extra.is_empty() {
        Python::attach(|py| {
            let v = err.value(py);
            for (k, val) in extra {
                if let Ok(o) = from_json(py, &val) {
                    let _ = v.setattr(k, o);
                }
            }
        });
    }
    err
}

trait OrPy<T> {
    fn py(self) -> PyResult<T>;
}

impl<T> OrPy<T> for tpusim::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// A JSON value as Python objects (through the `json` module).
fn from_json<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (v.to_string(),))
}

/// A numpy array (float32, int32, float16 or ml_dtypes' bfloat16, C-contiguous) as a
/// host array.
fn to_host(x: &Bound<'_, PyAny>) -> PyResult<HostArray> {
    if let Ok(a) = x.extract::<PyReadonlyArrayDyn<'_, f32>>() {
        let shape = a.shape().to_vec();
        return HostArray::from_f32(&shape, a.as_slice()?.to_vec()).py();
    }
    if let Ok(a) = x.extract::<PyReadonlyArrayDyn<'_, i32>>() {
        let shape = a.shape().to_vec();
        return HostArray::from_i32(&shape, a.as_slice()?.to_vec()).py();
    }
    if let Ok(a) = x.extract::<PyReadonlyArrayDyn<'_, half::f16>>() {
        let shape = a.shape().to_vec();
        return HostArray::from_f16(&shape, a.as_slice()?.to_vec()).py();
    }
    // Only a bfloat16 array is extracted as one: numpy's bf16 type exists only once
    // ml_dtypes (which defines it) is imported.
    let is_bf16 = x
        .getattr("dtype")
        .and_then(|d| d.getattr("name"))
        .is_ok_and(|n| n.to_string() == "bfloat16");
    if is_bf16 {
        let a = x.extract::<PyReadonlyArrayDyn<'_, half::bf16>>()?;
        let shape = a.shape().to_vec();
        return HostArray::from_bf16(&shape, a.as_slice()?.to_vec()).py();
    }
    let what = x
        .getattr("dtype")
        .map(|d| d.to_string())
        .unwrap_or_else(|_| x.get_type().to_string());
    Err(BadInput::new_err(format!(
        "bad input: arrays must be numpy float32, int32, float16 or bfloat16 (ml_dtypes), C-contiguous; got {what}"
    )))
}

/// A host array as a numpy array.
fn to_numpy<'py>(py: Python<'py>, a: &HostArray) -> PyResult<Bound<'py, PyAny>> {
    let flat = match a.dtype {
        DType::F32 => PyArray1::from_vec(py, a.as_f32().to_vec()).into_any(),
        DType::I32 => PyArray1::from_vec(py, a.as_i32().to_vec()).into_any(),
        DType::F16 => {
            let v: Vec<half::f16> = a.halves().into_iter().map(half::f16::from_bits).collect();
            PyArray1::from_vec(py, v).into_any()
        }
        DType::BF16 => {
            // numpy's bfloat16 is ml_dtypes'; without it there is no array to return.
            py.import("ml_dtypes").map_err(|_| {
                BadInput::new_err(
                    "bad input: bf16 results are ml_dtypes.bfloat16 arrays; install ml_dtypes (pip install ml_dtypes)",
                )
            })?;
            let v: Vec<half::bf16> = a.halves().into_iter().map(half::bf16::from_bits).collect();
            PyArray1::from_vec(py, v).into_any()
        }
    };
    flat.call_method1("reshape", (a.shape.clone(),))
}

fn per_device(inputs: &[Vec<Bound<'_, PyAny>>]) -> PyResult<Vec<Vec<HostArray>>> {
    inputs
        .iter()
        .map(|d| d.iter().map(to_host).collect())
        .collect()
}

fn to_numpy_all<'py>(
    py: Python<'py>,
    out: &[Vec<HostArray>],
) -> PyResult<Vec<Vec<Bound<'py, PyAny>>>> {
    out.iter()
        .map(|d| d.iter().map(|a| to_numpy(py, a)).collect())
        .collect()
}

thread_local! {
    /// One GPU executor per thread, opened on first use (buffers pooled across calls).
    static GPU: OnceCell<std::result::Result<Rc<GpuExecutor>, String>> = const { OnceCell::new() };
}

/// The executor for `backend` (`gpu` or `cpu`).
fn executor(backend: &str) -> PyResult<Rc<dyn Executor>> {
    match Backend::parse(backend).py()? {
        Backend::Cpu => Ok(Rc::new(CpuExecutor::new())),
        Backend::Gpu => GPU.with(|g| {
            match g.get_or_init(|| {
                GpuExecutor::from_env()
                    .map(Rc::new)
                    .map_err(|e| e.to_string())
            }) {
                Ok(e) => Ok(e.clone() as Rc<dyn Executor>),
                Err(m) => Err(NoAdapter::new_err(m.clone())),
            }
        }),
    }
}

/// Prepares `sched` on `exec`, uploads `inputs`, runs once, reads the outputs.
fn execute(
    exec: &dyn Executor,
    program: &Program,
    sched: &tpusim::ir::Schedule,
    inputs: &[Vec<HostArray>],
) -> tpusim::Result<Vec<Vec<HostArray>>> {
    check_inputs(program, inputs)?;
    exec.check(program)?;
    let mut run = exec.prepare(program, sched)?;
    run.upload(inputs)?;
    run.run(1)?;
    run.read_outputs()
}

/// A mesh of devices on named axes (row-major; the last axis varies fastest).
#[pyclass(module = "tpusim._native", name = "Mesh", frozen)]
#[derive(Clone)]
struct PyMesh {
    mesh: Mesh,
}

#[pymethods]
impl PyMesh {
    /// `Mesh(4)` (axis `x`), `Mesh(4, "y")`, or `Mesh(axes=[("x", 2), ("y", 4)])`.
    #[new]
    #[pyo3(signature = (devices=None, axis="x", *, axes=None))]
    fn new(
        devices: Option<usize>,
        axis: &str,
        axes: Option<Vec<(String, usize)>>,
    ) -> PyResult<Self> {
        let mesh = match (devices, axes) {
            (Some(n), None) => Mesh::new(n, axis),
            (None, Some(a)) => {
                let a: Vec<(&str, usize)> = a.iter().map(|(n, s)| (n.as_str(), *s)).collect();
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

/// A cost model: a preset with overrides (`link_gbps`, `link_latency_us`, `hbm_gbps`,
/// `dma_latency_us`, `vector_gelems`, `vmem_bytes`; 0 VMEM bytes: unlimited).
fn cost_model(preset: &str, overrides: Option<Vec<(String, f64)>>) -> tpusim::Result<CostModel> {
    let mut m = CostModel::preset(preset)?;
    let overrides = overrides.unwrap_or_default();
    for (k, v) in &overrides {
        match k.as_str() {
            "link_gbps" => m.link_bw = v * 1e9,
            "link_latency_us" => m.link_latency = v * 1e-6,
            "hbm_gbps" => m.hbm_bw = v * 1e9,
            "dma_latency_us" => m.dma_latency = v * 1e-6,
            "vector_gelems" => m.vector_rate = v * 1e9,
            "vmem_bytes" => m.vmem_bytes = (*v > 0.0).then_some(*v as u64),
            _ => {
                return Err(Error::bad_input(format!(
                "unknown model override `{k}` (link_gbps, link_latency_us, hbm_gbps, dma_latency_us, vector_gelems, vmem_bytes)"
            )))
            }
        }
    }
    if !overrides.is_empty() {
        m.name = format!("{} (overridden)", m.name);
    }
    m.validate()?;
    Ok(m)
}

fn schedules(
    p: usize,
    n: usize,
    seed: u64,
    replay: Option<&str>,
) -> tpusim::Result<Vec<ScheduleSpec>> {
    match replay {
        Some(s) => Ok(vec![ScheduleSpec::parse(s)?]),
        None if n == 0 => Err(Error::bad_input("schedules must be at least 1")),
        None => Ok(ScheduleSpec::check_set(p, n, seed)),
    }
}

/// Runs `program` on a modeled clock.
fn model_run(program: &Program, m: &CostModel) -> tpusim::Result<tpusim::model::TimedRun> {
    m.check_vmem(program)?;
    let mut timed = Timed::new(program, m.clone())?;
    schedule(program, &mut timed)?;
    Ok(timed.finish())
}

/// A Pallas kernel written in Python: its spec and the calls the stand-ins recorded on
/// every device and grid point, as a Rust `PallasCall` bound to its mesh.
#[pyclass(module = "tpusim._native", frozen)]
struct KernelCall {
    call: PallasCall,
    mesh: Mesh,
}

/// A Python kernel as a [`Collective`], so that `tpusim::trace::trace` serves it: its
/// call is fixed (recorded at one shape), its step-table layout is derived from its
/// allocations or borrowed from a shipped collective (`like`).
struct Recorded {
    call: PallasCall,
    shard: Vec<usize>,
    layout: Option<TraceLayout>,
}

impl Collective for Recorded {
    fn name(&self) -> &str {
        self.call.name()
    }
    fn summary(&self) -> &str {
        "a Pallas kernel written in Python"
    }
    fn call(&self, _mesh: &Mesh, _shard: &[usize], _dtype: DType) -> tpusim::Result<PallasCall> {
        Ok(self.call.clone())
    }
    fn reference(&self, _inputs: &[Vec<HostArray>]) -> tpusim::Result<Vec<Vec<HostArray>>> {
        Err(Error::bad_input(format!(
            "`{}` is a Python kernel: tpusim has no reference for it",
            self.call.name()
        )))
    }
    fn traffic(&self) -> Traffic {
        Traffic::SendRecv
    }
    fn default_shape(&self, _p: usize) -> Vec<usize> {
        self.shard.clone()
    }
    fn trace_layout(&self, _p: usize) -> Option<TraceLayout> {
        self.layout.clone()
    }
}

/// The step-table layout of shipped collective `like` for a kernel whose first input
/// has `shard` elements per device: whole-shard labels scale to the shard's size;
/// half-block and chunk labels need the shipped layout's own size.
fn borrowed_layout(like: &str, p: usize, shard: &[usize]) -> tpusim::Result<TraceLayout> {
    let c = Registry::builtin().by_name(like)?;
    let mut layout = c
        .trace_layout(p)
        .ok_or_else(|| Error::bad_input(format!("`{like}` has no step-table layout of its own")))?;
    let have: usize = shard.iter().product();
    let want: usize = layout.shape.iter().product();
    match layout.labels {
        Labels::Whole { elems } if have.is_multiple_of(elems) => {
            let f = have / elems;
            for col in &mut layout.columns {
                col.offset *= f;
                col.len *= f;
            }
            layout.labels = Labels::Whole { elems: have };
        }
        _ if have == want => {}
        _ => {
            return Err(Error::bad_input(format!(
                "the step table of `{like}` at P={p} labels single elements: trace the kernel with \
                 {want} elements per device (shape {:?}), not {have} (shape {shard:?})",
                layout.shape
            )))
        }
    }
    layout.shape = shard.to_vec();
    Ok(layout)
}

#[pymethods]
impl KernelCall {
    /// Builds the call. `inputs`/`outputs`: `(name, "any"|"vmem", shape, dtype)`;
    /// `scratch`: `(name, "vmem"|"dma"|"regular", shape, dtype)`; `recording`: JSON of
    /// `[device][grid point][op]`.
    #[new]
    #[pyo3(signature = (name, mesh, grid, inputs, outputs, scratch, collective_id, recording))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: &str,
        mesh: &PyMesh,
        grid: Vec<usize>,
        inputs: Vec<replay::Operand>,
        outputs: Vec<replay::Operand>,
        scratch: Vec<replay::Scratch>,
        collective_id: Option<u32>,
        recording: &str,
    ) -> PyResult<Self> {
        let spec = replay::grid_spec(&grid, &inputs, &outputs, &scratch, collective_id).py()?;
        let rec = replay::read_recording(recording).py()?;
        let points: usize = grid.iter().product();
        if rec.len() != mesh.mesh.size() || rec.iter().any(|d| d.len() != points) {
            return Err(BadInput::new_err(format!(
                "bad input: the recording of `{name}` does not cover {} devices x {points} grid points",
                mesh.mesh.size()
            )));
        }
        Ok(Self {
            call: replay::python_call(name, spec, rec),
            mesh: mesh.mesh.clone(),
        })
    }

    /// The kernel's name.
    #[getter]
    fn name(&self) -> &str {
        self.call.name()
    }

    /// Traces the kernel: `{"ops", "dmas", "errors": [kernel errors]}`.
    fn lower(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let (program, errors) = self.call.trace(&self.mesh).py()?;
        let v = js!({
            "ops": program.op_count(),
            "dmas": program.dmas.len(),
            "errors": errors.iter().map(json::kernel_error).collect::<Vec<_>>(),
        });
        Ok(from_json(py, &v)?.unbind())
    }

    /// Runs the kernel: `inputs[device][operand]` in, `outputs[device][operand]` out.
    #[pyo3(signature = (inputs, backend="gpu", schedule="eager"))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<Vec<Bound<'py, PyAny>>>,
        backend: &str,
        schedule: &str,
    ) -> PyResult<Vec<Vec<Bound<'py, PyAny>>>> {
        let inputs = per_device(&inputs)?;
        let spec = ScheduleSpec::parse(schedule).py()?;
        let exec = executor(backend)?;
        let program = self.call.lower(&self.mesh).py()?;
        let sched = tpusim::sched::schedule(&program, spec.policy().as_mut()).py()?;
        let out = execute(exec.as_ref(), &program, &sched, &inputs).py()?;
        to_numpy_all(py, &out)
    }

    /// The verifier over `schedules` schedules (or one, `replay`): the report as JSON.
    #[pyo3(signature = (schedules=200, seed=0, replay=None))]
    fn check(&self, schedules: usize, seed: u64, replay: Option<&str>) -> PyResult<String> {
        let specs = self::schedules(self.mesh.size(), schedules, seed, replay).py()?;
        let r = verify::check(&self.call, &self.mesh, &specs).py()?;
        Ok(json::report(&r).to_string())
    }

    /// The step table (lockstep schedule, symbolic values) as JSON. `like`: borrow the
    /// columns and labels of a shipped collective; otherwise they are derived from the
    /// kernel's allocations. `shard`: the first input's per-device shape.
    #[pyo3(signature = (shard, like=None))]
    fn trace(&self, shard: Vec<usize>, like: Option<&str>) -> PyResult<String> {
        let layout = like
            .map(|l| borrowed_layout(l, self.mesh.size(), &shard))
            .transpose()
            .py()?;
        let rec = Recorded {
            call: self.call.clone(),
            shard,
            layout,
        };
        let t = tpusim::trace::trace(&rec, &self.mesh).py()?;
        Ok(json::table(&t).to_string())
    }

    /// The cost model's time for the kernel. `traffic` (`all_reduce`, …) with the
    /// per-device `shard_bytes` adds nccl-tests' bandwidths; `timeline` the Chrome trace.
    #[pyo3(signature = (preset="v5e", overrides=None, traffic=None, shard_bytes=0, timeline=false))]
    fn model(
        &self,
        preset: &str,
        overrides: Option<Vec<(String, f64)>>,
        traffic: Option<&str>,
        shard_bytes: u64,
        timeline: bool,
    ) -> PyResult<String> {
        let m = cost_model(preset, overrides).py()?;
        let program = self.call.lower(&self.mesh).py()?;
        let run = model_run(&program, &m).py()?;
        let t = traffic.map(json::traffic).transpose().py()?;
        Ok(json::timed(
            self.call.name(),
            self.mesh.size(),
            &m,
            &run,
            t.map(|t| (t, shard_bytes)),
            timeline,
        )
        .to_string())
    }

    /// Times the kernel on `inputs`: the schedule is built once, the run prepared once,
    /// then `warmup` and `iters` iterations (one submission each on the GPU).
    #[pyo3(signature = (inputs, backend="gpu", iters=20, warmup=5, schedule="eager"))]
    fn bench(
        &self,
        inputs: Vec<Vec<Bound<'_, PyAny>>>,
        backend: &str,
        iters: usize,
        warmup: usize,
        schedule: &str,
    ) -> PyResult<String> {
        let inputs = per_device(&inputs)?;
        let exec = executor(backend)?;
        let t0 = Instant::now();
        let program = self.call.lower(&self.mesh).py()?;
        let sched = tpusim::sched::schedule(
            &program,
            ScheduleSpec::parse(schedule).py()?.policy().as_mut(),
        )
        .py()?;
        let plan = t0.elapsed().as_secs_f64();
        check_inputs(&program, &inputs).py()?;
        exec.check(&program).py()?;
        let mut run = exec.prepare(&program, &sched).py()?;
        run.upload(&inputs).py()?;
        if warmup > 0 {
            run.run(warmup).py()?;
        }
        let iters = iters.max(1);
        let secs = run.run(iters).py()?.as_secs_f64() / iters as f64;
        Ok(js!({
            "executor": exec.describe(),
            "plan_seconds": plan,
            "seconds": secs,
            "iters": iters,
            "data_ops": sched.ops.len(),
        })
        .to_string())
    }
}

/// The shipped collectives: `[{"name", "summary", "takes_op", "takes_perm", "apply_dims"}]`.
#[pyfunction]
fn collectives() -> String {
    let v: Vec<Value> = Registry::builtin()
        .iter()
        .map(|c| {
            let t = c.takes();
            js!({"name": c.name(), "summary": c.summary(), "takes_op": t.op,
                 "takes_perm": t.perm, "apply_dims": c.apply_dims()})
        })
        .collect();
    Value::Array(v).to_string()
}

/// The deliberately broken variants: `[{"collective", "name", "summary", "expect"}]`.
#[pyfunction]
fn variants() -> String {
    let v: Vec<Value> = all_variants()
        .iter()
        .map(|v| {
            js!({"collective": v.collective, "name": v.name, "summary": v.summary,
                 "expect": v.expect.to_string()})
        })
        .collect();
    Value::Array(v).to_string()
}

/// The cost-model presets: `[{"name", "source", figures...}]`.
#[pyfunction]
fn presets() -> String {
    let v: Vec<Value> = model_presets()
        .iter()
        .map(|p| {
            let m = (p.model)();
            js!({"name": p.name, "source": p.source, "link_bw": m.link_bw,
                 "link_latency": m.link_latency, "hbm_bw": m.hbm_bw,
                 "dma_latency": m.dma_latency, "vector_rate": m.vector_rate,
                 "vmem_bytes": m.vmem_bytes})
        })
        .collect();
    Value::Array(v).to_string()
}

/// The adapters wgpu sees and the chosen one's limits.
#[pyfunction]
fn adapters() -> PyResult<String> {
    adapters_report().py()
}

fn collective(
    name: &str,
    op: &str,
    perm: Option<Vec<(usize, usize)>>,
) -> tpusim::Result<Arc<dyn Collective>> {
    let opts = Options {
        op: ReduceOp::parse(op)?,
        perm,
    };
    Registry::builtin().get(name, &opts)
}

/// Runs shipped collective `name` on `inputs[device][operand]` under `schedule`: on a
/// multi-axis mesh a ring collective runs along `axis` (default `x`; `x,y` one ring
/// through both), a whole-mesh one (allreduce_2d) over every device.
#[pyfunction]
#[pyo3(signature = (name, mesh, inputs, op="sum", perm=None, backend="gpu", schedule="eager", axis=None))]
#[allow(clippy::too_many_arguments)]
fn collective_run<'py>(
    py: Python<'py>,
    name: &str,
    mesh: &PyMesh,
    inputs: Vec<Vec<Bound<'py, PyAny>>>,
    op: &str,
    perm: Option<Vec<(usize, usize)>>,
    backend: &str,
    schedule: &str,
    axis: Option<&str>,
) -> PyResult<Vec<Vec<Bound<'py, PyAny>>>> {
    let c = collective(name, op, perm).py()?;
    let place = Placement::of(c.as_ref(), mesh.mesh.clone(), axis).py()?;
    let mut inputs = per_device(&inputs)?;
    let first = inputs
        .first()
        .and_then(|d| d.first())
        .map(|a| (a.shape.clone(), a.dtype))
        .ok_or_else(|| BadInput::new_err("bad input: no inputs were given"))?;
    let exec = executor(backend)?;
    let call = c.call(&place.ring, &first.0, first.1).py()?;
    let program = place.lower(&call).py()?;
    // A kernel may view its input in another shape (psum_scatter's (P·R, C) as (P, R, C)).
    for dev in &mut inputs {
        for (a, &id) in dev.iter_mut().zip(&program.inputs) {
            let want = &program.layout.allocs[id].shape;
            if a.shape.iter().product::<usize>() == want.iter().product::<usize>() {
                a.shape = want.clone();
            }
        }
    }
    let sched = tpusim::sched::schedule(
        &program,
        ScheduleSpec::parse(schedule).py()?.policy().as_mut(),
    )
    .py()?;
    let out = execute(exec.as_ref(), &program, &sched, &inputs).py()?;
    to_numpy_all(py, &out)
}

/// `jax.shard_map` of shipped collective `name` on a global array: split along
/// `in_dim`, run, join along `out_dim` (defaults: the collective's, as in the seed).
#[pyfunction]
#[pyo3(signature = (name, mesh, x, in_dim=None, out_dim=None, op="sum", perm=None, backend="gpu"))]
#[allow(clippy::too_many_arguments)]
fn collective_shard_map<'py>(
    py: Python<'py>,
    name: &str,
    mesh: &PyMesh,
    x: &Bound<'py, PyAny>,
    in_dim: Option<usize>,
    out_dim: Option<usize>,
    op: &str,
    perm: Option<Vec<(usize, usize)>>,
    backend: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let c = collective(name, op, perm).py()?;
    let (din, dout) = c.apply_dims();
    let x = ShardedArray::shard(&to_host(x)?, &mesh.mesh, in_dim.unwrap_or(din)).py()?;
    let mut exec = Shared(executor(backend)?);
    let y = rust_shard_map(
        c.as_ref(),
        &mesh.mesh,
        &x,
        out_dim.unwrap_or(dout),
        &mut exec,
    )
    .py()?;
    to_numpy(py, &y.unshard().py()?)
}

/// A shared executor behind the `&mut` the library's helpers take.
struct Shared(Rc<dyn Executor>);

impl Executor for Shared {
    fn describe(&self) -> String {
        self.0.describe()
    }
    fn check(&self, program: &Program) -> tpusim::Result<()> {
        self.0.check(program)
    }
    fn prepare<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a tpusim::ir::Schedule,
    ) -> tpusim::Result<Box<dyn tpusim::exec::Prepared + 'a>> {
        self.0.prepare(program, schedule)
    }
    fn copy_bandwidth(&self, bytes: u64) -> tpusim::Result<Option<f64>> {
        self.0.copy_bandwidth(bytes)
    }
}

/// Shipped collective `name` (or its broken `variant`) at P devices: the verifier's
/// report as JSON.
#[pyfunction]
#[pyo3(signature = (name, devices=4, schedules=200, seed=0, variant_name=None, shape=None, replay=None))]
fn collective_check(
    name: &str,
    devices: usize,
    schedules: usize,
    seed: u64,
    variant_name: Option<&str>,
    shape: Option<Vec<usize>>,
    replay: Option<&str>,
) -> PyResult<String> {
    let mesh = Mesh::new(devices, "x").py()?;
    let c = Registry::builtin().by_name(name).py()?;
    let shape = shape.unwrap_or_else(|| c.default_shape(devices));
    let call = match variant_name {
        Some(v) => variant(name, v).py()?.call(&mesh, &shape, DType::F32),
        None => c.call(&mesh, &shape, DType::F32),
    }
    .py()?;
    let specs = self::schedules(devices, schedules, seed, replay).py()?;
    let r = verify::check(&call, &mesh, &specs).py()?;
    Ok(json::report(&r).to_string())
}

/// Shipped collective `name`'s step table at P devices, as JSON.
#[pyfunction]
#[pyo3(signature = (name, devices=4))]
fn collective_trace(name: &str, devices: usize) -> PyResult<String> {
    let mesh = Mesh::new(devices, "x").py()?;
    let c = Registry::builtin().by_name(name).py()?;
    let t = tpusim::trace::trace(c.as_ref(), &mesh).py()?;
    Ok(json::table(&t).to_string())
}

/// Shipped collective `name` on the cost model's clock, as JSON.
#[pyfunction]
#[pyo3(signature = (name, devices=4, shape=None, dtype="f32", op="sum", preset="v5e", overrides=None, timeline=false))]
#[allow(clippy::too_many_arguments)]
fn collective_model(
    name: &str,
    devices: usize,
    shape: Option<Vec<usize>>,
    dtype: &str,
    op: &str,
    preset: &str,
    overrides: Option<Vec<(String, f64)>>,
    timeline: bool,
) -> PyResult<String> {
    let mesh = Mesh::new(devices, "x").py()?;
    let c = collective(name, op, None).py()?;
    let dtype = DType::parse(dtype).py()?;
    let shape = shape.unwrap_or_else(|| c.default_shape(devices));
    let m = cost_model(preset, overrides).py()?;
    let program = c.call(&mesh, &shape, dtype).py()?.lower(&mesh).py()?;
    let run = model_run(&program, &m).py()?;
    let shard_bytes = (shape.iter().product::<usize>() * dtype.size()) as u64;
    Ok(json::timed(
        c.name(),
        devices,
        &m,
        &run,
        Some((c.traffic(), shard_bytes)),
        timeline,
    )
    .to_string())
}

/// `tpusim bench` for shipped collective `name`: the rows as JSON.
#[pyfunction]
#[pyo3(signature = (name, devices=4, min_bytes="4K", max_bytes="64K", factor=4, iters=20, warmup=5, checks=1, dtype="f32", backend="gpu", schedule="eager"))]
#[allow(clippy::too_many_arguments)]
fn collective_bench(
    name: &str,
    devices: usize,
    min_bytes: &str,
    max_bytes: &str,
    factor: u64,
    iters: usize,
    warmup: usize,
    checks: usize,
    dtype: &str,
    backend: &str,
    schedule: &str,
) -> PyResult<String> {
    let c = Registry::builtin().by_name(name).py()?;
    let cfg = BenchConfig {
        devices,
        min_bytes: bench::parse_size(min_bytes).py()?,
        max_bytes: bench::parse_size(max_bytes).py()?,
        factor,
        iters,
        warmup,
        checks,
        dtype: DType::parse(dtype).py()?,
        schedule: ScheduleSpec::parse(schedule).py()?,
    };
    let exec = executor(backend)?;
    let rows = bench::sweep(c.as_ref(), &cfg, exec.as_ref(), &mut |_| {}).py()?;
    Ok(Value::Array(rows.iter().map(|r| r.json()).collect()).to_string())
}

/// Deterministic random inputs for shipped collective `name` (what `tpusim run` uses):
/// `[device][operand]` numpy arrays.
#[pyfunction]
#[pyo3(signature = (name, mesh, shape, dtype="f32", seed=0))]
fn collective_inputs<'py>(
    py: Python<'py>,
    name: &str,
    mesh: &PyMesh,
    shape: Vec<usize>,
    dtype: &str,
    seed: u64,
) -> PyResult<Vec<Vec<Bound<'py, PyAny>>>> {
    let c = Registry::builtin().by_name(name).py()?;
    let program = c
        .call(&mesh.mesh, &shape, DType::parse(dtype).py()?)
        .py()?
        .lower(&mesh.mesh)
        .py()?;
    let inputs = random_inputs(&program, seed).py()?;
    to_numpy_all(py, &inputs)
}

/// Parses a permutation written `0:1,1:2`.
#[pyfunction]
fn parse_perm(s: &str) -> PyResult<Vec<(usize, usize)>> {
    Ppermute::parse_perm(s).py()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyMesh>()?;
    m.add_class::<KernelCall>()?;
    for (name, f) in [
        ("collectives", wrap_pyfunction!(collectives, m)?),
        ("variants", wrap_pyfunction!(variants, m)?),
        ("presets", wrap_pyfunction!(presets, m)?),
        ("adapters", wrap_pyfunction!(adapters, m)?),
        ("collective_run", wrap_pyfunction!(collective_run, m)?),
        (
            "collective_shard_map",
            wrap_pyfunction!(collective_shard_map, m)?,
        ),
        ("collective_check", wrap_pyfunction!(collective_check, m)?),
        ("collective_trace", wrap_pyfunction!(collective_trace, m)?),
        ("collective_model", wrap_pyfunction!(collective_model, m)?),
        ("collective_bench", wrap_pyfunction!(collective_bench, m)?),
        ("collective_inputs", wrap_pyfunction!(collective_inputs, m)?),
        ("parse_perm", wrap_pyfunction!(parse_perm, m)?),
    ] {
        m.add(name, f)?;
    }
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
