//! Reductions that a fused region folds as its blocks go (the CPU executor's
//! `Joins::reduces`): a float reduction over trailing dimensions of an elementwise
//! chain's result, and a softmax's max and sum. Each is held to values computed here
//! (exact for small integers, rounded once to the dtype) and to the unfused run bit for
//! bit, in f32, bf16, f16 and i32 (which stays unfused), at odd group lengths (shorter
//! than the fold's sixteen lanes, not a multiple of them, longer than a block, one
//! group per core's run), with NaNs and signed zeros among the data; and the fused
//! plan is checked to fold them (so that a wrong fold cannot pass as an unfused op).

mod common;

use common::simulate;
use tpusim::device_sim::cpu::{CpuExecutor, CpuPlan};
use tpusim::device_sim::fuse::Step;
use tpusim::kernel::{Ctx, GridSpec, MemorySpace, PallasCall, Value};
use tpusim::{DType, HostArray, Mesh};

type Reduce = for<'c> fn(&Value<'c>, &[usize]) -> Value<'c>;

/// How a reduction combines two values, in f64.
type Combine = fn(f64, f64) -> f64;

/// Small integers (exact sums), with a NaN and a -0 every 9973 elements when `specials`.
fn data(n: usize, specials: bool) -> Vec<f64> {
    (0..n)
        .map(|i| match i % 9973 {
            17 if specials => f64::NAN,
            29 if specials => -0.0,
            _ => ((i * 7919) % 41) as f64 - 20.0,
        })
        .collect()
}

/// Outputs of `c` on `x`, fused (checking that the plan folds `folds` reductions into
/// regions and runs none alone) or unfused.
fn run(c: &PallasCall, x: &HostArray, fused: bool, folds: usize) -> Vec<HostArray> {
    let mesh = Mesh::new(1, "x").unwrap();
    if fused {
        let plan = tpusim::run::Job::call(c.clone(), mesh.clone())
            .plan()
            .unwrap();
        let cpu = CpuPlan::of(&plan.program, &plan.schedule);
        let folded: usize = cpu
            .fused()
            .steps
            .iter()
            .map(|s| match s {
                Step::Region(r) => r.reduces.len(),
                Step::Op(_) => 0,
            })
            .sum();
        let steps: Vec<String> = cpu
            .fused()
            .steps
            .iter()
            .map(|s| match s {
                Step::Region(r) => format!("region of ops {:?}", r.ops),
                Step::Op(i) => format!("op {i}"),
            })
            .collect();
        assert_eq!(
            folded,
            folds,
            "{} {}: reductions folded in {steps:?}",
            c.name(),
            x.dtype
        );
    }
    let mut exec = match fused {
        true => CpuExecutor::new(),
        false => CpuExecutor::unfused(),
    };
    simulate(c, &mesh, &[vec![x.clone()]], &mut exec)
        .unwrap()
        .remove(0)
}

/// True when `a` and `b` are the same value (NaN matches NaN, -0 only -0).
fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || (a == b && a.is_sign_negative() == b.is_sign_negative())
}

/// `y = reduce(x * 2 + 1, trailing axes)` and `z = x * 2 + 1` (when `keep`: the
/// chain's result is stored as well as folded).
fn chain(shape: &[usize], out: &[usize], dtype: DType, f: Reduce, keep: bool) -> PallasCall {
    let mut spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, shape, dtype)
        .output("y", MemorySpace::Vmem, out, dtype);
    if keep {
        spec = spec.output("z", MemorySpace::Vmem, shape, dtype);
    }
    let axes: Vec<usize> = (out.len()..shape.len()).collect();
    PallasCall::new("fold", spec, move |pl, a| {
        let x = pl.load(a.r("x"));
        let v = &(&x * 2.0) + 1.0;
        pl.store(a.r("y"), &f(&v, &axes));
        if keep {
            pl.store(a.r("z"), &v);
        }
    })
}

#[test]
fn reductions_folded_into_regions_equal_their_definition_and_the_unfused_run() {
    // (shape, kept dims): groups of 613 (608 in lanes and 5 after), 7 (none in lanes),
    // 16, 2048 (two blocks), and 155,100 (one group per core's run).
    let cases: [(&[usize], usize); 5] = [
        (&[700, 613], 1),
        (&[20011, 7], 1),
        (&[4097, 16], 1),
        (&[70, 2048], 1),
        (&[3, 300, 517], 1),
    ];
    let reductions: [(&str, Reduce, Combine, f64); 3] = [
        ("sum", |v, a| v.sum(a), |a, b| a + b, 0.0),
        (
            "max",
            |v, a| v.max(a),
            |a, b| {
                if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else {
                    a.max(b)
                }
            },
            f64::NEG_INFINITY,
        ),
        (
            "min",
            |v, a| v.min(a),
            |a, b| {
                if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else {
                    a.min(b)
                }
            },
            f64::INFINITY,
        ),
    ];
    for (shape, kept) in cases {
        let n: usize = shape.iter().product();
        let out = &shape[..kept];
        let rows: usize = out.iter().product();
        let k = n / rows;
        for dtype in [DType::F32, DType::BF16, DType::F16, DType::I32] {
            let specials = dtype.is_float();
            let x = HostArray::from_values(dtype, shape, &data(n, specials)).unwrap();
            let xv = x.values();
            // The chain's values, as the dtype holds them (exact: small integers).
            let v: Vec<f64> = xv.iter().map(|a| a * 2.0 + 1.0).collect();
            for (name, f, op, init) in reductions {
                if !dtype.is_float() && name != "sum" {
                    continue;
                }
                let want: Vec<f64> = (0..rows)
                    .map(|g| v[g * k..(g + 1) * k].iter().fold(init, |a, &b| op(a, b)))
                    .collect();
                let want = HostArray::from_values(dtype, &[rows], &want)
                    .unwrap()
                    .values();
                for keep in [false, true] {
                    let c = chain(shape, out, dtype, f, keep);
                    let folds = usize::from(dtype.is_float());
                    let fused = run(&c, &x, true, folds);
                    let unfused = run(&c, &x, false, 0);
                    let what = format!("{name} {shape:?} {dtype} keep {keep}");
                    assert_eq!(fused[0].words, unfused[0].words, "{what}: fused, unfused");
                    for (i, (g, w)) in fused[0].values().iter().zip(&want).enumerate() {
                        assert!(same(*g, *w), "{what}: group {i}: {g} for {w}");
                    }
                    if keep {
                        assert_eq!(fused[1].words, unfused[1].words, "{what}: stored chain");
                        let z = fused[1].values();
                        assert!(z.iter().zip(&v).all(|(a, b)| same(*a, *b)), "{what}: z");
                    }
                }
            }
        }
    }
}

/// Row values `v` (the kept dims of `shape`) as `kept` (the last dim 1), then spread
/// over `shape`.
fn back<'c>(v: &Value<'c>, kept: &[usize], shape: &[usize]) -> Value<'c> {
    let r = shape.len();
    let dims: Vec<usize> = (0..r - 1).collect();
    let all: Vec<usize> = (0..r).collect();
    v.broadcast_in_dim(kept, &dims)
        .broadcast_in_dim(shape, &all)
}

/// `y = softmax(x)` over the last axis, in f32, stored as `dtype`.
fn softmax(shape: &[usize], dtype: DType) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, shape, dtype)
        .output("y", MemorySpace::Vmem, shape, dtype);
    let shape = shape.to_vec();
    PallasCall::new("softmax", spec, move |pl: &Ctx, a| {
        let r = shape.len();
        let mut kept = shape.clone();
        kept[r - 1] = 1;
        let x = pl.load(a.r("x")).astype(DType::F32);
        let m = back(&x.max(&[r - 1]), &kept, &shape);
        let e = pl.exp(&(&x - &m));
        let s = back(&e.sum(&[r - 1]), &kept, &shape);
        pl.store(a.r("y"), &(&e / &s).astype(dtype));
    })
}

#[test]
fn softmax_folds_both_reductions_and_equals_the_unfused_run() {
    for shape in [vec![300usize, 613], vec![1000, 1024], vec![5, 40, 9]] {
        let n: usize = shape.iter().product();
        let k = shape[shape.len() - 1];
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            let vals: Vec<f64> = data(n, false).iter().map(|v| v / 8.0).collect();
            let x = HostArray::from_values(dtype, &shape, &vals).unwrap();
            let c = softmax(&shape, dtype);
            let fused = run(&c, &x, true, 2);
            let unfused = run(&c, &x, false, 0);
            let what = format!("softmax {shape:?} {dtype}");
            assert_eq!(fused[0].words, unfused[0].words, "{what}: fused, unfused");
            // Against f64 math on the same inputs, to the dtype's precision.
            let xv = x.values();
            let tol = if dtype == DType::F32 { 1e-5 } else { 1e-2 };
            for (row, got) in xv.chunks(k).zip(fused[0].values().chunks(k)) {
                let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
                for (v, g) in row.iter().zip(got) {
                    let w = (v - m).exp() / s;
                    assert!((g - w).abs() <= tol * w.max(1e-3), "{what}: {g} for {w}");
                }
            }
        }
    }
}

/// Rows of `k` values in [-4, 4) (small multiples of 1/8), with a row of NaN at one
/// element, one with +inf, one with -inf entries, and one of zeros of both signs.
fn rows_with_specials(rows: usize, k: usize) -> Vec<f64> {
    let mut v: Vec<f64> = (0..rows * k)
        .map(|i| (((i * 7919) % 64) as f64 - 32.0) / 8.0)
        .collect();
    let special = |v: &mut Vec<f64>, row: usize, f: &dyn Fn(usize) -> Option<f64>| {
        if row < rows {
            for j in 0..k {
                if let Some(x) = f(j) {
                    v[row * k + j] = x;
                }
            }
        }
    };
    special(&mut v, 1, &|j| (j == k / 2).then_some(f64::NAN));
    special(&mut v, 2, &|j| (j == 3 % k).then_some(f64::INFINITY));
    special(&mut v, 3, &|j| (j % 3 == 0).then_some(f64::NEG_INFINITY));
    special(&mut v, 4, &|j| Some(if j % 2 == 0 { -0.0 } else { 0.0 }));
    v
}

/// The steps of `c`'s CPU plan that run as a chain, (first step, regions).
fn chains(c: &PallasCall) -> Vec<(usize, usize)> {
    let mesh = Mesh::new(1, "x").unwrap();
    let plan = tpusim::run::Job::call(c.clone(), mesh).plan().unwrap();
    CpuPlan::of(&plan.program, &plan.schedule).chains()
}

#[test]
fn softmax_regions_run_per_row_chunk_equal_the_unfused_run_and_f64() {
    for shape in [
        vec![7usize, 2500],
        vec![300, 613],
        vec![1100, 1024],
        vec![5, 40, 9],
    ] {
        let n: usize = shape.iter().product();
        let k = shape[shape.len() - 1];
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            let x = HostArray::from_values(dtype, &shape, &rows_with_specials(n / k, k)).unwrap();
            let c = softmax(&shape, dtype);
            // max; exp and sum; divide (and copies the plan makes regions of): one chain.
            let found = chains(&c);
            assert!(
                found.len() == 1 && found[0].1 >= 3,
                "softmax {shape:?} {dtype}: chained: {found:?}"
            );
            let fused = run(&c, &x, true, 2);
            let unfused = run(&c, &x, false, 0);
            let what = format!("softmax {shape:?} {dtype}");
            assert_eq!(fused[0].words, unfused[0].words, "{what}: fused, unfused");
            let tol = if dtype == DType::F32 { 1e-5 } else { 1e-2 };
            let xv = x.values();
            for (r, (row, got)) in xv.chunks(k).zip(fused[0].values().chunks(k)).enumerate() {
                let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
                for (v, g) in row.iter().zip(got) {
                    let w = (v - m).exp() / s;
                    if row.iter().any(|v| v.is_nan()) || m == f64::INFINITY {
                        // A NaN, or inf - inf: the row's results are NaN.
                        assert!(g.is_nan(), "{what}: row {r}: {g} for NaN");
                    } else {
                        assert!(
                            (g - w).abs() <= tol * w.max(1e-3),
                            "{what}: row {r}: {g} for {w}"
                        );
                    }
                }
            }
        }
    }
}

/// `y = sum(x as f32)` over the last axis, stored as `dtype` (a 16-bit float's sum as
/// JAX writes it: widened to f32 first) and spread back over the rows.
fn sum_widened(shape: &[usize], dtype: DType) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, shape, dtype)
        .output("y", MemorySpace::Vmem, shape, dtype);
    let shape = shape.to_vec();
    PallasCall::new("sum_widened", spec, move |pl: &Ctx, a| {
        let r = shape.len();
        let mut kept = shape.clone();
        kept[r - 1] = 1;
        let x = pl.load(a.r("x")).astype(DType::F32);
        let s = back(&x.sum(&[r - 1]), &kept, &shape).astype(dtype);
        pl.store(a.r("y"), &s);
    })
}

#[test]
fn a_widened_16_bit_sum_is_folded_from_the_16_bit_register() {
    for shape in [vec![7usize, 2500], vec![300, 613], vec![1100, 1024]] {
        let n: usize = shape.iter().product();
        let k = shape[shape.len() - 1];
        for dtype in [DType::BF16, DType::F16] {
            let x = HostArray::from_values(dtype, &shape, &rows_with_specials(n / k, k)).unwrap();
            let c = sum_widened(&shape, dtype);
            let mesh = Mesh::new(1, "x").unwrap();
            let plan = tpusim::run::Job::call(c.clone(), mesh).plan().unwrap();
            let cpu = CpuPlan::of(&plan.program, &plan.schedule);
            // The folding region loads the 16-bit input and folds it: no f32 copy.
            let folding: Vec<_> = cpu
                .fused()
                .steps
                .iter()
                .filter_map(|s| match s {
                    Step::Region(r) if !r.reduces.is_empty() => Some(r),
                    _ => None,
                })
                .collect();
            let what = format!("sum {shape:?} {dtype}");
            assert_eq!(folding.len(), 1, "{what}: one folding region");
            let r = folding[0];
            assert!(
                r.regs[r.reduces[0].reg].raw,
                "{what}: folds the stored register"
            );
            assert!(r.outputs.is_empty(), "{what}: no f32 copy stored");
            let fused = run(&c, &x, true, 1);
            let unfused = run(&c, &x, false, 0);
            assert_eq!(fused[0].words, unfused[0].words, "{what}: fused, unfused");
            // Small multiples of 1/8: the f64 sum is exact, rounded once to the dtype.
            let xv = x.values();
            for (row, got) in xv.chunks(k).zip(fused[0].values().chunks(k)) {
                let s: f64 = row.iter().sum();
                let want = HostArray::from_values(dtype, &[1], &[s]).unwrap().values()[0];
                assert!(
                    got.iter().all(|g| same(*g, want)),
                    "{what}: {} for {want}",
                    got[0]
                );
            }
        }
    }
}
