// dot_general as batched matrix products: c[b, i, j] = Σ_p a[b, i, p] * bm[b, p, j]
// for b < nb, i < m, j < n, p < k, every operand addressed by its own strides (the
// host transposes an operand into scratch first when its dims do not collapse to
// these three). Elements of IN (f32, f16, bf16: products in f32; i32, i8, u8: in i32,
// wrapping) are widened as they are loaded; c is f32 or i32 bits (a 16-bit result is
// rounded by a later convert).
//
// Tiled through workgroup memory: a workgroup of MM_THREADS x MM_THREADS invocations
// computes an MM_TILE x MM_TILE tile of c, MM_PER_THREAD x MM_PER_THREAD (4 x 4: four
// vec4 accumulators, no arrays, so they stay in registers) outputs each, staging
// MM_TILE_K columns of a and rows of bm per step. Tiles and batches beyond the
// dispatch's workgroup counts are taken by grid-stride loops. Each output's terms are
// added in order of p, as one f32 (or i32) sum.

override IN: u32 = DTYPE_F32;

struct Mm {
    nb: u32,
    m: u32,
    n: u32,
    k: u32,
    a_off: u32,
    b_off: u32,
    c_off: u32,
    pad0: u32,
    // Strides of a: batch, row, contraction.
    sa: vec4<u32>,
    // Strides of bm: batch, contraction, column.
    sb: vec4<u32>,
    // Strides of c: batch, row, column.
    sc: vec4<u32>,
}

@group(0) @binding(0) var<storage, read_write> a: array<u32>;
@group(0) @binding(1) var<storage, read_write> bm: array<u32>;
@group(0) @binding(2) var<storage, read_write> c: array<u32>;
@group(0) @binding(3) var<uniform> mm: Mm;

// Tiles of a ([p][i]) and bm ([p][j]) as widened bits, four rows (columns) a vec4, so
// an invocation reads its four a values and four bm values of a step as two vec4s.
var<workgroup> ta: array<vec4<u32>, MM_TILE * MM_TILE_K / 4u>;
var<workgroup> tb: array<vec4<u32>, MM_TILE * MM_TILE_K / 4u>;

fn load_a(pos: u32) -> u32 {
    if (is16(IN)) {
        return widen(IN, half_of(a[pos >> 1u], pos));
    }
    return a[pos];
}

fn load_b(pos: u32) -> u32 {
    if (is16(IN)) {
        return widen(IN, half_of(bm[pos >> 1u], pos));
    }
    return bm[pos];
}

fn store_c(pos: u32, v: u32) {
    c[pos] = v;
}

// Row r of an invocation's 4 x 4 outputs at (i, j0..j0+4), as far as they exist.
fn write_row(i: u32, j0: u32, cbase: u32, bits: vec4<u32>) {
    if (i >= mm.m) {
        return;
    }
    let at = cbase + i * mm.sc.y + j0 * mm.sc.z;
    for (var s = 0u; s < MM_PER_THREAD; s = s + 1u) {
        if (j0 + s < mm.n) {
            store_c(at + s * mm.sc.z, bits[s]);
        }
    }
}

@compute @workgroup_size(MM_THREADS, MM_THREADS)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let tiles_m = (mm.m + MM_TILE - 1u) / MM_TILE;
    let tiles_n = (mm.n + MM_TILE - 1u) / MM_TILE;
    let floats = is_float(IN);
    for (var bz = wid.z; bz < mm.nb; bz = bz + nwg.z) {
        for (var ti = wid.y; ti < tiles_m; ti = ti + nwg.y) {
            for (var tj = wid.x; tj < tiles_n; tj = tj + nwg.x) {
                let row0 = ti * MM_TILE;
                let col0 = tj * MM_TILE;
                let abase = mm.a_off + bz * mm.sa.x;
                let bbase = mm.b_off + bz * mm.sb.x;
                var f0 = vec4<f32>(0.0);
                var f1 = vec4<f32>(0.0);
                var f2 = vec4<f32>(0.0);
                var f3 = vec4<f32>(0.0);
                var i0 = vec4<i32>(0);
                var i1 = vec4<i32>(0);
                var i2 = vec4<i32>(0);
                var i3 = vec4<i32>(0);
                for (var k0 = 0u; k0 < mm.k; k0 = k0 + MM_TILE_K) {
                    // Stage a's MM_TILE x MM_TILE_K and bm's MM_TILE_K x MM_TILE, zeros
                    // outside the matrices.
                    for (var e = lane; e < MM_TILE * MM_TILE_K; e = e + WORKGROUP) {
                        let p = e % MM_TILE_K;
                        let i = e / MM_TILE_K;
                        var v = 0u;
                        if (row0 + i < mm.m && k0 + p < mm.k) {
                            v = load_a(abase + (row0 + i) * mm.sa.y + (k0 + p) * mm.sa.z);
                        }
                        let ai = p * MM_TILE + i;
                        ta[ai >> 2u][ai & 3u] = v;
                        let j = e % MM_TILE;
                        let pb = e / MM_TILE;
                        var w = 0u;
                        if (col0 + j < mm.n && k0 + pb < mm.k) {
                            w = load_b(bbase + (k0 + pb) * mm.sb.y + (col0 + j) * mm.sb.z);
                        }
                        let bi = pb * MM_TILE + j;
                        tb[bi >> 2u][bi & 3u] = w;
                    }
                    workgroupBarrier();
                    let steps = min(MM_TILE_K, mm.k - k0);
                    for (var p = 0u; p < steps; p = p + 1u) {
                        let av = ta[p * (MM_TILE / 4u) + lid.y];
                        let bv = tb[p * (MM_TILE / 4u) + lid.x];
                        if (floats) {
                            let x = bitcast<vec4<f32>>(av);
                            let y = bitcast<vec4<f32>>(bv);
                            f0 = f0 + x.x * y;
                            f1 = f1 + x.y * y;
                            f2 = f2 + x.z * y;
                            f3 = f3 + x.w * y;
                        } else {
                            let x = bitcast<vec4<i32>>(av);
                            let y = bitcast<vec4<i32>>(bv);
                            i0 = i0 + x.x * y;
                            i1 = i1 + x.y * y;
                            i2 = i2 + x.z * y;
                            i3 = i3 + x.w * y;
                        }
                    }
                    workgroupBarrier();
                }
                let cbase = mm.c_off + bz * mm.sc.x;
                let i = row0 + lid.y * MM_PER_THREAD;
                let j = col0 + lid.x * MM_PER_THREAD;
                if (floats) {
                    write_row(i, j, cbase, bitcast<vec4<u32>>(f0));
                    write_row(i + 1u, j, cbase, bitcast<vec4<u32>>(f1));
                    write_row(i + 2u, j, cbase, bitcast<vec4<u32>>(f2));
                    write_row(i + 3u, j, cbase, bitcast<vec4<u32>>(f3));
                } else {
                    write_row(i, j, cbase, bitcast<vec4<u32>>(i0));
                    write_row(i + 1u, j, cbase, bitcast<vec4<u32>>(i1));
                    write_row(i + 2u, j, cbase, bitcast<vec4<u32>>(i2));
                    write_row(i + 3u, j, cbase, bitcast<vec4<u32>>(i3));
                }
            }
        }
    }
}
