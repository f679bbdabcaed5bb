//! The set of devices that can take a step. The scheduler asks for the next member
//! after a device at every step, so at large P it is a bitset, not a tree.

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

/// Devices as bits of 64-bit words.
#[derive(Clone, Debug, Default)]
pub struct DeviceSet {
    words: Vec<u64>,
    len: usize,
}

impl DeviceSet {
    /// An empty set for devices `0..devices`.
    pub fn new(devices: usize) -> Self {
        Self {
            words: vec![0; devices.div_ceil(64)],
            len: 0,
        }
    }

    /// Adds `d`.
    pub fn insert(&mut self, d: usize) {
        let (w, bit) = (d / 64, 1u64 << (d % 64));
        if self.words[w] & bit == 0 {
            self.words[w] |= bit;
            self.len += 1;
        }
    }

    /// Removes `d`.
    pub fn remove(&mut self, d: usize) {
        let (w, bit) = (d / 64, 1u64 << (d % 64));
        if self.words[w] & bit != 0 {
            self.words[w] &= !bit;
            self.len -= 1;
        }
    }
}

impl ReadySet for DeviceSet {
    fn len(&self) -> usize {
        self.len
    }
    fn contains(&self, d: usize) -> bool {
        self.words
            .get(d / 64)
            .is_some_and(|w| w & (1u64 << (d % 64)) != 0)
    }
    fn first_from(&self, d: usize) -> Option<usize> {
        let mut w = d / 64;
        let mut bits = self.words.get(w)? & (u64::MAX << (d % 64));
        loop {
            if bits != 0 {
                return Some(w * 64 + bits.trailing_zeros() as usize);
            }
            w += 1;
            bits = *self.words.get(w)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The bitset answers as the tree does.
        #[test]
        fn matches_a_tree(steps in proptest::collection::vec((any::<bool>(), 0usize..130), 0..200)) {
            let mut bits = DeviceSet::new(130);
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
                for q in [0, d, d + 1, 63, 64, 129, 130] {
                    prop_assert_eq!(bits.first_from(q), tree.first_from(q));
                    prop_assert_eq!(ReadySet::contains(&bits, q), tree.contains(&q));
                }
            }
        }
    }
}
