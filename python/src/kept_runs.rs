//! Prepared runs kept across calls through JAX, on the GPU thread: a `pallas_call`
//! runs the same plan again and again, and preparing a run on the GPU executor lowers
//! the schedule and makes its GPU objects (buffers, bind groups, parameter blocks) each
//! time. A kept run is restarted instead ([`Prepared::restart`]: its memory as a
//! prepared run's), which keeps everything but the data.

use crate::errors::OrPy;
use crate::executors::Shared;
use pyo3::prelude::*;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use tpusim::device_sim::{Executor, Prepared};
use tpusim::run::Plan;

/// Runs kept per thread, most recent first (each holds its buffers).
const KEPT: usize = 4;

/// A run of `plan` on `exec`, with what it borrows.
struct Kept {
    // Declared first, so dropped first: it borrows the plan and the executor below.
    run: Box<dyn Prepared + 'static>,
    plan: Arc<Plan>,
    exec: Rc<dyn Executor>,
}

thread_local! {
    static RUNS: RefCell<Vec<Kept>> = const { RefCell::new(Vec::new()) };
}

/// `f` on a run of `plan` on `exec` ready for new inputs: the one kept from this
/// thread's last call of the same plan on the same executor, restarted, else one
/// prepared anew (then kept). A run whose call fails is not kept.
pub fn with_run<R>(
    exec: &Shared,
    plan: &Arc<Plan>,
    f: impl FnOnce(&mut dyn Prepared) -> PyResult<R>,
) -> PyResult<R> {
    let exec = exec.inner();
    let same = |k: &Kept| Arc::ptr_eq(&k.plan, plan) && Rc::ptr_eq(&k.exec, &exec);
    let found = RUNS.with(|r| {
        let mut runs = r.borrow_mut();
        let i = runs.iter().position(same)?;
        Some(runs.remove(i))
    });
    let restarted = match found {
        Some(mut k) => k.run.restart().py()?.then_some(k),
        None => None,
    };
    let mut kept = match restarted {
        Some(k) => k,
        None => {
            let run = exec.prepare(&plan.program, &plan.schedule).py()?;
            // SAFETY: `run` borrows the executor (in the allocation `exec` keeps alive)
            // and the plan's program and schedule (in the allocation `plan` keeps
            // alive); neither moves, and `Kept` drops `run` before both.
            let run: Box<dyn Prepared + 'static> = unsafe { std::mem::transmute(run) };
            Kept {
                run,
                plan: plan.clone(),
                exec,
            }
        }
    };
    let out = f(kept.run.as_mut())?;
    RUNS.with(|r| {
        let mut runs = r.borrow_mut();
        runs.insert(0, kept);
        runs.truncate(KEPT);
    });
    Ok(out)
}
