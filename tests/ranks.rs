//! Partitioned execution without MPI: the ranks as threads of this process
//! (`device_sim::ranks::threads`), each with its own executor holding its devices' memory. Every
//! shipped collective, at P 4 and 8 and any R from 1 to P, gives the single-process
//! outputs bit for bit (CPU; the GPU on a few), and a failing rank ends the others
//! instead of hanging them. Ranks on one pretend host exchange through shared memory
//! (as MPI ranks on one machine do), those on others by messages, and both give the
//! same bytes; so do rings far smaller than the messages, and a host whose shared
//! memory cannot be made. Ring sums whose copy and sum a message separates fuse across
//! it and give the same bytes, and a buffer a message reads keeps its write.
//! `tests/mpi.rs` runs the same through `mpirun`.

mod common;

use std::sync::Arc;
use tpusim::collectives::{Options, Registry};
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::device_sim::fuse::{fuse_with, Joins, Keep, Step};
use tpusim::device_sim::gpu::GpuExecutor;
use tpusim::device_sim::ranks::plan::RankPlan;
use tpusim::device_sim::ranks::{threads, Partition, RankExecutor, Ranks};
use tpusim::device_sim::{Executor, Prepared};
use tpusim::ir::{DataOp, Program, ReduceOp, Schedule};
use tpusim::kernel::{GridSpec, MemorySpace, PallasCall};
use tpusim::mesh::Placement;
use tpusim::run::{random_inputs, Job};
use tpusim::{DType, Error, HostArray, Mesh};

/// `job`'s outputs on one process (CPU) for its random inputs from `seed`.
fn single(job: &Job, seed: u64) -> (Vec<Vec<HostArray>>, Vec<Vec<HostArray>>) {
    let plan = job.plan().unwrap();
    let inputs = random_inputs(&plan.program, seed).unwrap();
    let out = job.execute(&mut CpuExecutor::new(), &inputs).unwrap();
    (inputs, out)
}

/// `job`'s outputs on `r` thread ranks, each rank's executor from `make`; every rank's.
fn on_ranks(
    job: &Job,
    inputs: &[Vec<HostArray>],
    r: usize,
    make: &(dyn Fn() -> Box<dyn Executor> + Sync),
) -> Vec<Vec<Vec<HostArray>>> {
    on_ranks_placed(job, inputs, r, make, &threads::Layout::default())
        .into_iter()
        .map(|(out, _)| out)
        .collect()
}

/// [`on_ranks`] placed as `layout` says; every rank's outputs and how it exchanged.
fn on_ranks_placed(
    job: &Job,
    inputs: &[Vec<HostArray>],
    r: usize,
    make: &(dyn Fn() -> Box<dyn Executor> + Sync),
    layout: &threads::Layout,
) -> Vec<(Vec<Vec<HostArray>>, Option<String>)> {
    threads::run_on(r, layout, |comm| {
        let ranks = Arc::new(Ranks::new(comm));
        let mut exec = RankExecutor::new(make(), ranks.clone());
        let out = job.execute(&mut exec, inputs);
        ranks.conclude(out).map(|o| (o, ranks.exchange_path()))
    })
    .into_iter()
    .enumerate()
    .map(|(k, o)| {
        o.unwrap_or_else(|e| panic!("rank {k} panicked: {e}"))
            .unwrap_or_else(|e| panic!("rank {k}: {e}"))
    })
    .collect()
}

fn jobs(p: usize, dtype: DType) -> Vec<Job> {
    let reg = Registry::builtin();
    reg.iter()
        .map(|c| {
            Job::collective(c.clone(), Placement::whole(Mesh::new(p, "x").unwrap()))
                .with_dtype(dtype)
        })
        .collect()
}

fn ranks_for(p: usize) -> Vec<usize> {
    match p {
        4 => vec![1, 2, 3, 4],
        _ => vec![1, 2, 3, 5, 8],
    }
}

#[test]
fn every_collective_on_any_number_of_ranks_equals_one_process_cpu() {
    let cpu = || Box::new(CpuExecutor::new()) as Box<dyn Executor>;
    for p in [4, 8] {
        for dtype in [DType::F32, DType::I32, DType::BF16] {
            for job in jobs(p, dtype) {
                let (inputs, want) = single(&job, 7);
                for r in ranks_for(p) {
                    for (k, got) in on_ranks(&job, &inputs, r, &cpu).into_iter().enumerate() {
                        assert!(
                            got == want,
                            "{} P={p} {dtype} on {r} ranks: rank {k}'s outputs differ",
                            job.name()
                        );
                    }
                }
            }
        }
    }
}

/// Three collectives of different patterns and dtypes at P devices.
fn a_few(p: usize) -> Vec<(Job, &'static str, DType)> {
    let reg = Registry::builtin();
    [
        ("psum", DType::F32),
        ("all_to_all", DType::BF16),
        ("ring_allreduce_push", DType::I32),
    ]
    .into_iter()
    .map(|(name, dtype)| {
        let job = Job::collective(
            reg.by_name(name).unwrap(),
            Placement::whole(Mesh::new(p, "x").unwrap()),
        )
        .with_dtype(dtype);
        (job, name, dtype)
    })
    .collect()
}

#[test]
fn shared_memory_and_messages_between_hosts_give_the_same_bytes() {
    let cpu = || Box::new(CpuExecutor::new()) as Box<dyn Executor>;
    let dir = tempfile::tempdir().unwrap();
    for (job, name, dtype) in a_few(8) {
        let (inputs, want) = single(&job, 5);
        // 4 ranks: on one host, on two (shared memory within, messages between), on
        // four (messages only); rings of the default size and of 4 KiB, far shorter
        // than the messages, which then pass in pieces while ranks wait for room.
        for (per_host, ring_bytes) in [(4, None), (2, None), (1, None), (4, Some(4096))] {
            let layout = threads::Layout {
                per_host,
                shm_dir: dir.path().to_path_buf(),
                ring_bytes,
            };
            for (k, (got, path)) in on_ranks_placed(&job, &inputs, 4, &cpu, &layout)
                .into_iter()
                .enumerate()
            {
                let how =
                    format!("{name} {dtype} on 4 ranks, {per_host} per host, ring {ring_bytes:?}");
                assert!(got == want, "{how}: rank {k}'s outputs differ");
                match per_host {
                    1 => assert_eq!(path, None, "{how}"),
                    _ => assert_eq!(
                        path.as_deref(),
                        Some(
                            format!("shared memory between the {per_host} ranks of this host")
                                .as_str()
                        ),
                        "{how}"
                    ),
                }
            }
            // The segment's file went as soon as every rank had mapped it.
            let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
            assert!(
                left.is_empty(),
                "left in the shared-memory directory: {left:?}"
            );
        }
    }
}

#[test]
fn a_host_whose_shared_memory_cannot_be_made_exchanges_messages() {
    let cpu = || Box::new(CpuExecutor::new()) as Box<dyn Executor>;
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no such directory");
    let job = Job::collective(
        Registry::builtin().by_name("psum").unwrap(),
        Placement::whole(Mesh::new(4, "x").unwrap()),
    );
    let (inputs, want) = single(&job, 9);
    let layout = threads::Layout {
        per_host: 3,
        shm_dir: missing.clone(),
        ring_bytes: None,
    };
    for (got, path) in on_ranks_placed(&job, &inputs, 3, &cpu, &layout) {
        assert!(got == want);
        let path = path.expect("the ranks share a host");
        assert!(
            path.starts_with("messages between the ranks of this host (cannot make")
                && path.contains("no such directory"),
            "{path}"
        );
    }
    assert!(!missing.exists());
}

#[test]
fn gpu_ranks_equal_one_process() {
    let gpu = || Box::new(GpuExecutor::from_env().expect("a GPU adapter")) as Box<dyn Executor>;
    for (job, name, dtype) in a_few(4) {
        let (inputs, want) = single(&job, 3);
        for r in [2, 3] {
            for got in on_ranks(&job, &inputs, r, &gpu) {
                assert!(got == want, "{name} {dtype} on {r} GPU ranks differs");
            }
        }
    }
}

#[test]
fn a_run_on_ranks_checks_its_devices_and_adds_the_counts() {
    let reg = Registry::builtin();
    let job = Job::collective(
        reg.by_name("psum").unwrap(),
        Placement::whole(Mesh::new(8, "x").unwrap()),
    );
    let results = threads::run(3, |comm| {
        let ranks = Arc::new(Ranks::new(comm));
        let mut exec = RankExecutor::new(Box::new(CpuExecutor::new()), ranks.clone());
        let r = job.run(&mut exec, 1);
        ranks.conclude(r)
    });
    for r in results {
        let c = r.unwrap().unwrap();
        assert_eq!(c.wrong, 0);
        assert_eq!(c.total, 8 * 8 * 128);
        let (part, report) = c.ranks.expect("a run on ranks reports them");
        assert_eq!(part, Partition::new(8, 3).unwrap());
        assert_eq!(report.ranks.len(), 3);
        // psum's ring crosses each of the three boundaries with every shard.
        assert!(report.crossed_bytes() > 0);
    }
}

#[test]
fn more_ranks_than_devices_is_bad_input_on_every_rank() {
    let reg = Registry::builtin();
    let job = Job::collective(
        reg.by_name("psum").unwrap(),
        Placement::whole(Mesh::new(2, "x").unwrap()),
    );
    for r in threads::run(3, |comm| {
        let ranks = Arc::new(Ranks::new(comm));
        let mut exec = RankExecutor::new(Box::new(CpuExecutor::new()), ranks.clone());
        let r = job.run(&mut exec, 1);
        ranks.conclude(r).map(drop)
    }) {
        // Rank 0's own error, and on the others rank 0's, with its exit status.
        let e = r.unwrap().unwrap_err();
        assert!(
            matches!(
                e,
                Error::BadInput(_)
                    | Error::Rank {
                        rank: 0,
                        status: 2,
                        ..
                    }
            ),
            "{e}"
        );
        assert!(
            e.to_string().contains("3 ranks for 2 simulated devices"),
            "{e}"
        );
    }
}

/// An executor that fails where its rank is told to.
struct Failing {
    inner: CpuExecutor,
    at_prepare: bool,
}

struct FailingRun<'a>(Box<dyn Prepared + 'a>);

impl Prepared for FailingRun<'_> {
    fn upload(&mut self, inputs: &[Vec<HostArray>]) -> tpusim::Result<()> {
        self.0.upload(inputs)
    }
    fn run(&mut self, iters: usize) -> tpusim::Result<std::time::Duration> {
        self.0.run(iters)
    }
    fn read_outputs(&mut self) -> tpusim::Result<Vec<Vec<HostArray>>> {
        self.0.read_outputs()
    }
    fn run_piece(&mut self, k: usize) -> tpusim::Result<()> {
        if k == 1 {
            return Err(Error::bad_input("piece 1 fails on purpose"));
        }
        self.0.run_piece(k)
    }
    fn read_view(&mut self, v: tpusim::ir::View, elem: usize) -> tpusim::Result<Vec<u8>> {
        self.0.read_view(v, elem)
    }
    fn write_view(&mut self, v: tpusim::ir::View, elem: usize, b: &[u8]) -> tpusim::Result<()> {
        self.0.write_view(v, elem, b)
    }
}

impl Executor for Failing {
    fn describe(&self) -> String {
        "failing".into()
    }
    fn prepare<'a>(
        &'a self,
        p: &'a Program,
        s: &'a Schedule,
    ) -> tpusim::Result<Box<dyn Prepared + 'a>> {
        self.prepare_pieces(p, s, &[])
    }
    fn prepare_pieces<'a>(
        &'a self,
        p: &'a Program,
        s: &'a Schedule,
        cuts: &[usize],
    ) -> tpusim::Result<Box<dyn Prepared + 'a>> {
        if self.at_prepare {
            return Err(Error::bad_input("no memory for this rank, on purpose"));
        }
        Ok(Box::new(FailingRun(self.inner.prepare_pieces(p, s, cuts)?)))
    }
}

#[test]
fn a_rank_that_fails_ends_the_others() {
    let reg = Registry::builtin();
    let job = Job::collective(
        reg.by_name("psum").unwrap(),
        Placement::whole(Mesh::new(4, "x").unwrap()),
    );
    // Before any message: every rank returns rank 1's error, with its exit status.
    let results = threads::run(2, |comm| {
        let ranks = Arc::new(Ranks::new(comm));
        let inner = Failing {
            inner: CpuExecutor::new(),
            at_prepare: ranks.rank() == 1,
        };
        let mut exec = RankExecutor::new(Box::new(inner), ranks.clone());
        let r = job.run(&mut exec, 1);
        ranks.conclude(r).map(drop)
    });
    for r in results {
        let e = r.expect("no rank panics").unwrap_err();
        assert!(e.to_string().contains("no memory for this rank"), "{e}");
    }
    // In the middle of a run, while the other waits for its message: both end.
    let results = threads::run(2, |comm| {
        let ranks = Arc::new(Ranks::new(comm));
        let inner = Failing {
            inner: CpuExecutor::new(),
            at_prepare: false,
        };
        let mut exec = RankExecutor::new(Box::new(inner), ranks.clone());
        let r = job.run(&mut exec, 1);
        ranks.conclude(r).map(drop)
    });
    for r in results {
        let e = r.expect_err("a rank in a failed run aborts");
        assert!(
            e.contains("piece 1 fails on purpose") || e.contains("aborted"),
            "{e}"
        );
    }
}

/// On ranks the roof is the largest over ranks of the roof of the ops each rank runs
/// (all their views on its devices; the copies between ranks are messages, not
/// counted): computed here from the schedule and the partition, for psum and
/// all_gather_matmul at P = 4 on 1 to 4 thread ranks, at rates of our own choosing.
/// And a sweep on 2 and 4 thread ranks: no row's roof above its time.
#[test]
fn the_roof_on_ranks_is_the_slowest_ranks_share() {
    use tpusim::bench::{roof, sweep, BenchConfig, BySize, InCache, Rates};
    let rates = Rates {
        copy: 1e9,
        accumulate: 5e8,
        fill: 2e9,
        zero: 4e9,
        matmul: 1e8,
        vector: 1e9,
        fixed: 1e-5,
        in_cache: InCache {
            copy: 1e9,
            accumulate: 5e8,
            fill: 2e9,
            zero: 4e9,
        },
        by_size: BySize::default(),
    };
    let reg = Registry::builtin();
    for name in ["psum", "all_gather_matmul"] {
        let job = Job::collective(
            reg.by_name(name).unwrap(),
            Placement::whole(Mesh::new(4, "x").unwrap()),
        );
        let plan = job.plan().unwrap();
        let (program, sched) = (&plan.program, &plan.schedule);
        let allocs = sched.allocations(program);
        for r in 1..=4 {
            let part = Partition::new(4, r).unwrap();
            let want = (0..r)
                .map(|k| {
                    let held = part.devices_of(k);
                    let own: f64 = sched
                        .ops
                        .iter()
                        .filter(|o| {
                            o.reads()
                                .chain(o.writes())
                                .all(|v| held.contains(&v.device()))
                        })
                        .map(|o| rates.op_seconds(o, &allocs))
                        .sum();
                    own + 1e-5 / 3.0
                })
                .fold(0.0, f64::max);
            let whole = rates.roofline(sched, program, 3);
            assert!(r == 1 || want < whole, "{name} R={r}: {want} vs {whole}");
            for got in threads::run(r, |comm| {
                let ranks = Arc::new(Ranks::new(comm));
                let exec = RankExecutor::new(Box::new(CpuExecutor::new()), ranks.clone());
                let got = roof(&exec, &rates, sched, program, 3);
                ranks.conclude(got)
            }) {
                let got = got.unwrap().unwrap();
                assert!(
                    (got - want).abs() <= 1e-12 * want,
                    "{name} R={r}: {got} vs {want}"
                );
            }
        }
    }
    let cfg = BenchConfig {
        devices: 4,
        min_bytes: 64 << 10,
        max_bytes: 1 << 20,
        factor: 16,
        iters: 3,
        warmup: 1,
        checks: 0,
        dtype: DType::F32,
        schedule: tpusim::sched::ScheduleSpec::Eager,
    };
    for r in [2, 4] {
        for name in ["psum", "all_gather", "all_gather_matmul"] {
            let job = Job::collective(
                reg.by_name(name).unwrap(),
                Placement::whole(Mesh::new(4, "x").unwrap()),
            );
            for rows in threads::run(r, |comm| {
                let ranks = Arc::new(Ranks::new(comm));
                let exec = RankExecutor::new(Box::new(CpuExecutor::new()), ranks.clone());
                let rows = sweep(&job, &cfg, &exec, &mut |_| {});
                ranks.conclude(rows)
            }) {
                for row in rows.unwrap().unwrap() {
                    assert!(
                        row.roof_seconds > 0.0 && row.roof_seconds <= row.seconds,
                        "{name} R={r}: {row:?}"
                    );
                }
            }
        }
    }
}

/// `job`'s inputs from `seed`, a quarter of the elements replaced by a sum's corners:
/// NaNs, infinities, both zeros and values that round (floats), extremes that wrap
/// (integers).
fn corner_inputs(job: &Job, seed: u64) -> Vec<Vec<HostArray>> {
    let plan = job.plan().unwrap();
    let mut inputs = random_inputs(&plan.program, seed).unwrap();
    for (k, a) in inputs.iter_mut().flatten().enumerate() {
        let corners = common::corners(a.dtype);
        for (i, w) in a.words.iter_mut().enumerate() {
            let h = (i as u64 ^ seed ^ (k as u64) << 32).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
            if h.is_multiple_of(4) {
                *w = a.dtype.bits_of(corners[(h / 4) as usize % corners.len()]);
            }
        }
    }
    inputs
}

/// The fused steps rank `rank` of `r` runs for `job` (the CPU executor's fusion of its
/// part, with what its messages touch between pieces), and its local program.
fn rank_steps(job: &Job, r: usize, rank: usize) -> (Program, Schedule, Vec<Step>) {
    let plan = job.plan().unwrap();
    let part = Partition::new(plan.program.devices, r).unwrap();
    let p = RankPlan::new(&plan.program, &plan.schedule, &part, rank).unwrap();
    // The CPU executor's joins.
    let joins = Joins {
        sums: true,
        overwrites: true,
        forward: true,
        reduces: true,
    };
    let keep = Keep::Between(p.between());
    let steps = fuse_with(&p.program, &p.schedule, &p.cuts, keep, joins).steps;
    (p.program, p.schedule, steps)
}

/// True when a step of `steps` writes allocation `alloc` (of any device).
fn writes_alloc(steps: &[Step], ops: &[DataOp], alloc: usize) -> bool {
    steps.iter().any(|s| match s {
        Step::Op(i) => ops[*i].writes().any(|w| w.alloc() == alloc),
        Step::Region(r) => r.outputs.iter().any(|o| o.view.alloc() == alloc),
    })
}

#[test]
fn ring_sums_fused_across_messages_equal_one_process() {
    // Where the ring's copy into its receive buffer and the sum that reads it sit on
    // either side of a message, a rank fuses them across it and never writes the
    // buffer, as one process does: psum, psum_scatter and ring_allreduce with each
    // operator, every dtype, NaNs and wrapping integers, on 2 and 3 ranks, with shards
    // where sums join regions (8,192 elements and more) and where they do not.
    let registry = Registry::builtin();
    let mut case = 0;
    for name in ["psum", "psum_scatter", "ring_allreduce"] {
        let base = registry.by_name(name).unwrap();
        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
            let c = match base.takes().op {
                true => base.with_options(&Options { op, perm: None }).unwrap(),
                false if op == ReduceOp::Sum => base.clone(),
                false => continue,
            };
            for dtype in DType::COLLECTIVE {
                for (p, shape) in [(4, [32, 1024]), (3, [6, 130])] {
                    case += 1;
                    let mesh = Mesh::new(p, "x").unwrap();
                    let job = Job::collective(c.clone(), Placement::whole(mesh))
                        .with_shape(&shape)
                        .with_dtype(dtype);
                    let inputs = corner_inputs(&job, case);
                    let want = job.execute(&mut CpuExecutor::new(), &inputs).unwrap();
                    for r in [2, 3] {
                        for (k, got) in on_ranks(&job, &inputs, r, &|| Box::new(CpuExecutor::new()))
                            .iter()
                            .enumerate()
                        {
                            assert!(
                                words(got) == words(&want),
                                "{name} {op:?} {dtype} {shape:?} P={p} on {r} ranks: rank {k} differs"
                            );
                        }
                    }
                }
            }
        }
    }
    // The path is taken: psum's sums of f32 shards of 8,192 elements on 2 ranks read
    // the received bytes in place, on every device, the receiving ones too; cut at
    // every message (as before), the receive buffer is written.
    let psum = registry.by_name("psum").unwrap();
    let job = Job::collective(psum, Placement::whole(Mesh::new(4, "x").unwrap()))
        .with_shape(&[32, 1024])
        .with_dtype(DType::F32);
    let recv = |program: &Program| {
        let allocs = &program.layout.allocs;
        allocs.iter().position(|a| a.name == "vmem_recv").unwrap()
    };
    for rank in 0..2 {
        let (program, schedule, steps) = rank_steps(&job, 2, rank);
        assert!(
            !writes_alloc(&steps, &schedule.ops, recv(&program)),
            "rank {rank}"
        );
        let plan = job.plan().unwrap();
        let part = Partition::new(4, 2).unwrap();
        let p = RankPlan::new(&plan.program, &plan.schedule, &part, rank).unwrap();
        let all = fuse_with(
            &p.program,
            &p.schedule,
            &p.cuts,
            Keep::All,
            Joins {
                sums: true,
                overwrites: true,
                forward: true,
                reduces: true,
            },
        );
        assert!(writes_alloc(&all.steps, &p.schedule.ops, recv(&p.program)));
    }
}

#[test]
fn a_buffer_a_message_reads_after_the_sum_keeps_its_write() {
    // Each device copies x into `buf`, adds `buf` into `o`, then sends `buf` to its
    // right neighbour's `z`: the copy and the sum fuse, but `buf`'s write is read by a
    // message (a send where the neighbour is on another rank) and must stay.
    let n = 8192;
    let spec = GridSpec::new()
        .input("x", MemorySpace::Any, &[n], DType::F32)
        .output("o", MemorySpace::Vmem, &[n], DType::F32)
        .output("z", MemorySpace::Any, &[n], DType::F32)
        .vmem("buf", &[n], DType::F32)
        .dma_sem("local")
        .dma_sem("send")
        .dma_sem("recv");
    let call = PallasCall::new("copy_sum_send", spec, |pl, a| {
        pl.fill(a.r("o"), 1.0);
        let copy = pl.make_async_copy(a.r("x"), a.r("buf"), a.sem("local"));
        copy.start();
        copy.wait();
        pl.accumulate(a.r("o"), a.r("buf"), ReduceOp::Sum);
        let right = (pl.axis_index("x") + 1) % pl.num_devices();
        let dma =
            pl.make_async_remote_copy(a.r("buf"), a.r("z"), a.sem("send"), a.sem("recv"), right);
        dma.start();
        dma.wait();
    });
    let job = Job::call(call, Mesh::new(4, "x").unwrap());
    let inputs = corner_inputs(&job, 7);
    let want = job.execute(&mut CpuExecutor::new(), &inputs).unwrap();
    // z is the left neighbour's x: the test's own reference, not only one process's.
    for d in 0..4 {
        assert_eq!(want[d][1].words, inputs[(d + 3) % 4][0].words, "device {d}");
    }
    for r in [2, 4] {
        for got in on_ranks(&job, &inputs, r, &|| Box::new(CpuExecutor::new())) {
            assert!(words(&got) == words(&want), "{r} ranks");
        }
        // The sending devices' `buf` is written (a region's output, or a copy).
        let (program, schedule, steps) = rank_steps(&job, r, 0);
        let buf = program
            .layout
            .allocs
            .iter()
            .position(|a| a.name == "buf")
            .unwrap();
        assert!(writes_alloc(&steps, &schedule.ops, buf), "{r} ranks");
    }
}

fn words(out: &[Vec<HostArray>]) -> Vec<Vec<u32>> {
    out.iter().flatten().map(|a| a.words.clone()).collect()
}
