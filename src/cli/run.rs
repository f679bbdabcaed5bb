//! `tpusim run` (and `demo`): one collective on random data, checked against its
//! reference; with `--model`, its modeled time, bandwidths and timeline.

use super::out::outln;
use tpusim::budget::{Buffers, Work};
use tpusim::collectives::{Options, Ppermute, Registry};
use tpusim::device_sim::{Backend, Executor};
use tpusim::files::Output;
use tpusim::ir::Uninit;
use tpusim::kernel::ReduceOp;
use tpusim::mesh::Placement;
use tpusim::model::{Knob, ModelSpec, Topology};
use tpusim::run::{Job, Modeled};
use tpusim::{args, array, DType, Error, Mesh};

#[derive(clap::Args)]
pub struct RunArgs {
    /// Collective (`tpusim check --list-variants` and the book's collectives chapter list the shipped ones).
    collective: String,
    #[command(flatten)]
    pub place: super::place::PlaceArgs,
    /// One device's shard shape, e.g. 8x128 (default: a small shape the collective serves at P).
    #[arg(long)]
    shape: Option<String>,
    /// Element type: f32, i32, f16 or bf16.
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Executor: auto (the GPU one on a hardware adapter, else the CPU one), gpu or cpu.
    #[arg(long, default_value = "auto")]
    backend: String,
    /// Seed of the random input data.
    #[arg(long, default_value = "0", allow_hyphen_values = true)]
    seed: String,
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
    /// Kernel invocations back to back on every device: a device enters invocation k+1
    /// when it leaves k, and the barrier semaphore of a collective_id carries over.
    #[arg(long, default_value = "1", allow_hyphen_values = true)]
    repeat: String,
    /// What memory nothing wrote reads as: nan (NaN for floats, the largest value for
    /// integers, true for bools, as JAX's interpret mode has it) or zero (default: the
    /// TPUSIM_UNINIT environment variable, else nan).
    #[arg(long)]
    uninit: Option<String>,
    /// With --model: model the run without executing it (no data is made, no adapter
    /// opened), for shapes too large to execute here.
    #[arg(long)]
    no_exec: bool,
    /// Print how many ranks (processes with this one's memory, `mpirun -np N`) the run
    /// needs, and exit.
    #[arg(long)]
    ranks_needed: bool,
    #[command(flatten)]
    model: ModelArgs,
}

/// The cost model and its overrides.
#[derive(clap::Args)]
pub struct ModelArgs {
    /// Cost-model preset (v4, v5e, v5p, v6e, v7): prints modeled time and bus bandwidth.
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
    /// Override: vector unit rate, giga-elements per second.
    #[arg(long)]
    vector_gelems: Option<f64>,
    /// Override: matrix unit peak (bf16), TFLOP/s.
    #[arg(long)]
    mxu_tflops: Option<f64>,
    /// Override: VMEM bytes per device (0: unlimited).
    #[arg(long)]
    vmem_bytes: Option<u64>,
    /// How the devices are wired: ring, full (a link per pair) or torus:AxB[xC]
    /// (default: a multi-axis mesh's own torus; else the preset's pod torus when P fills
    /// it, else a ring).
    #[arg(long)]
    topology: Option<String>,
    /// Write a Chrome trace (Perfetto) of the modeled run to this file.
    #[arg(long)]
    pub timeline: Option<std::path::PathBuf>,
}

impl ModelArgs {
    /// The model asked for, if any.
    pub fn spec(&self) -> tpusim::Result<Option<ModelSpec>> {
        let overrides: Vec<(Knob, f64)> = [
            (Knob::LinkGbps, self.link_gbps),
            (Knob::LinkLatencyUs, self.link_latency_us),
            (Knob::HbmGbps, self.hbm_gbps),
            (Knob::DmaLatencyUs, self.dma_latency_us),
            (Knob::VectorGelems, self.vector_gelems),
            (Knob::MxuTflops, self.mxu_tflops),
            (Knob::VmemBytes, self.vmem_bytes.map(|v| v as f64)),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect();
        let Some(preset) = &self.model else {
            if !overrides.is_empty() || self.topology.is_some() || self.timeline.is_some() {
                return Err(Error::bad_input(
                    "model overrides and --timeline need a --model preset to start from",
                ));
            }
            return Ok(None);
        };
        Ok(Some(ModelSpec {
            preset: preset.clone(),
            overrides,
            topology: self.topology.as_deref().map(Topology::parse).transpose()?,
        }))
    }
}

/// `tpusim run`'s job: the collective (or its variant) where the flags place it.
fn job(reg: &Registry, a: &RunArgs) -> tpusim::Result<Job> {
    let opts = Options {
        op: ReduceOp::parse(&a.op)?,
        perm: a.perm.as_deref().map(Ppermute::parse_perm).transpose()?,
    };
    let c = reg.get(&a.collective, &opts)?;
    let place = a.place.placement(c.as_ref())?;
    let shape = match &a.shape {
        Some(s) => array::parse_shape(s)?,
        None => c.default_shape(place.devices()),
    };
    let schedule = args::schedule(&a.schedule, Some(place.mesh.size()))?;
    let repeat = args::REPEAT.parse(&a.repeat)? as usize;
    let uninit = match &a.uninit {
        Some(u) => Uninit::parse(u)?,
        None => Uninit::from_env()?,
    };
    Job::named(reg, &a.collective, &opts, a.variant.as_deref(), place)?
        .with_shape(&shape)
        .with_dtype(DType::parse_collective(&a.dtype)?)
        .with_schedule(schedule)
        .with_uninit(uninit)
        .repeat(repeat)
        .map(|j| j.on_ranks(super::ranks::share()))
}

/// `--ranks-needed`: how many ranks of this process's size `work` on `job` needs.
pub fn ranks_needed(job: &Job, work: Work) -> tpusim::Result<bool> {
    let (r, need, avail) = job.ranks_needed(work)?;
    let shape: Vec<String> = job.shape().iter().map(|d| d.to_string()).collect();
    let of = avail.map_or_else(
        || "memory unknown".to_string(),
        |a| format!("of {} ({})", tpusim::units::bytes(a.bytes as f64), a.source),
    );
    outln!(
        "{} P={} shape={}: {r} rank{} of this size (about {} of host memory per rank, {of})",
        job.name(),
        job.place().describe(),
        shape.join("x"),
        if r == 1 { "" } else { "s" },
        tpusim::units::bytes(need.host()),
    )?;
    Ok(true)
}

/// The ranks' line under a run's result: the split, the bytes that crossed ranks (and
/// how, between ranks of one host), each rank's busy share of the run.
pub fn ranks_line(
    part: &tpusim::device_sim::ranks::Partition,
    report: &tpusim::device_sim::ranks::RunReport,
) -> tpusim::Result<()> {
    let busy: Vec<String> = report
        .busy_fractions()
        .iter()
        .map(|b| format!("{:.0}%", 100.0 * b))
        .collect();
    let via = report
        .via
        .as_ref()
        .map_or_else(String::new, |v| format!(", through {v}"));
    outln!(
        "ranks: {}; {} crossed ranks{via}; busy share of the run per rank: {}",
        part.describe(),
        tpusim::units::bytes(report.crossed_bytes() as f64),
        busy.join(" ")
    )
}

/// One result line of `run` and `demo`.
fn run_one(job: &Job, exec: &mut dyn Executor, seed: u64) -> tpusim::Result<bool> {
    let r = job.run(exec, seed)?;
    let shape: Vec<String> = job.shape().iter().map(|d| d.to_string()).collect();
    outln!(
        "{:<19} P={:<3} shape={} dtype={} on {}: {} wrong of {}, plan {:.2} ms, run {:.2} ms",
        job.name(),
        job.place().describe(),
        shape.join("x"),
        job.dtype(),
        exec.describe(),
        r.wrong,
        r.total,
        r.plan_time.as_secs_f64() * 1e3,
        r.exec_time.as_secs_f64() * 1e3
    )?;
    if let Some((part, report)) = &r.ranks {
        ranks_line(part, report)?;
    }
    Ok(r.wrong == 0)
}

/// Says on stderr when the verifier finds a problem in the kernel that the run's one
/// schedule need not show ([`Job::vet`]), or, for a kernel too large to vet at once,
/// that `check` is what verifies every schedule. Quiet for a clean kernel.
fn lucky(job: &Job) -> tpusim::Result<()> {
    if !super::ranks::runs_alone() || !super::out::notes() {
        return Ok(());
    }
    let spec = job.schedule();
    match job.vet()? {
        Some(r) if r.is_clean() => {}
        Some(r) => {
            let mut kinds: Vec<String> = r.kinds().iter().map(|k| k.to_string()).collect();
            kinds.sort();
            kinds.dedup();
            eprintln!(
                "tpusim: warning: `run` followed one schedule ({spec}), which need not show what the verifier finds in this kernel: {} problem{} ({}); `tpusim check` with the same arguments reports {}",
                r.findings.len(),
                if r.findings.len() == 1 { "" } else { "s" },
                kinds.join(", "),
                if r.findings.len() == 1 { "it" } else { "them" },
            );
        }
        None => eprintln!(
            "tpusim: `run` followed one schedule ({spec}); `tpusim check` with the same arguments verifies the kernel under many"
        ),
    }
    Ok(())
}

/// Prints the modeled time and nccl-tests' algbw / busbw; writes the timeline.
fn model_report(job: &Job, m: &Modeled, timeline: Option<&Output>) -> tpusim::Result<()> {
    let n = m.nccl.as_ref().expect("a collective has a traffic class");
    outln!(
        "model {} on {}: {:.3} us modeled, size {} B, algbw {:.2} GB/s, busbw {:.2} GB/s; ideal ring bound {:.3} us ({:.0}% of it)",
        m.model.name,
        m.topology,
        m.seconds * 1e6,
        n.size,
        n.algbw / 1e9,
        n.busbw / 1e9,
        n.ideal_seconds * 1e6,
        100.0 * m.ideal_fraction().unwrap_or(0.0)
    )?;
    if let Some(line) = m.compute_line() {
        outln!("{line}")?;
    }
    if let Some(out) = timeline.filter(|_| super::ranks::runs_alone()) {
        let name = job
            .collective_of()
            .map_or_else(|| job.name(), |c| c.name().to_string());
        let json = m.chrome_trace(&name);
        out.write_with(|w| serde_json::to_writer(w, &json).map_err(std::io::Error::from))?;
        // The file's own count: the modeled events, with the track names and flow arrows.
        let written = json["traceEvents"].as_array().map_or(0, Vec::len);
        outln!(
            "timeline written to {} ({written} trace events of {} modeled)",
            out.path().display(),
            m.events.len()
        )?;
    }
    Ok(())
}

/// `tpusim run`.
pub fn run(reg: &Registry, a: &RunArgs) -> tpusim::Result<bool> {
    let job = job(reg, a)?;
    let seed = args::SEED.parse(&a.seed)?;
    let chosen = Backend::parse(&a.backend)?.resolve()?;
    let backend = chosen.backend;
    let model = a.model.spec()?.map(|s| s.build()).transpose()?;
    let timeline = a
        .model
        .timeline
        .as_deref()
        .map(|t| Output::check(t, "timeline"))
        .transpose()?;
    if let Some(t) = &timeline {
        super::out::keep_apart(t.path());
    }
    if a.no_exec {
        let Some(m) = &model else {
            return Err(Error::bad_input(
                "--no-exec models the run without executing it: it needs --model",
            ));
        };
        job.ensure_fits(Work::Model {
            timeline: timeline.is_some(),
        })?;
        let modeled = job.model(m, None)?;
        let shape: Vec<String> = job.shape().iter().map(|d| d.to_string()).collect();
        outln!(
            "{:<19} P={:<3} shape={} dtype={}: modeled only (--no-exec)",
            job.name(),
            job.place().describe(),
            shape.join("x"),
            job.dtype()
        )?;
        model_report(&job, &modeled, timeline.as_ref())?;
        return Ok(true);
    }
    // Refused before the adapter is opened (the GPU's buffers count as host memory once
    // it says they are, in the run itself).
    let work = Work::Run {
        buffers: match backend {
            Backend::Cpu | Backend::Auto => Buffers::Host,
            Backend::Gpu => Buffers::Device,
        },
        gpu: backend == Backend::Gpu,
        model: model.is_some(),
        timeline: timeline.is_some(),
        chunked: false,
    };
    if a.ranks_needed {
        return ranks_needed(&job, work);
    }
    job.ensure_fits(work)?;
    if let Some(m) = &model {
        m.check_vmem(&job.lower()?)?;
    }
    let mut exec = super::executor(&chosen)?;
    let ok = run_one(&job, exec.as_mut(), seed)?;
    lucky(&job)?;
    if let Some(m) = &model {
        model_report(&job, &job.model(m, None)?, timeline.as_ref())?;
    }
    Ok(ok)
}

/// `tpusim demo`: every collective once, small, f32 and i32.
pub fn demo(reg: &Registry, backend: &str) -> tpusim::Result<bool> {
    let mut exec = super::executor(&Backend::parse(backend)?.resolve()?)?;
    outln!("tpusim demo on {}", exec.describe())?;
    let mut ok = true;
    for c in reg.iter() {
        outln!("# {}: {}", c.name(), c.summary())?;
        for dtype in [DType::F32, DType::I32] {
            let job = Job::collective(c.clone(), Placement::whole(Mesh::new(4, "x")?))
                .with_dtype(dtype)
                .on_ranks(super::ranks::share());
            ok &= run_one(&job, exec.as_mut(), 0)?;
        }
    }
    Ok(ok)
}
