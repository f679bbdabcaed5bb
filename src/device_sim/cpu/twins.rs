//! A VMEM operand and the operand it is copied from or to whole (a `BlockSpec` into
//! VMEM of the whole array): where the caller lends that operand, the two hold the same
//! bytes, so the run can use the caller's memory for the VMEM buffer too and skip the
//! copy. An input's VMEM twin is read where the caller's array is (no per-call copy in);
//! an output's VMEM twin is written where the caller's result is (no copy out). Where
//! the run holds the operand itself (16-bit data, widened to words), the operand lives
//! in its twin's buffer: one buffer where there were two, and no copy.

use crate::device_sim::fuse::{Fused, Step};
use crate::ir::{AllocId, DataOp, Memory, Program, View};

/// A whole-allocation copy of the fused schedule between an operand and a VMEM buffer
/// of the same device that may share the operand's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Twin {
    /// The fused step that copies (skipped where the buffers are shared).
    pub step: usize,
    /// Device.
    pub device: usize,
    /// The operand: an input (copied from) or an output (copied to).
    pub operand: AllocId,
    /// The VMEM buffer: neither an input nor an output.
    pub vmem: AllocId,
    /// True when the operand is an input.
    pub input: bool,
    /// True when no other step reads or writes the operand: it may live in its twin's
    /// buffer alone (an output is never read, so that holds for every output twin).
    pub alone: bool,
}

/// What the steps do to one (device, allocation).
#[derive(Clone, Copy, Default)]
struct Uses {
    writes: usize,
    last_write: usize,
    first_read: Option<usize>,
    reads: usize,
}

/// The copies of `fused` (its ops `ops`) whose VMEM buffer may share its operand's memory:
/// an input's twin is written by that copy alone and not read before it, and the input
/// is never written; an output is written by that copy alone and never read, and its
/// twin is not written after it. A VMEM buffer is the twin of one operand at most.
pub fn twins(program: &Program, memory: &Memory, fused: &Fused, ops: &[DataOp]) -> Vec<Twin> {
    let mut uses = vec![Uses::default(); memory.len()];
    let read = |uses: &mut [Uses], v: View, s: usize| {
        let u = &mut uses[memory.index(&v)];
        u.first_read.get_or_insert(s);
        u.reads += 1;
    };
    let write = |uses: &mut [Uses], v: View, s: usize| {
        let u = &mut uses[memory.index(&v)];
        u.writes += 1;
        u.last_write = s;
    };
    for (s, step) in fused.steps.iter().enumerate() {
        match step {
            Step::Op(i) => {
                let op = &ops[*i];
                // An accumulate reads the destination it adds to.
                let adds_to = matches!(op, DataOp::Accumulate { .. }).then(|| op.dst());
                op.reads()
                    .chain(adds_to)
                    .for_each(|v| read(&mut uses, v, s));
                op.writes().for_each(|v| write(&mut uses, v, s));
            }
            Step::Region(r) => {
                r.reads().for_each(|v| read(&mut uses, v, s));
                r.writes().for_each(|v| write(&mut uses, v, s));
            }
        }
    }
    let allocs = &program.layout.allocs;
    let whole = |v: &View| {
        allocs
            .get(v.alloc())
            .is_some_and(|a| v.offset() == 0 && v.len() == a.numel())
    };
    let plain = |a: AllocId| !program.inputs.contains(&a) && !program.outputs.contains(&a);
    let mut found: Vec<Twin> = Vec::new();
    for (s, step) in fused.steps.iter().enumerate() {
        let Step::Op(i) = step else { continue };
        let DataOp::Copy { src, dst } = ops[*i] else {
            continue;
        };
        let d = src.device();
        if dst.device() != d || !whole(&src) || !whole(&dst) {
            continue;
        }
        if allocs[src.alloc()].dtype != allocs[dst.alloc()].dtype {
            continue;
        }
        let at = |a: AllocId| uses[memory.index_of(d, a)];
        let twin = if program.inputs.contains(&src.alloc()) && plain(dst.alloc()) {
            let (x, v) = (at(src.alloc()), at(dst.alloc()));
            let ok = x.writes == 0 && v.writes == 1 && v.first_read.is_none_or(|r| r > s);
            ok.then_some(Twin {
                step: s,
                device: d,
                operand: src.alloc(),
                vmem: dst.alloc(),
                input: true,
                alone: x.reads == 1,
            })
        } else if program.outputs.contains(&dst.alloc()) && plain(src.alloc()) {
            let (v, h) = (at(src.alloc()), at(dst.alloc()));
            let ok = h.writes == 1 && h.first_read.is_none() && v.last_write < s;
            ok.then_some(Twin {
                step: s,
                device: d,
                operand: dst.alloc(),
                vmem: src.alloc(),
                input: false,
                alone: true,
            })
        } else {
            None
        };
        found.extend(twin);
    }
    // A VMEM buffer shares one operand's memory at most (an input's twin copied out
    // to an output too keeps both copies).
    let once = |t: &Twin| {
        let same = found
            .iter()
            .filter(|o| (o.device, o.vmem) == (t.device, t.vmem));
        same.count() == 1
    };
    found.iter().copied().filter(once).collect()
}
