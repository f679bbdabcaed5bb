//! VMEM compute (fill, copy, accumulate) and same-allocation copies on both executors,
//! against values computed directly in the test; one region larger than a 128 MiB binding.

mod common;

use common::simulate;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::kernel::{ds, GridSpec, MemorySpace, PallasCall, ReduceOp};
use tpusim::{DType, HostArray, Mesh};

/// o = a; o[1..] op= b[..n-1]; o[5..12] = 3; o[0..k] += o[k..2k] (same allocation);
/// then a local DMA inside one HBM allocation: h[1] = h[0].
fn compute_call(n: usize, dtype: DType, op: ReduceOp) -> PallasCall {
    let spec = GridSpec::new()
        .input("a", MemorySpace::Vmem, &[n], dtype)
        .input("b", MemorySpace::Vmem, &[n], dtype)
        .output("o", MemorySpace::Vmem, &[n], dtype)
        .output("h", MemorySpace::Any, &[2, 4], dtype)
        .vmem("v", &[4], dtype)
        .dma_sem("sem");
    PallasCall::new("compute", spec, move |pl, a| {
        let (x, y, o, h, v, sem) = (a.r(0), a.r(1), a.r(2), a.r(3), a.r(4), a.sem(5));
        let n = n as i64;
        pl.copy(o, x);
        pl.accumulate(o.slice(ds(1, n - 1)), y.slice(ds(0, n - 1)), op);
        pl.fill(o.slice(ds(5, 7)), 3.0);
        let k = n / 4;
        pl.add_assign(o.slice(ds(0, k)), o.slice(ds(k, k)));
        pl.fill(v, 9.0);
        let c = pl.make_async_copy(v, h.at(0), sem);
        c.start();
        c.wait();
        let c = pl.make_async_copy(h.at(0), h.at(1), sem);
        c.start();
        c.wait();
    })
}

fn expected(a: &[i64], b: &[i64], op: ReduceOp) -> Vec<i64> {
    let n = a.len();
    let mut o = a.to_vec();
    for i in 1..n {
        let (d, s) = (o[i], b[i - 1]);
        o[i] = match op {
            ReduceOp::Sum => d + s,
            ReduceOp::Max => d.max(s),
            ReduceOp::Min => d.min(s),
        };
    }
    for v in &mut o[5..12] {
        *v = 3;
    }
    let k = n / 4;
    for i in 0..k {
        o[i] += o[k + i];
    }
    o
}

fn run_case(n: usize, dtype: DType, op: ReduceOp) {
    let mesh = Mesh::new(1, "x").unwrap();
    let call = compute_call(n, dtype, op);
    // Small integers, exact in every dtype (sums stay below 2^8, bf16's exact range).
    let a: Vec<i64> = (0..n).map(|i| (i % 97) as i64 - 40).collect();
    let b: Vec<i64> = (0..n).map(|i| (i % 89) as i64 - 44).collect();
    let arr = |shape: &[usize], v: &[i64]| {
        let v: Vec<f64> = v.iter().map(|&x| x as f64).collect();
        HostArray::from_values(dtype, shape, &v).unwrap()
    };
    let inputs = vec![vec![arr(&[n], &a), arr(&[n], &b)]];
    let want = arr(&[n], &expected(&a, &b, op));
    let want_h = arr(&[2, 4], &[9; 8]);
    let cpu = simulate(&call, &mesh, &inputs, &mut CpuExecutor::new()).unwrap();
    let gpu = simulate(&call, &mesh, &inputs, &mut *common::gpu()).unwrap();
    for (name, out) in [("cpu", &cpu), ("gpu", &gpu)] {
        assert_eq!(
            out[0][0].count_mismatches(&want, 0.0),
            0,
            "{name} n={n} {dtype} {op:?}"
        );
        assert_eq!(out[0][1], want_h, "{name} {dtype}");
    }
}

#[test]
fn small_compute_matches_hand_reference() {
    for dtype in DType::COLLECTIVE {
        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
            run_case(1000, dtype, op);
            // 16-bit: odd lengths and offsets end mid-word.
            run_case(1001, dtype, op);
        }
    }
}

#[test]
fn compute_beyond_one_storage_binding() {
    // 34,000,003 words = 136 MB > 128 MiB: every accumulate and fill runs in windows,
    // at unaligned offsets.
    run_case(34_000_003, DType::I32, ReduceOp::Sum);
    // 68,000,007 bf16 = 136 MB: windows of 16-bit elements, packed two per word.
    run_case(68_000_007, DType::BF16, ReduceOp::Sum);
}

#[test]
fn collective_region_beyond_one_storage_binding() {
    // all_gather output of 2 x 2 x 8,500,001 i32 = 136 MB per device; GPU == reference.
    use tpusim::collectives::{AllGather, Collective};
    let mesh = Mesh::new(2, "x").unwrap();
    let c: std::sync::Arc<dyn Collective> = std::sync::Arc::new(AllGather);
    let r = common::run_checked(
        &c,
        &mesh,
        &[2, 8_500_001],
        DType::I32,
        &mut *common::gpu(),
        3,
    )
    .unwrap();
    assert_eq!(r.wrong, 0);
    assert_eq!(r.total, 2 * 2 * 2 * 8_500_001);
}

#[test]
fn vec4_and_scalar_accumulates_agree_with_the_reference() {
    // Aligned regions (multiples of 4 elements at 16-byte offsets) take the vec4 shader,
    // the others the scalar one; both must give exact integer sums, max and min.
    let n = 4096usize;
    for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
        let spec = GridSpec::new()
            .input("a", MemorySpace::Vmem, &[n], DType::I32)
            .input("b", MemorySpace::Vmem, &[n], DType::I32)
            .output("o", MemorySpace::Vmem, &[n], DType::I32);
        let call = PallasCall::new("mix", spec, move |pl, a| {
            pl.copy(a.r(2), a.r(0));
            pl.accumulate(a.r(2).slice(ds(0, 2048)), a.r(1).slice(ds(1024, 2048)), op); // vec4
            pl.accumulate(a.r(2).slice(ds(2049, 1001)), a.r(1).slice(ds(3, 1001)), op);
            // scalar
        });
        let a: Vec<i32> = (0..n as i32).map(|i| (i * 7919) % 2003 - 1000).collect();
        let b: Vec<i32> = (0..n as i32).map(|i| (i * 104_729) % 1999 - 999).collect();
        let f = |x: i32, y: i32| match op {
            ReduceOp::Sum => x + y,
            ReduceOp::Max => x.max(y),
            ReduceOp::Min => x.min(y),
        };
        let mut want = a.clone();
        for i in 0..2048 {
            want[i] = f(want[i], b[1024 + i]);
        }
        for i in 0..1001 {
            want[2049 + i] = f(want[2049 + i], b[3 + i]);
        }
        let inputs = vec![vec![
            HostArray::from_i32(&[n], a).unwrap(),
            HostArray::from_i32(&[n], b).unwrap(),
        ]];
        let mesh = Mesh::new(1, "x").unwrap();
        let gpu = simulate(&call, &mesh, &inputs, &mut *common::gpu()).unwrap();
        assert_eq!(gpu[0][0].as_i32(), &want[..], "{op:?}");
    }
}

#[test]
fn batched_accumulates_give_the_same_result_in_fewer_dispatches() {
    use tpusim::collectives;
    use tpusim::device_sim::gpu::{ArenaMode, GpuExecutor, Lowering};
    use tpusim::run::random_inputs;
    use tpusim::sched::{schedule, Eager};
    let mesh = Mesh::new(4, "x").unwrap();
    for name in [
        "psum",
        "psum_scatter",
        "ring_allreduce",
        "ring_allreduce_push",
    ] {
        let c = collectives::Registry::builtin().by_name(name).unwrap();
        let call = c
            .call(
                &mesh,
                &collectives::Registry::builtin()
                    .by_name(name)
                    .unwrap()
                    .default_shape(4),
                DType::I32,
            )
            .unwrap();
        let program = call.lower(&mesh).unwrap();
        let sched = schedule(&program, &mut Eager::default()).unwrap();
        let inputs = random_inputs(&program, 9).unwrap();
        let mut results = Vec::new();
        let mut counts = Vec::new();
        let ctx = common::gpu().context().clone();
        for batching in [false, true] {
            let mut gpu = GpuExecutor::new(ctx.clone());
            gpu.set_batching(batching);
            gpu.set_arena(ArenaMode::Off);
            let run = gpu.prepare_run(&program, &sched).unwrap();
            assert_eq!(run.lowering(), Lowering::PerOp);
            run.upload(&inputs).unwrap();
            run.run(2).unwrap();
            counts.push(run.dispatches());
            results.push(run.read_outputs().unwrap());
        }
        assert_eq!(results[0], results[1], "{name}");
        let want = c.reference(&inputs).unwrap();
        assert_eq!(results[1][2][0], want[2][0], "{name}");
        assert!(
            counts[1] < counts[0],
            "{name}: {counts:?} dispatches without / with batching"
        );
    }
}
