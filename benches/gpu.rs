//! GPU throughput: per collective, time per iteration with the schedule built once, the
//! small-size latency with and without accumulate batching, and (with
//! `TPUSIM_BENCH_LARGE=1`) the 256 MiB per device runs against plain copy bandwidth.
//! Run with `cargo bench --bench gpu` (on the adapter `WGPU_BACKEND` selects).

use std::time::Instant;
use tpusim::bench::{header, line, sweep, BenchConfig};
use tpusim::collectives;
use tpusim::device_sim::gpu::{ArenaMode, GpuExecutor, Lowering};
use tpusim::device_sim::Executor;
use tpusim::mesh::Placement;
use tpusim::run::{random_inputs, Job};
use tpusim::sched::{schedule, Eager};
use tpusim::{DType, Mesh};

/// Per-iteration seconds of collective `name` at `shape`, P = 4: amortized over `iters`
/// in one submission, and end to end (one submission and wait per iteration).
fn small(gpu: &GpuExecutor, name: &str, shape: &[usize], iters: usize) -> (f64, f64, usize) {
    let mesh = Mesh::new(4, "x").expect("mesh");
    let c = collectives::Registry::builtin()
        .by_name(name)
        .expect("collective");
    let program = c
        .call(&mesh, shape, DType::F32)
        .and_then(|k| k.lower(&mesh))
        .expect("lower");
    let sched = schedule(&program, &mut Eager::default()).expect("schedule");
    let run = gpu.prepare_run(&program, &sched).expect("prepare");
    run.upload(&random_inputs(&program, 1).unwrap())
        .expect("upload");
    run.run(5).expect("warm up");
    let batched = run.run(iters).expect("run").as_secs_f64() / iters as f64;
    let t = Instant::now();
    for _ in 0..iters {
        run.run(1).expect("run");
    }
    (
        batched,
        t.elapsed().as_secs_f64() / iters as f64,
        run.dispatches(),
    )
}

fn main() {
    let mut gpu = GpuExecutor::from_env().expect("a GPU adapter");
    println!("# adapter: {}", gpu.describe());

    println!(
        "\n## P=4, 4 KiB per device (8x128 f32), schedule reused, accumulate batching off / on"
    );
    println!(
        "{:<20} {:<9} {:>10} {:>18} {:>19}",
        "collective", "batching", "dispatches", "amortized ms/iter", "end-to-end ms/iter"
    );
    // Batching is a per-op matter.
    gpu.set_arena(ArenaMode::Off);
    for name in [
        "psum",
        "psum_scatter",
        "ring_allreduce",
        "ring_allreduce_push",
    ] {
        for on in [false, true] {
            gpu.set_batching(on);
            let (amortized, e2e, dispatches) = small(&gpu, name, &[8, 128], 30);
            println!(
                "{:<20} {:<9} {:>10} {:>18.3} {:>19.3}",
                name,
                if on { "on" } else { "off" },
                dispatches,
                amortized * 1e3,
                e2e * 1e3
            );
        }
    }
    gpu.set_batching(true);

    println!(
        "\n## the schedule as one GPU program (arena, a dispatch per level) vs per op, ms/iter"
    );
    println!(
        "{:<20} {:>5} {:>10} {:>10} {:>10} {:>10}",
        "collective", "P", "shard", "per-op", "program", "dispatches"
    );
    for (name, p, rows) in [
        ("psum", 4usize, 8usize),
        ("psum", 8, 8),
        ("psum", 64, 8),
        ("psum", 4, 2048),
        ("ring_allreduce_push", 8, 8),
        ("ring_allreduce_push", 64, 64),
        ("ring_allreduce_push", 4, 2048),
    ] {
        let mesh = Mesh::new(p, "x").expect("mesh");
        let c = collectives::Registry::builtin()
            .by_name(name)
            .expect("collective");
        let program = c
            .call(&mesh, &[rows, 128], DType::F32)
            .and_then(|k| k.lower(&mesh))
            .expect("lower");
        let sched = schedule(&program, &mut Eager::default()).expect("schedule");
        let inputs = random_inputs(&program, 1).unwrap();
        let mut time = |mode: ArenaMode| {
            gpu.set_arena(mode);
            let run = gpu.prepare_run(&program, &sched).expect("prepare");
            run.upload(&inputs).expect("upload");
            run.run(2).expect("warm up");
            let ms = run.run(10).expect("run").as_secs_f64() / 10.0 * 1e3;
            (
                ms,
                (run.lowering() == Lowering::Arena).then_some(run.dispatches()),
            )
        };
        let ((per_op, _), (prog, program_dispatches)) =
            (time(ArenaMode::Off), time(ArenaMode::UpTo(u64::MAX)));
        let dispatches = program_dispatches.unwrap_or(0);
        println!(
            "{:<20} {:>5} {:>10} {:>10.3} {:>10.3} {:>10}",
            name,
            p,
            format!("{rows}x128"),
            per_op,
            prog,
            dispatches
        );
    }
    gpu.set_arena(ArenaMode::Auto);

    println!("\n## every collective, P=4, 4 KiB .. 4 MiB");
    let cfg = BenchConfig {
        devices: 4,
        min_bytes: 4 << 10,
        max_bytes: 4 << 20,
        factor: 32,
        iters: 5,
        warmup: 1,
        checks: 1,
        dtype: DType::F32,
        schedule: tpusim::sched::ScheduleSpec::Eager,
    };
    println!("{}", header());
    for c in collectives::Registry::builtin().iter() {
        for row in sweep(
            &Job::collective(
                c.clone(),
                Placement::whole(tpusim::Mesh::new(4, "x").unwrap()),
            ),
            &cfg,
            &gpu,
            &mut |_: tpusim::bench::Progress| {},
        )
        .expect("sweep")
        {
            println!("{}", line(&row));
        }
    }

    if std::env::var("TPUSIM_BENCH_LARGE").is_ok_and(|v| v == "1") {
        println!("\n## 256 MiB per device, P=4");
        let big = BenchConfig {
            min_bytes: 256 << 20,
            max_bytes: 256 << 20,
            factor: 2,
            iters: 2,
            warmup: 1,
            checks: 1,
            ..cfg
        };
        println!("{}", header());
        for name in ["psum", "ring_allreduce_push"] {
            let c = collectives::Registry::builtin()
                .by_name(name)
                .expect("collective");
            for row in sweep(
                &Job::collective(c, Placement::whole(tpusim::Mesh::new(4, "x").unwrap())),
                &big,
                &gpu,
                &mut |_: tpusim::bench::Progress| {},
            )
            .expect("sweep")
            {
                println!("{}", line(&row));
            }
            gpu.pool().clear();
        }
    }
}
