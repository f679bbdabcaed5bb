use std::time::Instant;
use tpusim::kernel::{GridSpec, MemorySpace, PallasCall};
use tpusim::sched::{schedule, Eager};
use tpusim::{DType, Mesh};
fn main() {
    let mut gpu = tpusim::device_sim::gpu::GpuExecutor::from_env().unwrap();
    // The cost of one op of the per-op recording.
    gpu.set_arena(tpusim::device_sim::gpu::ArenaMode::Off);
    let mesh = Mesh::new(1, "x").unwrap();
    for (name, kind) in [("copies", 0), ("accumulates", 1), ("clears", 2)] {
        let spec = GridSpec::new()
            .input("a", MemorySpace::Vmem, &[1024], DType::F32)
            .output("o", MemorySpace::Vmem, &[1024], DType::F32)
            .vmem("t", &[1024], DType::F32);
        let call = PallasCall::new("k", spec, move |pl, a| {
            for _ in 0..100 {
                match kind {
                    0 => pl.copy(a.r(2), a.r(0)),
                    1 => pl.add_assign(a.r(1), a.r(0)),
                    _ => pl.fill(a.r(2), 0.0),
                }
            }
        });
        let p = call.lower(&mesh).unwrap();
        let s = schedule(&p, &mut Eager::default()).unwrap();
        let run = gpu.prepare_run(&p, &s).unwrap();
        run.run(2).unwrap();
        let t = Instant::now();
        run.run(10).unwrap();
        println!(
            "{name}: {:.1} us per op",
            t.elapsed().as_secs_f64() / 1000.0 * 1e6
        );
    }
}
