//! Compute ops that run alone (reductions, transposes, dot products) at sizes the CPU
//! executor spreads over the cores, in `o_ref[...] = f(x_ref[...])` kernels whose
//! operand copies it forwards (the op reads the kernel's input and writes its output
//! directly): against values computed here, fused and unfused (every copy made), in
//! f32 and bf16, odd shapes, with NaNs and signed zeros among the data.

mod common;

use common::simulate;
use tpusim::device_sim::cpu::{CpuExecutor, CpuPlan};
use tpusim::kernel::{Ctx, GridSpec, MemorySpace, PallasCall, Value};
use tpusim::{DType, HostArray, Mesh};

type Op = for<'c> fn(&'c Ctx, &Value<'c>) -> Value<'c>;

/// How a reduction combines two values.
type Combine = fn(f64, f64) -> f64;

/// `y = f(x)` with `x` of `shape` and `y` of `out`.
fn call(name: &str, shape: &[usize], out: &[usize], dtype: DType, f: Op) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, shape, dtype)
        .output("y", MemorySpace::Vmem, out, dtype);
    PallasCall::new(name, spec, move |pl, a| {
        let x = pl.load(a.r("x"));
        pl.store(a.r("y"), &f(pl, &x));
    })
}

/// Small integers (exact sums and products), with `specials` at a few places.
fn data(n: usize, specials: bool) -> Vec<f64> {
    (0..n)
        .map(|i| match i % 9973 {
            17 if specials => f64::NAN,
            29 if specials => -0.0,
            _ => ((i * 7919) % 41) as f64 - 20.0,
        })
        .collect()
}

fn run(c: &PallasCall, x: &HostArray, fused: bool) -> Vec<f64> {
    let mesh = Mesh::new(1, "x").unwrap();
    // Fused, the op is the kernel's one step: no copy in or out (a 16-bit dot product's
    // result is rounded by a region of its own).
    let plan = tpusim::run::Job::call(c.clone(), mesh.clone())
        .plan()
        .unwrap();
    let steps = CpuPlan::of(&plan.program, &plan.schedule)
        .fused()
        .steps
        .len();
    let rounded = c.name() == "dot" && x.dtype != DType::F32;
    assert_eq!(steps, 1 + usize::from(rounded), "{} {}", c.name(), x.dtype);
    let mut exec = match fused {
        true => CpuExecutor::new(),
        false => CpuExecutor::unfused(),
    };
    let out = simulate(c, &mesh, &[vec![x.clone()]], &mut exec).unwrap();
    out[0][0].values()
}

/// `want` rounded to `dtype`, compared bit for bit with `got` (NaN matches NaN, and
/// -0 only -0).
fn check(what: &str, dtype: DType, got: &[f64], want: &[f64]) {
    let want = HostArray::from_values(dtype, &[want.len()], want)
        .unwrap()
        .values();
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let same =
            (g.is_nan() && w.is_nan()) || (g == w && g.is_sign_negative() == w.is_sign_negative());
        assert!(same, "{what}: element {i}: {g} for {w}");
    }
}

#[test]
fn reductions_over_the_cores_equal_their_definition() {
    // Over 200 us of one core's work (0.9 M elements): spread over the cores.
    let (r, c) = (1100usize, 813usize);
    for dtype in [DType::F32, DType::BF16] {
        for specials in [false, true] {
            let vals = data(r * c, specials);
            let x = HostArray::from_values(dtype, &[r, c], &vals).unwrap();
            let x = x.values();
            let xin = HostArray::from_values(dtype, &[r, c], &x).unwrap();
            let fold = |axis: usize, init: f64, f: fn(f64, f64) -> f64| -> Vec<f64> {
                let (outer, inner) = if axis == 1 { (r, c) } else { (c, r) };
                (0..outer)
                    .map(|o| {
                        (0..inner).fold(init, |a, i| {
                            let v = if axis == 1 {
                                x[o * c + i]
                            } else {
                                x[i * c + o]
                            };
                            f(a, v)
                        })
                    })
                    .collect()
            };
            let nan_max = |a: f64, b: f64| {
                if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else {
                    a.max(b)
                }
            };
            let nan_min = |a: f64, b: f64| {
                if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else {
                    a.min(b)
                }
            };
            let cases: [(&str, usize, Op, f64, Combine); 5] = [
                ("sum rows", 1, |_, x| x.sum(&[1]), 0.0, |a, b| a + b),
                (
                    "max rows",
                    1,
                    |_, x| x.max(&[1]),
                    f64::NEG_INFINITY,
                    nan_max,
                ),
                ("min rows", 1, |_, x| x.min(&[1]), f64::INFINITY, nan_min),
                ("sum cols", 0, |_, x| x.sum(&[0]), 0.0, |a, b| a + b),
                (
                    "max cols",
                    0,
                    |_, x| x.max(&[0]),
                    f64::NEG_INFINITY,
                    nan_max,
                ),
            ];
            for (name, axis, f, init, op) in cases {
                let out = if axis == 1 { r } else { c };
                let k = call(name, &[r, c], &[out], dtype, f);
                let want = fold(axis, init, op);
                for fused in [true, false] {
                    let what = format!("{name} {dtype} specials {specials} fused {fused}");
                    check(&what, dtype, &run(&k, &xin, fused), &want);
                }
            }
        }
    }
}

#[test]
fn transposes_and_dots_write_the_kernels_output_directly() {
    for dtype in [DType::F32, DType::BF16] {
        // A 2-D transpose over row blocks and a 3-D one of the last two dimensions.
        for shape in [vec![700usize, 613], vec![3, 300, 517]] {
            let n: usize = shape.iter().product();
            let x = HostArray::from_values(dtype, &shape, &data(n, true)).unwrap();
            let v = x.values();
            let r = shape.len();
            let (rows, cols) = (shape[r - 2], shape[r - 1]);
            let mut out = shape.clone();
            out.swap(r - 2, r - 1);
            let want: Vec<f64> = (0..n)
                .map(|o| {
                    let (b, rest) = (o / (rows * cols), o % (rows * cols));
                    let (j, i) = (rest / rows, rest % rows);
                    v[b * rows * cols + i * cols + j]
                })
                .collect();
            let f: Op = |_, x| {
                let r = x.shape().len();
                let mut perm: Vec<usize> = (0..r).collect();
                perm.swap(r - 2, r - 1);
                x.transpose(&perm)
            };
            let k = call("transpose", &shape, &out, dtype, f);
            for fused in [true, false] {
                check(
                    &format!("transpose {shape:?} {dtype}"),
                    dtype,
                    &run(&k, &x, fused),
                    &want,
                );
            }
        }
        // x @ x, square and odd, integers whose sums f32 holds exactly.
        let m = 301;
        let x = HostArray::from_values(dtype, &[m, m], &data(m * m, false)).unwrap();
        let v = x.values();
        let want: Vec<f64> = (0..m * m)
            .map(|o| (0..m).map(|p| v[(o / m) * m + p] * v[p * m + o % m]).sum())
            .collect();
        let k = call("dot", &[m, m], &[m, m], dtype, |pl, x| {
            pl.dot(x, x).astype(x.dtype())
        });
        for fused in [true, false] {
            check(&format!("dot {dtype}"), dtype, &run(&k, &x, fused), &want);
        }
    }
}

/// Dots whose operands are loaded from several refs: the loads are lone copies, or
/// copies fused with an earlier result's store when their lengths agree (the ring
/// collective matmuls' pattern). Each dot reads the refs themselves, never a copy in
/// the kernel's values, and the result equals the unfused run's and exact sums.
#[test]
fn dots_of_several_operands_read_them_where_they_are() {
    let (m, k) = (96, 40);
    for dtype in [DType::F32, DType::BF16] {
        let spec = GridSpec::new()
            .input("a", MemorySpace::Vmem, &[m, k], dtype)
            .input("b", MemorySpace::Vmem, &[m, k], dtype)
            .input("w", MemorySpace::Vmem, &[k, k], dtype)
            .output("p", MemorySpace::Vmem, &[m, k], dtype)
            .output("q", MemorySpace::Vmem, &[m, k], dtype);
        let c = PallasCall::new("dots", spec, move |pl, r| {
            let w = pl.load(r.r("w"));
            let p = pl.dot(&pl.load(r.r("a")), &w);
            pl.store(r.r("p"), &p.astype(dtype));
            // b's load (m·k elements) may join p's store (m·k) in one region.
            let q = pl.dot(&pl.load(r.r("b")), &w);
            pl.store(r.r("q"), &q.astype(dtype));
        });
        let mesh = Mesh::new(1, "x").unwrap();
        let plan = tpusim::run::Job::call(c.clone(), mesh.clone())
            .plan()
            .unwrap();
        let cpu = CpuPlan::of(&plan.program, &plan.schedule);
        let fused = cpu.fused();
        let ops = fused.ops.as_deref().unwrap_or(&plan.schedule.ops);
        let allocs = &plan.program.layout.allocs;
        let mut dots = 0;
        for s in &fused.steps {
            let tpusim::device_sim::fuse::Step::Op(i) = s else {
                continue;
            };
            let tpusim::ir::DataOp::Compute(op) = &ops[*i] else {
                continue;
            };
            dots += 1;
            for src in &op.srcs {
                let a = &allocs[src.view.alloc()];
                assert!(!a.holds_values(), "{dtype}: a dot reads {}", a.name);
            }
        }
        assert_eq!(dots, 2, "{dtype}: {fused:#?}");
        let (a, b, w) = (
            data(m * k, false),
            data(m * k + 5, false)[5..].to_vec(),
            data(k * k + 11, false)[11..]
                .iter()
                .map(|v| (v / 4.0).round())
                .collect::<Vec<_>>(),
        );
        let product = |x: &[f64]| -> Vec<f64> {
            (0..m * k)
                .map(|o| (0..k).map(|j| x[(o / k) * k + j] * w[j * k + o % k]).sum())
                .collect()
        };
        let arr = |v: &[f64], shape: &[usize]| HostArray::from_values(dtype, shape, v).unwrap();
        let inputs = vec![vec![arr(&a, &[m, k]), arr(&b, &[m, k]), arr(&w, &[k, k])]];
        for fused in [true, false] {
            let mut exec = match fused {
                true => CpuExecutor::new(),
                false => CpuExecutor::unfused(),
            };
            let out = simulate(&c, &mesh, &inputs, &mut exec).unwrap();
            check(
                &format!("p {dtype}"),
                dtype,
                &out[0][0].values(),
                &product(&a),
            );
            check(
                &format!("q {dtype}"),
                dtype,
                &out[0][1].values(),
                &product(&b),
            );
        }
    }
}
