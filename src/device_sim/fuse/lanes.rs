//! The fusing pass over a schedule's ops: each device's open region grows by the ops
//! that join it and closes when an op conflicts with it. A region's views are all on
//! its device, so the devices split into lanes fused on threads of their own, each
//! step keyed by where one pass over every device would have made it ([`At`]); the
//! lanes' steps merged by key are that pass's, step for step.

use super::build::{self, Builder, Elem};
use super::later::Later;
use super::{Joins, Step, MAX_INSTRS};
use crate::ir::{Allocation, DataOp};
use std::ops::Range;

/// Where a step comes in the fused order: made while op `i` is fused, in `phase` 0 (a
/// region of `device` closed before the op), 1 (the op, or its device's region) or 2 (a
/// copy taken past the op that no region takes, of `device`), or at the end (`i` past
/// the last op, phase 3: the regions still open, in the order of `first`, where each
/// device's first region opened).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct At {
    i: usize,
    phase: u8,
    device: usize,
    first: (usize, u8, usize),
}

impl At {
    fn new(i: usize, phase: u8, device: usize) -> At {
        At {
            i,
            phase,
            device,
            first: (0, 0, 0),
        }
    }
}

/// What every lane reads: the schedule's ops and what decides how they fuse.
pub(super) struct Fusing<'a> {
    pub ops: &'a [DataOp],
    pub allocs: &'a [Allocation],
    pub staging: usize,
    pub joins: Joins,
    pub later: &'a Later<'a>,
    /// Ops kept out of regions (ascending).
    pub apart: &'a [usize],
    pub devices: usize,
}

/// The fusing state of the devices `mine`: each one's open region, the devices in the
/// order their regions opened (a device again each time it reopens), where each first
/// opened, and the steps made so far.
pub(super) struct Lane<'a> {
    f: &'a Fusing<'a>,
    mine: Range<usize>,
    pub open: Vec<Option<Builder>>,
    pub opened: Vec<usize>,
    first: Vec<Option<(usize, u8, usize)>>,
    touched: Vec<usize>,
    pub steps: Vec<(At, Step)>,
}

impl<'a> Lane<'a> {
    pub fn new(f: &'a Fusing<'a>, mine: Range<usize>) -> Self {
        Lane {
            f,
            mine,
            open: (0..f.devices).map(|_| None).collect(),
            opened: Vec::new(),
            first: vec![None; f.devices],
            touched: Vec::new(),
            steps: Vec::new(),
        }
    }

    /// Closes region `b` as step `at`: a lone copy, fill or accumulate runs as it is
    /// (memcpy and memset are the fastest there are; an accumulate alone reads its
    /// operands in place).
    pub fn close(&mut self, b: Option<Builder>, at: At) {
        match b.and_then(Builder::finish) {
            Some(r) if r.ops.len() == 1 && build::is_plain(&self.f.ops[r.ops[0]]) => {
                self.steps.push((at, Step::Op(r.ops[0])))
            }
            Some(r) => self.steps.push((at, Step::Region(Box::new(r)))),
            None => {}
        }
    }

    /// Notes that `d`'s region opened at `at`.
    fn opens(&mut self, d: usize, at: At) {
        self.opened.push(d);
        self.first[d].get_or_insert((at.i, at.phase, at.device));
    }

    /// Starts each device's next region with the copy `deferred` took past what closed
    /// its last ([`Builder::defer_last_copy`]); a copy no region takes runs as it is,
    /// now (op `i` being fused).
    pub fn reopen(&mut self, deferred: Vec<(usize, Elem)>, i: usize) {
        for (k, e) in deferred {
            let at = At::new(i, 2, e.device);
            let mut b = Builder::new(e.device, self.f.joins);
            if b.try_add(k, &e, self.f.later) {
                self.opens(e.device, at);
                self.open[e.device] = Some(b);
            } else {
                self.steps.push((at, Step::Op(k)));
            }
        }
    }

    /// Fuses op `i` on this lane's devices.
    pub fn fuse_op(&mut self, i: usize) {
        let f = self.f;
        let op = &f.ops[i];
        self.touched.clear();
        self.touched
            .extend(op.reads().chain(op.writes()).map(|v| v.device()));
        self.touched.sort_unstable();
        self.touched.dedup();
        // The op itself, where no region takes it, is the lane's of its first device.
        let leads = self.touched.first().is_some_and(|d| self.mine.contains(d));
        if !self.touched.iter().any(|d| self.mine.contains(d)) {
            return;
        }
        let elem = match f.apart.binary_search(&i) {
            Ok(_) => None,
            Err(_) => Elem::of(op, f.allocs, f.staging, f.joins.sums),
        };
        // Regions this op would be reordered with: closed first (they run before it).
        // An op that runs as it is, now, may take a region's last copy past it
        // ([`Builder::defer_last_copy`]): that copy then starts the device's next region.
        let mut deferred = Vec::new();
        for k in 0..self.touched.len() {
            let d = self.touched[k];
            if !self.mine.contains(&d) {
                continue;
            }
            let own = elem.as_ref().is_some_and(|e| e.device == d);
            if !own && self.open[d].as_ref().is_some_and(|b| b.conflicts(op)) {
                let b = self.open[d].take().expect("open");
                let (b, last) = match elem {
                    None if f.joins.sums => b.defer_last_copy(f.ops, op, f.later),
                    _ => (b, None),
                };
                self.close(Some(b), At::new(i, 0, d));
                deferred.extend(last);
            }
        }
        let Some(elem) = elem else {
            if leads {
                self.steps
                    .push((At::new(i, 1, self.touched[0]), Step::Op(i)));
            }
            self.reopen(deferred, i);
            return;
        };
        let d = elem.device;
        if !self.mine.contains(&d) {
            return;
        }
        let at = At::new(i, 1, d);
        if self.open[d].is_none() {
            self.open[d] = Some(Builder::new(d, f.joins));
            self.opens(d, at);
        }
        let b = self.open[d].as_mut().expect("opened");
        if b.len() < MAX_INSTRS && b.try_add(i, &elem, f.later) {
            return;
        }
        let full = self.open[d].replace(Builder::new(d, f.joins));
        self.close(full, at);
        let b = self.open[d].as_mut().expect("opened");
        if !b.try_add(i, &elem, f.later) {
            // An op that cannot be a region of its own (its destination overlaps a source
            // elsewhere than element for element): as it is.
            self.steps.push((at, Step::Op(i)));
        }
    }

    /// Closes the regions still open, in the order they first opened.
    pub fn finish(&mut self) {
        let end = self.f.ops.len();
        for d in std::mem::take(&mut self.opened) {
            let at = At {
                first: self.first[d].unwrap_or_default(),
                ..At::new(end, 3, 0)
            };
            let b = self.open[d].take();
            self.close(b, at);
        }
    }
}

/// Every op of `f` fused in `lanes` lanes of devices (threads of the pool), merged into
/// the steps of one pass over every device.
pub(super) fn fuse_in_lanes(f: &Fusing<'_>, lanes: usize) -> Vec<Step> {
    use rayon::prelude::*;
    let n = f.devices;
    let parts: Vec<Vec<(At, Step)>> = (0..lanes)
        .into_par_iter()
        .map(|k| {
            let mut lane = Lane::new(f, k * n / lanes..(k + 1) * n / lanes);
            for i in 0..f.ops.len() {
                lane.fuse_op(i);
            }
            lane.finish();
            lane.steps
        })
        .collect();
    merge(parts)
}

/// Lists each ascending by key (no key in two of them) merged into one, ascending.
fn merge(parts: Vec<Vec<(At, Step)>>) -> Vec<Step> {
    let mut out = Vec::with_capacity(parts.iter().map(Vec::len).sum());
    let mut heads: Vec<_> = parts
        .into_iter()
        .map(|p| p.into_iter().peekable())
        .collect();
    loop {
        let next = heads
            .iter_mut()
            .enumerate()
            .filter_map(|(k, h)| h.peek().map(|(at, _)| (*at, k)))
            .min();
        let Some((_, k)) = next else {
            return out;
        };
        out.push(heads[k].next().expect("peeked").1);
    }
}
