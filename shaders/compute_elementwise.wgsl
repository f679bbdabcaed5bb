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
// functions themselves are elementwise_ops.wgsl's (assembled before this file); the
// transcendentals live in math_ops.wgsl and compute_math.wgsl, modules of their own, so
// the exact ops' pipelines compile without them.

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
        return narrow(DD, unary_float(OP, a, ew.powi));
    }
    return narrow(DD, unary_int(OP, D0, a, ew.powi));
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
