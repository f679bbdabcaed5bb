//! Chains of a region's instructions that a kernel computes in one loop over a block
//! (every value in registers from the input's load to the result's store) where
//! instruction by instruction each would be a pass over the block: JAX's tanh form of
//! gelu, `x * (0.5 * (1 + tanh(c * (x + d * x**3))))`; an affine map `x * a + b` of
//! uniform `a` and `b` in any float dtype (bf16's widen of `x` included); softmax's
//! `exp(x - c)` in f32 (`c` per lane or one a row; bf16's widen and convert of `x`
//! included); a unary float op in bf16 with the widen of its bf16 input; an f32
//! division converted to bf16 or f16 (softmax's `e / sum` stored as bf16: with the
//! narrow to the stored halves where the result is only a lent 16-bit output). The kernel
//! does each op of the chain on each lane, in its order and rounding: the same bits.

use super::lanes;
use crate::array::DType;
use crate::device_sim::fuse::{Instr, Region};
use crate::ir::{Binary, Unary};

/// A chain computed in one loop, at its last instruction.
#[derive(Clone, Copy, Debug)]
pub(super) enum Kernel {
    /// `x * (half * (one + tanh(c * (x + d * x**3))))`, with `k = [d, c, one, half]`.
    GeluTanh { x: usize, k: [f32; 4] },
    /// `x * a + b` in float dtype `t` (each op rounded to it), `a` and `b` uniform
    /// registers; when `widen`, `x` holds bf16 elements as stored, widened first.
    Affine {
        x: usize,
        a: usize,
        b: usize,
        t: DType,
        widen: bool,
    },
    /// `exp(x - c)` in f32; when `widen`, `x` holds bf16 elements as stored, widened
    /// and converted to f32 first.
    ExpSub { x: usize, c: usize, widen: bool },
    /// Unary float op `u` in bf16 of `x`, bf16 elements as stored, widened first.
    UnaryWiden { u: Unary, x: usize },
    /// Unary float op `u` in f32 of `|x| + b` (`abs`) or `x + b`, `b` a uniform register.
    UnaryShifted {
        u: Unary,
        x: usize,
        b: usize,
        abs: bool,
    },
    /// `x / c` in f32 converted to 16-bit float dtype `t` (`c` per lane or one a row).
    DivConvert { x: usize, c: usize, t: DType },
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
        let found = gelu_tanh(r, uses, splat_ok, i)
            .or_else(|| affine(r, uses, splat_ok, i))
            .or_else(|| exp_sub(r, uses, splat_ok, i))
            .or_else(|| unary_widen(r, uses, splat_ok, i))
            .or_else(|| unary_shifted(r, uses, splat_ok, i))
            .or_else(|| div_convert(r, uses, splat_ok, i));
        if let Some((kern, chain)) = found {
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

/// `i` as `x * a + b` of one float dtype, `a` and `b` uniform (on either side: the
/// products and sums are the same bits either way): the kernel and the chain's other
/// instructions (the product; bf16's widen of `x` when only the product reads it).
fn affine(r: &Region, uses: &[usize], splat_ok: &[bool], i: usize) -> Option<(Kernel, Vec<usize>)> {
    let Instr::Binary(Binary::Add, t, p, q) = r.instrs[i] else {
        return None;
    };
    // A register of values of `t`, computed per block.
    let varying = |j: usize| {
        let g = r.regs[j];
        g.dtype == t && !g.raw && !g.uniform && !splat_ok[j]
    };
    let inner = |j: usize| varying(j) && uses[j] == 1 && !r.reduces.iter().any(|q| q.reg == j);
    let uniform = |j: usize| r.regs[j].uniform && !r.regs[j].raw;
    // The uniform operand of `j`'s two and the other.
    let split = |p: usize, q: usize| match (uniform(p), uniform(q)) {
        (true, false) => Some((p, q)),
        (false, true) => Some((q, p)),
        _ => None,
    };
    if !t.is_float() || !varying(i) {
        return None;
    }
    let (b, m) = split(p, q)?;
    let Instr::Binary(Binary::Mul, tm, p, q) = r.instrs[m] else {
        return None;
    };
    if tm != t || !inner(m) {
        return None;
    }
    let (a, x) = split(p, q)?;
    if !varying(x) {
        return None;
    }
    let mut chain = vec![m];
    let mut kern = Kernel::Affine {
        x,
        a,
        b,
        t,
        widen: false,
    };
    if let Instr::Widen(l) = r.instrs[x] {
        let g = r.regs[l];
        if t == DType::BF16 && inner(x) && g.raw && !g.uniform && !splat_ok[l] {
            chain.push(x);
            kern = Kernel::Affine {
                x: l,
                a,
                b,
                t,
                widen: true,
            };
        }
    }
    Some((kern, chain))
}

/// `i` as `exp(x - c)` in f32: the kernel and the chain's other instructions (the
/// difference; bf16's widen and convert of `x` when only the chain reads them).
fn exp_sub(
    r: &Region,
    uses: &[usize],
    splat_ok: &[bool],
    i: usize,
) -> Option<(Kernel, Vec<usize>)> {
    let plain = |j: usize, t: DType| {
        let g = r.regs[j];
        g.dtype == t && !g.raw && !g.uniform && !splat_ok[j]
    };
    let inner =
        |j: usize, t: DType| plain(j, t) && uses[j] == 1 && !r.reduces.iter().any(|q| q.reg == j);
    let Instr::Unary(Unary::Exp, DType::F32, d) = r.instrs[i] else {
        return None;
    };
    let Instr::Binary(Binary::Sub, DType::F32, x, c) = r.instrs[d] else {
        return None;
    };
    if !plain(i, DType::F32) || !inner(d, DType::F32) || !plain(x, DType::F32) {
        return None;
    }
    if let Instr::Convert(DType::BF16, DType::F32, w) = r.instrs[x] {
        if let Instr::Widen(l) = r.instrs[w] {
            let g = r.regs[l];
            let raw = g.dtype == DType::BF16 && g.raw && !g.uniform && !splat_ok[l];
            if inner(x, DType::F32) && inner(w, DType::BF16) && raw {
                return Some((
                    Kernel::ExpSub {
                        x: l,
                        c,
                        widen: true,
                    },
                    vec![d, x, w],
                ));
            }
        }
    }
    Some((Kernel::ExpSub { x, c, widen: false }, vec![d]))
}

/// `i` as a unary float op in bf16 of a widened bf16 register: the kernel and the
/// chain's other instruction (the widen, when only the op reads it).
fn unary_widen(
    r: &Region,
    uses: &[usize],
    splat_ok: &[bool],
    i: usize,
) -> Option<(Kernel, Vec<usize>)> {
    let varying = |j: usize, raw: bool| {
        let g = r.regs[j];
        g.dtype == DType::BF16 && g.raw == raw && !g.uniform && !splat_ok[j]
    };
    let Instr::Unary(u, DType::BF16, w) = r.instrs[i] else {
        return None;
    };
    let Instr::Widen(l) = r.instrs[w] else {
        return None;
    };
    let inner = varying(w, false) && uses[w] == 1 && !r.reduces.iter().any(|q| q.reg == w);
    (varying(i, false) && inner && varying(l, true) && u != Unary::Not)
        .then_some((Kernel::UnaryWiden { u, x: l }, vec![w]))
}

/// True when register `j` of `r` holds plain f32 values, computed per block.
fn varying_f32(r: &Region, splat_ok: &[bool], j: usize) -> bool {
    let g = r.regs[j];
    g.dtype == DType::F32 && !g.raw && !g.uniform && !splat_ok[j]
}

/// True when register `j` of `r` is [`varying_f32`] and inner to a chain: read once (by
/// the chain), folded by no reduction.
fn inner_f32(r: &Region, uses: &[usize], splat_ok: &[bool], j: usize) -> bool {
    varying_f32(r, splat_ok, j) && uses[j] == 1 && !r.reduces.iter().any(|q| q.reg == j)
}

/// `i` as an f32 unary op of `|x| + b` or `x + b` (`b` uniform, on either side: the sum
/// is the same bits either way): the kernel and the chain's other instructions (the sum;
/// the abs when only the sum reads it).
fn unary_shifted(
    r: &Region,
    uses: &[usize],
    splat_ok: &[bool],
    i: usize,
) -> Option<(Kernel, Vec<usize>)> {
    let varying = |j: usize| varying_f32(r, splat_ok, j);
    let inner = |j: usize| inner_f32(r, uses, splat_ok, j);
    let uniform = |j: usize| r.regs[j].uniform && !r.regs[j].raw && r.regs[j].dtype == DType::F32;
    let Instr::Unary(u, DType::F32, s) = r.instrs[i] else {
        return None;
    };
    if !varying(i) || !lanes::shifts(u) || !inner(s) {
        return None;
    }
    let Instr::Binary(Binary::Add, DType::F32, p, q) = r.instrs[s] else {
        return None;
    };
    let (b, y) = match (uniform(p), uniform(q)) {
        (true, false) => (p, q),
        (false, true) => (q, p),
        _ => return None,
    };
    if !varying(y) {
        return None;
    }
    Some(match r.instrs[y] {
        Instr::Unary(Unary::Abs, DType::F32, x) if inner(y) && varying(x) => {
            (Kernel::UnaryShifted { u, x, b, abs: true }, vec![s, y])
        }
        _ => (
            Kernel::UnaryShifted {
                u,
                x: y,
                b,
                abs: false,
            },
            vec![s],
        ),
    })
}

/// `i` as an f32 division converted to bf16 or f16: the kernel and the chain's other
/// instruction (the division, read only by the convert).
fn div_convert(
    r: &Region,
    uses: &[usize],
    splat_ok: &[bool],
    i: usize,
) -> Option<(Kernel, Vec<usize>)> {
    let Instr::Convert(DType::F32, t, d) = r.instrs[i] else {
        return None;
    };
    let g = r.regs[i];
    let out_ok = g.dtype == t && !g.raw && !g.uniform && !splat_ok[i];
    if !matches!(t, DType::BF16 | DType::F16) || !out_ok || !inner_f32(r, uses, splat_ok, d) {
        return None;
    }
    let Instr::Binary(Binary::Div, DType::F32, x, c) = r.instrs[d] else {
        return None;
    };
    // The dividend per lane; the divisor per lane or one value (a row's, say).
    let c_ok = !r.regs[c].raw && r.regs[c].dtype == DType::F32;
    (varying_f32(r, splat_ok, x) && c_ok).then_some((Kernel::DivConvert { x, c, t }, vec![d]))
}

/// `i` as the tanh form of gelu: the kernel and the chain's other instructions.
fn gelu_tanh(
    r: &Region,
    uses: &[usize],
    splat_ok: &[bool],
    i: usize,
) -> Option<(Kernel, Vec<usize>)> {
    let varying = |j: usize| varying_f32(r, splat_ok, j);
    let inner = |j: usize| inner_f32(r, uses, splat_ok, j);
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

/// Computes `kern` over `m` lanes into `out`, its inputs' lanes at `at` (16-bit
/// elements as stored where `halves` says; one value where `splat` has it), its
/// uniform registers' values in lane 0.
///
/// # Safety
/// As [`super::region`]'s `compute`: `at` holds the inputs' `m` lanes, `out` room for
/// `m`, each input's lanes apart from them or the very same (a chain's first input,
/// read only by an inner member, may have left its slot to the result).
#[inline(always)]
pub(super) unsafe fn run(
    kern: &Kernel,
    at: &[*const u32],
    splat: &[Option<u32>],
    halves: &[bool],
    out: *mut u32,
    m: usize,
) {
    match *kern {
        Kernel::ExpSub { x, c, widen } => {
            let shared = |j: usize| std::ptr::eq(at[j], out);
            // SAFETY (both): as the function's; neither input shares the lanes written.
            if shared(x) || (splat[c].is_none() && shared(c)) {
                // The result takes an input's slot: made apart, then copied.
                let mut tmp = [0u32; lanes::BLOCK];
                unsafe { run_exp_sub(at, splat, halves, [x, c], widen, &mut tmp[..m]) };
                // SAFETY: `out` has room for `m`; the inputs are read.
                unsafe { std::slice::from_raw_parts_mut(out, m) }.copy_from_slice(&tmp[..m]);
            } else {
                let out = unsafe { std::slice::from_raw_parts_mut(out, m) };
                unsafe { run_exp_sub(at, splat, halves, [x, c], widen, out) };
            }
        }
        Kernel::Affine { x, a, b, t, widen } => {
            // SAFETY: a uniform register's lanes are all its value.
            let k = unsafe { [f32::from_bits(*at[a]), f32::from_bits(*at[b])] };
            // SAFETY: as the function's.
            let (src, out) = unsafe { src_of(at, halves, x, out, m) };
            lanes::affine(t, widen, src, k, out);
        }
        Kernel::UnaryWiden { u, x } => {
            // SAFETY: as the function's.
            let (src, out) = unsafe { src_of(at, halves, x, out, m) };
            lanes::unary_widen(u, src, out);
        }
        Kernel::UnaryShifted { u, x, b, abs } => {
            // SAFETY: a uniform register's lanes are all its value.
            let b = f32::from_bits(unsafe { *at[b] });
            if std::ptr::eq(at[x], out) {
                // The result takes the input's slot: the input copied apart first.
                let mut tmp = [0u32; lanes::BLOCK];
                // SAFETY: as the function's: `out` holds `m` lanes of `x`.
                tmp[..m].copy_from_slice(unsafe { std::slice::from_raw_parts(out, m) });
                let out = unsafe { std::slice::from_raw_parts_mut(out, m) };
                lanes::unary_shifted(u, abs, b, &tmp[..m], out);
            } else {
                // SAFETY: as the function's; the input's lanes are apart from `out`.
                let (x, out) = unsafe {
                    (
                        std::slice::from_raw_parts(at[x], m),
                        std::slice::from_raw_parts_mut(out, m),
                    )
                };
                lanes::unary_shifted(u, abs, b, x, out);
            }
        }
        Kernel::DivConvert { x, c, t } => {
            let shared = |j: usize| std::ptr::eq(at[j], out);
            // SAFETY (both): as the function's; neither input shares the lanes written.
            if shared(x) || (splat[c].is_none() && shared(c)) {
                // The result takes an input's slot: made apart, then copied.
                let mut tmp = [0u32; lanes::BLOCK];
                let (x, c) = unsafe { div_args(at, splat, [x, c], m) };
                lanes::div_convert(t, x, c, lanes::Dst::Words(&mut tmp[..m]));
                // SAFETY: `out` has room for `m`; the inputs are read.
                unsafe { std::slice::from_raw_parts_mut(out, m) }.copy_from_slice(&tmp[..m]);
            } else {
                let (x, c) = unsafe { div_args(at, splat, [x, c], m) };
                let out = unsafe { std::slice::from_raw_parts_mut(out, m) };
                lanes::div_convert(t, x, c, lanes::Dst::Words(out));
            }
        }
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

/// [`Kernel::DivConvert`] of a block of `m` lanes from `start` stored straight into
/// the 16-bit elements of its one output at `dst` (the convert's register read by
/// that output alone; the output apart from every input).
///
/// # Safety
/// As [`run`]'s for the inputs; `dst` holds the output's elements from `start` to
/// `start + m`, this block's own.
#[inline(always)]
pub(super) unsafe fn run_halves(
    kern: &Kernel,
    at: &[*const u32],
    splat: &[Option<u32>],
    dst: *mut u16,
    m: usize,
) {
    let Kernel::DivConvert { x, c, t } = *kern else {
        unreachable!("only a division converted stores halves")
    };
    // SAFETY: as the function's.
    let (x, c) = unsafe { div_args(at, splat, [x, c], m) };
    let dst = unsafe { std::slice::from_raw_parts_mut(dst, m) };
    lanes::div_convert(t, x, c, lanes::Dst::Halves(dst));
}

/// True when `kern` may store its result straight into a lent 16-bit output
/// ([`run_halves`]).
pub(super) fn stores_halves(kern: &Kernel) -> bool {
    matches!(kern, Kernel::DivConvert { .. })
}

/// The `m` lanes of registers `[x, c]`: `x`'s, and `c`'s or its one value.
///
/// # Safety
/// As [`run`]'s.
#[inline(always)]
unsafe fn div_args<'a>(
    at: &[*const u32],
    splat: &[Option<u32>],
    [x, c]: [usize; 2],
    m: usize,
) -> (&'a [u32], lanes::Arg<'a>) {
    // SAFETY: as the function's.
    unsafe {
        let c = match splat[c] {
            Some(v) => lanes::Arg::Splat(v),
            None => lanes::Arg::Lanes(std::slice::from_raw_parts(at[c], m)),
        };
        (std::slice::from_raw_parts(at[x], m), c)
    }
}

/// A one-input kernel's input `x` (the result's own lanes, 16-bit elements as stored,
/// or words) and its `m` result lanes at `out`.
///
/// # Safety
/// As [`run`]'s: `x`'s lanes are `out`'s own or apart from them.
#[inline(always)]
unsafe fn src_of<'a>(
    at: &[*const u32],
    halves: &[bool],
    x: usize,
    out: *mut u32,
    m: usize,
) -> (lanes::Src<'a>, &'a mut [u32]) {
    // SAFETY: as the function's.
    unsafe {
        let src = if halves[x] {
            lanes::Src::Halves(std::slice::from_raw_parts(at[x] as *const u16, m))
        } else if std::ptr::eq(at[x], out) {
            lanes::Src::InPlace
        } else {
            lanes::Src::Words(std::slice::from_raw_parts(at[x], m))
        };
        (src, std::slice::from_raw_parts_mut(out, m))
    }
}

/// [`Kernel::ExpSub`] of registers `[x, c]` into `out`.
///
/// # Safety
/// As [`run`]'s, `out` apart from both inputs.
#[inline(always)]
unsafe fn run_exp_sub(
    at: &[*const u32],
    splat: &[Option<u32>],
    halves: &[bool],
    [x, c]: [usize; 2],
    widen: bool,
    out: &mut [u32],
) {
    let m = out.len();
    // SAFETY: as the function's.
    let (src, c) = unsafe {
        let src = if halves[x] {
            lanes::Src::Halves(std::slice::from_raw_parts(at[x] as *const u16, m))
        } else {
            lanes::Src::Words(std::slice::from_raw_parts(at[x], m))
        };
        let c = match splat[c] {
            Some(v) => lanes::Arg::Splat(v),
            None => lanes::Arg::Lanes(std::slice::from_raw_parts(at[c], m)),
        };
        (src, c)
    };
    lanes::exp_sub(widen, src, c, out);
}
