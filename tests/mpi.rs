//! Partitioned runs under `mpirun` (built with `--features mpi`; CI installs Open MPI):
//! every shipped collective at P 4 and 8 gives the single-process `apply` result byte
//! for byte on 2 and 3 ranks (those of several operands, which `apply` refuses, are
//! right under `run`), and so does psum with each operator, every dtype, NaNs and
//! wrapping sums on shards where ranks add received bytes in place; a run one process
//! must refuse for memory completes on 4
//! ranks, each holding its own devices' data; bad input exits 2 on every rank, and so do
//! ranks started with different command lines, the difference named. These tests fail,
//! rather than skip, where
//! `mpirun` is missing.
#![cfg(feature = "mpi")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use tpusim::collectives::Registry;
use tpusim::{DType, HostArray};

/// One mpirun at a time: the ranks of one already share the two cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn tpusim() -> &'static str {
    env!("CARGO_BIN_EXE_tpusim")
}

fn output(c: &mut Command) -> (i32, String, String) {
    let o = c.output().unwrap_or_else(|e| {
        panic!(
            "cannot start {:?} (is Open MPI installed? apt-get install openmpi-bin): {e}",
            c.get_program()
        )
    });
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `tpusim args` under `mpirun -np ranks` (with `env`).
fn mpirun(ranks: usize, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut c = Command::new("mpirun");
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        &ranks.to_string(),
    ]);
    for (k, v) in env {
        c.args(["-x", &format!("{k}={v}")]);
    }
    c.arg(tpusim()).args(args);
    output(&mut c)
}

fn alone(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut c = Command::new(tpusim());
    c.args(args).envs(env.iter().copied());
    output(&mut c)
}

/// A global input for `apply` of collective `name` at P devices (its shape from the
/// collective's default shard, the sharded dimension P times as long).
fn input(dir: &Path, name: &str, p: usize, dtype: DType) -> PathBuf {
    let c = Registry::builtin().by_name(name).unwrap();
    let (dim, _) = c.apply_dims();
    let mut shape = c.default_shape(p);
    shape[dim] *= p;
    let n: usize = shape.iter().product();
    let values: Vec<f64> = (0..n).map(|i| ((i * 7919) % 97) as f64 - 40.0).collect();
    let words = values.iter().map(|&v| dtype.bits_of(v)).collect();
    let a = HostArray {
        dtype,
        shape,
        words,
    };
    let path = dir.join(format!("{name}-{p}-{dtype}.npy"));
    tpusim::npy::write_npy(&path, &a).unwrap();
    path
}

/// How many operands per device collective `name` takes at P devices (`apply` shards
/// one array, so it runs the collectives of one).
fn operands(name: &str, p: usize) -> usize {
    let c = Registry::builtin().by_name(name).unwrap();
    let mesh = tpusim::Mesh::new(p, "x").unwrap();
    let call = c.call(&mesh, &c.default_shape(p), DType::F32).unwrap();
    call.spec().inputs().len()
}

/// A collective of several operands (the matmuls) under `run` on 2 and 3 ranks: 0 wrong
/// against its reference, one result line (`tests/ranks.rs` compares their outputs
/// with one process's byte for byte, ranks as threads).
fn run_on_ranks_is_right(name: &str, p: usize, dtype: DType) {
    let (ps, ds) = (p.to_string(), dtype.to_string());
    let args = ["run", name, "-p", &ps, "--backend", "cpu", "--dtype", &ds];
    for r in [2usize, 3] {
        let (code, out, err) = mpirun(r, &args, &[]);
        assert_eq!(code, 0, "{name} P={p} on {r} ranks: {out}{err}");
        assert!(
            out.contains(" 0 wrong of "),
            "{name} P={p} on {r} ranks: {out}"
        );
        assert!(out.contains(&format!("x {r} ranks")), "{out}");
        assert_eq!(
            out.lines().filter(|l| l.starts_with(name)).count(),
            1,
            "{out}"
        );
    }
}

#[test]
fn apply_on_2_and_3_ranks_equals_one_process_byte_for_byte() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = Registry::builtin()
        .names()
        .iter()
        .map(|s| s.to_string())
        .collect();
    for p in [4usize, 8] {
        for (k, name) in names.iter().enumerate() {
            // f32 everywhere; i32 and bf16 on alternating collectives (the threads'
            // tests cover every dtype on every collective).
            let dtype = [DType::F32, DType::I32, DType::BF16][(k + p) % 3];
            if operands(name, p) > 1 {
                run_on_ranks_is_right(name, p, dtype);
                continue;
            }
            let x = input(dir.path(), name, p, dtype);
            let x = x.to_str().unwrap();
            let want = dir.path().join(format!("{name}-{p}-want.npy"));
            let ps = p.to_string();
            let base = [
                "apply",
                name.as_str(),
                "-p",
                &ps,
                "--backend",
                "cpu",
                "--input",
                x,
            ];
            let (code, out, err) = alone(
                &[&base[..], &["--output", want.to_str().unwrap()]].concat(),
                &[],
            );
            assert_eq!(code, 0, "{name} P={p} alone: {out}{err}");
            let want = std::fs::read(&want).unwrap();
            for r in [2usize, 3] {
                let got = dir.path().join(format!("{name}-{p}-{r}.npy"));
                let args = [&base[..], &["--output", got.to_str().unwrap()]].concat();
                let (code, out, err) = mpirun(r, &args, &[]);
                assert_eq!(code, 0, "{name} P={p} on {r} ranks: {out}{err}");
                assert!(out.contains("0 wrong vs XLA semantics"), "{out}");
                // Only rank 0 prints: one result line.
                assert_eq!(
                    out.lines().filter(|l| l.starts_with(name.as_str())).count(),
                    1,
                    "{out}"
                );
                let got = std::fs::read(&got).unwrap();
                assert!(
                    got == want,
                    "{name} P={p} {dtype}: {r} ranks' .npy differs from one process's"
                );
            }
        }
    }
}

#[test]
fn apply_on_ranks_to_a_stream_gathers_on_rank_0() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A pipe cannot be written at places: the ranks' results are gathered and written
    // by rank 0, the bytes one process writes to a file.
    let dir = tempfile::tempdir().unwrap();
    let x = input(dir.path(), "psum", 4, DType::F32);
    let want = dir.path().join("want.npy");
    let base = ["apply", "psum", "-p", "4", "--backend", "cpu"];
    let x = x.to_str().unwrap();
    let one = [
        &base[..],
        &["--input", x, "--output", want.to_str().unwrap()],
    ]
    .concat();
    let (code, out, err) = alone(&one, &[]);
    assert_eq!(code, 0, "{out}{err}");
    let piped = [&base[..], &["--input", x, "--output", "/dev/stdout"]].concat();
    let mut c = Command::new("mpirun");
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        "2",
        tpusim(),
    ])
    .args(&piped);
    let o = c.output().expect("mpirun starts");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stdout == std::fs::read(&want).unwrap());
}

#[test]
fn gpu_ranks_equal_one_cpu_process() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let x = input(dir.path(), "psum", 4, DType::BF16);
    let (want, got) = (dir.path().join("want.npy"), dir.path().join("got.npy"));
    let base = ["apply", "psum", "-p", "4", "--input", x.to_str().unwrap()];
    let cpu = [
        &base[..],
        &["--backend", "cpu", "--output", want.to_str().unwrap()],
    ]
    .concat();
    let (code, out, err) = alone(&cpu, &[]);
    assert_eq!(code, 0, "{out}{err}");
    let gpu = [
        &base[..],
        &["--backend", "gpu", "--output", got.to_str().unwrap()],
    ]
    .concat();
    let (code, out, err) = mpirun(2, &gpu, &[("WGPU_BACKEND", "vulkan")]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(std::fs::read(&got).unwrap() == std::fs::read(&want).unwrap());
}

#[test]
fn a_run_one_process_must_refuse_completes_on_4_ranks() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let args = [
        "run",
        "psum",
        "-p",
        "8",
        "--shape",
        "4096x4096",
        "--backend",
        "cpu",
    ];
    // Each rank makes, holds and checks its own devices' data (psum's reference is
    // computed in chunks), so 4 ranks fit where one process needs about 7 GiB.
    let limit = [("TPUSIM_MEMORY_LIMIT", "2500M")];
    let (code, out, err) = alone(&args, &limit);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("not enough memory") && err.contains("it needs 4 ranks of this size"),
        "{err}"
    );
    let (code, out, err) = alone(&[&args[..], &["--ranks-needed"]].concat(), &limit);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(": 4 ranks of this size"), "{out}");
    let (code, out, err) = mpirun(4, &args, &limit);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(": 0 wrong of 134217728"), "{out}");
    assert!(
        out.contains("ranks: 4 ranks over 8 devices: rank 0 devices 0-1"),
        "{out}"
    );
}

#[test]
fn bad_input_on_ranks_exits_2_once() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // More ranks than devices.
    let (code, out, err) = mpirun(3, &["run", "psum", "-p", "2", "--backend", "cpu"], &[]);
    assert_eq!(code, 2, "{out}{err}");
    assert_eq!(
        err.matches("3 ranks for 2 simulated devices").count(),
        1,
        "{err}"
    );
    // A bad shape: every rank finds it, rank 0 says it.
    let (code, _, err) = mpirun(
        2,
        &["run", "psum", "--shape", "0x4", "--backend", "cpu"],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        err.lines().filter(|l| l.starts_with("tpusim:")).count(),
        1,
        "{err}"
    );
}

#[test]
fn bench_on_ranks_reports_what_crossed_and_each_ranks_share() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (code, out, err) = mpirun(
        2,
        &[
            "bench",
            "psum",
            "-p",
            "4",
            "-b",
            "64K",
            "-e",
            "64K",
            "-n",
            "2",
            "-w",
            "1",
            "--backend",
            "cpu",
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("# 2 ranks over 4 devices") && out.contains("xrank(MB)"),
        "{out}"
    );
    let row = out.lines().find(|l| l.starts_with("psum ")).expect("a row");
    let cols: Vec<&str> = row.split_whitespace().collect();
    // psum at P=4 on 2 ranks: the ring crosses two boundaries with 4 shards each (and
    // the first hop), 64 KiB a shard.
    let xrank: f64 = cols[cols.len() - 2].parse().unwrap();
    assert!(xrank > 0.4 && xrank < 1.0, "{row}");
    assert_eq!(cols[cols.len() - 1].split('/').count(), 2, "{row}");
    // The roof on ranks is the slowest rank's own ops (ranks run at once): a bound, on 4
    // ranks too (one process's roof of every op once read 117%); matmuls count their FLOPs.
    let (code, out, err) = mpirun(
        4,
        &[
            "bench",
            "all",
            "-p",
            "4",
            "-b",
            "64K",
            "-e",
            "1M",
            "-f",
            "16",
            "-n",
            "3",
            "--backend",
            "cpu",
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    let header = out
        .lines()
        .find(|l| l.starts_with("collective"))
        .expect("a header");
    let at = header
        .split_whitespace()
        .position(|c| c == "%roof")
        .expect("%roof");
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("collective") && !l.is_empty())
        .collect();
    assert!(rows.len() >= 20, "{out}");
    for row in rows {
        let roof: f64 = row.split_whitespace().nth(at).unwrap().parse().unwrap();
        // (ppermute on one device a rank runs only messages: its roof is ~0.)
        assert!((0.0..=100.0).contains(&roof), "{row}\n{out}");
    }
    // The verifier stays on one process: rank 0 checks, the others wait.
    let (code, out, err) = mpirun(2, &["check", "psum", "-p", "4", "--schedules", "20"], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.matches("clean under 20 schedules").count(), 1, "{out}");
}

/// `child` once it has ended, killed (and the test failed) if it runs past `seconds`:
/// ranks must stop, not hang.
fn within(mut child: std::process::Child, seconds: u64, what: &str) -> std::process::Child {
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(seconds) {
            let _ = child.kill();
            panic!("{what} still runs after {seconds} s: a hang");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    child
}

/// `mpirun -np 1 tpusim A : -np 1 tpusim B`, ended (and the test failed) if it runs past
/// two minutes: ranks that disagree must stop, not hang.
fn mpmd(a: &[&str], b: &[&str]) -> (i32, String, String) {
    let mut c = Command::new("mpirun");
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        "1",
        tpusim(),
    ])
    .args(a)
    .args([":", "-np", "1", tpusim()])
    .args(b)
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let child = c.spawn().expect("mpirun starts");
    let what = format!("ranks started with {a:?} and {b:?}");
    let o = within(child, 120, &what).wait_with_output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn ranks_started_differently_all_exit_2_naming_the_difference() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let run = ["run", "psum", "-p", "4", "--backend", "cpu"];
    let with = |extra: &[&'static str]| [&run[..], extra].concat();
    for (b, named) in [
        (
            vec!["run", "psum", "-p", "8", "--backend", "cpu"],
            "-p/--devices is `4` on rank 0 but `8` on rank 1",
        ),
        (
            vec!["run", "all_gather", "-p", "4", "--backend", "cpu"],
            "<collective> is `psum` on rank 0 but `all_gather` on rank 1",
        ),
        (
            vec!["bench", "psum", "-p", "4", "--backend", "cpu"],
            "the command is `run` on rank 0 but `bench` on rank 1",
        ),
        (
            with(&["--op", "max"]),
            "--op is `sum` on rank 0 but `max` on rank 1",
        ),
        (
            with(&["--schedule", "lazy"]),
            "--schedule is `eager` on rank 0 but `lazy` on rank 1",
        ),
    ] {
        let (code, out, err) = mpmd(&run, &b);
        assert_eq!(code, 2, "{b:?}: {out}{err}");
        assert!(err.contains(named), "{b:?}: {err}");
        // Rank 0 says it once; no result is printed.
        assert_eq!(
            err.matches("started with different command lines").count(),
            1,
            "{err}"
        );
        assert!(!out.contains("wrong"), "{out}");
    }
    // The same arguments written differently agree.
    let (code, out, err) = mpmd(&with(&["--op=sum"]), &run);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(" 0 wrong of "), "{out}");
}

/// The files in `dir`.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect()
}

#[test]
fn ranks_on_one_host_share_memory_or_fall_back_to_messages_and_leave_no_file() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let shm = dir.path().join("shm");
    std::fs::create_dir(&shm).unwrap();
    let missing = shm.join("missing");
    let x = input(dir.path(), "psum", 8, DType::F32);
    let apply = |out: &Path| {
        [
            "apply",
            "psum",
            "-p",
            "8",
            "--backend",
            "cpu",
            "--input",
            x.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ]
        .map(String::from)
    };
    let want = dir.path().join("want.npy");
    let args = apply(&want);
    let (code, out, err) = alone(&args.each_ref().map(|s| s.as_str()), &[]);
    assert_eq!(code, 0, "{out}{err}");
    let want = std::fs::read(&want).unwrap();
    // Through shared memory made in TPUSIM_SHM_DIR; then where it cannot be made (the
    // directory is missing): messages, the same bytes.
    for (place, via) in [
        (
            &shm,
            "through shared memory between the 2 ranks of this host",
        ),
        (
            &missing,
            "through messages between the ranks of this host (cannot make",
        ),
    ] {
        let env = [("TPUSIM_SHM_DIR", place.to_str().unwrap())];
        let got = dir.path().join("got.npy");
        let args = apply(&got);
        let (code, out, err) = mpirun(2, &args.each_ref().map(|s| s.as_str()), &env);
        assert_eq!(code, 0, "{out}{err}");
        assert!(std::fs::read(&got).unwrap() == want, "{via}: differs");
        let (code, out, err) = mpirun(2, &["run", "psum", "-p", "8", "--backend", "cpu"], &env);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains(" 0 wrong of ") && out.contains(via), "{out}");
        assert_eq!(files_in(&shm), Vec::<PathBuf>::new());
    }
    // A rank killed in the middle of a run leaves nothing behind either: the segment's
    // file went once both ranks had mapped it.
    let pid = dir.path().join("pid");
    let script = format!(
        "[ \"$OMPI_COMM_WORLD_RANK\" = 1 ] && echo $$ > {}; exec {} bench psum -p 8 -b 1M -e 32M -n 2 -w 0 --backend cpu",
        pid.display(),
        tpusim()
    );
    let mut child = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
        .args(["-x", &format!("TPUSIM_SHM_DIR={}", shm.display())])
        .args(["bash", "-c", &script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("mpirun starts");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    // The first size's row: the ranks have connected and run.
    assert!(lines.any(|l| l.unwrap().starts_with("psum")));
    let rank1 = std::fs::read_to_string(&pid).unwrap();
    let killed = Command::new("kill")
        .args(["-KILL", rank1.trim()])
        .status()
        .unwrap();
    assert!(killed.success());
    let mut child = within(child, 60, "the job with rank 1 killed");
    assert!(!child.wait().unwrap().success());
    assert_eq!(files_in(&shm), Vec::<PathBuf>::new());
}

#[test]
fn ring_sums_fused_across_messages_equal_one_process_under_mpirun() {
    // psum with each operator on shards of 8,192 elements (where a rank adds a received
    // shard in place, fused across the message that brings it), every dtype, NaNs and
    // infinities (floats) and sums that wrap (integers): 2 and 3 ranks write the bytes
    // one process does.
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let p = 4;
    for dtype in DType::COLLECTIVE {
        let shape = vec![8 * p, 1024];
        let n: usize = shape.iter().product();
        let corners = match dtype.is_float() {
            true => vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 1e-3],
            false => vec![i32::MAX as f64, i32::MIN as f64, -1.0],
        };
        let words = (0..n)
            .map(|i| match i % 5 {
                0 => dtype.bits_of(corners[(i / 5) % corners.len()]),
                _ => dtype.bits_of(((i * 7919) % 97) as f64 - 40.0),
            })
            .collect();
        let x = dir.path().join(format!("x-{dtype}.npy"));
        let a = HostArray {
            dtype,
            shape,
            words,
        };
        tpusim::npy::write_npy(&x, &a).unwrap();
        for op in ["sum", "max", "min"] {
            let base = ["apply", "psum", "-p", "4", "--backend", "cpu", "--op", op];
            let base = [&base[..], &["--input", x.to_str().unwrap()]].concat();
            let want = dir.path().join(format!("want-{dtype}-{op}.npy"));
            let (code, out, err) = alone(
                &[&base[..], &["--output", want.to_str().unwrap()]].concat(),
                &[],
            );
            assert_eq!(code, 0, "{dtype} {op} alone: {out}{err}");
            let want = std::fs::read(&want).unwrap();
            for r in [2usize, 3] {
                let got = dir.path().join(format!("got-{dtype}-{op}-{r}.npy"));
                let args = [&base[..], &["--output", got.to_str().unwrap()]].concat();
                let (code, out, err) = mpirun(r, &args, &[]);
                assert_eq!(code, 0, "{dtype} {op} on {r} ranks: {out}{err}");
                assert!(
                    std::fs::read(&got).unwrap() == want,
                    "psum {op} {dtype}: {r} ranks' .npy differs from one process's"
                );
            }
        }
    }
}
