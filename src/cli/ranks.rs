//! The command line on ranks: under an MPI launcher (`mpirun`, `srun`) with a build of
//! `--features mpi`, this process is one rank; `run`, `bench`, `apply` and `demo` split
//! the devices over the ranks, while `check`, `trace` and `info` (which hold no data)
//! run on rank 0 alone. Only rank 0 prints.

use std::sync::{Arc, Mutex};
use tpusim::budget::Share;
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
