//! DMAs that signal REGULAR semaphores (TPU v6 and later): each completion adds one,
//! waited for with `semaphore_wait(sem, 1)`; the verifier orders what those waits
//! order and no more.

mod common;

use common::{check, gpu, simulate};
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::device_sim::Executor;
use tpusim::kernel::{GridSpec, MemorySpace, PallasCall};
use tpusim::sched::ScheduleSpec;
use tpusim::verify::ProblemKind;
use tpusim::{DType, HostArray, Mesh};

/// Each device pushes `x` into its right neighbour's `y`; `waits` says how it then
/// waits: `"regular"` (semaphore_wait for one on each side) or `"descriptor"` (the
/// DMA's own `wait`, which a REGULAR semaphore does not take).
fn shift(waits: &'static str) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Any, &[8], DType::I32)
        .output("y", MemorySpace::Any, &[8], DType::I32)
        .regular_sem("send")
        .regular_sem("recv");
    PallasCall::new("regular_shift", spec, move |pl, a| {
        let right = (pl.axis_index("x") + 1) % pl.axis_size("x");
        let c = pl.make_async_remote_copy(a.r(0), a.r(1), a.sem(2), a.sem(3), right);
        c.start();
        if waits == "regular" {
            pl.semaphore_wait(a.sem(2), 1);
            pl.semaphore_wait(a.sem(3), 1);
        } else {
            c.wait();
        }
    })
}

/// Two local DMAs land on one REGULAR semaphore; the device waits for one completion
/// (or, `both`, two) and then reads both destinations.
fn two_on_one(both: bool) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Any, &[8], DType::I32)
        .output("y", MemorySpace::Vmem, &[8], DType::I32)
        .vmem("a", &[8], DType::I32)
        .vmem("b", &[8], DType::I32)
        .regular_sem("sem");
    PallasCall::new("two_on_one", spec, move |pl, a| {
        pl.make_async_copy(a.r(0), a.r(2), a.sem(4)).start();
        pl.make_async_copy(a.r(0), a.r(3), a.sem(4)).start();
        pl.semaphore_wait(a.sem(4), if both { 2 } else { 1 });
        pl.copy(a.r(1), a.r(2));
        pl.add_assign(a.r(1), a.r(3));
    })
}

fn inputs(p: usize) -> Vec<Vec<HostArray>> {
    (0..p)
        .map(|d| {
            vec![HostArray::from_i32(&[8], (0..8).map(|i| (100 * d + i) as i32).collect()).unwrap()]
        })
        .collect()
}

#[test]
fn a_ring_on_regular_semaphores_moves_the_data_on_both_executors_and_is_clean() {
    let p = 4;
    let mesh = Mesh::new(p, "x").unwrap();
    let x = inputs(p);
    let mut g = gpu();
    for out in [
        simulate(&shift("regular"), &mesh, &x, &mut CpuExecutor::new()).unwrap(),
        simulate(&shift("regular"), &mesh, &x, &mut *g as &mut dyn Executor).unwrap(),
    ] {
        for d in 0..p {
            assert_eq!(
                out[d][0].as_i32(),
                x[(d + p - 1) % p][0].as_i32(),
                "device {d}"
            );
        }
    }
    let r = check(&shift("regular"), &mesh, &ScheduleSpec::check_set(p, 30, 0)).unwrap();
    assert!(
        r.is_clean(),
        "{:?}",
        r.findings.first().map(|f| f.problem.to_string())
    );
}

#[test]
fn one_completion_waited_orders_one_dma_and_two_order_both() {
    let mesh = Mesh::new(2, "x").unwrap();
    let specs = ScheduleSpec::check_set(2, 30, 0);
    let bad = check(&two_on_one(false), &mesh, &specs).unwrap();
    assert!(
        bad.kinds().contains(&ProblemKind::Race),
        "{:?}",
        bad.kinds()
    );
    let good = check(&two_on_one(true), &mesh, &specs).unwrap();
    assert!(
        good.is_clean(),
        "{:?}",
        good.findings.first().map(|f| f.problem.to_string())
    );
    let out = simulate(
        &two_on_one(true),
        &mesh,
        &inputs(2),
        &mut CpuExecutor::new(),
    )
    .unwrap();
    for (d, x) in inputs(2).iter().enumerate() {
        let want: Vec<i32> = x[0].as_i32().iter().map(|v| 2 * v).collect();
        assert_eq!(out[d][0].as_i32(), &want[..]);
    }
}

#[test]
fn a_descriptor_wait_on_a_regular_semaphore_is_refused_naming_semaphore_wait() {
    let mesh = Mesh::new(2, "x").unwrap();
    let r = check(
        &shift("descriptor"),
        &mesh,
        &ScheduleSpec::check_set(2, 2, 0),
    )
    .unwrap();
    assert_eq!(r.kinds(), vec![ProblemKind::Other]);
    let shown = r.findings[0].problem.to_string();
    assert!(
        shown.contains("is a REGULAR semaphore: a DMA adds one to it per completion"),
        "{shown}"
    );
    assert!(shown.contains("semaphore_wait(sem, 1)"), "{shown}");
    assert!(shown.contains("tests/regular_dma.rs:"), "{shown}");
}
