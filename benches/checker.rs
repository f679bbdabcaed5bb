//! The verifier's own speed: schedules checked per second (race checker on) for psum
//! at P = 8 and P = 32, over the default `check` schedule set, and one schedule of psum
//! at P = 256 (where the cost per schedule grows with P).
//! Run with `cargo bench --bench checker`.

use std::time::Instant;
use tpusim::collectives;
use tpusim::sched::ScheduleSpec;
use tpusim::verify::check_program;
use tpusim::{DType, Mesh};

fn main() {
    println!(
        "{:<20} {:>4} {:>10} {:>10} {:>12} {:>14}",
        "collective", "P", "schedules", "ops", "seconds", "schedules/s"
    );
    for (name, p, n) in [
        ("psum", 8usize, 200usize),
        ("psum", 32, 50),
        ("psum_scatter", 8, 200),
        ("ring_allreduce_push", 32, 50),
        ("psum", 256, 1),
    ] {
        let mesh = Mesh::new(p, "x").expect("mesh");
        let c = collectives::Registry::builtin()
            .by_name(name)
            .expect("collective");
        let program = c
            .call(
                &mesh,
                &collectives::Registry::builtin()
                    .by_name(name)
                    .unwrap()
                    .default_shape(p),
                DType::F32,
            )
            .and_then(|call| call.lower(&mesh))
            .expect("lower");
        // `check_set` has at least P + 3 schedules; one schedule is `--replay eager`.
        let specs = match n {
            1 => vec![ScheduleSpec::Eager],
            _ => ScheduleSpec::check_set(p, n, 0),
        };
        let t = Instant::now();
        let report = check_program(&program, &specs);
        let s = t.elapsed().as_secs_f64();
        assert!(report.is_clean(), "{name} P={p} is not clean");
        println!(
            "{:<20} {:>4} {:>10} {:>10} {:>12.3} {:>14.1}",
            name,
            p,
            n,
            program.op_count(),
            s,
            n as f64 / s
        );
    }
}
