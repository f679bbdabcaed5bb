//! Long work stops when a caller that watches it is asked to (Ctrl-C in Python:
//! `tpusim::interrupt`): the check of many schedules, a long schedule, a run, each with
//! `Error::Interrupted` instead of its result, so nothing is left half-done. (Each
//! would otherwise run to its end: minutes for the check.)

use std::time::Duration;
use tpusim::collectives::Registry;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::interrupt;
use tpusim::mesh::Placement;
use tpusim::run::Job;
use tpusim::{Error, Mesh};

fn psum(p: usize) -> Job {
    let c = Registry::builtin().by_name("psum").unwrap();
    Job::collective(c, Placement::whole(Mesh::new(p, "x").unwrap()))
}

/// `work` watched on this thread while another asks to stop after `after`.
fn stopped<T: std::fmt::Debug>(after: Duration, work: impl FnOnce() -> tpusim::Result<T>) -> Error {
    let _watch = interrupt::watch(None);
    let asker = std::thread::spawn(move || {
        std::thread::sleep(after);
        interrupt::request();
    });
    let got = work();
    asker.join().unwrap();
    got.expect_err("the work ran to its end: nothing looked for the request")
}

#[test]
fn a_check_of_many_schedules_stops() {
    // 10 000 schedules at P = 64: minutes of work (within the default time limit).
    let e = stopped(Duration::from_millis(300), || psum(64).check_set(10_000, 0));
    assert!(matches!(e, Error::Interrupted), "{e}");
}

#[test]
fn one_long_schedule_stops_in_its_steps() {
    // One schedule of psum at P = 1024: millions of scheduler steps, seconds of work.
    let e = stopped(Duration::from_millis(200), || {
        psum(1024).check(&[tpusim::sched::ScheduleSpec::Eager])
    });
    assert!(matches!(e, Error::Interrupted), "{e}");
}

#[test]
fn a_run_of_many_iterations_stops() {
    let job = psum(16).with_shape(&[64, 1024]);
    let plan = job.plan().unwrap();
    let exec = CpuExecutor::new();
    use tpusim::device_sim::Executor;
    let mut run = exec.prepare(&plan.program, &plan.schedule).unwrap();
    let e = stopped(Duration::from_millis(300), || run.run(1_000_000));
    assert!(matches!(e, Error::Interrupted), "{e}");
}
