//! Evaluating a fused [`Region`] in host memory: uniform registers once, the others a
//! block of [`BLOCK`] lanes at a time (every register's block stays in the cache from
//! the op that makes it to the ones that use it), the blocks spread over the machine's
//! cores when there are enough of them, under the widest vector unit the CPU has.

use super::lanes::{self, BLOCK};
use super::layout::gather;
use crate::exec::fuse::{Instr, Pattern, Region};
use rayon::prelude::*;

/// Regions of fewer elements run on one core (spreading costs more than it saves).
const PARALLEL_ELEMS: usize = 1 << 16;

/// Where a region's views are in memory: every input's first element (read only) and
/// every output's (written), the views' own lengths as the region says.
pub(super) struct Places {
    pub(super) inputs: Vec<*const u32>,
    pub(super) outputs: Vec<*mut u32>,
}

/// The places, shared by the threads that run a region's blocks.
struct Shared<'a>(&'a Places);
// SAFETY: the threads read the inputs and write disjoint element ranges of the outputs
// (one block each); the fusion pass keeps every output apart from every input except an
// input read element for element in place (each block reads its elements before it
// writes them).
unsafe impl Send for Shared<'_> {}
unsafe impl Sync for Shared<'_> {}

/// Runs `r` on the memory at `places`.
///
/// # Safety
/// `places` holds, for each input and output of `r`, a pointer to its view's elements
/// (`view.len()` of them) that stays valid for the call; no output overlaps an input
/// other than exactly, and then only an input read element for element
/// ([`Pattern::Full`]), as the fusion pass builds regions.
pub(super) unsafe fn run(r: &Region, places: &Places) {
    let arch = pulp::Arch::new();
    // Uniform registers: once, into the register file every block starts from.
    let mut template = vec![0u32; r.nslots * BLOCK];
    arch.dispatch(|| prologue(r, places, &mut template));
    // Uniform registers into one-element views, now: no block reads such a view (the
    // fusion pass keeps outputs apart from the inputs read in blocks).
    for (k, o) in r.outputs.iter().enumerate() {
        if r.n > 1 && o.view.len() == 1 {
            let lane = slot(&template, r.slots[o.reg], 1);
            let mut bits = [0u32; 1];
            store(r, o.reg, lane, &mut bits);
            // SAFETY: the output's place holds its one element.
            unsafe { places.outputs[k].write(bits[0]) };
        }
    }
    let blocks = r.n.div_ceil(BLOCK);
    let threads = rayon::current_num_threads();
    let shared = Shared(places);
    if r.n >= PARALLEL_ELEMS && threads > 1 {
        let per = blocks.div_ceil(threads * 4).max(8);
        (0..blocks.div_ceil(per)).into_par_iter().for_each(|c| {
            let mut regs = template.clone();
            let s = &shared;
            let range = c * per..((c + 1) * per).min(blocks);
            arch.dispatch(|| {
                for b in range {
                    // SAFETY: as this function's.
                    unsafe { block(r, s.0, &mut regs, b) };
                }
            });
        });
    } else {
        let mut regs = template;
        arch.dispatch(|| {
            for b in 0..blocks {
                // SAFETY: as this function's.
                unsafe { block(r, places, &mut regs, b) };
            }
        });
    }
}

/// Register `reg`'s lanes as the stored bits of its dtype, into `dst`.
#[inline(always)]
fn store(r: &Region, reg: usize, lanes: &[u32], dst: &mut [u32]) {
    if r.regs[reg].raw {
        dst.copy_from_slice(lanes);
    } else {
        lanes::narrow(r.regs[reg].dtype, lanes, dst);
    }
}

/// Slot `s` of the register file, `m` lanes.
#[inline(always)]
fn slot(regs: &[u32], s: usize, m: usize) -> &[u32] {
    &regs[s * BLOCK..s * BLOCK + m]
}

/// Computes every uniform register of `r` into its slot (all [`BLOCK`] lanes).
#[inline(always)]
fn prologue(r: &Region, places: &Places, regs: &mut [u32]) {
    for (i, instr) in r.instrs.iter().enumerate() {
        if !r.regs[i].uniform {
            continue;
        }
        match instr {
            Instr::Load(k) => {
                // SAFETY: a uniform load is of a scalar input: its place holds one element.
                let v = unsafe { *places.inputs[*k] };
                let s = r.slots[i];
                regs[s * BLOCK..(s + 1) * BLOCK].fill(v);
            }
            Instr::Const { bits, .. } => {
                let s = r.slots[i];
                regs[s * BLOCK..(s + 1) * BLOCK].fill(*bits);
            }
            _ => compute(r, i, instr, regs, BLOCK),
        }
    }
}

/// Computes instruction `i` (not a load) over `m` lanes of its arguments' slots.
#[inline(always)]
fn compute(r: &Region, i: usize, instr: &Instr, regs: &mut [u32], m: usize) {
    let out_slot = r.slots[i];
    // The output's slot is none of the arguments' (the slot assignment keeps a slot
    // until its register's last reader is done): split it off.
    let (before, rest) = regs.split_at_mut(out_slot * BLOCK);
    let (out, after) = rest.split_at_mut(BLOCK);
    let out = &mut out[..m];
    let arg = |a: usize| -> &[u32] {
        let s = r.slots[a];
        if s < out_slot {
            slot(before, s, m)
        } else {
            slot(after, s - out_slot - 1, m)
        }
    };
    match *instr {
        Instr::Load(_) | Instr::Const { .. } => unreachable!("loads are not computed"),
        Instr::Widen(a) => lanes::widen(r.regs[a].dtype, arg(a), out),
        Instr::Unary(u, t, a) => lanes::unary(u, t, arg(a), out),
        Instr::Binary(b, t, a, c) => lanes::binary(b, t, arg(a), arg(c), out),
        Instr::Compare(op, t, a, c) => lanes::compare(op, t, arg(a), arg(c), out),
        Instr::Select(p, a, c) => lanes::select(arg(p), arg(a), arg(c), out),
        Instr::Convert(f, t, a) => lanes::convert(f, t, arg(a), out),
    }
}

/// Runs block `b` of `r`: its loads, its non-uniform instructions, its outputs.
///
/// # Safety
/// As [`run`]'s.
#[inline(always)]
unsafe fn block(r: &Region, places: &Places, regs: &mut [u32], b: usize) {
    let start = b * BLOCK;
    let m = BLOCK.min(r.n - start);
    for (i, instr) in r.instrs.iter().enumerate() {
        if r.regs[i].uniform {
            continue;
        }
        match instr {
            Instr::Load(k) => {
                let s = r.slots[i];
                let out = &mut regs[s * BLOCK..s * BLOCK + m];
                let input = &r.inputs[*k];
                let src = places.inputs[*k];
                match &input.pattern {
                    // SAFETY: a full input has `n` elements at its place.
                    Pattern::Full => out
                        .copy_from_slice(unsafe { std::slice::from_raw_parts(src.add(start), m) }),
                    Pattern::Scalar => unreachable!("scalar loads are uniform"),
                    Pattern::Broadcast { shape, dims, into } => {
                        let strides = Pattern::strides(shape, dims, into);
                        // SAFETY: a broadcast reads within its view's elements.
                        let src = unsafe { std::slice::from_raw_parts(src, input.view.len()) };
                        gather(src, &strides, into, start, out);
                    }
                }
            }
            _ => compute(r, i, instr, regs, m),
        }
    }
    for (k, o) in r.outputs.iter().enumerate() {
        if o.view.len() != r.n {
            continue;
        }
        // SAFETY: the output has `n` elements at its place; this block writes its own.
        let dst = unsafe { std::slice::from_raw_parts_mut(places.outputs[k].add(start), m) };
        store(r, o.reg, slot(regs, r.slots[o.reg], m), dst);
    }
}
