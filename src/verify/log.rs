//! The verifier's record of one scheduled run: every event in schedule order, each
//! naming the op it comes from (8 bytes an event, so large P stays affordable).

use crate::ir::{Completion, DataOp, Op, OpSite, Program};
use crate::sched::Observer;

/// One event of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Prologue copy `Program::prologue[i]` (a VMEM operand copied in).
    Prologue(u32),
    /// A device entered a kernel invocation.
    Enter {
        /// Device.
        device: u32,
        /// Invocation.
        invocation: u32,
    },
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

/// An [`Event`] in 8 bytes: a 2-bit kind above a 62-bit payload.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Entry(u64);

const OP: u64 = 0;
const COMPLETE: u64 = 1;
const PROLOGUE: u64 = 2;
const ENTER: u64 = 3;

impl Entry {
    fn pack(kind: u64, high: u32, low: u32) -> Self {
        assert!(high < 1 << 30, "fewer than 2^30 devices");
        Entry(kind << 62 | u64::from(high) << 32 | u64::from(low))
    }

    /// The event.
    #[inline]
    pub fn get(self) -> Event {
        let (high, low) = ((self.0 >> 32) as u32 & ((1 << 30) - 1), self.0 as u32);
        match self.0 >> 62 {
            OP => Event::Op {
                device: high,
                index: low,
            },
            COMPLETE => Event::Complete {
                dma: low,
                side: match high {
                    0 => Completion::Send,
                    1 => Completion::Recv,
                    _ => Completion::Local,
                },
            },
            PROLOGUE => Event::Prologue(low),
            _ => Event::Enter {
                device: high,
                invocation: low,
            },
        }
    }
}

impl From<Event> for Entry {
    fn from(e: Event) -> Self {
        match e {
            Event::Op { device, index } => Entry::pack(OP, device, index),
            Event::Complete { dma, side } => {
                let side = match side {
                    Completion::Send => 0,
                    Completion::Recv => 1,
                    Completion::Local => 2,
                };
                Entry::pack(COMPLETE, side, dma)
            }
            Event::Prologue(i) => Entry::pack(PROLOGUE, 0, i),
            Event::Enter { device, invocation } => Entry::pack(ENTER, device, invocation),
        }
    }
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// An [`Observer`] that records the run.
#[derive(Debug, Default)]
pub struct EventLog {
    /// Events in schedule order.
    pub events: Vec<Entry>,
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
        let entries = p.devices * p.invocations.len();
        log.events
            .reserve_exact(p.prologue.len() + entries + p.op_count() + completions);
        log
    }

    fn op(&mut self, device: usize) {
        let index = self.next[device];
        self.next[device] += 1;
        self.events.push(
            Event::Op {
                device: device as u32,
                index,
            }
            .into(),
        );
    }
}

impl Observer for EventLog {
    fn enter(&mut self, device: usize, invocation: usize) {
        let invocation = u32::try_from(invocation).expect("fewer than 2^32 invocations");
        self.events.push(
            Event::Enter {
                device: device as u32,
                invocation,
            }
            .into(),
        );
    }

    fn data(&mut self, device: usize, _op: &DataOp, site: Option<&OpSite>) {
        if site.is_some() {
            self.op(device);
        } else {
            self.events.push(Event::Prologue(self.prologue).into());
            self.prologue += 1;
        }
    }

    fn dma_start(&mut self, device: usize, _dma: usize) {
        self.op(device);
    }

    fn dma_complete(&mut self, dma: usize, side: Completion, _moved: &[DataOp]) {
        self.events.push(
            Event::Complete {
                dma: dma as u32,
                side,
            }
            .into(),
        );
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

    fn scalar_read(&mut self, device: usize, _op: &Op) {
        self.op(device);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_give_back_their_events() {
        let big = (1 << 30) - 1;
        for e in [
            Event::Op {
                device: big,
                index: u32::MAX,
            },
            Event::Op {
                device: 0,
                index: 7,
            },
            Event::Complete {
                dma: u32::MAX,
                side: Completion::Send,
            },
            Event::Complete {
                dma: 3,
                side: Completion::Recv,
            },
            Event::Complete {
                dma: 0,
                side: Completion::Local,
            },
            Event::Prologue(u32::MAX),
            Event::Enter {
                device: big,
                invocation: u32::MAX,
            },
        ] {
            assert_eq!(Entry::from(e).get(), e);
        }
        assert_eq!(std::mem::size_of::<Entry>(), 8);
    }
}
