//! What the scheduler reports as it runs: hooks for the race checker (and any other
//! analysis that must see the same order of events).

use super::program::{DataOp, OpSite, SemRef};

/// Receives every event of a scheduled run, in schedule order. All hooks default to nothing.
pub trait Observer {
    /// Device `device` ran data op `op` (compute, a pull, or a prologue copy when `site` is None).
    fn data(&mut self, _device: usize, _op: &DataOp, _site: Option<&OpSite>) {}
    /// Device `device` started DMA `dma`.
    fn dma_start(&mut self, _device: usize, _dma: usize) {}
    /// DMA `dma` completed: its copy happened and its semaphores were credited.
    fn dma_complete(&mut self, _dma: usize) {}
    /// Device `device` signalled `sem` (a release).
    fn release(&mut self, _device: usize, _sem: SemRef) {}
    /// Device `device` passed a wait on `sem` (an acquire).
    fn acquire(&mut self, _device: usize, _sem: SemRef) {}
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
