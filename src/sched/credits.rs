//! How a semaphore's value is consumed: the units credited to it and not yet taken,
//! first in, first out. The scheduler tags credits with DMA ids (for the exit check),
//! the cost model with arrival times, the verifier with credit ids.

use std::collections::VecDeque;

/// Credits of one semaphore not yet consumed, oldest first.
#[derive(Clone, Debug)]
pub struct Credits<T> {
    q: VecDeque<(T, u64)>,
}

impl<T> Default for Credits<T> {
    fn default() -> Self {
        Self { q: VecDeque::new() }
    }
}

impl<T: Copy> Credits<T> {
    /// Adds `amount` units tagged `tag` after the others.
    pub fn push(&mut self, tag: T, amount: u64) {
        self.q.push_back((tag, amount));
    }

    /// Adds `amount` units tagged `tag` before the first credit whose key is greater.
    pub fn insert_by<K: PartialOrd>(&mut self, tag: T, amount: u64, key: impl Fn(&T) -> K) {
        let k = key(&tag);
        let at = self.q.partition_point(|(t, _)| key(t) <= k);
        self.q.insert(at, (tag, amount));
    }

    /// Takes `amount` units, oldest first; `done` hears the tag of every credit whose
    /// last unit is taken.
    pub fn consume(&mut self, mut amount: u64, mut done: impl FnMut(T)) {
        while amount > 0 {
            let Some(front) = self.q.front_mut() else {
                break;
            };
            let take = front.1.min(amount);
            front.1 -= take;
            amount -= take;
            if front.1 == 0 {
                done(front.0);
                self.q.pop_front();
            }
        }
    }

    /// The tag of the credit holding the `amount`-th unit from the front, if there is one.
    pub fn covering(&self, amount: u64) -> Option<T> {
        let mut sum = 0;
        self.q.iter().find_map(|&(t, a)| {
            sum += a;
            (sum >= amount).then_some(t)
        })
    }

    /// Drops every credit (a seed-003 `Set` overwrites the value).
    pub fn clear(&mut self) {
        self.q.clear();
    }

    /// The credits, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &(T, u64)> {
        self.q.iter()
    }

    /// True when nothing is left.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumption_is_first_in_first_out_across_credits() {
        let mut c = Credits::default();
        c.push('a', 3);
        c.push('b', 2);
        assert_eq!(c.covering(4), Some('b'));
        let mut done = Vec::new();
        c.consume(4, |t| done.push(t));
        assert_eq!(done, vec!['a']);
        assert_eq!(c.iter().copied().collect::<Vec<_>>(), vec![('b', 1)]);
        c.insert_by('z', 5, |t| *t as u32);
        c.insert_by('c', 5, |t| *t as u32);
        assert_eq!(c.iter().map(|x| x.0).collect::<String>(), "bcz");
    }
}
