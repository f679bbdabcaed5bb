//! Reads of memory nothing wrote: a kernel's scratch, its outputs and VMEM blocks hold
//! whatever was there before the kernel (on a TPU, the last kernel's data), so a read of
//! bytes no write reached first returns garbage, silently. The host's inputs are the only
//! memory written at entry. Whether the write that covers a read is *ordered* before it
//! is the race checker's question: here a write counts once the replay saw it, so a
//! read is reported when, in this run, no write to those bytes came before it at all.

use super::side::RaceSide;
use crate::ir::{Program, View};
use serde::Serialize;
use std::fmt;

/// A read of bytes no write reached before it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UninitRead {
    /// Allocation name.
    pub alloc: String,
    /// Device whose memory it is.
    pub device: usize,
    /// The first run of bytes `[lo, hi)` of the read that nothing wrote.
    pub bytes: (u64, u64),
    /// The read.
    pub read: RaceSide,
}

impl UninitRead {
    /// A key that names the bug: the read's kernel line and the allocation.
    pub fn key(&self) -> String {
        let at = self
            .read
            .site
            .as_ref()
            .map_or_else(|| "epilogue".into(), |s| format!("{}@{}", s.op, s.location));
        format!("uninit:{}:{at}", Program::unlabeled(&self.alloc))
    }
}

impl fmt::Display for UninitRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "read of uninitialized memory: `{}` of device {}, bytes {}..{}, read before anything wrote them:",
            self.alloc, self.device, self.bytes.0, self.bytes.1
        )?;
        writeln!(f, "    {}", self.read)?;
        write!(
            f,
            "    a kernel's scratch, outputs and VMEM blocks start with whatever the memory held before (on a TPU, \
             the last kernel's data): write these bytes before reading them"
        )
    }
}

/// Per (device, allocation): the element runs written so far in the replay.
pub(super) struct Written {
    allocs: usize,
    /// Allocations that hold data at entry (the host's inputs).
    initial: Vec<bool>,
    /// Sorted, disjoint, non-adjacent `[lo, hi)` runs per slot.
    runs: Vec<Vec<(usize, usize)>>,
}

impl Written {
    pub(super) fn new(p: &Program) -> Self {
        let allocs = p.layout.allocs.len();
        let mut initial = vec![false; allocs];
        for &a in &p.inputs {
            initial[a] = true;
        }
        Written {
            allocs,
            initial,
            runs: vec![Vec::new(); p.devices * allocs],
        }
    }

    fn slot(&self, v: &View) -> usize {
        v.device() * self.allocs + v.alloc()
    }

    /// Notes a write of `v`.
    pub(super) fn write(&mut self, v: &View) {
        let (lo, hi) = (v.offset(), v.offset() + v.len());
        let slot = self.slot(v);
        let runs = &mut self.runs[slot];
        // Runs touching [lo, hi) merge into one.
        let first = runs.partition_point(|r| r.1 < lo);
        let last = runs.partition_point(|r| r.0 <= hi);
        if first == last {
            runs.insert(first, (lo, hi));
        } else {
            let merged = (runs[first].0.min(lo), runs[last - 1].1.max(hi));
            runs.splice(first..last, std::iter::once(merged));
        }
    }

    /// The first run of elements of `v` no write covered, if any (none for memory that
    /// holds data at entry).
    pub(super) fn unwritten(&self, v: &View) -> Option<(usize, usize)> {
        if self.initial[v.alloc()] {
            return None;
        }
        let (lo, hi) = (v.offset(), v.offset() + v.len());
        let runs = &self.runs[self.slot(v)];
        let i = runs.partition_point(|r| r.1 <= lo);
        match runs.get(i) {
            Some(&(a, b)) if a <= lo && b >= hi => None,
            Some(&(a, b)) if a <= lo => Some((b, runs.get(i + 1).map_or(hi, |r| r.0.min(hi)))),
            Some(&(a, _)) => Some((lo, a.min(hi))),
            None => Some((lo, hi)),
        }
    }

    /// True when allocation `a` holds data at entry.
    #[cfg(test)]
    fn initial(&self, a: crate::ir::AllocId) -> bool {
        self.initial[a]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Allocation, Layout, MemorySpace};

    fn written() -> Written {
        let alloc = |name: &str| Allocation {
            name: name.into(),
            space: MemorySpace::Vmem,
            dtype: crate::DType::F32,
            shape: vec![100],
        };
        let layout = Layout {
            allocs: vec![alloc("x"), alloc("scratch")],
            ..Layout::default()
        };
        let p = Program {
            name: "t".into(),
            devices: 2,
            layout,
            ops: vec![Vec::new(), Vec::new()],
            dmas: Vec::new(),
            prologue: Vec::new(),
            epilogue: Vec::new(),
            inputs: vec![0],
            outputs: Vec::new(),
            invocations: Vec::new(),
        };
        Written::new(&p)
    }

    #[test]
    fn inputs_hold_data_and_scratch_does_not() {
        let w = written();
        assert!(w.initial(0) && !w.initial(1));
        assert_eq!(w.unwritten(&View::new(1, 0, 0, 100)), None);
        assert_eq!(w.unwritten(&View::new(1, 1, 10, 5)), Some((10, 15)));
    }

    #[test]
    fn writes_merge_and_the_first_gap_is_named() {
        let mut w = written();
        w.write(&View::new(0, 1, 10, 10)); // [10, 20)
        w.write(&View::new(0, 1, 30, 10)); // [30, 40)
        assert_eq!(w.unwritten(&View::new(0, 1, 12, 5)), None);
        assert_eq!(w.unwritten(&View::new(0, 1, 12, 20)), Some((20, 30)));
        assert_eq!(w.unwritten(&View::new(0, 1, 5, 10)), Some((5, 10)));
        assert_eq!(w.unwritten(&View::new(0, 1, 35, 10)), Some((40, 45)));
        assert_eq!(
            w.unwritten(&View::new(1, 1, 12, 5)),
            Some((12, 17)),
            "another device's"
        );
        w.write(&View::new(0, 1, 20, 10)); // adjacent on both sides: one run [10, 40)
        assert_eq!(w.runs[1], vec![(10, 40)]);
        assert_eq!(w.unwritten(&View::new(0, 1, 10, 30)), None);
        w.write(&View::new(0, 1, 0, 100));
        assert_eq!(w.runs[1], vec![(0, 100)]);
    }
}
