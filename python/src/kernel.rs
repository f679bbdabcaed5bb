//! [`KernelCall`]: a Pallas kernel written in Python, its jaxpr evaluated by the
//! package's front end on every device and grid point (see `replay`), as a job of the
//! pipeline: run, verified, traced, modeled and timed like any kernel.

use crate::args::Whole;
use crate::arrays::{per_device, to_numpy_all, to_py_data};
use crate::buffers::{CallBuffers, Wiring};
use crate::errors::{BadInput, OrPy};
use crate::executors::executor;
use crate::interrupts::watched;
use crate::jobs::{check_counts, check_job, model_spec, modeled};
use crate::replay;
use crate::steer::{PySteering, Shape};
use pyo3::prelude::*;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tpusim::collectives::Registry;
use tpusim::device_sim::cpu::CpuPlan;
use tpusim::device_sim::{Executor, Lent, Prepared};
use tpusim::ir::Uninit;
use tpusim::model::Traffic;
use tpusim::run::Job;
use tpusim::run::Plan;
use tpusim::sched::ScheduleSpec;
use tpusim::steer::Stop;
use tpusim::trace::{Labels, TraceLayout};
use tpusim::{Error, HostArray};

use crate::mesh::PyMesh;

/// A Pallas kernel written in Python: its spec and the calls the front end recorded on
/// every device and grid point, as a job bound to its mesh.
#[pyclass(module = "tpusim._native", frozen)]
pub struct KernelCall {
    job: Job,
    /// The last plan run (its schedule spec) and what its schedule writes of the inputs
    /// and outputs: a repeated call costs its execution only.
    planned: Mutex<Option<Planned>>,
    /// A kernel traced while it runs: planned at every call, from its inputs.
    steering: Option<Arc<PySteering>>,
    /// Its last plans (most recent first), each with the reads that steered it: a call
    /// whose reads find the same runs one of them (see [`KernelCall::run_steered`]).
    steered: Mutex<Vec<SavedSteer>>,
    /// How many of them are kept: none for a kernel whose trace gives Python more than
    /// its program (texts it prints, results it keeps in SMEM), which each call's trace
    /// must give anew.
    saved_steers: usize,
}

/// A plan traced while it ran, under a schedule spec, and the reads that steered it.
#[derive(Clone)]
struct SavedSteer {
    schedule: String,
    plan: Arc<Plan>,
    stops: Arc<Vec<Stop>>,
}

/// How many plans of a kernel traced while it runs are kept.
const SAVED_STEERS: usize = 4;

/// A plan under a schedule spec, with what the CPU executor works out once for it and
/// the seconds both took to make.
type Planned = (String, Arc<Plan>, Arc<CpuPlan>, f64);

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
    /// `r`'s error as a Python exception (one Python raised while tracing, as it was).
    fn or_py<T>(&self, r: tpusim::Result<T>) -> PyResult<T> {
        r.map_err(|e| match &self.steering {
            Some(s) => s.py_err(e),
            None => crate::errors::to_py(e),
        })
    }

    /// The plan of this call under `schedule` and the CPU executor's plan of it, made
    /// once and kept (a kernel traced while it runs: made anew from the inputs set last).
    fn plan_for(
        &self,
        schedule: &str,
        exec: &dyn tpusim::device_sim::Executor,
    ) -> PyResult<(Arc<Plan>, Arc<CpuPlan>)> {
        let uninit = Uninit::from_env().py()?;
        if self.steering.is_some() {
            let job = self
                .job
                .clone()
                .with_schedule(ScheduleSpec::parse(schedule).py()?)
                .with_uninit(uninit);
            let plan = Arc::new(self.or_py(job.plan())?);
            let cpu_plan = Arc::new(CpuPlan::of(&plan.program, &plan.schedule));
            return Ok((plan, cpu_plan));
        }
        // The plan is kept for a schedule and what unwritten memory reads as.
        let key = format!("{schedule} {uninit}");
        let mut got = self.planned.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((s, p, c, _)) = got.as_ref() {
            if *s == key {
                return Ok((p.clone(), c.clone()));
            }
        }
        let job = self
            .job
            .clone()
            .with_schedule(ScheduleSpec::parse(schedule).py()?)
            .with_uninit(uninit);
        let t0 = std::time::Instant::now();
        let mut lap = tpusim::device_sim::Laps::new();
        // The budget and the plan with the kernel traced once.
        let (_, plan) = job.plan_fitting(Job::run_work(exec, false, false)).py()?;
        lap.note("budget, lowering and schedule");
        let plan = Arc::new(plan);
        let cpu_plan = Arc::new(CpuPlan::of(&plan.program, &plan.schedule));
        lap.note("CpuPlan::of");
        lap.report(&format!("plan of `{}`", plan.program.name));
        let seconds = t0.elapsed().as_secs_f64();
        *got = Some((key, plan.clone(), cpu_plan.clone(), seconds));
        Ok((plan, cpu_plan))
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
        if let Some(s) = &self.steering {
            return self.run_steered(s, buffers, wiring, exec, schedule);
        }
        let (plan, cpu_plan) = self.plan_for(schedule, &exec)?;
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
        // 16-bit ones the plan lets regions read or write as stored (no widening pass).
        let halves = |b: &[u8], r: usize, a: usize| {
            allocs[a].dtype.size() == 2
                && cfg!(target_endian = "little")
                && bytemuck::try_cast_slice::<u8, u16>(b).is_ok()
                && cpu_plan.halves(r, a)
        };
        let cpu = tpusim::device_sim::cpu::CpuExecutor::new();
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
                } else if !exec.is_gpu() && halves(bytes, r, a) {
                    lent.push(Lent::InputHalves {
                        device: r,
                        alloc: a,
                        halves: bytemuck::cast_slice(bytes),
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
                crate::huge::advise(dst);
                let taken = lent.iter().any(|l| {
                    matches!(l, Lent::Output { .. } | Lent::OutputHalves { .. })
                        && l.place() == (r, a)
                });
                if !exec.is_gpu() && !taken && words(dst, a) {
                    lent.push(Lent::Output {
                        device: r,
                        alloc: a,
                        words: bytemuck::cast_slice_mut(dst),
                    });
                } else if !exec.is_gpu() && !taken && halves(dst, r, a) {
                    lent.push(Lent::OutputHalves {
                        device: r,
                        alloc: a,
                        halves: bytemuck::cast_slice_mut(dst),
                    });
                } else {
                    copied_out.push((r, o, dst));
                }
            }
        }
        if exec.is_gpu() {
            // The GPU's run is kept for the next call of this plan.
            return crate::kept_runs::with_run(&exec, &plan, |run| {
                exchange(run, prog, copied_in, copied_out)
            });
        }
        let mut lap = tpusim::device_sim::Laps::new();
        let mut run = cpu
            .prepare_lent(prog, &plan.schedule, &cpu_plan, lent)
            .py()?;
        lap.note("prepare");
        exchange(run.as_mut(), prog, copied_in, copied_out)?;
        lap.note("run and copies");
        drop(run);
        lap.note("buffers kept");
        lap.report(&format!("run of `{}`", prog.name));
        Ok(())
    }
}

/// Writes the inputs `copied_in` (`(device, operand, bytes)`) not lent to `run`, runs
/// it once and reads the outputs `copied_out` not lent: in place where the run's memory
/// is host memory, else one operand at a time at its own width (the GPU), else staged
/// as host arrays.
fn exchange(
    run: &mut dyn Prepared,
    prog: &tpusim::ir::Program,
    copied_in: Vec<(usize, usize, &[u8])>,
    mut copied_out: Vec<(usize, usize, &mut [u8])>,
) -> PyResult<()> {
    let allocs = &prog.layout.allocs;
    let mut staged: Vec<Vec<HostArray>> = vec![Vec::new(); prog.devices];
    for (r, i, bytes) in copied_in {
        let a = prog.inputs[i];
        let dtype = allocs[a].dtype;
        if let Some(w) = run.input_words(r, i) {
            dtype.words_from_bytes(bytes, w);
        } else if !run.write_input_bytes(r, i, bytes).py()? {
            let mut w = vec![0; allocs[a].numel()];
            dtype.words_from_bytes(bytes, &mut w);
            staged[r].push(HostArray::from_words(dtype, &allocs[a].shape, w).py()?);
        }
    }
    if staged.iter().any(|r| !r.is_empty()) {
        run.upload(&staged).py()?;
    }
    run.run(1).py()?;
    let Some(&(r0, o0, _)) = copied_out.first() else {
        return Ok(());
    };
    // Host memory when the first output copied out is readable as words.
    let host = run.output_words(r0, o0).is_some();
    if !host && run.read_outputs_bytes(&mut copied_out).py()? {
        return Ok(());
    }
    let read = match host {
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

impl KernelCall {
    /// A kernel traced while it runs, on one round's buffers: a saved plan whose reads
    /// find, on these inputs, what they found when it was traced (run in pieces cut at
    /// the reads, each checked before the next piece runs), else a plan traced anew on
    /// them and saved. Operands are copied in and results out.
    fn run_steered(
        &self,
        steering: &PySteering,
        buffers: &CallBuffers,
        wiring: &Wiring,
        mut exec: crate::executors::Shared,
        schedule: &str,
    ) -> PyResult<()> {
        let inputs = self.inputs_of(buffers, wiring)?;
        steering.set_inputs(inputs.clone());
        let saved = match self.saved_steers {
            0 => Vec::new(),
            _ => self
                .steered
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        };
        let mut got = None;
        for sv in saved.iter().filter(|sv| sv.schedule == schedule) {
            if let Some(out) = replay_steered(&exec, sv, &inputs).py()? {
                got = Some((sv.plan.clone(), out));
                break;
            }
        }
        let (plan, outputs) = match got {
            Some(found) => found,
            None => {
                let job = self
                    .job
                    .clone()
                    .with_schedule(ScheduleSpec::parse(schedule).py()?);
                let (plan, stops) = self.or_py(job.plan_steered())?;
                let plan = Arc::new(plan);
                let outputs = plan.execute(&mut exec, &inputs).py()?;
                let mut kept = self.steered.lock().unwrap_or_else(|e| e.into_inner());
                kept.insert(
                    0,
                    SavedSteer {
                        schedule: schedule.to_string(),
                        plan: plan.clone(),
                        stops: Arc::new(stops),
                    },
                );
                kept.truncate(self.saved_steers);
                (plan, outputs)
            }
        };
        let prog = &plan.program;
        for (x, &r) in wiring.out_rows.iter().enumerate() {
            for (k, o) in wiring.results.iter().enumerate() {
                let Some(o) = *o else { continue };
                let a = prog.outputs[o];
                prog.layout.allocs[a]
                    .dtype
                    .bytes_from_words(&outputs[r][o].words, buffers.result(x, k)?);
            }
        }
        Ok(())
    }

    /// Every Rust device's inputs in one round's buffers, as `wiring` reads them (a
    /// kernel traced while it runs steers by them).
    fn inputs_of(&self, buffers: &CallBuffers, wiring: &Wiring) -> PyResult<Vec<Vec<HostArray>>> {
        let specs = self.steering.as_ref().map_or(&[][..], |s| s.input_specs());
        wiring
            .rows
            .iter()
            .map(|&x| {
                wiring
                    .inputs
                    .iter()
                    .zip(specs)
                    .map(|(&k, (_, _, shape, dtype))| {
                        let dtype = tpusim::DType::parse(dtype).py()?;
                        let bytes = buffers.operand(x, k)?;
                        let mut w = vec![0; shape.iter().product()];
                        if bytes.len() != w.len() * dtype.size() {
                            return Err(BadInput::new_err(format!(
                                "bad input: an operand of {} bytes for {shape:?} {dtype}",
                                bytes.len()
                            )));
                        }
                        dtype.words_from_bytes(bytes, &mut w);
                        HostArray::from_words(dtype, shape, w).py()
                    })
                    .collect()
            })
            .collect()
    }
}

/// `sv` on `inputs`, in pieces cut at its reads: its outputs, or `None` at the first read
/// that finds something else than when it was traced.
fn replay_steered(
    exec: &dyn Executor,
    sv: &SavedSteer,
    inputs: &[Vec<HostArray>],
) -> tpusim::Result<Option<Vec<Vec<HostArray>>>> {
    let (program, schedule) = (&sv.plan.program, &sv.plan.schedule);
    tpusim::device_sim::check_inputs(program, inputs)?;
    exec.check(program)?;
    // Stops come in schedule order; several may stand at one point (or before the first
    // op, or after the last): one cut each point inside the schedule.
    let n = schedule.ops.len();
    let mut cuts: Vec<usize> = sv
        .stops
        .iter()
        .map(|s| s.at)
        .filter(|&a| a > 0 && a < n)
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let ends: Vec<usize> = cuts.iter().copied().chain(std::iter::once(n)).collect();
    let mut run = exec.prepare_pieces(program, schedule, &cuts)?;
    run.upload(inputs)?;
    let mut next = 0;
    for stop in sv.stops.iter() {
        while next < ends.len() && ends[next] <= stop.at {
            run.run_piece(next)?;
            next += 1;
        }
        if !stop.holds(run.as_mut())? {
            return Ok(None);
        }
    }
    for k in next..ends.len() {
        run.run_piece(k)?;
    }
    run.read_outputs().map(Some)
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
    /// `scratch`: `(name, "vmem"|"dma"|"regular", shape, dtype)`; `recording`: lists of
    /// `[device][grid point][op]`, each op a dict (`replay::Op`); `cores`: TensorCores per chip (the mesh's last axis);
    /// `aliases`: `(input, output)` pairs of `input_output_aliases`; `constants`: numpy
    /// arrays the recording's `const` ops name by position.
    #[new]
    #[pyo3(signature = (name, mesh, grid, inputs, outputs, scratch, collective_id, recording, cores=1, aliases=Vec::new(), constants=Vec::new(), vmem_limit=None, parallel=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: &str,
        mesh: &PyMesh,
        grid: Vec<usize>,
        inputs: Vec<replay::Operand>,
        outputs: Vec<replay::Operand>,
        scratch: Vec<replay::Scratch>,
        collective_id: Option<u32>,
        recording: &Bound<'_, PyAny>,
        cores: usize,
        aliases: Vec<(usize, usize)>,
        constants: Vec<Bound<'_, PyAny>>,
        vmem_limit: Option<u64>,
        parallel: bool,
    ) -> PyResult<Self> {
        let spec = Shape {
            name: name.to_string(),
            grid: grid.clone(),
            inputs,
            outputs,
            collective_id,
            cores,
            aliases,
            vmem_limit,
            parallel,
        }
        .spec(&scratch)
        .py()?;
        let rec = crate::records::read_recording(recording).py()?;
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
        let constants = constants
            .iter()
            .map(|a| Ok(crate::arrays::to_host(a)?.words.into()))
            .collect::<PyResult<Vec<_>>>()?;
        let call = replay::python_call(name, spec, Arc::new(rec), constants);
        Ok(Self {
            job: Job::call(call, mesh.mesh.clone()),
            planned: Mutex::new(None),
            steering: None,
            steered: Mutex::new(Vec::new()),
            saved_steers: 0,
        })
    }

    /// A kernel traced while it runs (`tpusim/_steer.py`): `plan`, a `_plan.Plan` made
    /// with `steered=True`, gives its tracers; the rest is as for the constructor (the
    /// scratch comes with each trace, which may add to it). `replayable`: a call may run
    /// a plan traced before whose reads find the same on its inputs (false where the
    /// trace gives Python what the program does not hold: printed texts, SMEM results).
    #[staticmethod]
    #[pyo3(signature = (name, mesh, grid, inputs, outputs, collective_id, cores, aliases, plan, replayable=true, vmem_limit=None, parallel=false))]
    #[allow(clippy::too_many_arguments)]
    fn steered(
        name: &str,
        mesh: &PyMesh,
        grid: Vec<usize>,
        inputs: Vec<replay::Operand>,
        outputs: Vec<replay::Operand>,
        collective_id: Option<u32>,
        cores: usize,
        aliases: Vec<(usize, usize)>,
        plan: Py<PyAny>,
        replayable: bool,
        vmem_limit: Option<u64>,
        parallel: bool,
    ) -> PyResult<Self> {
        let shape = Shape {
            name: name.to_string(),
            grid,
            inputs,
            outputs,
            collective_id,
            cores,
            aliases,
            vmem_limit,
            parallel,
        };
        shape.spec(&[]).py()?; // a spec tpusim takes, before any call
        let (first, dtype) = match shape.inputs.first() {
            Some((_, _, s, d)) => (s.clone(), tpusim::DType::parse(d).py()?),
            None => (vec![1], tpusim::DType::F32),
        };
        let steering = Arc::new(PySteering::new(plan, shape));
        Ok(Self {
            job: Job::steered(steering.clone(), mesh.mesh.clone(), &first, dtype),
            planned: Mutex::new(None),
            steering: Some(steering),
            steered: Mutex::new(Vec::new()),
            saved_steers: if replayable { SAVED_STEERS } else { 0 },
        })
    }

    /// The kernel's name.
    #[getter]
    fn name(&self) -> String {
        self.job.name()
    }

    /// Seconds the plan it runs last took to make here (the budget, lowering, schedule
    /// and the CPU executor's plan of it: the native part of a first call's planning),
    /// or None before it made one (or for a kernel traced while it runs).
    #[getter]
    fn planning_seconds(&self) -> Option<f64> {
        let got = self.planned.lock().unwrap_or_else(|e| e.into_inner());
        got.as_ref().map(|(_, _, _, s)| *s)
    }

    /// For the tests and benchmarks: a fresh plan of this call under `schedule` on the
    /// CPU executor (nothing kept), as `(digest, seconds)`: `digest` hashes the `Debug`
    /// text of its program, schedule and CPU plan, so two builds that plan alike give the
    /// same; `seconds` the native plan's (budget, lowering, schedule, `CpuPlan::of`).
    #[pyo3(signature = (schedule="eager"))]
    fn _plan_digest(&self, py: Python<'_>, schedule: &str) -> PyResult<(String, f64)> {
        let job = self
            .job
            .clone()
            .with_schedule(ScheduleSpec::parse(schedule).py()?)
            .with_uninit(Uninit::from_env().py()?);
        let exec = tpusim::device_sim::cpu::CpuExecutor::new();
        py.detach(|| {
            let t0 = Instant::now();
            let (_, plan) = job.plan_fitting(Job::run_work(&exec, false, false)).py()?;
            let cpu_plan = CpuPlan::of(&plan.program, &plan.schedule);
            let seconds = t0.elapsed().as_secs_f64();
            let mut h = DebugHash(std::hash::DefaultHasher::new());
            use std::fmt::Write;
            write!(h, "{:?}{:?}{:?}", plan.program, plan.schedule, cpu_plan)
                .expect("hashing never fails");
            Ok((format!("{:016x}", std::hash::Hasher::finish(&h.0)), seconds))
        })
    }

    /// Traces the kernel: `{"ops", "dmas", "errors": [kernel errors]}`.
    fn lower<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (program, errors) = watched(|| self.job.trace_kernel()).py()?;
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
        if let Some(s) = &self.steering {
            s.set_inputs(inputs.clone());
        }
        let out = watched(|| -> PyResult<_> {
            let (plan, _) = self.plan_for(schedule, &exec)?;
            plan.execute(&mut exec, &inputs).py()
        })?;
        to_numpy_all(py, out)
    }

    /// Runs the kernel on one round's buffers of the XLA custom call, in place: Rust
    /// device `r` reads operands `inputs` (one per Rust input) of XLA device `rows[r]`;
    /// XLA device `x` gets the outputs of Rust device `out_rows[x]`, its result `k` from
    /// Rust output `results[k]` (`None`: a result Python writes). On the CPU executor
    /// XLA's buffers of 4-byte types are the run's memory
    /// ([`tpusim::device_sim::cpu::CpuExecutor::prepare_lent`]);
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
        slf.py().detach(|| watched(|| wired.run(buffers)))
    }

    /// The verifier over `schedules` schedules (or one, `replay`), the kernel run
    /// `repeat` times back to back: the report.
    #[pyo3(signature = (schedules=Whole::of(200), seed=Whole::of(0), replay=None, repeat=Whole::of(1)))]
    fn check<'py>(
        &self,
        py: Python<'py>,
        schedules: Whole,
        seed: Whole,
        replay: Option<&str>,
        repeat: Whole,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (schedules, seed) = check_counts(&schedules, &seed)?;
        let repeat = repeat.check_usize(&tpusim::args::REPEAT, "repeat")?;
        let job = self.job.clone().repeat(repeat).py()?;
        // A kernel traced while it runs calls back into Python: it keeps the GIL.
        let report = match self.steering {
            Some(_) => watched(|| check_job(&job, schedules, seed, replay)),
            None => py.detach(|| watched(|| check_job(&job, schedules, seed, replay))),
        };
        to_py_data(py, &self.or_py(report)?)
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
        let table = match self.steering {
            Some(_) => watched(|| job.trace()),
            None => py.detach(|| watched(|| job.trace())),
        };
        to_py_data(py, &self.or_py(table)?)
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
        let run = match self.steering {
            Some(_) => watched(|| self.job.model(&m, t)),
            None => py.detach(|| watched(|| self.job.model(&m, t))),
        };
        let run = self.or_py(run)?;
        modeled(py, &run, &self.job.name(), timeline)
    }

    /// Times the kernel on `inputs`: the schedule is built once, the run prepared once,
    /// then `warmup` and `iters` iterations (one submission each on the GPU).
    #[pyo3(signature = (inputs, backend="auto", iters=Whole::of(20), warmup=Whole::of(5), schedule="eager"))]
    fn bench<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<Vec<Bound<'py, PyAny>>>,
        backend: &str,
        iters: Whole,
        warmup: Whole,
        schedule: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        use tpusim::device_sim::Executor;
        let iters = iters.check_usize(&tpusim::args::ITERS, "iters")?;
        let warmup = warmup.check_usize(&tpusim::args::WARMUP, "warmup")?;
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
            chunked: false,
        })
        .py()?;
        let (plan, plan_seconds, secs) = watched(|| -> tpusim::Result<_> {
            let t0 = Instant::now();
            let plan = job.plan()?;
            let plan_seconds = t0.elapsed().as_secs_f64();
            tpusim::device_sim::check_inputs(&plan.program, &inputs)?;
            exec.check(&plan.program)?;
            let mut run = exec.prepare(&plan.program, &plan.schedule)?;
            run.upload(&inputs)?;
            if warmup > 0 {
                run.run(warmup)?;
            }
            let secs = run.run(iters)?.as_secs_f64() / iters as f64;
            drop(run);
            Ok((plan, plan_seconds, secs))
        })
        .py()?;
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

/// The verifier on `calls` run in order on every device (a program's `pallas_call`s, one
/// after the other), the whole list `repeat` times: one sequence, whose invocations share
/// the barrier semaphore of their `collective_id`.
#[pyfunction]
#[pyo3(signature = (calls, schedules=Whole::of(200), seed=Whole::of(0), replay=None, repeat=Whole::of(1)))]
pub fn check_sequence<'py>(
    py: Python<'py>,
    calls: Vec<PyRef<'py, KernelCall>>,
    schedules: Whole,
    seed: Whole,
    replay: Option<&str>,
    repeat: Whole,
) -> PyResult<Bound<'py, PyAny>> {
    let (schedules, seed) = check_counts(&schedules, &seed)?;
    let repeat = repeat.check_usize(&tpusim::args::REPEAT, "repeat")?;
    let mut calls = calls.iter();
    let first = calls
        .next()
        .ok_or_else(|| BadInput::new_err("bad input: a sequence needs at least one kernel"))?;
    let mut job = first.job.clone();
    for c in calls {
        job = job.then(c.job.clone()).py()?;
    }
    let job = job.repeat(repeat).py()?;
    let report = py
        .detach(|| watched(|| check_job(&job, schedules, seed, replay)))
        .py()?;
    to_py_data(py, &report)
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

/// Hashes the text written to it (a `Debug` text too large to hold).
struct DebugHash(std::hash::DefaultHasher);

impl std::fmt::Write for DebugHash {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        std::hash::Hasher::write(&mut self.0, s.as_bytes());
        Ok(())
    }
}
