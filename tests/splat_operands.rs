//! A broadcast that binary ops of a fused region read, taken as one value for a whole
//! block where the block lies in one run of it (never filled), and as lanes where a
//! block spans runs: `y = (x - b) * 3 + b` with `b` broadcast along the trailing
//! dimensions, at row lengths shorter than a block, longer and not a multiple of it,
//! a multiple of it over the cores, and broadcast along two dimensions, in f32, bf16,
//! f16 and i32, with NaNs and signed zeros among the float data. Held to values computed
//! here (small integers: exact in every dtype) and to the unfused run bit for bit.

mod common;

use common::simulate;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::kernel::{GridSpec, MemorySpace, PallasCall};
use tpusim::{DType, HostArray, Mesh};

/// Small integers, with a NaN and a -0 every 997 elements when `specials`.
fn data(n: usize, seed: usize, specials: bool) -> Vec<f64> {
    (0..n)
        .map(|i| match (i + seed) % 997 {
            17 if specials => f64::NAN,
            29 if specials => -0.0,
            _ => (((i + seed) * 7919) % 41) as f64 - 20.0,
        })
        .collect()
}

fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || (a == b && a.is_sign_negative() == b.is_sign_negative())
}

/// `y = (x - b) * 3 + b`, `b` (of the leading `lead` dims of `shape`) broadcast.
fn kernel(shape: &[usize], lead: usize, dtype: DType) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, shape, dtype)
        .input("b", MemorySpace::Vmem, &shape[..lead], dtype)
        .output("y", MemorySpace::Vmem, shape, dtype);
    let shape = shape.to_vec();
    PallasCall::new("splat", spec, move |pl, a| {
        let x = pl.load(a.r("x"));
        let dims: Vec<usize> = (0..lead).collect();
        let b = pl.load(a.r("b")).broadcast_in_dim(&shape, &dims);
        let three = &(&x - &b) * 3.0;
        pl.store(a.r("y"), &(&three + &b));
    })
}

#[test]
fn broadcast_operands_as_one_value_equal_their_definition_and_the_unfused_run() {
    let mesh = Mesh::new(1, "x").unwrap();
    for (shape, lead) in [
        (vec![7usize, 2500], 1),
        (vec![300, 613], 1),
        (vec![4, 3, 700], 1),
        (vec![1100, 1024], 1),
        (vec![3, 5, 2048], 2),
    ] {
        let n: usize = shape.iter().product();
        let rows: usize = shape[..lead].iter().product();
        let run = n / rows;
        for dtype in [DType::F32, DType::BF16, DType::F16, DType::I32] {
            let float = dtype.is_float();
            let xs = data(n, 0, float);
            let bs = data(rows, 5, float);
            let x = HostArray::from_values(dtype, &shape, &xs).unwrap();
            let b = HostArray::from_values(dtype, &shape[..lead], &bs).unwrap();
            let c = kernel(&shape, lead, dtype);
            let inputs = [vec![x, b]];
            let fused = simulate(&c, &mesh, &inputs, &mut CpuExecutor::new()).unwrap();
            let plain = simulate(&c, &mesh, &inputs, &mut CpuExecutor::unfused()).unwrap();
            let (got, want) = (&fused[0][0], &plain[0][0]);
            assert_eq!(got.words, want.words, "{shape:?} {dtype}: fused != unfused");
            let vals = got.values();
            for (i, &g) in vals.iter().enumerate() {
                let (xv, bv) = (xs[i], bs[i / run]);
                let e = (xv - bv) * 3.0 + bv;
                assert!(
                    same(g, e),
                    "{shape:?} {dtype} [{i}]: {g} != {e} (x {xv}, b {bv})"
                );
            }
        }
    }
}
