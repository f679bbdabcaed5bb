//! NaN in, NaN out, as XLA computes it, on both executors: a reduction (sum, max, min)
//! gives NaN wherever any device's input holds one, data movement carries NaN through,
//! and the one comparison rule counts a NaN that matches the reference's NaN as right.

mod common;

use tpusim::collectives::{Options, Registry};
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::device_sim::{count_wrong, Executor};
use tpusim::kernel::ReduceOp;
use tpusim::mesh::Placement;
use tpusim::run::{random_inputs, Job};
use tpusim::{DType, HostArray, Mesh};

/// NaN bit patterns of `dtype`: quiet, negative, and one with a payload.
fn nans(dtype: DType) -> [u32; 3] {
    match dtype {
        DType::F32 => [0x7fc0_0000, 0xffc0_0000, 0x7f80_0001],
        DType::F16 => [0x7e00, 0xfe00, 0x7c01],
        DType::BF16 => [0x7fc0, 0xffc0, 0x7f81],
        d => panic!("{d} has no NaN"),
    }
}

fn is_nan(dtype: DType, bits: u32) -> bool {
    dtype.value_of(bits).is_nan()
}

/// Random inputs of `job` with NaNs put at a few positions of a few devices (one of
/// them on every device, the others on one each), and those positions.
fn inputs_with_nans(job: &Job, dtype: DType) -> (Vec<Vec<HostArray>>, Vec<usize>) {
    let plan = job.plan().unwrap();
    let mut inputs = random_inputs(&plan.program, 7).unwrap();
    let n = inputs[0][0].len();
    let spots = [0, n / 3, n - 1];
    for (d, dev) in inputs.iter_mut().enumerate() {
        let w = &mut dev[0].words;
        w[spots[0]] = nans(dtype)[d % 3];
        if d == 1 {
            w[spots[1]] = nans(dtype)[1];
        }
        if d == dev_last(job) {
            w[spots[2]] = nans(dtype)[2];
        }
    }
    (inputs, spots.to_vec())
}

fn dev_last(job: &Job) -> usize {
    job.place().mesh.size() - 1
}

#[test]
fn reductions_propagate_nan_on_both_executors_as_the_reference() {
    let reg = Registry::builtin();
    let mut gpu = common::gpu();
    for name in ["psum", "ring_allreduce", "ring_allreduce_push"] {
        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
            for dtype in [DType::F32, DType::F16, DType::BF16] {
                let c = reg.get(name, &Options { op, perm: None }).unwrap();
                let job = Job::collective(c, Placement::whole(Mesh::new(4, "x").unwrap()))
                    .with_dtype(dtype);
                let (inputs, spots) = inputs_with_nans(&job, dtype);
                let want = job.reference(&inputs).unwrap();
                let what = format!("{name} {op:?} {dtype}");
                let mut results = Vec::new();
                for exec in [&mut CpuExecutor::new() as &mut dyn Executor, &mut *gpu] {
                    let got = job.execute(exec, &inputs).unwrap();
                    assert_eq!(
                        count_wrong(&got, &want, job.tolerance()),
                        0,
                        "{what} on {}",
                        exec.describe()
                    );
                    results.push(got);
                }
                // The reference (and so both executors) is NaN at every spot on every
                // device, and only there.
                for (d, out) in want.iter().enumerate() {
                    let bits = &out[0].words;
                    for (i, &b) in bits.iter().enumerate() {
                        assert_eq!(
                            is_nan(dtype, b),
                            spots.contains(&i),
                            "{what}: device {d} element {i}"
                        );
                    }
                }
                // GPU = CPU, NaN for NaN and number for number.
                for (c, g) in results[0].iter().zip(&results[1]) {
                    for (a, b) in c[0].words.iter().zip(&g[0].words) {
                        assert_eq!(is_nan(dtype, *a), is_nan(dtype, *b), "{what}");
                        if !is_nan(dtype, *a) {
                            assert_eq!(a, b, "{what}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn data_movement_carries_nan_through() {
    let reg = Registry::builtin();
    let mut gpu = common::gpu();
    for name in [
        "ppermute",
        "all_gather",
        "all_gather_bidir",
        "all_to_all",
        "psum_scatter",
    ] {
        for dtype in [DType::F32, DType::BF16] {
            let job = Job::collective(
                reg.by_name(name).unwrap(),
                Placement::whole(Mesh::new(4, "x").unwrap()),
            )
            .with_dtype(dtype);
            let (inputs, _) = inputs_with_nans(&job, dtype);
            let want = job.reference(&inputs).unwrap();
            let nan_count = |o: &[Vec<HostArray>]| {
                o.iter()
                    .flat_map(|d| d[0].words.iter())
                    .filter(|&&b| is_nan(dtype, b))
                    .count()
            };
            assert!(
                nan_count(&want) > 0,
                "{name} {dtype}: no NaN reached the result"
            );
            for exec in [&mut CpuExecutor::new() as &mut dyn Executor, &mut *gpu] {
                let got = job.execute(exec, &inputs).unwrap();
                assert_eq!(
                    count_wrong(&got, &want, job.tolerance()),
                    0,
                    "{name} {dtype}"
                );
                assert_eq!(nan_count(&got), nan_count(&want), "{name} {dtype}");
            }
        }
    }
}

#[test]
fn a_nan_where_the_reference_has_a_number_is_wrong_and_the_reverse() {
    let want = HostArray::from_f32(&[3], vec![1.0, f32::NAN, 2.0]).unwrap();
    let same = HostArray::from_f32(&[3], vec![1.0, f32::NAN, 2.0]).unwrap();
    let nan_for_number = HostArray::from_f32(&[3], vec![f32::NAN, f32::NAN, 2.0]).unwrap();
    let number_for_nan = HostArray::from_f32(&[3], vec![1.0, 0.0, 2.0]).unwrap();
    assert_eq!(same.count_mismatches(&want, 0.0), 0);
    assert_eq!(nan_for_number.count_mismatches(&want, 0.0), 1);
    assert_eq!(number_for_nan.count_mismatches(&want, 0.0), 1);
    // A NaN of another sign or payload is still a NaN.
    let other = HostArray::from_words(
        DType::F32,
        &[3],
        vec![1.0f32.to_bits(), 0xffc0_0001, 2.0f32.to_bits()],
    )
    .unwrap();
    assert_eq!(other.count_mismatches(&want, 0.0), 0);
}
