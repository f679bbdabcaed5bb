//! The `tpusim` command line: one module per subcommand, shared helpers here. It runs
//! over a [`Registry`]: a user crate gets every subcommand for its own collectives with
//! `tpusim::cli::main_with(Registry::builtin().with(Arc::new(MyCollective))?)`.

mod apply;
mod apply_ranks;
mod bench;
mod check;
mod driver_env;
mod out;
mod place;
mod plot;
mod ranks;
mod run;
mod trace;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;
use tpusim::collectives::Registry;
use tpusim::device_sim::gpu::adapters_report;
use tpusim::device_sim::Executor;
use tpusim::Error;

#[derive(Parser)]
#[command(
    name = "tpusim",
    version,
    about = "Simulate TPU (Pallas) distributed kernels on one GPU"
)]
struct Cli {
    /// Print results only: no executor line, warnings or progress (errors still print).
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

/// The command line's definition (every subcommand and flag), for its tests and docs.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one collective on deterministic random data and check it against XLA semantics.
    Run(Box<run::RunArgs>),
    /// Verify a collective under many schedules: races, deadlocks, semaphore misuse.
    Check(check::CheckArgs),
    /// Run a collective on your own data: a .npy array sharded over the devices, result to .npy.
    Apply(apply::ApplyArgs),
    /// Print the step table of a collective: what every device holds after every grid point.
    Trace(trace::TraceArgs),
    /// Sweep sizes like nccl-tests: time, algorithm and bus bandwidth, correctness.
    Bench(Box<bench::BenchArgs>),
    /// Draw bench result files (busbw and time against size) or a timeline, as SVG or PNG.
    Plot(plot::PlotArgs),
    /// Run every collective once, small, on the default executor.
    Demo {
        /// Executor: auto (the GPU one on a hardware adapter, else the CPU one), gpu or cpu.
        #[arg(long, default_value = "auto")]
        backend: String,
    },
    /// Print the adapters wgpu sees and the chosen adapter's limits.
    Info,
}

/// Prints a failure and says the exit status (`tpusim::device_sim::ranks::status_of`: 2 for
/// bad input, 1 otherwise).
pub fn fail(e: &Error) -> ExitCode {
    if !out::quiet() {
        eprintln!("tpusim: {e}");
    }
    ExitCode::from(tpusim::device_sim::ranks::status_of(e))
}

/// The exit status of a command's result: 0 success, 1 a failed check, else as [`fail`].
pub fn exit(result: tpusim::Result<bool>) -> ExitCode {
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) if out::closed(&e) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// The executor `chosen` stands for (on ranks, this rank's part: with the GPU of its
/// local rank). Where `auto` chose it, one line says which and why, once per command
/// (the result lines name it only).
pub fn executor(chosen: &tpusim::device_sim::Chosen) -> tpusim::Result<Box<dyn Executor>> {
    let exec = ranks::wrap(chosen.open_plain(ranks::local_rank())?);
    if out::notes() && chosen.why.is_some() {
        out::outln!("executor: {}", chosen.describe(&exec.describe()))?;
    }
    Ok(exec)
}

/// Runs a command that holds no data (`check`, `trace`, `info`) on rank 0 alone.
fn alone(f: impl FnOnce() -> tpusim::Result<bool>) -> tpusim::Result<bool> {
    if ranks::runs_alone() {
        f()
    } else {
        Ok(true)
    }
}

/// Parses the command line and runs it over the collectives of `registry`.
pub fn main_with(registry: Registry) -> ExitCode {
    let command = Cli::command();
    let matches = command.clone().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if cli.quiet {
        out::set_no_notes();
    }
    let reg = &registry;
    // After parsing: clap exits the process on a bad command line, before this guard could remove its directory.
    let _runtime_dir = driver_env::quiet_driver();
    // SIGINT, SIGTERM and SIGHUP remove the temporary file of an output being written
    // (without the handler a signal still ends the process; only the file would stay).
    let _ = tpusim::files::remove_temporaries_on_signals();
    let on_ranks = ranks::launch();
    // Ranks started with different command lines stop here, all of them, before any
    // waits for another.
    let agreed = match &on_ranks {
        Some(r) => ranks::agree(r, &command, &matches),
        None => Ok(()),
    };
    let result = agreed.and_then(|()| match cli.cmd {
        Cmd::Info => alone(|| adapters_report().and_then(|s| out::out!("{s}").map(|()| true))),
        Cmd::Run(a) => run::run(reg, &a),
        Cmd::Apply(a) => apply::apply(reg, &a),
        Cmd::Trace(a) => alone(|| trace::trace(reg, &a)),
        Cmd::Check(a) => alone(|| check::check(reg, &a)),
        Cmd::Bench(a) => bench::bench(reg, &a),
        Cmd::Plot(a) => alone(|| plot::plot(&a)),
        Cmd::Demo { backend } => run::demo(reg, &backend),
    });
    // The ranks agree on the outcome, so every one exits with the same status.
    let result = match &on_ranks {
        Some(r) => r.conclude(result),
        None => result,
    };
    // Rank 0 says how it ended before the ranks finish together (MPI's finalize): a
    // rank that exited first could otherwise have mpirun end rank 0 before it spoke.
    let code = exit(result);
    drop(on_ranks);
    ranks::finish();
    code
}
