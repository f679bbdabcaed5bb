//! The wgpu executor and its parts: adapter setup, pipelines, binding windows.

mod bandwidth;
pub mod batch;
mod context;
mod executor;
mod pipelines;
mod pool;
mod recorder;
pub mod select;
pub mod windows;

pub use context::{adapters_report, GpuContext};
pub use executor::{GpuExecutor, GpuRun};
pub use pipelines::{Params, SHADERS};
pub use pool::BufferPool;
