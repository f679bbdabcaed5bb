//! The reduction collectives at 64 MiB per device (P = 4, i32 for exact checks), on
//! both executors. One test, run sequentially, to bound peak memory.

mod common;

use common::run_checked;
use tpusim::collectives;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::{DType, Mesh};

#[test]
fn reductions_at_64_mib_per_device() {
    let mesh = Mesh::new(4, "x").unwrap();
    let shard = [4096usize, 4096]; // 16 Mi i32 = 64 MiB per device
    for name in [
        "psum",
        "psum_scatter",
        "ring_allreduce",
        "ring_allreduce_push",
    ] {
        let c = collectives::Registry::builtin().by_name(name).unwrap();
        let gpu = run_checked(&c, &mesh, &shard, DType::I32, &mut *common::gpu(), 1).unwrap();
        let cpu = run_checked(&c, &mesh, &shard, DType::I32, &mut CpuExecutor::new(), 1).unwrap();
        assert_eq!((gpu.wrong, cpu.wrong), (0, 0), "{name}");
        assert!(gpu.total >= 4 * 4096 * 4096 / 4, "{name}: {}", gpu.total);
    }
}
