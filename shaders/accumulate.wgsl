// dst[dst_off + i] = OP(dst[dst_off + i], src[src_off + i]) for i < n.
// OP and DTYPE (f32 or i32) are pipeline-overridable constants, so each variant
// compiles without branches.

override OP: u32 = REDUCE_SUM;
override DTYPE: u32 = DTYPE_F32;

@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(WORKGROUP)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let stride = grid_stride(nwg);
    for (var i = gid.x; i < params.n; i = i + stride) {
        let d = params.dst_off + i;
        dst[d] = combine_word(OP, DTYPE, dst[d], src[params.src_off + i]);
    }
}
