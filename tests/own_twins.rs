//! In the CPU executor's own memory (`prepare`, as `bench` and `run` use it), an operand
//! that only its whole copy into or out of a VMEM buffer touches lives in that buffer and
//! the copy is skipped: every shipped collective's outputs equal the unfused run's bit for
//! bit, and every operand and every such VMEM buffer reads as the unfused run left it.

use tpusim::collectives::{Options, Registry};
use tpusim::device_sim::cpu::{CpuExecutor, CpuPlan};
use tpusim::device_sim::Executor;
use tpusim::ir::{ReduceOp, View};
use tpusim::mesh::Placement;
use tpusim::run::Job;
use tpusim::{DType, HostArray, Mesh};

/// Device `d`'s input: small integers, different on every device (sums exact in every
/// dtype).
fn values(n: usize, d: usize) -> Vec<f64> {
    (0..n)
        .map(|i| ((i * 7919 + d * 104_729) % 17) as f64 - 8.0)
        .collect()
}

/// Outputs after two iterations, and the words of every buffer named in `names` (and of
/// every operand) on every device: (device, name, words).
type Seen = (Vec<Vec<Vec<u32>>>, Vec<(usize, String, Vec<u8>)>);

fn seen(exec: &dyn Executor, job: &Job, inputs: &[Vec<HostArray>], names: &[&str]) -> Seen {
    let plan = job.plan().unwrap();
    let (program, sched) = (&plan.program, &plan.schedule);
    let mut r = exec.prepare(program, sched).unwrap();
    r.upload(inputs).unwrap();
    r.run(2).unwrap();
    let outputs = r.read_outputs().unwrap();
    let outputs = outputs
        .into_iter()
        .map(|d| d.into_iter().map(|a| a.words).collect())
        .collect();
    let memory = sched.memory(program);
    let mut bufs = Vec::new();
    for i in 0..memory.len() {
        let (d, a) = memory.place(i);
        let alloc = memory.alloc(i);
        let operand = program.inputs.contains(&a) || program.outputs.contains(&a);
        if operand || names.contains(&alloc.name.as_str()) {
            let v = View::new(d, a, 0, alloc.numel());
            bufs.push((d, alloc.name.clone(), r.read_view(v, 4).unwrap()));
        }
    }
    (outputs, bufs)
}

/// psum, pmax: at odd and small shapes, every collective dtype, on 4 devices: the run in
/// own memory shares a VMEM buffer with an operand on every device (one buffer where
/// there were two, the copy skipped), and its outputs, operands and the VMEM buffers
/// `x_ref` and `o_ref` hold the unfused run's bits, the outputs the f64 reductions of the
/// inputs.
#[test]
fn psum_in_own_memory_shares_its_vmem_copies_with_its_operands_and_equals_unfused() {
    let base = Registry::builtin().by_name("psum").unwrap();
    let devices = 4;
    for shape in [[1usize, 1], [3, 37], [8, 128], [33, 129]] {
        let n: usize = shape.iter().product();
        for op in [ReduceOp::Sum, ReduceOp::Max] {
            let c = base.with_options(&Options { op, perm: None }).unwrap();
            for dtype in DType::COLLECTIVE {
                let mesh = Mesh::new(devices, "x").unwrap();
                let job = Job::collective(c.clone(), Placement::whole(mesh))
                    .with_shape(&shape)
                    .with_dtype(dtype);
                let plan = job.plan().unwrap();
                let cpu_plan = CpuPlan::of(&plan.program, &plan.schedule);
                let what = format!("{shape:?} {op:?} {dtype}");
                assert!(cpu_plan.shared_operands() >= devices, "{what}");
                let data: Vec<Vec<f64>> = (0..devices).map(|d| values(n, d)).collect();
                let inputs: Vec<Vec<HostArray>> = data
                    .iter()
                    .map(|v| vec![HostArray::from_values(dtype, &shape, v).unwrap()])
                    .collect();
                let names = ["x_ref", "o_ref"];
                let want = seen(&CpuExecutor::unfused(), &job, &inputs, &names);
                for exec in [CpuExecutor::new(), CpuExecutor::new().materialized(true)] {
                    let got = seen(&exec, &job, &inputs, &names);
                    assert!(got.0 == want.0, "{what}: outputs");
                    assert_eq!(got.1.len(), want.1.len(), "{what}");
                    for (g, w) in got.1.iter().zip(&want.1) {
                        assert!(g == w, "{what}: device {} `{}`", w.0, w.1);
                    }
                }
                // The reduction of the inputs, in f64 (exact: small integers).
                let reduce = |i: usize| {
                    let each = data.iter().map(|v| v[i]);
                    match op {
                        ReduceOp::Sum => each.sum::<f64>(),
                        _ => each.fold(f64::MIN, f64::max),
                    }
                };
                let expected: Vec<f64> = (0..n).map(reduce).collect();
                let expected = HostArray::from_values(dtype, &shape, &expected).unwrap();
                for (d, outs) in want.0.iter().enumerate() {
                    assert!(outs[0] == expected.words, "{what}: device {d} reduced");
                }
            }
        }
    }
}

/// Every shipped collective (an odd shape, f32 and i32, 4 devices): its outputs in the
/// executor's own memory, VMEM copies of its operands shared or not, equal the unfused
/// run's bit for bit, and so does every operand's memory after the run.
#[test]
fn every_collective_in_own_memory_equals_unfused_with_its_operands() {
    let shape = [24, 37];
    let mut shared = 0;
    for c in Registry::builtin().iter() {
        for dtype in [DType::F32, DType::I32] {
            let mesh = Mesh::new(4, "x").unwrap();
            let job = Job::collective(c.clone(), Placement::whole(mesh))
                .with_shape(&shape)
                .with_dtype(dtype);
            let Ok(plan) = job.plan() else { continue };
            shared += CpuPlan::of(&plan.program, &plan.schedule).shared_operands();
            let inputs = tpusim::run::random_inputs(&plan.program, 7).unwrap();
            let what = format!("{} {dtype}", c.name());
            let want = seen(&CpuExecutor::unfused(), &job, &inputs, &[]);
            let got = seen(&CpuExecutor::new(), &job, &inputs, &[]);
            assert!(got.0 == want.0, "{what}: outputs");
            assert!(got.1 == want.1, "{what}: operands");
        }
    }
    assert!(
        shared > 0,
        "some collective copies an operand whole into VMEM"
    );
}
