//! Vector clocks for the happens-before checker: one counter per device. A DMA's
//! accesses are not a component of their own: a DMA side is known to a clock once the
//! clock knows a wait that was ordered after that side's completion (see `race.rs`).
//!
//! The replay keeps a copy of a device's clock at every DMA start and credit, so a
//! copy must be cheap at large P: the components are shared (copied only when a join
//! changes them), and the owning device's own component, which every op advances, is
//! kept outside the shared part.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};
use std::rc::Rc;

/// No owner: every component lives in the shared part.
const NONE: usize = usize::MAX;

/// Counter vectors kept for reuse: a replay at large P builds millions of clocks of a
/// few KiB, each soon dropped, and the allocator's path for blocks that size is slow.
const POOL: usize = 64;

thread_local! {
    static FREE: RefCell<Vec<Vec<u32>>> = const { RefCell::new(Vec::new()) };
}

/// A clock's counters; dropped ones go back to the pool.
#[derive(Debug)]
struct Counters(Vec<u32>);

impl Counters {
    /// Counters from `values`, in a vector from the pool when there is one.
    fn collect(values: impl Iterator<Item = u32>) -> Self {
        let mut v = FREE.with(|f| f.borrow_mut().pop()).unwrap_or_default();
        v.clear();
        v.extend(values);
        Counters(v)
    }
}

impl Clone for Counters {
    fn clone(&self) -> Self {
        Counters::collect(self.0.iter().copied())
    }
}

impl Drop for Counters {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.0);
        // `try_with`: a clock dropped while the thread ends just frees its vector.
        let _ = FREE.try_with(|f| {
            let mut f = f.borrow_mut();
            if f.len() < POOL {
                f.push(v);
            }
        });
    }
}

impl Deref for Counters {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        &self.0
    }
}

impl DerefMut for Counters {
    fn deref_mut(&mut self) -> &mut [u32] {
        &mut self.0
    }
}

/// A vector clock over devices.
#[derive(Clone, Debug)]
pub struct Clock {
    /// Every component; the owner's own one is stale (see `own`).
    shared: Rc<Counters>,
    /// The device whose own component is `own`.
    owner: usize,
    own: u32,
}

impl Clock {
    /// The zero clock for `devices` devices.
    pub fn new(devices: usize) -> Self {
        Self::filled(devices, 0)
    }

    /// The clock with every component at `v`.
    pub fn filled(devices: usize, v: u32) -> Self {
        Self {
            shared: Rc::new(Counters::collect(std::iter::repeat_n(v, devices))),
            owner: NONE,
            own: 0,
        }
    }

    /// This clock, as the clock of device `d`: `d`'s own component becomes cheap to
    /// advance and copies of the clock stop copying the other components.
    pub fn owned_by(mut self, d: usize) -> Self {
        self.settle();
        self.own = self.shared[d];
        self.owner = d;
        self
    }

    /// The device that owns this clock ([`Clock::owned_by`]), if any.
    #[inline]
    pub fn owner(&self) -> Option<usize> {
        (self.owner != NONE).then_some(self.owner)
    }

    /// Writes `own` back into the shared part and drops the owner.
    fn settle(&mut self) {
        if self.owner != NONE && self.shared[self.owner] != self.own {
            Rc::make_mut(&mut self.shared)[self.owner] = self.own;
        }
        self.owner = NONE;
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.shared.len()
    }

    /// True for a clock over no device.
    pub fn is_empty(&self) -> bool {
        self.shared.is_empty()
    }

    /// Component of device `d`.
    #[inline]
    pub fn device(&self, d: usize) -> u32 {
        if d == self.owner {
            self.own
        } else {
            self.shared[d]
        }
    }

    /// Advances device `d`'s own component.
    #[inline]
    pub fn tick(&mut self, d: usize) {
        if d == self.owner {
            self.own += 1;
        } else {
            Rc::make_mut(&mut self.shared)[d] += 1;
        }
    }

    /// Pointwise maximum.
    pub fn join(&mut self, other: &Clock) {
        if !Rc::ptr_eq(&self.shared, &other.shared) {
            if let Some(mine) = Rc::get_mut(&mut self.shared) {
                max_into(mine, &other.shared);
            } else {
                // Shared: the result goes to a new vector, kept only if something grew
                // (one pass, not a copy and a pass).
                let mut grew = false;
                let joined =
                    Counters::collect(self.shared.iter().zip(other.shared.iter()).map(|(a, b)| {
                        grew |= b > a;
                        *a.max(b)
                    }));
                if grew {
                    self.shared = Rc::new(joined);
                }
            }
            if self.owner != NONE {
                self.own = self.own.max(other.shared[self.owner]);
            }
        }
        if other.owner != NONE && other.own > self.device(other.owner) {
            if other.owner == self.owner {
                self.own = other.own;
            } else {
                Rc::make_mut(&mut self.shared)[other.owner] = other.own;
            }
        }
    }
}

/// `a` = pointwise maximum of `a` and `b`.
fn max_into(a: &mut [u32], b: &[u32]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = (*x).max(*y);
    }
}

impl PartialEq for Clock {
    fn eq(&self, other: &Clock) -> bool {
        self.len() == other.len() && (0..self.len()).all(|d| self.device(d) == other.device(d))
    }
}

impl Eq for Clock {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn join_is_pointwise_max() {
        let mut a = Clock::new(3);
        let mut b = Clock::new(3);
        a.tick(0);
        b.tick(2);
        b.tick(2);
        a.join(&b);
        assert_eq!((a.device(0), a.device(1), a.device(2)), (1, 0, 2));
        assert_eq!(Clock::filled(2, 1).device(1), 1);
    }

    /// One step on a set of clocks: tick, join, or copy one into another.
    #[derive(Clone, Debug)]
    enum Step {
        Tick(usize, usize),
        Join(usize, usize),
        Copy(usize, usize),
        Own(usize, usize),
    }

    fn step(n: usize) -> impl Strategy<Value = Step> {
        prop_oneof![
            (0..n, 0..n).prop_map(|(c, d)| Step::Tick(c, d)),
            (0..n, 0..n).prop_map(|(a, b)| Step::Join(a, b)),
            (0..n, 0..n).prop_map(|(a, b)| Step::Copy(a, b)),
            (0..n, 0..n).prop_map(|(c, d)| Step::Own(c, d)),
        ]
    }

    proptest! {
        /// The shared, owner-split clock behaves as a plain vector of counters.
        #[test]
        fn matches_plain_vectors(steps in proptest::collection::vec(step(4), 0..60)) {
            let n = 4;
            let mut fast: Vec<Clock> = (0..n).map(|_| Clock::new(n)).collect();
            let mut plain: Vec<Vec<u32>> = vec![vec![0; n]; n];
            for s in steps {
                match s {
                    Step::Tick(c, d) => {
                        fast[c].tick(d);
                        plain[c][d] += 1;
                    }
                    Step::Join(a, b) => {
                        let other = fast[b].clone();
                        fast[a].join(&other);
                        let other = plain[b].clone();
                        for (x, y) in plain[a].iter_mut().zip(other) {
                            *x = (*x).max(y);
                        }
                    }
                    Step::Copy(a, b) => {
                        fast[a] = fast[b].clone();
                        plain[a] = plain[b].clone();
                    }
                    Step::Own(c, d) => fast[c] = fast[c].clone().owned_by(d),
                }
                for (f, p) in fast.iter().zip(&plain) {
                    let got: Vec<u32> = (0..n).map(|d| f.device(d)).collect();
                    prop_assert_eq!(&got, p);
                }
            }
        }
    }
}
