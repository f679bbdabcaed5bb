//! Chains of float ops in a fused region, each op's register the next one's argument
//! and nothing else's: gelu as JAX writes it, a chain with constants on either side and
//! a second operand of lanes, a broadcast taken as one value inside a chain, sin past
//! its reduction's range and a power of five (the ops' slow paths). Shapes of one
//! element, of rows shorter than a block with a part of a vector left over, and over
//! the cores; f32, bf16 and f16, with NaN, infinities, -0 and subnormals among the
//! data. Held to the unfused run bit for bit, and to values computed here in f64
//! (exact ones where the data are small integers, gelu's within its tanh's bound).

mod common;

use common::simulate;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::kernel::{Ctx, GridSpec, MemorySpace, PallasCall, Value};
use tpusim::{DType, HostArray, Mesh};

const SHAPES: [[usize; 2]; 4] = [[1, 1], [7, 2500], [300, 613], [1100, 1024]];

/// Small integers and halves, with a special value every 101 elements.
fn data(n: usize, seed: usize) -> Vec<f64> {
    (0..n)
        .map(|i| match (i + seed) % 101 {
            11 => f64::NAN,
            23 => -0.0,
            37 => f64::INFINITY,
            41 => f64::NEG_INFINITY,
            53 => 1e-40, // an f32 subnormal (0 in bf16 and f16)
            67 => 0.0,
            _ => ((((i + seed) * 7919) % 81) as f64 - 40.0) / 2.0,
        })
        .collect()
}

fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || (a == b && a.is_sign_negative() == b.is_sign_negative())
}

type Body = for<'c> fn(&'c Ctx, &Value<'c>, &Value<'c>) -> Value<'c>;

/// `y = f(x, z)`, `z` broadcast along the rows when `rows`.
fn kernel(shape: [usize; 2], dtype: DType, rows: bool, f: Body) -> PallasCall {
    let zshape: Vec<usize> = if rows { vec![shape[0]] } else { shape.to_vec() };
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &shape, dtype)
        .input("z", MemorySpace::Vmem, &zshape, dtype)
        .output("y", MemorySpace::Vmem, &shape, dtype);
    PallasCall::new("chain", spec, move |pl, a| {
        let x = pl.load(a.r("x"));
        let z = pl.load(a.r("z"));
        let z = if rows {
            z.broadcast_in_dim(&shape, &[0])
        } else {
            z
        };
        pl.store(a.r("y"), &f(pl, &x, &z));
    })
}

/// Runs `f` fused and unfused on every shape and dtype; checks they agree bit for bit
/// and, for f32, `check(x, z, y)` of each element.
fn agree(rows: bool, f: Body, check: impl Fn(f64, f64, f64) -> bool) {
    let mesh = Mesh::new(1, "x").unwrap();
    for shape in SHAPES {
        let n = shape[0] * shape[1];
        let zn = if rows { shape[0] } else { n };
        let run = n / zn;
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            let (xs, zs) = (data(n, 0), data(zn, 5));
            let x = HostArray::from_values(dtype, &shape, &xs).unwrap();
            let zshape: Vec<usize> = if rows { vec![shape[0]] } else { shape.to_vec() };
            let z = HostArray::from_values(dtype, &zshape, &zs).unwrap();
            let c = kernel(shape, dtype, rows, f);
            let inputs = [vec![x.clone(), z.clone()]];
            let fused = simulate(&c, &mesh, &inputs, &mut CpuExecutor::new()).unwrap();
            let plain = simulate(&c, &mesh, &inputs, &mut CpuExecutor::unfused()).unwrap();
            let (got, want) = (&fused[0][0], &plain[0][0]);
            assert_eq!(got.words, want.words, "{shape:?} {dtype}: fused != unfused");
            if dtype == DType::F32 {
                let (xv, zv) = (x.values(), z.values());
                for (i, &g) in got.values().iter().enumerate() {
                    let (a, b) = (xv[i], zv[i / run]);
                    assert!(check(a, b, g), "{shape:?} [{i}]: x {a}, z {b}: got {g}");
                }
            }
        }
    }
}

/// How many chains of `c`'s fused regions the CPU executor computes with a kernel.
fn kernels_of(c: PallasCall) -> usize {
    let plan = tpusim::run::Job::call(c, Mesh::new(1, "x").unwrap())
        .plan()
        .unwrap();
    tpusim::device_sim::cpu::CpuPlan::of(&plan.program, &plan.schedule).kernels()
}

/// XLA's max: NaN if either is, +0 above -0.
fn fmax(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a == b {
        if a.is_sign_negative() {
            b
        } else {
            a
        }
    } else {
        a.max(b)
    }
}

#[test]
fn an_exact_chain_equals_its_definition_and_the_unfused_run() {
    // ((2 - x) * x + 3) / 4, then max with z, then |.| - 1: constants on the left and
    // on the right, a second operand of lanes; exact in f32 for these data.
    agree(
        false,
        |pl, x, z| {
            let t = &(&(&(&x.scalar(2.0) - x) * x) + 3.0) / 4.0;
            &pl.abs(&pl.maximum(&t, z)) - 1.0
        },
        |x, z, y| {
            let t = ((2.0 - x) * x + 3.0) / 4.0;
            // f32 reads the subnormal as itself; the sum rounds as f64's does here.
            let t = t as f32 as f64;
            same(y, fmax(t, z as f32 as f64).abs() - 1.0)
        },
    );
}

#[test]
fn gelu_equals_the_unfused_run_and_f64() {
    agree(
        false,
        |pl, x, _| {
            // jax.nn.gelu(approximate=True), as JAX writes it.
            let cube = &x.powi(3) * 0.044715;
            let inner = &(x + &cube) * 0.797_884_560_802_865_4;
            let t = pl.tanh(&inner);
            &(&(&t + 1.0) * x) * 0.5
        },
        |x, _, y| {
            let inner = 0.797_884_560_802_865_4 * (x + 0.044715 * x * x * x);
            let want = 0.5 * x * (1.0 + inner.tanh());
            if x.is_nan() || x == f64::NEG_INFINITY {
                // -inf: 0 * -inf in both.
                return y.is_nan();
            }
            same(y, want) || (y - want).abs() <= 1e-6 * x.abs().max(1.0)
        },
    );
}

/// jax.nn.gelu(approximate=True) as JAX 0.12 writes it: `x * (0.5 * (1 + tanh(..)))`.
fn gelu_now<'c>(pl: &'c Ctx, x: &Value<'c>, _: &Value<'c>) -> Value<'c> {
    let cube = &x.powi(3) * 0.044715;
    let inner = &(x + &cube) * 0.797_884_560_802_865_4;
    let t = pl.tanh(&inner);
    x * &(&(&t + 1.0) * 0.5)
}

#[test]
fn gelu_as_jax_writes_it_now_runs_as_one_kernel_and_equals_the_unfused_run_and_f64() {
    for (dtype, kernels) in [(DType::F32, 1), (DType::BF16, 0)] {
        let c = kernel([300, 613], dtype, false, gelu_now);
        assert_eq!(kernels_of(c), kernels, "{dtype}: kernels");
    }
    agree(false, gelu_now, |x, _, y| {
        let inner = 0.797_884_560_802_865_4 * (x + 0.044715 * x * x * x);
        let want = x * (0.5 * (1.0 + inner.tanh()));
        if x.is_nan() || x == f64::NEG_INFINITY {
            // -inf: -inf * 0 in both.
            return y.is_nan();
        }
        same(y, want) || (y - want).abs() <= 1e-6 * x.abs().max(1.0)
    });
}

#[test]
fn a_chain_with_a_broadcast_operand_and_slow_paths_equals_the_unfused_run() {
    // tanh((x - z) * 0.5) * z with z one value per row; sin far past its reduction's
    // range, a power taken by squarings in a loop, an exp and a division by lanes.
    agree(
        true,
        |pl, x, z| {
            let t = &pl.tanh(&(&(x - z) * 0.5)) * z;
            let s = &pl.sin(&(&t * 1e5)).powi(5) + 0.25;
            &pl.exp(&(&s * 2.0)) / x
        },
        |_, _, _| true,
    );
}

/// `x * 2 + 1` as JAX writes it.
fn affine_of_x<'c>(_: &'c Ctx, x: &Value<'c>, _: &Value<'c>) -> Value<'c> {
    &(x * 2.0) + 1.0
}

/// `0.25 + 3 * |x|`: the constants on the left, of a computed register (whose slot the
/// result may take).
fn affine_of_abs<'c>(pl: &'c Ctx, x: &Value<'c>, _: &Value<'c>) -> Value<'c> {
    &x.scalar(0.25) + &(&x.scalar(3.0) * &pl.abs(x))
}

#[test]
fn affine_maps_run_as_one_kernel_and_equal_the_unfused_run_and_f64() {
    for (f, bf16) in [(affine_of_x as Body, 1), (affine_of_abs, 2)] {
        // bf16's |x| is a kernel of its own, with x's widen.
        for (dtype, want) in [(DType::F32, 1), (DType::BF16, bf16), (DType::F16, 1)] {
            let c = kernel([7, 2500], dtype, false, f);
            assert_eq!(kernels_of(c), want, "{dtype}: kernels");
        }
    }
    // Exact in f32 for these data.
    agree(false, affine_of_x, |x, _, y| {
        same(y, (x * 2.0 + 1.0) as f32 as f64)
    });
    agree(false, affine_of_abs, |x, _, y| {
        same(y, (0.25 + 3.0 * x.abs()) as f32 as f64)
    });
}

/// Softmax's `exp(x - z)` in f32, `x` and `z` converted from the dtype.
fn exp_of_difference<'c>(pl: &'c Ctx, x: &Value<'c>, z: &Value<'c>) -> Value<'c> {
    let d = &x.astype(DType::F32) - &z.astype(DType::F32);
    pl.exp(&d).astype(x.dtype())
}

#[test]
fn exp_of_a_difference_runs_as_one_kernel_and_equals_the_unfused_run_and_f64() {
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let c = kernel([7, 2500], dtype, true, exp_of_difference);
        assert_eq!(kernels_of(c), 1, "{dtype}: kernels");
    }
    // `z` one value a row (a block within a row or across two), and one per element.
    for rows in [true, false] {
        agree(rows, exp_of_difference, |x, z, y| {
            let want = (x as f32 as f64 - z as f32 as f64).exp();
            let d = x - z;
            if d.is_nan() || want.is_infinite() || want == 0.0 {
                return same(y, want) || (y.is_nan() && d.is_nan());
            }
            (y - want).abs() <= 2e-7 * want.abs() || (want < 1e-37 && y.abs() < 1e-37)
        });
    }
}

/// Unary float ops of `x`, each alone, with their values in f64 (none for a sine of
/// far arguments): bf16's widen of `x` and the op run as one kernel (sin and a fifth
/// power through loops of their own).
type Unaries = Vec<(&'static str, Body, Option<fn(f64) -> f64>)>;

fn unaries() -> Unaries {
    vec![
        ("exp", |pl, x, _| pl.exp(x), Some(f64::exp)),
        ("log", |pl, x, _| pl.log(x), Some(f64::ln)),
        ("tanh", |pl, x, _| pl.tanh(x), Some(f64::tanh)),
        (
            "logistic",
            |pl, x, _| pl.logistic(x),
            Some(|x| 1.0 / (1.0 + (-x).exp())),
        ),
        ("erf", |pl, x, _| pl.erf(x), Some(libm::erf)),
        ("rsqrt", |pl, x, _| pl.rsqrt(x), Some(|x| 1.0 / x.sqrt())),
        ("abs", |pl, x, _| pl.abs(x), Some(f64::abs)),
        ("sin", |pl, x, _| pl.sin(&(x * 1e5)), None),
        ("powi5", |_, x, _| x.powi(5), Some(|x| x.powi(5))),
    ]
}

#[test]
fn a_unary_op_of_a_widened_bf16_runs_as_one_kernel_and_equals_the_unfused_run_and_f64() {
    for (name, f, exact) in unaries() {
        let c = kernel([300, 613], DType::BF16, false, f);
        // sin's argument is a product of its own (no widen right before the sine).
        let want = usize::from(name != "sin");
        assert_eq!(kernels_of(c), want, "{name}: kernels");
        // f32 within 1e-6 relative of f64 (the ops' bounds, a few ulps, are vmath's).
        agree(false, f, |x, _, y| {
            let Some(exact) = exact else { return true };
            let want = exact(x);
            let subnormal = x != 0.0 && x.abs() < 1e-37;
            subnormal || same(y, want) || (y - want).abs() <= 1e-6 * want.abs()
        });
    }
    // An op of a value broadcast along the rows, beside one of lanes.
    agree(true, |pl, x, z| &pl.erf(z) * &pl.exp(x), |_, _, _| true);
}

/// `log(|x| + 1)`, as JAX writes `jnp.log(jnp.abs(x) + 1)`.
fn log_of_abs_plus_one<'c>(pl: &'c Ctx, x: &Value<'c>, _: &Value<'c>) -> Value<'c> {
    pl.log(&(&pl.abs(x) + 1.0))
}

/// `exp(0.5 + x / 4)`: the constant on the left, no abs, of a computed register (whose
/// slot the result may take).
fn exp_of_shift<'c>(pl: &'c Ctx, x: &Value<'c>, _: &Value<'c>) -> Value<'c> {
    pl.exp(&(&x.scalar(0.5) + &(x / 4.0)))
}

#[test]
fn a_unary_op_of_a_shift_runs_as_one_kernel_and_equals_the_unfused_run_and_f64() {
    for f in [log_of_abs_plus_one as Body, exp_of_shift] {
        let c = kernel([7, 2500], DType::F32, false, f);
        assert_eq!(kernels_of(c), 1, "f32: kernels");
    }
    // The sum is exact in f32 for these data but the subnormal's (1 + 1e-40 is 1).
    let near = |y: f64, want: f64| same(y, want) || (y - want).abs() <= 2e-7 * want.abs();
    agree(false, log_of_abs_plus_one, |x, _, y| {
        near(y, ((x.abs() as f32 + 1.0) as f64).ln())
    });
    agree(false, exp_of_shift, |x, _, y| {
        let want = ((0.5 + x as f32 / 4.0) as f64).exp();
        near(y, want) || (want < 1e-37 && y.abs() < 1e-37) || (want > 3.4e38 && y.is_infinite())
    });
}

/// softmax's `e / s` stored in the dtype: an f32 division converted to it.
fn quotient_converted<'c>(_: &'c Ctx, x: &Value<'c>, z: &Value<'c>) -> Value<'c> {
    (&x.astype(DType::F32) / &z.astype(DType::F32)).astype(x.dtype())
}

#[test]
fn a_quotient_converted_to_16_bits_runs_as_one_kernel_and_equals_the_unfused_run_and_f64() {
    // f32 has no convert (the division alone).
    for (dtype, want) in [(DType::F32, 0), (DType::BF16, 1), (DType::F16, 1)] {
        let c = kernel([7, 2500], dtype, true, quotient_converted);
        assert_eq!(kernels_of(c), want, "{dtype}: kernels");
    }
    // The divisor one value a row (a block within a row or across two), and per element.
    for rows in [true, false] {
        agree(rows, quotient_converted, |x, z, y| {
            same(y, (x as f32 / z as f32) as f64)
        });
    }
}
