//! The pending DMA completions of a run, kept from step to step (a step adds or
//! removes a few, never lists them all): in start order, with the subset some device
//! is about to wait on, so that every policy's question costs O(log n).

use super::ids::IdMap;
use super::policies::{Choice, Completions, RankedSet, ReadySet};
use crate::ir::{Completion, Program};

/// The pending completions. A completion's slot is twice its DMA's start order plus
/// its index in [`crate::ir::Dma::completions`], so slot order is the order the
/// choices are listed in.
pub struct Pending<'p> {
    p: &'p Program,
    slots: RankedSet,
    /// The pending completions whose semaphore's device waits on that semaphore next.
    awaited: RankedSet,
    /// DMA id per start order (32 bits, as the event log's).
    started: Vec<u32>,
    /// Start order of each DMA in flight.
    order: IdMap<usize, usize>,
    /// Per semaphore slot: the pending completions that credit it (sparse).
    by_sem: IdMap<usize, Vec<usize>>,
    /// Per device: the slot of the semaphore (of its own) its next op waits on.
    waiting: Vec<Option<usize>>,
}

impl<'p> Pending<'p> {
    /// None pending, for a run of `p`.
    pub fn new(p: &'p Program) -> Self {
        Self {
            p,
            slots: RankedSet::new(2 * p.dmas.len()),
            awaited: RankedSet::new(2 * p.dmas.len()),
            started: Vec::new(),
            order: IdMap::default(),
            by_sem: IdMap::default(),
            waiting: vec![None; p.devices],
        }
    }

    /// The semaphore a completion credits, as a device and a slot.
    fn credits(&self, id: usize, side: Completion) -> Option<(usize, usize)> {
        let s = self.p.dmas[id].credits(side)?;
        Some((s.device(), self.p.layout.sem_slot(s)))
    }

    /// DMA `id` started: its completions are pending.
    pub fn start(&mut self, id: usize) {
        let seq = self.started.len();
        self.started
            .push(u32::try_from(id).expect("fewer than 2^32 DMAs"));
        self.order.insert(id, seq);
        for (k, &side) in self.p.dmas[id].completions().iter().enumerate() {
            let slot = 2 * seq + k;
            self.slots.insert(slot);
            if let Some((device, sem)) = self.credits(id, side) {
                self.by_sem.entry(sem).or_default().push(slot);
                if self.waiting[device] == Some(sem) {
                    self.awaited.insert(slot);
                }
            }
        }
    }

    /// Completion `side` of DMA `id` happened.
    pub fn complete(&mut self, id: usize, side: Completion) {
        let Some(slot) = self.slot(id, side) else {
            return;
        };
        self.slots.remove(slot);
        self.awaited.remove(slot);
        if let Some((_, sem)) = self.credits(id, side) {
            if let Some(list) = self.by_sem.get_mut(&sem) {
                if let Some(i) = list.iter().position(|&s| s == slot) {
                    list.swap_remove(i);
                }
                if list.is_empty() {
                    self.by_sem.remove(&sem);
                }
            }
        }
        let first = 2 * (slot / 2);
        if !(first..first + 2).any(|s| self.slots.contains(s)) {
            self.order.remove(&id);
        }
    }

    /// Device `device`'s next op now waits on the semaphore in slot `sem` (of its own),
    /// or on none.
    pub fn set_waiting(&mut self, device: usize, sem: Option<usize>) {
        let old = std::mem::replace(&mut self.waiting[device], sem);
        if old == sem {
            return;
        }
        for (s, on) in [(old, false), (sem, true)] {
            let Some(list) = s.and_then(|s| self.by_sem.get(&s)) else {
                continue;
            };
            for &slot in list {
                if on {
                    self.awaited.insert(slot);
                } else {
                    self.awaited.remove(slot);
                }
            }
        }
    }

    /// The start order of DMA `id`, if in flight.
    #[cfg(test)]
    pub fn start_order(&self, id: usize) -> Option<usize> {
        self.order.get(&id).copied()
    }

    /// The slot of completion `side` of DMA `id`, if pending.
    fn slot(&self, id: usize, side: Completion) -> Option<usize> {
        let seq = *self.order.get(&id)?;
        let k = self.p.dmas[id]
            .completions()
            .iter()
            .position(|&c| c == side)?;
        let slot = 2 * seq + k;
        self.slots.contains(slot).then_some(slot)
    }

    /// The choice of the completion in `slot`.
    fn choice(&self, slot: usize) -> Choice {
        let id = self.started[slot / 2] as usize;
        let dma = &self.p.dmas[id];
        Choice::CompleteDma {
            id,
            side: dma.completions()[slot % 2],
            issuer: dma.origin.device as usize,
            awaited: self.awaited.contains(slot),
        }
    }
}

impl Completions for Pending<'_> {
    fn len(&self) -> usize {
        self.slots.len()
    }
    fn nth(&self, i: usize) -> Option<Choice> {
        self.slots.nth(i).map(|s| self.choice(s))
    }
    fn awaited_len(&self) -> usize {
        self.awaited.len()
    }
    fn nth_awaited(&self, i: usize) -> Option<Choice> {
        self.awaited.nth(i).map(|s| self.choice(s))
    }
    fn find(&self, id: usize, side: Completion) -> Option<Choice> {
        self.slot(id, side).map(|s| self.choice(s))
    }
}
