//! The verifier's precision: correct kernels that stress the credit rules (several
//! signals for one wait, a counting semaphore credited by every device, a capacity
//! semaphore reused every step, two barrier rounds across calls) are clean at P = 2..8
//! and compute what they should; a broken twin of each, one handshake off, is reported
//! (`tests/kernels`). Both rounds of a barrier on the barrier semaphore itself only
//! push the hazard the docs' double barrier is for to longer rings.

mod common;
mod kernels;

use common::{check, check_repeated, simulate};
use kernels::{cases, shift_after_rounds};
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::kernel::PallasCall;
use tpusim::sched::ScheduleSpec;
use tpusim::verify::{ProblemKind, Report};
use tpusim::{HostArray, Mesh};

fn report(call: &PallasCall, p: usize, repeat: usize) -> Report {
    let mesh = Mesh::new(p, "x").unwrap();
    let specs = ScheduleSpec::check_set(p, 24, 0);
    if repeat == 1 {
        check(call, &mesh, &specs).unwrap()
    } else {
        check_repeated(call, &mesh, repeat, &specs).unwrap()
    }
}

fn assert_clean(name: &str, call: &PallasCall, p: usize, repeat: usize) {
    let r = report(call, p, repeat);
    if let Some(f) = r.findings.first() {
        panic!("{name} at P={p}: {}", f.problem);
    }
}

fn assert_reported(name: &str, call: &PallasCall, p: usize, repeat: usize, kind: ProblemKind) {
    let k = report(call, p, repeat).kinds();
    assert!(
        !k.is_empty() && k.iter().all(|x| *x == kind),
        "{name} at P={p}: {k:?}"
    );
}

#[test]
fn correct_kernels_are_clean_and_their_twins_reported() {
    for case in cases() {
        for p in 2..=8 {
            assert_clean(case.name, &(case.build)(p, false), p, case.repeat);
            let twin = (case.build)(p, true);
            if p >= case.from {
                assert_reported(case.name, &twin, p, case.repeat, case.twin);
            } else {
                assert_clean(case.name, &twin, p, case.repeat);
            }
        }
    }
}

#[test]
fn both_rounds_on_the_barrier_semaphore_hold_only_up_to_six_devices() {
    // From P = 7 the left neighbour's next-call signals can stand in for both rounds.
    for p in 2..=8 {
        let call = shift_after_rounds(2, false);
        if p < 7 {
            assert_clean("double barrier on the barrier semaphore", &call, p, 2);
        } else {
            let kind = ProblemKind::SendBeforeEntry;
            assert_reported("double barrier on the barrier semaphore", &call, p, 2, kind);
        }
    }
}

/// Every device's operands of integers `f(device, i)`.
fn inputs(p: usize, shape: &[usize], f: impl Fn(usize, usize) -> i32) -> Vec<Vec<HostArray>> {
    let n: usize = shape.iter().product();
    (0..p)
        .map(|d| vec![HostArray::from_i32(shape, (0..n).map(|i| f(d, i)).collect()).unwrap()])
        .collect()
}

#[test]
fn the_correct_kernels_compute_what_they_should() {
    for p in 2..=8 {
        let mesh = Mesh::new(p, "x").unwrap();
        let run = |call: &PallasCall, ins: &[Vec<HostArray>]| {
            simulate(call, &mesh, ins, &mut CpuExecutor::new()).unwrap()
        };
        // Device 1 gets device 0's `x`.
        let x = inputs(p, &[8], |d, i| (100 * d + i) as i32);
        let out = run(&kernels::several_signals(p, false), &x);
        assert_eq!(out[1][0].as_i32(), x[0][0].as_i32(), "P={p}");
        // Every other device adds device 0's `x` twice.
        let out = run(&kernels::counted_broadcast(p, false), &x);
        let want: Vec<i32> = x[0][0].as_i32().iter().map(|v| 2 * v).collect();
        for (d, o) in out.iter().enumerate().skip(1) {
            assert_eq!(o[0].as_i32(), &want[..], "P={p} device {d}");
        }
        // Device d gets the sum over every device of chunk d.
        let x = inputs(p, &[p, 8], |d, i| (1000 * d + i) as i32);
        let out = run(&kernels::ring_reduce_scatter(p, false), &x);
        for (d, o) in out.iter().enumerate() {
            let want: Vec<i32> = (0..8)
                .map(|j| x.iter().map(|e| e[0].as_i32()[8 * d + j]).sum())
                .collect();
            assert_eq!(o[0].as_i32(), &want[..], "P={p} device {d}");
        }
    }
}

#[test]
fn the_twin_of_several_signals_names_the_fill_and_the_push() {
    // The twin of one signal before the fill: the race is the fill against the push.
    let r = report(&kernels::several_signals(2, true), 2, 1);
    let shown = r.findings[0].problem.to_string();
    assert!(
        shown.contains("`buf`") && shown.contains("fill") && shown.contains("start"),
        "{shown}"
    );
}
