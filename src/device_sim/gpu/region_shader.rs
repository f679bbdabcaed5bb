//! A fused [`Region`]'s compute shader, generated: its register program as straight-line
//! WGSL over one element (the functions of `elementwise_ops.wgsl` and `math_ops.wgsl`,
//! so every op computes as the one-op shaders compute it), its inputs read and its
//! outputs written once per element: one dispatch for the whole chain.
//!
//! Each distinct buffer the region touches is one binding (a buffer bound twice in a
//! dispatch may not be written through either). The parameter block holds `n`, the
//! parity of the 16-bit outputs' first elements, then each input's and each output's
//! element offset in its binding. With a 16-bit output every invocation handles the
//! two elements of one word of it (the other outputs' words line up: same parity), so
//! no two invocations write one word; otherwise one element each.

use super::codes::{binary_code, compare_code, dtype_code, is_math, unary_code};
use crate::array::DType;
use crate::device_sim::fuse::{Instr, Pattern, Region};
use crate::ir::Unary;
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex, OnceLock};

/// Where a region's views are bound: per input and per output, its binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bindings {
    /// How many storage bindings the shader declares.
    pub count: usize,
    /// The binding of each input.
    pub inputs: Vec<usize>,
    /// The binding of each output.
    pub outputs: Vec<usize>,
}

/// True when element `i`'s outputs are written per word of a 16-bit output.
pub fn by_words(r: &Region) -> bool {
    r.outputs.iter().any(|o| r.regs[o.reg].dtype.storage() == 2)
}

fn hex(bits: u32) -> String {
    format!("0x{bits:08x}u")
}

fn code(d: DType) -> String {
    format!("{}u", dtype_code(d))
}

/// The index into input `k`'s view of element `i` (a WGSL expression; `pre` gets the
/// statements it needs).
fn index(r: &Region, k: usize, pre: &mut String) -> String {
    match &r.inputs[k].pattern {
        Pattern::Full => "i".into(),
        Pattern::Scalar => "0u".into(),
        Pattern::Broadcast { shape, dims, into } => {
            let strides = Pattern::strides(shape, dims, into);
            writeln!(pre, "    var q{k} = i;\n    var s{k} = 0u;").ok();
            for d in (0..into.len()).rev() {
                if into[d] == 1 {
                    continue;
                }
                if strides[d] != 0 {
                    writeln!(
                        pre,
                        "    s{k} = s{k} + (q{k} % {}u) * {}u;",
                        into[d], strides[d]
                    )
                    .ok();
                }
                writeln!(pre, "    q{k} = q{k} / {}u;", into[d]).ok();
            }
            format!("s{k}")
        }
    }
}

/// The expression computing register `i` from the registers before it.
fn instr(r: &Region, i: usize, bind: &Bindings, pre: &mut String) -> String {
    let reg = |a: usize| format!("r{a}");
    let dt = |a: usize| r.regs[a].dtype;
    // A result of dtype `t` as the value a register of `t` holds (16-bit floats rounded
    // to their precision, integers wrapped to their width).
    let wrap = |t: DType, e: String| format!("widen({c}, narrow({c}, {e}))", c = code(t));
    match r.instrs[i] {
        Instr::Load(k) => {
            let input = &r.inputs[k];
            let p = index(r, k, pre);
            let b = bind.inputs[k];
            let at = format!("prm({}u) + {p}", 2 + k);
            if input.dtype.storage() == 2 {
                format!("half_of(b{b}[({at}) >> 1u], {at})")
            } else {
                format!("b{b}[{at}]")
            }
        }
        Instr::Const { bits, .. } => hex(bits),
        Instr::Widen(a) => format!("widen({}, {})", code(dt(a)), reg(a)),
        Instr::Unary(u, t, a) => {
            let op = unary_code(u);
            let powi = match u {
                Unary::IntegerPow(k) => k,
                _ => 0,
            };
            let e = if is_math(op) {
                format!("math_unary({op}u, {})", reg(a))
            } else if dt(a).is_float() {
                format!("unary_float({op}u, {}, {powi})", reg(a))
            } else {
                format!("unary_int({op}u, {}, {}, {powi})", code(dt(a)), reg(a))
            };
            wrap(t, e)
        }
        Instr::Binary(b, t, a, c) => {
            let op = binary_code(b);
            let e = if is_math(op) {
                format!("math_binary({op}u, {}, {})", reg(a), reg(c))
            } else if dt(a).is_float() {
                format!("binary_float({op}u, {}, {})", reg(a), reg(c))
            } else {
                format!("binary_int({op}u, {}, {}, {})", code(dt(a)), reg(a), reg(c))
            };
            wrap(t, e)
        }
        Instr::Compare(op, t, a, c) => {
            format!(
                "compare({}u, {}, {}, {})",
                compare_code(op),
                code(t),
                reg(a),
                reg(c)
            )
        }
        Instr::Select(p, a, c) => {
            format!("select({}, {}, ({} & 1u) != 0u)", reg(c), reg(a), reg(p))
        }
        Instr::Convert(from, to, a) => {
            // `convert` takes stored bits: a value register of a float holds f32 bits,
            // of an integer i32 bits.
            let from = match (r.regs[a].raw, from.is_float()) {
                (true, _) => from,
                (false, true) => DType::F32,
                (false, false) => DType::I32,
            };
            format!(
                "widen({c}, convert({}, {c}, {}))",
                code(from),
                reg(a),
                c = code(to)
            )
        }
    }
}

/// The stored bits of output `k` from its register.
fn stored(r: &Region, k: usize) -> String {
    let reg = r.outputs[k].reg;
    if r.regs[reg].raw {
        format!("r{reg}")
    } else {
        format!("narrow({}, r{reg})", code(r.regs[reg].dtype))
    }
}

/// The kernel of region `r` bound as `bind` (without the prelude and libraries:
/// [`super::shaders::with_prelude`] adds them).
pub fn kernel(r: &Region, bind: &Bindings) -> String {
    let mut s = String::new();
    let params = 2 + r.inputs.len() + r.outputs.len();
    writeln!(
        s,
        "struct Rp {{ v: array<vec4<u32>, {}> }}",
        params.div_ceil(4)
    )
    .ok();
    for b in 0..bind.count {
        writeln!(
            s,
            "@group(0) @binding({b}) var<storage, read_write> b{b}: array<u32>;"
        )
        .ok();
    }
    writeln!(s, "@group(0) @binding({}) var<uniform> rp: Rp;", bind.count).ok();
    s.push_str("fn prm(k: u32) -> u32 {\n    return rp.v[k >> 2u][k & 3u];\n}\n");
    // The outputs' stored bits of one element.
    s.push_str("struct Outs {\n");
    for k in 0..r.outputs.len() {
        writeln!(s, "    o{k}: u32,").ok();
    }
    s.push_str("}\nfn elem(i: u32) -> Outs {\n");
    for i in 0..r.instrs.len() {
        let mut pre = String::new();
        let e = instr(r, i, bind, &mut pre);
        s.push_str(&pre);
        writeln!(s, "    let r{i}: u32 = {e};").ok();
    }
    let outs: Vec<String> = (0..r.outputs.len()).map(|k| stored(r, k)).collect();
    writeln!(s, "    return Outs({});\n}}", outs.join(", ")).ok();
    let out_at = |k: usize| format!("prm({}u)", 2 + r.inputs.len() + k);
    s.push_str(
        "@compute @workgroup_size(WORKGROUP)\nfn main(\n    @builtin(global_invocation_id) gid: vec3<u32>,\n    @builtin(num_workgroups) nwg: vec3<u32>,\n) {\n    let stride = grid_stride(nwg);\n    let n = prm(0u);\n",
    );
    if !by_words(r) {
        s.push_str("    for (var i = gid.x; i < n; i = i + stride) {\n        let v = elem(i);\n");
        for (k, o) in r.outputs.iter().enumerate() {
            let b = bind.outputs[k];
            if o.view.len() == r.n {
                writeln!(s, "        b{b}[{} + i] = v.o{k};", out_at(k)).ok();
            } else {
                writeln!(
                    s,
                    "        if (i == 0u) {{ b{b}[{}] = v.o{k}; }}",
                    out_at(k)
                )
                .ok();
            }
        }
        s.push_str("    }\n}\n");
        return s;
    }
    // By words of the 16-bit outputs: invocation w has elements 2w - par and 2w + 1 - par.
    s.push_str(
        "    let par = prm(1u);\n    let words = (par + n + 1u) >> 1u;\n    for (var w = gid.x; w < words; w = w + stride) {\n        let i0 = 2u * w - par;\n        let i1 = 2u * w + 1u - par;\n        let ok0 = (w > 0u || par == 0u) && i0 < n;\n        let ok1 = i1 < n;\n        var v0: Outs;\n        var v1: Outs;\n        if (ok0) { v0 = elem(i0); }\n        if (ok1) { v1 = elem(i1); }\n",
    );
    for (k, o) in r.outputs.iter().enumerate() {
        let b = bind.outputs[k];
        let at = out_at(k);
        if r.regs[o.reg].dtype.storage() == 2 {
            writeln!(
                s,
                "        {{\n            let wi = ({at} >> 1u) + w;\n            var word = b{b}[wi];\n            if (ok0) {{ word = with_half(word, 0u, v0.o{k}); }}\n            if (ok1) {{ word = with_half(word, 1u, v1.o{k}); }}\n            b{b}[wi] = word;\n        }}"
            )
            .ok();
        } else if o.view.len() == r.n {
            writeln!(
                s,
                "        if (ok0) {{ b{b}[{at} + i0] = v0.o{k}; }}\n        if (ok1) {{ b{b}[{at} + i1] = v1.o{k}; }}"
            )
            .ok();
        } else {
            writeln!(
                s,
                "        if (ok0 && i0 == 0u) {{ b{b}[{at}] = v0.o{k}; }}\n        if (ok1 && i1 == 0u) {{ b{b}[{at}] = v1.o{k}; }}"
            )
            .ok();
        }
    }
    s.push_str("    }\n}\n");
    s
}

/// The kernels generated so far in this process, each once: a pipeline key names one by
/// its index.
/// Every kernel by index, and the index of each.
type Kernels = (Vec<Arc<str>>, HashMap<Arc<str>, u32>);

fn kernels() -> &'static Mutex<Kernels> {
    static KERNELS: OnceLock<Mutex<Kernels>> = OnceLock::new();
    KERNELS.get_or_init(Default::default)
}

/// The index of kernel `source` (added when new).
pub fn intern(source: String) -> u32 {
    let mut k = kernels().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&id) = k.1.get(source.as_str()) {
        return id;
    }
    let id = k.0.len() as u32;
    let s: Arc<str> = source.into();
    k.0.push(s.clone());
    k.1.insert(s, id);
    id
}

/// The whole module of interned kernel `id`: prelude, libraries, kernel.
///
/// # Panics
/// When no kernel has index `id`.
pub fn module(id: u32) -> String {
    let kernel = kernels().lock().unwrap_or_else(|e| e.into_inner()).0[id as usize].clone();
    super::shaders::with_prelude(&super::shaders::region_libraries(), &kernel)
}
