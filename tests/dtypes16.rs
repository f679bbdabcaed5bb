//! f16 and bf16: 16-bit elements packed two per GPU word, rounded to nearest even after
//! every accumulate. The GPU gives the CPU oracle's results bit for bit (every
//! collective, odd sizes and offsets, every bit pattern of one operand), and both agree
//! with the XLA-semantics reference within the 16-bit tolerance, exactly on integer data.

mod common;

use half::{bf16, f16};
use rand::{Rng, SeedableRng};
use tpusim::collectives::{Collective, Options, Registry};
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::device_sim::{count_wrong, Executor};
use tpusim::kernel::ReduceOp;
use tpusim::run::random_inputs;
use tpusim::sched::{schedule, Eager, ScheduleSpec};
use tpusim::{DType, HostArray, Mesh};

const HALVES: [DType; 2] = [DType::F16, DType::BF16];

/// Runs `c` on `inputs` on the CPU and the GPU; asserts the two are bit-identical and
/// returns the result.
fn both(
    c: &dyn Collective,
    mesh: &Mesh,
    shape: &[usize],
    dtype: DType,
    spec: &str,
    inputs: Option<Vec<Vec<HostArray>>>,
) -> (Vec<Vec<HostArray>>, Vec<Vec<HostArray>>) {
    let call = c.call(mesh, shape, dtype).unwrap();
    let policy = ScheduleSpec::parse(spec).unwrap();
    let (program, sched) = common::plan(&call, mesh, policy).unwrap();
    let inputs = inputs.unwrap_or_else(|| random_inputs(&program, 7).unwrap());
    let cpu = CpuExecutor::new()
        .execute(&program, &sched, &inputs)
        .unwrap();
    let gpu = common::gpu().execute(&program, &sched, &inputs).unwrap();
    assert!(
        cpu == gpu,
        "{} P={} {shape:?} {dtype} {spec}: GPU differs from the CPU oracle",
        c.name(),
        mesh.size()
    );
    (inputs, cpu)
}

#[test]
fn every_collective_is_bit_identical_on_gpu_and_cpu_and_matches_the_reference() {
    let reg = Registry::builtin();
    for c in reg.iter() {
        for p in [3usize, 4] {
            let mesh = Mesh::new(p, "x").unwrap();
            let m = c.rows_multiple(p).max(1);
            // The default shape, and odd element counts: 16-bit ops that start and end
            // mid-word (shader copies and accumulates instead of buffer copies).
            for shape in [c.default_shape(p), vec![m, 3], vec![3 * m, 5]] {
                for dtype in HALVES {
                    for spec in ["eager", "random:3"] {
                        let (inputs, got) = both(c.as_ref(), &mesh, &shape, dtype, spec, None);
                        let want = c.reference(&inputs).unwrap();
                        let tol = c.tolerance_for(dtype, p);
                        assert_eq!(
                            count_wrong(&got, &want, tol),
                            0,
                            "{} P={p} {shape:?} {dtype} {spec}",
                            c.name()
                        );
                    }
                }
            }
        }
    }
}

/// Inputs of `program`'s shape from `value(device, element)`.
fn inputs_from(
    c: &dyn Collective,
    mesh: &Mesh,
    shape: &[usize],
    dtype: DType,
    value: impl Fn(usize, usize) -> u32,
) -> Vec<Vec<HostArray>> {
    let program = c
        .call(mesh, shape, dtype)
        .and_then(|k| k.lower(mesh))
        .unwrap();
    let a = &program.layout.allocs[program.inputs[0]];
    (0..mesh.size())
        .map(|d| {
            vec![HostArray {
                dtype,
                shape: a.shape.clone(),
                words: (0..a.numel()).map(|i| value(d, i)).collect(),
            }]
        })
        .collect()
}

#[test]
fn sums_of_small_integers_are_exact() {
    let reg = Registry::builtin();
    let mesh = Mesh::new(4, "x").unwrap();
    for name in ["psum", "ring_allreduce", "psum_scatter"] {
        let c = reg.by_name(name).unwrap();
        let shape = c.default_shape(4);
        for dtype in HALVES {
            let inputs = inputs_from(c.as_ref(), &mesh, &shape, dtype, |d, i| {
                dtype.bits_of(((i * 7 + d * 13) % 61) as f64 - 30.0)
            });
            let (inputs, got) = both(c.as_ref(), &mesh, &shape, dtype, "eager", Some(inputs));
            let want = c.reference(&inputs).unwrap();
            assert_eq!(count_wrong(&got, &want, 0.0), 0, "{name} {dtype}");
        }
    }
}

/// A finite 16-bit pattern (NaNs and infinities, whose sums' NaN payloads are not
/// specified, become zero).
fn finite(dtype: DType, bits: u16) -> u32 {
    let exp_all_ones = match dtype {
        DType::F16 => bits & 0x7c00 == 0x7c00,
        _ => bits & 0x7f80 == 0x7f80,
    };
    if exp_all_ones {
        0
    } else {
        bits as u32
    }
}

#[test]
fn every_bit_pattern_sums_maxes_and_mins_as_the_cpu_does() {
    // Device 0 holds every finite pattern; device 1 random patterns, half of them tiny
    // (subnormals and the smallest normals, where a GPU may flush f32 arithmetic).
    let reg = Registry::builtin();
    let mesh = Mesh::new(2, "x").unwrap();
    let shape = [512, 128];
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let other: Vec<u16> = (0..1 << 16)
        .map(|i| {
            let r: u16 = rng.random();
            if i % 2 == 0 {
                r & 0x80ff
            } else {
                r
            }
        })
        .collect();
    for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
        let c = reg.get("psum", &Options { op, perm: None }).unwrap();
        for dtype in HALVES {
            let inputs = inputs_from(c.as_ref(), &mesh, &shape, dtype, |d, i| {
                let bits = if d == 0 { i as u16 } else { other[i] };
                finite(dtype, bits)
            });
            // `both` asserts the GPU's bits equal the CPU's.
            both(c.as_ref(), &mesh, &shape, dtype, "eager", Some(inputs));
        }
    }
}

#[test]
fn the_cpu_sum_is_the_correctly_rounded_sum() {
    // f32 holds more than 2p + 2 bits of either format, so the f32 sum rounded once is
    // the exact sum rounded once (checked against f64, rounded directly).
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    for _ in 0..200_000 {
        let (a, b): (u16, u16) = (rng.random(), rng.random());
        let (x, y) = (f16::from_bits(a), f16::from_bits(b));
        if x.is_finite() && y.is_finite() {
            let mut d = [a as u32];
            tpusim::device_sim::cpu::accumulate_words(
                &mut d,
                &[b as u32],
                ReduceOp::Sum,
                DType::F16,
            );
            let want = f16::from_f64(x.to_f64() + y.to_f64());
            assert_eq!(f16::from_bits(d[0] as u16), want, "{x} + {y}");
        }
        let (x, y) = (bf16::from_bits(a), bf16::from_bits(b));
        if x.is_finite() && y.is_finite() {
            let mut d = [a as u32];
            tpusim::device_sim::cpu::accumulate_words(
                &mut d,
                &[b as u32],
                ReduceOp::Sum,
                DType::BF16,
            );
            let want = bf16::from_f64(x.to_f64() + y.to_f64());
            assert_eq!(bf16::from_bits(d[0] as u16), want, "{x} + {y}");
        }
    }
}

#[test]
fn a_psum_over_one_axis_of_a_mesh_runs_in_f16() {
    let reg = Registry::builtin();
    let c = reg.by_name("psum").unwrap();
    let mesh = Mesh::with_axes(&[("x", 2), ("y", 4)]).unwrap();
    for dtype in HALVES {
        let shape = c.default_shape(4);
        let cpu = common::run_along(
            &c,
            &mesh,
            "y",
            &shape,
            dtype,
            &mut CpuExecutor::new(),
            1,
            ScheduleSpec::parse("eager").unwrap(),
        )
        .unwrap();
        assert_eq!(cpu.wrong, 0, "{dtype}");
        let gpu = common::run_along(
            &c,
            &mesh,
            "y",
            &shape,
            dtype,
            &mut *common::gpu(),
            1,
            ScheduleSpec::parse("eager").unwrap(),
        )
        .unwrap();
        assert_eq!(gpu.wrong, 0, "{dtype}");
    }
}

#[test]
fn sixteen_bit_refs_count_two_bytes_per_element() {
    // DMA byte counts (and so semaphore values and the cost model) follow the dtype.
    let reg = Registry::builtin();
    let c = reg.by_name("ppermute").unwrap();
    let mesh = Mesh::new(2, "x").unwrap();
    let bytes = |dtype| {
        let program = c
            .call(&mesh, &[8, 128], dtype)
            .and_then(|k| k.lower(&mesh))
            .unwrap();
        let sched = schedule(&program, &mut Eager::default()).unwrap();
        sched.bytes_copied(&program)
    };
    assert_eq!(bytes(DType::F32), 2 * bytes(DType::BF16));
    assert_eq!(bytes(DType::F16), bytes(DType::BF16));
}

#[test]
fn the_2d_torus_all_reduce_is_bit_identical_in_16_bit() {
    let reg = Registry::builtin();
    let c = reg.by_name("allreduce_2d").unwrap();
    for axes in [[("x", 2), ("y", 2)], [("x", 2), ("y", 3)]] {
        let mesh = Mesh::with_axes(&axes).unwrap();
        let shape = c.default_shape(mesh.size());
        for dtype in HALVES {
            let (inputs, got) = both(c.as_ref(), &mesh, &shape, dtype, "random:9", None);
            let want = c.reference(&inputs).unwrap();
            let tol = c.tolerance_for(dtype, mesh.size());
            assert_eq!(count_wrong(&got, &want, tol), 0, "{axes:?} {dtype}");
        }
    }
}
