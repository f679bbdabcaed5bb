//! The verifier: broken variants are reported with the right kind, the seed kernels
//! are clean under many schedules, and races are found (and only found) where
//! happens-before does not order two accesses.

mod common;

use tpusim::collectives::variants::variants;
use tpusim::collectives::{self, run_scheduled};
use tpusim::device_sim::{schedule, ScheduleSpec};
use tpusim::kernel::{GridSpec, MemorySpace, PallasCall};
use tpusim::verify::{check, Problem, ProblemKind};
use tpusim::{DType, Mesh};

#[test]
fn every_broken_variant_is_reported_with_its_kind() {
    for v in variants() {
        for p in [2usize, 3, 4] {
            let mesh = Mesh::new(p, "x").unwrap();
            let shape = collectives::default_shape(v.collective, p);
            let call = v.call(&mesh, &shape, DType::F32).unwrap();
            let r = check(&call, &mesh, &ScheduleSpec::check_set(p, 40, 0)).unwrap();
            assert!(
                r.kinds().contains(&v.expect),
                "{v:?} at P={p}: expected {}, got {:?}",
                v.expect,
                r.kinds()
            );
            // Every finding points at the kernel line to fix.
            for f in &r.findings {
                let shown = f.problem.to_string();
                assert!(shown.contains("src/collectives/"), "{shown}");
            }
        }
    }
}

#[test]
fn seed_kernels_are_clean_under_200_schedules() {
    for name in collectives::NAMES {
        for p in [2usize, 3, 4, 5, 8] {
            let mesh = Mesh::new(p, "x").unwrap();
            let c = collectives::by_name(name).unwrap();
            let call = c
                .call(&mesh, &collectives::default_shape(name, p), DType::F32)
                .unwrap();
            let specs = ScheduleSpec::check_set(p, 200, 1000);
            let r = check(&call, &mesh, &specs).unwrap();
            assert_eq!(r.schedules, 200);
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
    let v = variants()
        .into_iter()
        .find(|v| v.name == "no-capacity-sem")
        .unwrap();
    let mesh = Mesh::new(4, "x").unwrap();
    let call = v.call(&mesh, &[8, 128], DType::F32).unwrap();
    let r = check(&call, &mesh, &[ScheduleSpec::Lazy]).unwrap();
    let Problem::Race(race) = &r.findings[0].problem else {
        panic!("{:?}", r.kinds())
    };
    assert_eq!(race.alloc, "hbm_buf");
    for side in [&race.first, &race.second] {
        let site = side.site.as_ref().expect("a DMA side names its start");
        assert!(site.location.contains("psum.rs"), "{site}");
    }
    assert!(race.first.access == "write" || race.second.access == "write");
    assert_eq!(r.findings[0].schedule, Some(ScheduleSpec::Lazy));
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

/// Device 0 pushes into device 1's buffer, which device 1 reads; with `signal` the
/// reader waits for the DMA (ordered), without it the read is unordered (a race).
fn push_then_read(wait_for_it: bool) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Any, &[8], DType::I32)
        .output("y", MemorySpace::Vmem, &[8], DType::I32)
        .vmem("buf", &[8], DType::I32)
        .dma_sem("send")
        .dma_sem("recv");
    PallasCall::new("push", spec, move |pl, a| {
        let me = pl.axis_index("x");
        let c = pl.make_async_remote_copy(a.r(0), a.r(2), a.sem(3), a.sem(4), 1);
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
    assert_eq!((r.alloc.as_str(), r.device, r.bytes), ("buf", 1, (0, 32)));
    assert!(check(&push_then_read(true), &mesh, &all)
        .unwrap()
        .is_clean());
}

#[test]
fn replaying_a_schedule_gives_the_same_order() {
    let mesh = Mesh::new(5, "x").unwrap();
    let c = collectives::by_name("psum").unwrap();
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
    for name in collectives::NAMES {
        let c = collectives::by_name(name).unwrap();
        let shape = collectives::default_shape(name, 4);
        for s in [
            "eager",
            "lazy",
            "lockstep",
            "run-ahead:2",
            "random:3",
            "random:99",
        ] {
            let spec = ScheduleSpec::parse(s).unwrap();
            let r = run_scheduled(
                c.as_ref(),
                &mesh,
                &shape,
                DType::I32,
                &mut *common::gpu(),
                5,
                spec,
            )
            .unwrap();
            assert_eq!(r.wrong, 0, "{name} under {s}");
        }
    }
}
