//! The line from which a stretch runs a block at a time is the machine's
//! (`blocked::least_blocked_bytes`), set here through its variable: psum's stretch runs
//! whole ops below it and blocks past it, and either way its results equal the unfused
//! executor's bit for bit and the sums of the inputs computed in f64 (small integers:
//! exact). The line is read once per process: this file is a process of its own, and
//! sets it before any plan.

use tpusim::collectives::Registry;
use tpusim::device_sim::cpu::{CpuExecutor, CpuPlan};
use tpusim::device_sim::Executor;
use tpusim::mesh::Placement;
use tpusim::{DType, HostArray, Mesh};

/// Device `d`'s input: small integers, different on every device.
fn values(n: usize, d: usize) -> Vec<f64> {
    (0..n)
        .map(|i| ((i * 7919 + d * 104_729) % 17) as f64 - 8.0)
        .collect()
}

#[test]
fn psum_runs_whole_below_the_line_and_blocked_past_it_with_the_same_bits() {
    // Blocks of 64 KiB, the line at 1 MiB of views: psum's stretch takes two blocks or
    // more at every shape below, and the default line (32 MiB) blocks none of them.
    std::env::set_var("TPUSIM_BLOCK_BYTES", "64K");
    std::env::set_var("TPUSIM_BLOCKED_FROM", "1M");
    let psum = Registry::builtin().by_name("psum").unwrap();
    let devices = 4;
    let mesh = Mesh::new(devices, "x").unwrap();
    for (rows, past) in [(64, false), (128, true), (509, true)] {
        let shape = [rows, 131];
        let n = rows * 131;
        for dtype in [DType::F32, DType::I32, DType::BF16] {
            let job = tpusim::run::Job::collective(psum.clone(), Placement::whole(mesh.clone()))
                .with_shape(&shape)
                .with_dtype(dtype);
            let plan = job.plan().unwrap();
            let cpu = CpuPlan::of(&plan.program, &plan.schedule);
            assert_eq!(
                cpu.blocked_stretches(&plan.schedule) > 0,
                past,
                "{rows} rows {dtype}: blocked"
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
            let fused = run(&CpuExecutor::new());
            let plain = run(&CpuExecutor::unfused());
            let want: Vec<f64> = (0..n).map(|i| data.iter().map(|v| v[i]).sum()).collect();
            for d in 0..devices {
                assert!(
                    fused[d][0].words == plain[d][0].words,
                    "{rows} rows {dtype} device {d}: fused and unfused differ"
                );
                assert_eq!(fused[d][0].values(), want, "{rows} rows {dtype} device {d}");
            }
        }
    }
}
