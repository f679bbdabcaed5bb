//! The accesses the race checker keeps for one allocation of one device, with each
//! one's element bounds beside it: a new access is compared with those whose bounds
//! meet its own, and the others cost a comparison of two numbers in a dense array (an
//! allocation split in chunks, as a ring's, keeps one access per chunk and line).

/// Kept accesses `T` and their bounds `[lo, hi)` in elements, in the order kept.
#[derive(Clone, Debug)]
pub struct Shadow<T> {
    bounds: Vec<(u32, u32)>,
    items: Vec<T>,
}

impl<T> Default for Shadow<T> {
    fn default() -> Self {
        Self {
            bounds: Vec::new(),
            items: Vec::new(),
        }
    }
}

impl<T: Copy> Shadow<T> {
    /// Keeps `item`, whose elements lie in `bounds`, after the others.
    pub fn push(&mut self, (lo, hi): (usize, usize), item: T) {
        self.bounds.push((narrow(lo), narrow(hi)));
        self.items.push(item);
    }

    /// Calls `visit` in order on every kept item whose bounds meet `[lo, hi)`, and drops
    /// those for which it returns true (the order of the rest is kept).
    pub fn visit_meeting(&mut self, (lo, hi): (usize, usize), mut visit: impl FnMut(&T) -> bool) {
        let (lo, hi) = (narrow(lo), narrow(hi));
        let meets = |&(a, b): &(u32, u32)| a < hi && lo < b;
        // Items are moved only once one before them was dropped.
        let Some(first) = self.bounds.iter().position(meets) else {
            return;
        };
        let mut kept = first;
        for i in first..self.items.len() {
            let drop = meets(&self.bounds[i]) && visit(&self.items[i]);
            if !drop {
                if kept != i {
                    self.bounds[kept] = self.bounds[i];
                    self.items[kept] = self.items[i];
                }
                kept += 1;
            }
        }
        self.bounds.truncate(kept);
        self.items.truncate(kept);
    }
}

/// An element index in 32 bits (an allocation of a run holds fewer than 2^32 elements).
fn narrow(x: usize) -> u32 {
    u32::try_from(x).expect("fewer than 2^32 elements in an allocation")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Block, View};
    use proptest::prelude::*;

    /// A block of allocation 0 on device 0: `rows` runs of `len`, `stride` apart.
    fn block() -> impl Strategy<Value = Block> {
        (0usize..40, 1usize..12, 1usize..4, 0usize..8)
            .prop_filter_map("rows that overlap", |(offset, len, rows, gap)| {
                Block::new(View::new(0, 0, offset, len), rows, len + gap)
            })
    }

    proptest! {
        /// What the race checker no longer compares loses nothing: blocks whose bounds
        /// do not meet neither overlap nor lie within one another.
        #[test]
        fn blocks_apart_by_their_bounds_neither_overlap_nor_contain(a in block(), b in block()) {
            let ((alo, ahi), (blo, bhi)) = (a.bounds(), b.bounds());
            if !(alo < bhi && blo < ahi) {
                prop_assert!(a.overlap(&b).is_none());
                prop_assert!(!a.within(&b) && !b.within(&a));
            }
        }

        /// The shadow visits and drops as a plain list scanned whole does, when the
        /// visit of an item whose bounds do not meet would keep it.
        #[test]
        fn visits_as_a_plain_scan(
            steps in proptest::collection::vec((0usize..30, 1usize..10, any::<bool>()), 0..60)
        ) {
            let mut shadow = Shadow::default();
            let mut plain: Vec<((usize, usize), usize)> = Vec::new();
            for (i, (lo, len, drop_odd)) in steps.into_iter().enumerate() {
                let q = (lo, lo + len);
                let meets = |(a, b): (usize, usize)| a < q.1 && q.0 < b;
                let (mut seen, mut want) = (Vec::new(), Vec::new());
                shadow.visit_meeting(q, |&x: &usize| {
                    seen.push(x);
                    drop_odd && x % 2 == 1
                });
                plain.retain(|&(b, x)| {
                    if !meets(b) {
                        return true;
                    }
                    want.push(x);
                    !(drop_odd && x % 2 == 1)
                });
                prop_assert_eq!(seen, want);
                shadow.push(q, i);
                plain.push((q, i));
                let kept: Vec<usize> = plain.iter().map(|&(_, x)| x).collect();
                prop_assert_eq!(&shadow.items, &kept);
            }
        }
    }

    #[test]
    fn visits_only_meeting_bounds_and_drops_in_order() {
        let mut s = Shadow::default();
        for (i, b) in [(0, 4), (4, 8), (2, 6), (8, 9)].into_iter().enumerate() {
            s.push(b, i);
        }
        let mut seen = Vec::new();
        s.visit_meeting((3, 5), |&i| {
            seen.push(i);
            i == 2
        });
        assert_eq!(seen, vec![0, 1, 2]);
        assert_eq!(s.items, vec![0, 1, 3]);
        assert_eq!(s.bounds, vec![(0, 4), (4, 8), (8, 9)]);
    }
}
