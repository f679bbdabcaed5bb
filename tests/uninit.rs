//! Memory nothing wrote reads as JAX's interpret mode has it (`ir::Uninit`): NaN for
//! floats, the largest value for integers, true for bools, or zeros on request; on the
//! CPU and the GPU executor alike. `check` names an output no device wrote.

mod common;

use common::{check, gpu};
use tpusim::collectives::Registry;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::device_sim::Executor;
use tpusim::ir::{DataOp, Uninit};
use tpusim::kernel::{ds, GridSpec, MemorySpace, PallasCall};
use tpusim::mesh::Placement;
use tpusim::run::Job;
use tpusim::sched::ScheduleSpec;
use tpusim::verify::{Problem, ProblemKind};
use tpusim::{DType, HostArray, Mesh};

/// `y[:4] = x[:4]`, the rest of `y` never written; `z` = a scratch never written.
fn half_written(dtype: DType) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[8], dtype)
        .output("y", MemorySpace::Vmem, &[8], dtype)
        .output("z", MemorySpace::Vmem, &[8], dtype)
        .vmem("s", &[8], dtype);
    PallasCall::new("half_written", spec, |pl, a| {
        pl.copy(a.r("y").slice(ds(0, 4)), a.r("x").slice(ds(0, 4)));
        pl.copy(a.r("z"), a.r("s"));
    })
}

/// What an element nothing wrote holds, as numpy would print it (interpret mode's
/// `get_uninitialized_value`: NaN, `iinfo(dtype).max`, True).
fn unwritten(dtype: DType, uninit: Uninit) -> f64 {
    match (uninit, dtype) {
        (Uninit::Zero, _) => 0.0,
        (_, DType::F32 | DType::F16 | DType::BF16) => f64::NAN,
        (_, DType::I32) => i32::MAX as f64,
        (_, DType::I8) => i8::MAX as f64,
        (_, DType::U8) => u8::MAX as f64,
        (_, DType::Bool) => 1.0,
    }
}

fn same(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

/// What device `d` writes: its number and one (false for bools: true is the pattern).
fn written(dtype: DType, d: usize) -> f64 {
    if dtype == DType::Bool {
        0.0
    } else {
        (d + 1) as f64
    }
}

fn run_on(exec: &mut dyn Executor, dtype: DType, uninit: Uninit) -> Vec<Vec<HostArray>> {
    let mesh = Mesh::new(2, "x").unwrap();
    let x: Vec<Vec<HostArray>> = (0..2)
        .map(|d| vec![HostArray::from_values(dtype, &[8], &[written(dtype, d); 8]).unwrap()])
        .collect();
    Job::call(half_written(dtype), mesh)
        .with_uninit(uninit)
        .execute(exec, &x)
        .unwrap()
}

fn assert_pattern(out: &[Vec<HostArray>], dtype: DType, uninit: Uninit, on: &str) {
    let blank = unwritten(dtype, uninit);
    for (d, o) in out.iter().enumerate() {
        let (y, z) = (o[0].values(), o[1].values());
        let written = written(dtype, d);
        assert!(
            y[..4].iter().all(|&v| v == written),
            "{dtype} {uninit} {on}: {y:?}"
        );
        assert!(
            y[4..].iter().all(|&v| same(v, blank)),
            "{dtype} {uninit} {on}: {y:?}"
        );
        assert!(
            z.iter().all(|&v| same(v, blank)),
            "{dtype} {uninit} {on}: {z:?}"
        );
    }
}

#[test]
fn memory_nothing_wrote_reads_as_interpret_mode_has_it_on_the_cpu() {
    for dtype in DType::ALL {
        for uninit in [Uninit::Nan, Uninit::Zero] {
            let out = run_on(&mut CpuExecutor::new(), dtype, uninit);
            assert_pattern(&out, dtype, uninit, "cpu");
        }
    }
}

#[test]
fn memory_nothing_wrote_reads_the_same_on_the_gpu() {
    let mut g = gpu();
    for dtype in DType::COLLECTIVE {
        for uninit in [Uninit::Nan, Uninit::Zero] {
            let out = run_on(&mut *g, dtype, uninit);
            assert_pattern(&out, dtype, uninit, "gpu");
        }
    }
}

#[test]
fn check_names_the_output_no_device_wrote() {
    let mesh = Mesh::new(2, "x").unwrap();
    let r = check(
        &half_written(DType::F32),
        &mesh,
        &ScheduleSpec::check_set(2, 5, 0),
    )
    .unwrap();
    // `z` copies a scratch nothing wrote: that read is reported, and `y`'s half.
    assert_eq!(
        r.kinds(),
        vec![ProblemKind::UninitializedRead, ProblemKind::UnwrittenOutput]
    );
    let Problem::Unwritten(u) = &r.findings[1].problem else {
        unreachable!()
    };
    assert_eq!(
        (u.alloc.as_str(), u.bytes, u.total, u.devices),
        ("y", (16, 32), 32, 2)
    );
    let shown = r.findings[1].problem.to_string();
    assert!(
        shown.contains("output not written: `y` of device 0, bytes 16..32 (and on 1 more devices)"),
        "{shown}"
    );
}

#[test]
fn shipped_collectives_write_all_they_read_so_their_runs_fill_nothing() {
    let reg = Registry::builtin();
    for c in reg.iter() {
        for p in [2, 4] {
            let job = Job::collective(c.clone(), Placement::whole(Mesh::new(p, "x").unwrap()));
            let Ok(plan) = job.plan() else { continue };
            let fills = plan
                .schedule
                .ops
                .iter()
                .take_while(|o| matches!(o, DataOp::Fill { .. }));
            assert_eq!(fills.count(), 0, "{} P={p}", c.name());
        }
    }
}

#[test]
fn uninit_settings_parse_and_refuse_others() {
    assert_eq!(Uninit::parse("nan").unwrap(), Uninit::Nan);
    assert_eq!(Uninit::parse("zero").unwrap(), Uninit::Zero);
    let e = Uninit::parse("garbage").unwrap_err().to_string();
    assert!(
        e.contains("`garbage`") && e.contains("nan") && e.contains("zero"),
        "{e}"
    );
}
