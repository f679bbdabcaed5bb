//! The Pallas-like kernel API: specs, refs, semaphores and the per-device context.
//!
//! A kernel is a Rust closure called once per (device, grid point). Control flow is
//! host-known (`pl.when` is a Rust `if`), so each call records ops instead of running
//! them; [`PallasCall::lower`] collects them into a [`crate::ir::Program`].

mod ctx;
mod lower;
mod pull;
mod refs;
mod spec;
mod temps;
mod values;

pub use crate::error::KernelErrorKind;
pub use crate::ir::{MemorySpace, ReduceOp, SemKind};
pub use crate::source::{Iteration, SourceLoc};
pub use ctx::{AsyncCopy, AsyncRemoteCopy, Ctx, DmaSide, MAX_SCOPED};
pub use pull::{NotifyOp, WaitCmp};
pub use refs::{ds, Ds, Ref, Sem};
pub use spec::{Arg, ArgKey, Args, GridSpec, KernelFn, OperandSpec, PallasCall, ScratchSpec};
pub use values::Value;
