// The accumulate family on vec4 words: dst[dst_off + i] = OP(dst[..], src[..]) for
// i < n vec4s. Used when both regions are 16-byte aligned and a multiple of 4 elements
// long; llvmpipe and real GPUs move vec4 words with fewer, wider accesses.

override OP: u32 = REDUCE_SUM;
override DTYPE: u32 = DTYPE_F32;

@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;
@group(0) @binding(2) var<uniform> params: Params;

fn combine4(a: vec4<u32>, b: vec4<u32>) -> vec4<u32> {
    return vec4<u32>(
        combine_word(OP, DTYPE, a.x, b.x),
        combine_word(OP, DTYPE, a.y, b.y),
        combine_word(OP, DTYPE, a.z, b.z),
        combine_word(OP, DTYPE, a.w, b.w),
    );
}

@compute @workgroup_size(WORKGROUP)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let stride = grid_stride(nwg);
    for (var i = gid.x; i < params.n; i = i + stride) {
        let d = params.dst_off + i;
        dst[d] = combine4(dst[d], src[params.src_off + i]);
    }
}
