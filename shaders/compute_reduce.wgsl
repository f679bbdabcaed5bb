// Reductions of compute ops: output o (of n, written at dst_off + o) combines the
// group of source elements src_off + base(o) + goff(g), g < group, where base walks
// the kept dims (shape, stride) and goff the reduced ones (gshape, gstride).
// MODE REDUCE_VALUES: OP (REDUCE_SUM/MAX/MIN) over values of DS (floats in f32, whose
// result is written as f32 bits and rounded to a 16-bit dtype by a later convert;
// integers in i32, wrapped to DS). MODE REDUCE_ARG: the first index of the largest
// (OP REDUCE_MAX) or smallest element, NaN counting as both; written as i32.
// Max, min and the arg reductions are exact in any order (NaN gives the canonical
// NaN; ties keep the first index); f32 sums are added in a tree, not in index order
// (within the k-term bound of an f64 reference), and integer sums wrap exactly.
//
// `per_thread` gives each output one invocation (short groups); `per_group` one
// workgroup, whose invocations combine strided shares and then a tree in workgroup
// memory (long groups).

override MODE: u32 = REDUCE_VALUES;
override OP: u32 = REDUCE_SUM;
override DS: u32 = DTYPE_F32;

struct Red {
    n: u32,
    rank: u32,
    grank: u32,
    group: u32,
    dst_off: u32,
    src_off: u32,
    pad0: u32,
    pad1: u32,
    shape: array<vec4<u32>, 2>,
    stride: array<vec4<u32>, 2>,
    gshape: array<vec4<u32>, 2>,
    gstride: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<storage, read_write> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<uniform> red: Red;

var<workgroup> part: array<u32, WORKGROUP>;
var<workgroup> part_idx: array<u32, WORKGROUP>;

fn base(o: u32) -> u32 {
    var rest = o;
    var s = 0u;
    for (var k = red.rank; k > 0u; k = k - 1u) {
        let i = k - 1u;
        let n = red.shape[i >> 2u][i & 3u];
        s = s + (rest % n) * red.stride[i >> 2u][i & 3u];
        rest = rest / n;
    }
    return s;
}

fn goff(g: u32) -> u32 {
    if (red.grank == 1u) {
        return g * red.gstride[0].x;
    }
    var rest = g;
    var s = 0u;
    for (var k = red.grank; k > 0u; k = k - 1u) {
        let i = k - 1u;
        let n = red.gshape[i >> 2u][i & 3u];
        s = s + (rest % n) * red.gstride[i >> 2u][i & 3u];
        rest = rest / n;
    }
    return s;
}

// Source element at offset s, widened (f32 bits or i32 bits).
fn elem(s: u32) -> u32 {
    let p = red.src_off + s;
    if (is16(DS)) {
        return widen(DS, half_of(src[p >> 1u], p));
    }
    return src[p];
}

fn identity() -> u32 {
    if (OP == REDUCE_SUM) {
        return 0u;
    }
    if (is_float(DS)) {
        return select(F32_INF, F32_INF | F32_SIGN, OP == REDUCE_MAX);
    }
    return select(0x7fffffffu, 0x80000000u, OP == REDUCE_MAX);
}

fn comb(a: u32, b: u32) -> u32 {
    if (is_float(DS)) {
        if (OP == REDUCE_MAX) {
            return fmax_bits(a, b);
        }
        if (OP == REDUCE_MIN) {
            return fmin_bits(a, b);
        }
        return bitcast<u32>(bitcast<f32>(a) + bitcast<f32>(b));
    }
    if (OP == REDUCE_MAX) {
        return bitcast<u32>(max(bitcast<i32>(a), bitcast<i32>(b)));
    }
    if (OP == REDUCE_MIN) {
        return bitcast<u32>(min(bitcast<i32>(a), bitcast<i32>(b)));
    }
    return a + b;
}

// True when (value b, index j) beats (value a, index i) in an arg reduction: a NaN
// beats any number, a larger (smaller) value a smaller (larger) one, and on a tie
// (NaNs, or equal values with -0 == +0) the smaller index.
fn beats(b: u32, j: u32, a: u32, i: u32) -> bool {
    if (is_float(DS)) {
        let na = f_isnan(a);
        let nb = f_isnan(b);
        if (na || nb) {
            return nb && (!na || j < i);
        }
        let ka = f_key(a);
        let kb = f_key(b);
        if (ka == kb) {
            return j < i;
        }
        return select((kb < ka), (kb > ka), OP == REDUCE_MAX);
    }
    let x = bitcast<i32>(a);
    let y = bitcast<i32>(b);
    if (x == y) {
        return j < i;
    }
    return select((y < x), (y > x), OP == REDUCE_MAX);
}

fn finish(o: u32, v: u32, idx: u32) {
    if (MODE == REDUCE_ARG) {
        dst[red.dst_off + o] = idx;
    } else if (is_float(DS)) {
        dst[red.dst_off + o] = v;
    } else {
        dst[red.dst_off + o] = narrow(DS, v);
    }
}

@compute @workgroup_size(WORKGROUP)
fn per_thread(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let stride = grid_stride(nwg);
    for (var o = gid.x; o < red.n; o = o + stride) {
        let b = base(o);
        if (MODE == REDUCE_ARG) {
            var best = 0u;
            var bv = 0u;
            if (red.group > 0u) {
                bv = elem(b);
            }
            for (var g = 1u; g < red.group; g = g + 1u) {
                let v = elem(b + goff(g));
                if (beats(v, g, bv, best)) {
                    bv = v;
                    best = g;
                }
            }
            finish(o, 0u, best);
        } else {
            var acc = identity();
            for (var g = 0u; g < red.group; g = g + 1u) {
                acc = comb(acc, elem(b + goff(g)));
            }
            finish(o, acc, 0u);
        }
    }
}

@compute @workgroup_size(WORKGROUP)
fn per_group(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let groups = nwg.x * nwg.y;
    for (var o = wid.x + wid.y * nwg.x; o < red.n; o = o + groups) {
        let b = base(o);
        var acc = identity();
        var best = 0xffffffffu;
        var bv = 0u;
        for (var g = lane; g < red.group; g = g + WORKGROUP) {
            let v = elem(b + goff(g));
            if (MODE == REDUCE_ARG) {
                if (best == 0xffffffffu || beats(v, g, bv, best)) {
                    bv = v;
                    best = g;
                }
            } else {
                acc = comb(acc, v);
            }
        }
        if (MODE == REDUCE_ARG) {
            part[lane] = bv;
            part_idx[lane] = best;
        } else {
            part[lane] = acc;
        }
        workgroupBarrier();
        for (var s = WORKGROUP / 2u; s > 0u; s = s >> 1u) {
            if (lane < s) {
                if (MODE == REDUCE_ARG) {
                    let j = part_idx[lane + s];
                    if (j != 0xffffffffu && (part_idx[lane] == 0xffffffffu || beats(part[lane + s], j, part[lane], part_idx[lane]))) {
                        part[lane] = part[lane + s];
                        part_idx[lane] = j;
                    }
                } else {
                    part[lane] = comb(part[lane], part[lane + s]);
                }
            }
            workgroupBarrier();
        }
        if (lane == 0u) {
            finish(o, part[0], select(part_idx[0], 0u, part_idx[0] == 0xffffffffu));
        }
        workgroupBarrier();
    }
}
