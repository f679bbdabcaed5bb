//! What the scheduler reports as it runs: hooks for the verifier (and any other
//! analysis that must see the same order of events).

use crate::ir::{Completion, DataOp, Op, OpSite};

/// Receives every event of a scheduled run, in schedule order. All hooks default to nothing.
pub trait Observer {
    /// Device `device` entered the kernel (before its first op).
    fn enter(&mut self, _device: usize) {}
    /// Device `device` ran data op `op` (compute, a pull, or a prologue copy when `site` is None).
    fn data(&mut self, _device: usize, _op: &DataOp, _site: Option<&OpSite>) {}
    /// Device `device` started DMA `dma`.
    fn dma_start(&mut self, _device: usize, _dma: usize) {}
    /// Completion `side` of DMA `dma` happened and credited its semaphore. `moved` is the
    /// data op the schedule runs at this point for the DMA (its copy into the
    /// destination, or into the staging area), if any.
    fn dma_complete(&mut self, _dma: usize, _side: Completion, _moved: Option<&DataOp>) {}
    /// Device `device` ran `op`, a signal (a release).
    fn release(&mut self, _device: usize, _op: &Op) {}
    /// Device `device` passed `op`, a wait (an acquire).
    fn acquire(&mut self, _device: usize, _op: &Op) {}
    /// Device `device` passed a step mark (`Ctx::trace_step`).
    fn mark(&mut self, _device: usize, _label: &str) {}
    /// Device `device` finished an op; its next op belongs to grid point `next_grid`
    /// (row-major), or it is done (`None`).
    fn after_step(&mut self, _device: usize, _next_grid: Option<usize>) {}
}

/// An observer that ignores everything.
#[derive(Debug, Default)]
pub struct NoObserver;

impl Observer for NoObserver {}
