//! A reduction a fused region folds as its blocks go ([`RowReduce`]): the fold of each
//! group carried from one block to the next, in the order the reduction alone folds a
//! group (partials per lane, then the rest: [`super::compute`]'s `Fold`), so that the
//! results are the same bits.

use super::compute::{widening, FOLD_LANES};
use super::extrema::Extreme;
use super::lanes;
use crate::array::DType;
use crate::device_sim::fuse::{Reg, RowReduce};
use crate::ir::Reduction;

/// The identity of a float reduction.
fn identity(op: Reduction) -> f32 {
    match op {
        Reduction::Sum => 0.0,
        Reduction::Max => f32::NEG_INFINITY,
        Reduction::Min => f32::INFINITY,
    }
}

/// Where the fold of one reduction stands in a run of whole groups.
pub(super) struct RowFold {
    /// Partials of the group's first elements (element `j` in lane `j % FOLD_LANES`).
    acc: [f32; FOLD_LANES],
    /// The partials folded, then each element after them.
    total: f32,
    /// Elements of the group folded so far.
    j: usize,
    /// True once the partials are folded into `total`.
    folded: bool,
    /// The group's index (its result's element of the destination).
    group: usize,
    /// A max's or min's scan (in any order: the same bits, [`Extreme`]).
    extreme: Option<Extreme>,
}

impl RowFold {
    /// The fold of `q` over elements from `start` (the first of a group).
    pub(super) fn new(q: &RowReduce, start: usize) -> Self {
        debug_assert_eq!(start % q.k, 0, "runs of whole groups");
        let init = identity(q.op);
        RowFold {
            acc: [init; FOLD_LANES],
            total: init,
            j: 0,
            folded: false,
            group: start / q.k,
            extreme: match q.op {
                Reduction::Sum => None,
                op => Some(Extreme::new(op == Reduction::Max)),
            },
        }
    }

    /// Folds the next elements `x` of register `reg` (as the region holds it: 16-bit
    /// floats raw or as values; or the 16-bit elements of a lent input as stored),
    /// writing each group's result to `dst` as it completes.
    ///
    /// # Safety
    /// `dst` holds an element for every group, and this fold's groups are written by
    /// no one else meanwhile.
    #[inline(always)]
    pub(super) unsafe fn fold<T: Copy + Into<u32>>(
        &mut self,
        q: &RowReduce,
        reg: Reg,
        x: &[T],
        dst: *mut u32,
    ) {
        let t = if reg.raw { reg.dtype } else { DType::F32 };
        // SAFETY: as the function's.
        widening!(t, |w| unsafe {
            match q.op {
                Reduction::Sum => self.run(q, x, w, |a, b| a + b, dst),
                _ => self.scan(q, x, w, dst),
            }
        })
    }

    /// [`RowFold::fold`] of a max or min, with widening `w`.
    #[inline(always)]
    unsafe fn scan<T: Copy + Into<u32>, W: Fn(u32) -> f32 + Copy>(
        &mut self,
        q: &RowReduce,
        x: &[T],
        w: W,
        dst: *mut u32,
    ) {
        let Some(mut e) = self.extreme else {
            unreachable!("a max or min")
        };
        let mut i = 0;
        while i < x.len() {
            let take = (q.k - self.j).min(x.len() - i);
            e.scan(&x[i..i + take], w);
            self.j += take;
            i += take;
            if self.j == q.k {
                // SAFETY: as `fold`'s.
                unsafe { self.finish(q, e.value(), dst) };
                e = Extreme::new(q.op == Reduction::Max);
            }
        }
        self.extreme = Some(e);
    }

    /// Writes the group's result `total` and starts the next group.
    ///
    /// # Safety
    /// As [`RowFold::fold`]'s.
    #[inline(always)]
    unsafe fn finish(&mut self, q: &RowReduce, total: f32, dst: *mut u32) {
        // Rounded once to the destination's dtype, as the reduction alone.
        let mut vals = [0u32; 1];
        lanes::convert(DType::F32, q.dtype, &[total.to_bits()], &mut vals);
        let mut bits = [0u32; 1];
        lanes::narrow(q.dtype, &vals, &mut bits);
        // SAFETY: the group's element is in `dst` and this fold's (the caller's).
        unsafe { dst.add(self.group).write(bits[0]) };
        self.group += 1;
        self.j = 0;
    }

    /// [`RowFold::fold`] with widening `w` and operator `f`.
    #[inline(always)]
    unsafe fn run<T, W, F>(&mut self, q: &RowReduce, x: &[T], w: W, f: F, dst: *mut u32)
    where
        T: Copy + Into<u32>,
        W: Fn(u32) -> f32 + Copy,
        F: Fn(f32, f32) -> f32 + Copy,
    {
        let init = identity(q.op);
        let k = q.k;
        let whole = k - k % FOLD_LANES;
        let n = x.len();
        let mut i = 0;
        loop {
            if self.j < whole {
                let take = (whole - self.j).min(n - i);
                let seg = &x[i..i + take];
                let lane0 = self.j % FOLD_LANES;
                let head = ((FOLD_LANES - lane0) % FOLD_LANES).min(take);
                let mut acc = self.acc;
                for (l, &v) in seg[..head].iter().enumerate() {
                    acc[lane0 + l] = f(acc[lane0 + l], w(v.into()));
                }
                let mut it = seg[head..].chunks_exact(FOLD_LANES);
                for c in &mut it {
                    for l in 0..FOLD_LANES {
                        acc[l] = f(acc[l], w(c[l].into()));
                    }
                }
                for (l, &v) in it.remainder().iter().enumerate() {
                    acc[l] = f(acc[l], w(v.into()));
                }
                self.acc = acc;
                self.j += take;
                i += take;
                if self.j < whole {
                    return;
                }
            }
            if !self.folded {
                self.total = self.acc.iter().fold(init, |a, &b| f(a, b));
                self.folded = true;
            }
            let take = (k - self.j).min(n - i);
            for &v in &x[i..i + take] {
                self.total = f(self.total, w(v.into()));
            }
            self.j += take;
            i += take;
            if self.j == k {
                // SAFETY: as `fold`'s.
                unsafe { self.finish(q, self.total, dst) };
                self.acc = [init; FOLD_LANES];
                self.total = init;
                self.folded = false;
            }
            if i == n {
                return;
            }
        }
    }
}
