//! The verifier's own speed: schedules checked per second (race checker on) for psum
//! at P = 8 and P = 32, over the default `check` schedule set, and one schedule of psum
//! at P = 256 (where the cost per schedule grows with P); then a blocked pipeline over a
//! 1024 x 1024 array (128 x 128 blocks copied in, summed, copied out, as `emit_pipeline`
//! does) with a DMA per block (a strided window) and with a DMA per row of each block.
//! Run with `cargo bench --bench checker`.

use std::time::Instant;
use tpusim::collectives;
use tpusim::ir::Program;
use tpusim::kernel::{ds, GridSpec, MemorySpace, PallasCall};
use tpusim::sched::ScheduleSpec;
use tpusim::verify::check_program;
use tpusim::{DType, Mesh};

const N: usize = 1024;
const B: usize = 128;

/// Sums the 128 x 128 blocks of each 128-row band of `x` into the band's block of `o`:
/// every block comes in by DMA (`per_row`: a DMA per row) into VMEM, is accumulated,
/// and the sum goes out by DMA.
fn blocked(per_row: bool) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Any, &[N, N], DType::F32)
        .output("o", MemorySpace::Any, &[N, B], DType::F32)
        .vmem("buf", &[B, B], DType::F32)
        .vmem("acc", &[B, B], DType::F32)
        .dma_sem("sem");
    PallasCall::new("blocked", spec, move |pl, a| {
        let (x, o, buf, acc, sem) = (a.r(0), a.r(1), a.r(2), a.r(3), a.sem(4));
        let b = B as i64;
        let dma = |src: tpusim::kernel::Ref, dst: tpusim::kernel::Ref| {
            let rows = if per_row { B } else { 1 };
            let n = b / rows as i64;
            let copies: Vec<_> = (0..rows as i64)
                .map(|r| pl.make_async_copy(src.slice(ds(r * n, n)), dst.slice(ds(r * n, n)), sem))
                .collect();
            copies.iter().for_each(|c| c.start());
            copies.iter().for_each(|c| c.wait());
        };
        for band in 0..(N / B) as i64 {
            pl.fill(acc, 0.0);
            for col in 0..(N / B) as i64 {
                dma(x.slice(ds(band * b, b)).cols(ds(col * b, b)), buf);
                pl.add_assign(acc, buf);
            }
            dma(acc, o.slice(ds(band * b, b)));
        }
    })
}

fn check(name: &str, p: usize, n: usize, program: &Program) {
    // `check_set` has at least P + 3 schedules; one schedule is `--replay eager`.
    let specs = match n {
        1 => vec![ScheduleSpec::Eager],
        _ => ScheduleSpec::check_set(p, n, 0),
    };
    let t = Instant::now();
    let report = check_program(program, &specs);
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
        check(name, p, n, &program);
    }
    let mesh = Mesh::new(4, "x").expect("mesh");
    for (name, per_row) in [("blocked, DMA/block", false), ("blocked, DMA/row", true)] {
        let program = blocked(per_row).lower(&mesh).expect("lower");
        check(name, 4, 20, &program);
    }
}
