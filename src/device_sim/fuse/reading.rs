//! A run read through some of its outputs only (`run`'s check reads output 0; a
//! kernel's scratch passed out as an output, psum's `hbm_buf`, is never looked at):
//! every read of a view that a whole copy filled reads the copy's source instead, the
//! writes nothing reads then go, and a temporary that ends copied into an output lives
//! in that output's memory. Fewer passes, and fewer buffers touched for the first time
//! (a fresh page costs the kernel a fault and a zeroing, more than the pass itself).

use super::region::{Instr, Pattern};
use super::{fuse_with, live, Fused, Joins, Keep, Step};
use crate::ir::{Allocation, DataOp, Program, Schedule, View};
use std::collections::HashMap;

/// Steps looked back through for the whole copy that filled a view.
const LOOK_BACK: usize = 256;

/// `schedule` fused for a run after which only `outputs` (indices into the program's
/// outputs) are read: the others may hold anything.
pub fn fuse_reading(
    program: &Program,
    schedule: &Schedule,
    outputs: &[usize],
    joins: Joins,
) -> Fused {
    // The fusion reads the layout and the operands, never the traced ops: a copy of
    // them would double the plan's largest part (about 0.5 GB at P=803).
    let read = Program {
        name: program.name.clone(),
        devices: program.devices,
        layout: program.layout.clone(),
        ops: Vec::new(),
        dmas: Vec::new(),
        prologue: program.prologue.clone(),
        epilogue: program.epilogue.clone(),
        inputs: program.inputs.clone(),
        outputs: outputs
            .iter()
            .filter_map(|&k| program.outputs.get(k).copied())
            .collect(),
        invocations: program.invocations.clone(),
        cores: program.cores,
    };
    let mut f = fuse_with(&read, schedule, &[], Keep::Outputs, joins);
    let mut ops = f.ops.take().unwrap_or_else(|| schedule.ops.clone());
    forward_reads(&mut f.steps, &mut ops);
    live::prune(&read, &ops, &mut f.steps, &mut f.piece_ends, &[]);
    let allocs = &schedule.memory(program).allocs;
    rename_into_outputs(program, &read.outputs, allocs, &mut f.steps, &mut ops);
    f.piece_ends = vec![f.steps.len()];
    for s in &mut f.steps {
        if let Step::Region(r) = s {
            live::assign_slots(r);
        }
    }
    f.ops = Some(ops);
    f
}

/// The sources of copies and accumulates that run as they are, and the inputs a region
/// reads element for element, read where a whole copy before took them from, when
/// nothing wrote either view since. In step order, so a chain of copies (a ring's
/// forwarded buffers) is read at its start.
pub(super) fn forward_reads(steps: &mut [Step], ops: &mut [DataOp]) {
    for k in 0..steps.len() {
        let (before, rest) = steps.split_at_mut(k);
        match &mut rest[0] {
            Step::Op(i) => {
                let i = *i;
                let moved = match &ops[i] {
                    DataOp::Copy { src, dst } => {
                        source_of(before, ops, src).map(|from| DataOp::Copy {
                            src: from,
                            dst: *dst,
                        })
                    }
                    DataOp::Accumulate {
                        dst,
                        src,
                        op,
                        dtype,
                    } => source_of(before, ops, src)
                        .filter(|from| !from.overlaps(dst))
                        .map(|from| DataOp::Accumulate {
                            dst: *dst,
                            src: from,
                            op: *op,
                            dtype: *dtype,
                        }),
                    _ => None,
                };
                if let Some(m) = moved {
                    ops[i] = m;
                }
            }
            Step::Region(r) => {
                for j in 0..r.inputs.len() {
                    if r.inputs[j].pattern != Pattern::Full {
                        continue;
                    }
                    let v = r.inputs[j].view;
                    let Some(from) = source_of(before, ops, &v) else {
                        continue;
                    };
                    // The region's own writes stay apart from what it reads (in place
                    // only element for element, on the view it read before).
                    if r.outputs.iter().any(|o| o.view.overlaps(&from)) {
                        continue;
                    }
                    r.inputs[j].view = from;
                }
            }
        }
    }
}

/// The view that `v` holds a copy of: the last of `before` that writes `v` wrote all of
/// it from one view of its length, element for element (a copy, or a region's output of
/// a load), and nothing after wrote either.
fn source_of(before: &[Step], ops: &[DataOp], v: &View) -> Option<View> {
    let mut since: Vec<View> = Vec::new();
    for step in before.iter().rev().take(LOOK_BACK) {
        let from = match step {
            Step::Op(i) => {
                let op = &ops[*i];
                if !op.writes().any(|w| w.overlaps(v)) {
                    since.extend(op.writes());
                    continue;
                }
                match *op {
                    DataOp::Copy { src, dst } if dst == *v && !src.overlaps(&dst) => src,
                    _ => return None,
                }
            }
            Step::Region(r) => {
                if !r.writes().any(|w| w.overlaps(v)) {
                    since.extend(r.writes());
                    continue;
                }
                // Every write of the region over `v` is all of it, of one load.
                if r.writes().any(|w| w.overlaps(v) && w != *v) {
                    return None;
                }
                let o = r.outputs.iter().find(|o| o.view == *v)?;
                let Instr::Load(k) = r.instrs[o.reg] else {
                    return None;
                };
                let input = &r.inputs[k];
                if input.pattern != Pattern::Full || r.writes().any(|w| w.overlaps(&input.view)) {
                    return None;
                }
                input.view
            }
        };
        let kept = !since.iter().any(|w| w.overlaps(&from));
        return (kept && from.len() == v.len()).then_some(from);
    }
    None
}

/// Where each step touches memory: the first and last step that reads or writes an
/// allocation of a device.
fn touches(steps: &[Step], ops: &[DataOp]) -> HashMap<(usize, usize), (usize, usize)> {
    let mut at: HashMap<(usize, usize), (usize, usize)> = HashMap::new();
    for (k, s) in steps.iter().enumerate() {
        let mut note = |v: View| {
            let e = at.entry((v.device(), v.alloc())).or_insert((k, k));
            e.1 = k;
        };
        match s {
            Step::Op(i) => ops[*i].reads().chain(ops[*i].writes()).for_each(&mut note),
            Step::Region(r) => r.reads().chain(r.writes()).for_each(&mut note),
        }
    }
    at
}

/// A temporary that every step is done with once an output is first written, and whose
/// last use is that write, moves into the output's memory: the output's first step
/// writes all of it and reads none of it, and a region there reads the temporary
/// element for element on the very elements it writes (or apart from them). The
/// temporary's own first step writes all of it and reads none of it too, so what the
/// memory held before (a run before this one: the output) is never seen. The
/// temporary is neither an input nor an output of `program`; the output is one of
/// `outputs` (allocations), not an input, of the temporary's size and dtype.
fn rename_into_outputs(
    program: &Program,
    outputs: &[usize],
    allocs: &[Allocation],
    steps: &mut Vec<Step>,
    ops: &mut [DataOp],
) {
    let at = touches(steps, ops);
    let io = |a: usize| program.inputs.contains(&a) || program.outputs.contains(&a);
    let mut keys: Vec<_> = at.keys().copied().collect();
    keys.sort_unstable();
    let mut into: HashMap<(usize, usize), usize> = HashMap::new();
    for &(d, b) in &keys {
        if !outputs.contains(&b) || program.inputs.contains(&b) {
            continue;
        }
        let first = at[&(d, b)].0;
        let temp = keys.iter().find(|&&(e, a)| {
            e == d
                && a != b
                && !io(a)
                && !into.contains_key(&(d, a))
                && allocs[a].numel() == allocs[b].numel()
                && allocs[a].dtype == allocs[b].dtype
                && at[&(d, a)].1 <= first
                && starts_whole(&steps[at[&(d, a)].0], ops, d, a, allocs[a].numel())
                && fits(&steps[first], ops, d, a, b, allocs[b].numel())
        });
        if let Some(&(_, a)) = temp {
            into.insert((d, a), b);
        }
    }
    if into.is_empty() {
        return;
    }
    let map = |v: View| match into.get(&(v.device(), v.alloc())) {
        Some(&b) => View::new(v.device(), b, v.offset(), v.len()),
        None => v,
    };
    steps.retain_mut(|s| match s {
        Step::Op(i) => {
            ops[*i] = ops[*i].map_views(map);
            // A copy of the temporary into the output is now no copy at all.
            !matches!(ops[*i], DataOp::Copy { src, dst } if src == dst)
        }
        Step::Region(r) => {
            for i in &mut r.inputs {
                i.view = map(i.view);
            }
            for o in &mut r.outputs {
                o.view = map(o.view);
            }
            true
        }
    });
}

/// True when `step` writes all of allocation `a` of device `d` (`n` elements) and
/// reads none of it.
fn starts_whole(step: &Step, ops: &[DataOp], d: usize, a: usize, n: usize) -> bool {
    let on = |v: &View| v.device() == d && v.alloc() == a;
    let whole = |v: &View| on(v) && v.offset() == 0 && v.len() == n;
    match step {
        Step::Op(i) => {
            let op = &ops[*i];
            let acc = match op {
                DataOp::Accumulate { dst, .. } => Some(*dst),
                _ => None,
            };
            op.writes().any(|w| whole(&w)) && !op.reads().chain(acc).any(|r| on(&r))
        }
        Step::Region(r) => r.writes().any(|w| whole(&w)) && !r.reads().any(|v| on(&v)),
    }
}

/// True when `step`, the first to touch allocation `b` of device `d` (of `n` elements),
/// writes all of it, reads none of it, writes nothing of `a`, and reads `a` where it
/// may once `a` is `b`: as a plain op (the executor reads sources apart from their
/// destination before it writes), or in a region element for element on the elements
/// it writes or apart from every write.
fn fits(step: &Step, ops: &[DataOp], d: usize, a: usize, b: usize, n: usize) -> bool {
    let on = |v: &View, x: usize| v.device() == d && v.alloc() == x;
    if !starts_whole(step, ops, d, b, n) {
        return false;
    }
    match step {
        Step::Op(i) => !ops[*i].writes().any(|w| on(&w, a)),
        Step::Region(r) => {
            let renamed = |v: &View| View::new(d, b, v.offset(), v.len());
            !r.writes().any(|w| on(&w, a))
                && r.inputs.iter().filter(|i| on(&i.view, a)).all(|i| {
                    let v = renamed(&i.view);
                    i.pattern == Pattern::Full && r.writes().all(|w| w == v || !w.overlaps(&v))
                })
        }
    }
}
