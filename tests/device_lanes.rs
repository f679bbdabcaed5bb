//! Devices' steps run side by side on the cores (`device_sim::cpu::device_lanes`) give
//! the bits that running them one after another gives: every shipped collective, and a
//! ring of double-buffered remote copies with compute on the other buffer (ring
//! attention's shape), in thread pools of 2 to 4, lanes forced on however small the run,
//! against the same executor with lanes off and against the one-op-at-a-time oracle.
//! (That the lanes order every pair of steps touching one element is
//! `device_lanes::tests`: a property of the plan, not of a run's timing.)

mod common;

use common::run_checked;
use tpusim::collectives::Registry;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::device_sim::Executor;
use tpusim::kernel::{GridSpec, MemorySpace, PallasCall};
use tpusim::run::{random_inputs, Job};
use tpusim::{DType, HostArray, Mesh};

/// `f` on a rayon pool of `threads` (the lanes are as many as its threads).
fn in_pool<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(f)
}

/// `job` run on `inputs` by `exec`, its outputs' words.
fn outputs(job: &Job, exec: &mut CpuExecutor, inputs: &[Vec<HostArray>]) -> Vec<Vec<Vec<u32>>> {
    let out = job.execute(exec, inputs).unwrap();
    out.into_iter()
        .map(|d| d.into_iter().map(|a| a.words).collect())
        .collect()
}

#[test]
fn every_collective_gives_the_same_bits_in_lanes() {
    let mut ran = 0;
    for c in Registry::builtin().iter() {
        for devices in [2, 3, 4, 5, 8] {
            let mesh = Mesh::new(devices, "x").unwrap();
            for threads in [2, 3] {
                let got = in_pool(threads, || {
                    let mut on = CpuExecutor::new().device_lanes(Some(true));
                    run_checked(c, &mesh, &[16, 256], DType::F32, &mut on, 7)
                });
                // Collectives that need other shapes or meshes are not this test's matter.
                let Ok(got) = got else { continue };
                assert_eq!(got.wrong, 0, "{} on {devices}, {threads} threads", c.name());
                ran += 1;
            }
            let job = common::job(
                c,
                &mesh,
                &[16, 256],
                DType::F32,
                tpusim::sched::ScheduleSpec::Eager,
            );
            let Ok(plan) = job.plan() else { continue };
            let inputs = random_inputs(&plan.program, 3).unwrap();
            let off = outputs(
                &job,
                &mut CpuExecutor::new().device_lanes(Some(false)),
                &inputs,
            );
            for threads in [2, 4] {
                let on = in_pool(threads, || {
                    outputs(
                        &job,
                        &mut CpuExecutor::new().device_lanes(Some(true)),
                        &inputs,
                    )
                });
                assert!(on == off, "{} on {devices}, {threads} threads", c.name());
            }
        }
    }
    assert!(ran >= 40, "{ran} runs");
}

/// A ring of `steps` steps: each device sends the block it holds to the right (into the
/// other half of a double buffer) while it folds the one it holds into a running sum
/// and maximum (compute on one half, a remote copy landing in the other), then waits.
fn ring(steps: usize, rows: usize) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[rows, 128], DType::F32)
        .output("y", MemorySpace::Vmem, &[rows, 128], DType::F32)
        .vmem("buf", &[2, rows, 128], DType::F32)
        .vmem("m", &[rows, 128], DType::F32)
        .dma_sem("send")
        .dma_sem("recv")
        .regular_sem("ready");
    PallasCall::new("ring", spec, move |pl, a| {
        let me = pl.axis_index("x");
        let p = pl.num_devices();
        let (left, right) = ((me + p - 1) % p, (me + 1) % p);
        pl.store(a.r("buf").at(0), &pl.load(a.r("x")));
        pl.fill(a.r("y"), 0.0);
        pl.fill(a.r("m"), -1e30);
        for s in 0..steps {
            let (cur, next) = ((s % 2) as i64, ((s + 1) % 2) as i64);
            // The right neighbour's `next` half is free once it has folded it.
            pl.semaphore_signal(a.sem("ready"), 1, left);
            pl.semaphore_wait(a.sem("ready"), 1);
            let dma = pl.make_async_remote_copy(
                a.r("buf").at(cur),
                a.r("buf").at(next),
                a.sem("send"),
                a.sem("recv"),
                right,
            );
            dma.start();
            let b = pl.load(a.r("buf").at(cur));
            let y = pl.load(a.r("y"));
            let scaled = &pl.tanh(&(&b * 0.5)) * ((s + 1) as f64);
            pl.store(a.r("y"), &(&y + &scaled));
            pl.store(a.r("m"), &pl.maximum(&pl.load(a.r("m")), &b));
            dma.wait();
        }
        let y = pl.load(a.r("y"));
        pl.store(a.r("y"), &(&y + &pl.load(a.r("m"))));
    })
}

#[test]
fn a_ring_computing_beside_its_copies_gives_the_same_bits_in_lanes() {
    for devices in [2, 3, 4, 8] {
        let job = Job::call(ring(2 * devices + 1, 24), Mesh::new(devices, "x").unwrap());
        let plan = job.plan().unwrap();
        let inputs = random_inputs(&plan.program, 11).unwrap();
        let oracle = outputs(&job, &mut CpuExecutor::unfused(), &inputs);
        let off = outputs(
            &job,
            &mut CpuExecutor::new().device_lanes(Some(false)),
            &inputs,
        );
        assert!(off == oracle, "fused on {devices}");
        for threads in [2, 3, 4] {
            for _ in 0..3 {
                let on = in_pool(threads, || {
                    outputs(
                        &job,
                        &mut CpuExecutor::new().device_lanes(Some(true)),
                        &inputs,
                    )
                });
                assert!(on == oracle, "{devices} devices, {threads} threads");
            }
        }
    }
}

#[test]
fn a_run_in_lanes_repeats_and_its_buffers_are_read_after() {
    // Many iterations of one prepared run: every iteration's lanes start from the last's
    // memory, as one after another would.
    let job = Job::call(ring(5, 8), Mesh::new(4, "x").unwrap());
    let plan = job.plan().unwrap();
    let inputs = random_inputs(&plan.program, 5).unwrap();
    let run_n = |exec: CpuExecutor, n: usize| {
        let mut run = exec.prepare(&plan.program, &plan.schedule).unwrap();
        run.upload(&inputs).unwrap();
        run.run(n).unwrap();
        run.read_outputs().unwrap()
    };
    let off = run_n(CpuExecutor::new().device_lanes(Some(false)), 7);
    let on = in_pool(2, || run_n(CpuExecutor::new().device_lanes(Some(true)), 7));
    assert!(on == off);
}

#[test]
fn lanes_are_used_where_devices_have_small_steps_to_run_at_once() {
    in_pool(2, || {
        let exec = CpuExecutor::new();
        // Each device computes blocks of its own, then sends: lanes.
        let job = Job::call(local_then_send(32, 256), Mesh::new(4, "x").unwrap());
        let plan = job.plan().unwrap();
        assert_eq!(exec.side_by_side(&plan.program, &plan.schedule), 2);
        // psum's ring: each step waits for the last device's, nothing to run at once.
        let c = Registry::builtin().by_name("psum").unwrap();
        let mesh = Mesh::new(4, "x").unwrap();
        let eager = tpusim::sched::ScheduleSpec::Eager;
        let job = common::job(&c, &mesh, &[64, 1024], DType::F32, eager);
        let plan = job.plan().unwrap();
        assert_eq!(exec.side_by_side(&plan.program, &plan.schedule), 1);
        // Off, whatever the kernel.
        let off = CpuExecutor::new().device_lanes(Some(false));
        let plan = Job::call(ring(16, 256), Mesh::new(4, "x").unwrap())
            .plan()
            .unwrap();
        assert_eq!(off.side_by_side(&plan.program, &plan.schedule), 1);
    });
}

/// Each device computes `rounds` blocks of `rows` rows from its input, a row reduction
/// and a product apiece (steps of their own), then sends the last to the right.
fn local_then_send(rounds: usize, rows: usize) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[rows, 128], DType::F32)
        .output("y", MemorySpace::Vmem, &[rows, 128], DType::F32)
        .vmem("s", &[rounds, rows, 128], DType::F32)
        .vmem("w", &[128, 128], DType::F32)
        .dma_sem("send")
        .dma_sem("recv");
    PallasCall::new("local_then_send", spec, move |pl, a| {
        let me = pl.axis_index("x");
        let right = (me + 1) % pl.num_devices();
        let x = pl.load(a.r("x"));
        pl.store(
            a.r("w"),
            &pl.load(a.r("x")).slice(&[0, 0], &[128, 128], &[1, 1]),
        );
        let w = pl.load(a.r("w"));
        for r in 0..rounds {
            let t = pl.tanh(&(&x * ((r as f64 + 1.0) / rounds as f64)));
            let m = t.max(&[1]).broadcast_in_dim(&[rows, 128], &[0]);
            let d = pl.dot(&(&t - &m), &w);
            pl.store(a.r("s").at(r as i64), &d);
        }
        let dma = pl.make_async_remote_copy(
            a.r("s").at(rounds as i64 - 1),
            a.r("y"),
            a.sem("send"),
            a.sem("recv"),
            right,
        );
        dma.start();
        dma.wait();
    })
}
