//! Reductions folded by the region before them ([`super::Joins::reduces`]): a float
//! reduction over trailing dimensions whose operand is a region's output, run right
//! after that region, is folded from the output's register as the region's blocks go
//! (a softmax's max and sum then cost no pass over memory of their own).
//!
//! Moving the reduction into the region reorders nothing: it ran right after the
//! region, reads only what the region wrote, and writes a view that the region neither
//! reads nor writes.

use super::region::{Region, RowReduce};
use super::Step;
use crate::ir::{Compute, ComputeKind, DataOp};

/// Folds each reduction of `steps` (of `ops`) that can be into the region before it,
/// its step then gone.
pub(super) fn fold_into_regions(steps: &mut Vec<Step>, ops: &[DataOp]) {
    let mut k = 1;
    while k < steps.len() {
        let q = match (&steps[k - 1], &steps[k]) {
            (Step::Region(r), Step::Op(i)) => match &ops[*i] {
                DataOp::Compute(c) => foldable(r, c),
                _ => None,
            },
            _ => None,
        };
        match (q, &mut steps[k - 1]) {
            (Some(q), Step::Region(r)) => {
                r.reduces.push(q);
                steps.remove(k);
            }
            _ => k += 1,
        }
    }
}

/// `c` as a reduction that region `r` folds, when it can be: a float reduction over
/// trailing dimensions of all of one of `r`'s outputs (in that output's dtype), into a
/// view apart from every view `r` reads or writes, with groups as long as those of any
/// reduction `r` folds already.
fn foldable(r: &Region, c: &Compute) -> Option<RowReduce> {
    let ComputeKind::Reduce { op, axes } = &c.kind else {
        return None;
    };
    let [s] = c.srcs.as_slice() else {
        return None;
    };
    let rank = s.shape.len();
    let trailing = !axes.is_empty()
        && axes
            .iter()
            .enumerate()
            .all(|(i, &a)| a + axes.len() == rank + i);
    let k: usize = axes.iter().map(|&a| s.shape[a]).product();
    let dst = c.dst.view;
    let whole = c.reads() == [s.view] && c.writes() == [dst];
    if !trailing || k == 0 || !whole || !s.dtype.is_float() || !c.dst.dtype.is_float() {
        return None;
    }
    let out = r
        .outputs
        .iter()
        .find(|o| o.view == s.view && o.view.len() == r.n)?;
    let same_k = r.reduces.iter().all(|q| q.k == k);
    let apart = !r.reads().chain(r.writes()).any(|v| v.overlaps(&dst));
    let fits = r.n.is_multiple_of(k) && dst.len() == r.n / k && s.view.len() == r.n;
    (r.regs[out.reg].dtype == s.dtype && same_k && apart && fits).then_some(RowReduce {
        reg: out.reg,
        op: *op,
        k,
        dst,
        dtype: c.dst.dtype,
    })
}
