//! A 1024 x 1024 x 1024 f32 matmul (`c = a @ b`, one kernel on one device) on the CPU
//! executor, the GPU executor and numpy on the same machine, in GFLOP/s (2·M·N·K
//! flops). `cargo bench --bench matmul`; `TPUSIM_MATMUL_N` sets the size,
//! `TPUSIM_MATMUL_ITERS` the iterations timed (default 5), `TPUSIM_PYTHON` the Python
//! with numpy (default `python/.venv/bin/python`, then `python3`).
//!
//! Each executor runs the kernel prepared once (schedule, buffers, the GPU command
//! list), inputs uploaded, one warm-up iteration, then the timed iterations in one
//! `run` (the GPU: one submission), so the time is the product plus the kernel's
//! loads and store (8 MiB of copies next to 2 GFLOP). The CPU twin's `matmul_f32`
//! (gemm) is also timed alone, and numpy's `a @ b` on float32 arrays with the best of
//! the same number of calls (`time.perf_counter` around each).

use std::time::Instant;
use tpusim::device_sim::cpu::{compute::matmul_f32, CpuExecutor};
use tpusim::device_sim::gpu::GpuExecutor;
use tpusim::device_sim::Executor;
use tpusim::kernel::{GridSpec, MemorySpace, PallasCall};
use tpusim::run::Job;
use tpusim::{DType, HostArray, Mesh};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn gflops(n: usize, seconds: f64) -> f64 {
    2.0 * (n as f64).powi(3) / seconds / 1e9
}

/// Seconds per iteration of the matmul kernel on `exec` (best of `iters` single runs
/// would hide nothing here: the iterations run back to back in one call).
fn executor_seconds(exec: &mut dyn Executor, n: usize, iters: usize) -> tpusim::Result<f64> {
    let spec = GridSpec::new()
        .input("a", MemorySpace::Vmem, &[n, n], DType::F32)
        .input("b", MemorySpace::Vmem, &[n, n], DType::F32)
        .output("c", MemorySpace::Vmem, &[n, n], DType::F32);
    let call = PallasCall::new("matmul", spec, |pl, a| {
        let c = pl.dot(&pl.load(a.r("a")), &pl.load(a.r("b")));
        pl.store(a.r("c"), &c);
    });
    let mesh = Mesh::new(1, "x")?;
    let plan = Job::call(call, mesh).plan()?;
    let (program, schedule) = (&plan.program, &plan.schedule);
    let data = |seed: usize| {
        let v: Vec<f32> = (0..n * n)
            .map(|i| ((i * 7 + seed * 13) % 17) as f32 / 8.0 - 1.0)
            .collect();
        HostArray::from_f32(&[n, n], v)
    };
    let inputs = vec![vec![data(1)?, data(2)?]];
    let mut run = exec.prepare(program, schedule)?;
    run.upload(&inputs)?;
    run.run(1)?;
    let t = run.run(iters)?;
    let out = run.read_outputs()?;
    assert_eq!(out[0][0].shape, [n, n]);
    Ok(t.as_secs_f64() / iters as f64)
}

/// numpy's GFLOP/s for an n x n x n float32 matmul (best of `iters`), its version
/// and BLAS thread count as it reports them, or why it could not run.
fn numpy(n: usize, iters: usize) -> Result<(f64, String), String> {
    let script = format!(
        "import numpy as np, time, os\n\
         a = np.random.default_rng(1).random(({n}, {n}), dtype=np.float32)\n\
         b = np.random.default_rng(2).random(({n}, {n}), dtype=np.float32)\n\
         a @ b\n\
         best = 1e9\n\
         for _ in range({iters}):\n\
         \x20   t = time.perf_counter(); c = a @ b; best = min(best, time.perf_counter() - t)\n\
         print(best, np.__version__, os.cpu_count())\n"
    );
    let default = concat!(env!("CARGO_MANIFEST_DIR"), "/python/.venv/bin/python");
    let candidates: Vec<String> = match std::env::var("TPUSIM_PYTHON") {
        Ok(p) => vec![p],
        Err(_) => vec![default.into(), "python3".into()],
    };
    let mut why = String::new();
    for py in candidates {
        match std::process::Command::new(&py)
            .arg("-c")
            .arg(&script)
            .output()
        {
            Ok(o) if o.status.success() => {
                let s = String::from_utf8_lossy(&o.stdout);
                let mut it = s.split_whitespace();
                let secs: f64 = it.next().and_then(|v| v.parse().ok()).ok_or("no time")?;
                let version = it.next().unwrap_or("?");
                let cpus = it.next().unwrap_or("?");
                return Ok((
                    gflops(n, secs),
                    format!("{py} -c, numpy {version}, {cpus} CPUs, best of {iters}"),
                ));
            }
            Ok(o) => why = format!("{py}: {}", String::from_utf8_lossy(&o.stderr).trim()),
            Err(e) => why = format!("{py}: {e}"),
        }
    }
    Err(why)
}

fn main() {
    let n = env("TPUSIM_MATMUL_N", 1024);
    let iters = env("TPUSIM_MATMUL_ITERS", 5).max(1);
    println!(
        "f32 matmul {n} x {n} x {n} ({:.2} GFLOP per product)",
        gflops(n, 1.0)
    );
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());

    let a: Vec<f32> = (0..n * n).map(|i| (i % 13) as f32 / 4.0).collect();
    let b: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 / 2.0).collect();
    let mut c = vec![0.0f32; n * n];
    matmul_f32(&a, &b, &mut c, n, n, n);
    let t = Instant::now();
    for _ in 0..iters {
        matmul_f32(&a, &b, &mut c, n, n, n);
    }
    let gemm = gflops(n, t.elapsed().as_secs_f64() / iters as f64);
    println!(
        "{:<34} {gemm:>8.1} GFLOP/s  (gemm crate, {threads} threads, mean of {iters})",
        "cpu twin matmul_f32"
    );

    let cpu = executor_seconds(&mut CpuExecutor::new(), n, iters).expect("cpu run");
    println!(
        "{:<34} {:>8.1} GFLOP/s  (mean of {iters} iterations in one run)",
        "cpu executor",
        gflops(n, cpu)
    );

    match GpuExecutor::from_env() {
        Ok(mut g) => {
            let adapter = g.describe();
            match executor_seconds(&mut g, n, iters) {
                Ok(s) => println!(
                    "{:<34} {:>8.1} GFLOP/s  ({adapter}; mean of {iters} iterations in one submission)",
                    "gpu executor",
                    gflops(n, s)
                ),
                Err(e) => println!("{:<34} failed: {e}", "gpu executor"),
            }
        }
        Err(e) => println!("{:<34} no adapter: {e}", "gpu executor"),
    }

    match numpy(n, iters) {
        Ok((g, how)) => {
            println!("{:<34} {g:>8.1} GFLOP/s  ({how})", "numpy a @ b");
            println!(
                "cpu executor / numpy: {:.2}; cpu twin / numpy: {:.2}",
                gflops(n, cpu) / g,
                gemm / g
            );
        }
        Err(e) => println!("{:<34} not measured: {e}", "numpy a @ b"),
    }
}
