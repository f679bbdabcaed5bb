//! Every float unary and binary op through the CPU executor, in f32, bf16 and f16,
//! fused and unfused, against the op's exact value computed in f64 here: each result
//! within its op's bound in ulps of its dtype. A 16-bit result is the f32 result rounded
//! once, so its bound is half an ulp plus the f32 bound scaled to the narrower ulp.
//! Special values (NaN, ±inf, ±0, overflow) must come out as the f64 value rounded to
//! the dtype, bit for bit; fused and unfused runs must agree bit for bit.

mod common;

use common::simulate;
use std::sync::Arc;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::ir::{Binary, ComputeKind, Unary};
use tpusim::kernel::{GridSpec, MemorySpace, PallasCall};
use tpusim::{DType, HostArray, Mesh};

/// Elements per operand: more than two of the executor's blocks, the last one partial.
const N: usize = 2600;

/// A float op, its exact value in f64 and its bound in ulps of f32.
struct Op {
    name: &'static str,
    kind: ComputeKind,
    exact: fn(f64, f64) -> f64,
    ulps: f64,
}

fn un(name: &'static str, u: Unary, exact: fn(f64, f64) -> f64, ulps: f64) -> Op {
    Op {
        name,
        kind: ComputeKind::Unary(u),
        exact,
        ulps,
    }
}

fn bin(name: &'static str, b: Binary, exact: fn(f64, f64) -> f64, ulps: f64) -> Op {
    Op {
        name,
        kind: ComputeKind::Binary(b),
        exact,
        ulps,
    }
}

/// The ops with their bounds: half an ulp where the op is correctly rounded, the
/// function's documented bound otherwise (src/device_sim/cpu/vmath.rs; libm's for pow
/// and atan2, and for sin and cos beyond 4096).
fn ops() -> Vec<Op> {
    use Binary as B;
    use Unary as U;
    vec![
        un("neg", U::Neg, |x, _| -x, 0.5),
        un("abs", U::Abs, |x, _| x.abs(), 0.5),
        un("sign", U::Sign, |x, _| sign(x), 0.5),
        un("floor", U::Floor, |x, _| x.floor(), 0.5),
        un("ceil", U::Ceil, |x, _| x.ceil(), 0.5),
        un("round", U::Round, |x, _| x.round(), 0.5),
        un("round_even", U::RoundEven, |x, _| x.round_ties_even(), 0.5),
        un("sqrt", U::Sqrt, |x, _| x.sqrt(), 0.5),
        // Two roundings: the square root's and the quotient's.
        un("rsqrt", U::Rsqrt, |x, _| 1.0 / x.sqrt(), 1.5),
        un("exp", U::Exp, |x, _| x.exp(), 1.5),
        un("exp2", U::Exp2, |x, _| x.exp2(), 1.5),
        un("expm1", U::Expm1, |x, _| x.exp_m1(), 2.5),
        un("log", U::Log, |x, _| x.ln(), 1.5),
        un("log1p", U::Log1p, |x, _| x.ln_1p(), 3.0),
        un("tanh", U::Tanh, |x, _| x.tanh(), 6.0),
        un(
            "logistic",
            U::Logistic,
            |x, _| 1.0 / (1.0 + (-x).exp()),
            2.5,
        ),
        un("erf", U::Erf, |x, _| libm::erf(x), 7.0),
        un("sin", U::Sin, |x, _| x.sin(), 2.0),
        un("cos", U::Cos, |x, _| x.cos(), 2.0),
        // x*x*x and 1/(x*x): two roundings each (x*x one); (x*x)*(x*x) squares the
        // first rounding's error (3 half-ulps relative, 2.5 ulps where the result sits
        // low in its binade).
        un("integer_pow 2", U::IntegerPow(2), |x, _| x * x, 0.5),
        un("integer_pow 3", U::IntegerPow(3), |x, _| x * x * x, 1.5),
        un("integer_pow 4", U::IntegerPow(4), |x, _| x * x * x * x, 2.5),
        un(
            "integer_pow -2",
            U::IntegerPow(-2),
            |x, _| 1.0 / (x * x),
            1.5,
        ),
        bin("add", B::Add, |x, y| x + y, 0.5),
        bin("sub", B::Sub, |x, y| x - y, 0.5),
        bin("mul", B::Mul, |x, y| x * y, 0.5),
        bin("div", B::Div, |x, y| x / y, 0.5),
        bin("rem", B::Rem, |x, y| x % y, 0.5),
        bin("max", B::Max, xla_max, 0.5),
        bin("min", B::Min, |x, y| -xla_max(-x, -y), 0.5),
        bin("pow", B::Pow, f64::powf, 1.0),
        bin("atan2", B::Atan2, f64::atan2, 2.0),
    ]
}

fn sign(x: f64) -> f64 {
    if x.is_nan() || x == 0.0 {
        x
    } else {
        1f64.copysign(x)
    }
}

/// XLA's max: NaN if either is, +0 above -0.
fn xla_max(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        f64::NAN
    } else if x == y {
        f64::from_bits(x.to_bits() & y.to_bits())
    } else {
        x.max(y)
    }
}

/// Operand values (before rounding to a dtype): magnitudes spread log-uniformly over
/// 1e-6..1e4 (subnormals of f16, overflow of exp, sin and cos past their reduction's
/// limit), small integers and halves (rounding ties), and the special values.
fn operand(seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    let special = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -2.5,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    let mut v: Vec<f64> = special.to_vec();
    while v.len() < N {
        let u = next();
        let sign = if next() < 0.5 { -1.0 } else { 1.0 };
        let x = match v.len() % 4 {
            0 => (next() * 16.0 - 8.0).round() / 2.0,
            1 => next() * 8.0 - 4.0,
            _ => sign * 10f64.powf(u * 10.0 - 6.0),
        };
        v.push(x);
    }
    v
}

/// The kernel that loads `x` and `y` and stores each op of `ops` in its own output.
fn call_of(t: DType, ops: &[Op]) -> PallasCall {
    let mut spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[N], t)
        .input("y", MemorySpace::Vmem, &[N], t);
    for (k, _) in ops.iter().enumerate() {
        spec = spec.output(&format!("o{k}"), MemorySpace::Vmem, &[N], t);
    }
    let kinds: Arc<Vec<ComputeKind>> = Arc::new(ops.iter().map(|o| o.kind.clone()).collect());
    PallasCall::new("float_ops", spec, move |pl, a| {
        let (x, y) = (pl.load(a.r(0)), pl.load(a.r(1)));
        for (k, kind) in kinds.iter().enumerate() {
            let args = match kind {
                ComputeKind::Binary(_) => vec![&x, &y],
                _ => vec![&x],
            };
            pl.store(a.r(2 + k), &pl.compute(kind.clone(), &args, &[N], t));
        }
    })
}

/// Significand bits and least normal exponent of float `t`.
fn format(t: DType) -> (i32, i32) {
    match t {
        DType::F32 => (24, -126),
        DType::BF16 => (8, -126),
        DType::F16 => (11, -14),
        _ => unreachable!("floats only"),
    }
}

/// One ulp of `t` at `x` (subnormals: the least).
fn ulp(t: DType, x: f64) -> f64 {
    let (p, emin) = format(t);
    let e = if x == 0.0 {
        emin
    } else {
        (x.abs().log2().floor() as i32).max(emin)
    };
    2f64.powi(e - (p - 1))
}

/// `t`'s bound for an op within `f32_ulps` of the exact value in f32: a 16-bit result
/// is that f32 result rounded once.
fn bound(t: DType, f32_ulps: f64) -> f64 {
    let (p, _) = format(t);
    if p == 24 {
        f32_ulps
    } else {
        0.5 + f32_ulps * 2f64.powi(p - 24) * 1.001
    }
}

/// The worst error of `op`'s results `got` (dtype `t`) in ulps, and the failures.
fn check(t: DType, op: &Op, x: &[f64], y: &[f64], got: &HostArray) -> (f64, Vec<String>) {
    let mut worst = 0f64;
    let mut bad = Vec::new();
    let limit = bound(t, op.ulps);
    for (i, &g) in got.values().iter().enumerate() {
        let exact = (op.exact)(x[i], y[i]);
        let rounded = t.value_of(t.bits_of(exact));
        let special = exact.is_nan() || rounded.is_infinite() || g.is_infinite() || exact == 0.0;
        let ok = if special {
            // Bit for bit (any NaN for a NaN).
            (g.is_nan() && rounded.is_nan()) || g.to_bits() == rounded.to_bits()
        } else {
            let u = (g - exact).abs() / ulp(t, exact);
            worst = worst.max(u);
            u <= limit
        };
        if !ok && bad.len() < 6 {
            bad.push(format!(
                "{} {t}: {}({:e}, {:e}) = {g:e}, exact {exact:e}",
                op.name, op.name, x[i], y[i]
            ));
        }
    }
    (worst, bad)
}

#[test]
fn every_float_op_in_every_float_dtype_is_within_its_bound_of_f64() {
    let ops = ops();
    let mesh = Mesh::new(1, "x").unwrap();
    let mut bad = Vec::new();
    for t in [DType::F32, DType::BF16, DType::F16] {
        let inputs = [operand(1), operand(2)]
            .map(|v| HostArray::from_values(t, &[N], &v).unwrap())
            .to_vec();
        // The operands as the dtype holds them: the exact values are of these.
        let (x, y) = (inputs[0].values(), inputs[1].values());
        let call = call_of(t, &ops);
        let fused = simulate(
            &call,
            &mesh,
            std::slice::from_ref(&inputs),
            &mut CpuExecutor::new(),
        )
        .unwrap()
        .remove(0);
        let unfused = simulate(&call, &mesh, &[inputs], &mut CpuExecutor::unfused())
            .unwrap()
            .remove(0);
        let mut line = format!("{t}:");
        for (k, op) in ops.iter().enumerate() {
            let (f, u) = (&fused[k].words, &unfused[k].words);
            let differ = f.iter().zip(u).filter(|(a, b)| a != b).count();
            if differ > 0 {
                bad.push(format!(
                    "{} {t}: fused and unfused differ in {differ}",
                    op.name
                ));
            }
            let (worst, b) = check(t, op, &x, &y, &fused[k]);
            line += &format!(" {} {worst:.2}", op.name);
            bad.extend(b);
        }
        eprintln!("{line}");
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
