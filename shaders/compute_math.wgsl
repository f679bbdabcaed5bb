// The transcendental ops' kernel: compute_elementwise.wgsl's bindings and loads with
// math_ops.wgsl's functions (see there).

// Element i of the destination (a float dtype).
fn math_value(i: u32) -> u32 {
    let a = widen(D0, ld0(i));
    if (OP >= EW_BINARY) {
        return narrow(DD, math_binary(OP, a, widen(D1, ld1(i))));
    }
    return narrow(DD, math_unary(OP, a));
}

@compute @workgroup_size(WORKGROUP)
fn math(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let stride = grid_stride(nwg);
    if (!is16(DD)) {
        for (var i = gid.x; i < ew.n; i = i + stride) {
            dst[ew.dst_off + i] = math_value(i);
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
                word = with_half(word, pos, math_value(pos - lo));
            }
        }
        dst[w] = word;
    }
}
