//! Shared test helpers: one GPU executor per test binary (a missing adapter fails).
#![allow(dead_code)]

use std::sync::{Mutex, MutexGuard, OnceLock};
use tpusim::device_sim::gpu::GpuExecutor;

static GPU: OnceLock<Mutex<GpuExecutor>> = OnceLock::new();

/// The shared GPU executor. Panics (failing the test) when no adapter is available:
/// in CI a missing adapter is a failure, never a silent pass.
pub fn gpu() -> MutexGuard<'static, GpuExecutor> {
    GPU.get_or_init(|| {
        let g =
            GpuExecutor::from_env().unwrap_or_else(|e| panic!("GPU tests need an adapter: {e}"));
        Mutex::new(g)
    })
    .lock()
    .unwrap_or_else(|p| p.into_inner())
}

use std::sync::Arc;
use tpusim::collectives::Collective;
use tpusim::device_sim::Executor;
use tpusim::kernel::PallasCall;
use tpusim::mesh::Placement;
use tpusim::run::{Checked, Job};
use tpusim::sched::ScheduleSpec;
use tpusim::{DType, HostArray, Mesh};

/// `call` on `mesh` run once on `inputs` (the pipeline's execute step).
pub fn simulate(
    call: &PallasCall,
    mesh: &Mesh,
    inputs: &[Vec<HostArray>],
    exec: &mut dyn Executor,
) -> tpusim::Result<Vec<Vec<HostArray>>> {
    Job::call(call.clone(), mesh.clone()).execute(exec, inputs)
}

/// The job of collective `c` on the 1-D `mesh` at `shape` and `dtype` under `spec`.
pub fn job(
    c: &Arc<dyn Collective>,
    mesh: &Mesh,
    shape: &[usize],
    dtype: DType,
    spec: ScheduleSpec,
) -> Job {
    Job::collective(c.clone(), Placement::whole(mesh.clone()))
        .with_shape(shape)
        .with_dtype(dtype)
        .with_schedule(spec)
}

/// Collective `c` on random data from `seed`, checked against its reference.
pub fn run_checked(
    c: &Arc<dyn Collective>,
    mesh: &Mesh,
    shape: &[usize],
    dtype: DType,
    exec: &mut dyn Executor,
    seed: u64,
) -> tpusim::Result<Checked> {
    job(c, mesh, shape, dtype, ScheduleSpec::Eager).run(exec, seed)
}

/// [`run_checked`] under schedule `spec`.
pub fn run_scheduled(
    c: &Arc<dyn Collective>,
    mesh: &Mesh,
    shape: &[usize],
    dtype: DType,
    exec: &mut dyn Executor,
    seed: u64,
    spec: ScheduleSpec,
) -> tpusim::Result<Checked> {
    job(c, mesh, shape, dtype, spec).run(exec, seed)
}

/// Ring collective `c` along `axis` of `mesh` (every group its own ring), checked.
#[allow(clippy::too_many_arguments)]
pub fn run_along(
    c: &Arc<dyn Collective>,
    mesh: &Mesh,
    axis: &str,
    shape: &[usize],
    dtype: DType,
    exec: &mut dyn Executor,
    seed: u64,
    spec: ScheduleSpec,
) -> tpusim::Result<Checked> {
    Job::collective(c.clone(), Placement::along(mesh.clone(), axis)?)
        .with_shape(shape)
        .with_dtype(dtype)
        .with_schedule(spec)
        .run(exec, seed)
}

/// The verifier on `call` traced on `mesh` under `specs`.
pub fn check(
    call: &PallasCall,
    mesh: &Mesh,
    specs: &[ScheduleSpec],
) -> tpusim::Result<tpusim::verify::Report> {
    Job::call(call.clone(), mesh.clone()).check(specs)
}

/// `call` on `mesh`, `k` invocations back to back, checked under `specs`.
pub fn check_repeated(
    call: &PallasCall,
    mesh: &Mesh,
    k: usize,
    specs: &[ScheduleSpec],
) -> tpusim::Result<tpusim::verify::Report> {
    Job::call(call.clone(), mesh.clone())
        .repeat(k)?
        .check(specs)
}

/// `call` on `mesh` lowered and scheduled under `spec`.
pub fn plan(
    call: &PallasCall,
    mesh: &Mesh,
    spec: ScheduleSpec,
) -> tpusim::Result<(tpusim::ir::Program, tpusim::ir::Schedule)> {
    let p = Job::call(call.clone(), mesh.clone())
        .with_schedule(spec)
        .plan()?;
    Ok((p.program, p.schedule))
}

/// Runs the `tpusim` binary with `args`: exit code, stdout, stderr.
pub fn tpusim(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tpusim"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Values of `dtype` that test a reduction's corners: NaNs, infinities, both zeros,
/// values that round (floats); extremes whose sums wrap (integers).
pub fn corners(dtype: DType) -> Vec<f64> {
    if dtype.is_float() {
        vec![
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -0.0,
            0.0,
            1e-3,
            65504.0,
            -1.5e9,
        ]
    } else {
        vec![i32::MAX as f64, i32::MIN as f64, -1.0, 0.0]
    }
}
