//! `allreduce_2d`: one kernel over a 2-D torus (reduce-scatter along x, all-reduce
//! along y, all-gather along x), checked against the reference and an independent sum
//! on several meshes, both executors and several schedules; verified clean under many
//! schedules; its broken variants reported; modeled on the mesh's torus; and the
//! `--mesh` / `--axis` command line around it.

mod common;

use common::tpusim;

use common::{check, run_along, run_scheduled, simulate};
use tpusim::collectives::variants::variant;
use tpusim::collectives::{Collective, Registry, Span};
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::kernel::ReduceOp;
use tpusim::mesh::Placement;
use tpusim::model::{CostModel, Timed, Topology};
use tpusim::sched::ScheduleSpec;
use tpusim::verify::ProblemKind;
use tpusim::{DType, HostArray, Mesh};

const MESHES: [(usize, usize); 6] = [(2, 2), (2, 4), (3, 2), (4, 4), (1, 3), (3, 1)];

fn mesh(nx: usize, ny: usize) -> Mesh {
    Mesh::with_axes(&[("x", nx), ("y", ny)]).unwrap()
}

fn allreduce_2d(op: ReduceOp) -> std::sync::Arc<dyn Collective> {
    let reg = Registry::builtin();
    let c = reg.by_name("allreduce_2d").unwrap();
    if op == ReduceOp::Sum {
        c
    } else {
        c.with_options(&tpusim::collectives::Options {
            op,
            ..Default::default()
        })
        .unwrap()
    }
}

#[test]
fn it_is_a_whole_mesh_collective() {
    assert_eq!(allreduce_2d(ReduceOp::Sum).span(), Span::Mesh);
    assert_eq!(
        Registry::builtin().by_name("psum").unwrap().span(),
        Span::Ring
    );
}

#[test]
fn every_device_gets_the_sum_over_the_torus_on_both_executors() {
    let c = allreduce_2d(ReduceOp::Sum);
    for (nx, ny) in MESHES {
        let m = mesh(nx, ny);
        let shard = c.default_shape(m.size());
        for dtype in [DType::I32, DType::F32] {
            for spec in [
                ScheduleSpec::Eager,
                ScheduleSpec::Lazy,
                ScheduleSpec::Random(5),
            ] {
                let what = format!("{nx}x{ny} {dtype} {spec}");
                let cpu =
                    run_scheduled(&c, &m, &shard, dtype, &mut CpuExecutor::new(), 3, spec).unwrap();
                let gpu =
                    run_scheduled(&c, &m, &shard, dtype, &mut *common::gpu(), 3, spec).unwrap();
                assert_eq!((cpu.wrong, gpu.wrong), (0, 0), "{what}");
                assert_eq!(cpu.total, m.size() * shard.iter().product::<usize>());
            }
        }
    }
}

#[test]
fn max_and_min_reduce_over_both_axes() {
    for op in [ReduceOp::Max, ReduceOp::Min] {
        let c = allreduce_2d(op);
        for (nx, ny) in [(2, 3), (4, 2)] {
            let m = mesh(nx, ny);
            for dtype in [DType::I32, DType::F32] {
                let r = run_scheduled(
                    &c,
                    &m,
                    &c.default_shape(m.size()),
                    dtype,
                    &mut CpuExecutor::new(),
                    9,
                    ScheduleSpec::Random(1),
                )
                .unwrap();
                assert_eq!(r.wrong, 0, "{op:?} {nx}x{ny} {dtype}");
            }
        }
    }
}

#[test]
fn the_result_is_the_elementwise_sum_of_every_device_input() {
    // An independent sum (not the reference module): device d holds d * 1000 + i.
    let c = allreduce_2d(ReduceOp::Sum);
    let m = mesh(3, 2);
    let shard = [6usize, 4];
    let n = 24;
    let inputs: Vec<Vec<HostArray>> = (0..6)
        .map(|d| {
            let v = (0..n).map(|i| (d * 1000 + i) as i32).collect();
            vec![HostArray::from_i32(&[1, n], v).unwrap()]
        })
        .collect();
    let want: Vec<i32> = (0..n)
        .map(|i| (0..6).map(|d| (d * 1000 + i) as i32).sum())
        .collect();
    let call = c.call(&m, &shard, DType::I32).unwrap();
    let got = simulate(&call, &m, &inputs, &mut *common::gpu()).unwrap();
    for (d, out) in got.iter().enumerate() {
        assert_eq!(out[0].as_i32(), &want[..], "device {d}");
    }
}

#[test]
fn it_is_clean_under_many_schedules() {
    let c = allreduce_2d(ReduceOp::Sum);
    for ((nx, ny), schedules) in [((2, 2), 200), ((3, 2), 200), ((2, 4), 120), ((4, 4), 40)] {
        let m = mesh(nx, ny);
        let call = c.call(&m, &c.default_shape(m.size()), DType::F32).unwrap();
        let r = check(&call, &m, &ScheduleSpec::check_set(m.size(), schedules, 0)).unwrap();
        assert!(
            r.is_clean(),
            "{nx}x{ny}: {:?}",
            r.findings.first().map(|f| f.problem.to_string())
        );
    }
}

#[test]
fn its_broken_variants_are_reported() {
    let m = mesh(4, 2);
    let shard = [8usize, 128];
    for (name, kind) in [
        ("no-barrier-y", ProblemKind::SendBeforeEntry),
        ("shared-capacity", ProblemKind::Race),
    ] {
        let call = variant("allreduce_2d", name)
            .unwrap()
            .call(&m, &shard, DType::F32)
            .unwrap();
        let r = check(&call, &m, &ScheduleSpec::check_set(8, 40, 0)).unwrap();
        assert!(r.kinds().contains(&kind), "{name}: {:?}", r.kinds());
    }
}

#[test]
fn a_ring_through_every_device_of_two_axes_is_the_whole_mesh_reduction() {
    // psum along x,y on a 2x3 mesh is one ring of 6: every device gets the total.
    let m = mesh(2, 3);
    let psum = Registry::builtin().by_name("psum").unwrap();
    let place = Placement::along(m.clone(), "x,y").unwrap();
    assert_eq!(
        place.groups.as_ref().unwrap().to_vec(),
        vec![(0..6).collect::<Vec<_>>()]
    );
    for dtype in [DType::I32, DType::F32] {
        let r = run_along(
            &psum,
            &m,
            "x,y",
            &[8, 128],
            dtype,
            &mut *common::gpu(),
            4,
            ScheduleSpec::Lazy,
        )
        .unwrap();
        assert_eq!(r.wrong, 0, "{dtype}");
        assert_eq!(r.total, 6 * 8 * 128);
    }
    assert!(Placement::along(m.clone(), "x,x").is_err());
    assert!(Placement::of(psum.span(), psum.name(), m.clone(), Some("w")).is_err());
    assert!(Placement::of(Span::Mesh, "allreduce_2d", m, Some("x")).is_err());
}

#[test]
fn the_model_lays_the_mesh_on_its_torus() {
    // Neighbours along y are one hop apart on the torus of the mesh, several on a ring
    // of the same devices, so the torus models the same program no slower.
    let c = allreduce_2d(ReduceOp::Sum);
    let m = mesh(4, 4);
    let program = c
        .call(&m, &[1024, 128], DType::F32)
        .unwrap()
        .lower(&m)
        .unwrap();
    let modeled = |t: Topology| {
        let mut model = CostModel::preset("v5e").unwrap();
        model.topology = Some(t);
        Timed::new(&program, model).unwrap().run().unwrap().seconds
    };
    assert_eq!(Topology::of_mesh(&mesh(2, 4)), Topology::Torus(vec![4, 2]));
    let torus = modeled(Topology::of_mesh(&m));
    let ring = modeled(Topology::Ring);
    assert!(
        torus > 0.0 && torus < ring,
        "torus {torus} s, ring {ring} s"
    );
}

#[test]
fn the_command_line_runs_checks_traces_and_models_it_on_a_mesh() {
    for backend in ["gpu", "cpu"] {
        for m in ["4x4", "2x4", "3x2"] {
            let (code, out, err) = tpusim(&[
                "run",
                "allreduce_2d",
                "--mesh",
                m,
                "--backend",
                backend,
                "--dtype",
                "i32",
            ]);
            assert_eq!(code, 0, "{m} {backend}: {out}{err}");
            assert!(
                out.contains(&format!("({m})")) && out.contains(": 0 wrong of"),
                "{out}"
            );
        }
    }
    // -p P is the P x 1 torus.
    let (code, out, err) = tpusim(&["run", "allreduce_2d", "-p", "4", "--backend", "cpu"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("P=4 ") && out.contains(": 0 wrong of"),
        "{out}"
    );

    let (code, out, err) = tpusim(&[
        "check",
        "allreduce_2d",
        "--mesh",
        "4x4",
        "--schedules",
        "30",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("clean under 30 schedules"), "{out}");

    let (code, out, err) = tpusim(&["trace", "allreduce_2d", "--mesh", "2x2"]);
    assert_eq!(code, 0, "{out}{err}");
    // The initial row and one per grid step, 2(X-1) + 2(Y-1) = 4.
    assert_eq!(
        out.lines().filter(|l| l.starts_with("| [")).count(),
        4,
        "{out}"
    );

    let (code, out, err) = tpusim(&[
        "run",
        "allreduce_2d",
        "--mesh",
        "4x4",
        "--model",
        "v5e",
        "--backend",
        "cpu",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("model v5e on torus:4x4"), "{out}");

    let (code, out, err) = tpusim(&[
        "bench",
        "allreduce_2d",
        "--mesh",
        "2x2",
        "-b",
        "16K",
        "-e",
        "16K",
        "-n",
        "1",
        "-w",
        "0",
        "--backend",
        "cpu",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("P=4 (mesh 2x2)"), "{out}");

    let (code, out, err) = tpusim(&["trace", "psum", "--mesh", "2x2", "--axis", "y"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("psum on 4 devices"), "{out}");
}

#[test]
fn bad_meshes_and_axes_exit_2_with_a_reason() {
    for (args, why) in [
        (
            vec!["run", "allreduce_2d", "--mesh", "2x2x2"],
            "runs on a mesh with axes x and y",
        ),
        (
            vec!["run", "allreduce_2d", "--mesh", "2x4", "--axis", "y"],
            "without --axis",
        ),
        (
            vec!["check", "allreduce_2d", "--mesh", "2x4", "--axis", "x"],
            "without --axis",
        ),
        (
            vec!["run", "psum", "--mesh", "2x4", "--axis", "x,x"],
            "named twice",
        ),
        (
            vec!["trace", "psum", "--mesh", "4", "--axis", "x,y"],
            "no axis `y`",
        ),
        (
            vec!["bench", "psum", "--mesh", "2x4", "--axis", "w"],
            "no axis `w`",
        ),
        (vec!["run", "allreduce_2d", "--axis", "x"], "--mesh"),
    ] {
        let (code, out, err) = tpusim(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
}

/// The budget counts the kernel's ops on its own mesh, not on a ring of all its devices
/// (the P x 1 torus: 2(P-1) steps where the 4 x 8 one has 2(3) + 2(7)): the estimate a
/// refusal prints names the traced program's own count.
#[test]
fn the_budget_counts_the_ops_of_the_mesh_it_runs_on() {
    let m = mesh(4, 8);
    let call = allreduce_2d(ReduceOp::Sum)
        .call(&m, &[1, 32], DType::F32)
        .unwrap();
    let ops: usize = call.lower(&m).unwrap().ops.iter().map(Vec::len).sum();
    let args = ["check", "allreduce_2d", "--mesh", "4x8", "--shape", "1x32"];
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tpusim"))
        .args(args)
        .args(["--replay", "eager"])
        .env("TPUSIM_TIME_LIMIT", "0.000001")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("to plan {ops} traced ops")),
        "{ops}: {err}"
    );
}
