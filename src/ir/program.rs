//! A traced kernel: the memory layout every device shares and each device's op list.
//! This is what the kernel API produces and what the scheduler consumes.

use super::data::DataOp;
use super::dma::Dma;
use super::layout::{AllocId, Layout};
use super::op::Op;
use super::site::OpSite;
use super::view::SemRef;
use crate::error::Site;

/// A kernel traced over every device and grid point.
#[derive(Clone, Debug)]
pub struct Program {
    /// Kernel name.
    pub name: String,
    /// Number of devices.
    pub devices: usize,
    /// Grid dimensions.
    pub grid: Vec<usize>,
    /// Memory layout shared by every device.
    pub layout: Layout,
    /// Each device's ops in program order.
    pub ops: Vec<Vec<Op>>,
    /// Every DMA started, indexed by [`super::OpKind::DmaStart`].
    pub dmas: Vec<Dma>,
    /// Data ops run before the grid (VMEM operands copied in).
    pub prologue: Vec<DataOp>,
    /// Data ops run after the grid (VMEM outputs copied out).
    pub epilogue: Vec<DataOp>,
    /// The HBM allocation that holds each input operand.
    pub inputs: Vec<AllocId>,
    /// The HBM allocation that holds each output operand.
    pub outputs: Vec<AllocId>,
    /// True when the kernel has no barrier semaphore (no `collective_id`): Pallas then
    /// inserts a barrier at kernel entry, so no device runs an op before every device
    /// has entered. With one, the kernel must make sure itself that a device has entered
    /// before it sends to it.
    pub entry_barrier: bool,
}

impl Program {
    /// Grid coordinates of a row-major grid index.
    pub fn grid_point(&self, linear: usize) -> Vec<usize> {
        grid_coords(&self.grid, linear)
    }

    /// A printable [`Site`] for an op site.
    pub fn site(&self, s: &OpSite) -> Site {
        Site {
            device: s.device as usize,
            grid: self.grid_point(s.grid_linear as usize),
            op: s.op(),
            location: s.location.to_string(),
        }
    }

    /// Display name of a semaphore slot.
    pub fn sem_name(&self, s: SemRef) -> String {
        self.layout.sems[s.sem()].name.clone()
    }

    /// Total number of traced ops over all devices.
    pub fn op_count(&self) -> usize {
        self.ops.iter().map(Vec::len).sum()
    }
}

/// Row-major coordinates of `linear` in a grid of dimensions `grid`.
pub fn grid_coords(grid: &[usize], linear: usize) -> Vec<usize> {
    let mut rest = linear;
    let mut out = vec![0; grid.len()];
    for (i, n) in grid.iter().enumerate().rev() {
        out[i] = rest % n.max(&1);
        rest /= n.max(&1);
    }
    out
}
