// dst[dst_off + i] = value for i < n (non-zero fills; zero fills use clear_buffer).

@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<uniform> params: Params;

@compute @workgroup_size(WORKGROUP)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let stride = grid_stride(nwg);
    for (var i = gid.x; i < params.n; i = i + stride) {
        dst[params.dst_off + i] = params.value;
    }
}
