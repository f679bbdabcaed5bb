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

// shift_rne, f16_to_f32, f32_to_f16 and f32_to_bf16 are common.wgsl's.

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
