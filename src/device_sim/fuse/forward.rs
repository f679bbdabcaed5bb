//! Sources read where a copy took them from: a compute op that runs as it is (a
//! reduction, a transpose, a dot product) reads a view that a copy filled from another
//! (a kernel's operand copied into VMEM, then into the value the op reads: a copy op of
//! its own, or a region that stores a register loading the other view as it is); it
//! reads that other view instead when nothing wrote either since, and the copies'
//! writes are then left for the liveness pass to drop.

use super::region::{Instr, Pattern, Region};
use super::Step;
use crate::ir::{Compute, ComputeKind, DataOp, View};

/// Steps looked back through for the copy of a source.
const LOOK_BACK: usize = 64;

/// `ops` with the sources of the compute ops of `steps` forwarded past the copies that
/// fill them, within each piece (`piece_ends`: nothing runs between a piece's steps, so
/// what a copy read is still there when the op runs); `None` when none is.
pub(super) fn forward(
    steps: &mut [Step],
    piece_ends: &[usize],
    ops: &[DataOp],
) -> Option<Vec<DataOp>> {
    let mut out: Option<Vec<DataOp>> = None;
    let mut start = 0;
    for &end in piece_ends {
        forward_piece(&mut steps[start..end], ops, &mut out);
        start = end;
    }
    out
}

/// [`forward`] within one piece, into `out`.
fn forward_piece(steps: &mut [Step], ops: &[DataOp], out: &mut Option<Vec<DataOp>>) {
    for k in 0..steps.len() {
        let (before, rest) = steps.split_at_mut(k);
        let step = &mut rest[0];
        if let Step::Region(r) = step {
            forward_inputs(r, before, ops);
            continue;
        }
        let Step::Op(i) = step else { continue };
        let DataOp::Compute(c) = &ops[*i] else {
            continue;
        };
        if matches!(c.kind, ComputeKind::UpdateSlice { .. }) {
            continue;
        }
        let srcs: Vec<_> = c
            .srcs
            .iter()
            .map(|s| {
                let mut s = s.clone();
                if let Some(from) = copied_from(before, ops, &s.view) {
                    s.view = from;
                }
                s
            })
            .collect();
        if srcs.iter().zip(&c.srcs).all(|(a, b)| a.view == b.view) {
            continue;
        }
        let Ok(moved) = Compute::new(c.kind.clone(), srcs, c.dst.clone()) else {
            continue;
        };
        out.get_or_insert_with(|| ops.to_vec())[*i] = DataOp::Compute(moved.into());
    }
}

/// The inputs of region `r` read where a region of copies among `before` took them
/// from (the softmax's input, copied into the value its max and its exponent read),
/// where that view is apart from every view `r` writes.
fn forward_inputs(r: &mut Region, before: &[Step], ops: &[DataOp]) {
    for k in 0..r.inputs.len() {
        let Some(from) = copied_from(before, ops, &r.inputs[k].view) else {
            continue;
        };
        if !r.writes().any(|w| w.overlaps(&from)) {
            r.inputs[k].view = from;
        }
    }
}

/// The view that `v` holds a copy of, as the last of `before` that writes it left it,
/// when that step copies all of `v` from one view element for element (a copy op, or a
/// region storing `v` from a register that loads that view), and nothing after it
/// wrote either view.
fn copied_from(before: &[Step], ops: &[DataOp], v: &View) -> Option<View> {
    let back = &before[before.len().saturating_sub(LOOK_BACK)..];
    for (j, step) in back.iter().enumerate().rev() {
        // The steps after this one: what they write is checked only for a candidate's
        // source (no list of their writes made for every search).
        let since = &back[j + 1..];
        match step {
            Step::Op(i) => {
                let op = &ops[*i];
                if op.writes().any(|w| w.overlaps(v)) {
                    // A lone copy runs as an op of its own (not a region of one copy).
                    return match *op {
                        DataOp::Copy { src, dst } if dst == *v && src.len() == v.len() => {
                            let kept = !written(since, ops, &src);
                            (kept && !src.overlaps(v)).then_some(src)
                        }
                        _ => None,
                    };
                }
            }
            Step::Region(r) => {
                if !r.writes().any(|w| w.overlaps(v)) {
                    continue;
                }
                // `v` stored whole from a register that loads an input as it is (the
                // region may do more: a copy of the same length fuses with others).
                let loaded = r.outputs.iter().find_map(|o| match r.instrs.get(o.reg) {
                    Some(&Instr::Load(k)) if o.view == *v => r.inputs.get(k),
                    _ => None,
                });
                let input = loaded.filter(|i| i.pattern == Pattern::Full)?;
                let from = input.view;
                let kept = !r.writes().any(|w| w.overlaps(&from)) && !written(since, ops, &from);
                let same = from.len() == v.len();
                return (same && kept && r.writes().all(|w| !w.overlaps(v) || w == *v))
                    .then_some(from);
            }
        }
    }
    None
}

/// True when one of `steps` writes over `v`.
fn written(steps: &[Step], ops: &[DataOp], v: &View) -> bool {
    steps.iter().any(|step| match step {
        Step::Op(i) => ops[*i].writes().any(|w| w.overlaps(v)),
        Step::Region(r) => r.writes().any(|w| w.overlaps(v)),
    })
}

/// Steps looked through for a read of a destination that a copy would leave unwritten.
const LOOK_AHEAD: usize = 4096;

/// Compute ops of `steps` that run as they are and whose destination the next step
/// only copies elsewhere (a value stored to a ref and the ref copied out) write there
/// directly, and that copy goes, where nothing after it reads the destination
/// (`kept`: the views read after the run). `ops` is rewritten (made from `schedule`'s
/// when `None`).
pub(super) fn forward_dsts(
    steps: &mut Vec<Step>,
    ops: &mut Option<Vec<DataOp>>,
    schedule: &[DataOp],
    kept: &[View],
) {
    let mut k = 0;
    while k + 1 < steps.len() {
        let (Some(from), Some(to)) = (copy_source(&steps[k + 1]), copied_to(&steps[k + 1])) else {
            k += 1;
            continue;
        };
        let moved = match &steps[k] {
            Step::Op(i) => match &ops.as_deref().unwrap_or(schedule)[*i] {
                DataOp::Compute(c) if !matches!(c.kind, ComputeKind::UpdateSlice { .. }) => {
                    let (d, i) = (c.dst.view, *i);
                    let apart = !c.srcs.iter().any(|s| s.view.overlaps(&to)) && !to.overlaps(&d);
                    let mut dst = c.dst.clone();
                    dst.view = to;
                    match Compute::new(c.kind.clone(), c.srcs.clone(), dst) {
                        Ok(m) if d == from && apart && to.len() == d.len() => {
                            Some((d, Moved::Op(i, m.into())))
                        }
                        _ => None,
                    }
                }
                _ => None,
            },
            // A reduction a region folds, into the copy's destination instead.
            Step::Region(r) => r.reduces.iter().enumerate().find_map(|(j, q)| {
                let d = q.dst;
                let apart = !r.reads().chain(r.writes()).any(|v| v.overlaps(&to));
                (d == from && apart && to.len() == d.len()).then_some((d, Moved::Reduce(j)))
            }),
        };
        let Some((d, moved)) = moved else {
            k += 1;
            continue;
        };
        if read_after(&steps[k + 2..], d, ops.as_deref().unwrap_or(schedule), kept) {
            k += 1;
            continue;
        }
        match moved {
            Moved::Op(i, m) => ops.get_or_insert_with(|| schedule.to_vec())[i] = DataOp::Compute(m),
            Moved::Reduce(j) => {
                if let Step::Region(r) = &mut steps[k] {
                    r.reduces[j].dst = to;
                }
            }
        }
        steps.remove(k + 1);
        k += 1;
    }
}

/// What [`forward_dsts`] moves: a compute op (its index and its new form), or a
/// region's reduction (its index).
enum Moved {
    Op(usize, std::sync::Arc<Compute>),
    Reduce(usize),
}

/// The view a region of one plain copy reads.
fn copy_source(step: &Step) -> Option<View> {
    match step {
        Step::Region(r)
            if r.instrs.len() == 1
                && matches!(r.instrs[0], Instr::Load(0))
                && r.inputs.len() == 1
                && r.inputs[0].pattern == Pattern::Full
                && r.outputs.len() == 1
                && r.reduces.is_empty() =>
        {
            Some(r.inputs[0].view)
        }
        _ => None,
    }
}

/// The view a region of one plain copy writes.
fn copied_to(step: &Step) -> Option<View> {
    copy_source(step)?;
    match step {
        Step::Region(r) => Some(r.outputs[0].view),
        Step::Op(_) => None,
    }
}

/// True when `d` is read after the run (`kept`), or by one of `later` (of `ops`), or
/// there are too many of them to look through.
fn read_after(later: &[Step], d: View, ops: &[DataOp], kept: &[View]) -> bool {
    kept.iter().any(|v| v.overlaps(&d))
        || later.len() > LOOK_AHEAD
        || later.iter().any(|s| match s {
            Step::Op(j) => {
                let op = &ops[*j];
                let acc = match op {
                    DataOp::Accumulate { dst, .. } => Some(*dst),
                    _ => None,
                };
                op.reads().chain(acc).any(|r| r.overlaps(&d))
            }
            Step::Region(r) => r.reads().any(|v| v.overlaps(&d)),
        })
}
