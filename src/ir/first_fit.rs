//! First-fit ranges of a region that grows as needed: the staging area of DMAs in
//! flight, and the values of a grid point. Its peak is the size the region needs.

use std::collections::BTreeMap;

/// Live ranges of a region and the largest end ever used.
#[derive(Clone, Debug, Default)]
pub struct FirstFit {
    /// Offset -> length.
    live: BTreeMap<usize, usize>,
    peak: usize,
}

impl FirstFit {
    /// The offset of a new range of `len`: the first gap that holds it.
    pub fn alloc(&mut self, len: usize) -> usize {
        let mut at = 0;
        for (&o, &l) in &self.live {
            if o >= at + len {
                break;
            }
            at = o + l;
        }
        self.live.insert(at, len);
        self.peak = self.peak.max(at + len);
        at
    }

    /// Frees the range at `offset`; its length, if one was there.
    pub fn free(&mut self, offset: usize) -> Option<usize> {
        self.live.remove(&offset)
    }

    /// Frees every range (the peak stays).
    pub fn clear(&mut self) {
        self.live.clear();
    }

    /// Makes the peak at least `end` (a region that holds another's ranges too).
    pub fn at_least(&mut self, end: usize) {
        self.peak = self.peak.max(end);
    }

    /// The largest end ever used.
    pub fn peak(&self) -> usize {
        self.peak
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_fill_the_first_gap_and_the_peak_stays() {
        let mut f = FirstFit::default();
        assert_eq!((f.alloc(4), f.alloc(2), f.alloc(3)), (0, 4, 6));
        f.free(4);
        assert_eq!(f.alloc(1), 4);
        assert_eq!(f.alloc(2), 9);
        f.clear();
        assert_eq!((f.alloc(5), f.peak()), (0, 11));
    }
}
