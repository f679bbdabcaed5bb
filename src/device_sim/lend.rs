//! Memory a caller lends a host-memory run in place of the run's own: a pallas_call's
//! operand and result buffers in XLA, read and written where they are instead of copied
//! in and out (and the run's outputs not zeroed when it writes all of them first). What
//! the schedule does to each allocation decides what may be lent ([`Coverage`]): an input
//! is read in place only when no op writes it (the caller's data stays as it was); an
//! output is zeroed first unless the run writes every element of it before reading it.
//! The same coverage says which of the run's own buffers, reused from an earlier run,
//! must be zeroed again: those it reads before writing.

use crate::ir::{AllocId, DataOp, Program, Schedule, View, Written};

/// What a schedule does to the memory of every device, found once per schedule (a
/// replay of its ops in order, as the CPU executor runs them), over the allocations of
/// [`Schedule::memory`]: the program's, then the staging area of DMAs in flight.
#[derive(Clone, Debug)]
pub struct Coverage {
    allocs: usize,
    /// Per (device, allocation): an input some op writes.
    input_written: Vec<bool>,
    /// Per (device, allocation): memory other than an input that the run reads before
    /// writing, or an output it does not write whole.
    needs_zero: Vec<bool>,
}

impl Coverage {
    /// The coverage of `schedule`'s ops on `program`'s memory.
    pub fn of(program: &Program, schedule: &Schedule) -> Coverage {
        let allocs = schedule.memory(program).allocs.len();
        let mut is_input = vec![false; allocs];
        for &a in &program.inputs {
            is_input[a] = true;
        }
        let slots = program.devices * allocs;
        let mut c = Coverage {
            allocs,
            input_written: vec![false; slots],
            needs_zero: vec![false; slots],
        };
        let mut written = Written::over(program, allocs);
        for op in &schedule.ops {
            // An accumulate reads the destination it adds to.
            let adds_to = matches!(op, DataOp::Accumulate { .. }).then(|| op.dst());
            for v in op.reads().chain(adds_to) {
                if written.unwritten(&v).is_some() {
                    let i = c.slot(v.device(), v.alloc());
                    c.needs_zero[i] = true;
                }
            }
            for v in op.writes() {
                if is_input[v.alloc()] {
                    let i = c.slot(v.device(), v.alloc());
                    c.input_written[i] = true;
                }
                written.write(&v);
            }
        }
        for d in 0..program.devices {
            for &a in &program.outputs {
                let whole = View::new(d, a, 0, program.layout.allocs[a].numel());
                if written.unwritten(&whole).is_some() {
                    let i = c.slot(d, a);
                    c.needs_zero[i] = true;
                }
            }
        }
        c
    }

    fn slot(&self, device: usize, alloc: AllocId) -> usize {
        device * self.allocs + alloc
    }

    /// True when some op writes input `alloc` of `device` (it cannot be read in place).
    pub fn input_written(&self, device: usize, alloc: AllocId) -> bool {
        self.input_written[self.slot(device, alloc)]
    }

    /// True when allocation `alloc` of `device` must start zeroed: the run reads some
    /// of it before writing it, or it is an output the run does not write whole. Never
    /// for an input (it holds the caller's data).
    pub fn needs_zero(&self, device: usize, alloc: AllocId) -> bool {
        self.needs_zero[self.slot(device, alloc)]
    }
}

/// One allocation of one device in the caller's memory, one 32-bit word per element (the
/// host executor's format: 4-byte element types), or, for the 16-bit operands the plan
/// allows, their two bytes per element.
#[derive(Debug)]
pub enum Lent<'a> {
    /// Input `alloc` of `device`, holding its data: read in place, or copied where the
    /// schedule writes it.
    Input {
        /// Device.
        device: usize,
        /// The input's allocation.
        alloc: AllocId,
        /// Its data.
        words: &'a [u32],
    },
    /// Output `alloc` of `device`: the run's memory for it, holding the output after.
    Output {
        /// Device.
        device: usize,
        /// The output's allocation.
        alloc: AllocId,
        /// Its memory.
        words: &'a mut [u32],
    },
    /// Input `alloc` of `device` of a 16-bit dtype, its elements' bits as stored (two
    /// bytes each): read in place by the regions that load it (only where
    /// [`crate::device_sim::cpu::CpuPlan::halves`] says so).
    InputHalves {
        /// Device.
        device: usize,
        /// The input's allocation.
        alloc: AllocId,
        /// Its data.
        halves: &'a [u16],
    },
    /// Output `alloc` of `device` of a 16-bit dtype: written in place by the regions
    /// that store it, two bytes an element (only where
    /// [`crate::device_sim::cpu::CpuPlan::halves`] says so).
    OutputHalves {
        /// Device.
        device: usize,
        /// The output's allocation.
        alloc: AllocId,
        /// Its memory.
        halves: &'a mut [u16],
    },
}

impl Lent<'_> {
    /// The device and allocation lent.
    pub fn place(&self) -> (usize, AllocId) {
        match self {
            Lent::Input { device, alloc, .. }
            | Lent::Output { device, alloc, .. }
            | Lent::InputHalves { device, alloc, .. }
            | Lent::OutputHalves { device, alloc, .. } => (*device, *alloc),
        }
    }

    /// Elements lent.
    pub fn len(&self) -> usize {
        match self {
            Lent::Input { words, .. } => words.len(),
            Lent::Output { words, .. } => words.len(),
            Lent::InputHalves { halves, .. } => halves.len(),
            Lent::OutputHalves { halves, .. } => halves.len(),
        }
    }

    /// True when nothing is lent.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
