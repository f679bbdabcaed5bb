//! The wgpu executor and its parts: adapter setup, pipelines, binding windows.

mod arena;
mod bandwidth;
pub mod batch;
mod codes;
mod context;
mod executor;
mod pipelines;
mod pool;
pub mod program;
mod recorder;
pub mod select;
pub mod shaders;
pub mod windows;

pub use arena::ArenaRun;
pub use context::{adapters_report, GpuContext};
pub use executor::{ArenaMode, GpuExecutor, GpuRun};
pub use pipelines::Params;
pub use pool::BufferPool;
pub use shaders::SHADERS;
