//! The verifier's record of one scheduled run: every event in schedule order, each
//! naming the op it comes from (12 bytes an event, so large P stays affordable).

use crate::device_sim::program::{Completion, DataOp, Op, OpSite, Program};
use crate::device_sim::Observer;

/// One event of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Prologue copy `Program::prologue[i]` (a VMEM operand copied in).
    Prologue(u32),
    /// A device entered the kernel.
    Enter(u32),
    /// Device `device` ran its op `index` (`Program::ops[device][index]`).
    Op {
        /// Device.
        device: u32,
        /// Index in the device's op list.
        index: u32,
    },
    /// A completion of a DMA.
    Complete {
        /// DMA id.
        dma: u32,
        /// Which completion.
        side: Completion,
    },
}

/// An [`Observer`] that records the run.
#[derive(Debug, Default)]
pub struct EventLog {
    /// Events in schedule order.
    pub events: Vec<Event>,
    next: Vec<u32>,
    prologue: u32,
}

impl EventLog {
    /// An empty log for `devices` devices.
    pub fn new(devices: usize) -> Self {
        Self {
            events: Vec::new(),
            next: vec![0; devices],
            prologue: 0,
        }
    }

    /// An empty log with room for every event a run of `p` can have (a run that
    /// finishes has them all), so that it does not grow by copying.
    pub fn for_program(p: &Program) -> Self {
        let completions: usize = p.dmas.iter().map(|d| d.completions().len()).sum();
        let mut log = Self::new(p.devices);
        log.events
            .reserve_exact(p.prologue.len() + p.devices + p.op_count() + completions);
        log
    }

    fn op(&mut self, device: usize) {
        let index = self.next[device];
        self.next[device] += 1;
        self.events.push(Event::Op {
            device: device as u32,
            index,
        });
    }
}

impl Observer for EventLog {
    fn enter(&mut self, device: usize) {
        self.events.push(Event::Enter(device as u32));
    }

    fn data(&mut self, device: usize, _op: &DataOp, site: Option<&OpSite>) {
        if site.is_some() {
            self.op(device);
        } else {
            self.events.push(Event::Prologue(self.prologue));
            self.prologue += 1;
        }
    }

    fn dma_start(&mut self, device: usize, _dma: usize) {
        self.op(device);
    }

    fn dma_complete(&mut self, dma: usize, side: Completion, _moved: Option<&DataOp>) {
        self.events.push(Event::Complete {
            dma: dma as u32,
            side,
        });
    }

    fn release(&mut self, device: usize, _op: &Op) {
        self.op(device);
    }

    fn acquire(&mut self, device: usize, _op: &Op) {
        self.op(device);
    }

    fn mark(&mut self, device: usize, _label: &str) {
        self.op(device);
    }
}
