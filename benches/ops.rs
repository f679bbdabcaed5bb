//! One op in a one-device kernel (`y_ref[...] = f(x_ref[...])`, whole-array VMEM operands)
//! on the CPU executor as it runs schedules (fused regions, dead writes dropped) and
//! one data op at a time (`CpuExecutor::unfused`, the executor before fusion), in ms
//! per iteration (the best of the timed ones) and ns per element: what the executor itself costs, without JAX
//! around it (python/bench/ops.py holds the same ops against XLA).
//!
//! `cargo bench --bench ops`; `TPUSIM_OPS_N` sets the side (default 1024, so
//! 1024 x 1024 elements), `TPUSIM_OPS_DTYPE` f32 or bf16 (default f32),
//! `TPUSIM_OPS_ITERS` the iterations timed (default 20), `TPUSIM_OPS` a comma-separated
//! subset of the ops, `TPUSIM_OPS_UNFUSED=0` skips the unfused runs,
//! `TPUSIM_OPS_EXEC=gpu` runs them on the GPU executor instead (fused: a region one
//! dispatch of its generated shader; unfused: a dispatch per op).

use std::time::Instant;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::device_sim::gpu::GpuExecutor;
use tpusim::device_sim::Executor;
use tpusim::kernel::{Ctx, GridSpec, MemorySpace, PallasCall, Value};
use tpusim::run::Job;
use tpusim::{DType, HostArray, Mesh};

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

type Op = for<'c> fn(&'c Ctx, &Value<'c>) -> Value<'c>;

/// The ops: their names and bodies.
fn ops() -> Vec<(&'static str, Op)> {
    vec![
        ("x*2+1", |_, x| &(x * 2.0) + 1.0),
        ("exp", |pl, x| pl.exp(x)),
        ("tanh", |pl, x| pl.tanh(x)),
        ("logistic", |pl, x| pl.logistic(x)),
        ("erf", |pl, x| pl.erf(x)),
        ("log(|x|+1)", |pl, x| pl.log(&(&pl.abs(x) + 1.0))),
        ("gelu", |pl, x| {
            // jax.nn.gelu(approximate=True), as JAX writes it.
            let cube = &(&(x * x) * x) * 0.044715;
            let inner = &(x + &cube) * 0.797_884_560_802_865_4;
            let t = pl.tanh(&inner);
            &(&(&t + 1.0) * x) * 0.5
        }),
        ("softmax", |pl, x| {
            let shape = x.shape().to_vec();
            let m = x.max(&[1]).broadcast_in_dim(&shape, &[0]);
            let e = pl.exp(&(x - &m));
            let s = e.sum(&[1]).broadcast_in_dim(&shape, &[0]);
            &e / &s
        }),
        ("sum_rows", |_, x| {
            let shape = x.shape().to_vec();
            x.sum(&[1]).broadcast_in_dim(&shape, &[0])
        }),
        ("max_rows", |_, x| {
            let shape = x.shape().to_vec();
            x.max(&[1]).broadcast_in_dim(&shape, &[0])
        }),
        ("transpose", |_, x| x.transpose(&[1, 0])),
        ("dot", |pl, x| pl.dot(x, x).astype(x.dtype())),
    ]
}

fn seconds(exec: &dyn Executor, call: PallasCall, x: &HostArray, iters: usize) -> f64 {
    let plan = Job::call(call, Mesh::new(1, "x").unwrap()).plan().unwrap();
    let mut run = exec.prepare(&plan.program, &plan.schedule).unwrap();
    run.upload(&[vec![x.clone()]]).unwrap();
    run.run(2).unwrap();
    // The best single iteration: the machine's other work only ever adds time.
    (0..iters)
        .map(|_| {
            let t = Instant::now();
            run.run(1).unwrap();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let n: usize = env("TPUSIM_OPS_N", "1024").parse().expect("a size");
    let dtype = DType::parse(&env("TPUSIM_OPS_DTYPE", "f32")).expect("a dtype");
    let iters: usize = env("TPUSIM_OPS_ITERS", "20").parse().expect("a count");
    let only = env("TPUSIM_OPS", "");
    let vals: Vec<f64> = (0..n * n)
        .map(|i| ((i * 7919) % 2001) as f64 / 500.0 - 2.0)
        .collect();
    let x = HostArray::from_values(dtype, &[n, n], &vals).unwrap();
    let mut gpu = match env("TPUSIM_OPS_EXEC", "cpu").as_str() {
        "gpu" => Some(GpuExecutor::from_env().expect("a GPU adapter")),
        _ => None,
    };
    println!(
        "{n}x{n} {dtype}, best of {iters} iterations, {}: fused / unfused, ms per iteration (ns per element)",
        match &gpu {
            Some(g) => format!("GPU {}", g.describe()),
            None => format!("CPU, {} threads", rayon::current_num_threads()),
        }
    );
    for (name, f) in ops() {
        if !only.is_empty() && !only.split(',').any(|o| o == name) {
            continue;
        }
        let call = || {
            let spec = GridSpec::new()
                .input("x", MemorySpace::Vmem, &[n, n], dtype)
                .output("y", MemorySpace::Vmem, &[n, n], dtype);
            PallasCall::new(name, spec, move |pl, a| {
                let x = pl.load(a.r("x"));
                pl.store(a.r("y"), &f(pl, &x));
            })
        };
        let unfused = env("TPUSIM_OPS_UNFUSED", "1") != "0";
        let (fused, plain) = match gpu.as_mut() {
            Some(g) => {
                g.set_fusion(true);
                let fused = seconds(g, call(), &x, iters);
                g.set_fusion(false);
                let plain = unfused.then(|| seconds(g, call(), &x, iters));
                (fused, plain.unwrap_or(f64::NAN))
            }
            None => {
                let fused = seconds(&CpuExecutor::new(), call(), &x, iters);
                let plain = unfused.then(|| seconds(&CpuExecutor::unfused(), call(), &x, iters));
                (fused, plain.unwrap_or(f64::NAN))
            }
        };
        let per = |s: f64| s * 1e9 / (n * n) as f64;
        println!(
            "{name:10} {:9.3} ({:6.2}) / {:9.3} ({:6.2})  {:5.1}x",
            fused * 1e3,
            per(fused),
            plain * 1e3,
            per(plain),
            plain / fused
        );
    }
}
