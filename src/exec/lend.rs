//! Memory a caller lends a host-memory run in place of the run's own: a pallas_call's
//! operand and result buffers in XLA, read and written where they are instead of copied
//! in and out (and the run's outputs not zeroed when it writes all of them first). What
//! the schedule does to each allocation decides what may be lent ([`Coverage`]): an input
//! is read in place only when no op writes it (the caller's data stays as it was); an
//! output is zeroed first unless the run writes every element of it before reading it.

use crate::ir::{AllocId, Program, Schedule, View, Written};

/// What a schedule does to the inputs and outputs of every device, found once per
/// schedule (a replay of its ops in order, as the CPU executor runs them).
#[derive(Clone, Debug)]
pub struct Coverage {
    allocs: usize,
    /// Per (device, allocation): an input some op writes.
    input_written: Vec<bool>,
    /// Per (device, allocation): an output read before written, or not written whole.
    output_needs_zero: Vec<bool>,
}

impl Coverage {
    /// The coverage of `schedule`'s ops on `program`'s inputs and outputs.
    pub fn of(program: &Program, schedule: &Schedule) -> Coverage {
        let allocs = program.layout.allocs.len();
        let (mut is_input, mut is_output) = (vec![false; allocs], vec![false; allocs]);
        for &a in &program.inputs {
            is_input[a] = true;
        }
        for &a in &program.outputs {
            is_output[a] = true;
        }
        let slots = program.devices * allocs;
        let mut c = Coverage {
            allocs,
            input_written: vec![false; slots],
            output_needs_zero: vec![false; slots],
        };
        let mut written = Written::new(program);
        // The staging area of DMAs in flight is the run's own: not the program's.
        let ours = |v: &View| v.alloc() < allocs;
        for op in &schedule.ops {
            for v in op.reads().filter(ours) {
                if is_output[v.alloc()] && written.unwritten(&v).is_some() {
                    let i = c.slot(v.device(), v.alloc());
                    c.output_needs_zero[i] = true;
                }
            }
            for v in op.writes().filter(ours) {
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
                    c.output_needs_zero[i] = true;
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

    /// True when output `alloc` of `device` must start zeroed: the run reads some of it
    /// before writing it, or never writes some of it.
    pub fn output_needs_zero(&self, device: usize, alloc: AllocId) -> bool {
        self.output_needs_zero[self.slot(device, alloc)]
    }
}

/// One allocation of one device in the caller's memory, one 32-bit word per element (the
/// host executor's format: 4-byte element types only).
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
}

impl Lent<'_> {
    /// The device and allocation lent.
    pub fn place(&self) -> (usize, AllocId) {
        match self {
            Lent::Input { device, alloc, .. } | Lent::Output { device, alloc, .. } => {
                (*device, *alloc)
            }
        }
    }

    /// Elements lent.
    pub fn len(&self) -> usize {
        match self {
            Lent::Input { words, .. } => words.len(),
            Lent::Output { words, .. } => words.len(),
        }
    }

    /// True when nothing is lent.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
