//! The executors Python calls run on: the CPU executor, or one GPU executor per thread
//! opened on first use (its buffer pool kept across calls).

use crate::errors::{NoAdapter, OrPy};
use pyo3::prelude::*;
use std::cell::OnceCell;
use std::rc::Rc;
use tpusim::exec::cpu::CpuExecutor;
use tpusim::exec::gpu::GpuExecutor;
use tpusim::exec::{Backend, Chosen, Executor, Prepared};
use tpusim::ir::{Program, Schedule};

thread_local! {
    /// One GPU executor per thread, opened on first use (buffers pooled across calls).
    static GPU: OnceCell<std::result::Result<Rc<GpuExecutor>, String>> = const { OnceCell::new() };
    /// What `backend="auto"` chose on this thread.
    static AUTO: OnceCell<std::result::Result<Chosen, String>> = const { OnceCell::new() };
}

/// A shared executor behind the `&mut` the pipeline's steps take.
pub struct Shared(Rc<dyn Executor>, Chosen);

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
    fn copy_bandwidth(&self, bytes: u64) -> tpusim::Result<Option<f64>> {
        self.0.copy_bandwidth(bytes)
    }
    fn buffers_in_host_memory(&self) -> bool {
        self.0.buffers_in_host_memory()
    }
    fn is_gpu(&self) -> bool {
        self.0.is_gpu()
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

fn chosen(backend: &str) -> PyResult<tpusim::exec::Chosen> {
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
