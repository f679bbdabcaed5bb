//! A traced kernel: the memory layout every device shares and each device's op list.
//! This is what the kernel API produces and what the scheduler consumes. A sequence of
//! kernel invocations ([`super::sequence`]) is one program too: its [`Invocation`]s say
//! where each begins on every device, which allocations and semaphores are its own, and
//! how its inputs come from the invocation before.

use super::data::DataOp;
use super::dma::Dma;
use super::layout::{AllocId, Layout, MemorySpace, SemKind};
use super::op::Op;
use super::site::OpSite;
use super::view::SemRef;
use crate::error::{DeviceName, Site};

/// How a label names the invocation a semaphore or buffer belongs to.
const INVOCATION: &str = " of invocation ";

/// Where an input of an invocation gets its value, from the invocation before it on the
/// same device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feed {
    /// Its output of the same position (the buffer itself: nothing is copied).
    Output(usize),
    /// Its input of the same position (the same buffer, read again).
    Input(usize),
}

/// One kernel invocation of a program: a `pallas_call` every device runs once, after the
/// invocation before it.
#[derive(Clone, Debug)]
pub struct Invocation {
    /// Kernel name.
    pub name: String,
    /// Grid dimensions.
    pub grid: Vec<usize>,
    /// Some grid dimension is `parallel` (`dimension_semantics`): the compiler may
    /// split the grid over a megacore chip's TensorCores. Otherwise it runs on one.
    pub parallel: bool,
    /// The kernel's `collective_id`, which names its barrier semaphore. Without one,
    /// Pallas inserts a barrier at the invocation's entry, so no device runs an op of it
    /// before every device has entered it; with one, the kernel must make sure itself that
    /// a device has entered before it sends to it.
    pub collective_id: Option<u32>,
    /// Per device, the index in [`Program::ops`] of its first op.
    pub starts: Vec<u32>,
    /// Its first grid step: the grid points of the invocations before it (a site's
    /// `grid_linear` counts them too).
    pub first_step: usize,
    /// Its own allocations begin here (they end where the next invocation's begin).
    pub first_alloc: AllocId,
    /// Its own semaphore slots begin here (a barrier semaphore is shared by every
    /// invocation with its `collective_id`, and belongs to none).
    pub first_sem: usize,
    /// Per input, where its value comes from (empty for the first invocation).
    pub feeds: Vec<Feed>,
}

impl Invocation {
    /// The one invocation of a single kernel `name` on `devices` devices.
    pub fn single(name: &str, grid: &[usize], collective_id: Option<u32>, devices: usize) -> Self {
        Invocation {
            name: name.to_string(),
            grid: grid.to_vec(),
            parallel: false,
            collective_id,
            starts: vec![0; devices],
            first_step: 0,
            first_alloc: 0,
            first_sem: 0,
            feeds: Vec::new(),
        }
    }

    /// True when Pallas puts a barrier at this invocation's entry (no `collective_id`).
    #[inline]
    pub fn entry_barrier(&self) -> bool {
        self.collective_id.is_none()
    }

    /// Grid points.
    pub fn points(&self) -> usize {
        self.grid.iter().product()
    }
}

/// A kernel traced over every device and grid point (or a sequence of them).
#[derive(Clone, Debug)]
pub struct Program {
    /// Kernel name.
    pub name: String,
    /// Number of devices.
    pub devices: usize,
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
    /// The kernel invocations, in order (one for a single `pallas_call`).
    pub invocations: Vec<Invocation>,
    /// TensorCores per chip: devices `c·k .. c·k + c` are chip k's cores (1: every
    /// device is a chip). Reports name devices by it ([`Program::device_name`]).
    pub cores: usize,
}

/// Invocation `k` as a [`Site`] holds it (4 bytes: a site is part of every kernel error).
fn invocation_number(k: usize) -> u32 {
    u32::try_from(k).expect("fewer than 2^32 kernel invocations")
}

impl Program {
    /// What completion `side` of DMA `k` credits: its semaphore and the amount. The one
    /// definition: a DMA semaphore gains the bytes moved; a REGULAR one (which TPU v6
    /// and later let a DMA signal) gains one per completion.
    pub fn dma_credit(&self, k: usize, side: super::dma::Completion) -> Option<(SemRef, u64)> {
        let dma = &self.dmas[k];
        let s = dma.credits(side)?;
        let amount = match self.layout.sems[s.sem()].kind {
            SemKind::Regular => 1,
            _ => dma.bytes,
        };
        Some((s, amount))
    }

    /// True when the program is a sequence of more than one invocation (reports then
    /// name the invocation of every site, semaphore and allocation).
    pub fn is_sequence(&self) -> bool {
        self.invocations.len() > 1
    }

    /// The invocation grid step `step` belongs to (the last one past the end).
    pub fn invocation_of_step(&self, step: usize) -> usize {
        self.invocations
            .partition_point(|i| i.first_step <= step)
            .saturating_sub(1)
    }

    /// Grid steps of every invocation.
    pub fn steps(&self) -> usize {
        self.invocations
            .last()
            .map_or(0, |i| i.first_step + i.points())
    }

    /// Grid coordinates of grid step `step`, in its invocation's grid.
    pub fn grid_point(&self, step: usize) -> Vec<usize> {
        let inv = &self.invocations[self.invocation_of_step(step)];
        grid_coords(&inv.grid, step - inv.first_step)
    }

    /// True when device `d` holds allocation `alloc` itself ([`holds`]).
    pub fn holds(&self, d: usize, alloc: AllocId) -> bool {
        holds(self.cores, d, self.layout.allocs[alloc].space)
    }

    /// How reports name device `d`: its chip, and its core on chips of several.
    pub fn device_name(&self, d: usize) -> DeviceName {
        DeviceName::of(d, self.cores)
    }

    /// A printable [`Site`] for an op site.
    pub fn site(&self, s: &OpSite) -> Site {
        let step = s.grid_linear as usize;
        let name = self.device_name(s.device as usize);
        Site {
            device: name.device,
            core: name.core,
            invocation: self
                .is_sequence()
                .then(|| invocation_number(self.invocation_of_step(step))),
            grid: self.grid_point(step),
            iteration: s.iteration,
            op: s.op(),
            location: s.location.to_string(),
        }
    }

    /// The invocation whose own semaphore slot `sem` is (`None` for a barrier semaphore
    /// or a single invocation).
    pub fn invocation_of_sem(&self, sem: usize) -> Option<usize> {
        let barrier = self.layout.sems[sem].kind == SemKind::Barrier;
        (self.is_sequence() && !barrier).then(|| {
            self.invocations
                .partition_point(|i| i.first_sem <= sem)
                .saturating_sub(1)
        })
    }

    /// The invocation whose own allocation `alloc` is (`None` for a single invocation).
    pub fn invocation_of_alloc(&self, alloc: AllocId) -> Option<usize> {
        self.is_sequence().then(|| {
            self.invocations
                .partition_point(|i| i.first_alloc <= alloc)
                .saturating_sub(1)
        })
    }

    /// What a label ([`Program::sem_label`], [`Program::alloc_label`]) names, without
    /// its invocation: the same semaphore or buffer of every invocation is one bug.
    pub fn unlabeled(label: &str) -> &str {
        match label.rsplit_once(INVOCATION) {
            Some((name, k)) if k.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => label,
        }
    }

    /// Display name of a semaphore slot (with its invocation in a sequence).
    pub fn sem_name(&self, s: SemRef) -> String {
        self.sem_label(s.sem())
    }

    /// Display name of semaphore `sem` of the layout (with its invocation in a sequence).
    pub fn sem_label(&self, sem: usize) -> String {
        let name = &self.layout.sems[sem].name;
        match self.invocation_of_sem(sem) {
            Some(k) => format!("{name}{INVOCATION}{k}"),
            None => name.clone(),
        }
    }

    /// Display name of allocation `alloc` (with its invocation in a sequence).
    pub fn alloc_label(&self, alloc: AllocId) -> String {
        let name = &self.layout.allocs[alloc].name;
        match self.invocation_of_alloc(alloc) {
            Some(k) => format!("{name}{INVOCATION}{k}"),
            None => name.clone(),
        }
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

/// True when device `d`, on chips of `cores` cores, holds an allocation in `space`
/// itself: a chip's HBM is its first core's, every other allocation each core's own.
pub fn holds(cores: usize, d: usize, space: MemorySpace) -> bool {
    d.is_multiple_of(cores.max(1)) || space != MemorySpace::Any
}
