// Shared by every shader: prepended (after the constants generated from
// src/exec/gpu/codes.rs) to each module's source, since WGSL has no #include.
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
