//! The executors Python calls run on: the CPU executor, or one GPU executor per thread
//! opened on first use (its buffer pool kept across calls). Simulated `pallas_call`s on
//! the GPU all run on one thread of tpusim's own ([`on_gpu_thread`]), whichever XLA
//! thread leads their round.

use crate::errors::{NoAdapter, OrPy};
use pyo3::prelude::*;
use std::cell::OnceCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::mpsc::{self, Sender};
use std::sync::{Mutex, OnceLock};
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::device_sim::gpu::GpuExecutor;
use tpusim::device_sim::{Backend, BlockedStretch, Chosen, Executor, Prepared};
use tpusim::ir::{Program, Schedule};

thread_local! {
    /// One GPU executor per thread, opened on first use (buffers pooled across calls).
    static GPU: OnceCell<std::result::Result<Rc<GpuExecutor>, String>> = const { OnceCell::new() };
    /// What `backend="auto"` chose on this thread.
    static AUTO: OnceCell<std::result::Result<Chosen, String>> = const { OnceCell::new() };
}

/// A shared executor behind the `&mut` the pipeline's steps take.
pub struct Shared(Rc<dyn Executor>, Chosen);

impl Shared {
    /// The executor itself (the same for every call on this thread).
    pub fn inner(&self) -> Rc<dyn Executor> {
        self.0.clone()
    }
}

impl Executor for Shared {
    fn describe(&self) -> String {
        self.1.describe(&self.0.describe())
    }
    fn check(&self, program: &Program) -> tpusim::Result<()> {
        self.0.check(program)
    }
    fn prepare<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
    ) -> tpusim::Result<Box<dyn Prepared + 'a>> {
        self.0.prepare(program, schedule)
    }
    fn prepare_literal<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
    ) -> tpusim::Result<Box<dyn Prepared + 'a>> {
        self.0.prepare_literal(program, schedule)
    }
    fn prepare_reading<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
        outputs: &[usize],
    ) -> tpusim::Result<Box<dyn Prepared + 'a>> {
        self.0.prepare_reading(program, schedule, outputs)
    }
    fn prepare_pieces<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
        cuts: &[usize],
    ) -> tpusim::Result<Box<dyn Prepared + 'a>> {
        self.0.prepare_pieces(program, schedule, cuts)
    }
    fn copy_bandwidth(&self, bytes: u64) -> tpusim::Result<Option<f64>> {
        self.0.copy_bandwidth(bytes)
    }
    fn buffers_in_host_memory(&self) -> bool {
        self.0.buffers_in_host_memory()
    }
    fn is_gpu(&self) -> bool {
        self.0.is_gpu()
    }
    fn blocked_stretches(&self, program: &Program, schedule: &Schedule) -> Vec<BlockedStretch> {
        self.0.blocked_stretches(program, schedule)
    }
    fn skipped_ops(&self, program: &Program, schedule: &Schedule) -> Vec<usize> {
        self.0.skipped_ops(program, schedule)
    }
}

/// The GPU executor of this thread, opened on first use.
fn gpu() -> PyResult<Rc<dyn Executor>> {
    GPU.with(|g| {
        match g.get_or_init(|| {
            GpuExecutor::from_env()
                .map(Rc::new)
                .map_err(|e| e.to_string())
        }) {
            Ok(e) => Ok(e.clone() as Rc<dyn Executor>),
            Err(m) => Err(NoAdapter::new_err(m.clone())),
        }
    })
}

/// `backend` (`auto`, `gpu` or `cpu`) resolved as the command line resolves it: `"gpu"`
/// or `"cpu"` (what `auto` stands for on this machine, decided once per thread).
#[pyfunction]
pub fn resolve_backend(backend: &str) -> PyResult<&'static str> {
    Ok(if chosen(backend)?.is_gpu() {
        "gpu"
    } else {
        "cpu"
    })
}

fn chosen(backend: &str) -> PyResult<tpusim::device_sim::Chosen> {
    Ok(match Backend::parse(backend).py()? {
        Backend::Auto => AUTO
            .with(|a| {
                a.get_or_init(|| Backend::Auto.resolve().map_err(|e| e.to_string()))
                    .clone()
            })
            .map_err(NoAdapter::new_err)?,
        b => b.resolve().py()?,
    })
}

/// The executor for `backend` (`auto`, `gpu` or `cpu`; `auto` decided once per thread,
/// as the command line decides it).
pub fn executor(backend: &str) -> PyResult<Shared> {
    let chosen = chosen(backend)?;
    let exec: Rc<dyn Executor> = match chosen.backend {
        Backend::Gpu => gpu()?,
        _ => Rc::new(CpuExecutor::new()),
    };
    Ok(Shared(exec, chosen))
}

/// A piece of work for the GPU thread.
type Task = Box<dyn FnOnce() + Send>;

/// The thread that runs every simulated `pallas_call` on the GPU (its executor, like
/// any, belongs to the thread that opened it), started on first use.
fn gpu_thread() -> PyResult<&'static Mutex<Sender<Task>>> {
    static THREAD: OnceLock<std::result::Result<Mutex<Sender<Task>>, String>> = OnceLock::new();
    THREAD
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Task>();
            std::thread::Builder::new()
                .name("tpusim-gpu".into())
                .spawn(move || rx.into_iter().for_each(|task| task()))
                .map(|_| Mutex::new(tx))
                .map_err(|e| format!("tpusim could not start its GPU thread: {e}"))
        })
        .as_ref()
        .map_err(|m| pyo3::exceptions::PyRuntimeError::new_err(m.clone()))
}

/// Runs `f` on the GPU thread and waits for it (without the GIL where the caller has
/// let it go: `f` may take it).
pub fn on_gpu_thread<R: Send + 'static>(
    f: impl FnOnce() -> PyResult<R> + Send + 'static,
) -> PyResult<R> {
    let (tx, rx) = mpsc::sync_channel(1);
    let task: Task = Box::new(move || {
        let r = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
            Err(pyo3::exceptions::PyRuntimeError::new_err(
                "tpusim's GPU thread panicked",
            ))
        });
        let _ = tx.send(r);
    });
    let gone = || pyo3::exceptions::PyRuntimeError::new_err("tpusim's GPU thread has stopped");
    gpu_thread()?
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send(task)
        .map_err(|_| gone())?;
    rx.recv().map_err(|_| gone())?
}

/// Whether `backend` runs on the GPU executor (`auto` decided as for [`executor`]).
pub fn is_gpu(backend: &str) -> PyResult<bool> {
    Ok(chosen(backend)?.is_gpu())
}
