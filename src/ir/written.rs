//! What a run has written so far: the element runs of each allocation, for the questions
//! "did anything write these elements before this read?" (the verifier's rule on reads of
//! uninitialized memory) and "does the run write all of an output?" (what an executor
//! must zero, [`crate::device_sim::Coverage`]).

use super::program::Program;
use super::view::View;

/// Per (device, allocation): the element runs written so far, in a replay of a run's
/// accesses in order (the verifier's, or a schedule's); the host's inputs hold data at entry.
pub struct Written {
    allocs: usize,
    /// Allocations that hold data at entry (the host's inputs).
    initial: Vec<bool>,
    /// Sorted, disjoint, non-adjacent `[lo, hi)` runs per slot.
    runs: Vec<Vec<(usize, usize)>>,
}

impl Written {
    /// Nothing written yet on any device of `p` but its inputs.
    pub fn new(p: &Program) -> Self {
        Self::over(p, p.layout.allocs.len())
    }

    /// As [`Written::new`], over `allocs` allocations per device: the program's, then
    /// an executor's own (a staging area) that hold nothing at entry.
    pub fn over(p: &Program, allocs: usize) -> Self {
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
        debug_assert!(
            v.alloc() < self.allocs,
            "a view of the program's allocations"
        );
        v.device() * self.allocs + v.alloc()
    }

    /// Notes a write of `v`.
    pub fn write(&mut self, v: &View) {
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
    pub fn unwritten(&self, v: &View) -> Option<(usize, usize)> {
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
            cores: 1,
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
