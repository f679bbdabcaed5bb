//! Ring collectives whose buffers outgrow the caches run their stretches of copies,
//! fills, accumulates and sums a block of elements at a time on the CPU executor: the
//! results equal the unfused executor's bit for bit and the sums of the inputs computed
//! here in f64 (small integers: exact in every dtype), at an odd shape, in every
//! collective dtype, for sum, max and min.

use tpusim::collectives::{Options, Registry};
use tpusim::device_sim::cpu::{CpuExecutor, CpuPlan};
use tpusim::device_sim::Executor;
use tpusim::ir::ReduceOp;
use tpusim::mesh::Placement;
use tpusim::{DType, HostArray, Mesh};

/// Device `d`'s input: small integers, different on every device.
fn values(n: usize, d: usize) -> Vec<f64> {
    (0..n)
        .map(|i| ((i * 7919 + d * 104_729) % 17) as f64 - 8.0)
        .collect()
}

#[test]
fn psum_beyond_the_caches_runs_blocked_and_equals_unfused_and_f64_sums() {
    let registry = Registry::builtin();
    let base = registry.by_name("psum").unwrap();
    let devices = 4;
    // About 1 Mi elements a device: the views of a step's stretch pass the blocked
    // runs' least footprint.
    let shape = [8191, 131];
    let n: usize = shape.iter().product();
    let mesh = Mesh::new(devices, "x").unwrap();
    for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
        let c = base.with_options(&Options { op, perm: None }).unwrap();
        for dtype in DType::COLLECTIVE {
            let job = tpusim::run::Job::collective(c.clone(), Placement::whole(mesh.clone()))
                .with_shape(&shape)
                .with_dtype(dtype);
            let plan = job.plan().unwrap();
            let cpu = CpuPlan::of(&plan.program, &plan.schedule);
            assert!(
                cpu.blocked_stretches(&plan.schedule) > 0,
                "{op:?} {dtype}: no stretch runs blocked"
            );
            let data: Vec<Vec<f64>> = (0..devices).map(|d| values(n, d)).collect();
            let inputs: Vec<Vec<HostArray>> = data
                .iter()
                .map(|v| vec![HostArray::from_values(dtype, &shape, v).unwrap()])
                .collect();
            let run = |exec: &dyn Executor| {
                let mut r = exec.prepare(&plan.program, &plan.schedule).unwrap();
                r.upload(&inputs).unwrap();
                // Twice: the second starts from the first's buffers.
                r.run(2).unwrap();
                r.read_outputs().unwrap()
            };
            let blocked = run(&CpuExecutor::new());
            let plain = run(&CpuExecutor::unfused());
            let want: Vec<f64> = (0..n)
                .map(|i| {
                    let each = data.iter().map(|v| v[i]);
                    match op {
                        ReduceOp::Sum => each.sum(),
                        ReduceOp::Max => each.fold(f64::MIN, f64::max),
                        ReduceOp::Min => each.fold(f64::MAX, f64::min),
                    }
                })
                .collect();
            for d in 0..devices {
                assert!(
                    blocked[d][0].words == plain[d][0].words,
                    "{op:?} {dtype} device {d}: blocked and unfused differ"
                );
                let got = blocked[d][0].values();
                let wrong = got.iter().zip(&want).position(|(g, w)| g != w);
                assert_eq!(
                    wrong, None,
                    "{op:?} {dtype} device {d}: first wrong element"
                );
            }
        }
    }
}
