//! The device simulator core: traced programs, the scheduler and its policies.
//!
//! Data flow: a kernel is lowered to a [`Program`] (per-device ops), [`schedule`] runs
//! it against semaphore state under a [`Policy`] and emits a [`Schedule`] of data ops,
//! and an executor (`crate::exec`) runs that schedule on the GPU or the CPU.

pub mod policy;
pub mod program;
mod schedule;
mod scheduler;

pub use policy::{Choice, Eager, Policy};
pub use program::{DataOp, Layout, Program, View};
pub use schedule::Schedule;
pub use scheduler::schedule;
