//! The scheduler: runs a traced [`crate::ir::Program`] against semaphore state under a
//! [`Policy`] and emits the [`crate::ir::Schedule`] of data ops the executors run. An
//! [`Observer`] sees every event of a run in order: entries, ops, DMA completions, and
//! every credit and consumption of a semaphore (the verifier, the step tables and the
//! cost model listen instead of re-deriving semaphore state).

pub mod credits;
mod engine;
pub mod ids;
pub mod observer;
mod pending;
pub mod policies;

pub use engine::{observe, run_steps, schedule, schedule_driven, schedule_observed, Resume, Steps};
pub use observer::{Credit, Driver, NoObserver, Observer, Split};
pub use policies::{Choice, Choices, Eager, Policy, ScheduleSpec};
