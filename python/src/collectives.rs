//! The shipped collectives for Python: run on numpy arrays, `shard_map` on a global
//! array, verified, traced, modeled and benched, each a job of the pipeline placed on
//! a mesh as the command line places it (`axis` on a multi-axis mesh).

use crate::args::{shape as shape_of, Whole};
use crate::arrays::{per_device, to_host, to_numpy, to_numpy_all, to_py_data};
use crate::errors::{BadInput, OrPy};
use crate::executors::executor;
use crate::interrupts::watched;
use crate::jobs::{check_counts, check_job, model_spec, modeled};
use crate::mesh::PyMesh;
use pyo3::prelude::*;
use serde_json::json;
use std::sync::Arc;
use tpusim::bench::{self, BenchConfig};
use tpusim::collectives::variants::variants as all_variants;
use tpusim::collectives::{Collective, Options, Ppermute, Registry};
use tpusim::ir::Uninit;
use tpusim::kernel::ReduceOp;
use tpusim::mesh::sharded::ShardedArray;
use tpusim::mesh::{Mesh, Placement};
use tpusim::model::presets as model_presets;
use tpusim::run::{random_inputs, Job};
use tpusim::sched::ScheduleSpec;
use tpusim::{args, DType};

/// Checks cost-model preset `name` (as `tpusim run --model NAME` does before it runs).
#[pyfunction]
pub fn check_preset(name: &str) -> PyResult<()> {
    model_spec(name, None, None)?.build().py().map(drop)
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

/// The job of shipped collective `name` (or its broken `variant`) with `op`/`perm` on
/// `mesh` (or a ring of `devices`), along `axis` on a multi-axis mesh.
#[allow(clippy::too_many_arguments)]
fn job(
    name: &str,
    op: &str,
    perm: Option<Vec<(usize, usize)>>,
    variant: Option<&str>,
    mesh: Option<&PyMesh>,
    devices: usize,
    axis: Option<&str>,
) -> tpusim::Result<Job> {
    let reg = Registry::builtin();
    let opts = Options {
        op: ReduceOp::parse(op)?,
        perm,
    };
    let c = reg.get(name, &opts)?;
    let mesh = match mesh {
        Some(m) => m.mesh.clone(),
        None => Mesh::new(devices, "x")?,
    };
    let place = Placement::of(c.span(), c.name(), mesh, axis)?;
    Ok(Job::named(&reg, name, &opts, variant, place)?.with_uninit(Uninit::from_env()?))
}

/// The shipped collectives: `[{"name", "summary", "takes_op", "takes_perm", "apply_dims"}]`.
#[pyfunction]
pub fn collectives(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let v: Vec<serde_json::Value> = Registry::builtin()
        .iter()
        .map(|c| {
            let t = c.takes();
            json!({"name": c.name(), "summary": c.summary(), "takes_op": t.op,
                 "takes_perm": t.perm, "apply_dims": c.apply_dims()})
        })
        .collect();
    to_py_data(py, &v)
}

/// The deliberately broken variants: `[{"collective", "name", "summary", "expect",
/// "repeat"}]` (`expect` None: reported clean; `repeat`: the invocations back to back it
/// takes to show).
#[pyfunction]
pub fn variants(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let v: Vec<serde_json::Value> = all_variants()
        .iter()
        .map(|v| {
            json!({"collective": v.collective, "name": v.name, "summary": v.summary,
                 "expect": v.expect.map(|k| k.to_string()), "repeat": v.repeat,
                 "devices": v.devices})
        })
        .collect();
    to_py_data(py, &v)
}

/// The cost-model presets: `[{"name", "source", figures...}]` (bandwidths in bytes/s,
/// latencies in seconds, `mxu_flops` the bf16 peak per device).
#[pyfunction]
pub fn presets(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let v: Vec<serde_json::Value> = model_presets()
        .iter()
        .map(|p| {
            let m = (p.model)();
            json!({"name": p.name, "source": p.source, "link_bw": m.link_bw,
                 "link_latency": m.link_latency, "hbm_bw": m.hbm_bw,
                 "dma_latency": m.dma_latency, "vector_rate": m.vector_rate,
                 "vmem_bytes": m.vmem_bytes, "mxu_flops": m.mxu_flops, "mxus": m.mxus,
                 "mxu_dim": m.mxu_dim, "tensorcores": m.tensorcores, "pod": m.pod})
        })
        .collect();
    to_py_data(py, &v)
}

/// The adapters wgpu sees and the chosen one's limits.
#[pyfunction]
pub fn adapters() -> PyResult<String> {
    tpusim::device_sim::gpu::adapters_report().py()
}

/// Runs shipped collective `name` on `inputs[device][operand]` under `schedule`: on a
/// multi-axis mesh a ring collective runs along `axis` (default `x`; `x,y` one ring
/// through both), a whole-mesh one (allreduce_2d) over every device.
#[pyfunction]
#[pyo3(signature = (name, mesh, inputs, op="sum", perm=None, backend="auto", schedule="eager", axis=None))]
#[allow(clippy::too_many_arguments)]
pub fn collective_run<'py>(
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
    let mut inputs = per_device(&inputs)?;
    let first = inputs
        .first()
        .and_then(|d| d.first())
        .map(|a| (a.shape.clone(), a.dtype))
        .ok_or_else(|| BadInput::new_err("bad input: no inputs were given"))?;
    // A kernel's refs have at least one dimension: a 0-d input runs as one element.
    let kernel_shape = if first.0.is_empty() {
        vec![1]
    } else {
        first.0.clone()
    };
    let job = job(name, op, perm, None, Some(mesh), 0, axis)
        .py()?
        .with_shape(&kernel_shape)
        .with_dtype(first.1)
        .with_schedule(ScheduleSpec::parse(schedule).py()?);
    let mut exec = executor(backend)?;
    // A kernel may view its input in another shape (psum_scatter's (P·R, C) as (P, R, C)).
    let call = job.pallas_call().py()?;
    let want: Vec<Vec<usize>> = call
        .spec()
        .inputs()
        .iter()
        .map(|o| o.shape.clone())
        .collect();
    for dev in &mut inputs {
        for (a, w) in dev.iter_mut().zip(&want) {
            if a.shape.iter().product::<usize>() == w.iter().product::<usize>() {
                a.shape = w.clone();
            }
        }
    }
    let mut out = watched(|| job.execute(&mut exec, &inputs)).py()?;
    // The result in XLA's shape for the input's (a 0-d input's psum is 0-d), not the
    // kernel ref's view of it.
    if let Some(c) = job.collective_of() {
        let xla = c.output_shape(job.place().devices(), &first.0);
        for dev in &mut out {
            if let Some(o) = dev.first_mut() {
                if tpusim::array::numel(&xla) == Some(o.len()) {
                    o.shape = xla.clone();
                }
            }
        }
    }
    to_numpy_all(py, out)
}

/// `jax.shard_map` of shipped collective `name` on a global array: split along
/// `in_dim`, run, join along `out_dim` (defaults: the collective's, as in the seed).
#[pyfunction]
#[pyo3(signature = (name, mesh, x, in_dim=None, out_dim=None, op="sum", perm=None, backend="auto", axis=None))]
#[allow(clippy::too_many_arguments)]
pub fn collective_shard_map<'py>(
    py: Python<'py>,
    name: &str,
    mesh: &PyMesh,
    x: &Bound<'py, PyAny>,
    in_dim: Option<usize>,
    out_dim: Option<usize>,
    op: &str,
    perm: Option<Vec<(usize, usize)>>,
    backend: &str,
    axis: Option<&str>,
) -> PyResult<Bound<'py, PyAny>> {
    let c = collective(name, op, perm.clone()).py()?;
    let (din, dout) = c.apply_dims();
    let job = job(name, op, perm, None, Some(mesh), 0, axis).py()?;
    let x = ShardedArray::shard(&to_host(x)?, &mesh.mesh, in_dim.unwrap_or(din)).py()?;
    let mut exec = executor(backend)?;
    let y = watched(|| job.shard_map(&x, out_dim.unwrap_or(dout), &mut exec)).py()?;
    to_numpy(py, &y.unshard().py()?)
}

/// Shipped collective `name` (or its broken `variant`) on `mesh` (or a ring of
/// `devices`), `repeat` invocations back to back: the verifier's report.
#[pyfunction]
#[pyo3(signature = (name, devices=Whole::of(4), schedules=Whole::of(200), seed=Whole::of(0), variant_name=None, shape=None, replay=None, mesh=None, axis=None, repeat=Whole::of(1)))]
#[allow(clippy::too_many_arguments)]
pub fn collective_check<'py>(
    py: Python<'py>,
    name: &str,
    devices: Whole,
    schedules: Whole,
    seed: Whole,
    variant_name: Option<&str>,
    shape: Option<Vec<Whole>>,
    replay: Option<&str>,
    mesh: Option<&PyMesh>,
    axis: Option<&str>,
    repeat: Whole,
) -> PyResult<Bound<'py, PyAny>> {
    let devices = devices.check_usize(&args::DEVICES, "devices")?;
    let (schedules, seed) = check_counts(&schedules, &seed)?;
    let repeat = repeat.check_usize(&args::REPEAT, "repeat")?;
    let mut job = job(name, "sum", None, variant_name, mesh, devices, axis)
        .py()?
        .repeat(repeat)
        .py()?;
    if let Some(s) = shape {
        job = job.with_shape(&shape_of(&s)?);
    }
    let report = py
        .detach(|| watched(|| check_job(&job, schedules, seed, replay)))
        .py()?;
    to_py_data(py, &report)
}

/// Shipped collective `name`'s step table on `mesh` (or a ring of `devices`), `repeat`
/// invocations back to back.
#[pyfunction]
#[pyo3(signature = (name, devices=Whole::of(4), mesh=None, axis=None, dtype="f32", repeat=Whole::of(1)))]
pub fn collective_trace<'py>(
    py: Python<'py>,
    name: &str,
    devices: Whole,
    mesh: Option<&PyMesh>,
    axis: Option<&str>,
    dtype: &str,
    repeat: Whole,
) -> PyResult<Bound<'py, PyAny>> {
    let devices = devices.check_usize(&args::DEVICES, "devices")?;
    let repeat = repeat.check_usize(&args::REPEAT, "repeat")?;
    let job = job(name, "sum", None, None, mesh, devices, axis)
        .py()?
        .with_dtype(DType::parse_collective(dtype).py()?)
        .repeat(repeat)
        .py()?;
    let table = py.detach(|| watched(|| job.trace())).py()?;
    to_py_data(py, &table)
}

/// Shipped collective `name` on the cost model's clock, placed as the command line
/// places it (a multi-axis mesh wired as its torus unless `topology` says otherwise).
#[pyfunction]
#[pyo3(signature = (name, devices=Whole::of(4), shape=None, dtype="f32", op="sum", preset="v5e", overrides=None, timeline=false, mesh=None, axis=None, topology=None))]
#[allow(clippy::too_many_arguments)]
pub fn collective_model<'py>(
    py: Python<'py>,
    name: &str,
    devices: Whole,
    shape: Option<Vec<Whole>>,
    dtype: &str,
    op: &str,
    preset: &str,
    overrides: Option<Vec<(String, f64)>>,
    timeline: bool,
    mesh: Option<&PyMesh>,
    axis: Option<&str>,
    topology: Option<&str>,
) -> PyResult<Bound<'py, PyAny>> {
    let devices = devices.check_usize(&args::DEVICES, "devices")?;
    let mut job = job(name, op, None, None, mesh, devices, axis)
        .py()?
        .with_dtype(DType::parse_collective(dtype).py()?);
    if let Some(s) = shape {
        job = job.with_shape(&shape_of(&s)?);
    }
    let m = model_spec(preset, overrides, topology)?.build().py()?;
    let run = py.detach(|| watched(|| job.model(&m, None))).py()?;
    modeled(py, &run, name, timeline)
}

/// `tpusim bench` for shipped collective `name`: the self-describing results
/// ([`bench::results`]), the rows among them.
#[pyfunction]
#[pyo3(signature = (name, devices=Whole::of(4), min_bytes="4K", max_bytes="64K", factor=Whole::of(4), iters=Whole::of(20), warmup=Whole::of(5), checks=Whole::of(1), dtype="f32", backend="auto", schedule="eager", mesh=None, axis=None))]
#[allow(clippy::too_many_arguments)]
pub fn collective_bench<'py>(
    py: Python<'py>,
    name: &str,
    devices: Whole,
    min_bytes: &str,
    max_bytes: &str,
    factor: Whole,
    iters: Whole,
    warmup: Whole,
    checks: Whole,
    dtype: &str,
    backend: &str,
    schedule: &str,
    mesh: Option<&PyMesh>,
    axis: Option<&str>,
) -> PyResult<Bound<'py, PyAny>> {
    let devices = devices.check_usize(&args::DEVICES, "devices")?;
    let factor = factor.check(&args::FACTOR, "factor")?;
    let iters = iters.check_usize(&args::ITERS, "iters")?;
    let warmup = warmup.check_usize(&args::WARMUP, "warmup")?;
    let checks = checks.check_usize(&args::CHECKS, "checks")?;
    let job = job(name, "sum", None, None, mesh, devices, axis).py()?;
    let cfg = BenchConfig {
        devices: job.place().mesh.size(),
        min_bytes: bench::parse_size(min_bytes).py()?,
        max_bytes: bench::parse_size(max_bytes).py()?,
        factor,
        iters,
        warmup,
        checks,
        dtype: DType::parse_collective(dtype).py()?,
        schedule: ScheduleSpec::parse(schedule).py()?,
    };
    let exec = executor(backend)?;
    let date = bench::utc_now();
    let rows = watched(|| bench::sweep(&job, &cfg, &exec, &mut |_| {})).py()?;
    let place = job.place();
    let mut call = format!(
        "tpusim.bench({name:?}, devices={}, min_bytes={min_bytes:?}, max_bytes={max_bytes:?}, factor={factor}, iters={iters}, warmup={warmup}, checks={checks}, dtype={dtype:?}, backend={backend:?}, schedule={schedule:?}",
        cfg.devices
    );
    if mesh.is_some() {
        let axes: Vec<String> = place
            .mesh
            .axes()
            .iter()
            .map(|(n, s)| format!("{n}={s}"))
            .collect();
        call += &format!(", mesh=<mesh {}>", axes.join(","));
    }
    if let Some(x) = axis {
        call += &format!(", axis={x:?}");
    }
    call += ")";
    let asked = bench::Asked {
        command: vec![call],
        date,
        mesh: &place.mesh,
        axis,
        group_devices: Some(place.devices()),
        repeat: 1,
    };
    let ran = bench::Ran::Executor {
        backend,
        exec: &exec,
        rows: &rows,
    };
    let mut v = bench::results(&cfg, &asked, &ran);
    // The command line's table, for `str(results)` (not part of the JSON file).
    let lines: Vec<String> = rows.iter().map(bench::line).collect();
    v["table"] = json!(format!("{}\n{}", bench::header(), lines.join("\n")));
    to_py_data(py, &v)
}

/// nccl-tests' bus factor (busbw / algbw) of traffic class `traffic` (`all_reduce`,
/// `all_gather`, …) on `p` devices, for a bench of a kernel of one's own.
#[pyfunction]
pub fn bus_factor(traffic: &str, p: Whole) -> PyResult<f64> {
    let p = p.check_usize(&args::DEVICES, "devices")?;
    let t = tpusim::model::Traffic::parse(traffic).py()?;
    Ok(tpusim::model::bus_factor(t, p))
}

/// What a bench result file says of where it ran, as `tpusim bench --json` says it:
/// tpusim's version, the date (UTC, now), and for `backend` the executor that runs
/// (`gpu` or `cpu`) and its adapter.
#[pyfunction]
pub fn bench_context<'py>(py: Python<'py>, backend: &str) -> PyResult<Bound<'py, PyAny>> {
    use tpusim::device_sim::Executor;
    let exec = executor(backend)?;
    let v = json!({
        "tpusim": bench::VERSION,
        "date": bench::utc_now(),
        "executor": if exec.is_gpu() { "gpu" } else { "cpu" },
        "adapter": exec.describe(),
    });
    to_py_data(py, &v)
}

/// Deterministic random inputs for shipped collective `name` (what `tpusim run` uses):
/// `[device][operand]` numpy arrays.
#[pyfunction]
#[pyo3(signature = (name, mesh, shape, dtype="f32", seed=Whole::of(0)))]
pub fn collective_inputs<'py>(
    py: Python<'py>,
    name: &str,
    mesh: &PyMesh,
    shape: Vec<Whole>,
    dtype: &str,
    seed: Whole,
) -> PyResult<Vec<Vec<Bound<'py, PyAny>>>> {
    let (shape, seed) = (shape_of(&shape)?, seed.check(&args::SEED, "seed")?);
    let program = Job::collective(
        Registry::builtin().by_name(name).py()?,
        Placement::whole(mesh.mesh.clone()),
    )
    .with_shape(&shape)
    .with_dtype(DType::parse_collective(dtype).py()?)
    .lower()
    .py()?;
    to_numpy_all(py, random_inputs(&program, seed).py()?)
}

/// Parses a permutation written `0:1,1:2`.
#[pyfunction]
pub fn parse_perm(s: &str) -> PyResult<Vec<(usize, usize)>> {
    Ppermute::parse_perm(s).py()
}

/// `tpusim plot`: bench files (or one timeline) drawn to `output` (.svg or .png); what
/// was drawn (`9 lines`, `24 lanes`).
#[pyfunction]
pub fn plot(
    py: Python<'_>,
    files: Vec<std::path::PathBuf>,
    output: std::path::PathBuf,
) -> PyResult<String> {
    py.detach(|| watched(|| tpusim::plot::plot_files(&files, &output)))
        .py()
}
