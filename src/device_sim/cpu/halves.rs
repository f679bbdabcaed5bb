//! 16-bit operands a run may read or write where the caller holds them, two bytes an
//! element ([`crate::device_sim::lend::Lent::InputHalves`], `OutputHalves`): a bf16 or
//! f16 input that only fused regions load, element for element, is widened to words
//! as each block loads it (no pass widening the whole array into words first); an
//! output that only regions store, whole, is narrowed as each block stores it (no
//! pass narrowing the run's words into the caller's after). An output copied whole
//! from a VMEM buffer that shares its memory ([`super::twins`]) counts the buffer's
//! uses as its own: the regions store into the caller's halves directly; an input's
//! VMEM twin likewise. Dots read 16-bit float operands as stored too, and a 16-bit
//! buffer of the run's own that only these touch is held at two bytes an element
//! ([`own`]).

use super::twins::Twin;
use crate::array::DType;
use crate::device_sim::fuse::{Fused, Pattern, Step};
use crate::ir::{AllocId, Compute, ComputeKind, DataOp, Memory, Program, View};

/// True for a transpose of a 16-bit array that swaps its last two dimensions, apart
/// from its source: it runs on 16-bit memory as stored (the executor's
/// `transpose_halves`), each of its operands lent as halves or not.
pub fn transposed(c: &Compute) -> bool {
    let ComputeKind::Transpose { perm } = &c.kind else {
        return false;
    };
    let r = perm.len();
    c.dst.dtype.storage() == 2
        && c.srcs[0].dtype == c.dst.dtype
        && !c.srcs[0].view.overlaps(&c.dst.view)
        && r >= 2
        && perm[r - 2] == r - 1
        && perm[r - 1] == r - 2
        && (0..r - 2).all(|i| perm[i] == i)
}

/// True for a float dot whose 16-bit float operands `c` reads as stored ([`dot_reads`]).
pub fn dot(c: &Compute) -> bool {
    matches!(c.kind, ComputeKind::Dot(_)) && c.dst.dtype.is_float()
}

/// True when operand `k` of dot `c` ([`dot`]) is a 16-bit float one, read as stored
/// where it is held so (the executor's `dot` widens it a block at a time either way).
pub fn dot_reads(c: &Compute, k: usize) -> bool {
    dot(c) && matches!(c.srcs[k].dtype, DType::BF16 | DType::F16)
}

/// What the steps do to one (device, allocation) of a 16-bit operand.
#[derive(Clone, Copy, Default)]
struct Uses {
    /// Read or written other than as below.
    other: bool,
    /// Loaded whole-pattern by a region.
    loads: bool,
    /// Stored by a region, over the region's every element.
    stores: bool,
}

/// What the steps of `fused` do to each memory slot: copies of twins (`skip`) apart.
fn uses_of(memory: &Memory, fused: &Fused, ops: &[DataOp], skip: &[usize]) -> Vec<Uses> {
    let mut uses = vec![Uses::default(); memory.len()];
    let narrow = |v: &View| memory.allocs[v.alloc()].dtype.storage() == 2;
    for (s, step) in fused.steps.iter().enumerate() {
        match step {
            // The copy between an operand and its twin: the two are one memory.
            Step::Op(_) if skip.contains(&s) => {}
            // A transpose moves 16-bit elements as stored ([`transposed`]).
            Step::Op(i) => match &ops[*i] {
                DataOp::Compute(c) if transposed(c) => {
                    uses[memory.index(&c.srcs[0].view)].loads = true;
                    uses[memory.index(&c.dst.view)].stores = true;
                }
                // A dot reads its 16-bit float operands as stored ([`dot_reads`]).
                DataOp::Compute(c) if dot(c) => {
                    for (k, o) in c.srcs.iter().enumerate() {
                        let u = &mut uses[memory.index(&o.view)];
                        match dot_reads(c, k) && memory.allocs[o.view.alloc()].dtype == o.dtype {
                            true => u.loads = true,
                            false => u.other = true,
                        }
                    }
                    uses[memory.index(&c.dst.view)].other = true;
                }
                // A copy between 16-bit memory moves elements as stored (a DMA).
                DataOp::Copy { src, dst } if narrow(src) && narrow(dst) => {
                    uses[memory.index(src)].loads = true;
                    uses[memory.index(dst)].stores = true;
                }
                op => {
                    for v in op.reads().chain(op.writes()) {
                        uses[memory.index(&v)].other = true;
                    }
                }
            },
            Step::Region(r) => {
                for i in &r.inputs {
                    let u = &mut uses[memory.index(&i.view)];
                    match i.pattern {
                        Pattern::Full => u.loads = true,
                        _ => u.other = true,
                    }
                }
                for o in &r.outputs {
                    let u = &mut uses[memory.index(&o.view)];
                    match o.view.len() == r.n {
                        true => u.stores = true,
                        false => u.other = true,
                    }
                }
                for q in &r.reduces {
                    uses[memory.index(&q.dst)].other = true;
                }
            }
        }
    }
    uses
}

/// The 16-bit inputs and outputs (device, allocation) of `fused` (its ops `ops`) that
/// may be lent as halves: an input that only regions read, each with a full load, and
/// no step writes; an output that only regions write, each storing as many elements as
/// the region has (no one-element store, no reduction's destination), and no step
/// reads. An output's VMEM twin (`twins`: the copy between them skipped) may also be
/// loaded whole by regions, and is otherwise held to the same rule.
pub fn in_place(
    program: &Program,
    memory: &Memory,
    fused: &Fused,
    ops: &[DataOp],
    twins: &[Twin],
) -> Vec<(usize, AllocId)> {
    let allocs = &program.layout.allocs;
    let skip: Vec<usize> = twins.iter().map(|t| t.step).collect();
    let uses = uses_of(memory, fused, ops, &skip);
    let outs: Vec<&Twin> = twins.iter().filter(|t| !t.input).collect();
    let mut found = Vec::new();
    for d in 0..program.devices {
        let narrow = |a: AllocId| allocs[a].dtype.storage() == 2;
        for &a in program.inputs.iter().filter(|&&a| narrow(a)) {
            let u = uses[memory.index_of(d, a)];
            let output = program.outputs.contains(&a);
            // Its twin holds the same halves: only loaded, as the input itself.
            let twin = twins
                .iter()
                .filter(|t| t.input && (t.device, t.operand) == (d, a))
                .all(|t| {
                    let v = uses[memory.index_of(d, t.vmem)];
                    !v.other && !v.stores
                });
            if !u.other && !u.stores && !output && twin {
                found.push((d, a));
            }
        }
        for &a in program.outputs.iter().filter(|&&a| narrow(a)) {
            let u = uses[memory.index_of(d, a)];
            let input = program.inputs.contains(&a);
            let twin = outs.iter().find(|t| (t.device, t.operand) == (d, a));
            let ok = match twin {
                // Regions may load the twin: they read the halves they stored.
                Some(t) => {
                    !u.other && !u.loads && !u.stores && !uses[memory.index_of(d, t.vmem)].other
                }
                None => !u.other && !u.loads,
            };
            if ok && !input {
                found.push((d, a));
            }
        }
    }
    found
}

/// The 16-bit buffers (device, allocation) of a run's own, neither an input nor an
/// output nor a twin of one, that the steps of `fused` touch only as [`in_place`] allows
/// a lent operand's: regions' whole loads and whole stores, 16-bit transposes and dots'
/// reads. The run holds them at two bytes an element, as stored.
pub fn own(
    program: &Program,
    memory: &Memory,
    fused: &Fused,
    ops: &[DataOp],
    twins: &[Twin],
) -> Vec<(usize, AllocId)> {
    let skip: Vec<usize> = twins.iter().map(|t| t.step).collect();
    let uses = uses_of(memory, fused, ops, &skip);
    let mut found = Vec::new();
    for d in 0..program.devices {
        for (a, alloc) in memory.allocs.iter().enumerate() {
            let operand = program.inputs.contains(&a) || program.outputs.contains(&a);
            let twin = twins.iter().any(|t| t.device == d && t.vmem == a);
            let u = uses[memory.index_of(d, a)];
            if alloc.dtype.storage() == 2 && !operand && !twin && !u.other {
                found.push((d, a));
            }
        }
    }
    found
}
