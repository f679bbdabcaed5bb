// dst[dst_off + i] = OP(dst[dst_off + i], src[src_off + i]) for i < n.
// One shader family: OP (0 sum, 1 max, 2 min) and DTYPE (0 f32, 1 i32) are
// pipeline-overridable constants, so each variant compiles without branches.
// Elements are stored as u32 words and bit-cast, so one binding type serves every dtype.

override OP: u32 = 0u;
override DTYPE: u32 = 0u;

struct Params {
    src_off: u32,
    dst_off: u32,
    n: u32,
    value: u32,
}

@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<uniform> params: Params;

fn combine_f32(a: f32, b: f32) -> f32 {
    if (OP == 1u) {
        return max(a, b);
    }
    if (OP == 2u) {
        return min(a, b);
    }
    return a + b;
}

fn combine_i32(a: i32, b: i32) -> i32 {
    if (OP == 1u) {
        return max(a, b);
    }
    if (OP == 2u) {
        return min(a, b);
    }
    return a + b;
}

@compute @workgroup_size(256)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    // Grid-stride loop: the dispatch is capped at the per-dimension workgroup limit.
    let stride = nwg.x * 256u;
    for (var i = gid.x; i < params.n; i = i + stride) {
        let a = dst[params.dst_off + i];
        let b = src[params.src_off + i];
        var r: u32;
        if (DTYPE == 1u) {
            r = bitcast<u32>(combine_i32(bitcast<i32>(a), bitcast<i32>(b)));
        } else {
            r = bitcast<u32>(combine_f32(bitcast<f32>(a), bitcast<f32>(b)));
        }
        dst[params.dst_off + i] = r;
    }
}
