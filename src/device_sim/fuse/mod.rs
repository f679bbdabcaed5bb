//! Pipeline step sched -> device_sim: a schedule's elementwise ops fused for the executors.
//!
//! What an executor runs for a schedule: its data ops with the elementwise ones of each
//! device fused into [`Region`]s (a chain of ops over the same elements evaluated a
//! cache-sized block at a time, as numexpr evaluates an expression), and writes that
//! nothing reads afterwards dropped ([`live`]): a value loaded from a ref, computed on
//! and stored to another ref is read once and written once.
//!
//! Fusing reorders: an op that joins a region runs when the region runs, after ops the
//! schedule lists later. That is only done where the ops moved past each other touch
//! no common element with one of them writing (the schedule's order between them is
//! then no order at all), so every element ends as the schedule leaves it.

mod build;
mod forward;
mod lanes;
mod later;
mod live;
mod reading;
mod reduce;
mod region;

pub use reading::fuse_reading;
pub(crate) use reduce::by_group;
pub use region::{Input, Instr, Output, Pattern, Reg, Region, RowReduce};

use crate::ir::{DataOp, Program, Schedule, View};
use build::Builder;
use rayon::prelude::*;

/// One step of a fused schedule.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// The schedule's op of this index, as it is.
    Op(usize),
    /// A fused region.
    Region(Box<Region>),
}

/// A schedule as an executor runs it: steps, cut into pieces where it was asked to be.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fused {
    /// Every piece's steps, in order.
    pub steps: Vec<Step>,
    /// The step each piece ends before (the last is `steps.len()`).
    pub piece_ends: Vec<usize>,
    /// The ops that [`Step::Op`] indexes where a pass changed some (a compute op's
    /// sources read where they were copied from, [`Joins::forward`]); `None`: the
    /// schedule's own.
    pub ops: Option<Vec<DataOp>>,
}

impl Fused {
    /// Every op of a schedule of `ops` ops as it is, cut before each index of `cuts`.
    pub fn unfused(ops: usize, cuts: &[usize]) -> Fused {
        let mut piece_ends: Vec<usize> = cuts.iter().map(|&c| c.min(ops)).collect();
        piece_ends.push(ops);
        Fused {
            steps: (0..ops).map(Step::Op).collect(),
            piece_ends,
            ops: None,
        }
    }
}

/// Most instructions of one region (its registers' blocks stay in the cache).
const MAX_INSTRS: usize = 64;

/// Fewest ops of a schedule fused in lanes of devices on the pool's threads (below, one
/// thread is done before the others start).
const LANES_FROM: usize = 4096;

/// What a fused run must leave in memory when it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep<'a> {
    /// Its outputs: writes nothing reads are dropped (a run read only through its
    /// outputs).
    Outputs,
    /// Every write (a run in pieces whose memory is read and written between them, or
    /// read whole after it).
    All,
    /// Its outputs, and what [`Between`] says is read between pieces. Writes nothing
    /// reads are dropped, and a region closes at a cut only where what happens there
    /// touches it (it may run in a later piece).
    Between(Between<'a>),
}

/// What is read and written of a run's memory between its pieces (a partitioned run's
/// sends and receives), per piece: the views read and written after piece `k` (after
/// the last: also what is read before the next run's first piece).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Between<'a> {
    /// Views read after each piece.
    pub reads: &'a [Vec<View>],
    /// Views written after each piece, at any time until a later piece touches them.
    pub writes: &'a [Vec<View>],
}

impl<'a> Between<'a> {
    /// The views read after piece `k`.
    fn reads(&self, k: usize) -> &'a [View] {
        self.reads.get(k).map_or(&[], |v| v.as_slice())
    }

    /// The views written after piece `k`.
    fn writes(&self, k: usize) -> &'a [View] {
        self.writes.get(k).map_or(&[], |v| v.as_slice())
    }

    /// True when what happens after piece `k` touches the region `b` holds.
    fn touches(&self, k: usize, b: &Builder) -> bool {
        b.conflicts_views(
            self.reads(k).iter().copied(),
            self.writes(k).iter().copied(),
        )
    }
}

/// What joins regions beyond elementwise compute, copies and fills.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Joins {
    /// Sums (`dst += src`, [`crate::ir::DataOp::Accumulate`]) of 8,192 elements and
    /// more, with the copy that feeds one taken past the DMA that closed its region so
    /// that it joins the sum's (the CPU executor's choice; the GPU executor batches its
    /// accumulates instead).
    pub sums: bool,
    /// A one-element uniform write (a constant, say) over part of a view a register
    /// holds: the view's register stays in use for the ops that read it before, its
    /// memory is no longer read through it, and the one element is stored after the
    /// region's blocks (so it lands last). The lowering reuses dead values' memory for
    /// constants, which would otherwise close a chain's region in its middle. The CPU
    /// executor's choice: the GPU's region shader writes its outputs in no order.
    pub overwrites: bool,
    /// Compute ops that run alone read their sources where a region of copies took
    /// them from (the copies' writes then often dropped as unread): the CPU executor's
    /// choice.
    pub forward: bool,
    /// A float reduction over trailing dimensions that reads a region's output right
    /// after it runs is folded by the region as its blocks go ([`RowReduce`]): no pass
    /// over memory of its own, and the output dropped where nothing else reads it. The
    /// CPU executor's choice (in a run of one piece).
    pub reduces: bool,
}

/// `schedule` fused, cut before each op index of `cuts` (no region spans a cut, except
/// with [`Keep::Between`] one that nothing between pieces touches); with
/// [`Keep::Outputs`] and no cut, or with [`Keep::Between`], writes nothing reads are
/// dropped.
pub fn fuse(program: &Program, schedule: &Schedule, cuts: &[usize], keep: Keep<'_>) -> Fused {
    fuse_with(program, schedule, cuts, keep, Joins::default())
}

/// [`fuse`], with what `joins` lets join regions too.
pub fn fuse_with(
    program: &Program,
    schedule: &Schedule,
    cuts: &[usize],
    keep: Keep<'_>,
    joins: Joins,
) -> Fused {
    fuse_apart(program, schedule, cuts, keep, joins, &[])
}

/// The copies of `copies` (op indices) that no op of the region they would join reads
/// the destination of (under `joins`): the ops of their device after each, up to the
/// first that cannot join a region (a dot, a DMA) or a region's worth. Kept out of
/// regions ([`fuse_apart`]) they lose no fusion: the region is the same less an output.
/// A copy whose destination the region reads stays in it (a load whose reduction the
/// region folds, a chain of copies forwarded into one).
pub fn unread_in_region(
    program: &Program,
    schedule: &Schedule,
    copies: &[usize],
    joins: Joins,
) -> Vec<usize> {
    let allocs = schedule.memory(program).allocs;
    let staging = Schedule::staging_alloc(program);
    let unread = |c: usize| {
        let dst = schedule.ops[c].dst();
        let (d, a) = (dst.device(), dst.alloc());
        let mut joined = 0;
        for op in &schedule.ops[c + 1..] {
            let mut views = op.reads().chain(op.writes());
            if !views.any(|v| v.device() == d) {
                continue;
            }
            let elem = build::Elem::of(op, &allocs, staging, joins.sums);
            if elem.is_none_or(|e| e.device != d) || joined == MAX_INSTRS {
                return true;
            }
            if op.reads().any(|v| (v.device(), v.alloc()) == (d, a)) {
                return false;
            }
            joined += 1;
        }
        true
    };
    copies.iter().copied().filter(|&c| unread(c)).collect()
}

/// [`fuse_with`], with the ops of `apart` (indices, ascending) kept out of regions: each
/// runs as it is, a step of its own (a copy an executor may skip where it shares the
/// copied memory, say).
pub fn fuse_apart(
    program: &Program,
    schedule: &Schedule,
    cuts: &[usize],
    keep: Keep<'_>,
    joins: Joins,
    apart: &[usize],
) -> Fused {
    let mut lap = crate::device_sim::Laps::new();
    let memory = schedule.memory(program);
    let staging = Schedule::staging_alloc(program);
    // Writes are dropped only from a run read through its outputs alone (as `prune`).
    let later = later::Later::of(program, schedule, keep == Keep::Outputs && cuts.is_empty());
    let mut out = Fused::default();
    let f = lanes::Fusing {
        ops: &schedule.ops,
        allocs: &memory.allocs,
        staging,
        joins,
        later: &later,
        apart,
        devices: program.devices,
    };
    lap.note("later");
    let lanes = rayon::current_num_threads().min(program.devices);
    if cuts.is_empty() && lanes > 1 && schedule.ops.len() >= LANES_FROM {
        out.steps = lanes::fuse_in_lanes(&f, lanes);
    } else {
        fuse_in_pieces(&f, cuts, keep, &mut out);
    }
    out.piece_ends.push(out.steps.len());
    lap.note("loop");
    debug_assert!(
        out.piece_ends.windows(2).all(|w| w[0] <= w[1])
            && out.piece_ends.last() == Some(&out.steps.len()),
        "{:?} of {}",
        out.piece_ends,
        out.steps.len()
    );
    match keep {
        Keep::Outputs if cuts_free(&out) => {
            if joins.reduces {
                // Dead writes first: a reduction's destination often reuses the memory
                // of a value its region wrote and nothing read.
                live::prune(
                    program,
                    &schedule.ops,
                    &mut out.steps,
                    &mut out.piece_ends,
                    &[],
                );
                lap.note("prune1");
                reduce::fold_into_regions(&mut out.steps, &schedule.ops);
                out.piece_ends = vec![out.steps.len()];
                lap.note("fold");
            }
            if joins.forward {
                out.ops = forward::forward(&mut out.steps, &out.piece_ends, &schedule.ops);
            }
            lap.note("forward");
            let ops = out.ops.as_deref().unwrap_or(&schedule.ops);
            live::prune(program, ops, &mut out.steps, &mut out.piece_ends, &[]);
            lap.note("prune2");
            if joins.forward {
                let kept = live::kept(program);
                forward::forward_dsts(&mut out.steps, &mut out.ops, &schedule.ops, &kept);
            }
            lap.note("forward_dsts");
            out.piece_ends = vec![out.steps.len()];
        }
        Keep::Between(between) => {
            if joins.forward {
                out.ops = forward::forward(&mut out.steps, &out.piece_ends, &schedule.ops);
            }
            let ops = out.ops.as_deref().unwrap_or(&schedule.ops);
            live::prune(
                program,
                ops,
                &mut out.steps,
                &mut out.piece_ends,
                between.reads,
            )
        }
        _ => {}
    }
    // Each region's registers are its own: assigned on every core.
    out.steps.par_iter_mut().for_each(|s| {
        if let Step::Region(r) = s {
            live::assign_slots(r);
        }
    });
    lap.note("slots");
    lap.report("fuse_with");
    out
}

/// Every op of `f` fused in one lane, cut before each op index of `cuts` (as
/// [`fuse_apart`] says), into `out`'s steps and piece ends (less the last).
fn fuse_in_pieces(f: &lanes::Fusing<'_>, cuts: &[usize], keep: Keep<'_>, out: &mut Fused) {
    let mut lane = lanes::Lane::new(f, 0..f.devices);
    let mut cuts = cuts.iter().copied().peekable();
    let at = lanes::At::default();
    for i in 0..f.ops.len() {
        while cuts.peek().is_some_and(|&c| c <= i) {
            cuts.next();
            let k = out.piece_ends.len();
            let mut seen = vec![false; f.devices];
            let mut deferred = Vec::new();
            let mut opened = std::mem::take(&mut lane.opened);
            opened.retain(|&d| {
                if std::mem::replace(&mut seen[d], true) {
                    return false; // listed twice (reopened): decided at its first entry
                }
                let Some(b) = lane.open[d].take() else {
                    return false;
                };
                // A region nothing between the pieces touches stays open; one that is
                // touched closes, its last copy taken past the cut where it may be.
                let b = match keep {
                    Keep::Between(between) if !between.touches(k, &b) => {
                        lane.open[d] = Some(b);
                        return true;
                    }
                    Keep::Between(between) if f.joins.sums => {
                        let (b, last) = b.defer_last_copy_past(
                            f.ops,
                            between.reads(k),
                            between.writes(k),
                            f.later,
                        );
                        deferred.extend(last);
                        b
                    }
                    _ => b,
                };
                lane.close(Some(b), at);
                false
            });
            lane.opened = opened;
            out.piece_ends.push(lane.steps.len());
            lane.reopen(deferred, i);
        }
        lane.fuse_op(i);
    }
    lane.finish();
    out.steps = lane.steps.into_iter().map(|(_, s)| s).collect();
    // Cuts at or past the end: empty pieces.
    for _ in cuts {
        out.piece_ends.push(out.steps.len());
    }
}

/// True for a fused schedule of one piece (nothing reads its memory between steps).
fn cuts_free(f: &Fused) -> bool {
    f.piece_ends.len() == 1
}

#[cfg(test)]
mod tests;
