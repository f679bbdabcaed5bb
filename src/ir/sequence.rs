//! Kernel invocations back to back as one program: every device runs them in order and
//! enters invocation k+1 when it leaves k, with no synchronisation across devices (a
//! fast device can be in k+1 while a neighbour is still in k).
//!
//! What belongs to whom: each invocation's DMA and regular semaphores and its scratch
//! and outputs are its own (new slots and allocations, that exist once a device has
//! entered it); the barrier semaphore of a `collective_id` is one slot per device that
//! every invocation with that id shares, so its count carries over; an invocation's
//! inputs are the buffers of the invocation before ([`feed`]). A VMEM operand's copies
//! in and out become ops of the device at the invocation's entry and exit.

use super::data::DataOp;
use super::layout::{AllocId, Layout, SemKind};
use super::op::{Op, OpKind, Remap};
use super::program::{Feed, Invocation, Program};
use super::site::OpSite;
use super::view::{SemRef, View};
use crate::array::DType;
use crate::error::{Error, Result};
use crate::source::SourceLoc;
use std::collections::HashMap;

/// Where input `i` of an invocation, `want` elements of a dtype, gets its value from the
/// invocation before: its output `i` when that has as many elements of the same dtype
/// (the buffer passed on, as `y = f(f(x))` does), else its input `i` when that does
/// (`f(x)` twice on the same `x`). The one rule for programs and references alike.
pub fn feed(
    i: usize,
    want: (usize, DType),
    outputs: &[(usize, DType)],
    inputs: &[(usize, DType)],
) -> Option<Feed> {
    if outputs.get(i) == Some(&want) {
        Some(Feed::Output(i))
    } else if inputs.get(i) == Some(&want) {
        Some(Feed::Input(i))
    } else {
        None
    }
}

/// The program of `parts` (each one invocation, lowered on the same devices) run in
/// order, the whole list `repeat` times. A single invocation is returned as it is.
pub fn sequence(parts: &[Program], repeat: usize) -> Result<Program> {
    let count = parts.len() * repeat;
    let first = parts
        .first()
        .filter(|_| count > 0)
        .ok_or_else(|| Error::bad_input("a sequence needs at least one kernel invocation"))?;
    if count == 1 {
        return Ok(first.clone());
    }
    let n = first.devices;
    if let Some(p) = parts.iter().find(|p| p.devices != n) {
        return Err(Error::bad_input(format!(
            "every kernel of a sequence runs on the same devices: `{}` runs on {}, `{}` on {n}",
            p.name, p.devices, first.name
        )));
    }
    if let Some(p) = parts.iter().find(|p| p.is_sequence()) {
        return Err(Error::bad_input(format!(
            "`{}` is a sequence already: list its kernels instead",
            p.name
        )));
    }
    let mut b = Builder {
        layout: Layout::default(),
        ops: vec![Vec::new(); n],
        dmas: Vec::new(),
        invocations: Vec::with_capacity(count),
        barriers: HashMap::new(),
        step: 0,
        prev: None,
    };
    let mut inputs = Vec::new();
    for (k, part) in parts.iter().cycle().take(count).enumerate() {
        let (ins, _) = b.push(k, part)?;
        if k == 0 {
            inputs = ins;
        }
    }
    let outputs = b.prev.take().map(|p| p.1).unwrap_or_default();
    let mut names: Vec<&str> = parts.iter().map(|p| p.name.as_str()).collect();
    names.dedup();
    Ok(Program {
        name: names.join(" then "),
        devices: n,
        layout: b.layout,
        ops: b.ops,
        dmas: b.dmas,
        prologue: Vec::new(),
        epilogue: Vec::new(),
        inputs,
        outputs,
        invocations: b.invocations,
        cores: parts.first().map_or(1, |p| p.cores),
    })
}

/// The sequence so far.
struct Builder {
    layout: Layout,
    ops: Vec<Vec<Op>>,
    dmas: Vec<crate::ir::Dma>,
    invocations: Vec<Invocation>,
    /// The barrier semaphore slot of each `collective_id` seen.
    barriers: HashMap<u32, usize>,
    /// Grid steps so far.
    step: usize,
    /// The last invocation's inputs and outputs (allocations of the sequence).
    prev: Option<(Vec<AllocId>, Vec<AllocId>)>,
}

impl Builder {
    /// Appends `part` as invocation `k`; its inputs and outputs in the sequence's ids.
    fn push(&mut self, k: usize, part: &Program) -> Result<(Vec<AllocId>, Vec<AllocId>)> {
        let inv = &part.invocations[0];
        let first_alloc = self.layout.allocs.len();
        let first_sem = self.layout.sems.len();
        // Each kernel's VMEM is its own while it runs: checked kernel by kernel.
        self.layout.vmem.extend(part.layout.vmem.iter().cloned());
        let (alloc, feeds) = self.allocations(k, part)?;
        let sem: Vec<usize> = part
            .layout
            .sems
            .iter()
            .map(|info| {
                let mut own = || {
                    self.layout.sems.push(info.clone());
                    self.layout.sems.len() - 1
                };
                match (info.kind, inv.collective_id) {
                    (SemKind::Barrier, Some(id)) => *self.barriers.entry(id).or_insert_with(own),
                    _ => own(),
                }
            })
            .collect();
        let step = u32::try_from(self.step)
            .ok()
            .filter(|s| s.checked_add(inv.points() as u32).is_some())
            .ok_or_else(|| Error::bad_input("a sequence has at most 2^32 grid steps"))?;
        let site = |mut s: OpSite| {
            s.grid_linear += step;
            s
        };
        let dma_base = self.dmas.len();
        let m = Remap {
            dma: &|id| dma_base + id,
            sem: &|s: SemRef| SemRef::new(s.device(), sem[s.sem()]),
            view: &|v: View| v.in_alloc(alloc[v.alloc()]),
        };
        self.dmas
            .extend(part.dmas.iter().map(|d| d.remap(&m, site(d.origin))));
        // Operand copies have no kernel line: they are the invocation's entry and exit.
        let at = SourceLoc::intern(&format!("pallas_call `{}`", inv.name), 0);
        let last = inv.points().saturating_sub(1) as u32;
        let mut starts = Vec::with_capacity(part.devices);
        for (d, list) in part.ops.iter().enumerate() {
            let out = &mut self.ops[d];
            starts.push(
                u32::try_from(out.len())
                    .map_err(|_| Error::bad_input("a sequence has at most 2^32 ops per device"))?,
            );
            let copies = |ops: &[DataOp], grid: u32, what: &'static str| {
                ops.iter()
                    .filter(move |c| c.dst().device() == d)
                    .map(move |c| Op {
                        kind: OpKind::Compute(Box::new(c.map_views(m.view))),
                        site: site(OpSite::new(d as u32, grid, what, at)),
                    })
                    .collect::<Vec<_>>()
            };
            out.extend(copies(&part.prologue, 0, "copy a VMEM operand in"));
            out.extend(list.iter().map(|op| Op {
                kind: op.kind.remap(&m),
                site: site(op.site),
            }));
            out.extend(copies(&part.epilogue, last, "copy a VMEM operand out"));
        }
        self.invocations.push(Invocation {
            starts,
            first_step: self.step,
            first_alloc,
            first_sem,
            feeds,
            ..inv.clone()
        });
        self.step += inv.points();
        let ids = |v: &[AllocId]| v.iter().map(|&a| alloc[a]).collect::<Vec<_>>();
        let io = (ids(&part.inputs), ids(&part.outputs));
        self.prev = Some(io.clone());
        Ok(io)
    }

    /// Where each allocation of `part` (invocation `k`) lives in the sequence: its
    /// inputs are buffers of the invocation before, the rest its own.
    fn allocations(&mut self, k: usize, part: &Program) -> Result<(Vec<AllocId>, Vec<Feed>)> {
        let mut at = vec![None; part.layout.allocs.len()];
        let mut feeds = Vec::new();
        if let Some((ins, outs)) = &self.prev {
            let sizes = |ids: &[AllocId]| -> Vec<(usize, DType)> {
                let a = &self.layout.allocs;
                ids.iter().map(|&i| (a[i].numel(), a[i].dtype)).collect()
            };
            let (ins_s, outs_s) = (sizes(ins), sizes(outs));
            for (i, &a) in part.inputs.iter().enumerate() {
                let want = &part.layout.allocs[a];
                let f = feed(i, (want.numel(), want.dtype), &outs_s, &ins_s).ok_or_else(|| {
                    Error::bad_input(format!(
                        "invocation {k} (`{}`) takes input `{}` of {} {} elements, but the \
                         invocation before has no output or input {i} of that size and dtype",
                        part.name,
                        want.name,
                        want.numel(),
                        want.dtype
                    ))
                })?;
                at[a] = Some(match f {
                    Feed::Output(j) => outs[j],
                    Feed::Input(j) => ins[j],
                });
                feeds.push(f);
            }
        }
        let ids = part
            .layout
            .allocs
            .iter()
            .zip(at)
            .map(|(a, fed)| {
                fed.unwrap_or_else(|| {
                    self.layout.allocs.push(a.clone());
                    self.layout.allocs.len() - 1
                })
            })
            .collect();
        Ok((ids, feeds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_take_the_result_of_their_size_else_the_input_again() {
        let f32s = |n| (n, DType::F32);
        assert_eq!(
            feed(0, f32s(8), &[f32s(8), f32s(16)], &[f32s(4)]),
            Some(Feed::Output(0))
        );
        assert_eq!(
            feed(0, f32s(4), &[f32s(8)], &[f32s(4)]),
            Some(Feed::Input(0))
        );
        assert_eq!(feed(0, (8, DType::I32), &[f32s(8)], &[f32s(8)]), None);
        assert_eq!(feed(1, f32s(8), &[f32s(8)], &[f32s(8)]), None);
        assert_eq!(Program::unlabeled("recv_sem of invocation 12"), "recv_sem");
        assert_eq!(Program::unlabeled("recv_sem"), "recv_sem");
        assert_eq!(Program::unlabeled("a of invocation x"), "a of invocation x");
    }
}
