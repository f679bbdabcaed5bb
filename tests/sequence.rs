//! Kernel invocations back to back (`--repeat`, `Job::then`): the barrier semaphore of a
//! `collective_id` carries over, each invocation's other semaphores and buffers are its
//! own, and the verifier finds the hazard the Pallas docs' double barrier is for.

mod common;

use std::sync::Arc;
use tpusim::collectives::variants::variant;
use tpusim::collectives::{barrier_shift, Collective, Registry};
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::error::{Error, ExitProblem};
use tpusim::ir::{Feed, Op, OpKind, Program, SemKind, SemRef};
use tpusim::mesh::Placement;
use tpusim::model::{presets, TimedEvent};
use tpusim::run::Job;
use tpusim::sched::{observe, Credit, Observer, ScheduleSpec};
use tpusim::verify::{Problem, ProblemKind};
use tpusim::{DType, Mesh};

fn collective(name: &str) -> Arc<dyn Collective> {
    Registry::builtin().by_name(name).unwrap()
}

/// Collective `name` (or its `variant`) on a ring of `p`, `k` invocations back to back.
fn job(name: &str, variant_name: Option<&str>, p: usize, k: usize) -> Job {
    let place = Placement::whole(Mesh::new(p, "x").unwrap());
    let job = match variant_name {
        Some(v) => Job::variant(collective(name), variant(name, v).unwrap(), place),
        None => Job::collective(collective(name), place),
    };
    job.repeat(k).unwrap()
}

/// What a run tells about the barrier semaphore across invocations: per device, the
/// barrier signals that reached it from a device already in a later invocation (and how
/// many of them before its own barrier wait of its invocation), and whether a device
/// passed a barrier wait while a neighbour had not entered that invocation yet.
struct Barriers<'p> {
    p: &'p Program,
    entered: Vec<usize>,
    waited: Vec<bool>,
    early: Vec<(usize, usize)>,
    passed_alone: bool,
}

impl<'p> Barriers<'p> {
    fn of(p: &'p Program, spec: ScheduleSpec) -> Self {
        let mut b = Barriers {
            p,
            entered: vec![0; p.devices],
            waited: vec![false; p.devices],
            early: vec![(0, 0); p.devices],
            passed_alone: false,
        };
        observe(p, spec.policy().as_mut(), &mut b).unwrap();
        b
    }

    fn barrier(&self, s: &SemRef) -> bool {
        self.p.layout.sems[s.sem()].kind == SemKind::Barrier
    }

    /// The most next-invocation signals one device held, and of them before its wait.
    fn most_early(&self) -> (usize, usize) {
        self.early.iter().copied().max().unwrap_or_default()
    }
}

impl Observer for Barriers<'_> {
    fn enter(&mut self, device: usize, _invocation: usize) {
        self.entered[device] += 1;
        self.waited[device] = false;
    }
    fn credit(&mut self, sem: SemRef, _amount: u64, by: Credit) {
        let to = sem.device();
        if let Credit::Signal { device, .. } = by {
            // A signal of invocation 0 may reach a device before its entry: the barrier
            // semaphore exists before the kernel. Any later one is early.
            if self.barrier(&sem) && self.entered[device] > self.entered[to].max(1) {
                self.early[to].0 += 1;
                self.early[to].1 += usize::from(!self.waited[to]);
            }
        }
    }
    fn acquire(&mut self, device: usize, op: &Op) {
        if let OpKind::Wait { sem, .. } = &op.kind {
            if self.barrier(sem) {
                self.waited[device] = true;
                let n = self.p.devices;
                let k = self.entered[device];
                let behind = [(device + n - 1) % n, (device + 1) % n]
                    .iter()
                    .any(|&d| self.entered[d] < k);
                self.passed_alone |= behind;
            }
        }
    }
}

#[test]
fn shipped_kernels_are_clean_two_and_three_invocations_back_to_back() {
    for name in Registry::builtin().names() {
        for p in [2usize, 3, 4, 5, 8] {
            for (k, n) in [(2, 1000), (3, 100)] {
                let r = job(name, None, p, k)
                    .check(&ScheduleSpec::check_set(p, n, 1000))
                    .unwrap();
                assert_eq!(r.schedules, n);
                assert!(
                    r.is_clean(),
                    "{name} P={p} --repeat {k}: {:?}",
                    r.findings.first().map(|f| f.problem.to_string())
                );
            }
        }
    }
    // The whole-mesh collective on a 2-D torus too.
    let mesh = Mesh::with_axes(&[("x", 4), ("y", 2)]).unwrap();
    let place = Placement::whole(mesh);
    let j = Job::collective(collective("allreduce_2d"), place)
        .repeat(2)
        .unwrap();
    assert!(j
        .check(&ScheduleSpec::check_set(8, 200, 0))
        .unwrap()
        .is_clean());
}

/// Every kind of schedule set a check can run: the hazard is a fact of happens-before.
fn schedule_sets(p: usize) -> Vec<Vec<ScheduleSpec>> {
    let mut sets = vec![
        ScheduleSpec::check_set(p, 1, 7),
        ScheduleSpec::check_set(p, 50, 3),
    ];
    for s in [
        "eager",
        "lazy",
        "lockstep",
        "run-ahead:1",
        "random:0",
        "random:12345",
    ] {
        sets.push(vec![ScheduleSpec::parse(s).unwrap()]);
    }
    sets
}

#[test]
fn the_docs_hazard_is_reported_for_a_one_round_barrier_whatever_the_schedule() {
    for p in [3usize, 4, 5, 8] {
        let once = job("ppermute", Some("single-barrier"), p, 1);
        assert!(once
            .check(&ScheduleSpec::check_set(p, 100, 0))
            .unwrap()
            .is_clean());
        let twice = job("ppermute", Some("single-barrier"), p, 2);
        for specs in schedule_sets(p) {
            let r = twice.check(&specs).unwrap();
            if p < 5 {
                // The left neighbour's own handshake waits on the right one: no schedule
                // sends before that entry.
                assert!(r.is_clean(), "P={p} {specs:?}: {:?}", r.kinds());
                continue;
            }
            assert_eq!(
                r.kinds(),
                vec![ProblemKind::SendBeforeEntry],
                "P={p} {specs:?}"
            );
            assert_eq!(r.findings[0].schedules, specs.len(), "P={p}");
            let Problem::Early(e) = &r.findings[0].problem else {
                unreachable!()
            };
            // Both sides and their invocations: the send, the receiver's entry, the
            // barrier wait and the next invocation's signal that stands in.
            assert_eq!(e.sender.invocation, Some(0), "{e}");
            assert_eq!(e.entry.as_ref().and_then(|s| s.invocation), Some(0), "{e}");
            let s = e.stand_in.as_ref().expect("the stand-in is named");
            assert_eq!(s.wait.invocation, Some(0));
            let instead = s.instead.site.as_ref().unwrap();
            assert_eq!(instead.invocation, Some(1), "{e}");
            assert_eq!(
                instead.device,
                (e.sender.device + p - 1) % p,
                "the left neighbour"
            );
            let shown = r.findings[0].problem.to_string();
            assert!(
                shown.contains("double barrier") && shown.contains("barrier.rs"),
                "{shown}"
            );
        }
        // The docs' fix: a second round.
        let mesh = Mesh::new(p, "x").unwrap();
        let fixed = barrier_shift(&[8, 128], DType::F32, true);
        for k in [2, 3] {
            let r = common::check_repeated(&fixed, &mesh, k, &ScheduleSpec::check_set(p, 300, 0))
                .unwrap();
            assert!(r.is_clean(), "P={p} --repeat {k}: {:?}", r.kinds());
        }
    }
    // With two devices both neighbours are one: its two signals are its own entry.
    let r =
        job("ppermute", Some("single-barrier"), 2, 2).check(&ScheduleSpec::check_set(2, 200, 0));
    assert!(r.unwrap().is_clean());
}

/// The docs' hazard happens in a run of the one-round shift: under `run-ahead:1` a
/// device takes its left neighbour's next-invocation signal before its own barrier wait
/// and, from P = 5 on, passes that wait before its right neighbour has entered (at
/// P = 3 and 4 the left neighbour's own handshake waits on the right one, so no run
/// shows it, and the verifier reports it clean).
/// In one-round psum it cannot: the most that happens (under `lazy`) is that a device
/// holds both neighbours' next-invocation signals while still in the invocation, always
/// after its own barrier wait, and the result is right on the CPU and the GPU.
#[test]
fn one_round_psum_cannot_be_fooled_and_lazy_comes_closest() {
    for p in [3usize, 4, 5, 8] {
        let shift = job("ppermute", Some("single-barrier"), p, 2)
            .lower()
            .unwrap();
        let b = Barriers::of(&shift, ScheduleSpec::RunAhead(1));
        assert!(b.most_early().1 >= 1, "shift P={p}");
        assert_eq!(b.passed_alone, p >= 5, "shift P={p}");

        let psum = job("psum", Some("single-barrier"), p, 2);
        let program = psum.lower().unwrap();
        let b = Barriers::of(&program, ScheduleSpec::Lazy);
        assert_eq!(b.most_early(), (2, 0), "psum P={p}");
        for spec in ScheduleSpec::check_set(p, 200, 0) {
            let b = Barriers::of(&program, spec);
            assert!(
                b.most_early().1 == 0 && !b.passed_alone,
                "psum P={p} {spec}"
            );
        }
        for k in [2, 3] {
            let r = job("psum", Some("single-barrier"), p, k)
                .check(&ScheduleSpec::check_set(p, 200, 0))
                .unwrap();
            assert!(r.is_clean(), "P={p} --repeat {k}: {:?}", r.kinds());
        }
        let lazy = psum
            .clone()
            .with_dtype(DType::I32)
            .with_schedule(ScheduleSpec::Lazy);
        assert_eq!(lazy.run(&mut CpuExecutor::new(), 1).unwrap().wrong, 0);
        assert_eq!(lazy.run(&mut *common::gpu(), 1).unwrap().wrong, 0);
    }
}

#[test]
fn two_collectives_sharing_a_collective_id_run_and_check_as_a_sequence() {
    for p in [3usize, 4, 5] {
        let place = || Placement::whole(Mesh::new(p, "x").unwrap());
        // psum_scatter then psum: both collective_id 0, one barrier semaphore.
        let scatter =
            Job::collective(collective("psum_scatter"), place()).with_shape(&[8 * p, 128]);
        let psum = Job::collective(collective("psum"), place());
        let seq = scatter.then(psum).unwrap().with_dtype(DType::I32);
        let program = seq.lower().unwrap();
        assert_eq!(program.invocations.len(), 2);
        let barriers = program
            .layout
            .sems
            .iter()
            .filter(|s| s.kind == SemKind::Barrier);
        assert_eq!(barriers.count(), 1, "one barrier semaphore, shared");
        assert!(seq
            .check(&ScheduleSpec::check_set(p, 300, 0))
            .unwrap()
            .is_clean());
        assert_eq!(seq.run(&mut CpuExecutor::new(), 2).unwrap().wrong, 0);
        assert_eq!(seq.run(&mut *common::gpu(), 2).unwrap().wrong, 0);

        // all_gather (Pallas' entry barrier) then psum of the gathered rows.
        let gather = Job::collective(collective("all_gather"), place());
        let psum = Job::collective(collective("psum"), place()).with_shape(&[8 * p, 128]);
        let seq = gather.then(psum).unwrap();
        assert!(seq
            .check(&ScheduleSpec::check_set(p, 300, 0))
            .unwrap()
            .is_clean());
        assert_eq!(seq.run(&mut CpuExecutor::new(), 3).unwrap().wrong, 0);

        // A one-round shift then psum on the same collective_id: the shift's left
        // neighbour enters psum and signals the barrier it shares.
        let mesh = Mesh::new(p, "x").unwrap();
        let shift = |double| Job::call(barrier_shift(&[8, 128], DType::F32, double), mesh.clone());
        let psum = Job::collective(collective("psum"), place());
        let bad = shift(false).then(psum.clone()).unwrap();
        let r = bad.check(&ScheduleSpec::check_set(p, 50, 0)).unwrap();
        // On a ring of 3 or 4 the shift's left neighbour waits on the right one first.
        let expect = if p >= 5 {
            vec![ProblemKind::SendBeforeEntry]
        } else {
            vec![]
        };
        assert_eq!(r.kinds(), expect, "P={p}");
        let good = shift(true).then(psum).unwrap();
        assert!(good
            .check(&ScheduleSpec::check_set(p, 300, 0))
            .unwrap()
            .is_clean());
    }
}

#[test]
fn every_report_names_its_invocation() {
    let r = job("ppermute", Some("extra-signal"), 4, 2)
        .check(&[ScheduleSpec::Eager])
        .unwrap();
    let sems: Vec<String> = r
        .findings
        .iter()
        .filter_map(|f| match &f.problem {
            Problem::Exit(ExitProblem::SemaphoreNotZero { semaphore, .. }) => {
                Some(semaphore.clone())
            }
            _ => None,
        })
        .collect();
    // One finding per bug: the same semaphore of every invocation is one.
    assert_eq!(sems, ["done of invocation 0"], "{r:?}");

    let r = job("ppermute", Some("missing-signal"), 4, 2)
        .check(&[ScheduleSpec::Eager])
        .unwrap();
    let Problem::Deadlock(blocked) = &r.findings[0].problem else {
        panic!("{:?}", r.kinds())
    };
    assert!(
        blocked.iter().all(|b| b.site.invocation == Some(0)),
        "{blocked:?}"
    );
    assert!(r.findings[0]
        .problem
        .to_string()
        .contains("in invocation 0"));

    let r = job("psum", Some("no-capacity-sem"), 3, 2)
        .check(&[ScheduleSpec::Lazy])
        .unwrap();
    let Problem::Race(race) = &r.findings[0].problem else {
        panic!("{:?}", r.kinds())
    };
    assert!(race.alloc.ends_with("of invocation 0"), "{race:?}");
    for side in [&race.first, &race.second] {
        let site = side.site.as_ref().unwrap();
        assert!(
            site.invocation.is_some() && site.location.contains("psum.rs"),
            "{site}"
        );
    }
}

#[test]
fn a_repeat_of_zero_or_beyond_memory_is_bad_input() {
    let p = Placement::whole(Mesh::new(4, "x").unwrap());
    let Err(e) = Job::collective(collective("psum"), p.clone()).repeat(0) else {
        panic!("a repeat of 0 is refused")
    };
    assert!(
        matches!(e, Error::BadInput(_)) && e.to_string().contains("at least 1"),
        "{e}"
    );
    let absurd = Job::collective(collective("psum"), p)
        .repeat(1 << 40)
        .unwrap();
    let e = absurd.check(&[ScheduleSpec::Eager]).unwrap_err();
    assert!(matches!(e, Error::TooLarge(_)), "{e}");
    assert!(
        e.to_string().contains("the largest --repeat that fits is"),
        "{e}"
    );
}

#[test]
fn invocations_feed_each_other_and_keep_their_own_semaphores() {
    let program = job("psum", None, 4, 3).lower().unwrap();
    assert_eq!(program.invocations.len(), 3);
    let once = job("psum", None, 4, 1).lower().unwrap();
    let barrier = |p: &Program| {
        p.layout
            .sems
            .iter()
            .filter(|s| s.kind == SemKind::Barrier)
            .count()
    };
    assert_eq!(barrier(&program), 1);
    assert_eq!(
        program.layout.sems.len(),
        3 * (once.layout.sems.len() - 1) + 1
    );
    // psum's result is the next one's input; all_gather's is not, so it reads its own again.
    assert_eq!(program.invocations[1].feeds, [Feed::Output(0)]);
    let gather = job("all_gather", None, 4, 2).lower().unwrap();
    assert_eq!(gather.invocations[1].feeds, [Feed::Input(0)]);
    for (exec, k) in [
        (
            &mut CpuExecutor::new() as &mut dyn tpusim::device_sim::Executor,
            3,
        ),
        (&mut *common::gpu(), 2),
    ] {
        for name in ["psum", "all_gather", "psum_scatter", "allreduce_2d"] {
            let j = job(name, None, 4, k).with_dtype(DType::I32);
            assert_eq!(j.run(exec, 5).unwrap().wrong, 0, "{name} --repeat {k}");
        }
    }
}

#[test]
fn step_tables_and_timelines_show_the_invocations() {
    let t = job("psum", None, 4, 2).trace().unwrap();
    assert_eq!(t.rows.len(), 1 + 2 * 4);
    assert_eq!(t.rows[4].invocation, Some(0));
    assert_eq!(t.rows[5].invocation, Some(1));
    assert!(t.markdown().contains("| #1 [3] |"), "{}", t.markdown());
    // After the second psum, o_ref holds every device's shard four times.
    let last = &t.rows[8].cells[0][2];
    assert!(
        matches!(last, tpusim::trace::Cell::Sum(terms, _) if terms.len() == 16),
        "{last:?}"
    );

    // A permutation that keeps only devices 0 and 1 busy: the others leave early.
    let opts = tpusim::collectives::Options {
        perm: Some(vec![(0, 1)]),
        ..Default::default()
    };
    let c = Registry::builtin().get("ppermute", &opts).unwrap();
    let place = Placement::whole(Mesh::new(4, "x").unwrap());
    let m = (presets()[0].model)();
    let run = Job::collective(c, place)
        .repeat(2)
        .unwrap()
        .model(&m, None)
        .unwrap();
    let spans: Vec<(usize, usize, f64, f64)> = run
        .events
        .iter()
        .filter_map(|e| match e {
            TimedEvent::Invocation {
                device,
                invocation,
                start,
                end,
                ..
            } => Some((*device, *invocation, *start, *end)),
            _ => None,
        })
        .collect();
    assert_eq!(spans.len(), 8);
    // Some device is in the second invocation while another is still in the first.
    let overlap = spans.iter().any(|a| {
        spans
            .iter()
            .any(|b| a.1 == 1 && b.1 == 0 && a.0 != b.0 && a.2 < b.3)
    });
    assert!(overlap, "{spans:?}");
}

#[test]
fn a_computing_kernel_repeated_computes_on_its_own_result() {
    use tpusim::kernel::{GridSpec, MemorySpace, PallasCall};
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[2, 4], DType::I32)
        .output("y", MemorySpace::Vmem, &[2, 4], DType::I32);
    let call = PallasCall::new("affine", spec, |pl, r| {
        let x = pl.load(r.r("x"));
        pl.store(r.r("y"), &(&(&x * 2.0) + 1.0));
    });
    let mesh = Mesh::new(2, "x").unwrap();
    let x: Vec<i32> = (0..8).collect();
    let inputs = vec![vec![tpusim::HostArray::from_i32(&[2, 4], x.clone()).unwrap()]; 2];
    let job = Job::call(call, mesh).repeat(3).unwrap();
    let want: Vec<i32> = x.iter().map(|v| ((v * 2 + 1) * 2 + 1) * 2 + 1).collect();
    for exec in [
        &mut CpuExecutor::new() as &mut dyn tpusim::device_sim::Executor,
        &mut *common::gpu(),
    ] {
        let out = job.execute(exec, &inputs).unwrap();
        assert_eq!(out[1][0].as_i32(), &want[..], "{}", exec.describe());
    }
    assert!(job
        .check(&ScheduleSpec::check_set(2, 20, 0))
        .unwrap()
        .is_clean());
}
