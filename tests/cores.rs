//! The TensorCores of a chip as agents (`GridSpec::cores`): they share the chip's HBM
//! and have their own VMEM and semaphores.

mod common;

use common::simulate;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::kernel::{ds, GridSpec, MemorySpace, PallasCall};
use tpusim::sched::ScheduleSpec;
use tpusim::{DType, HostArray, Mesh};

/// Two chips of two cores; each core copies its half of the chip's input through its
/// own VMEM into the same half of the chip's output (`overlap`: both take half 0).
fn halves(overlap: bool) -> (PallasCall, Mesh) {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Any, &[4, 8], DType::I32)
        .output("y", MemorySpace::Any, &[4, 8], DType::I32)
        .vmem("buf", &[2, 8], DType::I32)
        .dma_sem("sem")
        .cores(2);
    let call = PallasCall::new("halves", spec, move |pl, a| {
        let core = if overlap { 0 } else { pl.axis_index("core") };
        let rows = ds(2 * core, 2);
        let c = pl.make_async_copy(a.r("x").slice(rows), a.r("buf"), a.sem("sem"));
        c.start();
        c.wait();
        let c = pl.make_async_copy(a.r("buf"), a.r("y").slice(rows), a.sem("sem"));
        c.start();
        c.wait();
    });
    (call, Mesh::with_axes(&[("x", 2), ("core", 2)]).unwrap())
}

#[test]
fn cores_share_their_chips_hbm() {
    let (call, mesh) = halves(false);
    let chip =
        |c: i32| HostArray::from_i32(&[4, 8], (0..32).map(|v| v + 100 * c).collect()).unwrap();
    // Every core is given its chip's input; the chip's HBM is its first core's.
    let inputs: Vec<Vec<HostArray>> = (0..4).map(|d| vec![chip(d / 2)]).collect();
    let out = simulate(&call, &mesh, &inputs, &mut CpuExecutor::new()).unwrap();
    for c in 0..2 {
        let want: Vec<i32> = (0..32).map(|v| v + 100 * c as i32).collect();
        assert_eq!(out[2 * c][0].as_i32(), &want[..], "chip {c}");
    }
}

#[test]
fn two_cores_writing_one_hbm_range_race() {
    let (call, mesh) = halves(true);
    let job = tpusim::run::Job::call(call, mesh.clone());
    let report = job
        .check(&ScheduleSpec::check_set(mesh.size(), 20, 0))
        .unwrap();
    assert!(
        report
            .findings
            .iter()
            .any(|f| matches!(f.problem, tpusim::verify::Problem::Race(_))),
        "{report:?}"
    );
    let (clean, m) = halves(false);
    let report = tpusim::run::Job::call(clean, m.clone())
        .check(&ScheduleSpec::check_set(m.size(), 20, 0))
        .unwrap();
    assert!(report.findings.is_empty(), "{report:?}");
}
