//! `Ctx::semaphore_read`: the value a semaphore holds when the read runs, written into
//! VMEM as data (the schedule decides it), on both executors; it orders nothing, so a
//! read that races a remote signal gives a value that depends on the schedule.

mod common;

use common::{check, gpu, simulate};
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::device_sim::Executor;
use tpusim::kernel::{GridSpec, MemorySpace, PallasCall};
use tpusim::run::Job;
use tpusim::sched::ScheduleSpec;
use tpusim::verify::ProblemKind;
use tpusim::{DType, HostArray, Mesh};

/// Device d signals its own semaphore d + 1 times, reads it into `y`, then waits for it.
fn own_count() -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[1], DType::I32)
        .output("y", MemorySpace::Vmem, &[1], DType::I32)
        .regular_sem("s");
    PallasCall::new("own_count", spec, |pl, a| {
        let n = pl.axis_index("x") + 1;
        for _ in 0..n {
            pl.semaphore_signal(a.sem(2), 1, None::<tpusim::mesh::DeviceId>);
        }
        pl.semaphore_read(a.sem(2), a.r(1));
        pl.semaphore_wait(a.sem(2), n);
    })
}

/// Device 0 signals device 1's semaphore once; device 1 reads it (unordered with the
/// signal), then waits for it.
fn racing_read() -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[1], DType::I32)
        .output("y", MemorySpace::Vmem, &[1], DType::I32)
        .regular_sem("s");
    PallasCall::new("racing_read", spec, |pl, a| {
        let me = pl.axis_index("x");
        if me == 0 {
            pl.semaphore_signal(a.sem(2), 1, 1);
            pl.fill(a.r(1), -1.0);
        } else {
            pl.semaphore_read(a.sem(2), a.r(1));
            pl.semaphore_wait(a.sem(2), 1);
        }
    })
}

fn zeros(p: usize) -> Vec<Vec<HostArray>> {
    (0..p)
        .map(|_| vec![HostArray::from_i32(&[1], vec![0]).unwrap()])
        .collect()
}

fn values(out: &[Vec<HostArray>]) -> Vec<i32> {
    out.iter().map(|d| d[0].as_i32()[0]).collect()
}

#[test]
fn a_read_sees_the_count_its_device_signalled_on_both_executors() {
    let p = 4;
    let mesh = Mesh::new(p, "x").unwrap();
    let want: Vec<i32> = (1..=p as i32).collect();
    let cpu = simulate(&own_count(), &mesh, &zeros(p), &mut CpuExecutor::new()).unwrap();
    assert_eq!(values(&cpu), want);
    let mut g = gpu();
    let on_gpu = simulate(&own_count(), &mesh, &zeros(p), &mut *g as &mut dyn Executor).unwrap();
    assert_eq!(values(&on_gpu), want);
    let r = check(&own_count(), &mesh, &ScheduleSpec::check_set(p, 20, 0)).unwrap();
    assert!(r.is_clean(), "{:?}", r.kinds());
}

#[test]
fn a_read_racing_a_remote_signal_depends_on_the_schedule() {
    let mesh = Mesh::new(2, "x").unwrap();
    let mut seen = Vec::new();
    for spec in ScheduleSpec::check_set(2, 40, 0) {
        let out = Job::call(racing_read(), mesh.clone())
            .with_schedule(spec)
            .execute(&mut CpuExecutor::new(), &zeros(2))
            .unwrap();
        let v = values(&out);
        assert_eq!(v[0], -1);
        assert!(v[1] == 0 || v[1] == 1, "{spec}: {v:?}");
        if !seen.contains(&v[1]) {
            seen.push(v[1]);
        }
    }
    seen.sort();
    assert_eq!(seen, vec![0, 1], "both values under some schedule");
    // Reading a semaphore is no memory access of it: the verifier has nothing to report.
    let r = check(&racing_read(), &mesh, &ScheduleSpec::check_set(2, 20, 0)).unwrap();
    assert!(r.is_clean(), "{:?}", r.kinds());
}

#[test]
fn a_read_into_anything_but_one_int32_is_refused() {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[2], DType::I32)
        .output("y", MemorySpace::Vmem, &[2], DType::F32)
        .regular_sem("s");
    let call = PallasCall::new("bad_read", spec, |pl, a| {
        pl.semaphore_read(a.sem(2), a.r(1));
    });
    let mesh = Mesh::new(2, "x").unwrap();
    let r = check(&call, &mesh, &ScheduleSpec::check_set(2, 2, 0)).unwrap();
    assert_eq!(r.kinds(), vec![ProblemKind::Other]);
    let shown = r.findings[0].problem.to_string();
    assert!(
        shown.contains("semaphore_read writes one int32 element"),
        "{shown}"
    );
    assert!(shown.contains("tests/semaphore_read.rs:"), "{shown}");
}
