//! `bench`'s roof is a bound: no run of a shipped collective is faster than the least time
//! its data ops can take at the rates the executor reaches (same run), on either executor.

mod common;

use tpusim::bench::{sweep, BenchConfig, BenchRow, BySize, InCache, Rates};
use tpusim::collectives::Registry;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::device_sim::Executor;
use tpusim::mesh::Placement;
use tpusim::run::Job;
use tpusim::sched::ScheduleSpec;
use tpusim::{DType, Mesh};

/// One executor at a time: the test harness runs the CPU and GPU tests side by side,
/// and lavapipe's threads would slow the CPU executor's rate measurements and its runs
/// by different amounts (a roof measured so is no bound on either).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The rows of `job`'s sweep under `cfg` on `exec`, every row's roof at most its time. A
/// row above is measured again (at most three times in all): on a machine shared with
/// other work one rate measurement can come out slow, which makes that row's roof too
/// high; a roof that is not a bound stays above.
fn rows_within_roof(exec: &dyn Executor, job: &Job, cfg: &BenchConfig) -> Vec<BenchRow> {
    let mut rows = sweep(job, cfg, exec, &mut |_| {}).unwrap();
    for attempt in 1..=3 {
        let over: Vec<String> = rows
            .iter()
            .filter(|r| r.roof_seconds > r.seconds)
            .map(|r| {
                format!(
                    "{} {} B: roof {:.1} us, time {:.1} us ({:?})",
                    r.collective,
                    r.size,
                    r.roof_seconds * 1e6,
                    r.seconds * 1e6,
                    r.rates
                )
            })
            .collect();
        if over.is_empty() {
            break;
        }
        assert!(attempt < 3, "on {}: {over:?}", exec.describe());
        rows = sweep(job, cfg, exec, &mut |_| {}).unwrap();
    }
    rows
}

/// The sweep of every shipped collective at 4 KiB and 1 MiB, P = 4: every row's roof is
/// at most its time ([`rows_within_roof`]).
fn roof_is_a_bound(exec: &dyn Executor) {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let reg = Registry::builtin();
    let cfg = BenchConfig {
        devices: 4,
        min_bytes: 4 << 10,
        max_bytes: 1 << 20,
        factor: 256,
        iters: 5,
        warmup: 1,
        checks: 0,
        dtype: DType::F32,
        schedule: ScheduleSpec::Eager,
    };
    for c in reg.iter() {
        let job = Job::collective(c.clone(), Placement::whole(Mesh::new(4, "x").unwrap()));
        let rows = rows_within_roof(exec, &job, &cfg);
        assert_eq!(rows.len(), 2, "{}", c.name());
        for r in &rows {
            assert!(r.roof_seconds > 0.0, "{}: {r:?}", c.name());
            // A matmul collective's roof holds its FLOPs at the best matmul rate, shared
            // at most among the cores (devices side by side, one a core).
            let flops = 2.0 * r.macs as f64 / r.rates.matmul;
            let cores = rayon::current_num_threads() as f64;
            assert!(r.roof_seconds * cores >= flops, "{}: {r:?}", c.name());
        }
        if c.name().contains("matmul") {
            assert!(rows.iter().all(|r| r.macs > 0), "{}: {rows:?}", c.name());
        }
    }
}

/// psum at P = 4 and 8 MiB per device, f32 and bf16: beyond the caches the CPU executor
/// runs its ring as stretches a cache block at a time, and the roof (such a stretch's
/// written bytes once at memory's rate, or its ops' passes in the caches) is still at
/// most the time ([`rows_within_roof`]).
#[test]
fn roof_is_a_bound_where_the_cpu_executor_runs_blocked() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let exec = CpuExecutor::new();
    let job = Job::collective(
        Registry::builtin().by_name("psum").unwrap(),
        Placement::whole(Mesh::new(4, "x").unwrap()),
    );
    for dtype in [DType::F32, DType::BF16] {
        let size = 8 << 20;
        let cfg = BenchConfig {
            devices: 4,
            min_bytes: size,
            max_bytes: size,
            factor: 4,
            iters: 3,
            warmup: 1,
            checks: 0,
            dtype,
            schedule: ScheduleSpec::Eager,
        };
        let plan = job.clone().with_shape(&[size as usize / 4 / 1024, 1024]);
        let plan = plan.with_dtype(dtype).plan().unwrap();
        let blocked = exec.blocked_stretches(&plan.program, &plan.schedule);
        assert!(!blocked.is_empty(), "{dtype}: psum at 8 MiB runs blocked");
        let rows = rows_within_roof(&exec, &job, &cfg);
        assert_eq!(rows.len(), 1, "{dtype}");
    }
}

/// A blocked stretch's roof ([`Rates::stretch_seconds`]) is the most of its distinct
/// written views' bytes at the fastest data rate over memory and its ops at the in-cache
/// rates spread over its cores; the ops outside stretches keep their own. psum at P = 4
/// and 8 MiB per device runs as one stretch of every op; a stretch made up here of its
/// first two ops is the rest of the bound.
#[test]
fn a_blocked_stretch_takes_its_writes_once_or_its_passes_in_the_caches() {
    use tpusim::device_sim::BlockedStretch;
    let job = Job::collective(
        Registry::builtin().by_name("psum").unwrap(),
        Placement::whole(Mesh::new(4, "x").unwrap()),
    )
    .with_shape(&[2048, 1024]);
    let plan = job.plan().unwrap();
    let (program, sched) = (&plan.program, &plan.schedule);
    let allocs = sched.allocations(program);
    let blocked = CpuExecutor::new().blocked_stretches(program, sched);
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    let b = &blocked[0];
    // The copies the run skips (an operand living in its VMEM twin's buffer, where a
    // copy stays a step of its own) are charged nothing; every other op once, in the
    // stretch.
    let skipped = CpuExecutor::new().skipped_ops(program, sched);
    let mut ops = [b.ops.clone(), skipped.clone()].concat();
    ops.sort_unstable();
    assert_eq!(
        ops,
        (0..sched.ops.len()).collect::<Vec<_>>(),
        "every op, once"
    );
    // Every view written to memory is distinct and of the whole 8 MiB shard: the
    // outputs (hbm_buf's two halves among them; an output living in its VMEM twin's
    // buffer as that buffer), as the VMEM copies are dead outside the stretch and stay
    // in the cores' blocks; materialized, they are written too.
    let shard = 8u64 << 20;
    let holds_output = |a| {
        let twin = skipped.iter().flat_map(|&i| sched.ops[i].reads());
        twin.map(|v| v.alloc()).any(|t| t == a)
    };
    assert!(
        b.written
            .iter()
            .all(|v| program.outputs.contains(&v.alloc()) || holds_output(v.alloc())),
        "{b:?}"
    );
    let whole = CpuExecutor::new().materialized(true);
    let whole = &whole.blocked_stretches(program, sched)[0];
    assert!(whole.written.len() > b.written.len(), "{whole:?}");
    assert!(b.written.iter().all(|v| whole.written.contains(v)));
    let written: u64 = b.written.iter().map(|v| v.bytes(4)).sum();
    assert!(b.written.iter().all(|v| v.bytes(4) == shard), "{b:?}");
    for (k, v) in b.written.iter().enumerate() {
        assert!(!b.written[..k].contains(v), "{v:?} twice");
    }
    let passes: u64 = sched.ops.iter().map(|o| o.bytes(&allocs)).sum();
    assert!(passes > written, "{passes} {written}");
    let rates = |memory: f64, cached: f64| Rates {
        copy: memory,
        accumulate: memory / 2.0,
        fill: memory / 4.0,
        zero: memory / 4.0,
        matmul: 1e12,
        vector: 1e12,
        fixed: 1e-4,
        in_cache: InCache {
            copy: cached,
            accumulate: cached,
            fill: cached,
            zero: cached,
        },
        by_size: BySize::default(),
    };
    let cores = |c: usize| BlockedStretch {
        cores: c,
        ..b.clone()
    };
    let close = |got: f64, want: f64| (got - want).abs() <= 1e-12 * want;
    // Memory-bound: the written bytes at the copy rate (the fastest).
    let r = rates(1e9, 1e12);
    let got = r.roofline_blocked(sched, program, 2, &[cores(2)], &[], 1);
    let want = written as f64 / 1e9 + 1e-4 / 2.0;
    assert!(close(got, want), "{got} vs {want}");
    // Cache-bound: every pass at the in-cache rate, over two cores, then one.
    let r = rates(1e12, 1e9);
    for c in [1, 2] {
        let got = r.roofline_blocked(sched, program, 2, &[cores(c)], &[], 1);
        let want = passes as f64 / 1e9 / c as f64 + 1e-4 / 2.0;
        assert!(close(got, want), "{c} cores: {got} vs {want}");
    }
    // A stretch of the first two ops: the others at their own rates, over memory.
    let first = BlockedStretch {
        ops: vec![0, 1],
        written: sched.ops[..2].iter().flat_map(|o| o.writes()).collect(),
        cores: 1,
    };
    let r = rates(1e9, 1e9);
    let alone: f64 = sched.ops[2..]
        .iter()
        .map(|o| r.op_seconds(o, &allocs))
        .sum();
    let got = r.roofline_blocked(sched, program, 1, std::slice::from_ref(&first), &[], 1);
    let want = alone + r.stretch_seconds(&first, &sched.ops, &allocs) + 1e-4;
    assert!(close(got, want), "{got} vs {want}");
    assert!(close(
        r.roofline_blocked(sched, program, 1, &[], &[], 1),
        r.roofline(sched, program, 1)
    ));
    // Lanes of devices side by side: the work shared among them, and no less than one
    // device's own ops one after another (a copy between devices in neither's).
    let seconds: Vec<f64> = sched.ops.iter().map(|o| r.op_seconds(o, &allocs)).collect();
    let mut own = vec![0.0f64; program.devices];
    for (o, t) in sched.ops.iter().zip(&seconds) {
        let on: Vec<usize> = o.reads().chain(o.writes()).map(|v| v.device()).collect();
        if on.iter().all(|&d| d == on[0]) {
            own[on[0]] += t;
        }
    }
    let total: f64 = seconds.iter().sum();
    let one = own.iter().copied().fold(0.0, f64::max);
    assert!(one > 0.0 && one < total / 2.0, "{one} {total}");
    for lanes in [2, 3, 64] {
        let got = r.roofline_blocked(sched, program, 1, &[], &[], lanes);
        let want = (total / lanes as f64).max(one) + 1e-4;
        assert!(close(got, want), "{lanes} lanes: {got} vs {want}");
    }
}

#[test]
fn roof_is_a_bound_on_the_cpu_executor() {
    roof_is_a_bound(&CpuExecutor::new());
}

#[test]
fn roof_is_a_bound_on_the_gpu_executor() {
    roof_is_a_bound(&*common::gpu());
}

/// The roof adds every data op's bytes at its kind's rate and the submission's fixed cost
/// shared by the iterations: ppermute at P = 2 is one copy of one device's shard per
/// device, psum_scatter's schedule has copies, accumulates and zero fills.
#[test]
fn roofline_adds_bytes_at_their_rates() {
    let rates = Rates {
        copy: 1e9,
        accumulate: 2e8,
        fill: 5e8,
        zero: 4e9,
        matmul: 1e12,
        vector: 1e9,
        fixed: 1e-4,
        in_cache: InCache {
            copy: 1e9,
            accumulate: 2e8,
            fill: 5e8,
            zero: 4e9,
        },
        by_size: BySize::default(),
    };
    let reg = Registry::builtin();
    let job = Job::collective(
        reg.by_name("ppermute").unwrap(),
        Placement::whole(Mesh::new(2, "x").unwrap()),
    )
    .with_shape(&[8, 128]);
    let plan = job.plan().unwrap();
    let shard = 8.0 * 128.0 * 4.0;
    let want = 2.0 * shard / 1e9 + 1e-4 / 10.0;
    let got = rates.roofline(&plan.schedule, &plan.program, 10);
    assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    // Every op counted once, at the rate of its kind.
    let job = Job::collective(
        reg.by_name("psum").unwrap(),
        Placement::whole(Mesh::new(4, "x").unwrap()),
    );
    let plan = job.plan().unwrap();
    let allocs = plan.schedule.allocations(&plan.program);
    let (mut copies, mut accs, mut fills, mut zeros) = (0u64, 0u64, 0u64, 0u64);
    for op in &plan.schedule.ops {
        let b = op.bytes(&allocs);
        match op {
            tpusim::ir::DataOp::Copy { .. } => copies += b,
            tpusim::ir::DataOp::Compute(_) => panic!("psum computes nothing"),
            tpusim::ir::DataOp::Accumulate { .. } => accs += b,
            tpusim::ir::DataOp::Fill { bits: 0, .. } => zeros += b,
            tpusim::ir::DataOp::Fill { .. } => fills += b,
        }
    }
    assert!(copies > 0 && accs > 0, "psum copies and accumulates");
    let want = copies as f64 / 1e9
        + accs as f64 / 2e8
        + fills as f64 / 5e8
        + zeros as f64 / 4e9
        + 1e-4 / 3.0;
    let got = rates.roofline(&plan.schedule, &plan.program, 3);
    assert!(
        (got - want).abs() < 1e-12 * want.max(1.0),
        "{got} vs {want}"
    );
}

/// A compute op takes the most of its bytes at the copy rate, its FLOPs at the matmul
/// rate and (elementwise) its operations at the elementwise rate. all_gather_matmul at
/// P = 2 with x of 4 x 8 and w of 8 x 16 runs P × P = 4 matmuls of 2·4·8·16 FLOPs, each
/// writing a 4 x 16 f32 block; its other ops are copies and fills. A kernel of one
/// negation of 1000 elements and one reshape of them: the negation is bounded by its
/// operations, the reshape (data movement) by its bytes only.
#[test]
fn roofline_counts_flops_and_elementwise_work() {
    use tpusim::ir::DataOp;
    let reg = Registry::builtin();
    let job = Job::collective(
        reg.by_name("all_gather_matmul").unwrap(),
        Placement::whole(Mesh::new(2, "x").unwrap()),
    )
    .with_shape(&[4, 8, 16]);
    let plan = job.plan().unwrap();
    let allocs = plan.schedule.allocations(&plan.program);
    let (mut other, mut dots) = (0u64, 0usize);
    for op in &plan.schedule.ops {
        match op {
            DataOp::Compute(_) => dots += 1,
            DataOp::Copy { .. } | DataOp::Fill { .. } | DataOp::Accumulate { .. } => {
                other += op.bytes(&allocs)
            }
        }
    }
    assert_eq!(dots, 4, "one matmul per device and step");
    let flops = 2.0 * 4.0 * 8.0 * 16.0;
    let block = 4.0 * 16.0 * 4.0;
    // Every rate the same but the matmul's: the matmul bound, then the bytes' bound.
    let at = |matmul: f64| Rates {
        copy: 1e9,
        accumulate: 1e9,
        fill: 1e9,
        zero: 1e9,
        matmul,
        vector: 1e9,
        fixed: 2e-6,
        in_cache: InCache {
            copy: 1e9,
            accumulate: 1e9,
            fill: 1e9,
            zero: 1e9,
        },
        by_size: BySize::default(),
    };
    for (matmul, per_dot) in [(1e6, flops / 1e6), (1e15, block / 1e9)] {
        let want = other as f64 / 1e9 + 4.0 * per_dot + 2e-6 / 5.0;
        let got = at(matmul).roofline(&plan.schedule, &plan.program, 5);
        assert!((got - want).abs() < 1e-9 * want, "{got} vs {want}");
    }

    let spec = tpusim::kernel::GridSpec::new()
        .vmem("a", &[1000], DType::F32)
        .vmem("b", &[10, 100], DType::F32);
    let call = tpusim::kernel::PallasCall::new("neg_reshape", spec, |pl, a| {
        let x = pl.read(a.r("a"));
        let y = -&x;
        pl.store(a.r("b"), &y.reshape(&[10, 100]));
    });
    let program = call.lower(&Mesh::new(1, "x").unwrap()).unwrap();
    let sched = tpusim::sched::schedule(&program, &mut tpusim::sched::Eager::default()).unwrap();
    let kinds: Vec<String> = sched
        .ops
        .iter()
        .map(|o| match o {
            DataOp::Compute(c) => format!("{:?}", c.kind),
            DataOp::Copy { .. } => "copy".into(),
            _ => "other".into(),
        })
        .collect();
    assert_eq!(kinds, ["Unary(Neg)", "Reshape", "copy"], "{kinds:?}");
    let rates = Rates {
        copy: 4e9,
        accumulate: 1e9,
        fill: 1e9,
        zero: 1e9,
        matmul: 1e12,
        vector: 1e8,
        fixed: 0.0,
        in_cache: InCache {
            copy: 4e9,
            accumulate: 1e9,
            fill: 1e9,
            zero: 1e9,
        },
        by_size: BySize::default(),
    };
    // neg: 1000 ops at 1e8/s (above 4000 bytes at 4e9); reshape and copy: 4000 bytes each.
    let want = 1000.0 / 1e8 + 2.0 * 4000.0 / 4e9;
    let got = rates.roofline(&sched, &program, 1);
    assert!((got - want).abs() < 1e-12, "{got} vs {want}");
}

/// A copy that the CPU executor's run skips (an operand living in its VMEM twin's buffer:
/// psum_scatter's input and result beside their VMEM copies) is charged nothing: the roof
/// without them is the roof of every op less exactly their own seconds.
#[test]
fn the_roof_charges_nothing_for_the_copies_a_run_skips() {
    let job = Job::collective(
        Registry::builtin().by_name("psum_scatter").unwrap(),
        Placement::whole(Mesh::new(4, "x").unwrap()),
    )
    // Small enough to run unblocked on every machine: its stretch's views take less
    // than the least line the calibration picks (`blocked::least_blocked_bytes`, 1 MiB).
    .with_shape(&[128, 256]);
    let plan = job.plan().unwrap();
    let (program, sched) = (&plan.program, &plan.schedule);
    let exec = CpuExecutor::new();
    let skipped = exec.skipped_ops(program, sched);
    assert!(
        !skipped.is_empty(),
        "psum_scatter's VMEM copies are skipped"
    );
    let allocs = sched.allocations(program);
    for &i in &skipped {
        assert!(
            matches!(sched.ops[i], tpusim::ir::DataOp::Copy { .. }),
            "{:?}",
            sched.ops[i]
        );
    }
    let r = Rates {
        copy: 1e9,
        accumulate: 2e9,
        fill: 3e9,
        zero: 4e9,
        matmul: 1e12,
        vector: 1e12,
        fixed: 1e-4,
        in_cache: InCache {
            copy: 1e10,
            accumulate: 1e10,
            fill: 1e10,
            zero: 1e10,
        },
        by_size: BySize::default(),
    };
    let blocked = exec.blocked_stretches(program, sched);
    assert!(blocked.is_empty(), "{blocked:?}");
    let all = r.roofline_blocked(sched, program, 1, &[], &[], 1);
    let less = r.roofline_blocked(sched, program, 1, &[], &skipped, 1);
    let theirs: f64 = skipped
        .iter()
        .map(|&i| r.op_seconds(&sched.ops[i], &allocs))
        .sum();
    assert!(theirs > 0.0);
    assert!(
        (all - less - theirs).abs() <= 1e-12 * all,
        "{all} {less} {theirs}"
    );
}
