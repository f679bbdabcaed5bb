//! DMAs of strided windows (`x.slice(ds(..)).cols(ds(..))`, `x_ref.at[pl.ds(..),
//! pl.ds(..)]` in Pallas): one DMA, one credit of all its bytes, its rows moved on both
//! executors under every schedule, and its rows (not its bounding range) what the
//! verifier sees.

mod common;

use common::{check, gpu, simulate};
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::device_sim::Executor;
use tpusim::kernel::{ds, GridSpec, MemorySpace, PallasCall};
use tpusim::run::Job;
use tpusim::sched::ScheduleSpec;
use tpusim::verify::ProblemKind;
use tpusim::{DType, HostArray, Mesh};

const R: usize = 8;
const C: usize = 256;
const W: usize = 64;

fn inputs(p: usize) -> Vec<Vec<HostArray>> {
    (0..p)
        .map(|d| {
            let v = (0..R * C).map(|i| (1000 * d + i) as i32).collect();
            vec![HostArray::from_i32(&[R, C], v).unwrap()]
        })
        .collect()
}

/// Device d pushes columns `W*d ..` of rows 2..6 of its `x` into the same window of its
/// right neighbour's `y` (strided on both sides), and a local DMA copies the window of
/// columns `W*d + W/2 ..` (rows 0..R) of `x` into a contiguous VMEM scratch, then into
/// `y`'s last rows as a strided window again.
fn windows() -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Any, &[R, C], DType::I32)
        .output("y", MemorySpace::Any, &[R, C], DType::I32)
        .output("z", MemorySpace::Any, &[R, C], DType::I32)
        .vmem("v", &[R, W], DType::I32)
        .dma_sem("send")
        .dma_sem("recv")
        .dma_sem("local");
    PallasCall::new("windows", spec, |pl, a| {
        let (x, y, z, v) = (a.r(0), a.r(1), a.r(2), a.r(3));
        let me = pl.axis_index("x");
        let right = (me + 1) % pl.axis_size("x");
        let cols = ds(W as i64 * me, W as i64);
        let win = |r: tpusim::kernel::Ref| r.slice(ds(2, 4)).cols(cols);
        let push = pl.make_async_remote_copy(win(x), win(y), a.sem(4), a.sem(5), right);
        push.start();
        let half = ds(W as i64 * me + W as i64 / 2, W as i64 / 2);
        let get = pl.make_async_copy(x.cols(half), v.cols(ds(0, W as i64 / 2)), a.sem(6));
        get.start();
        get.wait();
        let put = pl.make_async_copy(v.cols(ds(0, W as i64 / 2)), z.cols(half), a.sem(6));
        put.start();
        put.wait();
        push.wait();
    })
}

/// What each device's `y` and `z` hold after `windows`: the windows written, the rest
/// as memory nothing wrote reads (the largest i32, as JAX's interpret mode has it).
fn want(x: &[Vec<HostArray>], p: usize) -> Vec<(Vec<i32>, Vec<i32>)> {
    (0..p)
        .map(|d| {
            let left = (d + p - 1) % p;
            let mut y = vec![i32::MAX; R * C];
            for r in 2..6 {
                for c in W * left..W * left + W {
                    y[r * C + c] = x[left][0].as_i32()[r * C + c];
                }
            }
            let mut z = vec![i32::MAX; R * C];
            for r in 0..R {
                for c in W * d + W / 2..W * d + W {
                    z[r * C + c] = x[d][0].as_i32()[r * C + c];
                }
            }
            (y, z)
        })
        .collect()
}

#[test]
fn windows_move_their_rows_on_both_executors_under_every_schedule() {
    let p = 4;
    let mesh = Mesh::new(p, "x").unwrap();
    let x = inputs(p);
    let want = want(&x, p);
    let job = Job::call(windows(), mesh.clone());
    let plan = job.plan().unwrap();
    assert_eq!(
        plan.program.dmas.len(),
        3 * p,
        "one DMA per window, not per row"
    );
    assert!(plan
        .program
        .dmas
        .iter()
        .any(|d| d.src.rows() == 4 && d.src.stride() == C));
    let mut runs = vec![simulate(&windows(), &mesh, &x, &mut CpuExecutor::new()).unwrap()];
    {
        let mut g = gpu();
        runs.push(simulate(&windows(), &mesh, &x, &mut *g as &mut dyn Executor).unwrap());
    }
    for spec in ScheduleSpec::check_set(p, 12, 3) {
        let j = job.clone().with_schedule(spec);
        runs.push(j.execute(&mut CpuExecutor::new(), &x).unwrap());
    }
    for out in runs {
        for d in 0..p {
            assert_eq!(out[d][0].as_i32(), &want[d].0[..], "y of device {d}");
            assert_eq!(out[d][1].as_i32(), &want[d].1[..], "z of device {d}");
        }
    }
    // No race; the rest of `y` and `z` is never written, and the check says so.
    let r = check(&windows(), &mesh, &ScheduleSpec::check_set(p, 30, 0)).unwrap();
    let unwritten = vec![ProblemKind::UnwrittenOutput; 2];
    assert_eq!(
        r.kinds(),
        unwritten,
        "{:?}",
        r.findings.first().map(|f| f.problem.to_string())
    );
}

/// Two local DMAs in flight at once into column windows of `y` starting `gap` columns
/// apart (W wide each), then both waited.
fn two_windows(gap: i64) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Any, &[R, C], DType::I32)
        .output("y", MemorySpace::Any, &[R, C], DType::I32)
        .dma_sem("a")
        .dma_sem("b");
    PallasCall::new("two_windows", spec, move |pl, a| {
        let (x, y) = (a.r(0), a.r(1));
        let w = W as i64;
        let one = pl.make_async_copy(x.cols(ds(0, w)), y.cols(ds(0, w)), a.sem(2));
        let two = pl.make_async_copy(x.cols(ds(gap, w)), y.cols(ds(gap, w)), a.sem(3));
        one.start();
        two.start();
        one.wait();
        two.wait();
    })
}

#[test]
fn windows_race_where_their_rows_meet_and_only_there() {
    let mesh = Mesh::new(2, "x").unwrap();
    let specs = ScheduleSpec::check_set(2, 10, 0);
    // The windows leave the rest of `y` unwritten: reported, and nothing else.
    let side_by_side = check(&two_windows(W as i64), &mesh, &specs).unwrap();
    assert_eq!(
        side_by_side.kinds(),
        vec![ProblemKind::UnwrittenOutput],
        "disjoint columns of the same rows: {:?}",
        side_by_side.findings.first().map(|f| f.problem.to_string())
    );
    let shifted = check(&two_windows(W as i64 / 2), &mesh, &specs).unwrap();
    assert_eq!(
        shifted.kinds(),
        vec![ProblemKind::Race, ProblemKind::UnwrittenOutput]
    );
    let shown = shifted.findings[0].problem.to_string();
    // The first shared run: row 0, columns W/2..W, as bytes of i32.
    let bytes = format!("bytes {}..{}", 4 * W / 2, 4 * W);
    assert!(shown.contains(&bytes), "{shown}");
    assert!(shown.contains("tests/strided.rs:"), "{shown}");
}

#[test]
fn a_window_beyond_its_array_or_in_compute_is_an_error_naming_the_line() {
    let mesh = Mesh::new(2, "x").unwrap();
    let spec = || {
        GridSpec::new()
            .input("x", MemorySpace::Any, &[R, C], DType::I32)
            .output("y", MemorySpace::Vmem, &[R, C], DType::I32)
            .dma_sem("s")
    };
    let beyond = PallasCall::new("beyond", spec(), |pl, a| {
        let run = a.r(0).flat().slice(ds(2 * C as i64 - W as i64, W as i64));
        let c = pl.make_async_copy(run.rows_of(R, C), a.r(1).cols(ds(0, W as i64)), a.sem(2));
        c.start();
        c.wait();
    });
    let err = Job::call(beyond, mesh.clone())
        .plan()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ends at element") && err.contains("tests/strided.rs:"),
        "{err}"
    );
    let compute = PallasCall::new("compute", spec(), |pl, a| {
        pl.fill(a.r(1).cols(ds(0, 8)), 1.0);
    });
    let err = Job::call(compute, mesh).plan().unwrap_err().to_string();
    assert!(err.contains("a strided window moves by DMA"), "{err}");
    assert!(err.contains("tests/strided.rs:"), "{err}");
}
