// Data movement of compute ops over a box (broadcast_in_dim, transpose, slice, the
// update of dynamic_update_slice, each source of a concatenate, iota): box element idx
// (rank <= BOX_RANK, innermost last) is written at dst_off + Σ idx·dstride from
// src_off + Σ idx·sstride (MODE LAYOUT_GATHER, same dtype on both sides, bits copied)
// or as the integer Σ idx·sstride in DTYPE (MODE LAYOUT_IOTA). Every element is moved
// exactly.
//
// 16-bit destinations are written a word per invocation: PACK_DENSE when the box
// covers dst_off.. densely (a gather), PACK_RUNS when it is runs of its innermost
// dimension (dstride 1) that never share a word (a scatter into a window: runs that
// touch were merged by the host), so no two invocations write one word and the
// neighbouring half of a word at a run's end is kept.

override MODE: u32 = LAYOUT_GATHER;
override DTYPE: u32 = DTYPE_F32;
override PACK: u32 = PACK_DENSE;

struct Lay {
    // Work items: box elements (32-bit), destination words (PACK_DENSE), or runs times
    // words per run (PACK_RUNS).
    n: u32,
    rank: u32,
    dst_off: u32,
    src_off: u32,
    // Box elements.
    count: u32,
    // PACK_RUNS: the most words one run touches.
    run_words: u32,
    pad0: u32,
    pad1: u32,
    shape: array<vec4<u32>, 2>,
    dstride: array<vec4<u32>, 2>,
    sstride: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<storage, read_write> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<uniform> lay: Lay;

// (destination, source) element offsets of box element t, from the origins.
fn offsets(t: u32) -> vec2<u32> {
    var rest = t;
    var d = 0u;
    var s = 0u;
    for (var k = lay.rank; k > 0u; k = k - 1u) {
        let i = k - 1u;
        let n = lay.shape[i >> 2u][i & 3u];
        let c = rest % n;
        rest = rest / n;
        d = d + c * lay.dstride[i >> 2u][i & 3u];
        s = s + c * lay.sstride[i >> 2u][i & 3u];
    }
    return vec2<u32>(d, s);
}

// The element at source element s of the binding (gather), or s itself in DTYPE (iota:
// src_off is then the index of the box's first element).
fn value(s: u32) -> u32 {
    if (MODE == LAYOUT_IOTA) {
        let v = bitcast<i32>(s);
        if (DTYPE == DTYPE_F32) {
            return i32_to_f32_bits(v);
        }
        if (DTYPE == DTYPE_BF16) {
            return int_to_float(v, 7u, 127u, 15u);
        }
        if (DTYPE == DTYPE_F16) {
            // Above 65519 the rounding reaches the all-ones exponent: infinity.
            return min(int_to_float(v, 10u, 15u, 15u), 0x7c00u);
        }
        return narrow(DTYPE, s);
    }
    if (is16(DTYPE)) {
        return half_of(src[s >> 1u], s);
    }
    return src[s];
}

@compute @workgroup_size(WORKGROUP)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let stride = grid_stride(nwg);
    if (!is16(DTYPE)) {
        for (var t = gid.x; t < lay.n; t = t + stride) {
            let o = offsets(t);
            dst[lay.dst_off + o.x] = value(lay.src_off + o.y);
        }
        return;
    }
    if (PACK == PACK_DENSE) {
        let lo = lay.dst_off;
        let hi = lay.dst_off + lay.count;
        let first = lo >> 1u;
        for (var k = gid.x; k < lay.n; k = k + stride) {
            let w = first + k;
            var word = dst[w];
            for (var h = 0u; h < 2u; h = h + 1u) {
                let pos = 2u * w + h;
                if (pos >= lo && pos < hi) {
                    word = with_half(word, pos, value(lay.src_off + offsets(pos - lo).y));
                }
            }
            dst[w] = word;
        }
        return;
    }
    let last = lay.rank - 1u;
    let len = lay.shape[last >> 2u][last & 3u];
    let step = lay.sstride[last >> 2u][last & 3u];
    for (var t = gid.x; t < lay.n; t = t + stride) {
        let run = t / lay.run_words;
        let j = t % lay.run_words;
        let o = offsets(run * len);
        let p = lay.dst_off + o.x;
        let w = (p >> 1u) + j;
        if (w <= ((p + len - 1u) >> 1u)) {
            var word = dst[w];
            for (var h = 0u; h < 2u; h = h + 1u) {
                let pos = 2u * w + h;
                if (pos >= p && pos < p + len) {
                    word = with_half(word, pos, value(lay.src_off + o.y + (pos - p) * step));
                }
            }
            dst[w] = word;
        }
    }
}
