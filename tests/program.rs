//! The schedule as a GPU program (one arena, one dispatch per level of compute) gives
//! the CPU oracle's results bit for bit, for every collective, P, dtype and schedule.

mod common;

use tpusim::collectives::{self, Registry};
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::device_sim::gpu::{ArenaMode, GpuExecutor, Lowering};
use tpusim::device_sim::Executor;
use tpusim::kernel::ReduceOp;
use tpusim::run::random_inputs;
use tpusim::{DType, Mesh};

/// An executor on the shared device that runs every schedule it can as a program.
fn program_executor() -> GpuExecutor {
    let mut gpu = GpuExecutor::new(common::gpu().context().clone());
    gpu.set_arena(ArenaMode::UpTo(u64::MAX));
    gpu
}

#[test]
fn the_gpu_program_matches_the_cpu_oracle_bit_for_bit() {
    let reg = Registry::builtin();
    let gpu = program_executor();
    for c in reg.iter() {
        for p in [1usize, 3, 4, 8] {
            for dtype in [DType::F32, DType::I32] {
                for spec in ["eager", "lazy", "random:5"] {
                    let mesh = Mesh::new(p, "x").unwrap();
                    let call = c.call(&mesh, &c.default_shape(p), dtype).unwrap();
                    let policy = tpusim::sched::ScheduleSpec::parse(spec).unwrap();
                    let (program, sched) = common::plan(&call, &mesh, policy).unwrap();
                    let inputs = random_inputs(&program, p as u64).unwrap();
                    let want = CpuExecutor::new()
                        .execute(&program, &sched, &inputs)
                        .unwrap();
                    let run = gpu.prepare_run(&program, &sched).unwrap();
                    // Compute ops on values run per op (`lower_arena`).
                    let computes = sched
                        .ops
                        .iter()
                        .any(|o| matches!(o, tpusim::ir::DataOp::Compute(_)));
                    if !computes {
                        assert_eq!(
                            run.lowering(),
                            Lowering::Arena,
                            "small schedules fit one arena"
                        );
                    }
                    run.upload(&inputs).unwrap();
                    run.run(1).unwrap();
                    let got = run.read_outputs().unwrap();
                    if computes && dtype.is_float() {
                        // A float matmul sums in the GPU's order, not gemm's: equal up to
                        // the collective's bound.
                        let tol = c.tolerance_at(&c.default_shape(p), dtype, p);
                        let wrong = tpusim::device_sim::count_wrong(&got, &want, tol);
                        assert_eq!(wrong, 0, "{} P={p} {dtype} {spec}", c.name());
                    } else {
                        assert!(got == want, "{} P={p} {dtype} {spec}", c.name());
                    }
                    // Every level's compute is one dispatch, whatever P is.
                    assert!(run.dispatches() <= sched.ops.len());
                }
            }
        }
    }
    // A reduction operator other than sum, and a racy variant's wrong data, too.
    let mesh = Mesh::new(4, "x").unwrap();
    let pmax = reg
        .get(
            "psum",
            &collectives::Options {
                op: ReduceOp::Max,
                perm: None,
            },
        )
        .unwrap();
    let v = collectives::variants::variant("all_gather", "shared-recv-sem").unwrap();
    for call in [
        pmax.call(&mesh, &[8, 128], DType::F32).unwrap(),
        v.call(&mesh, &[8, 128], DType::I32).unwrap(),
    ] {
        let (program, sched) =
            common::plan(&call, &mesh, tpusim::sched::ScheduleSpec::Lazy).unwrap();
        let inputs = random_inputs(&program, 9).unwrap();
        let want = CpuExecutor::new()
            .execute(&program, &sched, &inputs)
            .unwrap();
        let run = gpu.prepare_run(&program, &sched).unwrap();
        assert_eq!(run.lowering(), Lowering::Arena);
        run.upload(&inputs).unwrap();
        run.run(1).unwrap();
        assert!(run.read_outputs().unwrap() == want);
    }
}

#[test]
fn repeated_runs_of_a_program_repeat_the_result() {
    let reg = Registry::builtin();
    let gpu = program_executor();
    let mesh = Mesh::new(5, "x").unwrap();
    let c = reg.by_name("ring_allreduce_push").unwrap();
    let call = c.call(&mesh, &c.default_shape(5), DType::I32).unwrap();
    let (program, sched) = common::plan(&call, &mesh, tpusim::sched::ScheduleSpec::Eager).unwrap();
    let inputs = random_inputs(&program, 3).unwrap();
    let cpu = CpuExecutor::new();
    let mut want = cpu.prepare(&program, &sched).unwrap();
    want.upload(&inputs).unwrap();
    want.run(3).unwrap();
    let want = want.read_outputs().unwrap();
    // Each iteration recomputes the all-reduce from the inputs.
    let reduced = c.reference(&inputs).unwrap();
    assert!(want.iter().zip(&reduced).all(|(w, r)| w[0] == r[0]));
    let run = gpu.prepare_run(&program, &sched).unwrap();
    assert_eq!(run.lowering(), Lowering::Arena);
    run.upload(&inputs).unwrap();
    run.run(3).unwrap();
    assert!(
        run.read_outputs().unwrap() == want,
        "three runs differ from the CPU's"
    );
}
