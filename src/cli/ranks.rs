//! The command line on ranks: under an MPI launcher (`mpirun`, `srun`) with a build of
//! `--features mpi`, this process is one rank; `run`, `bench`, `apply` and `demo` split
//! the devices over the ranks, while `check`, `trace` and `info` (which hold no data)
//! run on rank 0 alone. Only rank 0 prints.

use clap::ArgMatches;
use std::sync::{Arc, Mutex};
use tpusim::budget::Share;
use tpusim::device_sim::ranks::agree::{self, Field};
use tpusim::device_sim::ranks::{RankExecutor, Ranks};
use tpusim::device_sim::Executor;

static RANKS: Mutex<Option<Arc<Ranks>>> = Mutex::new(None);

/// Joins the MPI job this process was launched in, if any (the ranks, once per process).
pub fn launch() -> Option<Arc<Ranks>> {
    #[cfg(feature = "mpi")]
    if tpusim::device_sim::ranks::mpi::launched() {
        let comm = tpusim::device_sim::ranks::mpi::MpiComm::init()?;
        let ranks = Arc::new(Ranks::new(Box::new(comm)));
        if !ranks.is_root() {
            super::out::set_quiet();
        }
        *RANKS.lock().unwrap_or_else(|e| e.into_inner()) = Some(ranks.clone());
        return Some(ranks);
    }
    None
}

/// Leaves the MPI job (once nothing else holds the ranks, MPI is finalized).
pub fn finish() {
    RANKS.lock().unwrap_or_else(|e| e.into_inner()).take();
}

/// The ranks, when this process is one.
pub fn current() -> Option<Arc<Ranks>> {
    RANKS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// How the work is shared: one process, or these ranks.
pub fn share() -> Share {
    current().map_or_else(Share::default, |r| Share {
        ranks: r.size(),
        on_host: r.on_host(),
    })
}

/// This process's local rank on its host (which GPU it takes), when on ranks.
pub fn local_rank() -> Option<usize> {
    current().map(|r| r.local_rank())
}

/// `exec` as this rank's part of a partitioned run, when on ranks.
pub fn wrap(exec: Box<dyn Executor>) -> Box<dyn Executor> {
    match current() {
        Some(r) => Box::new(RankExecutor::new(exec, r)),
        None => exec,
    }
}

/// True where a single-process command runs: without ranks, or on rank 0.
pub fn runs_alone() -> bool {
    current().is_none_or(|r| r.is_root())
}

/// Environment variables that change what a run computes (compared across ranks).
const ENV: [&str; 1] = ["TPUSIM_UNINIT"];

/// The command line `matches` (of `command`) in canonical form, for the ranks to compare
/// ([`Ranks::agree`]): the build, the subcommand, then every argument as it takes effect
/// (given or defaulted, `--op=sum` and `--op sum` alike), by name, and the environment
/// that changes results.
pub fn command_line(command: &clap::Command, matches: &ArgMatches) -> Vec<Field> {
    let mut fields = vec![(
        "the build".to_string(),
        format!(
            "tpusim {} (git {})",
            env!("CARGO_PKG_VERSION"),
            env!("TPUSIM_GIT")
        ),
    )];
    let (name, sub) = match matches.subcommand() {
        Some((name, sub)) => (name, sub),
        None => ("", matches),
    };
    fields.push((agree::COMMAND.to_string(), name.to_string()));
    let cmd = command.find_subcommand(name).unwrap_or(command);
    let mut args: Vec<Field> = cmd
        .get_arguments()
        .filter_map(|arg| {
            let id = arg.get_id().as_str();
            let values = sub.try_get_raw(id).ok().flatten()?;
            let shown = match (arg.get_short(), arg.get_long()) {
                (Some(short), Some(long)) => format!("-{short}/--{long}"),
                (None, Some(long)) => format!("--{long}"),
                _ => format!("<{id}>"),
            };
            let values: Vec<String> = values.map(|v| v.to_string_lossy().into_owned()).collect();
            Some((shown, values.join(" ")))
        })
        .collect();
    args.sort();
    fields.extend(args);
    for var in ENV {
        if let Some(v) = std::env::var_os(var) {
            fields.push((var.to_string(), v.to_string_lossy().into_owned()));
        }
    }
    fields
}

/// Refuses to go on unless every rank was started with the same command line (see
/// [`command_line`]): a collective call before any other.
pub fn agree(ranks: &Ranks, command: &clap::Command, matches: &ArgMatches) -> tpusim::Result<()> {
    ranks.agree(&command_line(command, matches))
}
