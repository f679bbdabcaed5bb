// Ops on 16-bit elements (f16, bf16) packed two per u32 word, element 2k in the low
// half of word k. One invocation owns one destination word, so an op that starts or
// ends mid-word keeps the other half intact and no two invocations write one word.
// MODE: HALVES_COPY, HALVES_FILL (params.value) or HALVES_ACCUMULATE (OP).
// DTYPE: DTYPE_F16 or DTYPE_BF16. Offsets and n count halves from each binding's start.
// Rounding is to nearest even after every accumulate, bit for bit as the CPU executor
// (the `half` crate) does it; no step relies on f32 subnormals, which a GPU may flush.

override MODE: u32 = HALVES_COPY;
override OP: u32 = REDUCE_SUM;
override DTYPE: u32 = DTYPE_F16;

@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<uniform> params: Params;

fn src_half(i: u32) -> u32 {
    return (src[i >> 1u] >> ((i & 1u) * 16u)) & 0xffffu;
}

// round(v / 2^s), ties to even; v < 2^25.
fn shift_rne(v: u32, s: u32) -> u32 {
    if (s == 0u) {
        return v;
    }
    if (s >= 26u) {
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
        return bitcast<f32>(sign | 0x7f800000u | (m << 13u));
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

// A bf16 below 2^-117 (exponent field <= 9) as a signed count of 2^-133.
fn bf16_units(h: u32) -> i32 {
    let e = (h >> 7u) & 0xffu;
    var u = h & 0x7fu;
    if (e > 0u) {
        u = (u | 0x80u) << (e - 1u);
    }
    return select(i32(u), -i32(u), (h & 0x8000u) != 0u);
}

fn bf16_sum(a: u32, b: u32) -> u32 {
    if (((a >> 7u) & 0xffu) <= 9u && ((b >> 7u) & 0xffu) <= 9u) {
        // Both tiny: an exact integer sum, so subnormals never meet f32 arithmetic.
        let s = bf16_units(a) + bf16_units(b);
        if (s == 0) {
            return a & b & 0x8000u;
        }
        let sign = select(0u, 0x8000u, s < 0);
        let mag = u32(abs(s));
        if (mag < 256u) {
            return sign | mag;
        }
        let k = 24u - countLeadingZeros(mag);
        return sign | ((k << 7u) + shift_rne(mag, k));
    }
    // Otherwise any f32 subnormal operand is below half an ulp of the other and the
    // sum is a normal f32 or zero: flushing changes nothing.
    return f32_to_bf16(bitcast<f32>(a << 16u) + bitcast<f32>(b << 16u));
}

// max/min order: by value, -0 == +0, NaNs beyond the infinities (as the CPU's `order16`).
fn order16(h: u32) -> i32 {
    let m = i32(h & 0x7fffu);
    return select(m, -m, (h & 0x8000u) != 0u);
}

// True when 16-bit `h` is a NaN of this module's format (exponent all ones, fraction
// not zero).
fn is_nan16(h: u32) -> bool {
    return (h & 0x7fffu) > select(0x7c00u, 0x7f80u, DTYPE == DTYPE_BF16);
}

fn combine(a: u32, b: u32) -> u32 {
    // Max and min propagate NaN as XLA's do: the first operand that is one (as the CPU).
    if (OP != REDUCE_SUM) {
        if (is_nan16(a)) {
            return a;
        }
        if (is_nan16(b)) {
            return b;
        }
    }
    if (OP == REDUCE_MAX) {
        return select(a, b, order16(b) > order16(a));
    }
    if (OP == REDUCE_MIN) {
        return select(a, b, order16(b) < order16(a));
    }
    if (DTYPE == DTYPE_BF16) {
        return bf16_sum(a, b);
    }
    return f32_to_f16(f16_to_f32(a) + f16_to_f32(b));
}

@compute @workgroup_size(WORKGROUP)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let lo = params.dst_off;
    let hi = params.dst_off + params.n;
    let first = lo >> 1u;
    let words = ((hi + 1u) >> 1u) - first;
    let stride = grid_stride(nwg);
    for (var k = gid.x; k < words; k = k + stride) {
        let w = first + k;
        var word = dst[w];
        for (var h = 0u; h < 2u; h = h + 1u) {
            let pos = 2u * w + h;
            if (pos >= lo && pos < hi) {
                let shift = h * 16u;
                let old = (word >> shift) & 0xffffu;
                var v = params.value & 0xffffu;
                if (MODE == HALVES_COPY) {
                    v = src_half(params.src_off + pos - lo);
                } else if (MODE == HALVES_ACCUMULATE) {
                    v = combine(old, src_half(params.src_off + pos - lo));
                }
                word = (word & ~(0xffffu << shift)) | (v << shift);
            }
        }
        dst[w] = word;
    }
}
