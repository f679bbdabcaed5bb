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
    // Build the kernel now so that every input problem is reported before the GPU is touched.
    collective.call(&mesh, &shape, dtype)?;
    Ok((
        Prepared {
            collective,
            mesh,
            shape,
            dtype,
            schedule,
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
            run_one(&p, exec.as_mut(), a.seed)
        })),
        Cmd::Check(a) => exit(check(&a)),
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
                    };
                    ok &= run_one(&p, exec.as_mut(), 0)?;
                }
            }
            Ok(ok)
        })),
    }
}
