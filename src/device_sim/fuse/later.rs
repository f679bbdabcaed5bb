//! Whether the rest of a schedule reads a view's elements: what lets a region drop an
//! output that a later op of its own overwrites in part (the lowering reuses a dead
//! value's memory for the next value at another offset).

use crate::ir::{DataOp, Program, Schedule, View};

/// Ops of the view's device looked at past the one asking; beyond them a view counts
/// as read. Per device, so that the look-ahead reaches as far on 64 devices as on one
/// (a schedule interleaves its devices' ops).
const SCAN: usize = 256;

/// What reads memory after each op of one schedule.
pub(super) struct Later<'a> {
    ops: &'a [DataOp],
    /// The indices of the ops that read or write each device's memory, in order.
    by_device: Vec<Vec<usize>>,
    /// Views read after the run (the program's inputs and outputs on every device);
    /// `None` when every write must stay (a run in pieces, or read whole after).
    kept: Option<Vec<View>>,
}

impl<'a> Later<'a> {
    /// The reads after each op of `schedule`; with `exact` false every write counts
    /// as read.
    pub(super) fn of(program: &Program, schedule: &'a Schedule, exact: bool) -> Self {
        let kept = exact.then(|| super::live::kept(program));
        let mut by_device: Vec<Vec<usize>> = vec![Vec::new(); program.devices.max(1)];
        if exact {
            for (i, op) in schedule.ops.iter().enumerate() {
                let mut devices: Vec<usize> =
                    op.reads().chain(op.writes()).map(|v| v.device()).collect();
                devices.sort_unstable();
                devices.dedup();
                for d in devices {
                    if d >= by_device.len() {
                        by_device.resize_with(d + 1, Vec::new);
                    }
                    by_device[d].push(i);
                }
            }
        }
        Later {
            ops: &schedule.ops,
            by_device,
            kept,
        }
    }

    /// True when no element of `v` outside `written` (which op `i` writes) is read
    /// after op `i` before it is written again, nor after the run.
    pub(super) fn unread_after(&self, v: &View, i: usize, written: &View) -> bool {
        let Some(kept) = &self.kept else {
            return false;
        };
        let mut left = vec![(v.offset(), v.offset() + v.len())];
        cut(&mut left, v, written);
        let mine = self
            .by_device
            .get(v.device())
            .map_or(&[][..], |o| o.as_slice());
        let after = &mine[mine.partition_point(|&k| k <= i)..];
        for op in after.iter().take(SCAN).map(|&k| &self.ops[k]) {
            if left.is_empty() {
                return true;
            }
            let acc = match op {
                DataOp::Accumulate { dst, .. } => Some(*dst),
                _ => None,
            };
            if op.reads().chain(acc).any(|r| hits(&left, v, &r)) {
                return false;
            }
            for w in op.writes() {
                cut(&mut left, v, &w);
            }
        }
        if left.is_empty() {
            return true;
        }
        after.len() <= SCAN && !kept.iter().any(|k| hits(&left, v, k))
    }
}

/// True when `r` touches one of the runs `left` of `v`'s allocation.
fn hits(left: &[(usize, usize)], v: &View, r: &View) -> bool {
    let (lo, hi) = (r.offset(), r.offset() + r.len());
    r.device() == v.device()
        && r.alloc() == v.alloc()
        && left.iter().any(|&(a, b)| a < hi && lo < b)
}

/// `left` (runs of `v`'s allocation) without the elements of `w`.
fn cut(left: &mut Vec<(usize, usize)>, v: &View, w: &View) {
    if w.device() != v.device() || w.alloc() != v.alloc() {
        return;
    }
    let (lo, hi) = (w.offset(), w.offset() + w.len());
    let mut out = Vec::with_capacity(left.len() + 1);
    for &(a, b) in left.iter() {
        if b <= lo || hi <= a {
            out.push((a, b));
            continue;
        }
        if a < lo {
            out.push((a, lo));
        }
        if hi < b {
            out.push((hi, b));
        }
    }
    *left = out;
}
