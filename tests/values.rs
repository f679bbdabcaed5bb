//! Kernels that compute: values loaded from VMEM refs, combined with the compute ops,
//! stored back; checked against values computed directly here (exact integer data
//! where the op allows).

mod common;

use common::simulate;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::kernel::{GridSpec, MemorySpace, PallasCall};
use tpusim::{DType, HostArray, Mesh};

fn one_device(
    spec: GridSpec,
    inputs: Vec<HostArray>,
    kernel: impl Fn(&tpusim::kernel::Ctx, &tpusim::kernel::Args) + Send + Sync + 'static,
) -> Vec<HostArray> {
    let call = PallasCall::new("values", spec, kernel);
    let mesh = Mesh::new(1, "x").unwrap();
    let mut out = simulate(&call, &mesh, &[inputs], &mut CpuExecutor::new()).unwrap();
    out.remove(0)
}

#[test]
fn an_integer_matmul_with_elementwise_math_is_exact() {
    // y = (a @ b) * 2 + iota, a: 3x5, b: 5x4 of small integers.
    let (m, k, n) = (3usize, 5usize, 4usize);
    let a: Vec<i32> = (0..(m * k) as i32).map(|v| v % 7 - 3).collect();
    let b: Vec<i32> = (0..(k * n) as i32).map(|v| (v * 5) % 11 - 5).collect();
    let spec = GridSpec::new()
        .input("a", MemorySpace::Vmem, &[m, k], DType::I32)
        .input("b", MemorySpace::Vmem, &[k, n], DType::I32)
        .output("y", MemorySpace::Vmem, &[m, n], DType::I32);
    let out = one_device(
        spec,
        vec![
            HostArray::from_i32(&[m, k], a.clone()).unwrap(),
            HostArray::from_i32(&[k, n], b.clone()).unwrap(),
        ],
        move |pl, r| {
            let (x, w) = (pl.load(r.r("a")), pl.load(r.r("b")));
            let p = pl.dot(&x, &w);
            let two = &p * 2.0;
            let idx = pl.iota(&[m, n], 1, DType::I32);
            pl.store(r.r("y"), &(&two + &idx));
        },
    );
    let mut want = vec![0i32; m * n];
    for i in 0..m {
        for j in 0..n {
            let s: i32 = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            want[i * n + j] = 2 * s + j as i32;
        }
    }
    assert_eq!(out[0].as_i32(), &want[..]);
}

#[test]
fn float_math_reductions_and_casts_agree_with_f64() {
    // y = sum(tanh(x) * x, axis 1) as f32; m = argmax(x, 1); z = x.T as bf16 -> f32.
    let (r, c) = (3usize, 5usize);
    let x: Vec<f32> = (0..(r * c)).map(|v| (v as f32 - 7.0) / 4.0).collect();
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[r, c], DType::F32)
        .output("y", MemorySpace::Vmem, &[r], DType::F32)
        .output("m", MemorySpace::Vmem, &[r], DType::I32)
        .output("z", MemorySpace::Vmem, &[c, r], DType::F32);
    let out = one_device(
        spec,
        vec![HostArray::from_f32(&[r, c], x.clone()).unwrap()],
        |pl, a| {
            let v = pl.load(a.r("x"));
            let t = pl.tanh(&v);
            let s = (&t * &v).sum(&[1]);
            pl.store(a.r("y"), &s);
            pl.store(a.r("m"), &v.argmax(1));
            let z = v.transpose(&[1, 0]).astype(DType::BF16).astype(DType::F32);
            pl.store(a.r("z"), &z);
        },
    );
    for i in 0..r {
        let want: f64 = (0..c)
            .map(|j| {
                let v = x[i * c + j] as f64;
                v.tanh() * v
            })
            .sum();
        let got = out[0].as_f32()[i] as f64;
        assert!(
            (got - want).abs() <= 1e-5 * want.abs().max(1.0),
            "{got} vs {want}"
        );
        assert_eq!(
            out[1].as_i32()[i],
            (c - 1) as i32,
            "row {i}'s largest is its last"
        );
    }
    for j in 0..c {
        for i in 0..r {
            let v = x[i * c + j];
            let want = half::bf16::from_f32(v).to_f32();
            assert_eq!(out[2].as_f32()[j * r + i], want);
        }
    }
}

#[test]
fn windows_select_and_compare() {
    // o = x; o[1:3, 2:4] = where(x[0:2, 0:2] > 0, 1, -1) (i32).
    let x: Vec<i32> = (0..20).map(|v| v - 10).collect();
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[4, 5], DType::I32)
        .output("o", MemorySpace::Vmem, &[4, 5], DType::I32);
    let out = one_device(
        spec,
        vec![HostArray::from_i32(&[4, 5], x.clone()).unwrap()],
        |pl, a| {
            let v = pl.load(a.r("x"));
            pl.store(a.r("o"), &v);
            let w = pl.load_window(a.r("x"), &[0, 0], &[2, 2]);
            let zero = pl.full(&[], 0.0, DType::I32);
            let c = w.gt(&zero);
            let one = pl.full(&[2, 2], 1.0, DType::I32);
            let minus = pl.full(&[2, 2], -1.0, DType::I32);
            pl.store_window(a.r("o"), &[1, 2], &pl.where_(&c, &one, &minus));
        },
    );
    let mut want = x.clone();
    for i in 0..2 {
        for j in 0..2 {
            want[(1 + i) * 5 + 2 + j] = if x[i * 5 + j] > 0 { 1 } else { -1 };
        }
    }
    assert_eq!(out[0].as_i32(), &want[..]);
}

#[test]
fn compute_on_hbm_and_bad_shapes_are_kernel_errors() {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Any, &[4], DType::F32)
        .output("o", MemorySpace::Vmem, &[4], DType::F32);
    let call = PallasCall::new("bad", spec, |pl, a| {
        let v = pl.load(a.r("x"));
        pl.store(a.r("o"), &v);
    });
    let e = call
        .lower(&Mesh::new(1, "x").unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("lives in HBM"), "{e}");
    let spec = GridSpec::new().output("o", MemorySpace::Vmem, &[4], DType::F32);
    let call = PallasCall::new("bad", spec, |pl, a| {
        let x = pl.full(&[4], 1.0, DType::F32);
        let y = pl.full(&[3], 1.0, DType::F32);
        pl.store(a.r("o"), &(&x + &y));
    });
    let e = call
        .lower(&Mesh::new(1, "x").unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot give"), "{e}");
    assert!(
        e.contains("tests/values.rs"),
        "names the kernel's line: {e}"
    );
}
