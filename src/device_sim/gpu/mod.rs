//! Pipeline step device_sim, on the GPU: a schedule as WGSL shaders and buffer copies.
//!
//! The wgpu executor and its parts. A schedule is lowered (per op, or as one arena
//! program) into a [`Recording`] of plain data; one engine realizes it on the device.

mod bandwidth;
pub mod batch;
pub mod boxes;
mod codes;
pub mod commands;
mod device;
mod engine;
mod executor;
mod levels;
mod limits;
mod lower_arena;
mod lower_compute;
mod lower_ops;
mod lower_region;
mod pipelines;
pub mod region_shader;
pub mod select;
pub mod shaders;
pub mod windows;

pub use commands::{Lowering, Recording};
pub use device::{adapters_report, BufferPool, GpuContext};
pub use engine::GpuRun;
pub use executor::{ArenaMode, GpuExecutor};
pub use shaders::SHADERS;
