//! A new kernel written with the public API: a left shift (each device pushes its
//! shard to its left neighbour), run on the GPU and checked against `lax.ppermute`.
//!
//! `cargo run --release --example left_shift`

use tpusim::collectives::reference;
use tpusim::device_sim::gpu::GpuExecutor;
use tpusim::kernel::{Ctx, GridSpec, MemorySpace, PallasCall, Ref, Sem};
use tpusim::run::{random_inputs, Job};
use tpusim::{DType, Mesh};

fn left_shift_kernel(pl: &Ctx, x_ref: Ref, y_ref: Ref, send_sem: Sem, recv_sem: Sem) {
    let num_devices = pl.num_devices();
    let my_id = pl.axis_index("x");
    // `+ num_devices` keeps the dividend non-negative: `(my_id - 1) % n` is -1 on device 0.
    let target = (my_id - 1 + num_devices) % num_devices;

    let dma = pl.make_async_remote_copy(x_ref, y_ref, send_sem, recv_sem, target);
    dma.start();
    dma.wait();
}

fn main() -> tpusim::Result<()> {
    let p = 8;
    let mesh = Mesh::new(p, "x")?;
    let spec = GridSpec::new()
        .input("x_ref", MemorySpace::Any, &[8, 128], DType::F32)
        .output("y_ref", MemorySpace::Any, &[8, 128], DType::F32)
        .dma_sem("send_sem")
        .dma_sem("recv_sem");
    let call = PallasCall::new("left_shift", spec, |pl, a| {
        left_shift_kernel(
            pl,
            a.r("x_ref"),
            a.r("y_ref"),
            a.sem("send_sem"),
            a.sem("recv_sem"),
        )
    });

    let inputs = random_inputs(&call.lower(&mesh)?, 0)?;
    let mut gpu = GpuExecutor::from_env()?;
    let out = Job::call(call, mesh).execute(&mut gpu, &inputs)?;

    let perm: Vec<_> = (0..p).map(|i| (i, (i + p - 1) % p)).collect();
    let want = reference::ppermute(&inputs, &perm);
    let wrong: usize = out
        .iter()
        .zip(&want)
        .map(|(o, w)| o[0].count_mismatches(&w[0], 0.0))
        .sum();
    println!(
        "left_shift on {} devices ({}): {wrong} wrong",
        p,
        tpusim::device_sim::Executor::describe(&gpu)
    );
    if wrong != 0 {
        std::process::exit(1);
    }
    Ok(())
}
