//! Shared test helpers: one GPU executor per test binary (a missing adapter fails).
#![allow(dead_code)]

use std::sync::{Mutex, MutexGuard, OnceLock};
use tpusim::exec::gpu::GpuExecutor;

static GPU: OnceLock<Mutex<GpuExecutor>> = OnceLock::new();

/// The shared GPU executor. Panics (failing the test) when no adapter is available:
/// in CI a missing adapter is a failure, never a silent pass.
pub fn gpu() -> MutexGuard<'static, GpuExecutor> {
    GPU.get_or_init(|| {
        let g =
            GpuExecutor::from_env().unwrap_or_else(|e| panic!("GPU tests need an adapter: {e}"));
        Mutex::new(g)
    })
    .lock()
    .unwrap_or_else(|p| p.into_inner())
}
