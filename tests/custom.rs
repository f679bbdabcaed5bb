//! A collective the project does not ship (examples/custom_collective.rs, a broadcast
//! down a ring) gets every subcommand through `tpusim::cli::main_with`.

use std::path::PathBuf;
use std::process::Command;

/// The example binary, built by `cargo test` next to the test binaries.
fn example() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target profile dir");
    dir.join("examples").join("custom_collective")
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(example())
        .args(args)
        .output()
        .expect("the example is built by cargo test");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_registered_collective_gets_every_subcommand() {
    let (code, out, err) = run(&["run", "broadcast", "-p", "4"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("broadcast") && out.contains(": 0 wrong of 4096"),
        "{out}"
    );

    let (code, out, err) = run(&["check", "broadcast", "-p", "4"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("broadcast P=4: clean under 200 schedules"),
        "{out}"
    );

    // No layout given: columns from the kernel's own allocations.
    let (code, out, err) = run(&["trace", "broadcast", "-p", "4", "--format", "json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["columns"], serde_json::json!(["o_ref"]));
    let last = &v["rows"][v["rows"].as_array().unwrap().len() - 1];
    for d in 0..4 {
        assert_eq!(last["cells"][d][0], serde_json::json!([[0, 0]]), "{out}");
    }

    let (code, out, err) = run(&["bench", "broadcast", "-p", "4", "-b", "4K", "-e", "1M"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("broadcast ")).count(),
        5,
        "{out}"
    );

    let dir = std::env::temp_dir().join(format!("tpusim-custom-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let timeline = dir.join("bcast.json");
    let (code, out, err) = run(&[
        "run",
        "broadcast",
        "-p",
        "8",
        "--backend",
        "cpu",
        "--model",
        "v5e",
        "--timeline",
        timeline.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("busbw"), "{out}");
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&timeline).unwrap()).unwrap();
    assert!(t["traceEvents"].as_array().unwrap().len() > 8);
    std::fs::remove_dir_all(&dir).ok();

    // The shipped collectives are still there, and names stay unique.
    let (code, out, err) = run(&["run", "psum", "-p", "3", "--backend", "cpu"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, _, err) = run(&["run", "nope"]);
    assert_eq!(code, 2);
    assert!(err.contains("broadcast"), "known names are listed: {err}");
}
