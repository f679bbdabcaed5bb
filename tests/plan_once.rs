//! `Job::plan_fitting`: the budget's need and the plan with the kernel traced once (the
//! census counting the lowered program where it would trace every point) are the
//! budget's need and the plan made apart, each tracing the kernel.

use tpusim::budget::{Buffers, Work};
use tpusim::collectives::{variants::variants, Registry};
use tpusim::kernel::{GridSpec, MemorySpace, PallasCall};
use tpusim::run::Job;
use tpusim::{DType, Mesh};

fn work() -> Work {
    Work::Run {
        buffers: Buffers::Host,
        gpu: false,
        model: false,
        timeline: false,
        chunked: false,
    }
}

/// The need and plan of `plan_fitting` equal `ensure_fits` then `plan` (or its error
/// theirs: some variants deadlock on purpose). True when it planned.
fn same_as_apart(what: &str, job: &Job) -> bool {
    let apart = job.ensure_fits(work()).unwrap();
    let planned = job.plan();
    let (need, plan) = match (job.plan_fitting(work()), planned) {
        (Ok(got), Ok(planned)) => {
            let text = |p: &tpusim::run::Plan| format!("{:?} {:?}", p.program, p.schedule);
            assert_eq!(text(&got.1), text(&planned), "{what}: plan");
            got
        }
        (Err(e), Err(want)) => {
            assert_eq!(e.to_string(), want.to_string(), "{what}");
            return false;
        }
        (got, want) => panic!("{what}: {:?} vs {:?}", got.err(), want.err()),
    };
    assert_eq!(need, apart, "{what}: need");
    assert!(need.census.traced.is_some(), "{what}: traced counts");
    drop(plan);
    true
}

/// Every shipped kernel as a kernel built for its mesh (as the Python package's are),
/// at meshes and grids the census traces whole and at ones it samples.
#[test]
fn shipped_kernels_need_and_plan_as_apart() {
    let mut planned = 0;
    for p in [1usize, 2, 3, 4, 8, 13] {
        let mesh = Mesh::new(p, "x").unwrap();
        for c in Registry::builtin().iter() {
            let shape = c.default_shape(p);
            let call = c.call(&mesh, &shape, DType::F32).unwrap();
            let job = Job::call(call, mesh.clone());
            planned += usize::from(same_as_apart(&format!("{} P={p}", c.name()), &job));
        }
        for v in variants() {
            let shape = Registry::builtin()
                .by_name(v.collective)
                .unwrap()
                .default_shape(p);
            let call = v.call(&mesh, &shape, DType::F32).unwrap();
            let job = Job::call(call, mesh.clone());
            planned += usize::from(same_as_apart(&format!("{v:?} P={p}"), &job));
        }
    }
    assert!(planned > 100, "{planned} planned");
}

/// A kernel whose values need temporaries (counted from the program's allocations),
/// on a grid the census traces whole (8 points) and on one it samples (100 points).
#[test]
fn values_temporaries_count_as_traced() {
    for points in [8usize, 100] {
        let spec = GridSpec::new()
            .grid(&[points])
            .input("a", MemorySpace::Vmem, &[16, 128], DType::F32)
            .output("y", MemorySpace::Vmem, &[16, 128], DType::F32);
        let call = PallasCall::new("values", spec, |pl, r| {
            let x = pl.load(r.r("a"));
            let y = pl.tanh(&(&x * &x));
            pl.store(r.r("y"), &(&y + &x));
        });
        let mesh = Mesh::new(2, "x").unwrap();
        let job = Job::call(call, mesh);
        assert!(same_as_apart(&format!("values, {points} points"), &job));
        let (need, _) = job.plan_fitting(work()).unwrap();
        // The spec's buffers (HBM and VMEM copies of a and y) and the values' own.
        assert!(
            need.census.alloc_bytes > (4 * 16 * 128 * 4) as f64,
            "{points}"
        );
    }
}

/// A kernel mistake is the plan's error, as when planned apart.
#[test]
fn a_kernel_mistake_is_the_same_error() {
    let spec = GridSpec::new()
        .input("a", MemorySpace::Vmem, &[8, 128], DType::F32)
        .output("y", MemorySpace::Vmem, &[8, 128], DType::F32);
    let call = PallasCall::new("bad", spec, |_, _| panic!("a deliberate mistake"));
    let job = Job::call(call, Mesh::new(2, "x").unwrap());
    let err = job.plan_fitting(work()).unwrap_err().to_string();
    assert!(err.contains("a deliberate mistake"), "{err}");
    job.ensure_fits(work()).unwrap();
    assert_eq!(job.plan().unwrap_err().to_string(), err);
}
