//! The device simulator core: traced programs, the scheduler and its policies.
//!
//! Data flow: a kernel is lowered to a [`Program`] (per-device ops), [`schedule`] runs
//! it against semaphore state under a [`Policy`] and emits a [`Schedule`] of data ops,
//! and an executor (`crate::exec`) runs that schedule on the GPU or the CPU. An
//! [`Observer`] sees every event of a run in order (the race checker is one).

pub mod credits;
pub mod groups;
pub mod ids;
pub mod observer;
pub mod policies;
pub mod program;
mod schedule;
mod scheduler;
mod source_files;

pub use observer::{NoObserver, Observer};
pub use policies::{Choice, Choices, Eager, Policy, ScheduleSpec};
pub use program::{DataOp, Layout, Program, View};
pub use schedule::Schedule;
pub use scheduler::{observe, schedule, schedule_observed};
