// The transcendental functions on f32 bits: exp, exp2, expm1, log, log1p, sqrt, rsqrt,
// tanh, logistic, sin, cos, erf, pow, atan2, for compute_math.wgsl (one op a dispatch)
// and the fused regions' generated shaders. They are this file's own (range reduction
// plus polynomials whose coefficients are Taylor's or fitted here), not WGSL's builtins,
// whose accuracy the spec leaves loose (sin and cos only on [-pi, pi], atan2 to 4096
// ulp); only sqrt and inverseSqrt are builtins. They use f32 +, -, * (exactly rounded
// in WGSL) and division (2.5 ulp); subnormal inputs are rescaled from their bits. The
// bounds measured against the CPU twin are tabled in the README. They use
// elementwise_ops.wgsl's helpers.

const PI: f32 = 3.14159265358979323846;
const PI_2: f32 = 1.57079632679489661923;
const PI_4: f32 = 0.78539816339744830962;
const PI_6: f32 = 0.52359877559829887308;
const PI3_4: f32 = 2.35619449019234492885;
const LN2: f32 = 0.69314718055994530942;
// ln 2 = LN2_HI + LN2_LO, LN2_HI with 15 significant bits (k * LN2_HI exact for |k| < 2^9).
const LN2_HI: f32 = 0.693145751953125;
const LN2_LO: f32 = 1.428606765330187e-06;
const LOG2E: f32 = 1.44269504088896340736;
const SQRT2: f32 = 1.41421356237309504880;
const SQRT3: f32 = 1.73205080756887729353;
const TAN_PI_12: f32 = 0.26794919243112270647;
// pi/2 in four pieces of at most 8 significant bits (k * piece exact for |k| < 2^16).
const PIO2_1: f32 = 1.5703125;
const PIO2_2: f32 = 0.0004825592041015625;
const PIO2_3: f32 = 1.2665987014770508e-06;
const PIO2_4: f32 = 9.92093629470503e-10;

// 2^k for -126 <= k <= 127.
fn pow2(k: i32) -> f32 {
    return bitcast<f32>(u32(k + 127) << 23u);
}

// p * 2^k in two exact steps (a result below 2^-126 may flush to zero on a GPU that
// flushes subnormals).
fn scale2(p: f32, k: i32) -> f32 {
    let k1 = clamp(k, -126, 127);
    return p * pow2(k1) * pow2(clamp(k - k1, -126, 127));
}

// A positive finite nonzero f32 `b` as m * 2^e with m in [sqrt(1/2), sqrt(2)).
struct Split {
    m: f32,
    e: i32,
}

fn split_pos(b: u32) -> Split {
    var e = i32((b >> 23u) & 0xffu) - 127;
    var mant = b & 0x7fffffu;
    if (((b >> 23u) & 0xffu) == 0u) {
        let lz = countLeadingZeros(mant) - 8u;
        mant = (mant << lz) & 0x7fffffu;
        e = -126 - i32(lz);
    }
    var m = bitcast<f32>(0x3f800000u | mant);
    if (m > SQRT2) {
        m = m * 0.5;
        e = e + 1;
    }
    return Split(m, e);
}

// e^r for |r| <= 0.35: Taylor to r^8 (truncation below 2^-30 relative).
fn exp_poly(r: f32) -> f32 {
    let q = 1.0 / 5040.0 + r * (1.0 / 40320.0);
    let p = 1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * q));
    return 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6.0 + r * p)));
}

fn exp_f(b: u32) -> f32 {
    let x = bitcast<f32>(b);
    if (f_isnan(b)) {
        return x;
    }
    if (x > 88.72283935546875) {
        return bitcast<f32>(F32_INF);
    }
    if (x < -103.972084) {
        return 0.0;
    }
    let k = round(x * LOG2E);
    let r = (x - k * LN2_HI) - k * LN2_LO;
    return scale2(exp_poly(r), i32(k));
}

fn exp2_f(b: u32) -> f32 {
    let x = bitcast<f32>(b);
    if (f_isnan(b)) {
        return x;
    }
    if (x >= 128.0) {
        return bitcast<f32>(F32_INF);
    }
    if (x < -150.0) {
        return 0.0;
    }
    let k = round(x);
    return scale2(exp_poly((x - k) * LN2), i32(k));
}

fn expm1_f(b: u32) -> f32 {
    let x = bitcast<f32>(b);
    let a = f32_abs_bits(b);
    if (f_isnan(b) || a < 0x33800000u) {
        // NaN, or |x| < 2^-24: e^x - 1 rounds to x.
        return x;
    }
    if (x > 88.72283935546875) {
        return bitcast<f32>(F32_INF);
    }
    if (x < -17.5) {
        return -1.0;
    }
    if (a < 0x3f800000u) {
        // |x| < 1: Taylor to x^13 (truncation below 2^-36 relative).
        let q = 1.0 / 362880.0 + x * (1.0 / 3628800.0 + x * (1.0 / 39916800.0 + x * (1.0 / 479001600.0 + x * (1.0 / 6227020800.0))));
        let p = 1.0 / 24.0 + x * (1.0 / 120.0 + x * (1.0 / 720.0 + x * (1.0 / 5040.0 + x * (1.0 / 40320.0 + x * q))));
        return x * (1.0 + x * (0.5 + x * (1.0 / 6.0 + x * p)));
    }
    return exp_f(b) - 1.0;
}

// ln(1 + f) for f in [sqrt(1/2) - 1, sqrt(2) - 1], plus e * LN2_LO (fdlibm's form:
// the quotient s only enters a correction term).
fn log_kernel(f: f32, e: f32) -> f32 {
    let s = f / (2.0 + f);
    let z = s * s;
    let r = z * (2.0 / 3.0 + z * (2.0 / 5.0 + z * (2.0 / 7.0 + z * (2.0 / 9.0 + z * (2.0 / 11.0)))));
    let hfsq = 0.5 * f * f;
    return f - (hfsq - (s * (hfsq + r) + e * LN2_LO));
}

fn log_f(b: u32) -> f32 {
    let a = f32_abs_bits(b);
    if (f_isnan(b) || ((b & F32_SIGN) != 0u && a != 0u)) {
        return bitcast<f32>(F32_NAN);
    }
    if (a == 0u) {
        return bitcast<f32>(F32_INF | F32_SIGN);
    }
    if (a == F32_INF) {
        return bitcast<f32>(F32_INF);
    }
    let sp = split_pos(b);
    let e = f32(sp.e);
    return e * LN2_HI + log_kernel(sp.m - 1.0, e);
}

fn log1p_f(b: u32) -> f32 {
    let x = bitcast<f32>(b);
    let a = f32_abs_bits(b);
    if (f_isnan(b) || a < 0x33800000u) {
        // NaN, or |x| < 2^-24: ln(1 + x) rounds to x.
        return x;
    }
    if (x < -1.0) {
        return bitcast<f32>(F32_NAN);
    }
    if (x == -1.0) {
        return bitcast<f32>(F32_INF | F32_SIGN);
    }
    if (a == F32_INF) {
        return x;
    }
    if (x > -0.29289321881 && x < 0.41421356237) {
        return log_kernel(x, 0.0);
    }
    // 1 + x rounds; c is its exact rounding error.
    let u = 1.0 + x;
    let c = x - (u - 1.0);
    return log_f(bitcast<u32>(u)) + c / u;
}

// sin and cos of r, |r| <= pi/4 (Taylor; truncation below 2^-28 relative).
fn sin_poly(r: f32) -> f32 {
    let z = r * r;
    return r + r * z * (-1.0 / 6.0 + z * (1.0 / 120.0 + z * (-1.0 / 5040.0 + z * (1.0 / 362880.0 + z * (-1.0 / 39916800.0)))));
}

fn cos_poly(r: f32) -> f32 {
    let z = r * r;
    return 1.0 - 0.5 * z + z * z * (1.0 / 24.0 + z * (-1.0 / 720.0 + z * (1.0 / 40320.0 + z * (-1.0 / 3628800.0 + z * (1.0 / 479001600.0)))));
}

// sin (COS false) or cos of x: x = k pi/2 + r with pi/2 in four exact pieces (exact
// for |k| < 2^16, |x| < 1e5), then the quadrant's polynomial.
fn sincos_f(b: u32, cos: bool) -> f32 {
    let x = bitcast<f32>(b);
    let a = f32_abs_bits(b);
    if (a >= F32_INF) {
        return bitcast<f32>(F32_NAN);
    }
    if (a < 0x39800000u) {
        // |x| < 2^-12: sin x rounds to x, cos x to 1.
        return select(x, 1.0, cos);
    }
    let k = round(x * (2.0 / PI));
    let r = (((x - k * PIO2_1) - k * PIO2_2) - k * PIO2_3) - k * PIO2_4;
    var q = u32(i32(k) & 3);
    if (cos) {
        q = (q + 1u) & 3u;
    }
    if (q == 0u) {
        return sin_poly(r);
    }
    if (q == 1u) {
        return cos_poly(r);
    }
    if (q == 2u) {
        return -sin_poly(r);
    }
    return -cos_poly(r);
}

// atan of t >= 0 (t may be inf): 1/t above 1, then tan(pi/6) shifts below tan(pi/12),
// then Taylor to t^15.
fn atan_pos(t: f32) -> f32 {
    var x = t;
    let inv = x > 1.0;
    if (inv) {
        x = 1.0 / x;
    }
    var off = 0.0;
    if (x > TAN_PI_12) {
        x = (x * SQRT3 - 1.0) / (x + SQRT3);
        off = PI_6;
    }
    let z = x * x;
    let p = -1.0 / 3.0 + z * (1.0 / 5.0 + z * (-1.0 / 7.0 + z * (1.0 / 9.0 + z * (-1.0 / 11.0 + z * (1.0 / 13.0 + z * (-1.0 / 15.0))))));
    var r = off + (x + x * z * p);
    if (inv) {
        r = PI_2 - r;
    }
    return r;
}

fn atan2_f(yb: u32, xb: u32) -> f32 {
    if (f_isnan(yb) || f_isnan(xb)) {
        return bitcast<f32>(F32_NAN);
    }
    let ay = f32_abs_bits(yb);
    let ax = f32_abs_bits(xb);
    let x_neg = (xb & F32_SIGN) != 0u;
    if (ay == 0u) {
        // atan2(±0, +x or +0) = ±0; atan2(±0, -x or -0) = ±pi.
        return select(bitcast<f32>(yb), copysign_f(PI, yb), x_neg);
    }
    if (ax == 0u) {
        return copysign_f(PI_2, yb);
    }
    if (ax == F32_INF) {
        if (ay == F32_INF) {
            return copysign_f(select(PI_4, PI3_4, x_neg), yb);
        }
        return copysign_f(select(0.0, PI, x_neg), yb);
    }
    if (ay == F32_INF) {
        return copysign_f(PI_2, yb);
    }
    var a = atan_pos(div_f(ay, ax));
    if (x_neg) {
        a = PI - a;
    }
    return copysign_f(a, yb);
}

// erf: Taylor to x^23 below 1; above, 1 - e^(-x^2) g(x) with g = erfcx fitted by a
// degree-12 Chebyshev polynomial on [1, 3.8325] (relative error 7e-9); ±1 beyond.
fn erf_f(b: u32) -> f32 {
    let x = bitcast<f32>(b);
    if (f_isnan(b)) {
        return x;
    }
    let a = bitcast<f32>(f32_abs_bits(b));
    if (a < 1.0) {
        let z = x * x;
        var p = -1.2290555240213052e-09;
        p = 1.4807192805221803e-08 + z * p;
        p = -1.6365844146548625e-07 + z * p;
        p = 1.6462114444948384e-06 + z * p;
        p = -1.4925650248187594e-05 + z * p;
        p = 0.00012055332626914605 + z * p;
        p = -0.0008548327023163438 + z * p;
        p = 0.005223977845162153 + z * p;
        p = -0.02686617150902748 + z * p;
        p = 0.11283791810274124 + z * p;
        p = -0.37612637877464294 + z * p;
        return x * 1.128379225730896 + x * z * p;
    }
    if (a >= 3.832506856900711) {
        return copysign_f(1.0, b);
    }
    let t = (a - 2.4162533283233643) * 0.7060883045196533;
    var g = 8.423166036664043e-06;
    g = -2.4225069864769466e-05 + t * g;
    g = 4.0840604924596846e-05 + t * g;
    g = -0.00010914708400378004 + t * g;
    g = 0.0003180303901899606 + t * g;
    g = -0.000814859289675951 + t * g;
    g = 0.002007697243243456 + t * g;
    g = -0.004834520630538464 + t * g;
    g = 0.011255521327257156 + t * g;
    g = -0.025231286883354187 + t * g;
    g = 0.05426940321922302 + t * g;
    g = -0.11145719140768051 + t * g;
    g = 0.21721242368221283 + t * g;
    let erfc = exp_f(bitcast<u32>(-(a * a))) * g;
    return copysign_f(1.0 - erfc, b);
}

fn tanh_f(b: u32) -> f32 {
    let x = bitcast<f32>(b);
    let a = f32_abs_bits(b);
    if (f_isnan(b) || a < 0x39800000u) {
        // NaN, or |x| < 2^-12: tanh x rounds to x.
        return x;
    }
    if (a >= 0x41119999u) {
        // |x| >= 9.1: tanh rounds to ±1.
        return copysign_f(1.0, b);
    }
    let e = expm1_f(bitcast<u32>(2.0 * bitcast<f32>(a)));
    return copysign_f(e / (e + 2.0), b);
}

// |x|^y for positive finite x and finite nonzero y: 2^(y log2 x) with y·e formed
// exactly (y split into halves of 12 significant bits, e has at most 8), so the error
// grows with |y·log2 m| (m in [sqrt(1/2), sqrt(2))) only.
fn pow_pos(xb: u32, y: f32) -> f32 {
    let sp = split_pos(xb);
    let l = log_kernel(sp.m - 1.0, 0.0) * LOG2E;
    let ef = f32(sp.e);
    let y_hi = bitcast<f32>(bitcast<u32>(y) & 0xfffff000u);
    let y_lo = y - y_hi;
    let p = y_hi * ef;
    let rough = p + (y_lo * ef + y * l);
    if (rough > 129.0) {
        return bitcast<f32>(F32_INF);
    }
    if (rough < -151.0) {
        return 0.0;
    }
    let n0 = round(p);
    var t = (p - n0) + (y_lo * ef + y * l);
    let k = round(t);
    t = t - k;
    return scale2(exp_poly(t * LN2), i32(n0 + k));
}

// C99's pow, special cases first.
fn pow_f(xb: u32, yb: u32) -> f32 {
    let x = bitcast<f32>(xb);
    let y = bitcast<f32>(yb);
    let ax = f32_abs_bits(xb);
    let ay = f32_abs_bits(yb);
    if (ay == 0u || xb == 0x3f800000u) {
        return 1.0;
    }
    if (f_isnan(xb) || f_isnan(yb)) {
        return bitcast<f32>(F32_NAN);
    }
    let y_int = ay >= 0x4b800000u || y == trunc(y);
    let y_odd = y_int && ay < 0x4b800000u && (i32(y) & 1) != 0;
    let y_neg = (yb & F32_SIGN) != 0u;
    if (ay == F32_INF) {
        if (ax == 0x3f800000u) {
            return 1.0;
        }
        return select(bitcast<f32>(F32_INF), 0.0, (ax < 0x3f800000u) != y_neg);
    }
    if (ax == 0u) {
        if (y_neg) {
            return select(bitcast<f32>(F32_INF), copysign_f(bitcast<f32>(F32_INF), xb), y_odd);
        }
        return select(0.0, x, y_odd);
    }
    if (ax == F32_INF) {
        let mag = select(bitcast<f32>(F32_INF), 0.0, y_neg);
        if ((xb & F32_SIGN) != 0u && y_odd) {
            return -mag;
        }
        return mag;
    }
    if ((xb & F32_SIGN) != 0u) {
        if (!y_int) {
            return bitcast<f32>(F32_NAN);
        }
        let r = pow_pos(ax, y);
        return select(r, -r, y_odd);
    }
    return pow_pos(xb, y);
}

fn sqrt_f(b: u32) -> f32 {
    if (is_sub(b) && (b & F32_SIGN) == 0u) {
        return sqrt(unsub64(b)) * 2.3283064365386963e-10; // 2^-32
    }
    let a = f32_abs_bits(b);
    if ((b & F32_SIGN) != 0u && a != 0u && !f_isnan(b)) {
        return bitcast<f32>(F32_NAN);
    }
    return sqrt(bitcast<f32>(b));
}

fn rsqrt_f(b: u32) -> f32 {
    let a = f32_abs_bits(b);
    if (f_isnan(b)) {
        return bitcast<f32>(b);
    }
    if (a == 0u) {
        return copysign_f(bitcast<f32>(F32_INF), b);
    }
    if ((b & F32_SIGN) != 0u) {
        return bitcast<f32>(F32_NAN);
    }
    if (is_sub(b)) {
        return inverseSqrt(unsub64(b)) * 4294967296.0; // 2^32
    }
    if (a == F32_INF) {
        return 0.0;
    }
    return inverseSqrt(bitcast<f32>(b));
}

// A transcendental function of f32 bits, as f32 bits.
fn math_unary(op: u32, b: u32) -> u32 {
    switch (op) {
        case EW_EXP: {
            return bitcast<u32>(exp_f(b));
        }
        case EW_EXP2: {
            return bitcast<u32>(exp2_f(b));
        }
        case EW_EXPM1: {
            return bitcast<u32>(expm1_f(b));
        }
        case EW_LOG: {
            return bitcast<u32>(log_f(b));
        }
        case EW_LOG1P: {
            return bitcast<u32>(log1p_f(b));
        }
        case EW_SQRT: {
            return bitcast<u32>(sqrt_f(b));
        }
        case EW_RSQRT: {
            return bitcast<u32>(rsqrt_f(b));
        }
        case EW_TANH: {
            return bitcast<u32>(tanh_f(b));
        }
        case EW_LOGISTIC: {
            // e^-|x| never overflows: e / (1 + e) below 0 keeps the small results.
            let e = exp_f((b & ~F32_SIGN) ^ F32_SIGN);
            let d = bitcast<u32>(1.0 + e);
            if ((b & F32_SIGN) != 0u) {
                return bitcast<u32>(div_f(bitcast<u32>(e), d));
            }
            return bitcast<u32>(div_f(0x3f800000u, d));
        }
        case EW_SIN: {
            return bitcast<u32>(sincos_f(b, false));
        }
        case EW_COS: {
            return bitcast<u32>(sincos_f(b, true));
        }
        case EW_ERF: {
            return bitcast<u32>(erf_f(b));
        }
        default: {
            return b;
        }
    }
}

fn math_binary(op: u32, a: u32, b: u32) -> u32 {
    if (op == EW_POW) {
        return bitcast<u32>(pow_f(a, b));
    }
    return bitcast<u32>(atan2_f(a, b));
}
