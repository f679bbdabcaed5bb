// Up to four independent accumulates in one dispatch: item k (the dispatch's y index)
// does dst_k[dst_off + i] = OP(dst_k[..], src_k[src_off + i]) for i < n. Batching small
// accumulates of one phase saves the per-dispatch cost, which dominates at small sizes.

override OP: u32 = REDUCE_SUM;
override DTYPE: u32 = DTYPE_F32;

struct Batch {
    items: array<Params, 4>,
}

@group(0) @binding(0) var<storage, read> src0: array<u32>;
@group(0) @binding(1) var<storage, read> src1: array<u32>;
@group(0) @binding(2) var<storage, read> src2: array<u32>;
@group(0) @binding(3) var<storage, read> src3: array<u32>;
@group(0) @binding(4) var<storage, read_write> dst0: array<u32>;
@group(0) @binding(5) var<storage, read_write> dst1: array<u32>;
@group(0) @binding(6) var<storage, read_write> dst2: array<u32>;
@group(0) @binding(7) var<storage, read_write> dst3: array<u32>;
@group(0) @binding(8) var<uniform> batch: Batch;

fn combine(a: u32, b: u32) -> u32 {
    return combine_word(OP, DTYPE, a, b);
}

@compute @workgroup_size(WORKGROUP)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    let item = batch.items[wid.y];
    let stride = grid_stride(nwg);
    for (var i = gid.x; i < item.n; i = i + stride) {
        let s = item.src_off + i;
        let d = item.dst_off + i;
        switch wid.y {
            case 0u: {
                dst0[d] = combine(dst0[d], src0[s]);
            }
            case 1u: {
                dst1[d] = combine(dst1[d], src1[s]);
            }
            case 2u: {
                dst2[d] = combine(dst2[d], src2[s]);
            }
            case 3u: {
                dst3[d] = combine(dst3[d], src3[s]);
            }
            default: {}
        }
    }
}
