// The compute of a schedule level in one dispatch: every device's allocations live in
// one arena (`mem`, u32 words at host-computed offsets) and the level's ops in a table;
// each workgroup runs one chunk of one op's elements. The ops of a level are
// independent, so no barrier is needed (levels are separate dispatches).

struct Op {
    // 0 copy, 1 fill, 2 accumulate.
    kind: u32,
    dst: u32,
    src: u32,
    len: u32,
    // fill: the element bits; accumulate: op (0 sum, 1 max, 2 min) | dtype << 4 (0 f32, 1 i32).
    bits: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

struct Segment {
    // First chunk and chunk count of this dispatch.
    first: u32,
    count: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read_write> mem: array<u32>;
@group(0) @binding(1) var<storage, read> ops: array<Op>;
// (op, first element, count, 0) per chunk.
@group(0) @binding(2) var<storage, read> items: array<vec4<u32>>;
@group(0) @binding(3) var<uniform> seg: Segment;

fn combine_f32(op: u32, a: f32, b: f32) -> f32 {
    if (op == 1u) {
        return max(a, b);
    }
    if (op == 2u) {
        return min(a, b);
    }
    return a + b;
}

fn combine_i32(op: u32, a: i32, b: i32) -> i32 {
    if (op == 1u) {
        return max(a, b);
    }
    if (op == 2u) {
        return min(a, b);
    }
    return a + b;
}

// Elements [start, end) of op `o`, strided by `step` from `lane`.
fn run(o: Op, start: u32, end: u32, lane: u32, step: u32) {
    if (o.kind == 0u) {
        for (var i = start + lane; i < end; i = i + step) {
            mem[o.dst + i] = mem[o.src + i];
        }
    } else if (o.kind == 1u) {
        for (var i = start + lane; i < end; i = i + step) {
            mem[o.dst + i] = o.bits;
        }
    } else {
        let op = o.bits & 15u;
        let int = (o.bits >> 4u) == 1u;
        for (var i = start + lane; i < end; i = i + step) {
            let a = mem[o.dst + i];
            let b = mem[o.src + i];
            if (int) {
                mem[o.dst + i] = bitcast<u32>(combine_i32(op, bitcast<i32>(a), bitcast<i32>(b)));
            } else {
                mem[o.dst + i] = bitcast<u32>(combine_f32(op, bitcast<f32>(a), bitcast<f32>(b)));
            }
        }
    }
}

@compute @workgroup_size(256)
fn wave(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lane: u32,
) {
    let k = wg.x + wg.y * nwg.x;
    if (k >= seg.count) {
        return;
    }
    let item = items[seg.first + k];
    run(ops[item.x], item.y, item.y + item.z, lane, 256u);
}
