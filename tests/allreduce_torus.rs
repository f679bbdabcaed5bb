//! `allreduce_torus`: one kernel over every axis of a torus mesh (reduce-scatter along
//! each axis, then all-gather back), checked against an independent sum on the CPU
//! executor with exact integer data on 1-, 2- and 3-axis meshes, verified clean under
//! many schedules, counted by the budget on its own mesh, and its command line.

mod common;

use common::{check, run_scheduled, simulate, tpusim};
use tpusim::collectives::{Collective, Registry, Span};
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::sched::ScheduleSpec;
use tpusim::{DType, HostArray, Mesh};

fn torus() -> std::sync::Arc<dyn Collective> {
    Registry::builtin().by_name("allreduce_torus").unwrap()
}

fn mesh(sizes: &[usize]) -> Mesh {
    let names = ["x", "y", "z"];
    let axes: Vec<(&str, usize)> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| (names[i], n))
        .collect();
    Mesh::with_axes(&axes).unwrap()
}

/// Device d holds d * 1000 + i: every device ends with the sum over all devices,
/// computed here element by element (not by the reference module).
#[test]
fn every_device_gets_the_sum_over_every_axis() {
    let c = torus();
    assert_eq!(c.span(), Span::Mesh);
    for sizes in [&[2, 2, 2][..], &[2, 3, 4], &[3, 1, 2], &[5], &[2, 3]] {
        let m = mesh(sizes);
        let p = m.size();
        let n = 2 * p;
        let inputs: Vec<Vec<HostArray>> = (0..p)
            .map(|d| {
                let v = (0..n).map(|i| (d * 1000 + i) as i32).collect();
                vec![HostArray::from_i32(&[1, n], v).unwrap()]
            })
            .collect();
        let want: Vec<i32> = (0..n)
            .map(|i| (0..p).map(|d| (d * 1000 + i) as i32).sum())
            .collect();
        let call = c.call(&m, &[2, p], DType::I32).unwrap();
        let got = simulate(&call, &m, &inputs, &mut CpuExecutor::new()).unwrap();
        for (d, out) in got.iter().enumerate() {
            assert_eq!(out[0].as_i32(), &want[..], "{sizes:?} device {d}");
        }
    }
}

/// Against the reference, under schedules that interleave the axes differently.
#[test]
fn it_matches_the_reference_under_several_schedules() {
    let c = torus();
    for sizes in [&[2, 2, 2][..], &[2, 3, 4]] {
        let m = mesh(sizes);
        let shard = c.default_shape(m.size());
        for spec in [
            ScheduleSpec::Eager,
            ScheduleSpec::Lazy,
            ScheduleSpec::Random(3),
        ] {
            let r = run_scheduled(&c, &m, &shard, DType::I32, &mut CpuExecutor::new(), 7, spec)
                .unwrap();
            assert_eq!(r.wrong, 0, "{sizes:?} {spec}");
            assert_eq!(r.total, m.size() * shard.iter().product::<usize>());
        }
    }
}

#[test]
fn it_is_clean_under_many_schedules() {
    let c = torus();
    for (sizes, schedules) in [(&[2, 2, 2][..], 100), (&[2, 3, 4], 30)] {
        let m = mesh(sizes);
        let call = c.call(&m, &[1, m.size()], DType::F32).unwrap();
        let r = check(&call, &m, &ScheduleSpec::check_set(m.size(), schedules, 0)).unwrap();
        assert!(
            r.is_clean(),
            "{sizes:?}: {:?}",
            r.findings.first().map(|f| f.problem.to_string())
        );
    }
}

/// The budget counts the kernel on its own 3-axis mesh (2(1) + 2(2) + 2(3) = 12 steps
/// on 2x3x4, where a ring of its 24 devices has 46): the estimate a refusal prints
/// names the lowered program's own op count.
#[test]
fn the_budget_counts_the_ops_of_the_mesh_it_runs_on() {
    let m = mesh(&[2, 3, 4]);
    let call = torus().call(&m, &[1, 24], DType::F32).unwrap();
    let ops: usize = call.lower(&m).unwrap().ops.iter().map(Vec::len).sum();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tpusim"))
        .args([
            "check",
            "allreduce_torus",
            "--mesh",
            "2x3x4",
            "--shape",
            "1x24",
        ])
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

#[test]
fn the_command_line_runs_checks_and_traces_it_on_a_3_axis_mesh() {
    let (code, out, err) = tpusim(&[
        "run",
        "allreduce_torus",
        "--mesh",
        "2x3x2",
        "--backend",
        "cpu",
        "--dtype",
        "i32",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("(2x3x2)") && out.contains(": 0 wrong of"),
        "{out}"
    );
    let (code, out, err) = tpusim(&[
        "check",
        "allreduce_torus",
        "--mesh",
        "2x2x2",
        "--schedules",
        "20",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("clean under 20 schedules"), "{out}");
    // The initial row and one per grid step: 2(1) + 2(1) + 2(1) = 6.
    let (code, out, err) = tpusim(&["trace", "allreduce_torus", "--mesh", "2x2x2"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("| [")).count(),
        6,
        "{out}"
    );
    let (code, _, err) = tpusim(&["run", "allreduce_torus", "--mesh", "2x3", "--shape", "1x5"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not divisible by 2x3 = 6"), "{err}");
}
