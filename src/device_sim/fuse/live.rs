//! Liveness over a fused schedule: writes that nothing reads before they are written
//! again, or after the run, are dropped (with the instructions only they needed); and
//! a region's registers share buffers where their lives do not overlap.

use super::region::{Instr, Region};
use super::Step;
use crate::ir::{DataOp, Program, View};

/// Elements read later, per (device, allocation): disjoint runs `(start, end)`, in
/// order (an add merges the runs it touches). Indexed by allocation then device (a plan's
/// prune asks it once per step: no hashing); a sorted vector, as an allocation holds a
/// few runs.
struct Live {
    devices: usize,
    runs: Vec<Vec<(usize, usize)>>,
}

impl Live {
    fn new(devices: usize) -> Self {
        Live {
            devices: devices.max(1),
            runs: Vec::new(),
        }
    }

    /// The index of `v`'s runs (a device past the program's: an index of its own,
    /// past every other, so that no two (device, allocation) pairs share one).
    fn index(&self, v: &View) -> usize {
        let (d, a) = (v.device(), v.alloc());
        assert!(d < self.devices, "view of device {d} of {}", self.devices);
        a * self.devices + d
    }

    fn overlaps(&self, v: &View) -> bool {
        let (lo, hi) = (v.offset(), v.offset() + v.len());
        self.runs.get(self.index(v)).is_some_and(|m| {
            // The last run starting before `hi` is the only one that can reach past `lo`.
            let k = m.partition_point(|r| r.0 < hi);
            k > 0 && m[k - 1].1 > lo
        })
    }

    fn add(&mut self, v: &View) {
        if v.is_empty() {
            return;
        }
        let i = self.index(v);
        if i >= self.runs.len() {
            self.runs.resize_with(i + 1, Vec::new);
        }
        let m = &mut self.runs[i];
        let (lo, hi) = (v.offset(), v.offset() + v.len());
        // Runs that touch [lo, hi): from the first ending at or after `lo` to the last
        // starting at or before `hi`; merged with it into one.
        let from = m.partition_point(|r| r.1 < lo);
        let to = m.partition_point(|r| r.0 <= hi);
        if from == to {
            m.insert(from, (lo, hi));
            return;
        }
        let merged = (lo.min(m[from].0), hi.max(m[to - 1].1));
        m[from] = merged;
        m.drain(from + 1..to);
    }

    fn remove(&mut self, v: &View) {
        let i = self.index(v);
        let Some(m) = self.runs.get_mut(i) else {
            return;
        };
        let (lo, hi) = (v.offset(), v.offset() + v.len());
        // Runs that overlap [lo, hi): what is left of the first before `lo` and of the
        // last past `hi` stays.
        let from = m.partition_point(|r| r.1 <= lo);
        let to = m.partition_point(|r| r.0 < hi);
        if from >= to {
            return;
        }
        let (first, last) = (m[from], m[to - 1]);
        let mut keep = [(0, 0); 2];
        let mut n = 0;
        if first.0 < lo {
            keep[n] = (first.0, lo);
            n += 1;
        }
        if last.1 > hi {
            keep[n] = (hi, last.1);
            n += 1;
        }
        m.splice(from..to, keep[..n].iter().copied());
    }
}

/// The views read after a run: the program's inputs and outputs on every device.
pub(super) fn kept(program: &Program) -> Vec<View> {
    let allocs = &program.layout.allocs;
    (0..program.devices)
        .flat_map(|d| {
            program
                .inputs
                .iter()
                .chain(&program.outputs)
                .map(move |&a| View::new(d, a, 0, allocs[a].numel()))
        })
        .collect()
}

/// Drops the writes of `steps` (of `ops`, in pieces ending at `piece_ends`) that
/// nothing reads afterwards (the program's inputs and outputs are read after the run,
/// and `reads[k]` after piece `k`), and the steps left with none.
pub(super) fn prune(
    program: &Program,
    ops: &[DataOp],
    steps: &mut Vec<Step>,
    piece_ends: &mut [usize],
    reads: &[Vec<View>],
) {
    let mut live = Live::new(program.devices);
    for v in kept(program) {
        live.add(&v);
    }
    // The reads between pieces, as (the step they come before, the views), last first.
    let mut between: Vec<(usize, &[View])> = piece_ends
        .iter()
        .zip(reads)
        .map(|(&end, views)| (end, views.as_slice()))
        .collect();
    let mut keep = vec![true; steps.len()];
    for (k, step) in steps.iter_mut().enumerate().rev() {
        while between.last().is_some_and(|&(end, _)| end > k) {
            let (_, views) = between.pop().expect("last");
            for v in views {
                live.add(v);
            }
        }
        match step {
            Step::Op(i) => {
                let op = &ops[*i];
                if !op.writes().any(|w| live.overlaps(&w)) {
                    keep[k] = false;
                    continue;
                }
                for w in op.writes() {
                    live.remove(&w);
                }
                let acc = match op {
                    DataOp::Accumulate { dst, .. } => Some(*dst),
                    _ => None,
                };
                for r in op.reads().chain(acc) {
                    live.add(&r);
                }
            }
            Step::Region(r) => {
                r.reduces.retain(|q| live.overlaps(&q.dst));
                // A one-element output over a wider one is stored after the region's
                // blocks ([`super::Joins::overwrites`]): the wider output's write of
                // that element is never read, whatever reads the element later.
                let single = |o: &super::Output| r.n > 1 && o.view.len() == 1;
                r.outputs.retain(|o| !single(o) || live.overlaps(&o.view));
                for o in r.outputs.iter().filter(|o| single(o)) {
                    live.remove(&o.view);
                }
                r.outputs.retain(|o| single(o) || live.overlaps(&o.view));
                if r.outputs.is_empty() && r.reduces.is_empty() {
                    keep[k] = false;
                    continue;
                }
                drop_unused(r);
                for v in r.writes() {
                    live.remove(&v);
                }
                for i in &r.inputs {
                    live.add(&i.view);
                }
            }
        }
    }
    // Each piece ends where its kept steps do.
    let mut kept_before = Vec::with_capacity(keep.len() + 1);
    kept_before.push(0);
    for &kept in &keep {
        kept_before.push(kept_before.last().expect("one") + usize::from(kept));
    }
    for end in piece_ends.iter_mut() {
        *end = kept_before[*end];
    }
    let mut k = 0;
    steps.retain(|_| {
        k += 1;
        keep[k - 1]
    });
}

/// Removes the instructions no output needs, and the inputs no instruction loads.
fn drop_unused(r: &mut Region) {
    let mut need = vec![false; r.instrs.len()];
    for o in &r.outputs {
        need[o.reg] = true;
    }
    for q in &r.reduces {
        need[q.reg] = true;
    }
    for i in (0..r.instrs.len()).rev() {
        if need[i] {
            for a in r.instrs[i].args() {
                need[a] = true;
            }
        }
    }
    let mut new_reg = vec![usize::MAX; r.instrs.len()];
    let mut new_input = vec![usize::MAX; r.inputs.len()];
    let (mut instrs, mut regs, mut inputs) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..r.instrs.len() {
        if !need[i] {
            continue;
        }
        let map = |a: usize| new_reg[a];
        let instr = match r.instrs[i].clone() {
            Instr::Load(k) => {
                if new_input[k] == usize::MAX {
                    new_input[k] = inputs.len();
                    inputs.push(r.inputs[k].clone());
                }
                Instr::Load(new_input[k])
            }
            Instr::Const { bits, dtype } => Instr::Const { bits, dtype },
            Instr::Widen(a) => Instr::Widen(map(a)),
            Instr::Unary(u, t, a) => Instr::Unary(u, t, map(a)),
            Instr::Binary(b, t, a, c) => Instr::Binary(b, t, map(a), map(c)),
            Instr::Compare(c, t, a, b) => Instr::Compare(c, t, map(a), map(b)),
            Instr::Select(p, a, b) => Instr::Select(map(p), map(a), map(b)),
            Instr::Convert(f, t, a) => Instr::Convert(f, t, map(a)),
        };
        new_reg[i] = instrs.len();
        instrs.push(instr);
        regs.push(r.regs[i]);
    }
    for o in &mut r.outputs {
        o.reg = new_reg[o.reg];
    }
    for q in &mut r.reduces {
        q.reg = new_reg[q.reg];
    }
    r.instrs = instrs;
    r.regs = regs;
    r.inputs = inputs;
}

/// Gives every register of `r` a buffer, shared with registers whose lives end before
/// it starts. Uniform registers (filled once per run) and registers an output reads
/// or a reduction folds (after the block's last instruction) keep theirs to the end.
pub(super) fn assign_slots(r: &mut Region) {
    let n = r.instrs.len();
    let mut last = vec![0usize; n];
    for (i, instr) in r.instrs.iter().enumerate() {
        last[i] = last[i].max(i);
        for a in instr.args() {
            last[a] = last[a].max(i);
        }
    }
    for o in &r.outputs {
        last[o.reg] = usize::MAX;
    }
    // A reduction folds its register after the block's last instruction too.
    for q in &r.reduces {
        last[q.reg] = usize::MAX;
    }
    for (i, reg) in r.regs.iter().enumerate() {
        if reg.uniform {
            last[i] = usize::MAX;
        }
    }
    let mut free: Vec<usize> = Vec::new();
    let mut nslots = 0;
    let mut slots = vec![0usize; n];
    let mut ending: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, &l) in last.iter().enumerate() {
        if l != usize::MAX {
            ending[l].push(i);
        }
    }
    // Uniform registers are filled before any block: slots of their own.
    for (i, reg) in r.regs.iter().enumerate() {
        if reg.uniform {
            slots[i] = nslots;
            nslots += 1;
        }
    }
    for i in 0..n {
        if r.regs[i].uniform {
            continue;
        }
        slots[i] = free.pop().unwrap_or_else(|| {
            nslots += 1;
            nslots - 1
        });
        // Registers whose last reader is this instruction free their buffers after it.
        for &e in &ending[i] {
            free.push(slots[e]);
        }
    }
    r.slots = slots;
    r.nslots = nslots;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random adds, removes and questions on two allocations of two devices agree with
    /// a set of elements kept one flag each.
    #[test]
    fn runs_hold_the_elements_added_and_not_removed_since() {
        let mut live = Live::new(2);
        let mut flags = vec![[false; 80]; 4];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n) as usize
        };
        for step in 0..20_000 {
            let (d, a) = (next(2), next(2));
            let lo = next(72);
            let len = next(9);
            let v = View::new(d, a, lo, len);
            let f = &mut flags[a * 2 + d];
            match next(3) {
                0 => {
                    live.add(&v);
                    f[lo..lo + len].iter_mut().for_each(|x| *x = true);
                }
                1 => {
                    live.remove(&v);
                    f[lo..lo + len].iter_mut().for_each(|x| *x = false);
                }
                _ if len > 0 => {
                    let want = f[lo..lo + len].iter().any(|&x| x);
                    assert_eq!(live.overlaps(&v), want, "step {step}: {v:?}");
                }
                _ => {}
            }
            let m = live.runs.get(a * 2 + d).map_or(&[][..], |m| &m[..]);
            assert!(m.windows(2).all(|w| w[0].1 <= w[1].0), "step {step}: {m:?}");
            assert!(m.iter().all(|r| r.0 < r.1), "step {step}: {m:?}");
        }
    }
}
