//! The `tpusim` command line: one module per subcommand, shared helpers here.

mod apply;
mod bench;
mod check;
mod driver_env;
mod limits;
mod out;
mod run;
mod trace;

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use tpusim::exec::cpu::CpuExecutor;
use tpusim::exec::gpu::{adapters_report, GpuExecutor};
use tpusim::exec::{Backend, Executor};
use tpusim::{Error, Mesh};

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
    Run(run::RunArgs),
    /// Verify a collective under many schedules: races, deadlocks, semaphore misuse.
    Check(check::CheckArgs),
    /// Run a collective on your own data: a .npy array sharded over the devices, result to .npy.
    Apply(apply::ApplyArgs),
    /// Print the step table of a collective: what every device holds after every grid point.
    Trace(trace::TraceArgs),
    /// Sweep sizes like nccl-tests: time, algorithm and bus bandwidth, correctness.
    Bench(bench::BenchArgs),
    /// Run every collective once, small, on the default adapter.
    Demo {
        /// Backend: gpu or cpu.
        #[arg(long, default_value = "gpu")]
        backend: String,
    },
    /// Print the adapters wgpu sees and the chosen adapter's limits.
    Info,
}

/// A failure: exit 2 for bad input, 1 otherwise.
pub fn fail(e: &Error) -> ExitCode {
    eprintln!("tpusim: {e}");
    match e {
        Error::BadInput(_)
        | Error::NoAdapter(_)
        | Error::Limit { .. }
        | Error::TooLarge(_)
        | Error::File { .. } => ExitCode::from(2),
        _ => ExitCode::from(1),
    }
}

pub fn exit(result: tpusim::Result<bool>) -> ExitCode {
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) if out::closed(&e) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

pub fn executor(backend: Backend) -> tpusim::Result<Box<dyn Executor>> {
    Ok(match backend {
        Backend::Cpu => Box::new(CpuExecutor::new()),
        Backend::Gpu => Box::new(GpuExecutor::from_env()?),
    })
}

pub fn mesh(devices: usize) -> tpusim::Result<Mesh> {
    if devices < 1 {
        return Err(Error::bad_input("P must be at least 1 (got -p 0)"));
    }
    Mesh::new(devices, "x")
}

/// Parses the command line and runs it.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // After parsing: clap exits the process on a bad command line, before this guard could remove its directory.
    let _runtime_dir = driver_env::quiet_driver();
    match cli.cmd {
        Cmd::Info => exit(adapters_report().and_then(|s| out::out!("{s}").map(|()| true))),
        Cmd::Run(a) => exit(run::run(&a)),
        Cmd::Apply(a) => exit(apply::apply(&a)),
        Cmd::Trace(a) => exit(trace::trace(&a)),
        Cmd::Check(a) => exit(check::check(&a)),
        Cmd::Bench(a) => exit(bench::bench(&a)),
        Cmd::Demo { backend } => exit(run::demo(&backend)),
    }
}
