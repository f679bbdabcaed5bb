//! [`KernelCall`]: a Pallas kernel written in Python, its jaxpr evaluated by the
//! package's front end on every device and grid point (see `replay`), as a job of the
//! pipeline: run, verified, traced, modeled and timed like any kernel.

use crate::arrays::{per_device, to_numpy_all, to_py_data};
use crate::collectives::model_spec;
use crate::errors::{BadInput, OrPy};
use crate::executors::executor;
use crate::replay;
use crate::xla_call::CallBuffers;
use pyo3::prelude::*;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tpusim::collectives::Registry;
use tpusim::exec::{Coverage, Executor, Lent};
use tpusim::ir::Uninit;
use tpusim::model::Traffic;
use tpusim::run::Job;
use tpusim::run::Plan;
use tpusim::sched::ScheduleSpec;
use tpusim::trace::{Labels, TraceLayout};
use tpusim::{Error, HostArray};

use crate::PyMesh;

/// A Pallas kernel written in Python: its spec and the calls the front end recorded on
/// every device and grid point, as a job bound to its mesh.
#[pyclass(module = "tpusim._native", frozen)]
pub struct KernelCall {
    job: Job,
    /// The last plan run (its schedule spec) and what its schedule writes of the inputs
    /// and outputs: a repeated call costs its execution only.
    planned: Mutex<Option<Planned>>,
}

/// A plan under a schedule spec, with its coverage.
type Planned = (String, Arc<Plan>, Arc<Coverage>);

/// Where a round's Rust devices read and write the XLA devices' buffers (see
/// `KernelCall.run_into`).
#[derive(Clone, Debug)]
pub struct Wiring {
    /// The XLA device each Rust device reads its operands from.
    pub rows: Vec<usize>,
    /// The operand of each Rust input.
    pub inputs: Vec<usize>,
    /// The Rust device each XLA device gets its results from.
    pub out_rows: Vec<usize>,
    /// The Rust output of each result (`None`: one Python writes).
    pub results: Vec<Option<usize>>,
}

/// A kernel call bound to how it runs on a round's buffers: its wiring, backend and
/// schedule. The one place that decides where a run happens.
pub struct WiredCall {
    call: Py<KernelCall>,
    wiring: Wiring,
    backend: String,
    schedule: String,
}

impl WiredCall {
    /// `call` with its wiring and settings.
    pub fn new(call: Py<KernelCall>, wiring: Wiring, backend: &str, schedule: &str) -> Self {
        Self {
            call,
            wiring,
            backend: backend.to_string(),
            schedule: schedule.to_string(),
        }
    }

    /// Runs it on `buffers`, in place: on the GPU executor's own thread for the GPU (the
    /// caller without the GIL), on this thread for the CPU.
    pub fn run(self: &Arc<Self>, buffers: &CallBuffers) -> PyResult<()> {
        if !crate::executors::is_gpu(&self.backend)? {
            return self.run_here(buffers);
        }
        let (wired, lent) = (self.clone(), buffers.lend());
        crate::executors::on_gpu_thread(move || wired.run_here(&lent))
    }

    fn run_here(&self, buffers: &CallBuffers) -> PyResult<()> {
        self.call
            .get()
            .run_wired(buffers, &self.wiring, &self.backend, &self.schedule)
    }
}

impl KernelCall {
    /// The plan of this call under `schedule` and its coverage, made once and kept.
    fn plan_for(
        &self,
        schedule: &str,
        exec: &dyn tpusim::exec::Executor,
    ) -> PyResult<(Arc<Plan>, Arc<Coverage>)> {
        let uninit = Uninit::from_env().py()?;
        // The plan is kept for a schedule and what unwritten memory reads as.
        let key = format!("{schedule} {uninit}");
        let mut got = self.planned.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((s, p, c)) = got.as_ref() {
            if *s == key {
                return Ok((p.clone(), c.clone()));
            }
        }
        let job = self
            .job
            .clone()
            .with_schedule(ScheduleSpec::parse(schedule).py()?)
            .with_uninit(uninit);
        job.ensure_fits(Job::run_work(exec, false, false)).py()?;
        let plan = Arc::new(job.plan().py()?);
        let coverage = Arc::new(Coverage::of(&plan.program, &plan.schedule));
        *got = Some((key, plan.clone(), coverage.clone()));
        Ok((plan, coverage))
    }

    /// Runs the kernel on one round's buffers, in place, as `wiring` says, on this
    /// thread's executor (see [`WiredCall::run`]).
    fn run_wired(
        &self,
        buffers: &CallBuffers,
        wiring: &Wiring,
        backend: &str,
        schedule: &str,
    ) -> PyResult<()> {
        let Wiring {
            rows,
            inputs,
            out_rows,
            results,
        } = wiring;
        let exec = executor(backend)?;
        let (plan, coverage) = self.plan_for(schedule, &exec)?;
        let prog = &plan.program;
        if rows.len() != prog.devices
            || inputs.len() != prog.inputs.len()
            || out_rows.iter().any(|&r| r >= prog.devices)
            || results.iter().flatten().any(|&o| o >= prog.outputs.len())
        {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                "`{}`: {} rows of {} inputs for {} devices of {} inputs",
                prog.name,
                rows.len(),
                inputs.len(),
                prog.devices,
                prog.inputs.len()
            )));
        }
        exec.check(prog).py()?;
        let allocs = &prog.layout.allocs;
        let sized = |what: &str, bytes: usize, a: usize| -> PyResult<()> {
            let want = allocs[a].numel() * allocs[a].dtype.size();
            if bytes == want {
                return Ok(());
            }
            Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                "{what} `{}`: {bytes} bytes for {want}",
                allocs[a].name
            )))
        };
        // XLA's buffers the run can use in place: 4-byte elements, aligned to them.
        let words = |b: &[u8], a: usize| match allocs[a].dtype.size() {
            4 => bytemuck::try_cast_slice::<u8, u32>(b).is_ok(),
            _ => false,
        };
        let cpu = tpusim::exec::cpu::CpuExecutor::new();
        let mut lent = Vec::new();
        let mut copied_in = Vec::new();
        for (r, &x) in rows.iter().enumerate() {
            for (i, &k) in inputs.iter().enumerate() {
                let a = prog.inputs[i];
                let bytes = buffers.operand(x, k)?;
                sized("input", bytes.len(), a)?;
                if !exec.is_gpu() && words(bytes, a) {
                    lent.push(Lent::Input {
                        device: r,
                        alloc: a,
                        words: bytemuck::cast_slice(bytes),
                    });
                } else {
                    copied_in.push((r, i, bytes));
                }
            }
        }
        // Result `k` of XLA device `x` is lent as its Rust output, once; the others copy.
        let mut copied_out = Vec::new();
        for (x, &r) in out_rows.iter().enumerate() {
            for (k, o) in results.iter().enumerate() {
                let Some(o) = *o else { continue };
                let a = prog.outputs[o];
                let dst = buffers.result(x, k)?;
                sized("output", dst.len(), a)?;
                let taken = lent
                    .iter()
                    .any(|l| matches!(l, Lent::Output { .. }) && l.place() == (r, a));
                if !exec.is_gpu() && !taken && words(dst, a) {
                    lent.push(Lent::Output {
                        device: r,
                        alloc: a,
                        words: bytemuck::cast_slice_mut(dst),
                    });
                } else {
                    copied_out.push((r, o, dst));
                }
            }
        }
        let mut run = match exec.is_gpu() {
            true => exec.prepare(prog, &plan.schedule).py()?,
            false => cpu
                .prepare_lent(prog, &plan.schedule, &coverage, lent)
                .py()?,
        };
        // The rest in: in place where the run's memory is host memory, else staged.
        let mut staged: Vec<Vec<HostArray>> = vec![Vec::new(); prog.devices];
        for (r, i, bytes) in copied_in {
            let a = prog.inputs[i];
            let dtype = allocs[a].dtype;
            match run.input_words(r, i) {
                Some(w) => dtype.words_from_bytes(bytes, w),
                None => {
                    let mut w = vec![0; allocs[a].numel()];
                    dtype.words_from_bytes(bytes, &mut w);
                    staged[r].push(HostArray::from_words(dtype, &allocs[a].shape, w).py()?);
                }
            }
        }
        if staged.iter().any(|r| !r.is_empty()) {
            run.upload(&staged).py()?;
        }
        run.run(1).py()?;
        let read = match copied_out.is_empty() || run.output_words(0, 0).is_some() {
            true => None,
            false => Some(run.read_outputs().py()?),
        };
        for (r, o, dst) in copied_out {
            let a = prog.outputs[o];
            let words = match &read {
                Some(v) => &v[r][o].words[..],
                None => run
                    .output_words(r, o)
                    .expect("host memory, as its first output"),
            };
            allocs[a].dtype.bytes_from_words(words, dst);
        }
        Ok(())
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

#[pymethods]
impl KernelCall {
    /// Builds the call. `inputs`/`outputs`: `(name, "any"|"vmem", shape, dtype)`;
    /// `scratch`: `(name, "vmem"|"dma"|"regular", shape, dtype)`; `recording`: JSON of
    /// `[device][grid point][op]`; `cores`: TensorCores per chip (the mesh's last axis);
    /// `aliases`: `(input, output)` pairs of `input_output_aliases`.
    #[new]
    #[pyo3(signature = (name, mesh, grid, inputs, outputs, scratch, collective_id, recording, cores=1, aliases=Vec::new()))]
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
        cores: usize,
        aliases: Vec<(usize, usize)>,
    ) -> PyResult<Self> {
        let mut spec = replay::grid_spec(&grid, &inputs, &outputs, &scratch, collective_id)
            .py()?
            .cores(cores);
        for (i, o) in aliases {
            spec = spec.alias(i, o);
        }
        let rec = replay::read_recording(recording).py()?;
        let points = tpusim::array::numel(&grid).ok_or_else(|| {
            BadInput::new_err(format!(
                "bad input: `{name}` has a grid of {grid:?}: more grid points than can be counted"
            ))
        })?;
        if rec.len() != mesh.mesh.size() || rec.iter().any(|d| d.len() != points) {
            return Err(BadInput::new_err(format!(
                "bad input: the recording of `{name}` does not cover {} devices x {points} grid points",
                mesh.mesh.size()
            )));
        }
        let call = replay::python_call(name, spec, rec);
        Ok(Self {
            job: Job::call(call, mesh.mesh.clone()),
            planned: Mutex::new(None),
        })
    }

    /// The kernel's name.
    #[getter]
    fn name(&self) -> String {
        self.job.name()
    }

    /// Traces the kernel: `{"ops", "dmas", "errors": [kernel errors]}`.
    fn lower<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (program, errors) = self.job.trace_kernel().py()?;
        let v = serde_json::json!({
            "ops": program.op_count(),
            "dmas": program.dmas.len(),
            "errors": errors,
        });
        to_py_data(py, &v)
    }

    /// Runs the kernel: `inputs[device][operand]` in, `outputs[device][operand]` out.
    #[pyo3(signature = (inputs, backend="auto", schedule="eager"))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<Vec<Bound<'py, PyAny>>>,
        backend: &str,
        schedule: &str,
    ) -> PyResult<Vec<Vec<Bound<'py, PyAny>>>> {
        let inputs = per_device(&inputs)?;
        let mut exec = executor(backend)?;
        let (plan, _) = self.plan_for(schedule, &exec)?;
        let out = plan.execute(&mut exec, &inputs).py()?;
        to_numpy_all(py, out)
    }

    /// Runs the kernel on one round's buffers of the XLA custom call, in place: Rust
    /// device `r` reads operands `inputs` (one per Rust input) of XLA device `rows[r]`;
    /// XLA device `x` gets the outputs of Rust device `out_rows[x]`, its result `k` from
    /// Rust output `results[k]` (`None`: a result Python writes). On the CPU executor
    /// XLA's buffers of 4-byte types are the run's memory
    /// ([`tpusim::exec::cpu::CpuExecutor::prepare_lent`]);
    /// elsewhere they are copied in and out.
    #[pyo3(signature = (buffers, rows, inputs, out_rows, results, backend="auto", schedule="eager"))]
    #[allow(clippy::too_many_arguments)]
    fn run_into(
        slf: &Bound<'_, Self>,
        buffers: PyRef<'_, CallBuffers>,
        rows: Vec<usize>,
        inputs: Vec<usize>,
        out_rows: Vec<usize>,
        results: Vec<Option<usize>>,
        backend: &str,
        schedule: &str,
    ) -> PyResult<()> {
        let wiring = Wiring {
            rows,
            inputs,
            out_rows,
            results,
        };
        let wired = Arc::new(WiredCall::new(
            slf.clone().unbind(),
            wiring,
            backend,
            schedule,
        ));
        let buffers: &CallBuffers = &buffers;
        // The GIL let go: a run on the GPU thread may take it (to raise its error).
        slf.py().detach(|| wired.run(buffers))
    }

    /// The verifier over `schedules` schedules (or one, `replay`), the kernel run
    /// `repeat` times back to back: the report.
    #[pyo3(signature = (schedules=200, seed=0, replay=None, repeat=1))]
    fn check<'py>(
        &self,
        py: Python<'py>,
        schedules: usize,
        seed: u64,
        replay: Option<&str>,
        repeat: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let job = self.job.clone().repeat(repeat).py()?;
        to_py_data(py, &check_job(&job, schedules, seed, replay).py()?)
    }

    /// The verifier on the one schedule a run follows, when the kernel is small enough
    /// for a run to pay for it (`Job::vet`): the report, or None.
    fn vet<'py>(&self, py: Python<'py>, schedule: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        let job = self
            .job
            .clone()
            .with_schedule(ScheduleSpec::parse(schedule).py()?);
        job.vet().py()?.map(|r| to_py_data(py, &r)).transpose()
    }

    /// The step table (lockstep schedule, symbolic values). `like`: borrow the columns
    /// and labels of a shipped collective; otherwise they are derived from the kernel's
    /// allocations. `shard`: the first input's per-device shape.
    #[pyo3(signature = (shard, like=None))]
    fn trace<'py>(
        &self,
        py: Python<'py>,
        shard: Vec<usize>,
        like: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let p = self.job.place().mesh.size();
        let layout = like
            .map(|l| borrowed_layout(l, p, &shard))
            .transpose()
            .py()?;
        let job = self.job.clone().with_shape(&shard).with_layout(layout);
        to_py_data(py, &job.trace().py()?)
    }

    /// The cost model's time for the kernel (`preset` with `overrides` and `topology`).
    /// `traffic` (`all_reduce`, …) adds nccl-tests' bandwidths for the first input's
    /// size; `timeline` the Chrome trace.
    #[pyo3(signature = (preset="v5e", overrides=None, traffic=None, timeline=false, topology=None))]
    fn model<'py>(
        &self,
        py: Python<'py>,
        preset: &str,
        overrides: Option<Vec<(String, f64)>>,
        traffic: Option<&str>,
        timeline: bool,
        topology: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let m = model_spec(preset, overrides, topology)?.build().py()?;
        let t = traffic.map(Traffic::parse).transpose().py()?;
        let run = self.job.model(&m, t).py()?;
        crate::collectives::modeled(py, &run, &self.job.name(), timeline)
    }

    /// Times the kernel on `inputs`: the schedule is built once, the run prepared once,
    /// then `warmup` and `iters` iterations (one submission each on the GPU).
    #[pyo3(signature = (inputs, backend="auto", iters=20, warmup=5, schedule="eager"))]
    fn bench<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<Vec<Bound<'py, PyAny>>>,
        backend: &str,
        iters: usize,
        warmup: usize,
        schedule: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        use tpusim::exec::Executor;
        let inputs = per_device(&inputs)?;
        let exec = executor(backend)?;
        let job = self
            .job
            .clone()
            .with_schedule(ScheduleSpec::parse(schedule).py()?)
            .with_uninit(Uninit::from_env().py()?);
        let iters = iters.max(1);
        job.ensure_fits(tpusim::budget::Work::Bench {
            buffers: Job::buffers_on(&exec),
            gpu: exec.is_gpu(),
            iters: iters as u64,
            warmup: warmup as u64,
            checks: 0,
        })
        .py()?;
        let t0 = Instant::now();
        let plan = job.plan().py()?;
        let plan_seconds = t0.elapsed().as_secs_f64();
        tpusim::exec::check_inputs(&plan.program, &inputs).py()?;
        exec.check(&plan.program).py()?;
        let mut run = exec.prepare(&plan.program, &plan.schedule).py()?;
        run.upload(&inputs).py()?;
        if warmup > 0 {
            run.run(warmup).py()?;
        }
        let secs = run.run(iters).py()?.as_secs_f64() / iters as f64;
        let v = serde_json::json!({
            "executor": exec.describe(),
            "plan_seconds": plan_seconds,
            "seconds": secs,
            "iters": iters,
            "data_ops": plan.schedule.ops.len(),
        });
        to_py_data(py, &v)
    }
}

/// Refuses, before a front end records kernel `name` by calling its Python once per
/// device of `devices` and grid point of `grid` (and again as it measures the calls),
/// work whose calls would exceed the time limit (at `seconds_per_point` each: what the
/// front end measured so far) or whose records would not fit in memory (a fixed part
/// per call, plus `bytes_per_point`: the JSON of the ops measured calls recorded): a
/// `LimitError` with the estimate and the most grid points that fit.
#[pyfunction]
#[pyo3(signature = (name, devices, grid, seconds_per_point=None, bytes_per_point=None))]
pub fn ensure_recording_fits(
    name: &str,
    devices: usize,
    grid: Vec<usize>,
    seconds_per_point: Option<f64>,
    bytes_per_point: Option<f64>,
) -> PyResult<()> {
    tpusim::budget::ensure_recording_fits(name, devices, &grid, seconds_per_point, bytes_per_point)
        .py()
}

/// The verifier on `calls` run in order on every device (a program's `pallas_call`s, one
/// after the other), the whole list `repeat` times: one sequence, whose invocations share
/// the barrier semaphore of their `collective_id`.
#[pyfunction]
#[pyo3(signature = (calls, schedules=200, seed=0, replay=None, repeat=1))]
pub fn check_sequence<'py>(
    py: Python<'py>,
    calls: Vec<PyRef<'py, KernelCall>>,
    schedules: usize,
    seed: u64,
    replay: Option<&str>,
    repeat: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let mut calls = calls.iter();
    let first = calls
        .next()
        .ok_or_else(|| BadInput::new_err("bad input: a sequence needs at least one kernel"))?;
    let mut job = first.job.clone();
    for c in calls {
        job = job.then(c.job.clone()).py()?;
    }
    let job = job.repeat(repeat).py()?;
    to_py_data(py, &check_job(&job, schedules, seed, replay).py()?)
}

/// How a site names loop iterations `loops` (`((file, line), iteration)` each, outermost
/// first): the core's words, for the errors the front end raises itself.
#[pyfunction]
pub fn iteration_text(loops: Vec<((String, u32), u32)>) -> String {
    let loops: Vec<(replay::Loc, u32)> = loops
        .iter()
        .map(|((f, l), n)| (replay::Loc(tpusim::kernel::SourceLoc::intern(f, *l)), *n))
        .collect();
    replay::iteration(&loops).to_string()
}
