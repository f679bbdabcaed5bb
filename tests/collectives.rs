//! Every collective on the GPU and CPU executors against the XLA-semantics reference,
//! over many P, shapes, dtypes and reduction operators. Integer data is compared
//! exactly; float reductions within `SUM_TOLERANCE` (ring order vs an f64 reference).

mod common;

use common::run_checked;
use std::sync::Arc;
use tpusim::collectives::{self, AllGather, Collective, Options, Ppermute};
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::device_sim::Executor;
use tpusim::kernel::ReduceOp;
use tpusim::{DType, Mesh};

const PS: [usize; 7] = [1, 2, 3, 4, 5, 8, 16];
const SHAPES: [&[usize]; 3] = [&[8, 128], &[3, 5], &[2, 3, 7]];

/// Shapes `c` can serve at `p`, from its own rule for the leading dimension
/// (psum_scatter: a multiple of 2P rows; the rings: of P).
fn shapes_for(c: &dyn Collective, p: usize) -> Vec<Vec<usize>> {
    match c.rows_multiple(p) {
        1 => SHAPES.iter().map(|s| s.to_vec()).collect(),
        m => vec![c.default_shape(p), vec![2 * m, 3], vec![3 * m, 5]],
    }
}

fn check(c: Arc<dyn Collective>, exec: &mut dyn Executor) {
    for p in PS {
        for shape in shapes_for(c.as_ref(), p) {
            let shape = shape.as_slice();
            for dtype in [DType::I32, DType::F32] {
                let mesh = Mesh::new(p, "x").unwrap();
                let r = run_checked(&c, &mesh, shape, dtype, exec, p as u64).unwrap_or_else(|e| {
                    panic!(
                        "{} P={p} {shape:?} {dtype} on {}: {e}",
                        c.name(),
                        exec.describe()
                    )
                });
                assert!(r.total > 0);
                assert_eq!(
                    r.wrong,
                    0,
                    "{} P={p} {shape:?} {dtype} on {}",
                    c.name(),
                    exec.describe()
                );
            }
        }
    }
}

#[test]
fn ppermute_right_shift_cpu() {
    check(Arc::new(Ppermute::default()), &mut CpuExecutor::new());
}

#[test]
fn ppermute_right_shift_gpu() {
    check(Arc::new(Ppermute::default()), &mut *common::gpu());
}

#[test]
fn all_gather_cpu() {
    check(Arc::new(AllGather), &mut CpuExecutor::new());
}

#[test]
fn all_gather_gpu() {
    check(Arc::new(AllGather), &mut *common::gpu());
}

fn check_all_ops(name: &str, exec: &mut dyn Executor) {
    for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
        let c = collectives::Registry::builtin()
            .get(name, &Options { op, perm: None })
            .unwrap();
        check(c, exec);
    }
}

#[test]
fn psum_cpu() {
    check_all_ops("psum", &mut CpuExecutor::new());
}

#[test]
fn psum_gpu() {
    check_all_ops("psum", &mut *common::gpu());
}

#[test]
fn psum_scatter_cpu() {
    check(
        collectives::Registry::builtin()
            .by_name("psum_scatter")
            .unwrap(),
        &mut CpuExecutor::new(),
    );
}

#[test]
fn psum_scatter_gpu() {
    check(
        collectives::Registry::builtin()
            .by_name("psum_scatter")
            .unwrap(),
        &mut *common::gpu(),
    );
}

#[test]
fn ring_allreduce_cpu() {
    check_all_ops("ring_allreduce", &mut CpuExecutor::new());
}

#[test]
fn ring_allreduce_gpu() {
    check_all_ops("ring_allreduce", &mut *common::gpu());
}

#[test]
fn ring_allreduce_push_cpu() {
    check_all_ops("ring_allreduce_push", &mut CpuExecutor::new());
}

#[test]
fn ring_allreduce_push_gpu() {
    check_all_ops("ring_allreduce_push", &mut *common::gpu());
}

#[test]
fn reductions_are_exact_on_hand_checkable_data() {
    // Device d holds d+1 everywhere (and -(d+1) in the second half): sum, max and min
    // are known in closed form; every all-reduce must produce them exactly.
    let p = 5usize;
    let mesh = Mesh::new(p, "x").unwrap();
    let n = 2 * p * 4;
    let inputs: Vec<_> = (0..p as i32)
        .map(|d| {
            let v: Vec<i32> = (0..n)
                .map(|i| if i < n / 2 { d + 1 } else { -(d + 1) })
                .collect();
            vec![tpusim::HostArray::from_i32(&[2 * p, 4], v).unwrap()]
        })
        .collect();
    let s = p as i32 * (p as i32 + 1) / 2;
    for (op, lo, hi) in [
        (ReduceOp::Sum, s, -s),
        (ReduceOp::Max, p as i32, -1),
        (ReduceOp::Min, 1, -(p as i32)),
    ] {
        for name in ["psum", "ring_allreduce", "ring_allreduce_push"] {
            let c = collectives::Registry::builtin()
                .get(name, &Options { op, perm: None })
                .unwrap();
            let call = c.call(&mesh, &[2 * p, 4], tpusim::DType::I32).unwrap();
            let program = call.lower(&mesh).unwrap();
            let shaped: Vec<_> = inputs
                .iter()
                .map(|d| {
                    let shape = program.layout.allocs[program.inputs[0]].shape.clone();
                    vec![tpusim::HostArray {
                        shape,
                        ..d[0].clone()
                    }]
                })
                .collect();
            let out = common::simulate(&call, &mesh, &shaped, &mut *common::gpu()).unwrap();
            for dev in &out {
                let v = dev[0].as_i32();
                assert!(v[..n / 2].iter().all(|&x| x == lo), "{name} {op:?}: {v:?}");
                assert!(v[n / 2..].iter().all(|&x| x == hi), "{name} {op:?}: {v:?}");
            }
        }
    }
}

#[test]
fn psum_scatter_gives_each_device_its_block() {
    // Device k's block b is all 10*k + b: device d must get sum_k (10k + d).
    let p = 4usize;
    let mesh = Mesh::new(p, "x").unwrap();
    let c = collectives::Registry::builtin()
        .by_name("psum_scatter")
        .unwrap();
    let call = c.call(&mesh, &[2 * p, 3], DType::I32).unwrap();
    let inputs: Vec<_> = (0..p as i32)
        .map(|k| {
            let v: Vec<i32> = (0..p as i32).flat_map(|b| vec![10 * k + b; 6]).collect();
            vec![tpusim::HostArray::from_i32(&[p, 2, 3], v).unwrap()]
        })
        .collect();
    let out = common::simulate(&call, &mesh, &inputs, &mut *common::gpu()).unwrap();
    for (d, dev) in out.iter().enumerate() {
        let want = (0..p as i32).map(|k| 10 * k + d as i32).sum::<i32>();
        assert_eq!(dev[0].shape, vec![2, 3]);
        assert!(
            dev[0].as_i32().iter().all(|&x| x == want),
            "device {d}: {:?}",
            dev[0]
        );
    }
}

#[test]
fn unservable_shapes_are_bad_input() {
    let mesh = Mesh::new(3, "x").unwrap();
    for (name, shape, why) in [
        ("psum_scatter", vec![8, 4], "not divisible by 3"),
        ("psum_scatter", vec![9, 4], "must be even"),
        ("ring_allreduce", vec![4, 5], "not divisible by P=3"),
        ("ring_allreduce_push", vec![2, 2], "not divisible by P=3"),
    ] {
        let e = collectives::Registry::builtin()
            .by_name(name)
            .unwrap()
            .call(&mesh, &shape, DType::F32)
            .unwrap_err();
        assert!(matches!(e, tpusim::Error::BadInput(_)), "{e}");
        assert!(e.to_string().contains(why), "{name} {shape:?}: {e}");
    }
    let Err(e) = collectives::Registry::builtin().get(
        "all_gather",
        &Options {
            op: ReduceOp::Max,
            perm: None,
        },
    ) else {
        panic!("all_gather took --op max")
    };
    assert!(e.to_string().contains("does not take --op"), "{e}");
}

#[test]
fn ppermute_arbitrary_permutations_on_both_executors() {
    // A swap with idle devices (receivers get zeros), a 3-cycle, and a reversal.
    let perms: [(usize, Vec<(usize, usize)>); 3] = [
        (5, vec![(0, 3), (3, 0)]),
        (4, vec![(0, 2), (2, 3), (3, 0)]),
        (8, (0..8).map(|i| (i, 7 - i)).collect()),
    ];
    for (p, perm) in perms {
        let c: Arc<dyn Collective> = Arc::new(Ppermute {
            perm: Some(perm.clone()),
        });
        let mesh = Mesh::new(p, "x").unwrap();
        for dtype in [DType::I32, DType::F32] {
            let cpu = run_checked(&c, &mesh, &[4, 6], dtype, &mut CpuExecutor::new(), 7).unwrap();
            let gpu = run_checked(&c, &mesh, &[4, 6], dtype, &mut *common::gpu(), 7).unwrap();
            assert_eq!((cpu.wrong, gpu.wrong), (0, 0), "perm {perm:?} {dtype}");
        }
    }
}

#[test]
fn gpu_and_cpu_outputs_are_bit_identical() {
    for c in collectives::Registry::builtin().iter() {
        let mesh = Mesh::new(5, "x").unwrap();
        let call = c.call(&mesh, &[10, 32], DType::F32).unwrap();
        let program = call.lower(&mesh).unwrap();
        let inputs = tpusim::run::random_inputs(&program, 42).unwrap();
        let a = common::simulate(&call, &mesh, &inputs, &mut CpuExecutor::new()).unwrap();
        let b = common::simulate(&call, &mesh, &inputs, &mut *common::gpu()).unwrap();
        if c.tolerance() == 0.0 {
            // Pure data movement: both executors run the same schedule bit for bit.
            assert_eq!(a, b, "{}", c.name());
        }
        // The reference must agree too (and must differ from the input: not a no-op).
        let want = c.reference(&inputs).unwrap();
        for (got, want) in [(&a, &want), (&b, &want)] {
            for (g, w) in got.iter().zip(want) {
                assert_eq!(
                    g[0].count_mismatches(&w[0], c.tolerance()),
                    0,
                    "{}",
                    c.name()
                );
            }
        }
        assert!(
            a.iter().zip(&inputs).any(|(o, i)| o[0].words != i[0].words),
            "{}: no device's result differs from its input",
            c.name()
        );
    }
}

#[test]
fn all_gather_holds_every_shard_in_order() {
    // Exact, hand-checkable data: device d's shard is all d.
    let mesh = Mesh::new(4, "x").unwrap();
    let call = AllGather.call(&mesh, &[2], DType::I32).unwrap();
    let inputs: Vec<_> = (0..4)
        .map(|d| vec![tpusim::HostArray::from_i32(&[2], vec![d; 2]).unwrap()])
        .collect();
    let out = common::simulate(&call, &mesh, &inputs, &mut *common::gpu()).unwrap();
    for dev in &out {
        assert_eq!(dev[0].shape, vec![4, 2]);
        assert_eq!(dev[0].as_i32(), &[0, 0, 1, 1, 2, 2, 3, 3]);
    }
}
