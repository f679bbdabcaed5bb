//! Ring collectives whose buffers outgrow the caches run their stretches of copies,
//! fills, accumulates and sums a block of elements at a time on the CPU executor: the
//! results equal the unfused executor's bit for bit and the sums of the inputs computed
//! here in f64 (small integers: exact in every dtype), at an odd shape, in every
//! collective dtype, for sum, max and min.

use tpusim::collectives::{Options, Registry};
use tpusim::device_sim::cpu::{CpuExecutor, CpuPlan};
use tpusim::device_sim::Executor;
use tpusim::ir::ReduceOp;
use tpusim::mesh::Placement;
use tpusim::{DType, HostArray, Mesh};

/// Device `d`'s input: small integers, different on every device.
fn values(n: usize, d: usize) -> Vec<f64> {
    (0..n)
        .map(|i| ((i * 7919 + d * 104_729) % 17) as f64 - 8.0)
        .collect()
}

#[test]
fn psum_beyond_the_caches_runs_blocked_and_equals_unfused_and_f64_sums() {
    let registry = Registry::builtin();
    let base = registry.by_name("psum").unwrap();
    let devices = 4;
    // About 1 Mi elements a device: the views of a step's stretch pass the blocked
    // runs' least footprint.
    let shape = [8191, 131];
    let n: usize = shape.iter().product();
    let mesh = Mesh::new(devices, "x").unwrap();
    for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
        let c = base.with_options(&Options { op, perm: None }).unwrap();
        for dtype in DType::COLLECTIVE {
            let job = tpusim::run::Job::collective(c.clone(), Placement::whole(mesh.clone()))
                .with_shape(&shape)
                .with_dtype(dtype);
            let plan = job.plan().unwrap();
            let cpu = CpuPlan::of(&plan.program, &plan.schedule);
            assert!(
                cpu.blocked_stretches(&plan.schedule) > 0,
                "{op:?} {dtype}: no stretch runs blocked"
            );
            let data: Vec<Vec<f64>> = (0..devices).map(|d| values(n, d)).collect();
            let inputs: Vec<Vec<HostArray>> = data
                .iter()
                .map(|v| vec![HostArray::from_values(dtype, &shape, v).unwrap()])
                .collect();
            let run = |exec: &dyn Executor| {
                let mut r = exec.prepare(&plan.program, &plan.schedule).unwrap();
                r.upload(&inputs).unwrap();
                // Twice: the second starts from the first's buffers.
                r.run(2).unwrap();
                r.read_outputs().unwrap()
            };
            let blocked = run(&CpuExecutor::new());
            let plain = run(&CpuExecutor::unfused());
            let want: Vec<f64> = (0..n)
                .map(|i| {
                    let each = data.iter().map(|v| v[i]);
                    match op {
                        ReduceOp::Sum => each.sum(),
                        ReduceOp::Max => each.fold(f64::MIN, f64::max),
                        ReduceOp::Min => each.fold(f64::MAX, f64::min),
                    }
                })
                .collect();
            for d in 0..devices {
                assert!(
                    blocked[d][0].words == plain[d][0].words,
                    "{op:?} {dtype} device {d}: blocked and unfused differ"
                );
                let got = blocked[d][0].values();
                let wrong = got.iter().zip(&want).position(|(g, w)| g != w);
                assert_eq!(
                    wrong, None,
                    "{op:?} {dtype} device {d}: first wrong element"
                );
            }
        }
    }
}

/// psum at P = 4 beyond the caches, in every collective dtype, for sum and max: its
/// scratch (the VMEM copies `x_ref` and `o_ref`) is written before it is read in every
/// iteration and read by no step outside the stretch, so a run keeps its blocks in the
/// cores' own buffers and never writes them to memory; the roof counts only the views
/// that do reach memory (the outputs, `hbm_buf` among them). Every buffer such a run
/// materializes (inputs, outputs) equals the unfused run's bit for bit after two
/// iterations, every other buffer the materialized run's ([`CpuExecutor::materialized`]:
/// every view written), and a read of kept scratch is an error, not its stale words. (In
/// the run's own memory `x_ref` and `o_ref` hold the input and the output themselves, the
/// copies skipped: what is left of them to keep, if anything, reads so.)
#[test]
fn dead_scratch_stays_out_of_memory_and_every_materialized_buffer_equals_unfused() {
    use tpusim::device_sim::BlockedStretch;
    use tpusim::ir::View;
    let registry = Registry::builtin();
    let base = registry.by_name("psum").unwrap();
    let devices = 4;
    // Odd, and beyond the blocked runs' least footprint.
    let shape = [8191, 131];
    let n: usize = shape.iter().product();
    let mesh = Mesh::new(devices, "x").unwrap();
    let kept_exec = CpuExecutor::new().materialized(false);
    let whole_exec = CpuExecutor::new().materialized(true);
    for op in [ReduceOp::Sum, ReduceOp::Max] {
        let c = base.with_options(&Options { op, perm: None }).unwrap();
        for dtype in DType::COLLECTIVE {
            let job = tpusim::run::Job::collective(c.clone(), Placement::whole(mesh.clone()))
                .with_shape(&shape)
                .with_dtype(dtype);
            let plan = job.plan().unwrap();
            let (program, sched) = (&plan.program, &plan.schedule);
            // An operand, or the VMEM buffer an operand lives in (its copy skipped).
            let skipped = kept_exec.skipped_ops(program, sched);
            let operand = |v: &View| {
                let twin = skipped
                    .iter()
                    .flat_map(|&i| sched.ops[i].reads().chain(sched.ops[i].writes()));
                program.inputs.contains(&v.alloc())
                    || program.outputs.contains(&v.alloc())
                    || twin
                        .into_iter()
                        .any(|t| t.device() == v.device() && t.alloc() == v.alloc())
            };
            let written = |e: &CpuExecutor| -> Vec<View> {
                let b: Vec<BlockedStretch> = e.blocked_stretches(program, sched);
                assert_eq!(b.len(), 1, "{op:?} {dtype}: one stretch");
                b[0].written.clone()
            };
            let (kept_written, whole_written) = (written(&kept_exec), written(&whole_exec));
            // Materialized: every view the stretch writes; kept: the operands' alone.
            let scratch: Vec<View> = whole_written
                .iter()
                .copied()
                .filter(|v| !operand(v))
                .collect();
            assert!(!scratch.is_empty(), "{op:?} {dtype}: psum writes scratch");
            let want: Vec<View> = whole_written
                .iter()
                .copied()
                .filter(|v| operand(v))
                .collect();
            assert_eq!(kept_written, want, "{op:?} {dtype}");
            let data: Vec<Vec<f64>> = (0..devices).map(|d| values(n, d)).collect();
            let inputs: Vec<Vec<HostArray>> = data
                .iter()
                .map(|v| vec![HostArray::from_values(dtype, &shape, v).unwrap()])
                .collect();
            let memory = sched.memory(program);
            // Every buffer of every device after two iterations: its words, or the
            // error of reading it.
            let run = |exec: &dyn Executor| -> Vec<Result<Vec<u8>, String>> {
                let mut r = exec.prepare(program, sched).unwrap();
                r.upload(&inputs).unwrap();
                r.run(2).unwrap();
                (0..memory.len())
                    .map(|i| {
                        let (d, a) = memory.place(i);
                        let v = View::new(d, a, 0, memory.alloc(i).numel());
                        r.read_view(v, 4).map_err(|e| e.to_string())
                    })
                    .collect()
            };
            let plain = run(&CpuExecutor::unfused());
            let whole = run(&whole_exec);
            let kept = run(&kept_exec);
            for i in 0..memory.len() {
                let (d, a) = memory.place(i);
                let name = &memory.alloc(i).name;
                let what = format!("{op:?} {dtype} device {d} `{name}`");
                let whole = whole[i].as_ref().expect("materialized: every buffer reads");
                // The kernel's operands are what the fused run must leave as the
                // unfused one does; its other buffers hold what fusion left there.
                if program.inputs.contains(&a) || program.outputs.contains(&a) {
                    assert!(plain[i].as_ref() == Ok(whole), "{what}: materialized");
                }
                let dead = scratch.iter().any(|v| v.device() == d && v.alloc() == a);
                match &kept[i] {
                    Ok(got) => assert!(got == whole, "{what}: kept"),
                    Err(e) => assert!(dead && e.contains("TPUSIM_MATERIALIZE"), "{what}: {e}"),
                }
            }
        }
    }
}

/// Every shipped collective beyond the caches (an odd shape, f32 and i32), in the
/// executor's own memory and in memory lent to it (as Python lends XLA's buffers; twice
/// on one plan, the second call in the first's buffers): the outputs equal the unfused
/// run's bit for bit, scratch kept out of memory (psum's, at least) or not.
#[test]
fn every_collective_keeping_dead_scratch_equals_unfused_in_own_and_lent_memory() {
    use tpusim::device_sim::Lent;
    let shape = [8191, 131];
    let mut kept_some = 0;
    for c in Registry::builtin().iter() {
        for dtype in [DType::F32, DType::I32] {
            let mesh = Mesh::new(4, "x").unwrap();
            let job = tpusim::run::Job::collective(c.clone(), Placement::whole(mesh))
                .with_shape(&shape)
                .with_dtype(dtype);
            let Ok(plan) = job.plan() else { continue };
            let (program, sched) = (&plan.program, &plan.schedule);
            let what = format!("{} {dtype}", c.name());
            let written = |e: CpuExecutor| -> usize {
                let b = e.blocked_stretches(program, sched);
                b.iter().map(|s| s.written.len()).sum()
            };
            if written(CpuExecutor::new().materialized(false))
                < written(CpuExecutor::new().materialized(true))
            {
                kept_some += 1;
            }
            let inputs = tpusim::run::random_inputs(program, 11).unwrap();
            let words = |out: Vec<Vec<HostArray>>| -> Vec<Vec<Vec<u32>>> {
                out.into_iter()
                    .map(|d| d.into_iter().map(|a| a.words).collect())
                    .collect()
            };
            let run = |exec: &dyn Executor| {
                let mut r = exec.prepare(program, sched).unwrap();
                r.upload(&inputs).unwrap();
                r.run(2).unwrap();
                words(r.read_outputs().unwrap())
            };
            let want = run(&CpuExecutor::unfused());
            assert!(
                run(&CpuExecutor::new().materialized(false)) == want,
                "{what}: own memory"
            );
            let cpu_plan = CpuPlan::of(program, sched);
            for call in 0..2 {
                let mut outs: Vec<Vec<Vec<u32>>> = (0..program.devices)
                    .map(|_| {
                        let numel = |a: usize| program.layout.allocs[a].numel();
                        program
                            .outputs
                            .iter()
                            .map(|&a| vec![!0; numel(a)])
                            .collect()
                    })
                    .collect();
                {
                    let mut lent = Vec::new();
                    for (d, dev) in inputs.iter().enumerate() {
                        for (i, a) in dev.iter().enumerate() {
                            let alloc = program.inputs[i];
                            let words = &a.words;
                            lent.push(Lent::Input {
                                device: d,
                                alloc,
                                words,
                            });
                        }
                    }
                    for (d, dev) in outs.iter_mut().enumerate() {
                        for (o, words) in dev.iter_mut().enumerate() {
                            let alloc = program.outputs[o];
                            lent.push(Lent::Output {
                                device: d,
                                alloc,
                                words,
                            });
                        }
                    }
                    let cpu = CpuExecutor::new().materialized(false);
                    let mut r = cpu.prepare_lent(program, sched, &cpu_plan, lent).unwrap();
                    r.run(2).unwrap();
                }
                assert!(outs == want, "{what}: lent memory, call {call}");
            }
        }
    }
    assert!(kept_some >= 2, "psum's scratch is kept: {kept_some}");
}
