//! Fills trimmed to the words nothing overwrites first: a kernel that zeroes its output
//! and then lands DMAs in it (a ragged all-to-all's `o_ref[...] = 0`) writes those rows
//! twice. The part of a large fill that later copies or fills overwrite before any step
//! reads (or otherwise touches) that memory is dead, and is left out of the run.

use crate::device_sim::fuse::{Fused, Step};
use crate::ir::{DataOp, View};

/// Fills smaller than this (words) are left as they are: too little to gain.
pub const MIN_WORDS: usize = 1 << 16;

/// Steps looked at after a fill for the copies that overwrite it.
const HORIZON: usize = 1 << 16;

/// `fused` (over `ops`, the schedule's own where `fused.ops` is `None`) with every lone
/// fill of at least [`MIN_WORDS`] cut to the parts that are not overwritten before they
/// are read: a fill wholly overwritten is dropped, one partly overwritten runs as the
/// fills of what is left. Only for a run read through its outputs after it ends, in one
/// piece (nothing between steps looks at memory); unchanged otherwise.
pub fn trim(fused: Fused, ops: &[DataOp]) -> Fused {
    if fused.piece_ends.len() > 1 {
        return fused;
    }
    let own = fused.ops.as_deref().unwrap_or(ops);
    let cuts: Vec<(usize, Vec<(usize, usize)>)> = fused
        .steps
        .iter()
        .enumerate()
        .filter_map(|(s, step)| {
            let Step::Op(i) = step else { return None };
            let DataOp::Fill { dst, .. } = &own[*i] else {
                return None;
            };
            if dst.len() < MIN_WORDS {
                return None;
            }
            let covered = overwritten(dst, &fused.steps[s + 1..], own);
            let left = uncovered(dst.offset(), dst.offset() + dst.len(), covered);
            (left != [(dst.offset(), dst.offset() + dst.len())]).then_some((s, left))
        })
        .collect();
    if cuts.is_empty() {
        return fused;
    }
    let mut new_ops = own.to_vec();
    let mut steps = Vec::with_capacity(fused.steps.len());
    let mut cuts = cuts.into_iter().peekable();
    for (s, step) in fused.steps.into_iter().enumerate() {
        let Some((_, left)) = cuts.next_if(|(c, _)| *c == s) else {
            steps.push(step);
            continue;
        };
        let Step::Op(i) = step else {
            unreachable!("a cut is a fill's step")
        };
        let DataOp::Fill { dst, bits } = new_ops[i].clone() else {
            unreachable!("a cut is a fill's step")
        };
        for (lo, hi) in left {
            steps.push(Step::Op(new_ops.len()));
            new_ops.push(DataOp::Fill {
                dst: View::new(dst.device(), dst.alloc(), lo, hi - lo),
                bits,
            });
        }
    }
    Fused {
        piece_ends: vec![steps.len()],
        steps,
        ops: Some(new_ops),
    }
}

/// The ranges of `fill`'s memory that copies and fills among `later` write before any
/// step reads or otherwise touches that memory (clipped to `fill`).
fn overwritten(fill: &View, later: &[Step], ops: &[DataOp]) -> Vec<(usize, usize)> {
    let (lo, hi) = (fill.offset(), fill.offset() + fill.len());
    let hits = |v: &View| {
        v.device() == fill.device()
            && v.alloc() == fill.alloc()
            && v.offset() < hi
            && v.offset() + v.len() > lo
    };
    let clip = |v: &View| (v.offset().max(lo), (v.offset() + v.len()).min(hi));
    let mut covered = Vec::new();
    for step in later.iter().take(HORIZON) {
        match step {
            Step::Op(i) => match &ops[*i] {
                DataOp::Copy { src, dst } => {
                    if hits(src) {
                        break;
                    }
                    if hits(dst) {
                        covered.push(clip(dst));
                    }
                }
                DataOp::Fill { dst, .. } => {
                    if hits(dst) {
                        covered.push(clip(dst));
                    }
                }
                // An accumulate reads its destination; a compute op may write part of
                // its views: either ends the search.
                op => {
                    if op.reads().chain(op.writes()).any(|v| hits(&v)) {
                        break;
                    }
                }
            },
            Step::Region(r) => {
                if r.reads().chain(r.writes()).any(|v| hits(&v)) {
                    break;
                }
            }
        }
    }
    covered
}

/// The parts of `[lo, hi)` that no range of `covered` holds, in order.
fn uncovered(lo: usize, hi: usize, mut covered: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    covered.sort_unstable();
    let mut left = Vec::new();
    let mut at = lo;
    for (a, b) in covered {
        if a > at {
            left.push((at, a));
        }
        at = at.max(b);
    }
    if at < hi {
        left.push((at, hi));
    }
    left
}

#[cfg(test)]
mod tests {
    use super::*;

    const N: usize = MIN_WORDS * 4;

    fn v(device: usize, alloc: usize, offset: usize, len: usize) -> View {
        View::new(device, alloc, offset, len)
    }

    fn fill(dst: View) -> DataOp {
        DataOp::Fill { dst, bits: 0 }
    }

    fn copy(src: View, dst: View) -> DataOp {
        DataOp::Copy { src, dst }
    }

    /// The fills `fused` runs, as (device, alloc, offset, len).
    fn fills(fused: &Fused, ops: &[DataOp]) -> Vec<(usize, usize, usize, usize)> {
        let own = fused.ops.as_deref().unwrap_or(ops);
        fused
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Op(i) => match &own[*i] {
                    DataOp::Fill { dst, .. } => {
                        Some((dst.device(), dst.alloc(), dst.offset(), dst.len()))
                    }
                    _ => None,
                },
                Step::Region(_) => None,
            })
            .collect()
    }

    #[test]
    fn copies_landing_before_any_read_cut_the_fill_to_the_gaps() {
        // Device 0's alloc 2 zeroed, then three DMAs land in it (one from device 1,
        // overlapping another), then it is read.
        let ops = vec![
            fill(v(0, 2, 0, N)),
            copy(v(1, 0, 0, 100), v(0, 2, 1000, 100)),
            copy(v(1, 0, 0, 2000), v(0, 2, 1050, 2000)),
            copy(v(0, 0, 0, N / 2), v(0, 2, N / 2, N / 2)),
            copy(v(0, 2, 0, N), v(0, 1, 0, N)),
            copy(v(0, 0, 0, 10), v(0, 2, 0, 10)), // after the read: no use
        ];
        let out = trim(Fused::unfused(ops.len(), &[]), &ops);
        assert_eq!(
            fills(&out, &ops),
            vec![(0, 2, 0, 1000), (0, 2, 3050, N / 2 - 3050)]
        );
        assert_eq!(out.steps.len(), ops.len() + 1);
        assert_eq!(out.piece_ends, vec![out.steps.len()]);
    }

    #[test]
    fn a_fill_wholly_overwritten_is_dropped_and_others_stay() {
        let ops = vec![
            fill(v(0, 2, 0, N)),
            fill(v(1, 2, 0, N)), // device 1's: nothing overwrites it
            copy(v(0, 0, 0, N), v(0, 2, 0, N)),
            copy(v(0, 2, 0, N), v(0, 1, 0, N)),
        ];
        let out = trim(Fused::unfused(ops.len(), &[]), &ops);
        assert_eq!(fills(&out, &ops), vec![(1, 2, 0, N)]);
        assert_eq!(out.steps.len(), 3);
    }

    #[test]
    fn a_read_an_accumulate_or_a_compute_touching_the_fill_ends_the_search() {
        // Read first (a copy out of part of it): nothing after counts.
        let read_first = vec![
            fill(v(0, 2, 0, N)),
            copy(v(0, 2, 0, 1), v(0, 1, 0, 1)),
            copy(v(0, 0, 0, N), v(0, 2, 0, N)),
        ];
        // An accumulate into it reads it.
        let summed = vec![
            fill(v(0, 2, 0, N)),
            DataOp::Accumulate {
                dst: v(0, 2, 0, 8),
                src: v(0, 0, 0, 8),
                op: crate::ir::ReduceOp::Sum,
                dtype: crate::array::DType::F32,
            },
            copy(v(0, 0, 0, N), v(0, 2, 0, N)),
        ];
        for ops in [read_first, summed] {
            let out = trim(Fused::unfused(ops.len(), &[]), &ops);
            assert_eq!(fills(&out, &ops), vec![(0, 2, 0, N)]);
            assert_eq!(out, Fused::unfused(ops.len(), &[]), "unchanged");
        }
    }

    #[test]
    fn small_fills_and_runs_in_pieces_are_left_alone() {
        let small = vec![
            fill(v(0, 2, 0, MIN_WORDS - 1)),
            copy(v(0, 0, 0, MIN_WORDS - 1), v(0, 2, 0, MIN_WORDS - 1)),
        ];
        let out = trim(Fused::unfused(small.len(), &[]), &small);
        assert_eq!(out, Fused::unfused(small.len(), &[]));
        let big = vec![fill(v(0, 2, 0, N)), copy(v(0, 0, 0, N), v(0, 2, 0, N))];
        let out = trim(Fused::unfused(big.len(), &[1]), &big);
        assert_eq!(out, Fused::unfused(big.len(), &[1]));
    }

    #[test]
    fn uncovered_parts() {
        assert_eq!(uncovered(0, 10, vec![]), vec![(0, 10)]);
        assert_eq!(
            uncovered(0, 10, vec![(2, 4), (3, 6), (8, 10)]),
            vec![(0, 2), (6, 8)]
        );
        assert_eq!(uncovered(0, 10, vec![(0, 10)]), vec![]);
    }
}
