//! The scheduler's output: one linear order of data ops, valid for every executor.

use super::data::DataOp;
use super::layout::{AllocId, Allocation, MemorySpace, PerDevice};
use super::program::Program;
use super::uninit::{fills, Uninit};
use super::view::View;
use crate::array::DType;

/// A linear schedule of data ops (prologue, the grid's work, epilogue).
#[derive(Clone, Debug)]
pub struct Schedule {
    /// Data ops in execution order.
    pub ops: Vec<DataOp>,
    /// The name of the policy that produced it.
    pub policy: String,
    /// Number of scheduler steps taken (entries, ops run, DMA completions).
    pub steps: usize,
    /// Words each device needs for the data of remote DMAs whose source was read
    /// (send completion) before their destination was written (receive completion):
    /// the schedule copies such data into allocation [`Schedule::staging_alloc`] of
    /// the sender and from there to the destination. 0 when no DMA needed it.
    pub staging: usize,
}

impl Schedule {
    /// This schedule with memory nothing wrote reading as `uninit` says: the fills
    /// [`super::uninit::fills`] finds for its ops come first.
    pub fn with_uninit(mut self, program: &Program, uninit: Uninit) -> Self {
        let mut ops = fills(program, &self.ops, uninit);
        if !ops.is_empty() {
            ops.append(&mut self.ops);
            self.ops = ops;
        }
        self
    }

    /// The allocation id of the staging area: one past the program's allocations.
    pub fn staging_alloc(program: &Program) -> AllocId {
        program.layout.allocs.len()
    }

    /// Every allocation an executor holds on each device for this schedule: the
    /// program's, then the staging area when the schedule uses one.
    pub fn allocations(&self, program: &Program) -> Vec<Allocation> {
        self.memory(program).allocs
    }

    /// The memory an executor holds for this schedule: on every device the program's
    /// allocations, then the staging area when the schedule uses one.
    pub fn memory(&self, program: &Program) -> Memory {
        let mut allocs = program.layout.allocs.clone();
        if self.staging > 0 {
            allocs.push(Allocation {
                name: "DMA data in flight".into(),
                space: MemorySpace::Any,
                dtype: DType::I32,
                shape: vec![self.staging],
            });
        }
        Memory {
            table: PerDevice::new(allocs.len()),
            devices: program.devices,
            allocs,
        }
    }

    /// Bytes the schedule moves per run, in plain-copy equivalents: half of what every
    /// op reads and writes (a copy of B bytes counts B, an accumulate 1.5B, a fill
    /// 0.5B). Dividing by time gives a rate comparable to copy bandwidth.
    pub fn copy_equivalent_bytes(&self, program: &Program) -> f64 {
        let allocs = self.allocations(program);
        self.ops
            .iter()
            .map(|o| {
                let w = o.work();
                let e = o.elem_bytes(&allocs) as f64;
                0.5 * (w.read_elems + w.write_elems) as f64 * e
            })
            .sum()
    }

    /// Bytes moved by copies (DMAs and VMEM copies) in this schedule.
    pub fn bytes_copied(&self, program: &Program) -> u64 {
        let allocs = self.allocations(program);
        self.ops
            .iter()
            .filter(|o| matches!(o, DataOp::Copy { .. }))
            .map(|o| o.bytes(&allocs))
            .sum()
    }
}

/// Every device's allocations as an executor holds them: one table, device-major.
#[derive(Clone, Debug)]
pub struct Memory {
    /// One device's allocations (the same on every device).
    pub allocs: Vec<Allocation>,
    /// Devices.
    pub devices: usize,
    table: PerDevice,
}

impl Memory {
    /// The index of `v`'s allocation among every device's.
    #[inline]
    pub fn index(&self, v: &View) -> usize {
        self.table.index(v.device(), v.alloc())
    }

    /// The index of allocation `alloc` of `device`.
    #[inline]
    pub fn index_of(&self, device: usize, alloc: AllocId) -> usize {
        self.table.index(device, alloc)
    }

    /// Allocations over every device.
    pub fn len(&self) -> usize {
        self.table.len(self.devices)
    }

    /// True when there is no allocation.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The device and allocation of index `i`.
    pub fn place(&self, i: usize) -> (usize, AllocId) {
        self.table.split(i)
    }

    /// The allocation at index `i` (of whichever device).
    pub fn alloc(&self, i: usize) -> &Allocation {
        &self.allocs[self.table.split(i).1]
    }

    /// Every (device, allocation) in index order.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &Allocation)> + '_ {
        (0..self.devices).flat_map(move |d| self.allocs.iter().map(move |a| (d, a)))
    }
}
