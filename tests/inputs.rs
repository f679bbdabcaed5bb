//! Every bad input is a clear exit 2, at any scale, and nothing is lost: one table of
//! command lines a new user might type, each with its exit status and the words its
//! message must contain, and never a panic. On Linux each command runs under a 1 GiB
//! address-space limit, so a check that stopped refusing work up front fails here
//! quickly instead of exhausting the machine.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Address space each command may map (KiB, for `ulimit -v`).
const ADDRESS_SPACE_KIB: u64 = 1 << 20;

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
    took: Duration,
}

fn tpusim_env(args: &[&str], env: &[(&str, &str)]) -> Out {
    let bin = env!("CARGO_BIN_EXE_tpusim");
    let mut cmd = if cfg!(target_os = "linux") {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(format!(
                "ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\""
            ))
            .arg(bin)
            .args(args);
        c
    } else {
        let mut c = Command::new(bin);
        c.args(args);
        c
    };
    for (k, v) in env {
        cmd.env(k, v);
    }
    let t = Instant::now();
    let out = cmd.output().expect("runs");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: t.elapsed(),
    }
}

fn tpusim(args: &[&str]) -> Out {
    tpusim_env(args, &[])
}

/// A `.npy` file with header text `dict` and `data` after it.
fn npy(path: &Path, dict: &str, data: &[u8]) {
    let mut text = dict.to_string();
    while !(10 + text.len() + 1).is_multiple_of(64) {
        text.push(' ');
    }
    text.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((text.len() as u16).to_le_bytes());
    bytes.extend(text.as_bytes());
    bytes.extend(data);
    std::fs::write(path, bytes).unwrap();
}

fn f32_header(shape: &str) -> String {
    format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}")
}

struct Files {
    _dir: tempfile::TempDir,
    dir: PathBuf,
}

impl Files {
    fn new() -> Self {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().to_path_buf();
        let data: Vec<u8> = (0..32).flat_map(|i| (i as f32).to_le_bytes()).collect();
        npy(&dir.join("ok.npy"), &f32_header("(4, 8)"), &data);
        npy(
            &dir.join("huge_shape.npy"),
            &f32_header("(4611686018427387904, 4611686018427387904)"),
            &[],
        );
        npy(&dir.join("short.npy"), &f32_header("(4, 8)"), &data[..40]);
        npy(
            &dir.join("claims_1e10.npy"),
            &f32_header("(100000, 100000)"),
            &[0; 512],
        );
        std::fs::write(dir.join("text.npy"), "not numpy\n").unwrap();
        let mut v2 = b"\x93NUMPY\x02\x00".to_vec();
        v2.extend(0xFFFF_FFF0u32.to_le_bytes());
        std::fs::write(dir.join("huge_header.npy"), v2).unwrap();
        std::fs::create_dir(dir.join("a_directory")).unwrap();
        Files { _dir: d, dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_string()
    }
}

/// No output of a bad input may look like a crash.
fn assert_clean_failure(what: &str, o: &Out) {
    for crash in [
        "panicked",
        "RUST_BACKTRACE",
        "memory allocation",
        "stack backtrace",
    ] {
        assert!(
            !o.stderr.contains(crash),
            "{what}: crash text `{crash}`:\n{}",
            o.stderr
        );
    }
}

/// What the case stands for, the command line, its environment, and the words its
/// message must contain.
type Case<'a> = (&'a str, Vec<String>, Vec<(&'a str, &'a str)>, Vec<&'a str>);

#[test]
fn every_bad_input_is_a_clear_exit_two() {
    let f = Files::new();
    let (ok, out) = (f.path("ok.npy"), f.path("out.npy"));
    let apply = |input: &str, output: &str| -> Vec<String> {
        [
            "apply",
            "psum",
            "--backend",
            "cpu",
            "--input",
            input,
            "--output",
            output,
        ]
        .map(String::from)
        .to_vec()
    };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let no_env: Vec<(&str, &str)> = vec![];
    let largest_p = "the largest P that fits is";
    #[rustfmt::skip]
    let cases: Vec<Case> = vec![
        // The crashes: far beyond the machine, answered before planning.
        ("1 run P=100000", s(&["run", "psum", "-p", "100000"]), no_env.clone(), vec!["not enough memory", "P=100000", largest_p]),
        ("2 check P=100000", s(&["check", "psum", "-p", "100000", "--schedules", "1"]), no_env.clone(), vec!["not enough memory", "race checker", largest_p]),
        ("3 trace P=100000", s(&["trace", "psum", "-p", "100000"]), no_env.clone(), vec!["not enough memory", "step table", largest_p]),
        ("4 run cpu P=10000", s(&["run", "psum", "-p", "10000", "--backend", "cpu"]), no_env.clone(), vec!["not enough memory", "traced ops", largest_p]),
        ("5 .npy shape 2^62 x 2^62", apply(&f.path("huge_shape.npy"), &out), no_env.clone(), vec!["huge_shape.npy", "more elements than any memory holds"]),
        ("6 run, no such adapter", s(&["run", "psum"]), vec![("WGPU_ADAPTER_NAME", "nonexistent")], vec!["WGPU_ADAPTER_NAME=`nonexistent` matches no adapter", "adapter"]),
        ("7 info, no such adapter", s(&["info"]), vec![("WGPU_ADAPTER_NAME", "nonexistent")], vec!["matches no adapter"]),
        // The wrong successes.
        ("8 run run-ahead:99", s(&["run", "psum", "-p", "4", "--schedule", "run-ahead:99"]), no_env.clone(), vec!["run-ahead:99", "4 devices", "run-ahead:3"]),
        ("9 check --replay run-ahead:99", s(&["check", "psum", "--replay", "run-ahead:99"]), no_env.clone(), vec!["names device 99"]),
        ("10 bench run-ahead:99", s(&["bench", "psum", "--schedule", "run-ahead:99"]), no_env.clone(), vec!["names device 99"]),
        ("11 bench -n 0", s(&["bench", "psum", "-n", "0"]), no_env.clone(), vec!["-n", "at least 1"]),
        // The I/O failures: each names the path and what was being done.
        ("12 timeline in /proc", s(&["run", "psum", "--backend", "cpu", "--model", "v5e", "--timeline", "/proc/x.json"]), no_env.clone(), vec!["cannot write timeline to /proc/x.json", "No such file or directory"]),
        ("13 bench json in /proc", s(&["bench", "psum", "--backend", "cpu", "-e", "4K", "--json", "/proc/x.json"]), no_env.clone(), vec!["cannot write bench results to /proc/x.json"]),
        ("14 apply, missing input", apply(&f.path("missing.npy"), &out), no_env.clone(), vec!["cannot read input", "missing.npy", "No such file or directory"]),
        ("15 apply, truncated data", apply(&f.path("short.npy"), &out), no_env.clone(), vec!["short.npy", "128 bytes of data", "holds 40 bytes", "truncated"]),
        ("16 apply, 1e10 elements over 512 bytes", apply(&f.path("claims_1e10.npy"), &out), no_env.clone(), vec!["claims_1e10.npy", "[100000, 100000]", "holds 512 bytes", "truncated"]),
        ("17 apply, output in /proc", apply(&ok, "/proc/x.npy"), no_env.clone(), vec!["cannot write result to /proc/x.npy"]),
        ("18 apply, output a directory", apply(&ok, &f.path("a_directory")), no_env.clone(), vec!["cannot write result to", "a_directory", "is a directory"]),
        ("19 apply, input a directory", apply(&f.path("a_directory"), &out), no_env.clone(), vec!["cannot read input", "is a directory"]),
        // The doubtful ones.
        ("check a shape no run could hold", s(&["check", "psum", "--shape", "100000000x100000"]), no_env.clone(), vec!["not enough memory", "the data a run of this shape holds", "largest shard that fits"]),
        ("check --list-variants extra", s(&["check", "--list-variants", "extra"]), no_env.clone(), vec!["cannot be used with"]),
        // The classes behind them: scale.
        ("all_gather's P x P output", s(&["run", "all_gather", "-p", "100000", "--backend", "cpu"]), no_env.clone(), vec!["not enough memory", largest_p]),
        ("a shard larger than memory", s(&["run", "psum", "--shape", "100000x100000", "--backend", "cpu"]), no_env.clone(), vec!["not enough memory", "largest shard that fits"]),
        ("bench up to 4G", s(&["bench", "psum", "-e", "4G", "--backend", "cpu"]), no_env.clone(), vec!["not enough memory", "4G", "largest shard that fits"]),
        ("bench encoding 1e8 iterations", s(&["bench", "psum", "-n", "100000000", "-e", "4K", "--backend", "gpu"]), no_env.clone(), vec!["encoded iterations", "the largest -n / -w that fits"]),
        ("trace, signal matrix of 2P^2", s(&["trace", "ring_allreduce", "-p", "2000"]), no_env.clone(), vec!["not enough memory", largest_p]),
        ("run, signal matrix of 2P^2", s(&["run", "ring_allreduce", "-p", "100000", "--shape", "100000x1", "--backend", "cpu"]), no_env.clone(), vec!["needs at least", "scheduler state", largest_p]),
        ("P beyond the planner", s(&["run", "psum", "-p", "5000000000", "--backend", "cpu"]), no_env.clone(), vec!["beyond what the planner supports"]),
        ("a stated memory limit", s(&["run", "psum", "-p", "300", "--backend", "cpu"]), vec![("TPUSIM_MEMORY_LIMIT", "64M")], vec!["TPUSIM_MEMORY_LIMIT=64M", largest_p]),
        ("a malformed memory limit", s(&["run", "psum"]), vec![("TPUSIM_MEMORY_LIMIT", "lots")], vec!["TPUSIM_MEMORY_LIMIT=`lots` is not a size"]),
        // Ranges and specs.
        ("check --schedules 0", s(&["check", "psum", "--schedules", "0"]), no_env.clone(), vec!["--schedules must be between 1 and"]),
        ("check --schedules 1e11", s(&["check", "psum", "--schedules", "99999999999"]), no_env.clone(), vec!["--schedules must be between 1 and"]),
        ("run-ahead at P=1", s(&["run", "psum", "-p", "1", "--schedule", "run-ahead:1", "--backend", "cpu"]), no_env.clone(), vec!["1 device ", "run-ahead:0"]),
        ("a variant ignores --op", s(&["run", "psum", "--variant", "no-capacity-sem", "--op", "max"]), no_env.clone(), vec!["--variant", "no --op or --perm"]),
        ("an unknown extra argument", s(&["run", "psum", "extra"]), no_env.clone(), vec!["unexpected argument 'extra'"]),
        // Adapters.
        ("an unknown backend name", s(&["run", "psum"]), vec![("WGPU_BACKEND", "vulcan")], vec!["WGPU_BACKEND=`vulcan` names no backend"]),
        // Files.
        ("a timeline into a directory", s(&["run", "psum", "--backend", "cpu", "--model", "v5e", "--timeline", &f.path("a_directory")]), no_env.clone(), vec!["cannot write timeline to", "is a directory"]),
        ("a timeline in a missing directory", s(&["run", "psum", "--backend", "cpu", "--model", "v5e", "--timeline", &f.path("nowhere/t.json")]), no_env.clone(), vec!["cannot write timeline to", "nowhere/t.json"]),
        ("apply onto its own input", apply(&ok, &ok), no_env.clone(), vec!["is the input file"]),
        ("apply, a dimension to join that is not there", [apply(&ok, &out), s(&["--out-dim", "9"])].concat(), no_env.clone(), vec!["--out-dim 9", "no dimension 9"]),
        ("apply, a dimension to split that is not there", [apply(&ok, &out), s(&["--dim", "9"])].concat(), no_env.clone(), vec!["cannot shard dimension 9"]),
        ("apply on a text file", apply(&f.path("text.npy"), &out), no_env.clone(), vec!["text.npy is not a .npy file"]),
        ("apply, a 4 GiB header", apply(&f.path("huge_header.npy"), &out), no_env.clone(), vec!["huge_header.npy is not a .npy file", "its header claims"]),
    ];
    for (what, args, env, words) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = tpusim_env(&args, env);
        assert_eq!(o.code, 2, "{what}: {args:?}\n{}{}", o.stdout, o.stderr);
        for w in words {
            assert!(o.stderr.contains(w), "{what}: `{w}` not in:\n{}", o.stderr);
        }
        assert_clean_failure(what, &o);
        // Refused up front: nothing ran, nothing was printed as a result.
        assert!(o.stdout.is_empty(), "{what}: printed\n{}", o.stdout);
        assert!(o.took < Duration::from_secs(5), "{what}: took {:?}", o.took);
    }
    // Nothing was written, and no temporary file was left, by any of them.
    let mut left: Vec<String> = std::fs::read_dir(&f.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "a_directory",
            "claims_1e10.npy",
            "huge_header.npy",
            "huge_shape.npy",
            "ok.npy",
            "short.npy",
            "text.npy"
        ]
    );
}

#[test]
fn run_p_100000_answers_at_once_with_the_largest_p_that_fits() {
    let o = tpusim(&["run", "psum", "-p", "100000"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.took < Duration::from_secs(1), "took {:?}", o.took);
    let largest: usize = o
        .stderr
        .split("the largest P that fits is ")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{}", o.stderr));
    assert!((1..100_000).contains(&largest), "{}", o.stderr);
}

#[test]
fn the_largest_p_stated_is_the_boundary_and_runs() {
    // Under a stated limit the boundary is small enough to run here.
    let limit = [("TPUSIM_MEMORY_LIMIT", "48M")];
    let o = tpusim_env(&["run", "psum", "-p", "1000", "--backend", "cpu"], &limit);
    assert_eq!(o.code, 2, "{}", o.stderr);
    let largest = o
        .stderr
        .split("the largest P that fits is ")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .unwrap_or_else(|| panic!("{}", o.stderr))
        .to_string();
    let run = |p: &str| tpusim_env(&["run", "psum", "-p", p, "--backend", "cpu"], &limit);
    let o = run(&largest);
    assert_eq!(o.code, 0, "P={largest}: {}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains(": 0 wrong of"), "{}", o.stdout);
    let above = (largest.parse::<usize>().unwrap() + 1).to_string();
    assert_eq!(run(&above).code, 2, "P={above} must not fit");
}

#[test]
fn a_failed_run_keeps_the_old_output_and_a_good_one_replaces_it_whole() {
    let f = Files::new();
    let timeline = f.dir.join("t.json");
    std::fs::write(&timeline, "the user's old timeline").unwrap();
    // A deadlocking kernel fails after the timeline was checked: the old file stays.
    let o = tpusim(&[
        "run",
        "ppermute",
        "--variant",
        "missing-signal",
        "--backend",
        "cpu",
        "--model",
        "v5e",
        "--timeline",
        timeline.to_str().unwrap(),
    ]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("deadlock"), "{}", o.stderr);
    assert_eq!(
        std::fs::read_to_string(&timeline).unwrap(),
        "the user's old timeline"
    );
    // A result file: replaced whole by a good run, with its permissions kept.
    let out = f.dir.join("y.npy");
    std::fs::write(&out, "old result").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o640)).unwrap();
    }
    let args = |input: &str| {
        vec![
            "apply".to_string(),
            "psum".into(),
            "--backend".into(),
            "cpu".into(),
            "--input".into(),
            f.path(input),
            "--output".into(),
            out.to_str().unwrap().into(),
        ]
    };
    let run = |a: Vec<String>| tpusim(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let o = run(args("short.npy"));
    assert_eq!(o.code, 2);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "old result");
    let o = run(args("ok.npy"));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let y = tpusim::npy::read_npy(&out).unwrap();
    assert_eq!(y.shape, vec![4, 8]);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
    }
    let names: Vec<String> = std::fs::read_dir(&f.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(names.is_empty(), "temporary files left: {names:?}");
    // A special file is written in place, never replaced.
    let o = tpusim(&[
        "run",
        "psum",
        "--backend",
        "cpu",
        "--model",
        "v5e",
        "--timeline",
        "/dev/null",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(!std::fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_file());
}

#[test]
fn bench_without_checks_reports_nothing_checked() {
    let json = tempfile::NamedTempFile::new().unwrap();
    let o = tpusim(&[
        "bench",
        "psum",
        "--backend",
        "cpu",
        "-b",
        "4K",
        "-e",
        "4K",
        "-n",
        "1",
        "-c",
        "0",
        "--json",
        json.path().to_str().unwrap(),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let row = o
        .stdout
        .lines()
        .find(|l| l.starts_with("psum "))
        .unwrap_or_else(|| panic!("{}", o.stdout));
    assert_eq!(row.split_whitespace().nth(6), Some("-"), "#wrong: {row}");
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json.path()).unwrap()).unwrap();
    assert!(j[0]["wrong"].is_null(), "{j}");
}

#[test]
fn a_successful_gpu_run_prints_nothing_on_stderr() {
    let o = Command::new(env!("CARGO_BIN_EXE_tpusim"))
        .args(["run", "psum"])
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "stderr of a good run: {err}");
}

#[test]
fn stdout_failures_are_reported_or_quiet() {
    if !Path::new("/dev/full").exists() {
        return;
    }
    let full = std::fs::File::create("/dev/full").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_tpusim"))
        .args(["trace", "psum", "-p", "4"])
        .stdout(full)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("standard output") && !err.contains("panicked"),
        "{err}"
    );
    // A reader that goes away (`| head -1`) ends the command quietly.
    let mut child = Command::new(env!("CARGO_BIN_EXE_tpusim"))
        .args(["trace", "psum", "-p", "64"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
