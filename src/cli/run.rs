//! `tpusim run` (and `demo`): one collective on random data, checked against its
//! reference; with `--model`, its modeled time, bandwidths and timeline.

use super::out::outln;
use super::{executor, limits, placement};
use std::sync::Arc;
use tpusim::budget::{Buffers, Work};
use tpusim::collectives::variants::variant;
use tpusim::collectives::{Collective, Options, Placement, Ppermute, Registry};
use tpusim::device_sim::ScheduleSpec;
use tpusim::exec::{Backend, Executor};
use tpusim::files::Output;
use tpusim::kernel::PallasCall;
use tpusim::kernel::ReduceOp;
use tpusim::model::{bus_factor, chrome_trace, ideal_seconds, CostModel, Timed, Topology};
use tpusim::{array, DType, Error, Mesh};

#[derive(clap::Args)]
pub struct RunArgs {
    /// Collective (`tpusim check --list-variants` and README list the shipped ones).
    collective: String,
    /// Number of devices.
    #[arg(short = 'p', long = "devices", default_value_t = 4)]
    devices: usize,
    /// A multi-axis mesh, e.g. 2x4 (axes x and y): a ring collective runs over `--axis`,
    /// every group along it an independent ring; a whole-mesh one (allreduce_2d) on all of it.
    #[arg(long, conflicts_with = "devices")]
    mesh: Option<String>,
    /// The mesh axis a ring collective runs over (with --mesh; default x), or several
    /// (`x,y`: one ring through every device of both, row-major).
    #[arg(long, requires = "mesh")]
    axis: Option<String>,
    /// One device's shard shape, e.g. 8x128 (default: a small shape the collective serves at P).
    #[arg(long)]
    shape: Option<String>,
    /// Element type: f32, i32, f16 or bf16.
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Executor: gpu or cpu.
    #[arg(long, default_value = "gpu")]
    backend: String,
    /// Seed of the random input data.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// ppermute only: explicit `src:dst` pairs, e.g. `0:2,2:0` (default: the seed's right shift).
    #[arg(long)]
    perm: Option<String>,
    /// Reduction for psum and the ring all-reduces: sum, max or min.
    #[arg(long, default_value = "sum")]
    op: String,
    /// Schedule: eager, lazy, lockstep, run-ahead:D, random:SEED.
    #[arg(long, default_value = "eager")]
    schedule: String,
    /// Run a deliberately broken variant (see `tpusim check --list-variants`): a race
    /// gives wrong numbers under some schedules only.
    #[arg(long)]
    variant: Option<String>,
    #[command(flatten)]
    model: ModelArgs,
}

/// The cost model and its overrides.
#[derive(clap::Args)]
pub struct ModelArgs {
    /// Cost-model preset (v5e, v5p, v6e): prints modeled time and bus bandwidth.
    #[arg(long)]
    model: Option<String>,
    /// Override: link bandwidth per direction, GB/s.
    #[arg(long)]
    link_gbps: Option<f64>,
    /// Override: link latency, microseconds.
    #[arg(long)]
    link_latency_us: Option<f64>,
    /// Override: local HBM<->VMEM DMA bandwidth, GB/s.
    #[arg(long)]
    hbm_gbps: Option<f64>,
    /// Override: local DMA latency, microseconds.
    #[arg(long)]
    dma_latency_us: Option<f64>,
    /// Override: VMEM compute rate, giga-elements per second.
    #[arg(long)]
    vector_gelems: Option<f64>,
    /// Override: VMEM bytes per device (0: unlimited).
    #[arg(long)]
    vmem_bytes: Option<u64>,
    /// How the devices are wired: ring, full (a link per pair) or torus:AxB[xC]
    /// (default: the preset's pod torus when P fills it, else a ring).
    #[arg(long)]
    topology: Option<String>,
    /// Write a Chrome trace (Perfetto) of the modeled run to this file.
    #[arg(long)]
    timeline: Option<std::path::PathBuf>,
}

impl ModelArgs {
    /// The model for a run on `mesh`: a multi-axis mesh is wired as the torus of its
    /// shape unless `--topology` says otherwise.
    fn model(&self, mesh: &Mesh) -> tpusim::Result<Option<CostModel>> {
        let overrides = self.link_gbps.is_some()
            || self.link_latency_us.is_some()
            || self.hbm_gbps.is_some()
            || self.dma_latency_us.is_some()
            || self.vector_gelems.is_some()
            || self.vmem_bytes.is_some()
            || self.topology.is_some();
        let mut m = match &self.model {
            Some(name) => CostModel::preset(name)?,
            None if overrides || self.timeline.is_some() => {
                return Err(Error::bad_input(
                    "model overrides and --timeline need a --model preset to start from",
                ))
            }
            None => return Ok(None),
        };
        if let Some(v) = self.link_gbps {
            m.link_bw = v * 1e9;
        }
        if let Some(v) = self.link_latency_us {
            m.link_latency = v * 1e-6;
        }
        if let Some(v) = self.hbm_gbps {
            m.hbm_bw = v * 1e9;
        }
        if let Some(v) = self.dma_latency_us {
            m.dma_latency = v * 1e-6;
        }
        if let Some(v) = self.vector_gelems {
            m.vector_rate = v * 1e9;
        }
        if let Some(v) = self.vmem_bytes {
            m.vmem_bytes = (v > 0).then_some(v);
        }
        m.topology = match &self.topology {
            Some(t) => Some(Topology::parse(t)?),
            None if mesh.axes().len() > 1 => Some(Topology::of_mesh(mesh)),
            None => None,
        };
        if overrides {
            m.name = format!("{} (overridden)", m.name);
        }
        m.validate()?;
        Ok(Some(m))
    }
}

struct Prepared {
    collective: Arc<dyn Collective>,
    /// The devices: the whole mesh, or the groups along `--axis` (each runs the kernel
    /// built for `place.ring`).
    place: Placement,
    /// The kernel that runs: the collective's, or a broken variant of it.
    call: PallasCall,
    variant: Option<String>,
    shape: Vec<usize>,
    dtype: DType,
    schedule: ScheduleSpec,
    model: Option<CostModel>,
    /// Where the timeline goes, checked writable before the run.
    timeline: Option<Output>,
}

/// The kernel `run` runs (the collective's, or a variant of it) at any P, for the
/// scale check: the shard shape where it serves it, else the same size rounded.
fn build_at(
    a: &RunArgs,
    collective: &dyn Collective,
    shape: &[usize],
    dtype: DType,
    q: usize,
) -> tpusim::Result<PallasCall> {
    let make = |m: &Mesh, s: &[usize]| match &a.variant {
        Some(v) => variant(&a.collective, v)?.call(m, s, dtype),
        None => collective.call(m, s, dtype),
    };
    limits::call_at(q, collective, shape, dtype, &make)
}

/// Refuses the run when it cannot fit this machine, with buffers in `buffers`.
fn fit(a: &RunArgs, p: &Prepared, backend: Backend, buffers: Buffers) -> tpusim::Result<()> {
    let n = p.place.mesh.size();
    let shape: Vec<String> = p.shape.iter().map(|d| d.to_string()).collect();
    limits::fit(
        format!(
            "`tpusim run {}` at P={n} with shape {}",
            a.collective,
            shape.join("x")
        ),
        n,
        &|q| build_at(a, p.collective.as_ref(), &p.shape, p.dtype, q),
        Work::Run {
            buffers,
            gpu: backend == Backend::Gpu,
            model: p.model.is_some(),
            timeline: p.timeline.is_some(),
        },
    )
}

fn prepare(reg: &Registry, a: &RunArgs) -> tpusim::Result<(Prepared, Backend)> {
    let opts = Options {
        op: ReduceOp::parse(&a.op)?,
        perm: a.perm.as_deref().map(Ppermute::parse_perm).transpose()?,
    };
    let collective = reg.get(&a.collective, &opts)?;
    let place = placement(
        collective.as_ref(),
        a.mesh.as_deref(),
        a.devices,
        a.axis.as_deref(),
    )?;
    let (mesh, ring) = (&place.mesh, &place.ring);
    if place.groups.is_some() && a.variant.is_some() {
        return Err(Error::bad_input(
            "--variant runs the broken kernel on the whole mesh (-p, or --mesh for a whole-mesh collective); it does not run along an --axis",
        ));
    }
    let shape = match &a.shape {
        Some(s) => array::parse_shape(s)?,
        None => collective.default_shape(ring.size()),
    };
    let dtype = DType::parse(&a.dtype)?;
    let backend = Backend::parse(&a.backend)?;
    let schedule = ScheduleSpec::parse(&a.schedule)?;
    schedule.validate(mesh.size())?;
    if a.variant.is_some() && (opts.op != ReduceOp::Sum || opts.perm.is_some()) {
        return Err(Error::bad_input(
            "--variant runs the broken kernel as shipped (a sum, the seed's permutation): it takes no --op or --perm",
        ));
    }
    let model = a.model.model(mesh)?;
    let timeline = a
        .model
        .timeline
        .as_deref()
        .map(|t| Output::check(t, "timeline"))
        .transpose()?;
    // Build the kernel now so that every input problem is reported before the GPU is touched.
    let call = match &a.variant {
        Some(v) => variant(&a.collective, v)?.call(ring, &shape, dtype)?,
        None => collective.call(ring, &shape, dtype)?,
    };
    let p = Prepared {
        collective,
        place,
        call,
        variant: a.variant.clone(),
        shape,
        dtype,
        schedule,
        model,
        timeline,
    };
    // The GPU's buffers count as host memory once the adapter says they are (`run`).
    let buffers = match backend {
        Backend::Cpu => Buffers::Host,
        Backend::Gpu => Buffers::Device,
    };
    fit(a, &p, backend, buffers)?;
    if let Some(m) = &p.model {
        m.check_vmem(&p.call.lower(&p.place.ring)?)?;
    }
    Ok((p, backend))
}

fn run_one(p: &Prepared, exec: &mut dyn Executor, seed: u64) -> tpusim::Result<bool> {
    let r = tpusim::collectives::run_placed(
        p.collective.as_ref(),
        &p.call,
        &p.place,
        exec,
        seed,
        p.schedule,
    )?;
    let shape: Vec<String> = p.shape.iter().map(|d| d.to_string()).collect();
    let name = match &p.variant {
        Some(v) => format!("{} --variant {v}", p.collective.name()),
        None => p.collective.name().to_string(),
    };
    outln!(
        "{:<19} P={:<3} shape={} dtype={} on {}: {} wrong of {}, plan {:.2} ms, run {:.2} ms",
        name,
        p.place.describe(),
        shape.join("x"),
        p.dtype,
        exec.describe(),
        r.wrong,
        r.total,
        r.plan_time.as_secs_f64() * 1e3,
        r.exec_time.as_secs_f64() * 1e3
    )?;
    Ok(r.wrong == 0)
}

/// Prints the modeled time and nccl-tests' algbw / busbw; writes the timeline.
fn model_report(p: &Prepared, m: &CostModel) -> tpusim::Result<()> {
    let program = p.place.lower(&p.call)?;
    let mut timed = Timed::new(&program, m.clone())?;
    tpusim::device_sim::schedule(&program, &mut timed)?;
    let run = timed.finish();
    // Sizes and bus factors are per collective: per group on a multi-axis mesh.
    let n = p.place.devices();
    let shard_bytes = (p.shape.iter().product::<usize>() * p.dtype.size()) as u64;
    let traffic = p.collective.traffic();
    let size = traffic.size(n, shard_bytes) as f64;
    let algbw = size / run.seconds.max(f64::MIN_POSITIVE);
    let ideal = ideal_seconds(traffic, n, size, m.link_bw);
    outln!(
        "model {} on {}: {:.3} us modeled, size {} B, algbw {:.2} GB/s, busbw {:.2} GB/s; ideal ring bound {:.3} us ({:.0}% of it)",
        m.name,
        m.topology_for(p.place.mesh.size()),
        run.seconds * 1e6,
        size,
        algbw / 1e9,
        algbw * bus_factor(traffic, n) / 1e9,
        ideal * 1e6,
        if run.seconds > 0.0 { 100.0 * ideal / run.seconds } else { 0.0 }
    )?;
    if let Some(out) = &p.timeline {
        let json = chrome_trace(p.collective.name(), p.place.mesh.size(), &run.events);
        out.write_with(|w| serde_json::to_writer(w, &json).map_err(std::io::Error::from))?;
        outln!(
            "timeline written to {} ({} events)",
            out.path().display(),
            run.events.len()
        )?;
    }
    Ok(())
}

/// `tpusim run`.
pub fn run(reg: &Registry, a: &RunArgs) -> tpusim::Result<bool> {
    let (p, backend) = prepare(reg, a)?;
    let mut exec = executor(backend)?;
    if backend == Backend::Gpu && exec.buffers_in_host_memory() {
        fit(a, &p, backend, Buffers::Host)?;
    }
    let ok = run_one(&p, exec.as_mut(), a.seed)?;
    if let Some(m) = &p.model {
        model_report(&p, m)?;
    }
    Ok(ok)
}

/// `tpusim demo`: every collective once, small, f32 and i32.
pub fn demo(reg: &Registry, backend: &str) -> tpusim::Result<bool> {
    let mut exec = executor(Backend::parse(backend)?)?;
    outln!("tpusim demo on {}", exec.describe())?;
    let mut ok = true;
    for c in reg.iter() {
        outln!("# {}: {}", c.name(), c.summary())?;
        for dtype in [DType::F32, DType::I32] {
            let mesh = Mesh::new(4, "x")?;
            let shape = c.default_shape(mesh.size());
            let p = Prepared {
                call: c.call(&mesh, &shape, dtype)?,
                variant: None,
                collective: c.clone(),
                place: Placement::whole(mesh),
                shape,
                dtype,
                schedule: ScheduleSpec::Eager,
                model: None,
                timeline: None,
            };
            ok &= run_one(&p, exec.as_mut(), 0)?;
        }
    }
    Ok(ok)
}
