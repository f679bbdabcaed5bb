//! The `tpusim` command line: run, demo and info.

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use tpusim::collectives::{self, Collective, Options, Ppermute};
use tpusim::exec::cpu::CpuExecutor;
use tpusim::exec::gpu::{adapters_report, GpuExecutor};
use tpusim::exec::{Backend, Executor};
use tpusim::kernel::ReduceOp;
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
}

/// A run's failure: exit 2 for bad input, 1 otherwise.
fn fail(e: &Error) -> ExitCode {
    eprintln!("tpusim: {e}");
    match e {
        Error::BadInput(_) | Error::NoAdapter(_) | Error::Limit { .. } => ExitCode::from(2),
        _ => ExitCode::from(1),
    }
}

fn executor(backend: Backend) -> tpusim::Result<Box<dyn Executor>> {
    Ok(match backend {
        Backend::Cpu => Box::new(CpuExecutor::new()),
        Backend::Gpu => Box::new(GpuExecutor::from_env()?),
    })
}

struct Prepared {
    collective: Box<dyn Collective>,
    mesh: Mesh,
    shape: Vec<usize>,
    dtype: DType,
    backend: Backend,
}

fn prepare(a: &RunArgs) -> tpusim::Result<Prepared> {
    if a.devices < 1 {
        return Err(Error::bad_input("P must be at least 1 (got -p 0)"));
    }
    let opts = Options {
        op: ReduceOp::parse(&a.op)?,
        perm: a.perm.as_deref().map(Ppermute::parse_perm).transpose()?,
    };
    let collective = collectives::get(&a.collective, &opts)?;
    let mesh = Mesh::new(a.devices, "x")?;
    let shape = array::parse_shape(&a.shape)?;
    let dtype = DType::parse(&a.dtype)?;
    let backend = Backend::parse(&a.backend)?;
    // Build the kernel now so that every input problem is reported before the GPU is touched.
    collective.call(&mesh, &shape, dtype)?;
    Ok(Prepared {
        collective,
        mesh,
        shape,
        dtype,
        backend,
    })
}

fn run_one(p: &Prepared, exec: &mut dyn Executor, seed: u64) -> tpusim::Result<bool> {
    let r = collectives::run_checked(
        p.collective.as_ref(),
        &p.mesh,
        &p.shape,
        p.dtype,
        exec,
        seed,
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
        Cmd::Run(a) => {
            let result = prepare(&a).and_then(|p| {
                let mut exec = executor(p.backend)?;
                run_one(&p, exec.as_mut(), a.seed)
            });
            match result {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(e) => fail(&e),
            }
        }
        Cmd::Demo { backend } => {
            let result = Backend::parse(&backend).and_then(|b| {
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
                            backend: b,
                        };
                        ok &= run_one(&p, exec.as_mut(), 0)?;
                    }
                }
                Ok(ok)
            });
            match result {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(e) => fail(&e),
            }
        }
    }
}
