//! Compute ops on the GPU against the CPU twin: every kind and dtype (constants and
//! bitcasts among the data movement), odd shapes,
//! scalars, sizes crossing workgroups and binding windows. Exact ops must agree bit
//! for bit (a NaN matches any NaN: payloads are not specified); the transcendentals
//! and division within the bounds of README's table; float sums and dot products
//! within the k-term bound of an f64 reference.

mod common;

use common::{gpu, simulate};
use std::sync::Arc;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::device_sim::Executor;
use tpusim::ir::{Binary, Comparison, ComputeKind, DotDims, Reduction, Unary};
use tpusim::kernel::{GridSpec, MemorySpace, PallasCall};
use tpusim::{DType, HostArray, Mesh};

/// One op of a test kernel: its kind on loaded inputs `args`, giving `shape` `dtype`.
#[derive(Clone, Debug)]
struct Case {
    kind: ComputeKind,
    args: Vec<usize>,
    shape: Vec<usize>,
    dtype: DType,
}

fn case(kind: ComputeKind, args: &[usize], shape: &[usize], dtype: DType) -> Case {
    Case {
        kind,
        args: args.to_vec(),
        shape: shape.to_vec(),
        dtype,
    }
}

/// A ref's shape for a value's: scalars live in refs of one element.
fn ref_shape(shape: &[usize]) -> Vec<usize> {
    if shape.is_empty() {
        vec![1]
    } else {
        shape.to_vec()
    }
}

/// The kernel that loads every input, runs every case on them and stores each result
/// in its own output, on one device (scalars through one-element refs).
fn call_of(inputs: &[HostArray], cases: &[Case]) -> PallasCall {
    let mut spec = GridSpec::new();
    for (i, a) in inputs.iter().enumerate() {
        spec = spec.input(
            &format!("x{i}"),
            MemorySpace::Vmem,
            &ref_shape(&a.shape),
            a.dtype,
        );
    }
    for (k, c) in cases.iter().enumerate() {
        spec = spec.output(
            &format!("o{k}"),
            MemorySpace::Vmem,
            &ref_shape(&c.shape),
            c.dtype,
        );
    }
    let n = inputs.len();
    let scalar: Vec<bool> = inputs.iter().map(|a| a.shape.is_empty()).collect();
    let cases: Arc<Vec<Case>> = Arc::new(cases.to_vec());
    PallasCall::new("values_gpu", spec, move |pl, a| {
        let vals: Vec<_> = (0..n)
            .map(|i| {
                let v = pl.load(a.r(i));
                if scalar[i] {
                    v.reshape(&[])
                } else {
                    v
                }
            })
            .collect();
        for (k, c) in cases.iter().enumerate() {
            let args: Vec<_> = c.args.iter().map(|&i| &vals[i]).collect();
            let v = pl.compute(c.kind.clone(), &args, &c.shape, c.dtype);
            if c.shape.is_empty() {
                pl.store(a.r(n + k), &v.reshape(&[1]));
            } else {
                pl.store(a.r(n + k), &v);
            }
        }
    })
}

/// The cases' results on the CPU and on the GPU (`exec`).
fn both_on(
    inputs: &[HostArray],
    cases: &[Case],
    exec: &mut dyn Executor,
) -> (Vec<HostArray>, Vec<HostArray>) {
    let call = call_of(inputs, cases);
    let mesh = Mesh::new(1, "x").unwrap();
    let inputs: Vec<HostArray> = inputs
        .iter()
        .map(|a| shaped(a.clone(), &ref_shape(&a.shape)))
        .collect();
    let inputs = &inputs[..];
    let cpu = simulate(&call, &mesh, &[inputs.to_vec()], &mut CpuExecutor::new())
        .unwrap()
        .remove(0);
    let g = simulate(&call, &mesh, &[inputs.to_vec()], exec)
        .unwrap_or_else(|e| panic!("{e}"))
        .remove(0);
    (cpu, g)
}

fn both(inputs: &[HostArray], cases: &[Case]) -> (Vec<HostArray>, Vec<HostArray>) {
    both_on(inputs, cases, &mut *gpu())
}

fn is_nan(t: DType, w: u32) -> bool {
    t.is_float() && t.value_of(w).is_nan()
}

/// Bit-identical (NaN matches NaN).
fn assert_exact(what: &str, cpu: &HostArray, g: &HostArray) {
    assert_eq!(cpu.words.len(), g.words.len(), "{what}");
    let t = cpu.dtype;
    let bad: Vec<(usize, u32, u32)> = cpu
        .words
        .iter()
        .zip(&g.words)
        .enumerate()
        .filter(|(_, (a, b))| a != b && !(is_nan(t, **a) && is_nan(t, **b)))
        .map(|(i, (a, b))| (i, *a, *b))
        .take(8)
        .collect();
    assert!(
        bad.is_empty(),
        "{what} {t}: {} of {} differ, first (index, cpu, gpu): {bad:x?}",
        cpu.words
            .iter()
            .zip(&g.words)
            .filter(|(a, b)| a != b && !(is_nan(t, **a) && is_nan(t, **b)))
            .count(),
        cpu.words.len()
    );
}

/// Distance in units in the last place of `t` between two values (NaNs and
/// infinities must match exactly: then 0; otherwise infinity).
fn ulps(t: DType, a: u32, b: u32) -> f64 {
    let (x, y) = (t.value_of(a), t.value_of(b));
    if x.is_nan() || y.is_nan() {
        return if x.is_nan() && y.is_nan() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    if x.is_infinite() || y.is_infinite() {
        return if x == y { 0.0 } else { f64::INFINITY };
    }
    let (digits, min_exp) = match t {
        DType::F32 => (24, -126),
        DType::BF16 => (8, -126),
        _ => (11, -14),
    };
    let m = x.abs().max(y.abs());
    let e = if m == 0.0 {
        min_exp
    } else {
        (m.log2().floor() as i32).max(min_exp)
    };
    let ulp = 2f64.powi(e - (digits - 1));
    (x - y).abs() / ulp
}

/// Within `max` ulps of the CPU's result, or `abs` absolutely.
fn assert_close(what: &str, cpu: &HostArray, g: &HostArray, max: f64, abs: f64) -> f64 {
    assert_close_by(what, cpu, g, &|_| max, abs)
}

/// Within `max(i)` ulps of the CPU's result at element `i`, or `abs` absolutely; the
/// worst error in ulps.
fn assert_close_by(
    what: &str,
    cpu: &HostArray,
    g: &HostArray,
    max: &dyn Fn(usize) -> f64,
    abs: f64,
) -> f64 {
    let t = cpu.dtype;
    let mut worst = 0.0f64;
    for (i, (&a, &b)) in cpu.words.iter().zip(&g.words).enumerate() {
        let u = ulps(t, a, b);
        let (x, y) = (t.value_of(a), t.value_of(b));
        let ok = u <= max(i) || (x - y).abs() <= abs;
        assert!(
            ok,
            "{what} {t}: element {i}: cpu {x:e} gpu {y:e} ({u} ulps)"
        );
        if (x - y).abs() > abs {
            worst = worst.max(u);
        }
    }
    worst
}

/// The largest error in ulps and the largest absolute error (finite results).
fn measured(cpu: &HostArray, g: &HostArray) -> (f64, f64) {
    let t = cpu.dtype;
    let mut out = (0.0f64, 0.0f64);
    for (&a, &b) in cpu.words.iter().zip(&g.words) {
        let (x, y) = (t.value_of(a), t.value_of(b));
        if x.is_finite() && y.is_finite() {
            out.0 = out.0.max(ulps(t, a, b));
            out.1 = out.1.max((x - y).abs());
        }
    }
    out
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e3779b97f4a7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545f4914f6cdd1d)
    }
    fn bits(&mut self) -> u32 {
        (self.next() >> 32) as u32
    }
    /// Uniform in [lo, hi).
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next() >> 11) as f64 / (1u64 << 53) as f64)
    }
}

/// f32 values every exact op must handle: signed zeros, infinities, NaN, the largest
/// and smallest normals, subnormals, halves (rounding ties), the 2^23 boundary.
fn specials() -> Vec<f32> {
    vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        1.5,
        -1.5,
        2.5,
        -2.5,
        0.49999997,
        -0.49999997,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MAX,
        -f32::MAX,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        1e-40,
        -1e-40,
        8388607.5,
        -8388607.5,
        8388608.0,
        16777217.0,
        2147483648.0,
        -2147483904.0,
        300.7,
        -129.5,
        255.5,
        1e10,
        -3.75,
    ]
}

/// `n` elements of `t` for exact ops: specials, then values mixing small integers and
/// halves (exact arithmetic), uniform reals and random bit patterns.
fn exact_data(t: DType, n: usize, seed: u64) -> HostArray {
    let mut r = Rng::new(seed);
    let words: Vec<u32> = (0..n)
        .map(|i| match t {
            DType::F32 => {
                let s = specials();
                if i < s.len() {
                    return s[i].to_bits();
                }
                match r.next() % 3 {
                    0 => ((r.next() % 64) as f32 / 2.0 - 16.0).to_bits(),
                    1 => (r.uniform(-100.0, 100.0) as f32).to_bits(),
                    _ => r.bits(),
                }
            }
            DType::F16 | DType::BF16 => {
                let s = specials();
                if i < s.len() {
                    return t.bits_of(s[i] as f64);
                }
                match r.next() % 2 {
                    0 => t.bits_of((r.next() % 64) as f64 / 2.0 - 16.0),
                    _ => r.bits() & 0xffff,
                }
            }
            DType::I32 => match i {
                0 => i32::MIN as u32,
                1 => i32::MAX as u32,
                2 => 0,
                3 => 1,
                4 => u32::MAX,
                _ if r.next().is_multiple_of(2) => ((r.next() % 41) as u32).wrapping_sub(20),
                _ => r.bits(),
            },
            DType::I8 => (r.bits() as u8 as i8) as i32 as u32,
            DType::U8 => r.bits() & 0xff,
            DType::Bool => r.bits() & 1,
        })
        .collect();
    let shape = if n == 1 { vec![] } else { vec![n] };
    HostArray::from_words(t, &shape, words).unwrap()
}

/// `a` with another shape of the same size.
fn shaped(a: HostArray, shape: &[usize]) -> HostArray {
    HostArray::from_words(a.dtype, shape, a.words).unwrap()
}

const DTYPES: [DType; 7] = [
    DType::F32,
    DType::BF16,
    DType::F16,
    DType::I32,
    DType::I8,
    DType::U8,
    DType::Bool,
];

fn unary_ops(t: DType) -> Vec<Unary> {
    if t.is_float() {
        vec![
            Unary::Neg,
            Unary::Abs,
            Unary::Sign,
            Unary::Floor,
            Unary::Ceil,
            Unary::Round,
            Unary::RoundEven,
            Unary::IntegerPow(2),
            Unary::IntegerPow(3),
            Unary::IntegerPow(0),
        ]
    } else if t == DType::Bool {
        vec![Unary::Not]
    } else {
        vec![
            Unary::Neg,
            Unary::Abs,
            Unary::Sign,
            Unary::Not,
            Unary::IntegerPow(3),
            Unary::IntegerPow(0),
            Unary::IntegerPow(-2),
        ]
    }
}

fn binary_ops(t: DType) -> Vec<Binary> {
    use Binary::*;
    if t.is_float() {
        vec![Add, Sub, Mul, Max, Min, Rem]
    } else if t == DType::Bool {
        vec![And, Or, Xor]
    } else {
        vec![
            Add,
            Sub,
            Mul,
            Div,
            Rem,
            Max,
            Min,
            And,
            Or,
            Xor,
            ShiftLeft,
            ShiftRightArithmetic,
            ShiftRightLogical,
        ]
    }
}

const COMPARISONS: [Comparison; 6] = [
    Comparison::Eq,
    Comparison::Ne,
    Comparison::Lt,
    Comparison::Le,
    Comparison::Gt,
    Comparison::Ge,
];

#[test]
fn exact_elementwise_ops_are_bit_identical_in_every_dtype() {
    // [37, 41]: 1517 elements, six workgroups; a scalar broadcast on either side.
    let shape = [37usize, 41];
    let n = 37 * 41;
    for t in DTYPES {
        let mut x = shaped(exact_data(t, n, 1), &shape);
        let mut y = shaped(exact_data(t, n, 2), &shape);
        if !t.is_float() && t != DType::Bool {
            // Small shift amounts and divisors too (the random ones are mostly huge).
            for (i, w) in y.words.iter_mut().enumerate().skip(8) {
                if i % 3 == 0 {
                    // -1 to 9, as the dtype stores them (a u8 -1 is 255).
                    let v = (i as u32 % 11).wrapping_sub(1);
                    *w = if t == DType::U8 { v & 0xff } else { v };
                }
            }
        }
        if t.is_float() {
            // The same values in both at some places (ties of max/min, == compares).
            for i in (0..n).step_by(7) {
                x.words[i] = y.words[i];
            }
        }
        let p = shaped(exact_data(DType::Bool, n, 3), &shape);
        let s = exact_data(t, 1, 4);
        let ps = HostArray::from_words(DType::Bool, &[], vec![1]).unwrap();
        let inputs = vec![x, y, p, s, ps];
        let mut cases = Vec::new();
        for u in unary_ops(t) {
            cases.push(case(ComputeKind::Unary(u), &[0], &shape, t));
        }
        for b in binary_ops(t) {
            cases.push(case(ComputeKind::Binary(b), &[0, 1], &shape, t));
        }
        let op = binary_ops(t)[0];
        cases.push(case(ComputeKind::Binary(op), &[3, 1], &shape, t));
        cases.push(case(ComputeKind::Binary(op), &[0, 3], &shape, t));
        cases.push(case(ComputeKind::Binary(op), &[3, 3], &[], t));
        for k in COMPARISONS {
            cases.push(case(ComputeKind::Compare(k), &[0, 1], &shape, DType::Bool));
        }
        cases.push(case(
            ComputeKind::Compare(Comparison::Lt),
            &[3, 0],
            &shape,
            DType::Bool,
        ));
        cases.push(case(ComputeKind::Select, &[2, 0, 1], &shape, t));
        cases.push(case(ComputeKind::Select, &[4, 3, 1], &shape, t));
        cases.push(case(ComputeKind::Select, &[2, 0, 3], &shape, t));
        let (c, g) = both(&inputs, &cases);
        for (k, cs) in cases.iter().enumerate() {
            assert_exact(&format!("{:?} {:?}", cs.kind, cs.args), &c[k], &g[k]);
        }
    }
}

#[test]
fn conversions_between_every_pair_of_dtypes_are_bit_identical() {
    let n = 700;
    for from in DTYPES {
        let x = exact_data(from, n, 10 + from as u64);
        let cases: Vec<Case> = DTYPES
            .iter()
            .filter(|&&to| to != from)
            .map(|&to| case(ComputeKind::Convert, &[0], &[n], to))
            .collect();
        let (c, g) = both(&[x], &cases);
        for (k, cs) in cases.iter().enumerate() {
            assert_exact(&format!("convert {from} to {}", cs.dtype), &c[k], &g[k]);
        }
    }
}

/// f32 inputs for a function with domain `lo..hi` (uniform, and log-uniform in
/// magnitude when `log`), plus the specials every function must get exactly right.
fn domain(n: usize, seed: u64, lo: f64, hi: f64, log: bool) -> Vec<f32> {
    let mut r = Rng::new(seed);
    let mut v: Vec<f32> = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1.0,
        -1.0,
    ];
    while v.len() < n {
        let x = if log {
            let m = r.uniform(lo.ln(), hi.ln()).exp();
            if r.next().is_multiple_of(4) {
                -m
            } else {
                m
            }
        } else {
            r.uniform(lo, hi)
        };
        v.push(x as f32);
    }
    v
}

/// Asserts that `op` on the f32 `inputs` (one or two operands) is within `max` ulps of
/// the CPU's result or `abs` absolutely, and the same op in bf16 and f16 (computed in
/// f32, rounded once) within one ulp of the 16-bit result; prints the largest errors.
fn within(name: &str, kind: ComputeKind, inputs: &[Vec<f32>], max: f64, abs: f64) {
    within_by(name, kind, inputs, &|_| max, abs)
}

/// [`within`] with a bound per element.
fn within_by(
    name: &str,
    kind: ComputeKind,
    inputs: &[Vec<f32>],
    max: &dyn Fn(usize) -> f64,
    abs: f64,
) {
    let n = inputs[0].len();
    let arrays: Vec<HostArray> = inputs
        .iter()
        .map(|v| HostArray::from_f32(&[n], v.clone()).unwrap())
        .collect();
    let args: Vec<usize> = (0..inputs.len()).collect();
    let mut cases = vec![case(kind.clone(), &args, &[n], DType::F32)];
    let mut all = arrays.clone();
    for t in [DType::BF16, DType::F16] {
        let k0 = all.len();
        for v in inputs {
            let vals: Vec<f64> = v.iter().map(|&x| x as f64).collect();
            all.push(HostArray::from_values(t, &[n], &vals).unwrap());
        }
        let args: Vec<usize> = (k0..all.len()).collect();
        cases.push(case(kind.clone(), &args, &[n], t));
    }
    let (c, g) = both(&all, &cases);
    assert_close_by(name, &c[0], &g[0], max, abs);
    let (u, e) = measured(&c[0], &g[0]);
    let mut line = format!("{name}: f32 {u:.1} ulps (abs {e:.1e})");
    for k in 1..3 {
        assert_close(name, &c[k], &g[k], 1.0, 0.0);
        line += &format!(", {} {:.0} ulps", cases[k].dtype, measured(&c[k], &g[k]).0);
    }
    eprintln!("{line}");
}

#[test]
fn transcendentals_and_division_are_within_their_bounds() {
    use Binary as B;
    use Unary as U;
    let n = 4000;
    let un = |u| ComputeKind::Unary(u);
    within(
        "exp",
        un(U::Exp),
        &[domain(n, 1, -87.0, 88.0, false)],
        2.0,
        0.0,
    );
    within(
        "exp2",
        un(U::Exp2),
        &[domain(n, 2, -126.0, 127.0, false)],
        2.0,
        0.0,
    );
    let mut e = domain(n, 3, -20.0, 20.0, false);
    e.extend(domain(n, 4, 1e-9, 1.0, true));
    within("expm1", un(U::Expm1), &[e], 3.0, 0.0);
    let mut l = domain(n, 5, 1e-38, 1e38, true);
    l.extend(domain(n, 6, 0.5, 2.0, false));
    l.extend([1e-40, 1e-45, 1.0000001, 0.99999994]);
    within("log", un(U::Log), &[l], 2.0, 0.0);
    let mut lp = domain(n, 7, -1.0, 3.0, false);
    lp.extend(domain(n, 8, 1e-10, 1e30, true));
    lp.extend([-1.0, -2.0, -0.9999999]);
    within("log1p", un(U::Log1p), &[lp], 3.0, 0.0);
    let mut q = domain(n, 9, 1e-38, 1e38, true);
    q.extend([1e-40, 1e-45, 4.0, 2.0]);
    within("sqrt", un(U::Sqrt), &[q.clone()], 1.0, 0.0);
    within("rsqrt", un(U::Rsqrt), &[q], 3.0, 0.0);
    let mut th = domain(n, 10, -10.0, 10.0, false);
    th.extend(domain(n, 11, 1e-10, 1.0, true));
    // The CPU's tanh and erf are within 6 and 7 ulps (rational functions, as XLA's):
    // 5 ulps from lavapipe's measured here, one more for other GPUs.
    within("tanh", un(U::Tanh), &[th], 6.0, 0.0);
    within(
        "logistic",
        un(U::Logistic),
        &[domain(n, 12, -90.0, 90.0, false)],
        4.0,
        0.0,
    );
    let mut tr = domain(n, 13, -100.0, 100.0, false);
    tr.extend(domain(n, 14, -4.0, 4.0, false));
    tr.extend(domain(n, 15, 1e-10, 1.0, true));
    within("sin", un(U::Sin), &[tr.clone()], 3.0, 1e-7);
    within("cos", un(U::Cos), &[tr], 3.0, 1e-7);
    let mut ef = domain(n, 16, -5.0, 5.0, false);
    ef.extend(domain(n, 17, 1e-10, 1.0, true));
    within("erf", un(U::Erf), &[ef], 6.0, 0.0);
    let dx = domain(n, 18, 1e-30, 1e30, true);
    let mut dy = domain(n, 19, 1e-30, 1e30, true);
    dy[7..12].copy_from_slice(&[1e-40, -3e-39, 1e38, -2e38, f32::MAX]);
    within("div", ComputeKind::Binary(B::Div), &[dx, dy], 2.5, 0.0);
    let mut px = domain(n, 20, 1e-3, 10.0, true);
    let mut py = domain(n, 21, -10.0, 10.0, false);
    for i in (20..n).step_by(5) {
        py[i] = (py[i].round()).clamp(-9.0, 9.0);
        px[i] = -px[i];
    }
    // pow's bound has the form of WGSL's (inherited from exp2(y log2 x)): it grows
    // with |y log2 x|.
    let t: Vec<f64> = px
        .iter()
        .zip(&py)
        .map(|(&x, &y)| (y as f64 * (x.abs() as f64).log2()).abs())
        .map(|t| if t.is_finite() { t } else { 0.0 })
        .collect();
    let pow = ComputeKind::Binary(B::Pow);
    within_by("pow", pow, &[px, py], &|i| 3.0 + t[i], 0.0);
    let ay = domain(n, 22, -10.0, 10.0, false);
    let ax = domain(n, 23, -10.0, 10.0, false);
    within("atan2", ComputeKind::Binary(B::Atan2), &[ay, ax], 4.0, 0.0);
    within(
        "x^-2",
        un(U::IntegerPow(-2)),
        &[domain(n, 24, 1e-15, 1e15, true)],
        2.5,
        0.0,
    );
}

#[test]
fn data_movement_is_bit_identical_in_every_dtype() {
    // Odd shapes, 16-bit elements starting mid-word, strided and broadcast sources.
    let shapes: [&[usize]; 12] = [
        &[3, 5],
        &[129, 257],
        &[5],
        &[3, 1],
        &[],
        &[129],
        &[257],
        &[2, 3],
        &[3, 2],
        &[2, 3, 4, 5],
        &[2, 3, 4],
        &[1, 5],
    ];
    for t in DTYPES {
        let inputs: Vec<HostArray> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let n = s.iter().product::<usize>();
                shaped(exact_data(t, n, 100 + i as u64), s)
            })
            .collect();
        let bc = |dims: &[usize]| ComputeKind::Broadcast {
            dims: dims.to_vec(),
        };
        let tr = |perm: &[usize]| ComputeKind::Transpose {
            perm: perm.to_vec(),
        };
        let sl = |start: &[usize], strides: &[usize]| ComputeKind::Slice {
            start: start.to_vec(),
            strides: strides.to_vec(),
        };
        let up = |start: &[usize]| ComputeKind::UpdateSlice {
            start: start.to_vec(),
        };
        let mut cases = vec![
            case(bc(&[1]), &[2], &[3, 5], t),
            case(bc(&[0, 1]), &[3], &[3, 5], t),
            case(bc(&[]), &[4], &[3, 5], t),
            case(bc(&[0]), &[5], &[129, 257], t),
            case(bc(&[2]), &[6], &[2, 129, 257], t),
            case(bc(&[0, 2]), &[3], &[3, 4, 5], t),
            case(ComputeKind::Reshape, &[0], &[15], t),
            case(ComputeKind::Reshape, &[0], &[5, 3], t),
            case(ComputeKind::Reshape, &[1], &[257, 129], t),
            case(tr(&[1, 0]), &[0], &[5, 3], t),
            case(tr(&[1, 0]), &[1], &[257, 129], t),
            case(tr(&[2, 0, 1]), &[10], &[4, 2, 3], t),
            case(tr(&[3, 1, 0, 2]), &[9], &[5, 3, 2, 4], t),
            case(tr(&[0, 1]), &[0], &[3, 5], t),
            case(sl(&[0, 1], &[1, 1]), &[0], &[3, 3], t),
            case(sl(&[1, 2], &[2, 3]), &[1], &[64, 85], t),
            case(sl(&[1, 0], &[1, 2]), &[0], &[2, 3], t),
            case(sl(&[3], &[1]), &[6], &[1], t),
            case(sl(&[0, 1, 1, 0], &[2, 1, 2, 3]), &[9], &[1, 2, 2, 2], t),
            case(up(&[1, 1]), &[0, 7], &[3, 5], t),
            case(up(&[0, 2]), &[0, 8], &[3, 5], t),
            case(up(&[2, 0]), &[0, 11], &[3, 5], t),
            case(up(&[0, 4]), &[0, 3], &[3, 5], t),
            case(up(&[100, 101]), &[1, 8], &[129, 257], t),
            case(ComputeKind::Concat { dim: 1 }, &[0, 8, 3], &[3, 8], t),
            case(ComputeKind::Concat { dim: 0 }, &[0, 11, 0], &[7, 5], t),
            case(ComputeKind::Concat { dim: 0 }, &[5, 5], &[258], t),
        ];
        if t != DType::Bool {
            for (shape, dim) in [
                (&[3usize, 5][..], 0),
                (&[3, 5], 1),
                (&[129, 257], 1),
                (&[2, 3, 4, 5], 2),
            ] {
                cases.push(case(ComputeKind::Iota { dim }, &[], shape, t));
            }
            cases.push(case(ComputeKind::Iota { dim: 0 }, &[], &[300], t));
        }
        // Constants (one shared by two ops, one a scalar) and bitcasts of one width.
        for (k, shape) in [&[3usize, 5][..], &[129, 257], &[], &[3, 5]]
            .iter()
            .enumerate()
        {
            let n = shape.iter().product::<usize>();
            let words: Arc<[u32]> = exact_data(t, n, 300 + (k % 3) as u64).words.into();
            cases.push(case(ComputeKind::Constant(words), &[], shape, t));
        }
        if let ComputeKind::Constant(w) = &cases[cases.len() - 4].kind {
            let shared = ComputeKind::Constant(w.clone());
            cases.push(case(shared, &[], &[5, 3], t));
        }
        let other = match t {
            DType::F32 => Some(DType::I32),
            DType::I32 => Some(DType::F32),
            DType::F16 => Some(DType::BF16),
            DType::BF16 => Some(DType::F16),
            _ => None,
        };
        if let Some(o) = other {
            cases.push(case(ComputeKind::Bitcast, &[0], &[3, 5], o));
            cases.push(case(ComputeKind::Bitcast, &[1], &[129, 257], o));
        }
        let (c, g) = both(&inputs, &cases);
        for (k, cs) in cases.iter().enumerate() {
            assert_exact(&format!("{} {:?}", cs.kind, cs), &c[k], &g[k]);
            match &cs.kind {
                ComputeKind::Constant(w) => assert_eq!(&c[k].words[..], &w[..], "{t} constant"),
                ComputeKind::Bitcast => {
                    assert_eq!(c[k].words, inputs[cs.args[0]].words, "{t} bitcast")
                }
                _ => {}
            }
        }
    }
}

#[test]
fn stores_into_windows_of_refs_keep_their_neighbours() {
    // o = x; o[1:3, 1:4] = w (in place, the dynamic_update_slice of `store_window`);
    // then a column and a single element, in 16-bit, 8-bit and 32-bit refs.
    for t in [DType::BF16, DType::F16, DType::I8, DType::F32, DType::Bool] {
        let x = shaped(exact_data(t, 35, 1), &[5, 7]);
        let w = shaped(exact_data(t, 6, 2), &[2, 3]);
        let col = shaped(exact_data(t, 5, 3), &[5, 1]);
        let spec = GridSpec::new()
            .input("x", MemorySpace::Vmem, &[5, 7], t)
            .input("w", MemorySpace::Vmem, &[2, 3], t)
            .input("col", MemorySpace::Vmem, &[5, 1], t)
            .output("o", MemorySpace::Vmem, &[5, 7], t);
        let call = PallasCall::new("windows", spec, |pl, a| {
            let v = pl.load(a.r("x"));
            pl.store(a.r("o"), &v);
            pl.store_window(a.r("o"), &[1, 1], &pl.load(a.r("w")));
            pl.store_window(a.r("o"), &[0, 6], &pl.load(a.r("col")));
            let one = pl.load_window(a.r("w"), &[1, 2], &[1, 1]);
            pl.store_window(a.r("o"), &[4, 3], &one);
        });
        let mesh = Mesh::new(1, "x").unwrap();
        let inputs = vec![vec![x, w, col]];
        let c = simulate(&call, &mesh, &inputs, &mut CpuExecutor::new()).unwrap();
        let g = simulate(&call, &mesh, &inputs, &mut *gpu()).unwrap();
        assert_exact(&format!("windows {t}"), &c[0][0], &g[0][0]);
    }
}

/// Float inputs in [-1, 1) with a few exact ties, zeros of both signs and (when
/// `nan`) NaNs, as `t`.
fn reals(t: DType, shape: &[usize], seed: u64, nan: bool) -> HostArray {
    let mut r = Rng::new(seed);
    let n: usize = shape.iter().product();
    let vals: Vec<f64> = (0..n)
        .map(|i| match i % 97 {
            3 => 0.5,
            5 => -0.0,
            7 => 0.0,
            11 if nan => f64::NAN,
            _ => r.uniform(-1.0, 1.0),
        })
        .collect();
    HostArray::from_values(t, shape, &vals).unwrap()
}

/// The elements of `a` (shape `shape`) grouped as `lax.reduce` over `axes` groups them:
/// for each kept index (row-major), the reduced elements.
fn groups_of(a: &HostArray, axes: &[usize]) -> Vec<Vec<f64>> {
    let shape = &a.shape;
    let vals = a.values();
    let r = shape.len();
    let kept: Vec<usize> = (0..r).filter(|i| !axes.contains(i)).collect();
    let n_out: usize = kept.iter().map(|&k| shape[k]).product();
    let mut out = vec![Vec::new(); n_out];
    let mut idx = vec![0usize; r];
    for v in vals {
        let o = kept.iter().fold(0, |acc, &k| acc * shape[k] + idx[k]);
        out[o].push(v);
        for k in (0..r).rev() {
            idx[k] += 1;
            if idx[k] < shape[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    out
}

/// One ulp of `t` at `x`.
fn ulp_of(t: DType, x: f64) -> f64 {
    match t {
        DType::F32 => 2f64.powi((x.abs().max(1e-38).log2().floor() as i32) - 23),
        DType::BF16 => 2f64.powi((x.abs().max(1e-38).log2().floor() as i32) - 7),
        _ => 2f64.powi((x.abs().max(6.1e-5).log2().floor() as i32) - 10),
    }
}

#[test]
fn reductions_exact_where_the_order_does_not_matter_and_sums_within_the_bound() {
    let red = |op, axes: &[usize]| ComputeKind::Reduce {
        op,
        axes: axes.to_vec(),
    };
    let arg = |op, axis| ComputeKind::ArgReduce { op, axis };
    // (input shape, axes): long groups (a workgroup per output), short ones (a thread
    // per output), separate runs of reduced axes, everything to a scalar.
    let plans: [(&[usize], &[usize]); 6] = [
        (&[129, 257], &[1]),
        (&[129, 257], &[0]),
        (&[129, 257], &[0, 1]),
        (&[2, 3, 4, 5], &[1, 3]),
        (&[2, 3, 4, 5], &[1]),
        (&[3, 5], &[0]),
    ];
    for t in DTYPES {
        let inputs: Vec<HostArray> = plans
            .iter()
            .enumerate()
            .map(|(i, (shape, _))| {
                if t.is_float() {
                    reals(t, shape, 30 + i as u64, false)
                } else {
                    let n = shape.iter().product();
                    shaped(exact_data(t, n, 30 + i as u64), shape)
                }
            })
            .collect();
        let mut cases = Vec::new();
        let mut sums = Vec::new();
        for (i, (shape, axes)) in plans.iter().enumerate() {
            let out: Vec<usize> = (0..shape.len())
                .filter(|k| !axes.contains(k))
                .map(|k| shape[k])
                .collect();
            if t != DType::Bool {
                sums.push((cases.len(), i, axes.to_vec()));
                cases.push(case(red(Reduction::Sum, axes), &[i], &out, t));
            }
            cases.push(case(red(Reduction::Max, axes), &[i], &out, t));
            cases.push(case(red(Reduction::Min, axes), &[i], &out, t));
            if t != DType::Bool && axes.len() == 1 {
                cases.push(case(arg(Reduction::Max, axes[0]), &[i], &out, DType::I32));
                cases.push(case(arg(Reduction::Min, axes[0]), &[i], &out, DType::I32));
            }
        }
        let (c, g) = both(&inputs, &cases);
        for (k, cs) in cases.iter().enumerate() {
            let is_sum = matches!(
                cs.kind,
                ComputeKind::Reduce {
                    op: Reduction::Sum,
                    ..
                }
            );
            if !(t.is_float() && is_sum) {
                assert_exact(&format!("{} {cs:?}", cs.kind), &c[k], &g[k]);
            }
        }
        if !t.is_float() {
            continue;
        }
        for (k, i, axes) in sums {
            for (o, grp) in groups_of(&inputs[i], &axes).iter().enumerate() {
                let exact: f64 = grp.iter().sum();
                let mass: f64 = grp.iter().map(|v| v.abs()).sum();
                let bound = grp.len() as f64 * 2f64.powi(-24) * mass
                    + if t == DType::F32 {
                        0.0
                    } else {
                        ulp_of(t, exact)
                    };
                let got = g[k].dtype.value_of(g[k].words[o]);
                assert!(
                    (got - exact).abs() <= bound,
                    "sum over {axes:?} of input {i} {t}, output {o}: {got} vs {exact} (bound {bound:e})"
                );
            }
        }
    }
}

#[test]
fn arg_reductions_take_the_first_nan_and_the_first_of_ties() {
    // Columns of NaNs, ties and signed zeros; a long axis (a workgroup per output).
    for t in [DType::F32, DType::BF16] {
        let x = reals(t, &[300, 7], 5, true);
        let mut x = x;
        for i in 0..300 {
            // Column 3: all equal; column 4: -0 and +0 alternating.
            x.words[i * 7 + 3] = t.bits_of(0.25);
            x.words[i * 7 + 4] = t.bits_of(if i % 2 == 0 { -0.0 } else { 0.0 });
        }
        let cases = vec![
            case(
                ComputeKind::ArgReduce {
                    op: Reduction::Max,
                    axis: 0,
                },
                &[0],
                &[7],
                DType::I32,
            ),
            case(
                ComputeKind::ArgReduce {
                    op: Reduction::Min,
                    axis: 0,
                },
                &[0],
                &[7],
                DType::I32,
            ),
            case(
                ComputeKind::ArgReduce {
                    op: Reduction::Max,
                    axis: 1,
                },
                &[0],
                &[300],
                DType::I32,
            ),
            case(
                ComputeKind::Reduce {
                    op: Reduction::Max,
                    axes: vec![0],
                },
                &[0],
                &[7],
                t,
            ),
            case(
                ComputeKind::Reduce {
                    op: Reduction::Min,
                    axes: vec![0],
                },
                &[0],
                &[7],
                t,
            ),
        ];
        let (c, g) = both(&[x], &cases);
        for k in 0..cases.len() {
            assert_exact(&format!("{:?}", cases[k].kind), &c[k], &g[k]);
        }
    }
}

/// `dot_general` of `a` and `b` in f64 with the k-term bound of each element:
/// (values, bounds) over the destination, row-major.
fn dot_reference(dims: &DotDims, a: &HostArray, b: &HostArray) -> (Vec<f64>, Vec<f64>) {
    // Through the CPU twin's definition: batch, lhs free, rhs free.
    let (la, lb) = (a.values(), b.values());
    let (sa, sb) = (&a.shape, &b.shape);
    let strides = |s: &[usize]| {
        let mut st = vec![1; s.len()];
        for i in (0..s.len().saturating_sub(1)).rev() {
            st[i] = st[i + 1] * s[i + 1];
        }
        st
    };
    let (ta, tb) = (strides(sa), strides(sb));
    let lf: Vec<usize> = (0..sa.len())
        .filter(|i| !dims.lhs_batch.contains(i) && !dims.lhs_contract.contains(i))
        .collect();
    let rf: Vec<usize> = (0..sb.len())
        .filter(|i| !dims.rhs_batch.contains(i) && !dims.rhs_contract.contains(i))
        .collect();
    let out_dims: Vec<usize> = dims
        .lhs_batch
        .iter()
        .map(|&i| sa[i])
        .chain(lf.iter().map(|&i| sa[i]))
        .chain(rf.iter().map(|&i| sb[i]))
        .collect();
    let k_dims: Vec<usize> = dims.lhs_contract.iter().map(|&i| sa[i]).collect();
    let n_out: usize = out_dims.iter().product();
    let n_k: usize = k_dims.iter().product();
    let unflat = |mut f: usize, d: &[usize]| {
        let mut idx = vec![0; d.len()];
        for i in (0..d.len()).rev() {
            idx[i] = f % d[i];
            f /= d[i];
        }
        idx
    };
    let nb = dims.lhs_batch.len();
    let mut vals = Vec::with_capacity(n_out);
    let mut bounds = Vec::with_capacity(n_out);
    for o in 0..n_out {
        let oi = unflat(o, &out_dims);
        let (mut s, mut mass) = (0.0, 0.0);
        for p in 0..n_k {
            let pi = unflat(p, &k_dims);
            let mut ia = 0;
            let mut ib = 0;
            for (j, &d) in dims.lhs_batch.iter().enumerate() {
                ia += oi[j] * ta[d];
            }
            for (j, &d) in dims.rhs_batch.iter().enumerate() {
                ib += oi[j] * tb[d];
            }
            for (j, &d) in lf.iter().enumerate() {
                ia += oi[nb + j] * ta[d];
            }
            for (j, &d) in rf.iter().enumerate() {
                ib += oi[nb + lf.len() + j] * tb[d];
            }
            for (j, (&da, &db)) in dims.lhs_contract.iter().zip(&dims.rhs_contract).enumerate() {
                ia += pi[j] * ta[da];
                ib += pi[j] * tb[db];
            }
            s += la[ia] * lb[ib];
            mass += (la[ia] * lb[ib]).abs();
        }
        vals.push(s);
        bounds.push(n_k as f64 * 2f64.powi(-24) * mass);
    }
    (vals, bounds)
}

#[test]
fn dot_products_within_the_k_term_bound_and_integer_ones_exact() {
    let mm = DotDims {
        lhs_contract: vec![1],
        rhs_contract: vec![0],
        ..DotDims::default()
    };
    let dot = |d: &DotDims| ComputeKind::Dot(d.clone());
    // (lhs shape, rhs shape, dims): a plain product crossing tiles, A^T B and A B^T
    // (strided operands), a batch in the middle, contracting dims that do not collapse
    // (transposed into scratch first), vectors, K = 1.
    let plans: Vec<(Vec<usize>, Vec<usize>, DotDims)> = vec![
        (vec![129, 257], vec![257, 65], mm.clone()),
        (
            vec![33, 70],
            vec![33, 9],
            DotDims {
                lhs_contract: vec![0],
                rhs_contract: vec![0],
                ..DotDims::default()
            },
        ),
        (
            vec![17, 40],
            vec![5, 40],
            DotDims {
                lhs_contract: vec![1],
                rhs_contract: vec![1],
                ..DotDims::default()
            },
        ),
        (
            vec![6, 3, 20],
            vec![3, 20, 7],
            DotDims {
                lhs_contract: vec![2],
                rhs_contract: vec![1],
                lhs_batch: vec![1],
                rhs_batch: vec![0],
            },
        ),
        (
            vec![4, 5, 6],
            vec![6, 3, 4],
            DotDims {
                lhs_contract: vec![0, 2],
                rhs_contract: vec![2, 0],
                ..DotDims::default()
            },
        ),
        (vec![1, 300], vec![300, 1], mm.clone()),
        (vec![70, 1], vec![1, 66], mm.clone()),
    ];
    for (lt, acc) in [
        (DType::F32, DType::F32),
        (DType::BF16, DType::F32),
        (DType::F16, DType::F32),
        (DType::BF16, DType::BF16),
        (DType::I32, DType::I32),
        (DType::I8, DType::I32),
        (DType::U8, DType::I32),
    ] {
        let mut inputs = Vec::new();
        let mut cases = Vec::new();
        for (i, (ls, rs, d)) in plans.iter().enumerate() {
            let (a, b) = if lt.is_float() {
                (
                    reals(lt, ls, 50 + i as u64, false),
                    reals(lt, rs, 60 + i as u64, false),
                )
            } else {
                let n = |s: &[usize]| s.iter().product::<usize>();
                let small = |mut x: HostArray| {
                    if lt == DType::I32 {
                        // Products that overflow and wrap, and small ones.
                        for (j, w) in x.words.iter_mut().enumerate() {
                            if j % 2 == 0 {
                                *w = (*w % 201).wrapping_sub(100);
                            }
                        }
                    }
                    x
                };
                (
                    small(shaped(exact_data(lt, n(ls), 50 + i as u64), ls)),
                    small(shaped(exact_data(lt, n(rs), 60 + i as u64), rs)),
                )
            };
            let ops = [
                tpusim::ir::Operand {
                    view: tpusim::ir::View::new(0, 0, 0, a.words.len()),
                    shape: ls.clone(),
                    dtype: lt,
                },
                tpusim::ir::Operand {
                    view: tpusim::ir::View::new(0, 0, 0, b.words.len()),
                    shape: rs.clone(),
                    dtype: lt,
                },
            ];
            let shape = tpusim::ir::dot_shape(d, &ops[0], &ops[1]).unwrap();
            cases.push(case(dot(d), &[2 * i, 2 * i + 1], &shape, acc));
            inputs.push(a);
            inputs.push(b);
        }
        let (c, g) = both(&inputs, &cases);
        for (k, cs) in cases.iter().enumerate() {
            if !lt.is_float() {
                assert_exact(&format!("{lt} {cs:?}"), &c[k], &g[k]);
                continue;
            }
            let ComputeKind::Dot(d) = &cs.kind else {
                unreachable!()
            };
            let (want, bound) = dot_reference(d, &inputs[2 * k], &inputs[2 * k + 1]);
            for (o, (&w, &b)) in want.iter().zip(&bound).enumerate() {
                let got = acc.value_of(g[k].words[o]);
                let b = b + if acc == DType::F32 {
                    0.0
                } else {
                    ulp_of(acc, w)
                };
                assert!(
                    (got - w).abs() <= b,
                    "{lt}->{acc} {:?}: element {o}: {got} vs {w} (bound {b:e})",
                    cs.shape
                );
            }
        }
    }
}

/// A GPU executor of its own on the shared device, lowering with small limits.
fn limited(max_binding: u64, max_workgroups: u32) -> tpusim::device_sim::gpu::GpuExecutor {
    let mut g = tpusim::device_sim::gpu::GpuExecutor::new(gpu().context().clone());
    g.limit_lowering(Some(max_binding), Some(max_workgroups));
    g
}

#[test]
fn operands_larger_than_a_binding_run_in_windows_and_past_the_workgroup_limit() {
    // 4 KiB bindings and 3 workgroups per dimension: every op below is windowed,
    // grid-strided, or both.
    let mut g = limited(4096, 3);
    let big = [129usize, 257];
    for t in [DType::F32, DType::BF16, DType::I8] {
        let n = 129 * 257;
        let floats = t.is_float();
        let x = if floats {
            reals(t, &big, 1, false)
        } else {
            shaped(exact_data(t, n, 1), &big)
        };
        let y = if floats {
            reals(t, &big, 2, false)
        } else {
            shaped(exact_data(t, n, 2), &big)
        };
        let row = if floats {
            reals(t, &[257], 3, false)
        } else {
            exact_data(t, 257, 3)
        };
        let w = if floats {
            reals(t, &[257, 3], 4, false)
        } else {
            shaped(exact_data(t, 771, 4), &[257, 3])
        };
        let u = shaped(exact_data(t, 6, 5), &[2, 3]);
        let acc = if floats { DType::F32 } else { DType::I32 };
        let cases = vec![
            case(ComputeKind::Binary(Binary::Max), &[0, 1], &big, t),
            case(
                ComputeKind::Compare(Comparison::Lt),
                &[0, 1],
                &big,
                DType::Bool,
            ),
            case(ComputeKind::Convert, &[0], &big, DType::F16),
            case(ComputeKind::Broadcast { dims: vec![1] }, &[2], &big, t),
            case(
                ComputeKind::Slice {
                    start: vec![1, 3],
                    strides: vec![2, 1],
                },
                &[0],
                &[64, 250],
                t,
            ),
            case(
                ComputeKind::UpdateSlice {
                    start: vec![77, 201],
                },
                &[0, 4],
                &big,
                t,
            ),
            case(ComputeKind::Concat { dim: 0 }, &[0, 1], &[258, 257], t),
            case(ComputeKind::Iota { dim: 1 }, &[], &big, DType::I32),
            case(
                ComputeKind::Reduce {
                    op: Reduction::Max,
                    axes: vec![1],
                },
                &[0],
                &[129],
                t,
            ),
            case(
                ComputeKind::Reduce {
                    op: Reduction::Min,
                    axes: vec![0],
                },
                &[3],
                &[3],
                t,
            ),
            case(
                ComputeKind::ArgReduce {
                    op: Reduction::Max,
                    axis: 1,
                },
                &[0],
                &[129],
                DType::I32,
            ),
            case(
                ComputeKind::Dot(DotDims {
                    lhs_contract: vec![1],
                    rhs_contract: vec![0],
                    ..DotDims::default()
                }),
                &[0, 3],
                &[129, 3],
                acc,
            ),
        ];
        let (c, gg) = both_on(&[x.clone(), y, row, w.clone(), u], &cases, &mut g);
        for (k, cs) in cases.iter().enumerate() {
            if floats && matches!(cs.kind, ComputeKind::Dot(_)) {
                let ComputeKind::Dot(d) = &cs.kind else {
                    unreachable!()
                };
                let (want, bound) = dot_reference(d, &x, &w);
                for (o, (&wv, &b)) in want.iter().zip(&bound).enumerate() {
                    let got = acc.value_of(gg[k].words[o]);
                    assert!(
                        (got - wv).abs() <= b,
                        "windowed dot {t}: {o}: {got} vs {wv}"
                    );
                }
                continue;
            }
            assert_exact(&format!("windowed {} {t}", cs.kind), &c[k], &gg[k]);
        }
        // A sum of every element: long groups, windowed over outputs.
        let sum = vec![case(
            ComputeKind::Reduce {
                op: Reduction::Sum,
                axes: vec![1],
            },
            &[0],
            &[129],
            t,
        )];
        let (c, gg) = both_on(&[x], &sum, &mut g);
        if !floats {
            assert_exact("windowed sum", &c[0], &gg[0]);
        }
    }
}

#[test]
fn ops_that_cannot_be_windowed_are_refused_with_their_sizes() {
    let mut g = limited(4096, 65535);
    let x = reals(DType::F32, &[129, 257], 1, false);
    let call = call_of(
        std::slice::from_ref(&x),
        &[case(
            ComputeKind::Transpose { perm: vec![1, 0] },
            &[0],
            &[257, 129],
            DType::F32,
        )],
    );
    let mesh = Mesh::new(1, "x").unwrap();
    let e = simulate(&call, &mesh, &[vec![x]], &mut g).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, tpusim::Error::Limit { .. }), "{msg}");
    assert!(
        msg.contains("transpose of [129, 257] to [257, 129] f32"),
        "{msg}"
    );
    assert!(msg.contains("4096"), "{msg}");
}

#[test]
fn compute_programs_fall_back_from_the_arena_and_run_on_every_device() {
    // Three devices with their own data; the arena lowering declines compute ops.
    let spec = GridSpec::new()
        .input("a", MemorySpace::Vmem, &[5, 7], DType::F32)
        .input("b", MemorySpace::Vmem, &[7, 3], DType::F32)
        .output("y", MemorySpace::Vmem, &[5, 3], DType::F32)
        .output("s", MemorySpace::Vmem, &[5], DType::F32);
    let call = PallasCall::new("devices", spec, |pl, a| {
        let p = pl.dot(&pl.load(a.r("a")), &pl.load(a.r("b")));
        let y = pl.tanh(&(&p * 0.5));
        pl.store(a.r("y"), &y);
        pl.store(a.r("s"), &y.sum(&[1]));
    });
    let mesh = Mesh::new(3, "x").unwrap();
    let inputs: Vec<Vec<HostArray>> = (0..3)
        .map(|d| {
            vec![
                reals(DType::F32, &[5, 7], 10 + d, false),
                reals(DType::F32, &[7, 3], 20 + d, false),
            ]
        })
        .collect();
    let c = simulate(&call, &mesh, &inputs, &mut CpuExecutor::new()).unwrap();
    let mut g = tpusim::device_sim::gpu::GpuExecutor::new(gpu().context().clone());
    g.set_arena(tpusim::device_sim::gpu::ArenaMode::UpTo(u64::MAX));
    let program = call.lower(&mesh).unwrap();
    let schedule = tpusim::sched::schedule(&program, &mut tpusim::sched::Eager::default()).unwrap();
    let run = g.prepare_run(&program, &schedule).unwrap();
    assert_eq!(run.lowering(), tpusim::device_sim::gpu::Lowering::PerOp);
    drop(run);
    let r = simulate(&call, &mesh, &inputs, &mut g).unwrap();
    for d in 0..3 {
        for k in 0..2 {
            assert_close(
                &format!("device {d} output {k}"),
                &c[d][k],
                &r[d][k],
                8.0,
                1e-6,
            );
        }
    }
}
