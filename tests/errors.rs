//! Every kernel mistake and bad input gets a typed error naming the problem.

mod common;

use common::simulate;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::device_sim::Executor;
use tpusim::error::{ExitProblem, KernelErrorKind};
use tpusim::kernel::{Args, Ctx, GridSpec, MemorySpace, PallasCall};
use tpusim::sched::{schedule, Eager};
use tpusim::{DType, Error, HostArray, Mesh};

fn spec() -> GridSpec {
    GridSpec::new()
        .input("x_ref", MemorySpace::Any, &[8], DType::I32)
        .output("y_ref", MemorySpace::Any, &[8], DType::I32)
        .dma_sem("send_sem")
        .dma_sem("recv_sem")
        .regular_sem("flag")
        .dma_sems("sems", 2)
        .grid(&[2])
}

fn run(p: usize, k: impl Fn(&Ctx, &Args) + Send + Sync + 'static) -> Error {
    let mesh = Mesh::new(p, "x").unwrap();
    let call = PallasCall::new("broken", spec(), k);
    match call.lower(&mesh) {
        Err(e) => e,
        Ok(prog) => schedule(&prog, &mut Eager::default()).expect_err("the kernel is broken"),
    }
}

#[test]
fn deadlock_names_every_blocked_device() {
    let e = run(3, |pl, a| {
        if pl.program_id(0) == 1 {
            pl.semaphore_wait(a.sem(4), 1);
        }
    });
    let Error::Deadlock(blocked) = &e else {
        panic!("{e}")
    };
    assert_eq!(blocked.len(), 3);
    for (d, b) in blocked.iter().enumerate() {
        assert_eq!(b.site.device, d);
        assert_eq!(b.site.grid, vec![1]);
        assert_eq!(b.semaphore, "flag");
        assert_eq!((b.value, b.awaited), (0, 1));
        assert!(b.site.location.contains("errors.rs"), "{}", b.site.location);
    }
    let msg = e.to_string();
    assert!(
        msg.contains("deadlock") && msg.contains("`flag`: value 0, needs 1"),
        "{msg}"
    );
}

#[test]
fn a_carried_semaphores_count_at_exit_is_its_output_but_an_unwaited_dma_is_still_a_fault() {
    let mesh = Mesh::new(2, "x").unwrap();
    let carried = || {
        GridSpec::new()
            .input("x_ref", MemorySpace::Any, &[8], DType::I32)
            .output("y_ref", MemorySpace::Any, &[8], DType::I32)
            .carried_sem("handed_on", tpusim::ir::SemKind::Regular, None)
            .carried_sem("dma_out", tpusim::ir::SemKind::Dma, None)
    };
    // A count left on a carried REGULAR semaphore: clean.
    let left = PallasCall::new("left", carried(), |pl, a| {
        pl.semaphore_signal(a.sem(2), 3, None);
    });
    let prog = left.lower(&mesh).unwrap();
    assert!(schedule(&prog, &mut Eager::default()).is_ok());
    // A DMA never waited on a carried DMA semaphore: still a DMA not waited.
    let unwaited = PallasCall::new("unwaited", carried(), |pl, a| {
        pl.make_async_copy(a.r(0), a.r(1), a.sem(3)).start();
    });
    let prog = unwaited.lower(&mesh).unwrap();
    let e = schedule(&prog, &mut Eager::default()).expect_err("a DMA not waited");
    let Error::Exit(problems) = &e else {
        panic!("{e}")
    };
    assert!(
        problems
            .iter()
            .all(|p| matches!(p, ExitProblem::DmaNotWaited { .. })),
        "{e}"
    );
}

#[test]
fn leftover_signal_is_a_semaphore_not_zero_at_exit() {
    let e = run(2, |pl, a| {
        pl.semaphore_signal(a.sem(4), 2, None);
        pl.semaphore_wait(a.sem(4), 1);
    });
    let Error::Exit(problems) = &e else {
        panic!("{e}")
    };
    assert_eq!(problems.len(), 2);
    let ExitProblem::SemaphoreNotZero {
        device,
        semaphore,
        value,
        last_signal,
    } = &problems[1]
    else {
        panic!("{e}")
    };
    assert_eq!((device.device, semaphore.as_str(), *value), (1, "flag", 2));
    assert_eq!(
        last_signal.as_ref().map(|s| (s.device, s.grid.clone())),
        Some((1, vec![1]))
    );
    assert!(
        e.to_string().contains(
            "semaphore not zero at exit: device 0 `flag` = 2 (last signalled by device 0"
        ),
        "{e}"
    );
}

#[test]
fn unwaited_dma_is_reported_with_its_start() {
    let e = run(2, |pl, a| {
        if pl.program_id(0) == 0 {
            let c = pl.make_async_copy(a.r(0), a.r(1), a.sem(3));
            c.start();
        }
    });
    let Error::Exit(problems) = &e else {
        panic!("{e}")
    };
    assert_eq!(problems.len(), 2);
    let ExitProblem::DmaNotWaited {
        site,
        semaphore,
        bytes,
    } = &problems[0]
    else {
        panic!("{e}")
    };
    assert_eq!((site.device, site.op, *bytes), (0, "start", 32));
    assert!(semaphore.starts_with("recv_sem"), "{semaphore}");
}

#[test]
fn negative_neighbour_is_a_device_id_out_of_range() {
    // The seed-003 trap: C-style `(my - 1) % n` is -1 on device 0.
    let e = run(4, |pl, a| {
        let left = (pl.axis_index("x") - 1) % pl.num_devices();
        let c = pl.make_async_remote_copy(a.r(0), a.r(1), a.sem(2), a.sem(3), left);
        c.start();
        c.wait();
    });
    let Error::Kernel(k) = &e else { panic!("{e}") };
    assert_eq!(k.kind, KernelErrorKind::DeviceIdOutOfRange);
    assert_eq!(k.site.device, 0);
    assert_eq!(k.site.op, "make_async_remote_copy");
    assert!(k.detail.contains("got -1"), "{}", k.detail);
    let id_too_big = run(2, |pl, a| pl.semaphore_signal(a.sem(4), 1, Some(5.into())));
    assert!(
        id_too_big.to_string().contains("device id out of range"),
        "{id_too_big}"
    );
}

#[test]
fn index_past_the_end_is_out_of_bounds() {
    let e = run(2, |pl, a| {
        let c = pl.make_async_copy(a.r(0), a.r(1), a.sem(5).at(2));
        c.start();
        c.wait();
    });
    let Error::Kernel(k) = &e else { panic!("{e}") };
    assert_eq!(k.kind, KernelErrorKind::OutOfBounds);
    assert!(k.detail.contains("sems.at(2)"), "{}", k.detail);

    let e = run(2, |pl, a| {
        let c = pl.make_async_copy(a.r(0).slice(tpusim::kernel::ds(4, 8)), a.r(1), a.sem(3));
        c.start();
    });
    assert!(e.to_string().contains("ds(4, 8)"), "{e}");
}

#[test]
fn compute_on_hbm_is_rejected() {
    let e = run(1, |pl, a| pl.add_assign(a.r(1), a.r(0)));
    let Error::Kernel(k) = &e else { panic!("{e}") };
    assert_eq!(k.kind, KernelErrorKind::HbmInCompute);
    assert!(k.detail.contains("`y_ref` lives in HBM"), "{}", k.detail);
}

#[test]
fn misused_semaphores_and_shapes_are_rejected() {
    let e = run(1, |pl, a| {
        let c = pl.make_async_copy(a.r(0), a.r(1), a.sem(5));
        c.start();
    });
    assert!(e.to_string().contains("pick one with `.at(i)`"), "{e}");
    let e = run(1, |pl, a| pl.semaphore_wait(a.sem(3), 1));
    assert!(e.to_string().contains("is a Dma semaphore"), "{e}");
    let e = run(1, |pl, a| {
        let c = pl.make_async_copy(a.r(0).slice(tpusim::kernel::ds(0, 4)), a.r(1), a.sem(3));
        c.start();
    });
    let Error::Kernel(k) = &e else { panic!("{e}") };
    assert_eq!(k.kind, KernelErrorKind::ShapeMismatch);
    let e = run(1, |pl, _| {
        pl.axis_index("y");
    });
    assert!(e.to_string().contains("no axis `y`"), "{e}");
    let e = run(1, |pl, _| {
        pl.get_barrier_semaphore();
    });
    assert!(e.to_string().contains("collective_id"), "{e}");
}

#[test]
fn a_panicking_kernel_is_an_error_not_a_crash() {
    let e = run(2, |_, a| {
        a.sem(0);
    });
    let Error::Kernel(k) = &e else { panic!("{e}") };
    assert!(
        k.detail.contains("`x_ref`) is a ref, not a semaphore"),
        "{}",
        k.detail
    );
}

#[test]
fn wrong_inputs_are_bad_input() {
    let mesh = Mesh::new(2, "x").unwrap();
    let call = PallasCall::new("noop", spec(), |_, _| {});
    let one = vec![vec![HostArray::zeros(DType::I32, &[8])]];
    let e = simulate(&call, &mesh, &one, &mut CpuExecutor::new()).unwrap_err();
    assert!(
        e.to_string().contains("runs on 2 devices but inputs for 1"),
        "{e}"
    );
    let wrong_shape = vec![vec![HostArray::zeros(DType::I32, &[4])]; 2];
    let e = simulate(&call, &mesh, &wrong_shape, &mut CpuExecutor::new()).unwrap_err();
    assert!(
        e.to_string().contains("must be [8] i32 but is [4] i32"),
        "{e}"
    );
    assert!(Mesh::new(0, "x").is_err());
}

#[test]
fn allocation_beyond_the_adapter_is_a_limit_error() {
    let mut gpu = common::gpu();
    let max = gpu.context().limits.max_buffer_size;
    let n = (max / 4 + 1) as usize;
    let spec = GridSpec::new().output("huge", MemorySpace::Any, &[n], DType::I32);
    let call = PallasCall::new("huge", spec, |_, _| {});
    let mesh = Mesh::new(1, "x").unwrap();
    let e = simulate(&call, &mesh, &[vec![]], &mut *gpu).unwrap_err();
    let Error::Limit {
        requested, limit, ..
    } = &e
    else {
        panic!("{e}")
    };
    assert_eq!((*requested, *limit), (n as u64 * 4, max));
    assert!(!gpu.describe().is_empty());
}

#[test]
fn kernel_arguments_by_name_and_their_mistakes_name_the_line() {
    // By name, the kernel reads like the seed's signature.
    let named = PallasCall::new("named", spec(), |pl, a| {
        let me = pl.axis_index("x");
        let right = (me + 1) % pl.num_devices();
        let dma = pl.make_async_remote_copy(
            a.r("x_ref"),
            a.r("y_ref"),
            a.sem("send_sem"),
            a.sem("recv_sem"),
            right,
        );
        if pl.program_id(0) == 0 {
            dma.start();
            dma.wait();
        }
        pl.semaphore_signal(a.sem("flag"), 1, None);
        pl.semaphore_wait(a.sem("flag"), 1);
    });
    let mesh = Mesh::new(2, "x").unwrap();
    let program = named.lower(&mesh).unwrap();
    schedule(&program, &mut Eager::default()).unwrap();
    for (kernel, want) in [
        (
            (|_: &Ctx, a: &Args| {
                a.r("nope");
            }) as fn(&Ctx, &Args),
            "no argument `nope` (it has: x_ref, y_ref, send_sem, recv_sem, flag, sems)",
        ),
        (
            |_: &Ctx, a: &Args| {
                a.sem("x_ref");
            },
            "argument `x_ref` (`x_ref`) is a ref, not a semaphore",
        ),
        (
            |_: &Ctx, a: &Args| {
                a.r(3);
            },
            "argument 3 (`recv_sem`) is a semaphore, not a ref",
        ),
    ] {
        let e = run(2, kernel);
        let Error::Kernel(k) = &e else { panic!("{e}") };
        assert_eq!(k.kind, KernelErrorKind::Misuse);
        assert!(k.detail.contains(want), "{}", k.detail);
        assert!(k.site.location.contains("tests/errors.rs"), "{}", k.site);
    }
}
