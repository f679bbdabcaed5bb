//! The sets the scheduler keeps from step to step: the devices that can take a step,
//! and the pending DMA completions. The policies ask for the next member after a
//! device, the first and last, and (random) the i-th, at every step, so each is a
//! bitset with a Fenwick tree over its words' counts: every question is O(log n).

use std::collections::BTreeSet;

/// What [`super::Choices`] needs of a set of devices.
pub trait ReadySet {
    /// Number of members.
    fn len(&self) -> usize;
    /// True for no members.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// True when `d` is a member.
    fn contains(&self, d: usize) -> bool;
    /// The smallest member at or after `d`.
    fn first_from(&self, d: usize) -> Option<usize>;
    /// The `i`-th smallest member (from 0).
    fn nth(&self, i: usize) -> Option<usize> {
        self.members().nth(i)
    }
    /// The members in increasing order.
    fn members(&self) -> Box<dyn Iterator<Item = usize> + '_> {
        Box::new(std::iter::successors(self.first_from(0), |&d| {
            self.first_from(d + 1)
        }))
    }
}

impl ReadySet for BTreeSet<usize> {
    fn len(&self) -> usize {
        BTreeSet::len(self)
    }
    fn contains(&self, d: usize) -> bool {
        BTreeSet::contains(self, &d)
    }
    fn first_from(&self, d: usize) -> Option<usize> {
        self.range(d..).next().copied()
    }
}

/// A set of small integers (devices, completion slots) as bits of 64-bit words, with
/// a Fenwick tree of the words' member counts for ranks and the i-th member.
#[derive(Clone, Debug, Default)]
pub struct RankedSet {
    words: Vec<u64>,
    /// Fenwick tree over `words`' popcounts (1-based, `tree[i - 1]`).
    tree: Vec<u32>,
    len: usize,
}

impl RankedSet {
    /// An empty set for members `0..n`.
    pub fn new(n: usize) -> Self {
        let w = n.div_ceil(64);
        Self {
            words: vec![0; w],
            tree: vec![0; w],
            len: 0,
        }
    }

    /// Makes room for members `0..n` (doubling, so that growing one by one is cheap).
    fn reserve(&mut self, n: usize) {
        let w = n.div_ceil(64);
        if w <= self.words.len() {
            return;
        }
        self.words.resize(w.max(2 * self.words.len()), 0);
        // Rebuild the tree for the new length: O(words).
        self.tree = self.words.iter().map(|w| w.count_ones()).collect();
        for i in 1..=self.tree.len() {
            let up = i + (i & i.wrapping_neg());
            if up <= self.tree.len() {
                self.tree[up - 1] += self.tree[i - 1];
            }
        }
    }

    fn add(&mut self, word: usize, delta: i32) {
        let mut i = word + 1;
        while i <= self.tree.len() {
            self.tree[i - 1] = self.tree[i - 1].wrapping_add_signed(delta);
            i += i & i.wrapping_neg();
        }
    }

    /// Members in words before `word`.
    fn before(&self, word: usize) -> usize {
        let mut i = word;
        let mut n = 0;
        while i > 0 {
            n += self.tree[i - 1] as usize;
            i &= i - 1;
        }
        n
    }

    /// Adds `d`.
    pub fn insert(&mut self, d: usize) {
        self.reserve(d + 1);
        let (w, bit) = (d / 64, 1u64 << (d % 64));
        if self.words[w] & bit == 0 {
            self.words[w] |= bit;
            self.len += 1;
            self.add(w, 1);
        }
    }

    /// Removes `d`.
    pub fn remove(&mut self, d: usize) {
        let (w, bit) = (d / 64, 1u64 << (d % 64));
        if self.words.get(w).is_some_and(|x| x & bit != 0) {
            self.words[w] &= !bit;
            self.len -= 1;
            self.add(w, -1);
        }
    }

    /// The largest member.
    pub fn last(&self) -> Option<usize> {
        self.len.checked_sub(1).and_then(|i| self.nth(i))
    }
}

/// The `i`-th set bit (from 0) of `w`, which has more than `i`.
fn select_bit(mut w: u64, i: u32) -> usize {
    for _ in 0..i {
        w &= w - 1;
    }
    w.trailing_zeros() as usize
}

impl ReadySet for RankedSet {
    fn len(&self) -> usize {
        self.len
    }
    fn contains(&self, d: usize) -> bool {
        self.words
            .get(d / 64)
            .is_some_and(|w| w & (1u64 << (d % 64)) != 0)
    }
    fn first_from(&self, d: usize) -> Option<usize> {
        let w = d / 64;
        let bits = self.words.get(w)? & (u64::MAX << (d % 64));
        if bits != 0 {
            return Some(w * 64 + bits.trailing_zeros() as usize);
        }
        self.nth(self.before(w + 1))
    }
    fn nth(&self, i: usize) -> Option<usize> {
        if i >= self.len {
            return None;
        }
        // Descend the Fenwick tree to the word holding member i.
        let mut pos = 0;
        let mut left = i;
        let mut step = self.tree.len().next_power_of_two();
        while step > 0 {
            let next = pos + step;
            if next <= self.tree.len() && (self.tree[next - 1] as usize) <= left {
                left -= self.tree[next - 1] as usize;
                pos = next;
            }
            step /= 2;
        }
        Some(pos * 64 + select_bit(self.words[pos], left as u32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The ranked bitset answers as the tree does (also past its first size).
        #[test]
        fn matches_a_tree(steps in proptest::collection::vec((any::<bool>(), 0usize..300), 0..200)) {
            let mut bits = RankedSet::new(130);
            let mut tree = BTreeSet::new();
            for (add, d) in steps {
                if add {
                    bits.insert(d);
                    tree.insert(d);
                } else {
                    bits.remove(d);
                    tree.remove(&d);
                }
                prop_assert_eq!(ReadySet::len(&bits), tree.len());
                prop_assert_eq!(bits.members().collect::<Vec<_>>(), tree.iter().copied().collect::<Vec<_>>());
                prop_assert_eq!(bits.last(), tree.last().copied());
                for q in [0, d, d + 1, 63, 64, 129, 130, 299, 300, 1000] {
                    prop_assert_eq!(bits.first_from(q), tree.first_from(q));
                    prop_assert_eq!(ReadySet::contains(&bits, q), tree.contains(&q));
                    prop_assert_eq!(bits.nth(q % 40), tree.iter().nth(q % 40).copied());
                }
            }
        }
    }
}
