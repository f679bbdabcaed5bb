//! Transcendental functions of f32 written so that a loop over a slice of them
//! vectorizes: no branches (both sides computed and one selected), no calls into libm,
//! integer work on the bits for scaling, polynomials by fused multiply-adds (one
//! rounding each: the same bits on every CPU, a vector `vfmadd` under the FMA unit
//! [`pulp`] dispatches to, half the instructions of a multiply and an add and a
//! shorter chain; the C library's exact `fmaf` only where a CPU has no FMA). Each is within a few ulps of the true value
//! over f32's whole range (the tests below hold them to f64's libm on dense samples and
//! at the special values; the bound of each is on its doc line), as XLA's own CPU
//! approximations are; the op tests hold them to XLA's results. Polynomial
//! coefficients are least-squares minimax fits (Lawson's iteration on Chebyshev nodes,
//! relative error) of the function's smooth part on the reduced range, rounded to f32;
//! tanh's and erf's rational functions are tools/fit_rational.py's.

/// `1.5 * 2^23`: adding it rounds an f32 of magnitude below 2^22 to an integer
/// (nearest, ties to even), which its low mantissa bits then hold.
const MAGIC: f32 = 12_582_912.0;
/// The bits of [`MAGIC`].
const MAGIC_BITS: i32 = 0x4B40_0000;

const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 in two parts: the first with few enough bits that `n * LN2_HI` is exact for
/// every exponent `n` an f32 can need.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// Horner's rule: `c[0] + x * (c[1] + x * (…))`, each step one fused multiply-add.
#[inline(always)]
fn poly<const N: usize>(x: f32, c: [f32; N]) -> f32 {
    let mut acc = c[N - 1];
    let mut i = N - 1;
    while i > 0 {
        i -= 1;
        acc = acc.mul_add(x, c[i]);
    }
    acc
}

/// `x` rounded to an integer (|x| < 2^22), as an f32 and as an i32.
#[inline(always)]
fn round_split(x: f32) -> (f32, i32) {
    let t = x + MAGIC;
    (t - MAGIC, (t.to_bits() as i32).wrapping_sub(MAGIC_BITS))
}

/// `2^n` for `n` in -126..=127, exactly.
#[inline(always)]
fn pow2i(n: i32) -> f32 {
    f32::from_bits(((n + 127) << 23) as u32)
}

/// `p * 2^n` for `n` in -252..=254, rounded once (as two normal scalings).
#[inline(always)]
fn scale(p: f32, n: i32) -> f32 {
    let a = n >> 1;
    p * pow2i(a) * pow2i(n - a)
}

/// `e^r - 1 - r - r^2/2`'s factor over `r^3` on `|r| <= ln2/2`.
const EXPM1_P: [f32; 5] = [
    0.166_666_66,
    0.041_666_48,
    0.008_333_42,
    0.001_393_324_6,
    0.000_198_241_2,
];

/// `e^r` on `|r| <= ln2/2` is `1 + r + r^2 * EXP_P(r)`.
const EXP_P: [f32; 6] = [
    0.5,
    0.166_666_66,
    0.041_666_295,
    0.008_333_497,
    0.001_394_465_1,
    0.000_197_903_72,
];

/// `x` split as `n * ln2 + r`, `|r| <= ln2/2` (x clamped to where e^x is finite and
/// not zero, or just past).
#[inline(always)]
fn reduce_ln2(x: f32) -> (f32, i32) {
    let (n, ni) = round_split(x * LOG2E);
    // `n * LN2_HI` is exact, so the first step is `x - n * LN2_HI` rounded once as
    // before; the second keeps `n * LN2_LO` unrounded.
    ((-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x)), ni)
}

/// `e^x`, within 1.5 ulps.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let (r, n) = reduce_ln2(x.clamp(-104.0, 89.0));
    let p = 1.0 + r + r * r * poly(r, EXP_P);
    let y = scale(p, n);
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// `2^r - 1`'s factor over `r` on `|r| <= 1/2`.
const EXP2_Q: [f32; 7] = [
    std::f32::consts::LN_2,
    0.240_226_5,
    0.055_504_1,
    0.009_618_038,
    0.001_333_393_5,
    0.000_154_667_58,
    1.519_614_7e-5,
];

/// `2^x`, within 1.5 ulps.
#[inline(always)]
pub fn exp2(x: f32) -> f32 {
    let (n, ni) = round_split(x.clamp(-152.0, 129.0));
    let r = x.clamp(-152.0, 129.0) - n;
    let y = scale(1.0 + r * poly(r, EXP2_Q), ni);
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// `e^x - 1`, within 2.5 ulps: `2^n (e^r - 1) + (2^n - 1)` with `e^r - 1` from its
/// series-like polynomial, so that small results keep their digits.
#[inline(always)]
pub fn expm1(x: f32) -> f32 {
    let (r, n) = reduce_ln2(x.clamp(-104.0, 89.0));
    let em1 = r + r * r * 0.5 + r * r * r * poly(r, EXPM1_P);
    // Small n: 2^n is normal and 2^n - 1 exact (n <= 24) or the nearest to it.
    let s = pow2i(n.clamp(-126, 64));
    let small = s * em1 + (s - 1.0);
    // Large n (e^x - 1 is e^x): scaled in two steps, overflowing to inf as e^x does.
    let large = scale(1.0 + em1, n) - 1.0;
    let y = if n > 64 { large } else { small };
    if x.is_nan() || x == 0.0 {
        x
    } else {
        y
    }
}

/// `ln(1 + f) - f + f^2/2`'s factor over `f^3` on `sqrt(1/2) - 1 <= f < sqrt(2) - 1`
/// (degree 7: within 6.4e-9 of `ln(1 + f)` relative, 0.11 ulp; a ninth term bought
/// 0.08 ulp for a level more of the evaluation's chain).
const LOG_P: [f32; 8] = [
    0.333_333_4,
    -0.250_008_37,
    0.200_006_8,
    -0.166_224_36,
    0.142_119_1,
    -0.131_783_02,
    0.127_043_04,
    -0.075_204_485,
];

/// `c[0] + x c[1] + … + x^7 c[7]` by Estrin's scheme (`x2 = x^2`, `x4 = x^4`): pairs,
/// then pairs of pairs, a chain of three multiply-adds where Horner's rule is seven.
/// A loop of a long chain waits on it: the vector unit's queue fills with the chain's
/// later steps before the next lanes' work can enter it.
#[inline(always)]
fn estrin8(x: f32, x2: f32, x4: f32, c: [f32; 8]) -> f32 {
    let p01 = x.mul_add(c[1], c[0]);
    let p23 = x.mul_add(c[3], c[2]);
    let p45 = x.mul_add(c[5], c[4]);
    let p67 = x.mul_add(c[7], c[6]);
    x4.mul_add(x2.mul_add(p67, p45), x2.mul_add(p23, p01))
}

/// `ln x`, within 1.5 ulps (1.17 measured over every f32; NaN below 0, -inf at 0).
#[inline(always)]
pub fn ln(x: f32) -> f32 {
    // Subnormals scaled into the normal range first.
    let tiny = x < f32::MIN_POSITIVE;
    let xs = if tiny { x * 8_388_608.0 } else { x };
    let bias = if tiny { -23.0 } else { 0.0 };
    let b = xs.to_bits() as i32;
    // The exponent that puts the mantissa in [sqrt(1/2), sqrt(2)).
    let e = b.wrapping_sub(0x3F35_04F3) >> 23;
    let m = f32::from_bits(b.wrapping_sub(e << 23) as u32);
    let f = m - 1.0;
    let f2 = f * f;
    let p = estrin8(f, f2, f2 * f2, LOG_P);
    let ef = e as f32 + bias;
    // `ef * LN2_HI` is exact; the small terms are summed first, off the polynomial's
    // chain: `f - f^2/2` rounded once, then `ef * LN2_LO`.
    let small = ef.mul_add(LN2_LO, (-0.5 * f).mul_add(f, f));
    let y = ef.mul_add(LN2_HI, (f2 * f).mul_add(p, small));
    let special = if x == 0.0 {
        f32::NEG_INFINITY
    } else if x < 0.0 {
        f32::NAN
    } else {
        x // +inf or NaN
    };
    // Positive and finite, as one unsigned compare of the bits (the float compares
    // `x > 0 && x < inf` become a dozen integer instructions).
    if x.to_bits().wrapping_sub(1) < 0x7F7F_FFFF {
        y
    } else {
        special
    }
}

/// `ln(1 + x)`, within 3 ulps: `ln u * x / (u - 1)` for `u = 1 + x` rounded, which
/// cancels the rounding of `u` (exactly `x` where `u` rounds to 1).
#[inline(always)]
pub fn ln_1p(x: f32) -> f32 {
    let u = 1.0 + x;
    let y = ln(u) * (x / (u - 1.0));
    if u == 1.0 {
        x
    } else if u == f32::INFINITY {
        u
    } else if u == 0.0 {
        f32::NEG_INFINITY
    } else {
        y
    }
}

/// `tanh x / x` on `|x| <= 9` is `TANH_P(x^2) / TANH_Q(x^2)` (fitted by
/// tools/fit_rational.py, relative error 7e-9 before rounding to f32).
const TANH_P: [f32; 7] = [
    1.0,
    0.130_857_66,
    0.003_105_880_5,
    1.117_343_3e-5,
    -2.029_690_7e-8,
    5.309_355_4e-11,
    -8.561_807e-14,
];
const TANH_Q: [f32; 4] = [1.0, 0.464_190_96, 0.024_502_942, 0.000_254_888_8];
/// Beyond this magnitude tanh rounds to ±1 in f32 (within half an ulp).
const TANH_ONE: f32 = 9.0;

/// `tanh x`, within 6 ulps (XLA's own is within 4.1): an odd rational function,
/// one division and no branch. Tiny `x` (and ±0) come out exactly (`P(0) = Q(0) = 1`).
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let a = x.clamp(-TANH_ONE, TANH_ONE);
    let z = a * a;
    let y = a * poly(z, TANH_P) / poly(z, TANH_Q);
    // NaN fails the comparison and stays NaN through the clamp and the arithmetic.
    if x.abs() > TANH_ONE {
        1.0f32.copysign(x)
    } else {
        y
    }
}

/// `1 / (1 + e^-x)`, within 2.5 ulps: `e^x / (1 + e^x)` below 0, where `e^-x` would
/// overflow before the result leaves f32's subnormals.
#[inline(always)]
pub fn logistic(x: f32) -> f32 {
    let e = exp(-x.abs());
    if x < 0.0 {
        e / (1.0 + e)
    } else {
        1.0 / (1.0 + e)
    }
}

/// `erf x / x` on `|x| <= 3.92` is `ERF_P(x^2) / ERF_Q(x^2)` (fitted by
/// tools/fit_rational.py, relative error 2e-8 before rounding to f32).
const ERF_P: [f32; 6] = [
    std::f32::consts::FRAC_2_SQRT_PI,
    0.189_878_45,
    0.052_679_166,
    0.003_742_794,
    0.000_284_338_46,
    2.053_896_2e-6,
];
const ERF_Q: [f32; 6] = [
    1.0,
    0.501_608_3,
    0.113_890_94,
    0.014_923_914,
    0.001_156_921_5,
    3.810_236_7e-5,
];
/// Beyond this magnitude erf rounds to ±1 in f32.
const ERF_ONE: f32 = 3.92;

/// `erf x`, within 7 ulps (XLA's own is within 4.6): an odd rational function, one
/// division and no branch.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let a = x.clamp(-ERF_ONE, ERF_ONE);
    let z = a * a;
    let y = a * poly(z, ERF_P) / poly(z, ERF_Q);
    if x.abs() > ERF_ONE {
        1.0f32.copysign(x)
    } else {
        y
    }
}

/// `sin(r) - r`'s factor over `r^3` on `|r| <= pi/4`, in `r^2`.
const SIN_S: [f32; 4] = [
    -0.166_666_67,
    0.008_333_329,
    -0.000_198_393_13,
    2.718_122e-6,
];
/// `cos(r) - 1 + r^2/2`'s factor over `r^4` on `|r| <= pi/4`, in `r^2`.
const COS_C: [f32; 3] = [0.041_666_646, -0.001_388_731_6, 2.443_315_3e-5];
/// pi/2 in three parts, the first two with 11 significant bits so that `k * part` is
/// exact for the `k` of [`SIN_COS_LIMIT`].
const PIO2_1: f32 = 1.570_312_5;
const PIO2_2: f32 = 0.000_483_751_3;
const PIO2_3: f32 = 7.549_79e-8;
/// Beyond this magnitude the reduction by pi/2 loses digits: libm's reduction is used.
pub const SIN_COS_LIMIT: f32 = 4096.0;

/// `(sin r, cos r, quadrant)` of `x = k pi/2 + r`.
#[inline(always)]
fn sin_cos_reduced(x: f32) -> (f32, f32, i32) {
    let (k, ki) = round_split(x.clamp(-SIN_COS_LIMIT, SIN_COS_LIMIT) * std::f32::consts::FRAC_2_PI);
    let r = ((x - k * PIO2_1) - k * PIO2_2) - k * PIO2_3;
    let z = r * r;
    let s = r + r * z * poly(z, SIN_S);
    let c = 1.0 - 0.5 * z + z * z * poly(z, COS_C);
    (s, c, ki & 3)
}

/// `sin x`, within 2 ulps for `|x| <= SIN_COS_LIMIT` (callers take libm's beyond).
#[inline(always)]
pub fn sin(x: f32) -> f32 {
    let (s, c, q) = sin_cos_reduced(x);
    let v = if q & 1 == 0 { s } else { c };
    let y = if q & 2 == 0 { v } else { -v };
    if x == 0.0 {
        x
    } else {
        y
    }
}

/// `cos x`, within 2 ulps for `|x| <= SIN_COS_LIMIT` (callers take libm's beyond).
#[inline(always)]
pub fn cos(x: f32) -> f32 {
    let (s, c, q) = sin_cos_reduced(x);
    let v = if q & 1 == 0 { c } else { s };
    if (q + 1) & 2 == 0 {
        v
    } else {
        -v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in ulps of f32 between `got` and the exact `want` (f64).
    fn ulps(got: f32, want: f64) -> f64 {
        if want.is_nan() {
            return if got.is_nan() { 0.0 } else { f64::INFINITY };
        }
        if got as f64 == want {
            return 0.0;
        }
        let w = want as f32;
        if w.is_infinite() || got.is_infinite() {
            return if got == w { 0.0 } else { f64::INFINITY };
        }
        // One ulp of the f32 nearest the exact value (subnormals: the smallest).
        let ulp = (f32::from_bits(w.abs().to_bits() + 1) - w.abs()).max(f32::from_bits(1)) as f64;
        (got as f64 - want).abs() / ulp
    }

    /// Samples: every 997th f32 bit pattern of one sign in `lo..hi`, plus the edges.
    fn samples(lo: f32, hi: f32) -> Vec<f32> {
        let mut v = Vec::new();
        for sign in [1.0f32, -1.0] {
            let (a, b) = (lo.to_bits(), hi.to_bits());
            let mut bits = a;
            while bits < b {
                v.push(sign * f32::from_bits(bits));
                bits += 997;
            }
        }
        v
    }

    fn worst(f: fn(f32) -> f32, exact: fn(f64) -> f64, xs: &[f32]) -> (f64, f32) {
        xs.iter()
            .map(|&x| (ulps(f(x), exact(x as f64)), x))
            .fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a })
    }

    #[test]
    fn each_function_is_within_its_stated_ulps_over_f32s_range() {
        let all = samples(f32::from_bits(1), f32::MAX);
        type Case<'a> = (&'a str, fn(f32) -> f32, fn(f64) -> f64, f64, &'a [f32]);
        let cases: [Case; 9] = [
            ("exp", exp, f64::exp, 1.5, &all),
            ("exp2", exp2, f64::exp2, 1.5, &all),
            ("expm1", expm1, f64::exp_m1, 2.5, &all),
            ("ln", ln, f64::ln, 1.5, &all),
            ("ln_1p", ln_1p, f64::ln_1p, 3.0, &all),
            ("tanh", tanh, f64::tanh, 6.0, &all),
            (
                "logistic",
                logistic,
                |x| 1.0 / (1.0 + (-x).exp()),
                2.5,
                &all,
            ),
            ("erf", erf, libm::erf, 7.0, &all),
            (
                "sin",
                sin,
                f64::sin,
                2.0,
                &samples(f32::from_bits(1), SIN_COS_LIMIT),
            ),
        ];
        let mut bad = Vec::new();
        for (name, f, exact, bound, xs) in cases {
            let (u, at) = worst(f, exact, xs);
            eprintln!("{name}: {u:.2} ulps at {at:e} ({} samples)", xs.len());
            if u > bound {
                bad.push(format!("{name}: {u:.2} ulps at {at:e} (bound {bound})"));
            }
        }
        assert!(bad.is_empty(), "{bad:?}");
        let xs = samples(f32::from_bits(1), SIN_COS_LIMIT);
        let (u, at) = worst(cos, f64::cos, &xs);
        assert!(u <= 2.0, "cos: {u:.2} ulps at {at:e}");
    }

    #[test]
    fn special_values_are_ieees() {
        let inf = f32::INFINITY;
        assert_eq!(exp(inf), inf);
        assert_eq!(exp(-inf), 0.0);
        assert_eq!(exp2(-inf), 0.0);
        assert_eq!(expm1(-inf), -1.0);
        assert_eq!(expm1(inf), inf);
        assert_eq!(ln(0.0), -inf);
        assert_eq!(ln(-0.0), -inf);
        assert_eq!(ln(inf), inf);
        assert!(ln(-1.0).is_nan());
        assert_eq!(ln_1p(-1.0), -inf);
        assert_eq!(ln_1p(inf), inf);
        assert!(ln_1p(-2.0).is_nan());
        assert_eq!(tanh(inf), 1.0);
        assert_eq!(tanh(-inf), -1.0);
        assert_eq!(logistic(-inf), 0.0);
        assert_eq!(logistic(inf), 1.0);
        assert_eq!(erf(inf), 1.0);
        assert_eq!(erf(-inf), -1.0);
        for f in [exp, exp2, expm1, ln, ln_1p, tanh, logistic, erf, sin, cos] {
            assert!(f(f32::NAN).is_nan());
        }
        // Signed zeros stay where the function is odd.
        for f in [expm1, ln_1p, tanh, erf, sin] {
            assert_eq!(f(-0.0).to_bits(), (-0.0f32).to_bits());
        }
    }
}
