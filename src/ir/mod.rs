//! The intermediate representation every pipeline step shares: a traced [`Program`]
//! (the memory [`Layout`] every device has and each device's [`Op`]s: DMA starts, waits,
//! signals, data ops on [`View`]s), and the [`Schedule`] of data ops the scheduler emits
//! for the executors. The index arithmetic is defined here once: a semaphore's slot
//! ([`Layout::sem_slot`]), an allocation's place among every device's
//! ([`Memory::index`]), whether a wait consumes ([`WaitKind::decrements`]), and the
//! staging area of DMAs in flight ([`Schedule::memory`]). A sequence of kernel
//! invocations is one program too ([`sequence()`]).

mod compute;
mod data;
mod dma;
mod first_fit;
mod layout;
mod op;
mod program;
mod schedule;
mod sequence;
mod site;
mod uninit;
mod view;
mod written;

pub use compute::{
    bitcastable, dot_shape, Binary, Comparison, Compute, ComputeKind, DotDims, Operand, Reduction,
    Unary, Work,
};
pub use data::{DataOp, ReduceOp, Views};
pub use dma::{Completion, Dma};
pub use first_fit::FirstFit;
pub use layout::{
    AllocId, Allocation, Layout, MemorySpace, PerDevice, SemId, SemInfo, SemKind, VmemUse,
};
pub use op::{Cmp, Op, OpKind, Remap, WaitKind};
pub use program::{grid_coords, holds, Feed, Invocation, Program};
pub use schedule::{Memory, Schedule};
pub use sequence::{feed, sequence};
pub use site::OpSite;
pub use uninit::{fills, Uninit};
pub use view::{Block, SemRef, View};
pub use written::Written;
