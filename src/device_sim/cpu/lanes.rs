//! Elementwise ops on blocks of lanes: a lane is 32 bits holding a value (f32 for every
//! float dtype, 16-bit ones rounded to theirs; i32 for integers and bools, 8-bit ones
//! wrapped to their width) or, for 16-bit floats as stored, their bits. Every loop is a
//! plain loop over slices of one type with the op chosen outside it, so that the
//! compiler vectorizes it (the callers run them under [`pulp::Arch::dispatch`], which
//! compiles them for the machine's widest vector unit). Results equal the CPU oracle's
//! definitions: floats in f32 rounded once to a 16-bit dtype, integers wrapping.

use super::vmath;
use crate::array::DType;
use crate::ir::{Binary, Comparison, Unary};

/// Lanes per block: a block of every register of a region stays in the core's first-level
/// cache (4 KiB a register; 1024 ran gelu and softmax 10-20% faster than 2048 here).
pub const BLOCK: usize = 1024;

#[inline(always)]
fn f32s(x: &[u32]) -> &[f32] {
    bytemuck::cast_slice(x)
}

#[inline(always)]
fn f32s_mut(x: &mut [u32]) -> &mut [f32] {
    bytemuck::cast_slice_mut(x)
}

#[inline(always)]
fn map1(out: &mut [u32], x: &[u32], f: impl Fn(f32) -> f32) {
    for (o, &a) in f32s_mut(out).iter_mut().zip(f32s(x)) {
        *o = f(a);
    }
}

/// A binary op's argument: a block's lanes, or one value (its bits) for every lane, a
/// constant or a broadcast that is one value over the block, read from a register
/// instead of from memory.
#[derive(Clone, Copy)]
pub enum Arg<'a> {
    /// A value per lane.
    Lanes(&'a [u32]),
    /// One value for all.
    Splat(u32),
}

#[inline(always)]
fn map2(out: &mut [u32], x: Arg, y: Arg, f: impl Fn(f32, f32) -> f32) {
    match (x, y) {
        (Arg::Lanes(x), Arg::Lanes(y)) => {
            for ((o, &a), &b) in f32s_mut(out).iter_mut().zip(f32s(x)).zip(f32s(y)) {
                *o = f(a, b);
            }
        }
        (Arg::Lanes(x), Arg::Splat(b)) => map1(out, x, |a| f(a, f32::from_bits(b))),
        (Arg::Splat(a), Arg::Lanes(y)) => map1(out, y, |b| f(f32::from_bits(a), b)),
        (Arg::Splat(a), Arg::Splat(b)) => {
            out.fill(f(f32::from_bits(a), f32::from_bits(b)).to_bits())
        }
    }
}

#[inline(always)]
fn map1i(out: &mut [u32], x: &[u32], f: impl Fn(i32) -> i32) {
    for (o, &a) in out.iter_mut().zip(x) {
        *o = f(a as i32) as u32;
    }
}

#[inline(always)]
fn map2i(out: &mut [u32], x: Arg, y: Arg, f: impl Fn(i32, i32) -> i32) {
    match (x, y) {
        (Arg::Lanes(x), Arg::Lanes(y)) => {
            for ((o, &a), &b) in out.iter_mut().zip(x).zip(y) {
                *o = f(a as i32, b as i32) as u32;
            }
        }
        (Arg::Lanes(x), Arg::Splat(b)) => map1i(out, x, |a| f(a, b as i32)),
        (Arg::Splat(a), Arg::Lanes(y)) => map1i(out, y, |b| f(a as i32, b)),
        (Arg::Splat(a), Arg::Splat(b)) => out.fill(f(a as i32, b as i32) as u32),
    }
}

/// f32 `x` rounded to the nearest bf16 (ties to even), as an f32; NaN stays NaN.
#[inline(always)]
pub fn round_bf16(x: f32) -> f32 {
    let b = x.to_bits();
    let r = b.wrapping_add(0x7fff + ((b >> 16) & 1)) & 0xffff_0000;
    let nan = (b & 0xffff_0000) | 0x0040_0000;
    f32::from_bits(if x.is_nan() { nan } else { r })
}

/// The f16 bits of f32 `x`, rounded to nearest even (overflow to inf, NaN quiet with
/// the payload's top bits kept).
#[inline(always)]
pub fn f16_bits(x: f32) -> u32 {
    let b = x.to_bits();
    let sign = (b >> 16) & 0x8000;
    let a = b & 0x7fff_ffff;
    // Normal f16 range: rebias the exponent and round at bit 13.
    let normal = (a
        .wrapping_sub((127 - 15) << 23)
        .wrapping_add(0xfff + ((a >> 13) & 1)))
        >> 13;
    // Below f16's normals: adding 0.5 puts the rounded f16 subnormal in the low bits.
    let sub = (f32::from_bits(a) + 0.5)
        .to_bits()
        .wrapping_sub(0x3f00_0000);
    let nan = 0x7c00 | ((a >> 13) & 0x3ff) | 0x200;
    let mag = if a > 0x7f80_0000 {
        nan
    } else if a >= 0x477f_f000 {
        0x7c00
    } else if a < 0x3880_0000 {
        sub
    } else {
        normal
    };
    sign | mag
}

/// The f32 value of f16 bits `h` (exact; NaN payloads kept).
#[inline(always)]
pub fn f16_value(h: u32) -> f32 {
    let sign = (h & 0x8000) << 16;
    let em = h & 0x7fff;
    // Normals: the exponent rebiased. Subnormals: their integer fraction times 2^-24,
    // never an f32 subnormal on the way (which a CPU set to read those as zero, as
    // XLA's threads are, would flush).
    let normal = f32::from_bits((em << 13) + ((127 - 15) << 23));
    let sub = em as f32 * f32::from_bits(0x3380_0000);
    let special = f32::from_bits((em << 13) | 0x7f80_0000);
    let v = if em >= 0x7c00 {
        special
    } else if em >= 0x400 {
        normal
    } else {
        sub
    };
    f32::from_bits(v.to_bits() | sign)
}

/// f32 `x` rounded to the nearest f16 (ties to even), as an f32.
#[inline(always)]
pub fn round_f16(x: f32) -> f32 {
    f16_value(f16_bits(x))
}

/// Runs `$body` with `$r` bound to the rounding of float dtype `$t`'s results (a
/// function of f32 to f32: none for f32), so that each op's loop rounds its own
/// results as it makes them, in one pass (each arm a loop of its own).
macro_rules! rounding {
    ($t:expr, |$r:ident| $body:expr) => {
        match $t {
            DType::BF16 => {
                let $r = round_bf16;
                $body
            }
            DType::F16 => {
                let $r = round_f16;
                $body
            }
            _ => {
                let $r = |v: f32| v;
                $body
            }
        }
    };
}

/// Lanes of i32 results wrapped to integer (or bool) dtype `t`.
#[inline(always)]
pub fn wrap(t: DType, out: &mut [u32]) {
    match t {
        DType::I8 => out.iter_mut().for_each(|o| *o = *o as i8 as i32 as u32),
        DType::U8 => out.iter_mut().for_each(|o| *o &= 0xff),
        DType::Bool => out.iter_mut().for_each(|o| *o &= 1),
        _ => {}
    }
}

/// Stored bits of dtype `t` as values.
#[inline(always)]
pub fn widen(t: DType, x: &[u32], out: &mut [u32]) {
    match t {
        DType::BF16 => out.iter_mut().zip(x).for_each(|(o, &w)| *o = w << 16),
        DType::F16 => out
            .iter_mut()
            .zip(x)
            .for_each(|(o, &w)| *o = f16_value(w & 0xffff).to_bits()),
        _ => out.copy_from_slice(x),
    }
}

/// 16-bit elements as stored into words (their bits in the low half).
#[inline(always)]
pub fn widen_halves(x: &[u16], out: &mut [u32]) {
    out.iter_mut().zip(x).for_each(|(o, &h)| *o = u32::from(h));
}

/// Words of 16-bit elements (their bits in the low half) as stored.
#[inline(always)]
pub fn narrow_halves(x: &[u32], out: &mut [u16]) {
    out.iter_mut().zip(x).for_each(|(o, &w)| *o = w as u16);
}

/// [`widen`] of 16-bit float elements as stored (read two bytes each).
#[inline(always)]
pub fn widen_from_halves(t: DType, x: &[u16], out: &mut [u32]) {
    match t {
        DType::BF16 => out
            .iter_mut()
            .zip(x)
            .for_each(|(o, &h)| *o = u32::from(h) << 16),
        DType::F16 => out
            .iter_mut()
            .zip(x)
            .for_each(|(o, &h)| *o = f16_value(u32::from(h)).to_bits()),
        _ => widen_halves(x, out),
    }
}

/// [`narrow`] of 16-bit float values into their elements as stored (two bytes each).
#[inline(always)]
pub fn narrow_to_halves(t: DType, x: &[u32], out: &mut [u16]) {
    match t {
        DType::BF16 => out
            .iter_mut()
            .zip(f32s(x))
            .for_each(|(o, &v)| *o = (round_bf16(v).to_bits() >> 16) as u16),
        DType::F16 => out
            .iter_mut()
            .zip(f32s(x))
            .for_each(|(o, &v)| *o = f16_bits(v) as u16),
        _ => narrow_halves(x, out),
    }
}

/// [`widen`] of a whole array, under the widest vector unit.
pub fn widen_all(t: DType, x: &[u32], out: &mut [u32]) {
    struct W<'a>(DType, &'a [u32], &'a mut [u32]);
    impl pulp::WithSimd for W<'_> {
        type Output = ();
        #[inline(always)]
        fn with_simd<S: pulp::Simd>(self, _: S) {
            widen(self.0, self.1, self.2);
        }
    }
    pulp::Arch::new().dispatch(W(t, x, out));
}

/// [`widen_from_halves`] of a whole array, under the widest vector unit.
pub fn widen_all_halves(t: DType, x: &[u16], out: &mut [u32]) {
    struct W<'a>(DType, &'a [u16], &'a mut [u32]);
    impl pulp::WithSimd for W<'_> {
        type Output = ();
        #[inline(always)]
        fn with_simd<S: pulp::Simd>(self, _: S) {
            widen_from_halves(self.0, self.1, self.2);
        }
    }
    pulp::Arch::new().dispatch(W(t, x, out));
}

/// Values of dtype `t` as stored bits (exact: the values are `t`'s already).
#[inline(always)]
pub fn narrow(t: DType, x: &[u32], out: &mut [u32]) {
    match t {
        DType::BF16 => out
            .iter_mut()
            .zip(f32s(x))
            .for_each(|(o, &v)| *o = round_bf16(v).to_bits() >> 16),
        DType::F16 => out
            .iter_mut()
            .zip(f32s(x))
            .for_each(|(o, &v)| *o = f16_bits(v)),
        _ => out.copy_from_slice(x),
    }
}

/// Floats' max as XLA's: NaN if either is; +0 above -0.
#[inline(always)]
pub fn fmax(a: f32, b: f32) -> f32 {
    let equal = f32::from_bits(a.to_bits() & b.to_bits());
    let m = if a == b {
        equal
    } else if b > a {
        b
    } else {
        a
    };
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        m
    }
}

/// Floats' min as XLA's: NaN if either is; -0 below +0.
#[inline(always)]
pub fn fmin(a: f32, b: f32) -> f32 {
    let equal = f32::from_bits(a.to_bits() | b.to_bits());
    let m = if a == b {
        equal
    } else if b < a {
        b
    } else {
        a
    };
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        m
    }
}

/// `x^n` by repeated squaring, lane by lane (as XLA expands `integer_pow`), rounded by
/// `r`.
#[inline(always)]
fn powi_f32(out: &mut [u32], x: &[u32], n: i32, r: impl Fn(f32) -> f32) {
    let mut base = [0f32; BLOCK];
    let base = &mut base[..x.len()];
    base.copy_from_slice(f32s(x));
    let acc = f32s_mut(out);
    acc.fill(1.0);
    let mut e = n.unsigned_abs();
    while e > 0 {
        if e & 1 == 1 {
            acc.iter_mut().zip(base.iter()).for_each(|(a, &b)| *a *= b);
        }
        e >>= 1;
        if e > 0 {
            base.iter_mut().for_each(|b| *b *= *b);
        }
    }
    if n < 0 {
        acc.iter_mut().for_each(|a| *a = r(1.0 / *a));
    } else {
        acc.iter_mut().for_each(|a| *a = r(*a));
    }
}

/// `x^N` by the squarings [`powi_f32`] makes, in the same order (for `N > 0`).
#[inline(always)]
fn powi_const<const N: u32>(x: f32) -> f32 {
    let mut acc = 1.0f32;
    let mut base = x;
    let mut e = N;
    while e > 0 {
        if e & 1 == 1 {
            acc *= base;
        }
        e >>= 1;
        if e > 0 {
            base *= base;
        }
    }
    acc
}

fn powi_i32(x: i32, n: i32) -> i32 {
    let mut acc = 1i32;
    let mut base = x;
    let mut e = n.max(0) as u32;
    while e > 0 {
        if e & 1 == 1 {
            acc = acc.wrapping_mul(base);
        }
        e >>= 1;
        if e > 0 {
            base = base.wrapping_mul(base);
        }
    }
    acc
}

/// `f(x)` of sin or cos, with libm's reduction for the lanes beyond
/// [`vmath::SIN_COS_LIMIT`], rounded by `r`.
#[inline(always)]
fn sin_cos(
    out: &mut [u32],
    x: &[u32],
    f: fn(f32) -> f32,
    exact: fn(f32) -> f32,
    r: impl Fn(f32) -> f32 + Copy,
) {
    map1(out, x, |a| r(f(a)));
    let lim = vmath::SIN_COS_LIMIT;
    if f32s(x).iter().any(|v| v.abs() > lim) {
        for (o, &v) in f32s_mut(out).iter_mut().zip(f32s(x)) {
            if v.abs() > lim {
                *o = r(exact(v));
            }
        }
    }
}

/// Float `u` of `pre` of the values of `src`, each result rounded by `r` in the op's
/// own loop; when `WIDEN`, `src` holds bf16 elements as stored, widened in the same
/// loop. `pre` is the identity for the ops with loops of their own (sin, cos, large
/// powers).
#[inline(always)]
fn unary_float<const WIDEN: bool>(
    u: Unary,
    src: Src,
    out: &mut [u32],
    pre: impl Fn(f32) -> f32 + Copy,
    r: impl Fn(f32) -> f32 + Copy,
) {
    // The ops with loops of their own take words of values: widened apart first.
    let own_loop = match u {
        Unary::Sin | Unary::Cos => true,
        Unary::IntegerPow(n) => !(2..=4).contains(&n),
        _ => false,
    };
    let x = match src {
        Src::Words(x) if !WIDEN || !own_loop => x,
        _ if own_loop => {
            let mut values = [0u32; BLOCK];
            let values = &mut values[..out.len()];
            if matches!(src, Src::InPlace) {
                // In place, the source is the lanes made here.
                values.copy_from_slice(out);
            }
            map_src(src, values, value::<WIDEN>);
            return own_loop_float(u, values, out, r);
        }
        // Read through `src` by the loops below (a widen: `x` is not read).
        _ => {
            debug_assert!(WIDEN, "values come in words");
            &[]
        }
    };
    // A macro, not a closure over a function pointer: each op's loop is its own, with
    // the function inlined into it (a pointer called per lane does not vectorize).
    // Words of values keep the one loop of a slice (no other sources compiled).
    macro_rules! m {
        ($f:path) => {
            m!(|a| $f(a))
        };
        (|$a:ident| $e:expr) => {
            if WIDEN {
                map_src(src, out, |w| {
                    let $a = pre(value::<WIDEN>(w));
                    r($e)
                })
            } else {
                map1(out, x, |v| {
                    let $a = pre(v);
                    r($e)
                })
            }
        };
    }
    match u {
        Unary::Neg => m!(|a| -a),
        Unary::Abs => m!(f32::abs),
        Unary::Sign => m!(|a| {
            let s = 1.0f32.copysign(a);
            if a.is_nan() || a == 0.0 {
                a
            } else {
                s
            }
        }),
        Unary::Floor => m!(f32::floor),
        Unary::Ceil => m!(f32::ceil),
        Unary::Round => m!(f32::round),
        Unary::RoundEven => m!(f32::round_ties_even),
        Unary::Exp => m!(vmath::exp),
        Unary::Exp2 => m!(vmath::exp2),
        Unary::Expm1 => m!(vmath::expm1),
        Unary::Log => m!(vmath::ln),
        Unary::Log1p => m!(vmath::ln_1p),
        Unary::Sqrt => m!(f32::sqrt),
        Unary::Rsqrt => m!(|a| 1.0 / a.sqrt()),
        Unary::Tanh => m!(vmath::tanh),
        Unary::Logistic => m!(vmath::logistic),
        Unary::Erf => m!(vmath::erf),
        // Small powers in one loop (the squarings unrolled, the same products).
        Unary::IntegerPow(2) => m!(|a| powi_const::<2>(a)),
        Unary::IntegerPow(3) => m!(|a| powi_const::<3>(a)),
        Unary::IntegerPow(4) => m!(|a| powi_const::<4>(a)),
        Unary::Sin | Unary::Cos | Unary::IntegerPow(_) => own_loop_float(u, x, out, r),
        Unary::Not => unreachable!("checked: not takes integers and bools"),
    }
}

/// [`unary_float`]'s ops with loops of their own, of words of values `x`.
#[inline(always)]
fn own_loop_float(u: Unary, x: &[u32], out: &mut [u32], r: impl Fn(f32) -> f32 + Copy) {
    match u {
        Unary::Sin => sin_cos(out, x, vmath::sin, f32::sin, r),
        Unary::Cos => sin_cos(out, x, vmath::cos, f32::cos, r),
        Unary::IntegerPow(n) => powi_f32(out, x, n, r),
        _ => unreachable!("{u:?} is a loop of unary_float's"),
    }
}

/// A lane's f32 value: the word itself, or (`WIDEN`) a bf16 element as stored.
#[inline(always)]
fn value<const WIDEN: bool>(w: u32) -> f32 {
    f32::from_bits(if WIDEN { w << 16 } else { w })
}

/// `u` of bf16 elements as stored (`src`) in bf16: the widen and the op (rounded to
/// bf16) in one loop, the bits of the two in turn.
#[inline(always)]
pub fn unary_widen(u: Unary, src: Src, out: &mut [u32]) {
    unary_float::<true>(u, src, out, |v| v, round_bf16);
}

/// True when [`unary_shifted`] computes `u` (an op of one loop shared by every op, not
/// one of its own).
pub fn shifts(u: Unary) -> bool {
    match u {
        Unary::Sin | Unary::Cos | Unary::Not => false,
        Unary::IntegerPow(n) => (2..=4).contains(&n),
        _ => true,
    }
}

/// `u(|x| + b)` (`abs`) or `u(x + b)` of f32 values `x`, `b` one value: the abs, the sum
/// (rounded to f32) and the op in one loop, the bits of the three in turn. `u` is one
/// that [`shifts`].
#[inline(always)]
pub fn unary_shifted(u: Unary, abs: bool, b: f32, x: &[u32], out: &mut [u32]) {
    debug_assert!(shifts(u), "{u:?} has a loop of its own");
    // `abs` as a mask of the sign bit: one loop for both.
    let mask = if abs { 0x7FFF_FFFF } else { u32::MAX };
    let pre = move |v: f32| f32::from_bits(v.to_bits() & mask) + b;
    unary_float::<false>(u, Src::Words(x), out, pre, |v| v);
}

/// JAX's tanh form of gelu of f32 values, `k = [d, c, one, half]`: each lane through
/// `x * (half * (one + tanh(c * (x + d * x**3))))`, op by op as the instructions
/// ([`super::patterns`]): the same bits in one pass.
#[inline(always)]
pub fn gelu_tanh(x: &[u32], k: [f32; 4], out: &mut [u32]) {
    let [d, c, one, half] = k;
    map1(out, x, |a| {
        let cube = powi_const::<3>(a);
        let inner = c * (a + d * cube);
        a * (half * (one + vmath::tanh(inner)))
    });
}

/// Where a kernel's input lanes are: words (values, or bf16 elements as stored in their
/// low half), 16-bit elements as stored, or the result's own lanes (read, then written).
pub enum Src<'a> {
    /// A word per lane.
    Words(&'a [u32]),
    /// A 16-bit element per lane.
    Halves(&'a [u16]),
    /// The output's lanes themselves.
    InPlace,
}

/// `f` of each lane of `src` (a word, or a 16-bit element as a word) into `out`.
#[inline(always)]
fn map_src(src: Src, out: &mut [u32], f: impl Fn(u32) -> f32) {
    // `for` loops, not `for_each`: the latter's `fold` is a function of its own that
    // the compiler may leave out of line, outside the vector unit's target features
    // (its fused multiply-adds then calls to `fmaf`, 25x slower).
    match src {
        Src::Words(x) => {
            for (o, &v) in out.iter_mut().zip(x) {
                *o = f(v).to_bits();
            }
        }
        Src::Halves(x) => {
            for (o, &v) in out.iter_mut().zip(x) {
                *o = f(u32::from(v)).to_bits();
            }
        }
        Src::InPlace => {
            for o in out.iter_mut() {
                *o = f(*o).to_bits();
            }
        }
    }
}

/// `x * a + b` of float dtype `t`, `k = [a, b]`, the product and the sum each rounded
/// to `t` as their own ops' (no fused multiply-add): the bits of the two ops in turn,
/// in one pass. When `widen`, `src` holds bf16 elements as stored.
#[inline(always)]
pub fn affine(t: DType, widen: bool, src: Src, k: [f32; 2], out: &mut [u32]) {
    let [a, b] = k;
    if widen {
        return map_src(src, out, |v| {
            round_bf16(round_bf16(f32::from_bits(v << 16) * a) + b)
        });
    }
    rounding!(t, |r| map_src(
        src,
        out,
        |v| r(r(f32::from_bits(v) * a) + b)
    ));
}

/// `e^(x - c)` of f32 values, the difference and the exp in turn: the same bits in one
/// pass. When `widen`, `src` holds bf16 elements as stored (their values taken as
/// f32, exactly). Never [`Src::InPlace`].
#[inline(always)]
pub fn exp_sub(widen: bool, src: Src, c: Arg, out: &mut [u32]) {
    let w = |v: u32| f32::from_bits(if widen { v << 16 } else { v });
    match c {
        Arg::Splat(c) => {
            let c = f32::from_bits(c);
            if widen {
                map_src(src, out, |v| vmath::exp(f32::from_bits(v << 16) - c));
            } else {
                map_src(src, out, |v| vmath::exp(f32::from_bits(v) - c));
            }
        }
        Arg::Lanes(c) => {
            let each = |o: &mut u32, v: u32, c: &u32| {
                *o = vmath::exp(w(v) - f32::from_bits(*c)).to_bits();
            };
            match src {
                Src::Words(x) => out
                    .iter_mut()
                    .zip(x)
                    .zip(c)
                    .for_each(|((o, &v), c)| each(o, v, c)),
                Src::Halves(x) => out
                    .iter_mut()
                    .zip(x)
                    .zip(c)
                    .for_each(|((o, &v), c)| each(o, u32::from(v), c)),
                Src::InPlace => unreachable!("an input apart from the result"),
            }
        }
    }
}

/// Where a kernel's result lanes go: words of values, or the stored 16-bit elements
/// of a lent output.
pub enum Dst<'a> {
    /// A word per lane.
    Words(&'a mut [u32]),
    /// A 16-bit element per lane, as stored.
    Halves(&'a mut [u16]),
}

/// `x / c` of f32 values converted to 16-bit float dtype `t`: the division (rounded
/// to f32) and the rounding to `t` in turn, into values (as the convert's register
/// holds them) or straight into `t`'s stored bits (what [`narrow_to_halves`] makes of
/// those values): the same bits in one pass.
#[inline(always)]
pub fn div_convert(t: DType, x: &[u32], c: Arg, out: Dst) {
    // Each (divisor, destination) a loop of its own, the rounding inlined into it.
    macro_rules! each {
        ($word:expr, $half:expr) => {
            match (c, out) {
                (Arg::Splat(c), Dst::Words(out)) => {
                    let c = f32::from_bits(c);
                    for (o, &a) in out.iter_mut().zip(f32s(x)) {
                        *o = $word(a / c);
                    }
                }
                (Arg::Splat(c), Dst::Halves(out)) => {
                    let c = f32::from_bits(c);
                    for (o, &a) in out.iter_mut().zip(f32s(x)) {
                        *o = $half(a / c);
                    }
                }
                (Arg::Lanes(c), Dst::Words(out)) => {
                    for ((o, &a), &b) in out.iter_mut().zip(f32s(x)).zip(f32s(c)) {
                        *o = $word(a / b);
                    }
                }
                (Arg::Lanes(c), Dst::Halves(out)) => {
                    for ((o, &a), &b) in out.iter_mut().zip(f32s(x)).zip(f32s(c)) {
                        *o = $half(a / b);
                    }
                }
            }
        };
    }
    match t {
        DType::BF16 => each!(
            |v: f32| round_bf16(v).to_bits(),
            |v: f32| (round_bf16(v).to_bits() >> 16) as u16
        ),
        DType::F16 => each!(|v: f32| round_f16(v).to_bits(), |v: f32| f16_bits(v) as u16),
        _ => unreachable!("a 16-bit float"),
    }
}

/// `u` of the values of `x` (dtype `t`).
#[inline(always)]
pub fn unary(u: Unary, t: DType, x: &[u32], out: &mut [u32]) {
    if t.is_float() {
        rounding!(t, |r| unary_float::<false>(u, Src::Words(x), out, |v| v, r));
        return;
    }
    let unsigned = matches!(t, DType::U8 | DType::Bool);
    match u {
        Unary::Neg => map1i(out, x, i32::wrapping_neg),
        Unary::Abs if unsigned => out.copy_from_slice(x),
        Unary::Abs => map1i(out, x, i32::wrapping_abs),
        Unary::Sign => map1i(out, x, i32::signum),
        Unary::Not => map1i(out, x, |a| !a),
        Unary::IntegerPow(n) => map1i(out, x, |a| powi_i32(a, n)),
        _ => unreachable!("checked: {u:?} takes floats"),
    }
    wrap(t, out);
}

/// Float `b` of `x` and `y`, each result rounded by `r` in the op's own loop.
#[inline(always)]
fn binary_float(b: Binary, x: Arg, y: Arg, out: &mut [u32], r: impl Fn(f32) -> f32 + Copy) {
    match b {
        Binary::Add => map2(out, x, y, |a, b| r(a + b)),
        Binary::Sub => map2(out, x, y, |a, b| r(a - b)),
        Binary::Mul => map2(out, x, y, |a, b| r(a * b)),
        Binary::Div => map2(out, x, y, |a, b| r(a / b)),
        Binary::Rem => map2(out, x, y, |a, b| r(a % b)),
        Binary::Pow => map2(out, x, y, |a, b| r(a.powf(b))),
        Binary::Max => map2(out, x, y, |a, b| r(fmax(a, b))),
        Binary::Min => map2(out, x, y, |a, b| r(fmin(a, b))),
        Binary::Atan2 => map2(out, x, y, |a, b| r(a.atan2(b))),
        _ => unreachable!("checked: {b:?} takes integers"),
    }
}

/// `b` of the values of `x` and `y` (dtype `t`).
#[inline(always)]
pub fn binary(b: Binary, t: DType, x: &[u32], y: &[u32], out: &mut [u32]) {
    binary_args(b, t, Arg::Lanes(x), Arg::Lanes(y), out);
}

/// [`binary`] of arguments either of which may be one value for every lane (the same
/// arithmetic, so the same bits, as its lanes filled with it).
#[inline(always)]
pub fn binary_args(b: Binary, t: DType, x: Arg, y: Arg, out: &mut [u32]) {
    if t.is_float() {
        rounding!(t, |r| binary_float(b, x, y, out, r));
        return;
    }
    let bits = match t {
        DType::I8 | DType::U8 => 8u32,
        DType::Bool => 1,
        _ => 32,
    };
    match b {
        Binary::Add => map2i(out, x, y, i32::wrapping_add),
        Binary::Sub => map2i(out, x, y, i32::wrapping_sub),
        Binary::Mul => map2i(out, x, y, i32::wrapping_mul),
        // XLA: division by zero gives all ones (-1); MIN / -1 wraps to MIN.
        Binary::Div => map2i(
            out,
            x,
            y,
            |a, c| if c == 0 { -1 } else { a.wrapping_div(c) },
        ),
        Binary::Rem => map2i(out, x, y, |a, c| if c == 0 { a } else { a.wrapping_rem(c) }),
        Binary::Max => map2i(out, x, y, i32::max),
        Binary::Min => map2i(out, x, y, i32::min),
        Binary::And => map2i(out, x, y, |a, c| a & c),
        Binary::Or => map2i(out, x, y, |a, c| a | c),
        Binary::Xor => map2i(out, x, y, |a, c| a ^ c),
        Binary::ShiftLeft => map2i(out, x, y, |a, c| {
            if (c as u32) < bits {
                a.wrapping_shl(c as u32)
            } else {
                0
            }
        }),
        Binary::ShiftRightLogical => map2i(out, x, y, |a, c| {
            let ua = (a as u32) & (u32::MAX >> (32 - bits));
            if (c as u32) < bits {
                (ua >> c as u32) as i32
            } else {
                0
            }
        }),
        Binary::ShiftRightArithmetic => map2i(out, x, y, |a, c| {
            // The sign bit of the width fills in, signed or not (XLA's rule).
            let signed = (a << (32 - bits)) >> (32 - bits);
            signed >> (c as u32).min(bits - 1).min(31)
        }),
        Binary::Pow | Binary::Atan2 => unreachable!("checked: {b:?} takes floats"),
    }
    wrap(t, out);
}

/// `op` of the values of `x` and `y` (dtype `t`), as bools (0 or 1).
#[inline(always)]
pub fn compare(op: Comparison, t: DType, x: &[u32], y: &[u32], out: &mut [u32]) {
    macro_rules! cmp {
        ($f:expr) => {
            if t.is_float() {
                for ((o, &a), &b) in out.iter_mut().zip(f32s(x)).zip(f32s(y)) {
                    *o = u32::from($f(a, b));
                }
            } else {
                for ((o, &a), &b) in out.iter_mut().zip(x).zip(y) {
                    *o = u32::from($f(a as i32, b as i32));
                }
            }
        };
    }
    // IEEE comparisons: a NaN is unequal to everything and unordered.
    match op {
        Comparison::Eq => cmp!(|a, b| a == b),
        Comparison::Ne => cmp!(|a, b| a != b),
        Comparison::Lt => cmp!(|a, b| a < b),
        Comparison::Le => cmp!(|a, b| a <= b),
        Comparison::Gt => cmp!(|a, b| a > b),
        Comparison::Ge => cmp!(|a, b| a >= b),
    }
}

/// `where(p, x, y)` lane by lane (any dtype: the lanes are taken as they are).
#[inline(always)]
pub fn select(p: &[u32], x: &[u32], y: &[u32], out: &mut [u32]) {
    for (((o, &c), &a), &b) in out.iter_mut().zip(p).zip(x).zip(y) {
        *o = if c & 1 != 0 { a } else { b };
    }
}

/// Values of dtype `from` as values of dtype `to` (`lax.convert_element_type`):
/// floats round to nearest even; float to integer truncates toward zero, saturates at
/// the integer's range and gives 0 for NaN; integers wrap; to bool is `!= 0`.
#[inline(always)]
pub fn convert(from: DType, to: DType, x: &[u32], out: &mut [u32]) {
    if from == to {
        out.copy_from_slice(x);
        return;
    }
    if to == DType::Bool {
        if from.is_float() {
            out.iter_mut()
                .zip(f32s(x))
                .for_each(|(o, &a)| *o = u32::from(a != 0.0));
        } else {
            out.iter_mut()
                .zip(x)
                .for_each(|(o, &a)| *o = u32::from(a != 0));
        }
        return;
    }
    match (from.is_float(), to.is_float()) {
        (true, true) => rounding!(to, |r| map1(out, x, r)),
        (true, false) => {
            let (lo, hi) = match to {
                DType::I8 => (i8::MIN as f32, i8::MAX as f32),
                DType::U8 => (0.0, u8::MAX as f32),
                _ => (f32::NEG_INFINITY, f32::INFINITY),
            };
            // `as` truncates, saturates at i32's range and sends NaN to 0 (a clamp
            // keeps NaN); the clamp gives the 8-bit ranges.
            for (o, &a) in out.iter_mut().zip(f32s(x)) {
                *o = a.clamp(lo, hi) as i32 as u32;
            }
        }
        (false, true) => rounding!(to, |r| {
            for (o, &a) in f32s_mut(out).iter_mut().zip(x) {
                *o = r(a as i32 as f32);
            }
        }),
        (false, false) => {
            out.copy_from_slice(x);
            wrap(to, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_values_of_every_pattern_equal_the_half_crates() {
        every_f16_pattern();
    }

    /// As XLA's threads run: f32 subnormals read as zero and results flushed to zero.
    #[cfg(target_arch = "x86_64")]
    #[test]
    #[allow(deprecated)]
    fn f16_subnormals_keep_their_values_where_the_cpu_flushes_f32_ones() {
        use std::arch::x86_64::{_mm_getcsr, _mm_setcsr};
        // SAFETY: only this thread's rounding flags, restored after.
        let before = unsafe { _mm_getcsr() };
        unsafe { _mm_setcsr(before | 0x8040) };
        let tiny = std::hint::black_box(f32::from_bits(1));
        let flushed = tiny * 1.0 == 0.0;
        every_f16_pattern();
        unsafe { _mm_setcsr(before) };
        assert!(flushed, "the flags read subnormals as zero");
    }

    fn every_f16_pattern() {
        for h in 0..=u16::MAX {
            let want = half::f16::from_bits(h).to_f32();
            let got = f16_value(u32::from(h));
            if want.is_nan() {
                // NaN payloads kept, quiet bit as stored.
                assert_eq!(
                    got.to_bits(),
                    (u32::from(h & 0x8000) << 16) | 0x7f80_0000 | (u32::from(h & 0x3ff) << 13),
                    "{h:#x}"
                );
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{h:#x}");
            }
            // And back, exactly (a NaN comes back quiet).
            let quiet = if want.is_nan() { 0x200 } else { 0 };
            assert_eq!(f16_bits(got), u32::from(h) | quiet, "{h:#x} round trip");
        }
    }
}
