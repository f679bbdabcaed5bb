//! The memory every device shares: allocations and semaphore slots, and the one
//! definition of how a (device, id) pair becomes an index into per-device tables.

pub use super::view::{AllocId, SemId};
use super::view::{SemRef, View};
use crate::array::DType;

/// Where an allocation lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemorySpace {
    /// HBM (`pl.ANY`): only DMAs may touch it.
    Any,
    /// VMEM: where compute runs.
    Vmem,
}

/// One allocation, present on every device.
#[derive(Clone, Debug)]
pub struct Allocation {
    /// The kernel's name for it (`x_ref`, `hbm_buf`, …).
    pub name: String,
    /// Memory space.
    pub space: MemorySpace,
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<usize>,
}

/// How the allocations that hold a kernel's values are named: `values (f32)`.
pub const VALUES: &str = "values";

impl Allocation {
    /// The allocation that holds a trace's values of `dtype`.
    pub fn values(dtype: DType, elems: usize) -> Self {
        Allocation {
            name: format!("{VALUES} ({dtype})"),
            space: MemorySpace::Vmem,
            dtype,
            shape: vec![elems],
        }
    }

    /// True for an allocation of values (temporaries, not a buffer of the kernel's).
    pub fn holds_values(&self) -> bool {
        self.name.starts_with(VALUES) && self.name.ends_with(')') && self.space == MemorySpace::Vmem
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    /// Size in bytes, as a TPU holds it.
    pub fn bytes(&self) -> u64 {
        (self.numel() * self.dtype.size()) as u64
    }

    /// Size in bytes in the executors' memory ([`DType::storage`]).
    pub fn storage_bytes(&self) -> u64 {
        (self.numel() * self.dtype.storage()) as u64
    }
}

/// Kind of a semaphore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SemKind {
    /// Counts bytes of completed DMAs.
    Dma,
    /// Counts signals.
    Regular,
    /// The kernel's barrier semaphore (`get_barrier_semaphore`).
    Barrier,
    /// A cell of a seed-003 signal matrix: written by `notify`, read by a
    /// non-decrementing `wait`; counters are monotonic, so no exit check.
    Signal,
}

/// One semaphore slot, present on every device (arrays are flattened to `name[i]`).
#[derive(Clone, Debug)]
pub struct SemInfo {
    /// Display name, e.g. `recv_sems[2]`.
    pub name: String,
    /// Kind.
    pub kind: SemKind,
    /// Handed on as the kernel's output (`out_specs` in `pltpu.SEMAPHORE`): its count at
    /// exit is a result, not a fault (a DMA not waited still is one).
    pub carried: bool,
}

/// The per-device memory layout: allocations and semaphore slots.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    /// Allocations (the same on every device).
    pub allocs: Vec<Allocation>,
    /// Semaphore slots (the same on every device).
    pub sems: Vec<SemInfo>,
    /// What each kernel invocation holds in VMEM at once (one entry per kernel of a
    /// sequence: each kernel's VMEM is its own while it runs); empty for a program built
    /// by hand, whose VMEM allocations are then all counted.
    pub vmem: Vec<VmemUse>,
}

/// The VMEM one kernel holds at once: its own buffers (scratch, VMEM operands, pipeline
/// buffers) and the most bytes its values hold live at one time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmemUse {
    /// The kernel's name.
    pub kernel: String,
    /// Bytes of its own VMEM buffers, as a TPU holds them.
    pub buffers: u64,
    /// The most bytes of its values (temporaries) live at once.
    pub values: u64,
    /// The kernel's own `vmem_limit_bytes` (`pltpu.CompilerParams`), when it sets one.
    pub limit: Option<u64>,
}

impl VmemUse {
    /// Bytes the kernel needs in VMEM.
    pub fn bytes(&self) -> u64 {
        self.buffers + self.values
    }
}

/// A table with one entry per (device, id) pair, device-major: how a semaphore slot or an
/// allocation of one device becomes an index among every device's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerDevice {
    per_device: usize,
}

impl PerDevice {
    /// A table of `per_device` entries for each device.
    pub fn new(per_device: usize) -> Self {
        Self { per_device }
    }

    /// Entries per device.
    pub fn per_device(&self) -> usize {
        self.per_device
    }

    /// The index of entry `id` of `device`.
    #[inline]
    pub fn index(&self, device: usize, id: usize) -> usize {
        device * self.per_device + id
    }

    /// The device and entry of index `i`.
    #[inline]
    pub fn split(&self, i: usize) -> (usize, usize) {
        (i / self.per_device, i % self.per_device)
    }

    /// Entries for `devices` devices.
    pub fn len(&self, devices: usize) -> usize {
        devices * self.per_device
    }
}

impl Layout {
    /// The table of every device's semaphore slots.
    pub fn sem_table(&self) -> PerDevice {
        PerDevice::new(self.sems.len())
    }

    /// The index of semaphore `s` among every device's slots.
    #[inline]
    pub fn sem_slot(&self, s: SemRef) -> usize {
        self.sem_table().index(s.device(), s.sem())
    }

    /// The semaphore at index `slot` among every device's slots.
    pub fn slot_sem(&self, slot: usize) -> SemRef {
        let (device, sem) = self.sem_table().split(slot);
        SemRef::new(device, sem)
    }

    /// The table of every device's allocations of this layout (without a schedule's
    /// staging area: see [`crate::ir::Schedule::memory`]).
    pub fn alloc_table(&self) -> PerDevice {
        PerDevice::new(self.allocs.len())
    }

    /// The index of `v`'s allocation among every device's allocations of this layout.
    #[inline]
    pub fn alloc_index(&self, v: &View) -> usize {
        self.alloc_table().index(v.device(), v.alloc())
    }
}
