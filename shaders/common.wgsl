// Shared by every shader: prepended (after the constants generated from
// src/device_sim/gpu/codes.rs) to each module's source, since WGSL has no #include.
// Elements are u32 words, bit-cast per dtype, so one binding type serves every dtype.

// One window of one op: element offsets into its bindings, elements, fill bits.
struct Params {
    src_off: u32,
    dst_off: u32,
    n: u32,
    value: u32,
}

// The reduction rule, as the CPU executor applies it (i32 sums wrap).
fn combine_f32(op: u32, a: f32, b: f32) -> f32 {
    if (op == REDUCE_MAX) {
        return max(a, b);
    }
    if (op == REDUCE_MIN) {
        return min(a, b);
    }
    return a + b;
}

fn combine_i32(op: u32, a: i32, b: i32) -> i32 {
    if (op == REDUCE_MAX) {
        return max(a, b);
    }
    if (op == REDUCE_MIN) {
        return min(a, b);
    }
    return a + b;
}

// True when `w` holds an f32 NaN, tested on its bits (WGSL lets a compiler assume that
// floats hold no NaN, so `x != x` may be folded away).
fn is_nan_f32(w: u32) -> bool {
    return (w & 0x7fffffffu) > 0x7f800000u;
}

// `op` on two words holding `dtype` (DTYPE_F32 or DTYPE_I32) elements. Float max and
// min propagate NaN as XLA's do (WGSL's may return either operand): the first operand
// that is one, as the CPU executor.
fn combine_word(op: u32, dtype: u32, a: u32, b: u32) -> u32 {
    if (dtype == DTYPE_I32) {
        return bitcast<u32>(combine_i32(op, bitcast<i32>(a), bitcast<i32>(b)));
    }
    if (op != REDUCE_SUM) {
        if (is_nan_f32(a)) {
            return a;
        }
        if (is_nan_f32(b)) {
            return b;
        }
    }
    return bitcast<u32>(combine_f32(op, bitcast<f32>(a), bitcast<f32>(b)));
}

// Grid-stride loops: a dispatch is capped at the per-dimension workgroup limit, so an
// invocation takes every grid_stride(num_workgroups)-th element from its global index.
fn grid_stride(nwg: vec3<u32>) -> u32 {
    return nwg.x * WORKGROUP;
}

// ---- Element types --------------------------------------------------------------
// Every element lives in a u32: f32 bits, an i32 (8-bit integers sign- or zero-extended,
// bools 0 or 1), or a 16-bit float in the low half (two per word in memory, element 2k
// in the low half of word k). Compute shaders widen an element to the f32 bits
// (floats) or i32 bits (integers, bools) they compute in, and narrow the result once.
// Every conversion and order is integer arithmetic: nothing relies on f32 subnormals,
// which a GPU may flush.

fn is16(d: u32) -> bool {
    return d == DTYPE_F16 || d == DTYPE_BF16;
}

fn is_float(d: u32) -> bool {
    return d == DTYPE_F32 || is16(d);
}

// The 16-bit element `i` of packed memory, given the word holding it.
fn half_of(word: u32, i: u32) -> u32 {
    return (word >> ((i & 1u) * 16u)) & 0xffffu;
}

// `word` with 16-bit element `i`'s half replaced by `h`.
fn with_half(word: u32, i: u32, h: u32) -> u32 {
    let shift = (i & 1u) * 16u;
    return (word & ~(0xffffu << shift)) | ((h & 0xffffu) << shift);
}

// round(v / 2^s), ties to even.
fn shift_rne(v: u32, s: u32) -> u32 {
    if (s == 0u) {
        return v;
    }
    if (s >= 32u) {
        return 0u;
    }
    let q = v >> s;
    let r = v & ((1u << s) - 1u);
    let half = 1u << (s - 1u);
    if (r > half || (r == half && (q & 1u) == 1u)) {
        return q + 1u;
    }
    return q;
}

fn f16_to_f32(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) {
        // Zero or subnormal: m * 2^-24, a normal f32 (or zero).
        return bitcast<f32>(bitcast<u32>(ldexp(f32(m), -24)) | sign);
    }
    if (e == 31u) {
        if (m == 0u) {
            return bitcast<f32>(sign | 0x7f800000u);
        }
        // A NaN keeps its payload and is quiet (as the CPU's `half` widens it).
        return bitcast<f32>(sign | 0x7fc00000u | (m << 13u));
    }
    return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u));
}

fn f32_to_f16(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    let sign = (b >> 16u) & 0x8000u;
    let e = (b >> 23u) & 0xffu;
    let m = b & 0x7fffffu;
    if (e == 255u) {
        if (m == 0u) {
            return sign | 0x7c00u;
        }
        return sign | 0x7e00u | (m >> 13u);
    }
    if (e < 102u) {
        // Below 2^-25 (and every f32 subnormal): rounds to zero.
        return sign;
    }
    let mant = m | 0x800000u;
    if (e >= 143u) {
        return sign | 0x7c00u;
    }
    if (e >= 113u) {
        // A normal f16; a carry out of the significand bumps the exponent (to inf at most).
        return sign | (((e - 113u) << 10u) + shift_rne(mant, 13u));
    }
    // A subnormal f16, in units of 2^-24.
    return sign | shift_rne(mant, 126u - e);
}

fn bf16_to_f32(h: u32) -> f32 {
    if ((h & 0x7fffu) > 0x7f80u) {
        return bitcast<f32>((h | 0x40u) << 16u);
    }
    return bitcast<f32>(h << 16u);
}

fn f32_to_bf16(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return (b >> 16u) | 0x40u;
    }
    if ((b & 0x8000u) != 0u && (b & 0x17fffu) != 0u) {
        return (b >> 16u) + 1u;
    }
    return b >> 16u;
}

// An element of dtype `d` as the f32 bits or i32 bits it computes in.
fn widen(d: u32, e: u32) -> u32 {
    if (d == DTYPE_F16) {
        return bitcast<u32>(f16_to_f32(e));
    }
    if (d == DTYPE_BF16) {
        return bitcast<u32>(bf16_to_f32(e));
    }
    return e;
}

// A result (f32 bits for a float dtype, i32 bits otherwise) as an element of `d`:
// floats rounded to nearest even, integers wrapped to their width.
fn narrow(d: u32, v: u32) -> u32 {
    if (d == DTYPE_F16) {
        return f32_to_f16(bitcast<f32>(v));
    }
    if (d == DTYPE_BF16) {
        return f32_to_bf16(bitcast<f32>(v));
    }
    if (d == DTYPE_I8) {
        return bitcast<u32>((bitcast<i32>(v) << 24u) >> 24u);
    }
    if (d == DTYPE_U8) {
        return v & 0xffu;
    }
    if (d == DTYPE_BOOL) {
        return v & 1u;
    }
    return v;
}

// The bits of integer `v` in a float format with `mant` fraction bits and exponent
// `bias`, rounded once to nearest even (a carry may reach the exponent).
fn int_to_float(v: i32, mant: u32, bias: u32, sign_bit: u32) -> u32 {
    if (v == 0) {
        return 0u;
    }
    let neg = v < 0;
    let mag = select(bitcast<u32>(v), 0u - bitcast<u32>(v), neg);
    let e = 31u - countLeadingZeros(mag);
    var q: u32;
    if (e <= mant) {
        q = mag << (mant - e);
    } else {
        q = shift_rne(mag, e - mant);
    }
    let bits = ((e + bias) << mant) + (q - (1u << mant));
    return select(0u, 1u << sign_bit, neg) | bits;
}

// i32 to f32 bits, rounded to nearest even.
fn i32_to_f32_bits(v: i32) -> u32 {
    return int_to_float(v, 23u, 127u, 31u);
}

// ---- f32 bits --------------------------------------------------------------------

const F32_NAN: u32 = 0x7fc00000u;
const F32_INF: u32 = 0x7f800000u;
const F32_SIGN: u32 = 0x80000000u;

fn f_isnan(b: u32) -> bool {
    return (b & 0x7fffffffu) > F32_INF;
}

// The order of f32 bits as an i32: numbers and infinities by value, -0 == +0 (NaNs
// are handled before a key is used).
fn f_key(b: u32) -> i32 {
    let m = i32(b & 0x7fffffffu);
    return select(m, -m, (b & F32_SIGN) != 0u);
}

// XLA's max and min: NaN if either is; +0 above -0.
fn fmax_bits(a: u32, b: u32) -> u32 {
    if (f_isnan(a) || f_isnan(b)) {
        return F32_NAN;
    }
    let ka = f_key(a);
    let kb = f_key(b);
    if (ka == kb) {
        return a & b;
    }
    return select(a, b, kb > ka);
}

fn fmin_bits(a: u32, b: u32) -> u32 {
    if (f_isnan(a) || f_isnan(b)) {
        return F32_NAN;
    }
    let ka = f_key(a);
    let kb = f_key(b);
    if (ka == kb) {
        return a | b;
    }
    return select(a, b, kb < ka);
}

// Element `k` of a list of up to BOX_RANK numbers held in two vec4s.
fn dim_of(v: array<vec4<u32>, 2>, k: u32) -> u32 {
    return v[k >> 2u][k & 3u];
}
