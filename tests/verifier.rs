//! The verifier: broken variants are reported with the right kind, the seed kernels
//! are clean under many schedules, and races are found (and only found) where
//! happens-before does not order two accesses.

mod common;

use common::{check, check_repeated, run_scheduled};
use tpusim::collectives;
use tpusim::collectives::variants::variants;
use tpusim::device_sim::Executor;
use tpusim::kernel::{GridSpec, MemorySpace, PallasCall};
use tpusim::sched::{schedule, ScheduleSpec};
use tpusim::verify::{Problem, ProblemKind};
use tpusim::{DType, Mesh};

#[test]
fn every_broken_variant_is_reported_with_its_kind() {
    for v in variants() {
        for p in [3usize, 4, 5] {
            let c = collectives::Registry::builtin()
                .by_name(v.collective)
                .unwrap();
            // A whole-mesh collective breaks on a 2-D mesh (its y ring is empty on -p).
            let mesh = match c.span() {
                collectives::Span::Ring => Mesh::new(p, "x").unwrap(),
                collectives::Span::Mesh => Mesh::with_axes(&[("x", p), ("y", 2)]).unwrap(),
            };
            let shape = c.default_shape(mesh.size());
            let call = v.call(&mesh, &shape, DType::F32).unwrap();
            let specs = ScheduleSpec::check_set(mesh.size(), 40, 0);
            let r = check_repeated(&call, &mesh, v.repeat, &specs).unwrap();
            match v.expect.filter(|_| p >= v.devices) {
                Some(k) => assert!(
                    r.kinds().contains(&k),
                    "{v:?} at P={p}: expected {k}, got {:?}",
                    r.kinds()
                ),
                None => assert!(r.is_clean(), "{v:?} at P={p}: {:?}", r.kinds()),
            }
            // A mistake that needs several invocations does not show in one.
            if v.repeat > 1 {
                let one = check(&call, &mesh, &specs).unwrap();
                assert!(one.is_clean(), "{v:?} at P={p} once: {:?}", one.kinds());
            }
            // Every finding points at the kernel line to fix.
            for f in &r.findings {
                let shown = f.problem.to_string();
                assert!(shown.contains("src/collectives/"), "{shown}");
            }
        }
    }
}

#[test]
fn the_new_variants_are_found_by_every_check_whatever_the_seed() {
    for (collective, name) in [("all_gather", "shared-recv-sem"), ("psum", "no-barrier")] {
        let v = variants()
            .into_iter()
            .find(|v| v.collective == collective && v.name == name)
            .unwrap();
        for p in [3usize, 4, 5] {
            let mesh = Mesh::new(p, "x").unwrap();
            let call = v
                .call(
                    &mesh,
                    &collectives::Registry::builtin()
                        .by_name(collective)
                        .unwrap()
                        .default_shape(p),
                    DType::F32,
                )
                .unwrap();
            // The default set at its smallest, and single schedules of every kind: the
            // hazard is a fact of happens-before, not of the order that ran.
            let mut sets = vec![ScheduleSpec::check_set(p, 1, 7)];
            sets.extend(
                [
                    "eager",
                    "lazy",
                    "lockstep",
                    "run-ahead:1",
                    "random:0",
                    "random:12345",
                ]
                .iter()
                .map(|s| vec![ScheduleSpec::parse(s).unwrap()]),
            );
            for specs in sets {
                let r = check(&call, &mesh, &specs).unwrap();
                assert_eq!(r.kinds(), vec![v.expect.unwrap()], "{v:?} P={p} {specs:?}");
                assert_eq!(r.findings[0].schedules, specs.len(), "{v:?} P={p}");
            }
        }
    }
}

/// The first race `check` finds in variant `name` at P = 4 under `spec`, with the report.
fn first_race(name: &str, spec: ScheduleSpec) -> (tpusim::verify::Race, String) {
    let v = variants().into_iter().find(|v| v.name == name).unwrap();
    let mesh = Mesh::new(4, "x").unwrap();
    let call = v.call(&mesh, &[8, 128], DType::I32).unwrap();
    let r = check(&call, &mesh, &[spec]).unwrap();
    assert_eq!(r.findings[0].schedule, Some(spec));
    match &r.findings[0].problem {
        Problem::Race(race) => (race.clone(), r.findings[0].problem.to_string()),
        _ => panic!("{:?}", r.kinds()),
    }
}

#[test]
fn a_shared_receive_semaphore_race_names_the_other_dma() {
    let (race, shown) = first_race("shared-recv-sem", ScheduleSpec::Eager);
    assert_eq!(race.alloc, "out_ref");
    let shared = race.shared.as_ref().expect("the shared semaphore is named");
    assert_eq!(shared.semaphore, "recv_sem");
    assert!(shared.instead.actor.starts_with("DMA device"), "{shared:?}");
    assert!(shown.contains("can satisfy it as well"), "{shown}");
    assert!(shown.contains("all_gather.rs"), "{shown}");
}

#[test]
fn seed_kernels_are_clean_under_1000_schedules() {
    for name in collectives::Registry::builtin().names() {
        for p in [2usize, 3, 4, 5, 8] {
            let mesh = Mesh::new(p, "x").unwrap();
            let c = collectives::Registry::builtin().by_name(name).unwrap();
            let call = c
                .call(
                    &mesh,
                    &collectives::Registry::builtin()
                        .by_name(name)
                        .unwrap()
                        .default_shape(p),
                    DType::F32,
                )
                .unwrap();
            let specs = ScheduleSpec::check_set(p, 1000, 1000);
            let r = check(&call, &mesh, &specs).unwrap();
            assert_eq!(r.schedules, 1000);
            assert!(
                r.is_clean(),
                "{name} P={p}: {:?}",
                r.findings.first().map(|f| f.problem.to_string())
            );
        }
    }
}

#[test]
fn no_capacity_race_names_both_sides() {
    let (race, _) = first_race("no-capacity-sem", ScheduleSpec::Lazy);
    assert_eq!(race.alloc, "hbm_buf");
    for side in [&race.first, &race.second] {
        let site = side.site.as_ref().expect("a DMA side names its start");
        assert!(site.location.contains("psum.rs"), "{site}");
    }
    assert!(race.first.access == "write" || race.second.access == "write");
}

/// A local DMA whose source is overwritten by compute before (`early`) or after the
/// DMA is waited.
fn source_overwrite(early: bool) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[16], DType::I32)
        .output("y", MemorySpace::Any, &[16], DType::I32)
        .dma_sem("sem");
    PallasCall::new("overwrite", spec, move |pl, a| {
        let c = pl.make_async_copy(a.r(0), a.r(1), a.sem(2));
        c.start();
        if early {
            pl.fill(a.r(0), 7.0);
        }
        c.wait();
        if !early {
            pl.fill(a.r(0), 7.0);
        }
    })
}

#[test]
fn writing_a_dma_source_in_flight_is_a_race_and_after_wait_is_not() {
    let mesh = Mesh::new(2, "x").unwrap();
    let all = ScheduleSpec::check_set(2, 30, 0);
    let bad = check(&source_overwrite(true), &mesh, &all).unwrap();
    assert_eq!(bad.kinds(), vec![ProblemKind::Race], "{:?}", bad.findings);
    // Under every schedule: happens-before does not depend on the order that ran.
    assert_eq!(bad.findings[0].schedules, 30);
    let good = check(&source_overwrite(false), &mesh, &all).unwrap();
    assert!(
        good.is_clean(),
        "{:?}",
        good.findings.first().map(|f| f.problem.to_string())
    );
}

/// Device 0 pushes into device 1's buffer, which device 1 reads; with `wait_for_it` the
/// reader waits for the DMA (ordered), without it the read is unordered (a race).
fn push_then_read(wait_for_it: bool) -> PallasCall {
    push_then_read_in(DType::I32, wait_for_it)
}

/// [`push_then_read`] on eight elements of `dtype`.
fn push_then_read_in(dtype: DType, wait_for_it: bool) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Any, &[8], dtype)
        .output("y", MemorySpace::Vmem, &[8], dtype)
        .vmem("buf", &[8], dtype)
        .dma_sem("send")
        .dma_sem("recv");
    PallasCall::new("push", spec, move |pl, a| {
        let me = pl.axis_index("x");
        let c = pl.make_async_remote_copy(a.r(0), a.r(2), a.sem(3), a.sem(4), 1);
        if me != 1 {
            pl.fill(a.r(1), 0.0);
        }
        if me == 0 {
            c.start();
            c.wait_send();
        }
        if me == 1 {
            if wait_for_it {
                c.wait_recv();
                pl.copy(a.r(1), a.r(2));
            } else {
                pl.copy(a.r(1), a.r(2));
                c.wait_recv();
            }
        }
    })
}

#[test]
fn reading_a_push_before_its_wait_is_a_race() {
    let mesh = Mesh::new(2, "x").unwrap();
    let all = ScheduleSpec::check_set(2, 20, 0);
    let bad = check(&push_then_read(false), &mesh, &all).unwrap();
    assert_eq!(bad.kinds(), vec![ProblemKind::Race]);
    let Problem::Race(r) = &bad.findings[0].problem else {
        unreachable!()
    };
    assert_eq!(
        (r.alloc.as_str(), r.device.device, r.bytes),
        ("buf", 1, (0, 32))
    );
    assert!(check(&push_then_read(true), &mesh, &all)
        .unwrap()
        .is_clean());
}

#[test]
fn a_race_names_its_bytes_at_the_dtypes_width() {
    // The same race on eight f16 elements covers 16 bytes, not 32.
    let mesh = Mesh::new(2, "x").unwrap();
    let bad = check(
        &push_then_read_in(DType::F16, false),
        &mesh,
        &ScheduleSpec::check_set(2, 20, 0),
    )
    .unwrap();
    let Problem::Race(r) = &bad.findings[0].problem else {
        panic!("{:?}", bad.kinds())
    };
    assert_eq!(
        (r.alloc.as_str(), r.device.device, r.bytes),
        ("buf", 1, (0, 16))
    );
}

#[test]
fn replaying_a_schedule_gives_the_same_order() {
    let mesh = Mesh::new(5, "x").unwrap();
    let c = collectives::Registry::builtin().by_name("psum").unwrap();
    let program = c
        .call(&mesh, &[2, 8], DType::I32)
        .unwrap()
        .lower(&mesh)
        .unwrap();
    let run = |s: &str| {
        schedule(&program, ScheduleSpec::parse(s).unwrap().policy().as_mut())
            .unwrap()
            .ops
    };
    assert_eq!(run("random:17"), run("random:17"));
    assert_ne!(run("random:17"), run("random:18"));
    assert_ne!(run("eager"), run("lazy"));
}

#[test]
fn every_schedule_gives_the_same_result_on_the_gpu() {
    let mesh = Mesh::new(4, "x").unwrap();
    for name in collectives::Registry::builtin().names() {
        let c = collectives::Registry::builtin().by_name(name).unwrap();
        let shape = collectives::Registry::builtin()
            .by_name(name)
            .unwrap()
            .default_shape(4);
        for s in [
            "eager",
            "lazy",
            "lockstep",
            "run-ahead:2",
            "random:3",
            "random:99",
        ] {
            let spec = ScheduleSpec::parse(s).unwrap();
            let r =
                run_scheduled(&c, &mesh, &shape, DType::I32, &mut *common::gpu(), 5, spec).unwrap();
            assert_eq!(r.wrong, 0, "{name} under {s}");
        }
    }
}

fn clean(call: &PallasCall, p: usize) -> bool {
    let mesh = Mesh::new(p, "x").unwrap();
    let r = check(call, &mesh, &ScheduleSpec::check_set(p, 40, 0)).unwrap();
    if let Some(f) = r.findings.first() {
        eprintln!("{}", f.problem);
    }
    r.is_clean()
}

fn kinds(call: &PallasCall, p: usize) -> Vec<ProblemKind> {
    let mesh = Mesh::new(p, "x").unwrap();
    check(call, &mesh, &ScheduleSpec::check_set(p, 40, 0))
        .unwrap()
        .kinds()
}

/// Device 0 pushes `k` blocks into device 1's `buf`, all on one receive semaphore.
/// Device 1 waits `k` times; it reads block 0 after `read_after` waits.
fn k_pushes_one_semaphore(k: usize, read_after: usize) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Any, &[k, 8], DType::I32)
        .output("y", MemorySpace::Vmem, &[k, 8], DType::I32)
        .vmem("buf", &[k, 8], DType::I32)
        .dma_sem("send")
        .dma_sem("recv");
    PallasCall::new("k_pushes", spec, move |pl, a| {
        let me = pl.axis_index("x");
        let dma = |i: usize| {
            pl.make_async_remote_copy(
                a.r(0).at(i as i64),
                a.r(2).at(i as i64),
                a.sem(3),
                a.sem(4),
                1,
            )
        };
        pl.fill(a.r(1), 0.0);
        if me == 0 {
            for i in 0..k {
                dma(i).start();
            }
            for i in 0..k {
                dma(i).wait_send();
            }
        }
        if me == 1 {
            for i in 0..k {
                if i == read_after {
                    pl.copy(a.r(1).at(0), a.r(2).at(0));
                }
                dma(i).wait_recv();
            }
            if read_after == k {
                pl.copy(a.r(1), a.r(2));
            }
        }
    })
}

#[test]
fn k_dmas_on_one_semaphore_waited_k_times_then_read_are_clean() {
    assert!(clean(&k_pushes_one_semaphore(3, 3), 2));
    // Reading block 0 after the first wait: that wait may have taken block 1's bytes.
    let mesh = Mesh::new(2, "x").unwrap();
    let r = check(&k_pushes_one_semaphore(3, 1), &mesh, &[ScheduleSpec::Eager]).unwrap();
    assert_eq!(r.kinds(), vec![ProblemKind::Race]);
    let Problem::Race(race) = &r.findings[0].problem else {
        unreachable!()
    };
    assert_eq!((race.alloc.as_str(), race.device.device), ("buf", 1));
    assert!(race.shared.is_some(), "{race}");
}

/// A ring exchange on two devices: each pushes `x` into the other's `buf`. `order`
/// lists what a device does after `start`: `S` wait_send, `R` wait_recv, `W` overwrite
/// the source `x`, `r` read the destination `buf`.
fn exchange(order: &'static str) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[8], DType::I32)
        .output("y", MemorySpace::Vmem, &[8], DType::I32)
        .vmem("buf", &[8], DType::I32)
        .dma_sem("send")
        .dma_sem("recv");
    PallasCall::new("exchange", spec, move |pl, a| {
        let other = 1 - pl.axis_index("x");
        let c = pl.make_async_remote_copy(a.r(0), a.r(2), a.sem(3), a.sem(4), other);
        pl.fill(a.r(1), 0.0);
        c.start();
        for step in order.chars() {
            match step {
                'S' => c.wait_send(),
                'R' => c.wait_recv(),
                'W' => pl.fill(a.r(0), 5.0),
                'r' => pl.copy(a.r(1), a.r(2)),
                _ => unreachable!(),
            }
        }
    })
}

#[test]
fn wait_send_frees_only_the_source_and_wait_recv_orders_only_the_destination() {
    assert!(clean(&exchange("SWRr"), 2), "source reused after wait_send");
    assert!(
        clean(&exchange("RrSW"), 2),
        "destination read after wait_recv"
    );
    assert_eq!(
        kinds(&exchange("RWS"), 2),
        vec![ProblemKind::Race],
        "wait_recv does not free the source"
    );
    assert_eq!(
        kinds(&exchange("SrR"), 2),
        vec![ProblemKind::Race],
        "wait_send does not order the destination"
    );
}

/// Device 0 pushes twice into device 1's `buf`. Between the two, it waits for `amount`
/// signals on `free`: device 1 sends one after reading `buf`, device 2 sends one anyway.
fn two_signallers(amount: i64) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Any, &[8], DType::I32)
        .output("y", MemorySpace::Vmem, &[8], DType::I32)
        .vmem("buf", &[8], DType::I32)
        .dma_sem("send")
        .dma_sem("recv")
        .regular_sem("free");
    PallasCall::new("two_signallers", spec, move |pl, a| {
        let c = pl.make_async_remote_copy(a.r(0), a.r(2), a.sem(3), a.sem(4), 1);
        if pl.axis_index("x") != 1 {
            pl.fill(a.r(1), 0.0);
        }
        match pl.axis_index("x") {
            0 => {
                c.start();
                c.wait_send();
                pl.semaphore_wait(a.sem(5), amount);
                c.start();
                c.wait_send();
                if amount == 1 {
                    pl.semaphore_wait(a.sem(5), 1);
                }
            }
            1 => {
                c.wait_recv();
                pl.copy(a.r(1), a.r(2));
                pl.semaphore_signal(a.sem(5), 1, Some(0.into()));
                c.wait_recv();
            }
            _ => pl.semaphore_signal(a.sem(5), 1, Some(0.into())),
        }
    })
}

#[test]
fn a_wait_is_ordered_after_a_signal_only_when_it_needs_it() {
    // Both signals needed: the second push comes after device 1's read.
    assert!(clean(&two_signallers(2), 3));
    // One of two: device 2's may be the one, so the second push can overwrite `buf`
    // while device 1 reads it, and device 1's first wait_recv can take its bytes.
    let k = kinds(&two_signallers(1), 3);
    assert!(
        !k.is_empty() && k.iter().all(|k| *k == ProblemKind::Race),
        "{k:?}"
    );
}

/// Every device handshakes with its neighbours on the barrier semaphore, then pushes
/// to the device `hops` to its right.
fn handshake_then_push(hops: i64, collective_id: bool) -> PallasCall {
    let mut spec = GridSpec::new()
        .input("x", MemorySpace::Any, &[8], DType::I32)
        .output("y", MemorySpace::Any, &[8], DType::I32)
        .dma_sem("send")
        .dma_sem("recv");
    if collective_id {
        spec = spec.collective_id(7);
    }
    PallasCall::new("far_push", spec, move |pl, a| {
        let n = pl.num_devices();
        let me = pl.axis_index("x");
        if collective_id {
            collectives::neighbor_barrier(pl, (me - 1 + n) % n, (me + 1) % n, false);
        }
        let c = pl.make_async_remote_copy(a.r(0), a.r(1), a.sem(2), a.sem(3), (me + hops) % n);
        c.start();
        c.wait();
    })
}

#[test]
fn sending_beyond_the_handshake_is_sent_before_entry() {
    assert!(clean(&handshake_then_push(1, true), 5));
    let mesh = Mesh::new(5, "x").unwrap();
    let r = check(&handshake_then_push(2, true), &mesh, &[ScheduleSpec::Eager]).unwrap();
    assert_eq!(r.kinds(), vec![ProblemKind::SendBeforeEntry]);
    let Problem::Early(e) = &r.findings[0].problem else {
        unreachable!()
    };
    assert_eq!((e.sender.device, e.to.device), (0, 2));
    assert!(e.what.contains("`y`"), "{e}");
    assert!(e.entry.is_some());
    // Without a collective_id, Pallas' entry barrier orders every entry first.
    assert!(clean(&handshake_then_push(2, false), 5));
}

#[test]
fn racy_data_is_identical_on_gpu_and_cpu_under_every_policy() {
    let v = variants()
        .into_iter()
        .find(|v| v.name == "shared-recv-sem")
        .unwrap();
    let mesh = Mesh::new(4, "x").unwrap();
    let call = v.call(&mesh, &[8, 128], DType::I32).unwrap();
    let mut staged = 0;
    for s in ["eager", "lazy", "run-ahead:1", "random:3", "random:8"] {
        let spec = ScheduleSpec::parse(s).unwrap();
        let (program, sched) = common::plan(&call, &mesh, spec).unwrap();
        staged += sched.staging;
        let inputs = tpusim::run::random_inputs(&program, 1).unwrap();
        let cpu = tpusim::device_sim::cpu::CpuExecutor::new()
            .execute(&program, &sched, &inputs)
            .unwrap();
        let gpu = common::gpu().execute(&program, &sched, &inputs).unwrap();
        assert_eq!(cpu, gpu, "{s}");
    }
    assert!(
        staged > 0,
        "some policy reads a source before its destination is written"
    );
}

/// Local copies in a loop of 4 (inside an outer loop of 2); in iteration `bad` of the
/// inner loop of outer iteration 1 the copy's source is overwritten while in flight.
fn racy_loop(bad: usize) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[16], DType::I32)
        .output("y", MemorySpace::Any, &[16], DType::I32)
        .dma_sem("sem");
    PallasCall::new("racy_loop", spec, move |pl, a| {
        for o in 0..2 {
            pl.in_iteration(o, || {
                for i in 0..4 {
                    pl.in_iteration(i, || {
                        let c = pl.make_async_copy(a.r(0), a.r(1), a.sem(2));
                        c.start();
                        if o == 1 && i == bad {
                            pl.fill(a.r(0), 7.0);
                        }
                        c.wait();
                    });
                }
            });
        }
    })
}

#[test]
fn a_race_in_a_loop_names_its_iteration() {
    let mesh = Mesh::new(2, "x").unwrap();
    let specs = ScheduleSpec::check_set(2, 5, 0);
    for bad in [1usize, 3] {
        let r = check(&racy_loop(bad), &mesh, &specs).unwrap();
        assert_eq!(r.kinds(), vec![ProblemKind::Race]);
        let shown = r.findings[0].problem.to_string();
        // The inner loop's line (the `in_iteration` call inside `for i`), then the outer's.
        let inner = line_of("pl.in_iteration(i, ||");
        let outer = line_of("pl.in_iteration(o, ||");
        let want = format!(
            "in iteration {bad} of the loop at tests/verifier.rs:{inner} within iteration 1 of the loop at tests/verifier.rs:{outer}"
        );
        assert!(shown.contains(&want), "{shown}");
        for other in (0..4).filter(|&i| i != bad) {
            let other = format!("iteration {other} of the loop at tests/verifier.rs:{inner}");
            assert!(!shown.contains(&other), "{shown}");
        }
    }
}

/// The line of this file that contains `text` (once).
fn line_of(text: &str) -> usize {
    let src = include_str!("verifier.rs");
    let lines: Vec<usize> = src
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(text) && !l.contains("line_of"))
        .map(|(n, _)| n + 1)
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    lines[0]
}

#[test]
fn a_mutant_ring_names_the_iteration_of_its_mistake() {
    // `negative-left` computes left = -1 on rank 0: every step of both loops reads it,
    // reported once per line, at the first iteration.
    let v = collectives::variants::variant("ring_allreduce", "negative-left").unwrap();
    let mesh = Mesh::new(4, "x").unwrap();
    let call = v.call(&mesh, &[4, 1], DType::F32).unwrap();
    let r = check(&call, &mesh, &ScheduleSpec::check_set(4, 1, 0)).unwrap();
    let shown: Vec<String> = r.findings.iter().map(|f| f.problem.to_string()).collect();
    assert!(!shown.is_empty());
    for s in &shown {
        assert!(
            s.contains("device 0 at grid point [] in iteration 0 of the loop at src/collectives/ring_allreduce.rs:"),
            "{s}"
        );
    }
}

/// A kernel whose scratch `acc` is read as `how` says: `filled` (written whole first),
/// `unfilled` (accumulated into with nothing written), `half` (half written, then copied
/// out whole) or `remote` (sent to the right neighbour before anything wrote it).
fn scratch_use(how: &'static str) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[16], DType::I32)
        .output("y", MemorySpace::Vmem, &[16], DType::I32)
        .vmem("acc", &[16], DType::I32)
        .dma_sem("send")
        .dma_sem("recv");
    PallasCall::new("scratch", spec, move |pl, a| {
        let (x, y, acc) = (a.r(0), a.r(1), a.r(2));
        match how {
            "filled" => {
                pl.fill(acc, 0.0);
                pl.add_assign(acc, x);
            }
            "unfilled" => pl.add_assign(acc, x),
            "half" => pl.copy(
                acc.slice(tpusim::kernel::ds(0, 8)),
                x.slice(tpusim::kernel::ds(0, 8)),
            ),
            "remote" => {
                let right = (pl.axis_index("x") + 1) % pl.axis_size("x");
                let c = pl.make_async_remote_copy(acc, y, a.sem(3), a.sem(4), right);
                c.start();
                c.wait();
                return;
            }
            _ => unreachable!(),
        }
        pl.copy(y, acc);
    })
}

#[test]
fn reads_of_memory_nothing_wrote_are_reported_with_their_line_and_bytes() {
    assert!(clean(&scratch_use("filled"), 2));
    let mesh = Mesh::new(2, "x").unwrap();
    let all = ScheduleSpec::check_set(2, 20, 0);
    for (how, bytes, op) in [
        ("unfilled", (0, 64), "add_assign"),
        ("half", (32, 64), "copy"),
        ("remote", (0, 64), "start"),
    ] {
        let r = check(&scratch_use(how), &mesh, &all).unwrap();
        assert_eq!(
            r.kinds(),
            vec![ProblemKind::UninitializedRead],
            "{how}: {:?}",
            r.findings
        );
        // The same bug under every schedule: nothing ever writes those bytes.
        assert_eq!(r.findings[0].schedules, 20, "{how}");
        let Problem::Uninit(u) = &r.findings[0].problem else {
            unreachable!()
        };
        assert_eq!(u.alloc, "acc");
        assert_eq!(u.bytes, bytes, "{how}");
        let site = u.read.site.as_ref().unwrap();
        assert_eq!(site.op, op, "{how}");
        assert!(
            site.location.starts_with("tests/verifier.rs:"),
            "{}",
            site.location
        );
        let shown = r.findings[0].problem.to_string();
        assert!(
            shown.contains("read of uninitialized memory: `acc`"),
            "{shown}"
        );
    }
}
