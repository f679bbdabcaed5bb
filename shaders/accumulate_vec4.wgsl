// The accumulate family on vec4 words: dst[dst_off + i] = OP(dst[..], src[..]) for
// i < n vec4s. Used when both regions are 16-byte aligned and a multiple of 4 elements
// long; llvmpipe and real GPUs move vec4 words with fewer, wider accesses.

override OP: u32 = 0u;
override DTYPE: u32 = 0u;

struct Params {
    src_off: u32,
    dst_off: u32,
    n: u32,
    value: u32,
}

@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;
@group(0) @binding(2) var<uniform> params: Params;

fn combine_f32(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    if (OP == 1u) {
        return max(a, b);
    }
    if (OP == 2u) {
        return min(a, b);
    }
    return a + b;
}

fn combine_i32(a: vec4<i32>, b: vec4<i32>) -> vec4<i32> {
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
    let stride = nwg.x * 256u;
    for (var i = gid.x; i < params.n; i = i + stride) {
        let a = dst[params.dst_off + i];
        let b = src[params.src_off + i];
        var r: vec4<u32>;
        if (DTYPE == 1u) {
            r = bitcast<vec4<u32>>(combine_i32(bitcast<vec4<i32>>(a), bitcast<vec4<i32>>(b)));
        } else {
            r = bitcast<vec4<u32>>(combine_f32(bitcast<vec4<f32>>(a), bitcast<vec4<f32>>(b)));
        }
        dst[params.dst_off + i] = r;
    }
}
