//! Chains of a region's instructions that a kernel computes in one loop over a block
//! (every value in registers from the input's load to the result's store) where
//! instruction by instruction each would be a pass over the block: JAX's tanh form of
//! gelu, `x * (0.5 * (1 + tanh(c * (x + d * x**3))))`. The kernel does each op of the
//! chain on each lane, in its order and rounding: the same bits.

use super::lanes;
use crate::array::DType;
use crate::device_sim::fuse::{Instr, Region};
use crate::ir::{Binary, Unary};

/// A chain computed in one loop, at its last instruction.
#[derive(Clone, Copy, Debug)]
pub(super) enum Kernel {
    /// `x * (half * (one + tanh(c * (x + d * x**3))))`, with `k = [d, c, one, half]`.
    GeluTanh { x: usize, k: [f32; 4] },
}

/// Marks the chains of `r` (`uses` readers of each register, outputs and folds
/// included; `splat_ok` as the region's plan) that a kernel computes: `kernels[i]` at
/// the chain's last instruction, `inside[i]` for the others (not computed alone).
pub(super) fn find(
    r: &Region,
    uses: &[usize],
    splat_ok: &[bool],
    kernels: &mut Vec<Option<Kernel>>,
    inside: &mut Vec<bool>,
) {
    let n = r.instrs.len();
    kernels.clear();
    kernels.resize(n, None);
    inside.clear();
    inside.resize(n, false);
    for i in 0..n {
        if let Some((kern, chain)) = gelu_tanh(r, uses, splat_ok, i) {
            if chain.iter().all(|&j| !inside[j] && kernels[j].is_none()) {
                kernels[i] = Some(kern);
                for j in chain {
                    inside[j] = true;
                }
            }
        }
    }
}

/// The f32 value of register `i` when it is an f32 constant.
fn constant(r: &Region, i: usize) -> Option<f32> {
    match r.instrs[i] {
        Instr::Const {
            bits,
            dtype: DType::F32,
        } => Some(f32::from_bits(bits)),
        _ => None,
    }
}

/// `i` as the tanh form of gelu: the kernel and the chain's other instructions.
fn gelu_tanh(
    r: &Region,
    uses: &[usize],
    splat_ok: &[bool],
    i: usize,
) -> Option<(Kernel, Vec<usize>)> {
    // A register of plain f32 values, computed per block.
    let varying = |j: usize| {
        let g = r.regs[j];
        g.dtype == DType::F32 && !g.raw && !g.uniform && !splat_ok[j]
    };
    // An inner register: read once, by the chain.
    let inner = |j: usize| varying(j) && uses[j] == 1 && !r.reduces.iter().any(|q| q.reg == j);
    let bin = |j: usize, op: Binary| match r.instrs[j] {
        Instr::Binary(b, DType::F32, a, c) if b == op => Some((a, c)),
        _ => None,
    };
    // A binary op of a constant and an inner register: (constant, register).
    let by_const = |j: usize, op: Binary| {
        let (a, c) = bin(j, op)?;
        match (constant(r, a), constant(r, c)) {
            (Some(v), None) if inner(c) => Some((v, c)),
            (None, Some(v)) if inner(a) => Some((v, a)),
            _ => None,
        }
    };
    if !varying(i) {
        return None;
    }
    let (a, c) = bin(i, Binary::Mul)?;
    let (x, h) = if inner(c) && varying(a) {
        (a, c)
    } else {
        (c, a)
    };
    if !inner(h) || !varying(x) {
        return None;
    }
    let (half, g) = by_const(h, Binary::Mul)?;
    let (one, f) = by_const(g, Binary::Add)?;
    let Instr::Unary(Unary::Tanh, DType::F32, e) = r.instrs[f] else {
        return None;
    };
    let (cc, d) = by_const(e, Binary::Mul)?;
    if !inner(e) {
        return None;
    }
    let (p, q) = bin(d, Binary::Add)?;
    let cube_term = match (p == x, q == x) {
        (true, false) => q,
        (false, true) => p,
        _ => return None,
    };
    if !inner(d) {
        return None;
    }
    let (dd, b) = by_const(cube_term, Binary::Mul)?;
    if !inner(cube_term) {
        return None;
    }
    match r.instrs[b] {
        Instr::Unary(Unary::IntegerPow(3), DType::F32, bx) if bx == x => {}
        _ => return None,
    }
    Some((
        Kernel::GeluTanh {
            x,
            k: [dd, cc, one, half],
        },
        vec![b, cube_term, d, e, f, g, h],
    ))
}

/// Computes `kern` over `m` lanes into `out`, its input's lanes at `at`.
///
/// # Safety
/// As [`super::region`]'s `compute`: `at` holds the input's `m` lanes, `out` room for
/// `m` that they do not share.
#[inline(always)]
pub(super) unsafe fn run(kern: &Kernel, at: &[*const u32], out: *mut u32, m: usize) {
    match *kern {
        Kernel::GeluTanh { x, k } => {
            // SAFETY: as the function's.
            let (x, out) = unsafe {
                (
                    std::slice::from_raw_parts(at[x], m),
                    std::slice::from_raw_parts_mut(out, m),
                )
            };
            lanes::gelu_tanh(x, k, out);
        }
    }
}
