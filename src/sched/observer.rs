//! What the scheduler reports as it runs: hooks for the verifier (and any other
//! analysis that must see the same order of events).

use super::policies::Policy;
use crate::ir::{Completion, DataOp, Op, OpSite, SemRef};

/// What credited a semaphore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credit {
    /// Completion `side` of DMA `id` (its bytes).
    Dma {
        /// DMA id.
        id: usize,
        /// Which completion.
        side: Completion,
    },
    /// A signal by `device` (`semaphore_signal`, or a seed-003 `notify`); `set`: the
    /// value was overwritten rather than added to.
    Signal {
        /// The signalling device.
        device: usize,
        /// A seed-003 `Set`.
        set: bool,
    },
}

/// Receives every event of a scheduled run, in schedule order. All hooks default to nothing.
pub trait Observer {
    /// Device `device` entered kernel invocation `invocation` (before its first op of it,
    /// once it has left the invocation before).
    fn enter(&mut self, _device: usize, _invocation: usize) {}
    /// Device `device` ran data op `op` (compute, a pull, or a prologue copy when `site` is None).
    fn data(&mut self, _device: usize, _op: &DataOp, _site: Option<&OpSite>) {}
    /// Device `device` started DMA `dma`.
    fn dma_start(&mut self, _device: usize, _dma: usize) {}
    /// Completion `side` of DMA `dma` happened and credited its semaphore. `moved` are
    /// the data ops the schedule runs at this point for the DMA (its copies into the
    /// destination, or into the staging area, a row each), if any.
    fn dma_complete(&mut self, _dma: usize, _side: Completion, _moved: &[DataOp]) {}
    /// Semaphore `sem` gained `amount` (or was set to it, for a seed-003 `Set`): the one
    /// report of every credit, in schedule order.
    fn credit(&mut self, _sem: SemRef, _amount: u64, _by: Credit) {}
    /// Semaphore `sem` lost `amount`: a wait that decrements passed (reported before its
    /// [`Observer::acquire`]).
    fn consume(&mut self, _sem: SemRef, _amount: u64) {}
    /// Device `device` ran `op`, a signal (a release).
    fn release(&mut self, _device: usize, _op: &Op) {}
    /// Device `device` passed `op`, a wait (an acquire).
    fn acquire(&mut self, _device: usize, _op: &Op) {}
    /// Device `device` passed a step mark (`Ctx::trace_step`).
    fn mark(&mut self, _device: usize, _label: &str) {}
    /// Device `device` ran `op`, a scalar read ([`crate::ir::OpKind::Read`]).
    fn scalar_read(&mut self, _device: usize, _op: &Op) {}
    /// Device `device` finished an op; its next op belongs to grid point `next_grid`
    /// (row-major), or it is done (`None`).
    fn after_step(&mut self, _device: usize, _next_grid: Option<usize>) {}
}

/// An observer that ignores everything.
#[derive(Debug, Default)]
pub struct NoObserver;

impl Observer for NoObserver {}

/// Who picks the next step and who hears about it: a policy and an observer, or one
/// object that is both (the cost model's clock is a policy that must hear every credit).
pub trait Driver {
    /// The policy.
    fn policy(&mut self) -> &mut dyn Policy;
    /// The observer.
    fn observer(&mut self) -> &mut dyn Observer;
}

/// A policy and a separate observer.
pub struct Split<'a> {
    /// Picks the steps.
    pub policy: &'a mut dyn Policy,
    /// Hears the events.
    pub observer: &'a mut dyn Observer,
}

impl Driver for Split<'_> {
    fn policy(&mut self) -> &mut dyn Policy {
        self.policy
    }
    fn observer(&mut self) -> &mut dyn Observer {
        self.observer
    }
}
