//! ppermute and all_gather on the GPU and CPU executors against the XLA-semantics
//! reference, over many P, shapes and dtypes (integer data is compared exactly).

mod common;

use tpusim::collectives::{self, run_checked, AllGather, Collective, Ppermute};
use tpusim::exec::cpu::CpuExecutor;
use tpusim::exec::Executor;
use tpusim::{DType, Mesh};

const PS: [usize; 7] = [1, 2, 3, 4, 5, 8, 16];
const SHAPES: [&[usize]; 3] = [&[8, 128], &[3, 5], &[2, 3, 7]];

fn check(c: &dyn Collective, exec: &mut dyn Executor) {
    for p in PS {
        for shape in SHAPES {
            for dtype in [DType::I32, DType::F32] {
                let mesh = Mesh::new(p, "x").unwrap();
                let r = run_checked(c, &mesh, shape, dtype, exec, p as u64).unwrap_or_else(|e| {
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
    check(&Ppermute::default(), &mut CpuExecutor::new());
}

#[test]
fn ppermute_right_shift_gpu() {
    check(&Ppermute::default(), &mut *common::gpu());
}

#[test]
fn all_gather_cpu() {
    check(&AllGather, &mut CpuExecutor::new());
}

#[test]
fn all_gather_gpu() {
    check(&AllGather, &mut *common::gpu());
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
        let c = Ppermute {
            perm: Some(perm.clone()),
        };
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
    for c in collectives::all() {
        let mesh = Mesh::new(5, "x").unwrap();
        let call = c.call(&mesh, &[4, 32], DType::F32).unwrap();
        let program = call.lower(&mesh).unwrap();
        let inputs = collectives::random_inputs(&program, 42);
        let a = collectives::simulate(&call, &mesh, &inputs, &mut CpuExecutor::new()).unwrap();
        let b = collectives::simulate(&call, &mesh, &inputs, &mut *common::gpu()).unwrap();
        assert_eq!(a, b, "{}", c.name());
        // The reference must agree too (and must differ from the input: not a no-op).
        assert_eq!(a, c.reference(&inputs).unwrap());
        assert_ne!(a[0][0].words, inputs[0][0].words);
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
    let out = collectives::simulate(&call, &mesh, &inputs, &mut *common::gpu()).unwrap();
    for dev in &out {
        assert_eq!(dev[0].shape, vec![4, 2]);
        assert_eq!(dev[0].as_i32(), &[0, 0, 1, 1, 2, 2, 3, 3]);
    }
}
