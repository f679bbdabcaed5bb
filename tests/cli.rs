//! The `tpusim` binary: output line and exit status (0 match, 2 bad input).

mod common;

use common::tpusim;

use std::process::Command;

#[test]
fn run_prints_one_line_and_exits_zero() {
    let (code, out, err) = tpusim(&[
        "run",
        "all_gather",
        "-p",
        "3",
        "--shape",
        "4x8",
        "--dtype",
        "i32",
        "--backend",
        "cpu",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("all_gather") && out.contains("P=3") && out.contains("shape=4x8"),
        "{out}"
    );
    assert!(out.contains("dtype=i32 on cpu: 0 wrong of 288"), "{out}");
    let (code, out, err) = tpusim(&[
        "run",
        "ppermute",
        "--perm",
        "0:1,1:0",
        "-p",
        "2",
        "--backend",
        "gpu",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(": 0 wrong of 2048") && !out.contains(" on cpu"),
        "{out}"
    );
}

/// The adapter wgpu picks by default, and whether it is a software one (as `auto` reads it).
fn default_adapter() -> Option<(String, bool)> {
    let inst = tpusim::device_sim::gpu::select::instance().ok()?;
    let a = tpusim::device_sim::gpu::select::choose(&inst).ok()?;
    let info = a.get_info();
    Some((info.name, info.device_type == wgpu::DeviceType::Cpu))
}

#[test]
fn auto_runs_the_cpu_executor_on_software_adapters_and_says_why() {
    let (code, out, err) = tpusim(&["run", "psum"]);
    assert_eq!(code, 0, "{out}{err}");
    match default_adapter() {
        Some((name, true)) => {
            assert!(
                out.contains("executor: cpu (auto: the only adapter is a software one, "),
                "{out}"
            );
            assert!(
                out.contains(&name) && out.contains("--backend gpu runs on it"),
                "{out}"
            );
        }
        Some((name, false)) => {
            assert!(out.contains(&format!(" on {name}")), "{out}");
            assert!(out.contains("is a hardware adapter)"), "{out}");
        }
        None => assert!(
            out.contains("executor: cpu (auto: wgpu finds no adapter)"),
            "{out}"
        ),
    }
    // No adapter on the backends allowed: the CPU executor, not exit 2.
    if !cfg!(target_os = "macos") {
        let out = Command::new(env!("CARGO_BIN_EXE_tpusim"))
            .args(["run", "psum"])
            .env("WGPU_BACKEND", "metal")
            .output()
            .expect("runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{text}");
        assert!(
            text.contains("executor: cpu (auto: wgpu finds no adapter)"),
            "{text}"
        );
    }
    // `--backend gpu` runs on whatever adapter there is, a software one too.
    if let Some((name, _)) = default_adapter() {
        let (code, out, err) = tpusim(&["run", "psum", "--backend", "gpu"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(
            out.contains(&format!(" on {name}")) && !out.contains("auto"),
            "{out}"
        );
    }
}

#[test]
fn bad_input_exits_two_with_a_reason() {
    for (args, reason) in [
        (
            vec!["run", "ppermute", "-p", "0"],
            "-p must be between 1 and",
        ),
        (
            vec!["run", "ppermute", "-p", "-5"],
            "-p must be between 1 and 4294967294 (got -5)",
        ),
        (vec!["run", "ppermute", "--shape", "8x0"], "zero dimension"),
        (
            vec!["run", "ppermute", "--shape", "8by128"],
            "malformed shape",
        ),
        (vec!["run", "pscan"], "unknown collective `pscan`"),
        (
            vec!["run", "ppermute", "--dtype", "f64"],
            "unknown dtype `f64`",
        ),
        (
            vec!["run", "ppermute", "--backend", "tpu"],
            "unknown backend",
        ),
        (vec!["run", "ppermute", "--perm", "0:1,0:2"], "source twice"),
        (vec!["run", "ppermute", "--perm", "0:9"], "outside the mesh"),
        (
            vec!["run", "psum_scatter", "-p", "3", "--shape", "8x128"],
            "not divisible by 3",
        ),
        (
            vec!["run", "psum_scatter", "-p", "4", "--shape", "12x4"],
            "must be even",
        ),
        (
            vec!["run", "ring_allreduce", "-p", "3", "--shape", "4x5"],
            "not divisible by P=3",
        ),
        (
            vec!["run", "all_gather", "--op", "max"],
            "does not take --op",
        ),
        (
            vec!["run", "psum", "--op", "prod"],
            "unknown reduction `prod`",
        ),
        (
            vec!["run", "psum", "--uninit", "ones"],
            "uninitialized memory `ones`",
        ),
    ] {
        let (code, out, err) = tpusim(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(reason), "{args:?}: {err}");
    }
}

#[test]
fn every_collective_runs_at_any_p_without_a_shape() {
    for name in tpusim::collectives::Registry::builtin().names() {
        for p in [1, 2, 3, 4, 5, 6, 7, 8, 16] {
            let ps = p.to_string();
            let (code, out, err) = tpusim(&["run", name, "-p", &ps, "--backend", "cpu"]);
            assert_eq!(code, 0, "{name} -p {p}: {out}{err}");
            assert!(out.contains(": 0 wrong of"), "{out}");
            // The verifier on the run's schedule finds nothing: no warning. (At P = 1 the
            // seeds' working buffers returned as outputs, `hbm_buf`, are partly never
            // written, which is true and said.)
            let quiet =
                !err.contains("warning") || (p == 1 && err.contains("(output not written)"));
            assert!(quiet, "{name} -p {p}: {err}");
        }
    }
}

#[test]
fn reductions_take_an_operator() {
    for c in ["psum", "ring_allreduce", "ring_allreduce_push"] {
        for op in ["max", "min"] {
            let (code, out, err) = tpusim(&[
                "run",
                c,
                "--op",
                op,
                "-p",
                "5",
                "--shape",
                "5x16",
                "--backend",
                "cpu",
            ]);
            assert_eq!(code, 0, "{c} {op}: {out}{err}");
            assert!(out.contains(": 0 wrong of 400"), "{out}");
        }
    }
}

#[test]
fn missing_adapter_exits_two() {
    let out = Command::new(env!("CARGO_BIN_EXE_tpusim"))
        .args(["run", "ppermute", "--backend", "gpu"])
        .env("WGPU_BACKEND", "metal")
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    if cfg!(target_os = "macos") {
        return;
    }
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no GPU adapter"), "{err}");
}

#[test]
fn demo_runs_every_collective() {
    let (code, out, err) = tpusim(&["demo"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("ppermute") && out.contains("all_gather"),
        "{out}"
    );
    // The executor and why `auto` chose it: one line at most, not one per result.
    assert!(out.matches("(auto: ").count() <= 1, "{out}");
    let results = out.lines().filter(|l| l.contains(" wrong of ")).count();
    assert!(results > 10, "{out}");
    // `--quiet`: the results alone, the same ones.
    let (code, quiet, err) = tpusim(&["demo", "-q"]);
    assert_eq!(code, 0, "{quiet}{err}");
    assert!(
        !quiet.contains("(auto: ") && !quiet.contains("executor:"),
        "{quiet}"
    );
    let quiet_results = quiet.lines().filter(|l| l.contains(" wrong of ")).count();
    assert_eq!(quiet_results, results, "{quiet}");
}

#[test]
fn check_exits_zero_clean_one_on_problems_two_on_bad_input() {
    let (code, out, err) = tpusim(&["check", "all", "-p", "3", "--schedules", "20"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out.matches("clean under 20 schedules").count(),
        tpusim::collectives::Registry::builtin().names().len(),
        "{out}"
    );

    let (code, out, _) = tpusim(&[
        "check",
        "ppermute",
        "--variant",
        "missing-signal",
        "-p",
        "3",
    ]);
    assert_eq!(code, 1);
    assert!(
        out.contains("[1] deadlock") && out.contains("waits on `done`: value 0, needs 1"),
        "{out}"
    );
    let replay = out
        .lines()
        .find_map(|l| l.split("replay: ").nth(1))
        .expect("a replay command")
        .trim_end_matches(')')
        .to_string();
    let args: Vec<&str> = replay.split_whitespace().skip(1).collect();
    let (code, again, _) = tpusim(&args);
    assert_eq!(code, 1, "{replay}");
    assert!(again.contains("1 problem in 1 schedule"), "{again}");

    let (code, out, _) = tpusim(&["check", "--list-variants"]);
    assert_eq!(code, 0);
    assert_eq!(
        out.lines().count(),
        tpusim::collectives::variants::variants().len(),
        "{out}"
    );

    for (args, why) in [
        (
            vec!["check", "psum", "--variant", "nope"],
            "no variant `nope`",
        ),
        (
            vec!["check", "psum", "--replay", "sometimes"],
            "unknown schedule",
        ),
        (vec!["check", "psum", "-p", "0"], "-p must be between 1 and"),
        (vec!["check"], "name a collective"),
        (
            vec!["run", "psum", "--schedule", "later"],
            "unknown schedule",
        ),
    ] {
        let (code, out, err) = tpusim(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
}

#[test]
fn trace_prints_markdown_and_json() {
    let (code, out, err) = tpusim(&["trace", "psum", "-p", "4"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("| [1] | `(x1, x2, x3+x2)` |"), "{out}");
    let (code, out, _) = tpusim(&["trace", "all_gather", "-p", "2", "--format", "json"]);
    assert_eq!(code, 0);
    let j: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(
        j["columns"],
        serde_json::json!(["out_ref[0]", "out_ref[1]"])
    );
    let (code, _, err) = tpusim(&["trace", "psum", "--format", "html"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown format"), "{err}");
    // The kernel is built in the dtype asked for; the symbolic cells do not depend on it.
    let (_, f32_table, _) = tpusim(&["trace", "psum", "-p", "4"]);
    let (code, bf16_table, err) = tpusim(&["trace", "psum", "-p", "4", "--dtype", "bf16"]);
    assert_eq!((code, &bf16_table), (0, &f32_table), "{err}");
    let (code, _, err) = tpusim(&["trace", "psum", "--dtype", "f64"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown dtype `f64`"), "{err}");
}

#[test]
fn run_with_a_model_prints_modeled_time_and_bus_bandwidth() {
    let dir = std::env::temp_dir().join(format!("tpusim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tl = dir.join("t.json");
    let (code, out, err) = tpusim(&[
        "run",
        "ring_allreduce_push",
        "--backend",
        "cpu",
        "--model",
        "v5e",
        "--link-gbps",
        "25",
        "--timeline",
        tl.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("model v5e (overridden) on ring:")
            && out.contains("busbw")
            && out.contains("ideal ring bound"),
        "{out}"
    );
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&tl).unwrap()).unwrap();
    assert!(j["traceEvents"].as_array().unwrap().len() > 10);
    for (args, why) in [
        (vec!["run", "psum", "--model", "v9"], "unknown model `v9`"),
        (
            vec!["run", "psum", "--link-gbps", "10"],
            "need a --model preset",
        ),
        (
            vec!["run", "psum", "--model", "v5p", "--shape", "4096x4096"],
            "VMEM of `psum` on v5p",
        ),
        (
            vec!["run", "psum", "--model", "v5p", "--link-gbps", "0"],
            "must be positive",
        ),
    ] {
        let (code, out, err) = tpusim(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
}

#[test]
fn bench_sweeps_sizes_checks_results_and_writes_json() {
    let dir = std::env::temp_dir().join(format!("tpusim-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("b.json");
    let (code, out, err) = tpusim(&[
        "bench",
        "psum",
        "-p",
        "3",
        "-b",
        "4K",
        "-e",
        "64K",
        "-f",
        "4",
        "-n",
        "2",
        "-w",
        "1",
        "-c",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("algbw(GB/s)") && out.contains("busbw(GB/s)") && out.contains("%roof"),
        "{out}"
    );
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("psum ")).collect();
    assert_eq!(rows.len(), 3, "{out}");
    for r in &rows {
        let cols: Vec<&str> = r.split_whitespace().collect();
        assert_eq!(cols[6], "0", "#wrong: {r}");
    }
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(j["rows"].as_array().unwrap().len(), 3);
    assert!(j["rows"][0]["rates"]["copy_gbps"].as_f64().unwrap() > 0.0);
    let (code, out, err) = tpusim(&[
        "bench",
        "all",
        "--backend",
        "cpu",
        "-b",
        "1K",
        "-e",
        "1K",
        "-n",
        "1",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out.lines()
            .filter(|l| l.contains(" 1024 ") || l.contains(" 4096 "))
            .count(),
        tpusim::collectives::Registry::builtin().names().len(),
        "{out}"
    );
    for (args, why) in [
        (vec!["bench", "psum", "-b", "4Q"], "bad size `4Q`"),
        (
            vec!["bench", "psum", "-b", "1M", "-e", "4K"],
            "is above the maximum",
        ),
        (vec!["bench", "psum", "-f", "1"], "at least 2"),
    ] {
        let (code, out, err) = tpusim(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
}

/// `tpusim run ARGS --dtype i32 --schedule S --backend B`.
fn run_variant(args: &[&str], schedule: &str, backend: &str) -> (i32, String, String) {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.extend([
        "--dtype",
        "i32",
        "--schedule",
        schedule,
        "--backend",
        backend,
    ]);
    tpusim(&all)
}

#[test]
fn a_racy_variant_gives_wrong_numbers_only_under_some_schedules() {
    // The race the checker reports (psum without its capacity handshake) is silent under
    // the eager schedule and corrupts the sum when DMAs stay in flight: exit 1.
    let run = |schedule: &str, backend: &str| {
        run_variant(
            &["psum", "--variant", "no-capacity-sem", "-p", "3"],
            schedule,
            backend,
        )
    };
    let (code, out, err) = run("eager", "cpu");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(": 0 wrong of 3072"), "{out}");
    // The run was lucky, and says so: the verifier on its one schedule finds the race.
    assert!(
        err.contains("`run` followed one schedule (eager)")
            && err.contains("problems (race)")
            && err.contains("`tpusim check` with the same arguments reports them"),
        "{err}"
    );
    for backend in ["cpu", "gpu"] {
        let (code, out, err) = run("lazy", backend);
        assert_eq!(code, 1, "{out}{err}");
        assert!(
            out.contains("psum --variant no-capacity-sem") && !out.contains(": 0 wrong"),
            "{out}"
        );
    }
    // One receive semaphore shared by every step: when a receive completion is held
    // back (lazy), a wait takes the next step's bytes and a device forwards a block
    // before it has landed.
    let shared = |schedule: &str, backend: &str| {
        run_variant(
            &["all_gather", "--variant", "shared-recv-sem"],
            schedule,
            backend,
        )
    };
    let (code, out, err) = shared("eager", "cpu");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(": 0 wrong of 16384"), "{out}");
    assert!(err.contains("(race)"), "{err}");
    // The unbroken kernel: nothing to say.
    let (code, out, err) = run_variant(&["all_gather"], "eager", "cpu");
    assert_eq!(code, 0, "{out}{err}");
    assert!(!err.contains("tpusim"), "{err}");
    for backend in ["cpu", "gpu"] {
        let (code, out, err) = shared("lazy", backend);
        assert_eq!(code, 1, "{out}{err}");
        assert!(out.contains(": 2048 wrong of 16384"), "{out}");
    }
    // A deadlocking variant is an error naming the blocked devices, exit 1.
    let (code, _, err) = tpusim(&[
        "run",
        "ppermute",
        "--variant",
        "missing-signal",
        "--backend",
        "cpu",
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains("deadlock") && err.contains("waits on `done`"),
        "{err}"
    );
    let (code, _, err) = tpusim(&["run", "psum", "--variant", "nope"]);
    assert_eq!(code, 2);
    assert!(err.contains("no variant `nope`"), "{err}");
}

#[test]
fn repeat_runs_checks_traces_and_benches_invocations_back_to_back() {
    let (code, out, err) = tpusim(&[
        "run",
        "psum",
        "-p",
        "3",
        "--repeat",
        "3",
        "--backend",
        "cpu",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("psum --repeat 3") && out.contains(": 0 wrong of"),
        "{out}"
    );
    let (code, out, err) = tpusim(&[
        "check",
        "psum",
        "-p",
        "4",
        "--repeat",
        "2",
        "--variant",
        "single-barrier",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("clean under 200 schedules"), "{out}");
    let args = [
        "check",
        "ppermute",
        "-p",
        "5",
        "--repeat",
        "2",
        "--variant",
        "single-barrier",
    ];
    let (code, out, err) = tpusim(&args);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("in invocation 1") && out.contains("double barrier"),
        "{out}"
    );
    assert!(
        out.contains(
            "replay: tpusim check ppermute -p 5 --variant single-barrier --repeat 2 --replay"
        ),
        "{out}"
    );
    let (code, out, _) = tpusim(&["check", "--list-variants"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("under --repeat 2") && out.contains("clean, under any --repeat"),
        "{out}"
    );
    let (code, out, err) = tpusim(&["trace", "psum", "-p", "2", "--repeat", "2"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("| #1 [1] |"), "{out}");
    let bench = [
        "bench",
        "psum",
        "-p",
        "2",
        "-b",
        "4K",
        "-e",
        "4K",
        "-n",
        "1",
        "-w",
        "0",
        "--backend",
        "cpu",
        "--repeat",
        "2",
    ];
    let (code, out, err) = tpusim(&bench);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("repeat=2") && out.contains("psum --repeat 2"),
        "{out}"
    );
    for bad in ["0", "1000000000000", "x"] {
        let (code, out, err) = tpusim(&["check", "psum", "--repeat", bad]);
        assert_eq!(code, 2, "--repeat {bad}: {out}{err}");
        assert!(err.contains("repeat"), "{err}");
    }
}

/// A remote DMA that overwrites a buffer the receiver still reads is missing a capacity
/// handshake, and the hint says so; a semaphore shared by DMAs into different bytes is
/// told to give each its own.
#[test]
fn race_hints_name_the_fix_that_matches_the_race() {
    let (code, out, err) = tpusim(&[
        "check",
        "psum",
        "--variant",
        "no-capacity-sem",
        "--schedules",
        "10",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("device 0's DMA overwrites `hbm_buf` while device 1 still uses what it holds")
            && out.contains("(a capacity semaphore), and device 0 wait for that signal"),
        "{out}"
    );
    let (code, out, err) = tpusim(&[
        "check",
        "all_gather",
        "--variant",
        "shared-recv-sem",
        "--schedules",
        "10",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("give each DMA in flight its own semaphore") && !out.contains("capacity"),
        "{out}"
    );
}
