//! Reductions folded by the region before them ([`super::Joins::reduces`]): a float
//! reduction over trailing dimensions whose operand is a region's output, run right
//! after that region, is folded from the output's register as the region's blocks go
//! (a softmax's max and sum then cost no pass over memory of their own).
//!
//! Moving the reduction into the region reorders nothing: it ran right after the
//! region, reads only what the region wrote, and writes a view that the region neither
//! reads nor writes.

use super::region::{Instr, Pattern, Region, RowReduce};
use super::Step;
use crate::array::DType;
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
/// view apart from every view `r` reads or writes (but one that `r` reads only as a
/// row's value spread over the row, group for group: each group's result is written
/// once the group's elements are computed), with groups as long as those of any
/// reduction `r` folds already. A 16-bit float widened to f32 for the reduction
/// (exact) is folded from the 16-bit register itself.
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
    let spread = |i: &super::Input| i.view == dst && by_group(&i.pattern, k, r.n);
    let apart = !r.writes().any(|v| v.overlaps(&dst))
        && r.inputs.iter().all(|i| !i.view.overlaps(&dst) || spread(i));
    let fits = r.n.is_multiple_of(k) && dst.len() == r.n / k && s.view.len() == r.n;
    (r.regs[out.reg].dtype == s.dtype && same_k && apart && fits).then_some(RowReduce {
        reg: exact_source(r, out.reg),
        op: *op,
        k,
        dst,
        dtype: c.dst.dtype,
    })
}

/// The register whose values register `reg` of `r` holds exactly: a 16-bit float
/// converted to f32 (exact) is its 16-bit register, before its widening (a fold widens
/// as it reads).
fn exact_source(r: &Region, reg: usize) -> usize {
    let sixteen = |t: DType| matches!(t, DType::BF16 | DType::F16);
    match r.instrs[reg] {
        Instr::Convert(from, DType::F32, a) if sixteen(from) && r.regs[a].dtype == from => {
            match r.instrs[a] {
                Instr::Widen(b) if r.regs[b].raw && !r.regs[b].uniform => b,
                _ if !r.regs[a].uniform => a,
                _ => reg,
            }
        }
        _ => reg,
    }
}

/// True when `p` (of a region of `n` elements) reads element `i / k` of its view for
/// element `i`: a row's value spread along the row's `k` elements (the trailing
/// dimensions), rows in order.
pub(crate) fn by_group(p: &Pattern, k: usize, n: usize) -> bool {
    let Pattern::Broadcast { shape, dims, into } = p else {
        return false;
    };
    if k == 0 || !n.is_multiple_of(k) {
        return false;
    }
    let strides = Pattern::strides(shape, dims, into);
    // The trailing dimensions that make up a group.
    let (mut s, mut inner) = (into.len(), 1usize);
    while s > 0 && inner < k {
        s -= 1;
        inner *= into[s];
    }
    let along = (s..into.len()).all(|d| strides[d] == 0 || into[d] == 1);
    // The leading dimensions row-major: group g is source element g.
    let (mut step, mut rows) = (1, true);
    for d in (0..s).rev() {
        rows &= into[d] == 1 || strides[d] == step;
        step *= into[d];
    }
    inner == k && along && rows && shape.iter().product::<usize>() == n / k
}
