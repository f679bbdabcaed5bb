// Elementwise compute ops: dst[i] = f(src0[i], src1[i], src2[i]) for i < n, each source
// read at its own element offset and step (0: a scalar broadcast over the others).
// OP is a code of codes.rs (EW_*), D0..D2 the sources' dtypes and DD the destination's,
// all pipeline-overridable so each variant compiles to its own straight-line code.
// A 16-bit destination is written one word per invocation (both halves computed, a
// half outside the window kept), so no two invocations write one word.
//
// Semantics are the CPU twin's (src/device_sim/cpu/compute.rs): floats compute in f32 and
// round once to their dtype, integers in i32 wrapping to their width. Sign, abs, neg,
// floor, ceil, the roundings, max, min, comparisons, selects, conversions and the
// integer ops are exact by construction (bit operations and exactly rounded f32
// arithmetic, never relying on subnormals); rem is an exact integer fmod. Division is
// WGSL's (2.5 ulp), with operands scaled so that bound holds over every f32. The
// transcendentals live in compute_math.wgsl, a module of its own (this file, then
// that one), so the exact ops' pipelines compile without them.

override OP: u32 = EW_ADD;
override D0: u32 = DTYPE_F32;
override D1: u32 = DTYPE_F32;
override D2: u32 = DTYPE_F32;
override DD: u32 = DTYPE_F32;

struct Ew {
    n: u32,
    dst_off: u32,
    // The exponent of EW_POWI.
    powi: i32,
    pad: u32,
    // Element offsets of src0..src2 in their bindings.
    off: vec4<u32>,
    // Element steps of src0..src2: 1, or 0 for a scalar.
    step: vec4<u32>,
}

@group(0) @binding(0) var<storage, read_write> s0: array<u32>;
@group(0) @binding(1) var<storage, read_write> s1: array<u32>;
@group(0) @binding(2) var<storage, read_write> s2: array<u32>;
@group(0) @binding(3) var<storage, read_write> dst: array<u32>;
@group(0) @binding(4) var<uniform> ew: Ew;

fn ld0(i: u32) -> u32 {
    let p = ew.off.x + i * ew.step.x;
    if (is16(D0)) {
        return half_of(s0[p >> 1u], p);
    }
    return s0[p];
}

fn ld1(i: u32) -> u32 {
    let p = ew.off.y + i * ew.step.y;
    if (is16(D1)) {
        return half_of(s1[p >> 1u], p);
    }
    return s1[p];
}

fn ld2(i: u32) -> u32 {
    let p = ew.off.z + i * ew.step.z;
    if (is16(D2)) {
        return half_of(s2[p >> 1u], p);
    }
    return s2[p];
}

// ---- f32 helpers ----------------------------------------------------------------

fn f32_abs_bits(b: u32) -> u32 {
    return b & 0x7fffffffu;
}

fn copysign_f(x: f32, s: u32) -> f32 {
    return bitcast<f32>((bitcast<u32>(x) & 0x7fffffffu) | (s & F32_SIGN));
}

// |x| * 2^64 for subnormal bits `b` (exact, a normal f32).
fn unsub64(b: u32) -> f32 {
    return f32(b & 0x7fffffu) * 2.5849394142282115e-26; // 2^-85
}

fn is_sub(b: u32) -> bool {
    return (b & 0x7f800000u) == 0u && (b & 0x7fffffu) != 0u;
}

// x / y with WGSL's 2.5-ulp division kept in range: subnormal operands and divisors
// beyond 2^126 are scaled by powers of two first (a subnormal quotient may flush).
fn div_f(a: u32, b: u32) -> f32 {
    var x = bitcast<f32>(a);
    var y = bitcast<f32>(b);
    var scale = 1.0;
    if (is_sub(a)) {
        x = copysign_f(unsub64(a), a);
        scale = scale * 5.421010862427522e-20; // 2^-64
    }
    if (is_sub(b)) {
        y = copysign_f(unsub64(b), b);
        scale = scale * 1.8446744073709552e19; // 2^64
    }
    if (f32_abs_bits(bitcast<u32>(y)) > 0x7e800000u && f32_abs_bits(bitcast<u32>(y)) < F32_INF) {
        y = y * 0.25;
        scale = scale * 0.25;
    }
    return (x / y) * scale;
}

// fmod: the exact remainder with the sign of x, by integer long division.
fn rem_f(a: u32, b: u32) -> u32 {
    let sx = a & F32_SIGN;
    let ax = f32_abs_bits(a);
    let ay = f32_abs_bits(b);
    if (ay == 0u || ay > F32_INF || ax >= F32_INF) {
        return F32_NAN;
    }
    if (ax < ay) {
        return a;
    }
    if (ax == ay) {
        return sx;
    }
    var ex = i32(ax >> 23u);
    var mx: u32;
    if (ex == 0) {
        let sh = countLeadingZeros(ax) - 8u;
        mx = ax << sh;
        ex = 1 - i32(sh);
    } else {
        mx = (ax & 0x7fffffu) | 0x800000u;
    }
    var ey = i32(ay >> 23u);
    var my: u32;
    if (ey == 0) {
        let sh = countLeadingZeros(ay) - 8u;
        my = ay << sh;
        ey = 1 - i32(sh);
    } else {
        my = (ay & 0x7fffffu) | 0x800000u;
    }
    for (; ex > ey; ex = ex - 1) {
        if (mx >= my) {
            mx = mx - my;
        }
        if (mx == 0u) {
            return sx;
        }
        mx = mx << 1u;
    }
    if (mx >= my) {
        mx = mx - my;
    }
    if (mx == 0u) {
        return sx;
    }
    for (; mx < 0x800000u; mx = mx << 1u) {
        ex = ex - 1;
    }
    if (ex > 0) {
        return sx | (u32(ex) << 23u) | (mx & 0x7fffffu);
    }
    return sx | (mx >> u32(1 - ex));
}

// floor, ceil and the two roundings, exact: |x| < 1 decided from the bits (so
// subnormals are never flushed), |x| >= 2^23, NaN and inf returned as they are.
fn round_like(op: u32, b: u32) -> u32 {
    let a = f32_abs_bits(b);
    let s = b & F32_SIGN;
    if (a >= 0x4b000000u) {
        return b;
    }
    if (a < 0x3f800000u) {
        let neg = s != 0u;
        let zero = a == 0u;
        if (op == EW_FLOOR) {
            return select(s, 0xbf800000u, neg && !zero);
        }
        if (op == EW_CEIL) {
            return select(s, 0x3f800000u, !neg && !zero);
        }
        if (op == EW_ROUND) {
            return select(s, s | 0x3f800000u, a >= 0x3f000000u);
        }
        return select(s, s | 0x3f800000u, a > 0x3f000000u);
    }
    let x = bitcast<f32>(b);
    if (op == EW_FLOOR) {
        return bitcast<u32>(floor(x));
    }
    if (op == EW_CEIL) {
        return bitcast<u32>(ceil(x));
    }
    if (op == EW_ROUND_EVEN) {
        return bitcast<u32>(round(x));
    }
    // Half away from zero: x - trunc(x) is exact for |x| >= 1.
    let t = trunc(x);
    let f = bitcast<f32>(f32_abs_bits(bitcast<u32>(x - t)));
    if (f >= 0.5) {
        return bitcast<u32>(t + copysign_f(1.0, b));
    }
    return bitcast<u32>(t);
}

// x^n by repeated squaring (as XLA expands integer_pow), then 1/x^|n| for n < 0.
fn powi_f(x: f32, n: i32) -> f32 {
    var acc = 1.0;
    var base = x;
    var e = u32(abs(n));
    if (n == i32(0x80000000u)) {
        e = 0x80000000u;
    }
    loop {
        if (e == 0u) {
            break;
        }
        if ((e & 1u) == 1u) {
            acc = acc * base;
        }
        e = e >> 1u;
        if (e > 0u) {
            base = base * base;
        }
    }
    if (n < 0) {
        return div_f(0x3f800000u, bitcast<u32>(acc));
    }
    return acc;
}

fn powi_i(x: i32, n: i32) -> i32 {
    var acc = 1;
    var base = x;
    var e = u32(max(n, 0));
    loop {
        if (e == 0u) {
            break;
        }
        if ((e & 1u) == 1u) {
            acc = acc * base;
        }
        e = e >> 1u;
        if (e > 0u) {
            base = base * base;
        }
    }
    return acc;
}

// ---- the ops --------------------------------------------------------------------

// An exact float unary function of f32 bits, as f32 bits (the transcendentals are
// compute_math.wgsl's).
fn unary_float(op: u32, b: u32) -> u32 {
    let x = bitcast<f32>(b);
    switch (op) {
        case EW_NEG: {
            return b ^ F32_SIGN;
        }
        case EW_ABS: {
            return f32_abs_bits(b);
        }
        case EW_SIGN: {
            if (f_isnan(b) || f32_abs_bits(b) == 0u) {
                return b;
            }
            return (b & F32_SIGN) | 0x3f800000u;
        }
        case EW_FLOOR, EW_CEIL, EW_ROUND, EW_ROUND_EVEN: {
            return round_like(op, b);
        }
        case EW_POWI: {
            return bitcast<u32>(powi_f(x, ew.powi));
        }
        default: {
            return b;
        }
    }
}

// An integer (or bool) unary function of i32 bits; the caller wraps to the width.
fn unary_int(op: u32, d: u32, b: u32) -> u32 {
    let x = bitcast<i32>(b);
    switch (op) {
        case EW_NEG: {
            return 0u - b;
        }
        case EW_ABS: {
            if (d == DTYPE_U8 || d == DTYPE_BOOL) {
                return b;
            }
            return select(b, 0u - b, x < 0);
        }
        case EW_SIGN: {
            return bitcast<u32>(select(select(0, 1, x > 0), -1, x < 0));
        }
        case EW_NOT: {
            return ~b;
        }
        case EW_POWI: {
            return bitcast<u32>(powi_i(x, ew.powi));
        }
        default: {
            return b;
        }
    }
}

fn binary_float(op: u32, a: u32, b: u32) -> u32 {
    let x = bitcast<f32>(a);
    let y = bitcast<f32>(b);
    switch (op) {
        case EW_ADD: {
            return bitcast<u32>(x + y);
        }
        case EW_SUB: {
            return bitcast<u32>(x - y);
        }
        case EW_MUL: {
            return bitcast<u32>(x * y);
        }
        case EW_DIV: {
            return bitcast<u32>(div_f(a, b));
        }
        case EW_REM: {
            return rem_f(a, b);
        }
        case EW_MAX: {
            return fmax_bits(a, b);
        }
        case EW_MIN: {
            return fmin_bits(a, b);
        }
        default: {
            return a;
        }
    }
}

// Bits of an integer dtype (8 for i8 and u8, 1 for bool, else 32).
fn int_bits(d: u32) -> u32 {
    if (d == DTYPE_I8 || d == DTYPE_U8) {
        return 8u;
    }
    if (d == DTYPE_BOOL) {
        return 1u;
    }
    return 32u;
}

fn binary_int(op: u32, d: u32, a: u32, b: u32) -> u32 {
    let x = bitcast<i32>(a);
    let y = bitcast<i32>(b);
    let bits = int_bits(d);
    switch (op) {
        case EW_ADD: {
            return a + b;
        }
        case EW_SUB: {
            return a - b;
        }
        case EW_MUL: {
            return bitcast<u32>(x * y);
        }
        case EW_DIV: {
            // XLA: division by zero gives all ones; MIN / -1 wraps to MIN.
            if (y == 0) {
                return 0xffffffffu;
            }
            if (y == -1) {
                return 0u - a;
            }
            return bitcast<u32>(x / y);
        }
        case EW_REM: {
            if (y == 0) {
                return a;
            }
            if (y == -1) {
                return 0u;
            }
            return bitcast<u32>(x % y);
        }
        case EW_MAX: {
            return bitcast<u32>(max(x, y));
        }
        case EW_MIN: {
            return bitcast<u32>(min(x, y));
        }
        case EW_AND: {
            return a & b;
        }
        case EW_OR: {
            return a | b;
        }
        case EW_XOR: {
            return a ^ b;
        }
        case EW_SHL: {
            if (b < bits) {
                return a << b;
            }
            return 0u;
        }
        case EW_SHRL: {
            let ua = a & (0xffffffffu >> (32u - bits));
            if (b < bits) {
                return ua >> b;
            }
            return 0u;
        }
        case EW_SHRA: {
            // The sign bit of the width fills in, signed or not (XLA's rule).
            let signed = (x << (32u - bits)) >> (32u - bits);
            return bitcast<u32>(signed >> min(min(b, bits - 1u), 31u));
        }
        default: {
            return a;
        }
    }
}

// A comparison of widened elements of dtype d, as 0 or 1.
fn compare(op: u32, d: u32, a: u32, b: u32) -> u32 {
    var lt: bool;
    var eq: bool;
    if (is_float(d)) {
        if (f_isnan(a) || f_isnan(b)) {
            // Unordered: only != holds.
            return select(0u, 1u, op == EW_NE);
        }
        lt = f_key(a) < f_key(b);
        eq = f_key(a) == f_key(b);
    } else {
        lt = bitcast<i32>(a) < bitcast<i32>(b);
        eq = a == b;
    }
    var r: bool;
    switch (op) {
        case EW_EQ: {
            r = eq;
        }
        case EW_NE: {
            r = !eq;
        }
        case EW_LT: {
            r = lt;
        }
        case EW_LE: {
            r = lt || eq;
        }
        case EW_GT: {
            r = !lt && !eq;
        }
        default: {
            r = !lt;
        }
    }
    return select(0u, 1u, r);
}

// f32 bits to an integer dtype: toward zero, saturating, NaN to 0.
fn float_to_int(b: u32, to: u32) -> u32 {
    if (f_isnan(b)) {
        return 0u;
    }
    let t = trunc(bitcast<f32>(b));
    if (to == DTYPE_I32) {
        if (t >= 2147483648.0) {
            return 0x7fffffffu;
        }
        if (t <= -2147483648.0) {
            return 0x80000000u;
        }
        return bitcast<u32>(i32(t));
    }
    var lo = -128.0;
    var hi = 127.0;
    if (to == DTYPE_U8) {
        lo = 0.0;
        hi = 255.0;
    }
    return narrow(to, bitcast<u32>(i32(clamp(t, lo, hi))));
}

// `lax.convert_element_type` of element e from dtype `src_t` to `to`.
fn convert(src_t: u32, to: u32, e: u32) -> u32 {
    if (src_t == to) {
        return e;
    }
    if (to == DTYPE_BOOL) {
        if (is_float(src_t)) {
            return select(0u, 1u, f32_abs_bits(widen(src_t, e)) != 0u);
        }
        return select(0u, 1u, e != 0u);
    }
    if (is_float(src_t)) {
        let f = widen(src_t, e);
        if (is_float(to)) {
            return narrow(to, f);
        }
        return float_to_int(f, to);
    }
    if (is_float(to)) {
        return narrow(to, i32_to_f32_bits(bitcast<i32>(e)));
    }
    return narrow(to, e);
}

// Element i of the destination, as its dtype's bits.
fn value(i: u32) -> u32 {
    if (OP == EW_SELECT) {
        return select(ld2(i), ld1(i), (ld0(i) & 1u) != 0u);
    }
    if (OP == EW_CONVERT) {
        return convert(D0, DD, ld0(i));
    }
    let a = widen(D0, ld0(i));
    if (OP >= EW_COMPARE) {
        return compare(OP, D0, a, widen(D1, ld1(i)));
    }
    if (OP >= EW_BINARY) {
        let b = widen(D1, ld1(i));
        if (is_float(D0)) {
            return narrow(DD, binary_float(OP, a, b));
        }
        return narrow(DD, binary_int(OP, D0, a, b));
    }
    if (is_float(D0)) {
        return narrow(DD, unary_float(OP, a));
    }
    return narrow(DD, unary_int(OP, D0, a));
}

@compute @workgroup_size(WORKGROUP)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let stride = grid_stride(nwg);
    if (!is16(DD)) {
        for (var i = gid.x; i < ew.n; i = i + stride) {
            dst[ew.dst_off + i] = value(i);
        }
        return;
    }
    let lo = ew.dst_off;
    let hi = ew.dst_off + ew.n;
    let first = lo >> 1u;
    let words = ((hi + 1u) >> 1u) - first;
    for (var k = gid.x; k < words; k = k + stride) {
        let w = first + k;
        var word = dst[w];
        for (var h = 0u; h < 2u; h = h + 1u) {
            let pos = 2u * w + h;
            if (pos >= lo && pos < hi) {
                word = with_half(word, pos, value(pos - lo));
            }
        }
        dst[w] = word;
    }
}
