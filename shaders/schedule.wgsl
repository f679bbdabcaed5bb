// The compute of a schedule level in one dispatch: every device's allocations live in
// one arena (`mem`, u32 words at host-computed offsets) and the level's ops in a table;
// each workgroup runs one chunk of one op's elements. The ops of a level are
// independent, so no barrier is needed (levels are separate dispatches).

struct Op {
    // OP_COPY, OP_FILL or OP_ACCUMULATE.
    kind: u32,
    dst: u32,
    src: u32,
    len: u32,
    // OP_FILL: the element bits; OP_ACCUMULATE: op | dtype << ACC_DTYPE_SHIFT.
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

// Elements [start, end) of op `o`, strided by `step` from `lane`.
fn run(o: Op, start: u32, end: u32, lane: u32, step: u32) {
    if (o.kind == OP_COPY) {
        for (var i = start + lane; i < end; i = i + step) {
            mem[o.dst + i] = mem[o.src + i];
        }
    } else if (o.kind == OP_FILL) {
        for (var i = start + lane; i < end; i = i + step) {
            mem[o.dst + i] = o.bits;
        }
    } else {
        let op = o.bits & ACC_OP_MASK;
        let dtype = o.bits >> ACC_DTYPE_SHIFT;
        for (var i = start + lane; i < end; i = i + step) {
            mem[o.dst + i] = combine_word(op, dtype, mem[o.dst + i], mem[o.src + i]);
        }
    }
}

@compute @workgroup_size(WORKGROUP)
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
    run(ops[item.x], item.y, item.y + item.z, lane, WORKGROUP);
}
