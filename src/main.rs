//! The `tpusim` command line: run, check, demo and info.

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use tpusim::collectives::variants::{variant, variants};
use tpusim::collectives::{self, Collective, Options, Ppermute};
use tpusim::device_sim::ScheduleSpec;
use tpusim::exec::cpu::CpuExecutor;
use tpusim::exec::gpu::{adapters_report, GpuExecutor};
use tpusim::exec::{Backend, Executor};
use tpusim::kernel::ReduceOp;
use tpusim::model::{bus_factor, chrome_trace, ideal_seconds, CostModel, Timed, Traffic};
use tpusim::verify::{self, Report};
use tpusim::{array, DType, Error, Mesh};

#[derive(Parser)]
#[command(
    name = "tpusim",
    version,
    about = "Simulate TPU (Pallas) distributed kernels on one GPU"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one collective on deterministic random data and check it against XLA semantics.
    Run(RunArgs),
    /// Verify a collective under many schedules: races, deadlocks, semaphore misuse.
    Check(CheckArgs),
    /// Print the step table of a collective: what every device holds after every grid point.
    Trace {
        /// Collective.
        collective: String,
        /// Number of devices.
        #[arg(short = 'p', long = "devices", default_value_t = 4)]
        devices: usize,
        /// Output format: markdown or json.
        #[arg(long, default_value = "markdown")]
        format: String,
    },
    /// Sweep sizes like nccl-tests: time, algorithm and bus bandwidth, correctness.
    Bench(BenchArgs),
    /// Run every collective once, small, on the default adapter.
    Demo {
        /// Backend: gpu or cpu.
        #[arg(long, default_value = "gpu")]
        backend: String,
    },
    /// Print the adapters wgpu sees and the chosen adapter's limits.
    Info,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Collective: ppermute, all_gather, psum, psum_scatter, ring_allreduce, ring_allreduce_push.
    collective: String,
    /// Number of devices.
    #[arg(short = 'p', long = "devices", default_value_t = 4)]
    devices: usize,
    /// One device's shard shape, e.g. 8x128.
    #[arg(long, default_value = "8x128")]
    shape: String,
    /// Element type: f32 or i32.
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
    #[command(flatten)]
    model: ModelArgs,
}

#[derive(clap::Args)]
struct BenchArgs {
    /// Collective, or `all`.
    #[arg(default_value = "all")]
    collective: String,
    /// Number of devices.
    #[arg(short = 'p', long = "devices", default_value_t = 4)]
    devices: usize,
    /// Smallest size (K/M/G suffixes), nccl-tests' definition per collective.
    #[arg(short = 'b', long = "minbytes", default_value = "4K")]
    min: String,
    /// Largest size.
    #[arg(short = 'e', long = "maxbytes", default_value = "16M")]
    max: String,
    /// Size factor between steps.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 4)]
    factor: u64,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 10)]
    iters: usize,
    /// Warm-up iterations per size.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 2)]
    warmup: usize,
    /// Check iterations per size (read back and compared with the reference).
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    checks: usize,
    /// Element type: f32 or i32.
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Executor: gpu or cpu.
    #[arg(long, default_value = "gpu")]
    backend: String,
    /// Write the rows as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

fn bench(a: &BenchArgs) -> tpusim::Result<bool> {
    use std::io::Write;
    use tpusim::bench::{header, line, parse_size, sweep, BenchConfig};
    let mesh = mesh(a.devices)?;
    let cfg = BenchConfig {
        devices: mesh.size(),
        min_bytes: parse_size(&a.min)?,
        max_bytes: parse_size(&a.max)?,
        factor: a.factor,
        iters: a.iters,
        warmup: a.warmup,
        checks: a.checks,
        dtype: DType::parse(&a.dtype)?,
    };
    tpusim::bench::sizes(&cfg)?;
    let names: Vec<&str> = if a.collective == "all" {
        tpusim::bench::all_names()
    } else {
        collectives::by_name(&a.collective)?;
        vec![a.collective.as_str()]
    };
    let backend = Backend::parse(&a.backend)?;
    let gpu = match backend {
        Backend::Gpu => Some(GpuExecutor::from_env()?),
        Backend::Cpu => None,
    };
    println!(
        "# tpusim bench: P={} dtype={} iters={} warmup={} checks={} on {}",
        cfg.devices,
        cfg.dtype,
        cfg.iters,
        cfg.warmup,
        cfg.checks,
        gpu.as_ref().map_or("cpu".to_string(), |g| g.describe())
    );
    println!("# size: nccl-tests' (all_gather: gathered bytes; others: one device's input)");
    println!("# copy: plain buffer copy of one device's input, same run; moved: copy-equivalent bytes the schedule moves / time");
    println!("{}", header());
    let mut rows = Vec::new();
    for n in names {
        let c = collectives::by_name(n)?;
        let mut progress = |s: &str| {
            eprint!("\r\x1b[2K{s}");
            let _ = std::io::stderr().flush();
        };
        let r = sweep(c.as_ref(), &cfg, gpu.as_ref(), &mut progress)?;
        eprint!("\r\x1b[2K");
        for row in &r {
            println!("{}", line(row));
        }
        rows.extend(r);
    }
    if let Some(path) = &a.json {
        let v = serde_json::Value::Array(rows.iter().map(|r| r.json()).collect());
        std::fs::write(path, serde_json::to_string_pretty(&v).expect("JSON"))?;
    }
    let wrong: usize = rows.iter().map(|r| r.wrong).sum();
    if wrong > 0 {
        eprintln!("tpusim: {wrong} wrong elements");
    }
    Ok(wrong == 0)
}

/// The cost model and its overrides.
#[derive(clap::Args)]
struct ModelArgs {
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
    /// Write a Chrome trace (Perfetto) of the modeled run to this file.
    #[arg(long)]
    timeline: Option<std::path::PathBuf>,
}

impl ModelArgs {
    fn model(&self) -> tpusim::Result<Option<CostModel>> {
        let overrides = self.link_gbps.is_some()
            || self.link_latency_us.is_some()
            || self.hbm_gbps.is_some()
            || self.dma_latency_us.is_some()
            || self.vector_gelems.is_some()
            || self.vmem_bytes.is_some();
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
        if overrides {
            m.name = format!("{} (overridden)", m.name);
        }
        m.validate()?;
        Ok(Some(m))
    }
}

#[derive(clap::Args)]
struct CheckArgs {
    /// Collective, or `all`.
    collective: Option<String>,
    /// Number of devices.
    #[arg(short = 'p', long = "devices", default_value_t = 4)]
    devices: usize,
    /// Schedules to run: every deterministic policy, then seeded random ones.
    #[arg(long, default_value_t = 200)]
    schedules: usize,
    /// First seed of the random schedules.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// A deliberately broken variant (see --list-variants).
    #[arg(long)]
    variant: Option<String>,
    /// Run exactly one schedule, as printed by a failing check (e.g. `lazy`, `random:17`).
    #[arg(long)]
    replay: Option<String>,
    /// List the broken variants and exit.
    #[arg(long)]
    list_variants: bool,
    /// One device's shard shape (default: a small shape the collective can serve).
    #[arg(long)]
    shape: Option<String>,
}

/// A failure: exit 2 for bad input, 1 otherwise.
fn fail(e: &Error) -> ExitCode {
    eprintln!("tpusim: {e}");
    match e {
        Error::BadInput(_) | Error::NoAdapter(_) | Error::Limit { .. } => ExitCode::from(2),
        _ => ExitCode::from(1),
    }
}

fn exit(result: tpusim::Result<bool>) -> ExitCode {
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => fail(&e),
    }
}

fn executor(backend: Backend) -> tpusim::Result<Box<dyn Executor>> {
    Ok(match backend {
        Backend::Cpu => Box::new(CpuExecutor::new()),
        Backend::Gpu => Box::new(GpuExecutor::from_env()?),
    })
}

fn mesh(devices: usize) -> tpusim::Result<Mesh> {
    if devices < 1 {
        return Err(Error::bad_input("P must be at least 1 (got -p 0)"));
    }
    Mesh::new(devices, "x")
}

struct Prepared {
    collective: Box<dyn Collective>,
    mesh: Mesh,
    shape: Vec<usize>,
    dtype: DType,
    schedule: ScheduleSpec,
    model: Option<CostModel>,
}

fn prepare(a: &RunArgs) -> tpusim::Result<(Prepared, Backend)> {
    let mesh = mesh(a.devices)?;
    let opts = Options {
        op: ReduceOp::parse(&a.op)?,
        perm: a.perm.as_deref().map(Ppermute::parse_perm).transpose()?,
    };
    let collective = collectives::get(&a.collective, &opts)?;
    let shape = array::parse_shape(&a.shape)?;
    let dtype = DType::parse(&a.dtype)?;
    let backend = Backend::parse(&a.backend)?;
    let schedule = ScheduleSpec::parse(&a.schedule)?;
    let model = a.model.model()?;
    // Build the kernel now so that every input problem is reported before the GPU is touched.
    let call = collective.call(&mesh, &shape, dtype)?;
    if let Some(m) = &model {
        m.check_vmem(&call.lower(&mesh)?)?;
    }
    Ok((
        Prepared {
            collective,
            mesh,
            shape,
            dtype,
            schedule,
            model,
        },
        backend,
    ))
}

fn run_one(p: &Prepared, exec: &mut dyn Executor, seed: u64) -> tpusim::Result<bool> {
    let r = collectives::run_scheduled(
        p.collective.as_ref(),
        &p.mesh,
        &p.shape,
        p.dtype,
        exec,
        seed,
        p.schedule,
    )?;
    let shape: Vec<String> = p.shape.iter().map(|d| d.to_string()).collect();
    println!(
        "{:<19} P={:<3} shape={} dtype={} on {}: {} wrong of {}, plan {:.2} ms, run {:.2} ms",
        p.collective.name(),
        p.mesh.size(),
        shape.join("x"),
        p.dtype,
        exec.describe(),
        r.wrong,
        r.total,
        r.plan_time.as_secs_f64() * 1e3,
        r.exec_time.as_secs_f64() * 1e3
    );
    Ok(r.wrong == 0)
}

/// Prints the modeled time and nccl-tests' algbw / busbw; writes the timeline.
fn model_report(
    p: &Prepared,
    m: &CostModel,
    timeline: Option<&std::path::Path>,
) -> tpusim::Result<()> {
    let call = p.collective.call(&p.mesh, &p.shape, p.dtype)?;
    let program = call.lower(&p.mesh)?;
    let mut timed = Timed::new(&program, m.clone());
    tpusim::device_sim::schedule(&program, &mut timed)?;
    let run = timed.finish();
    let n = p.mesh.size();
    let shard_bytes = (p.shape.iter().product::<usize>() * p.dtype.size()) as f64;
    let traffic = Traffic::of(p.collective.name());
    // nccl-tests' size: the gathered output for all_gather, one device's buffer otherwise.
    let size = match traffic {
        Traffic::AllGather => shard_bytes * n as f64,
        _ => shard_bytes,
    };
    let algbw = size / run.seconds.max(f64::MIN_POSITIVE);
    let ideal = ideal_seconds(traffic, n, size, m.link_bw);
    println!(
        "model {}: {:.3} us modeled, size {} B, algbw {:.2} GB/s, busbw {:.2} GB/s; ideal ring bound {:.3} us ({:.0}% of it)",
        m.name,
        run.seconds * 1e6,
        size,
        algbw / 1e9,
        algbw * bus_factor(traffic, n) / 1e9,
        ideal * 1e6,
        if run.seconds > 0.0 { 100.0 * ideal / run.seconds } else { 0.0 }
    );
    if let Some(path) = timeline {
        let json = chrome_trace(p.collective.name(), n, &run.events);
        std::fs::write(path, serde_json::to_string(&json).expect("JSON"))?;
        println!(
            "timeline written to {} ({} events)",
            path.display(),
            run.events.len()
        );
    }
    Ok(())
}

fn print_report(title: &str, replay_cmd: &str, r: &Report) {
    if r.is_clean() {
        println!("{title}: clean under {} schedules", r.schedules);
        return;
    }
    println!(
        "{title}: {} problem{} in {} schedule{}",
        r.findings.len(),
        if r.findings.len() == 1 { "" } else { "s" },
        r.schedules,
        if r.schedules == 1 { "" } else { "s" }
    );
    for (i, f) in r.findings.iter().enumerate() {
        match f.schedule {
            Some(s) => println!(
                "[{}] {} (in {} of {} schedules; replay: {replay_cmd} --replay {s})",
                i + 1,
                f.problem.kind(),
                f.schedules,
                r.schedules
            ),
            None => println!(
                "[{}] {} (found while tracing: every schedule has it; replay: {replay_cmd})",
                i + 1,
                f.problem.kind()
            ),
        }
        for line in f.problem.to_string().lines() {
            println!("    {line}");
        }
    }
}

fn check(a: &CheckArgs) -> tpusim::Result<bool> {
    if a.list_variants {
        for v in variants() {
            println!(
                "{:<15} --variant {:<16} {} [{}]",
                v.collective, v.name, v.summary, v.expect
            );
        }
        return Ok(true);
    }
    let name = a
        .collective
        .as_deref()
        .ok_or_else(|| Error::bad_input("name a collective (or `all`), or pass --list-variants"))?;
    let mesh = mesh(a.devices)?;
    let p = mesh.size();
    let specs = match &a.replay {
        Some(s) => vec![ScheduleSpec::parse(s)?],
        None => {
            if a.schedules == 0 {
                return Err(Error::bad_input("--schedules must be at least 1"));
            }
            ScheduleSpec::check_set(p, a.schedules, a.seed)
        }
    };
    let names: Vec<&str> = if name == "all" {
        if a.variant.is_some() {
            return Err(Error::bad_input(
                "--variant needs one collective, not `all`",
            ));
        }
        collectives::NAMES.to_vec()
    } else {
        collectives::by_name(name)?;
        vec![name]
    };
    let shape = a.shape.as_deref().map(array::parse_shape).transpose()?;
    let mut clean = true;
    for n in names {
        let shape = shape
            .clone()
            .unwrap_or_else(|| collectives::default_shape(n, p));
        let (call, title) = match &a.variant {
            Some(v) => (
                variant(n, v)?.call(&mesh, &shape, DType::F32)?,
                format!("{n} --variant {v} P={p}"),
            ),
            None => (
                collectives::by_name(n)?.call(&mesh, &shape, DType::F32)?,
                format!("{n} P={p}"),
            ),
        };
        let replay = match &a.variant {
            Some(v) => format!("tpusim check {n} -p {p} --variant {v}"),
            None => format!("tpusim check {n} -p {p}"),
        };
        let report = verify::check(&call, &mesh, &specs)?;
        print_report(&title, &replay, &report);
        clean &= report.is_clean();
    }
    Ok(clean)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Info => match adapters_report() {
            Ok(s) => {
                print!("{s}");
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        Cmd::Run(a) => exit(prepare(&a).and_then(|(p, backend)| {
            let mut exec = executor(backend)?;
            let ok = run_one(&p, exec.as_mut(), a.seed)?;
            if let Some(m) = &p.model {
                model_report(&p, m, a.model.timeline.as_deref())?;
            }
            Ok(ok)
        })),
        Cmd::Trace {
            collective,
            devices,
            format,
        } => exit((|| {
            let mesh = mesh(devices)?;
            let c = collectives::by_name(&collective)?;
            if format != "markdown" && format != "json" {
                return Err(Error::bad_input(format!(
                    "unknown format `{format}` (expected markdown or json)"
                )));
            }
            let table = tpusim::trace::trace(c.as_ref(), &mesh)?;
            if format == "json" {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&table.json()).expect("JSON")
                );
            } else {
                print!("{}", table.markdown());
            }
            Ok(true)
        })()),
        Cmd::Check(a) => exit(check(&a)),
        Cmd::Bench(a) => exit(bench(&a)),
        Cmd::Demo { backend } => exit(Backend::parse(&backend).and_then(|b| {
            let mut exec = executor(b)?;
            println!("tpusim demo on {}", exec.describe());
            let mut ok = true;
            for c in collectives::all() {
                for dtype in [DType::F32, DType::I32] {
                    let p = Prepared {
                        collective: collectives::by_name(c.name())?,
                        mesh: Mesh::new(4, "x")?,
                        shape: vec![8, 128],
                        dtype,
                        schedule: ScheduleSpec::Eager,
                        model: None,
                    };
                    ok &= run_one(&p, exec.as_mut(), 0)?;
                }
            }
            Ok(ok)
        })),
    }
}
