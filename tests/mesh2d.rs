//! Collectives over one axis of a 2-D mesh: every row (or column) runs its own ring,
//! on both executors, checked against the reference applied per group; the union is
//! verified like any kernel and modeled on the mesh's torus.

mod common;

use common::run_along;
use tpusim::collectives::variants::variant;
use tpusim::collectives::Registry;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::mesh::groups::{groups_along, replicate};
use tpusim::mesh::Placement;
use tpusim::model::{CostModel, Timed, Topology};
use tpusim::sched::ScheduleSpec;
use tpusim::verify::{check_program, ProblemKind};
use tpusim::{DType, Mesh};

#[test]
fn every_collective_runs_along_either_axis_of_a_2d_mesh() {
    let reg = Registry::builtin();
    for (nx, ny) in [(2usize, 4usize), (3, 2)] {
        let mesh = Mesh::with_axes(&[("x", nx), ("y", ny)]).unwrap();
        for axis in ["x", "y"] {
            let q = if axis == "x" { nx } else { ny };
            for c in reg.iter() {
                let shard = c.default_shape(q);
                for dtype in [DType::I32, DType::F32] {
                    for spec in [ScheduleSpec::Eager, ScheduleSpec::Random(3)] {
                        let cpu = run_along(
                            c,
                            &mesh,
                            axis,
                            &shard,
                            dtype,
                            &mut CpuExecutor::new(),
                            7,
                            spec,
                        )
                        .unwrap();
                        let gpu =
                            run_along(c, &mesh, axis, &shard, dtype, &mut *common::gpu(), 7, spec)
                                .unwrap();
                        let what = format!("{} on {nx}x{ny} along {axis} {dtype} {spec}", c.name());
                        assert_eq!((cpu.wrong, gpu.wrong), (0, 0), "{what}");
                        assert_eq!(cpu.total, gpu.total);
                    }
                }
            }
        }
    }
}

#[test]
fn the_reference_keeps_groups_apart() {
    // ppermute along y on a 2x3 mesh: (x, y) receives from (x, y-1) of its own row.
    let mesh = Mesh::with_axes(&[("x", 2), ("y", 3)]).unwrap();
    let inputs: Vec<Vec<tpusim::HostArray>> = (0..6)
        .map(|d| vec![tpusim::HostArray::from_i32(&[1], vec![d]).unwrap()])
        .collect();
    let c = Registry::builtin().by_name("ppermute").unwrap();
    let place = Placement::along(mesh.clone(), "y").unwrap();
    let out = place.per_group(&inputs, &|x| c.reference(x)).unwrap();
    assert_eq!(
        place.groups.as_ref().map(|g| g.to_vec()),
        Some(groups_along(&mesh, "y").unwrap())
    );
    let got: Vec<i32> = out.iter().map(|o| o[0].as_i32()[0]).collect();
    assert_eq!(got, vec![2, 0, 1, 5, 3, 4]);
}

#[test]
fn the_union_of_rings_is_verified_like_one_kernel() {
    let mesh = Mesh::with_axes(&[("x", 2), ("y", 4)]).unwrap();
    let groups = groups_along(&mesh, "y").unwrap();
    let ring = Mesh::new(4, "x").unwrap();
    let reg = Registry::builtin();
    for name in ["psum", "all_gather", "ring_allreduce_push"] {
        let c = reg.by_name(name).unwrap();
        let one = c
            .call(&ring, &c.default_shape(4), DType::F32)
            .unwrap()
            .lower(&ring)
            .unwrap();
        let both = replicate(&one, &groups).unwrap();
        let r = check_program(&both, &ScheduleSpec::check_set(8, 60, 0));
        assert!(
            r.is_clean(),
            "{name}: {:?}",
            r.findings.first().map(|f| f.problem.to_string())
        );
    }
    let bad = variant("all_gather", "shared-recv-sem")
        .unwrap()
        .call(&ring, &[8, 128], DType::F32)
        .unwrap()
        .lower(&ring)
        .unwrap();
    let r = check_program(&replicate(&bad, &groups).unwrap(), &[ScheduleSpec::Eager]);
    assert_eq!(r.kinds(), vec![ProblemKind::Race]);
}

#[test]
fn rings_on_different_rows_of_a_torus_do_not_share_links() {
    let reg = Registry::builtin();
    let c = reg.by_name("all_gather").unwrap();
    let modeled = |program: &tpusim::ir::Program, m: &CostModel| {
        Timed::new(program, m.clone())
            .unwrap()
            .run()
            .unwrap()
            .seconds
    };
    let ring = Mesh::new(4, "x").unwrap();
    let one = c
        .call(&ring, &[256, 128], DType::F32)
        .unwrap()
        .lower(&ring)
        .unwrap();
    let m = CostModel::preset("v5e").unwrap();
    let alone = modeled(&one, &m);
    // Mesh (x=2, y=4): device x*4 + y sits at torus (y, x) on torus:4x2, so each row's
    // ring along y runs on its own links.
    let mesh = Mesh::with_axes(&[("x", 2), ("y", 4)]).unwrap();
    let both = replicate(&one, &groups_along(&mesh, "y").unwrap()).unwrap();
    let mut torus = m.clone();
    torus.topology = Some(Topology::Torus(vec![4, 2]));
    assert!((modeled(&both, &torus) - alone).abs() < 1e-12 * alone.max(1.0) + 1e-15);
}

#[test]
fn run_takes_a_mesh_and_an_axis() {
    let bin = env!("CARGO_BIN_EXE_tpusim");
    let run = |args: &[&str]| {
        let o = std::process::Command::new(bin).args(args).output().unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, out, err) = run(&[
        "run",
        "psum",
        "--mesh",
        "2x4",
        "--axis",
        "y",
        "--backend",
        "cpu",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("P=8 (2x4 along y, 2 groups)") && out.contains(": 0 wrong of 8192"),
        "{out}"
    );
    let (code, out, err) = run(&[
        "run",
        "all_to_all",
        "--mesh",
        "2x2x2",
        "--axis",
        "z",
        "--backend",
        "cpu",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("4 groups"), "{out}");
    for (args, why) in [
        (
            vec!["run", "psum", "--mesh", "2x4", "--axis", "z"],
            "no axis `z`",
        ),
        (vec!["run", "psum", "--mesh", "2x0"], "bad mesh `2x0`"),
        (
            vec!["run", "psum", "--mesh", "2x4", "--variant", "no-barrier"],
            "does not run along an --axis",
        ),
        (
            vec!["run", "psum", "--mesh", "2x4", "-p", "3"],
            "cannot be used with",
        ),
    ] {
        let (code, out, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
}
