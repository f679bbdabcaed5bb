//! Scheduler cost: lowering + scheduling throughput (traced ops per second) for the
//! collectives at growing P. Run with `cargo bench --bench scheduler`.

use std::time::Instant;
use tpusim::collectives;
use tpusim::sched::{schedule, Eager};
use tpusim::{DType, Mesh};

fn main() {
    println!(
        "{:<12} {:>5} {:>10} {:>10} {:>10} {:>14}",
        "collective", "P", "ops", "lower_ms", "sched_ms", "ops_per_s"
    );
    for c in collectives::Registry::builtin().iter() {
        for p in [4usize, 16, 64, 256] {
            let mesh = Mesh::new(p, "x").expect("mesh");
            let call = c
                .call(&mesh, &c.default_shape(p), DType::F32)
                .expect("call");
            let t0 = Instant::now();
            let program = call.lower(&mesh).expect("lower");
            let t1 = Instant::now();
            let s = schedule(&program, &mut Eager::default()).expect("schedule");
            let t2 = Instant::now();
            let ops = program.op_count();
            let sched_s = (t2 - t1).as_secs_f64();
            println!(
                "{:<12} {:>5} {:>10} {:>10.2} {:>10.2} {:>14.0}",
                c.name(),
                p,
                ops,
                (t1 - t0).as_secs_f64() * 1e3,
                sched_s * 1e3,
                s.steps as f64 / sched_s.max(1e-9)
            );
        }
    }
}
