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
        let mut kept = match self.bounds.iter().position(meets) {
            Some(i) => i,
            None => return,
        };
        for i in kept..self.items.len() {
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
