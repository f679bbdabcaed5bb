//! A kernel's trace split among threads (devices traced in lanes, then joined) is the
//! program one thread tracing device after device makes: the same ops, DMA numbers,
//! values' allocations and mistakes; and it runs to the same, exact, results.

mod common;

use common::simulate;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::kernel::{GridSpec, MemorySpace, PallasCall};
use tpusim::{DType, HostArray, Mesh};

const ROWS: usize = 8;
const COLS: usize = 128;

/// Each device sends its `x` to its right neighbour's `y` and computes `z` from `x` with
/// values of two dtypes: f32 first everywhere, or (with `mixed`) bf16 first on odd
/// devices, so that lanes meet the dtypes in different orders. With `mistakes`, devices
/// from 3 on ask for an argument the kernel does not have, and device 1 waits on a DMA
/// semaphore as if it were a regular one (mistakes of more than one lane).
fn kernel(mixed: bool, mistakes: bool) -> PallasCall {
    let spec = GridSpec::new()
        .grid(&[2])
        .input("x", MemorySpace::Any, &[ROWS, COLS], DType::F32)
        .output("y", MemorySpace::Any, &[ROWS, COLS], DType::F32)
        .output("z", MemorySpace::Vmem, &[ROWS, COLS], DType::F32)
        .vmem("v", &[ROWS, COLS], DType::F32)
        .dma_sem("send")
        .dma_sem("recv")
        .dma_sem("local");
    PallasCall::new("lanes", spec, move |pl, a| {
        let me = pl.axis_index("x");
        let right = (me + 1) % pl.num_devices();
        if mistakes && me >= 3 {
            let _ = a.r("nope");
        }
        if mistakes && me == 1 {
            pl.semaphore_wait(a.sem("local"), 1);
        }
        if pl.program_id(0) == 0 {
            let dma =
                pl.make_async_remote_copy(a.r("x"), a.r("y"), a.sem("send"), a.sem("recv"), right);
            dma.start();
            dma.wait();
            let local = pl.make_async_copy(a.r("x"), a.r("v"), a.sem("local"));
            local.start();
            local.wait();
        } else if mixed && me % 2 == 1 {
            // A bf16 value before any f32 one.
            let two = pl.full(&[ROWS, COLS], 2.0, DType::BF16);
            let x = pl.load(a.r("v"));
            let h2 = &x.astype(DType::BF16) * &two;
            let w = &x * 3.0;
            pl.store(a.r("z"), &(&h2.astype(DType::F32) + &w));
        } else {
            let x = pl.load(a.r("v"));
            let z = {
                let w = &x * 3.0;
                let h = x.astype(DType::BF16);
                let h2 = &h + &h;
                &h2.astype(DType::F32) + &w
            };
            pl.store(a.r("z"), &z);
        }
    })
}

/// The program and mistakes of `call` traced in a pool of `threads`, and how many
/// mistakes.
fn traced_in(threads: usize, call: &PallasCall, mesh: &Mesh) -> (String, usize) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    let (program, errors) = pool.install(|| call.trace(mesh)).unwrap();
    (format!("{program:?}\n{errors:?}"), errors.len())
}

fn inputs(p: usize) -> Vec<Vec<HostArray>> {
    (0..p)
        .map(|d| {
            let x: Vec<f32> = (0..ROWS * COLS)
                .map(|i| ((i * 7 + d * 13) % 64) as f32)
                .collect();
            vec![HostArray::from_f32(&[ROWS, COLS], x).unwrap()]
        })
        .collect()
}

#[test]
fn lanes_make_the_program_one_thread_makes() {
    for (mixed, mistakes) in [(false, false), (true, false), (true, true)] {
        let call = kernel(mixed, mistakes);
        for p in [1, 2, 5] {
            let mesh = Mesh::new(p, "x").unwrap();
            let one = traced_in(1, &call, &mesh);
            // Devices 1 and 3 (two lanes) make different mistakes.
            let want = match (mistakes, p) {
                (true, 5) => 2,
                (true, 2..) => 1,
                _ => 0,
            };
            assert_eq!(one.1, want, "{}", one.0);
            for threads in [2, 3, 8] {
                assert_eq!(
                    traced_in(threads, &call, &mesh),
                    one,
                    "mixed {mixed} mistakes {mistakes} P {p} threads {threads}"
                );
            }
        }
    }
}

#[test]
fn a_trace_in_lanes_runs_to_exact_results() {
    let p = 5;
    let mesh = Mesh::new(p, "x").unwrap();
    let x = inputs(p);
    for mixed in [false, true] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let out = pool
            .install(|| simulate(&kernel(mixed, false), &mesh, &x, &mut CpuExecutor::new()))
            .unwrap();
        for d in 0..p {
            let left = (d + p - 1) % p;
            assert_eq!(out[d][0].as_f32(), x[left][0].as_f32(), "y of device {d}");
            // Small integers: bf16 holds them exactly; 2h + 3x = 5x.
            let want: Vec<f32> = x[d][0].as_f32().iter().map(|v| 5.0 * v).collect();
            assert_eq!(
                out[d][1].as_f32(),
                &want[..],
                "z of device {d}, mixed {mixed}"
            );
        }
    }
}
