//! Fused runs equal unfused ones bit for bit: random kernels of elementwise chains,
//! broadcasts, reductions, stores and reloads of scratch refs, updates of windows and
//! remote DMAs, in every dtype and at sizes of one element, a few blocks and many
//! (spread over the cores), run by the CPU executor as it runs schedules (fused regions,
//! dead writes dropped) and one op at a time (`CpuExecutor::unfused`). Both use the same
//! element functions, so any difference is the fusion pass reordering, dropping or
//! aliasing something it must not. (Each op's values against XLA's are tests/ops.rs.)

mod common;

use common::simulate;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::device_sim::Executor;
use tpusim::kernel::{Args, Ctx, GridSpec, MemorySpace, PallasCall, Value};
use tpusim::{DType, HostArray, Mesh};

/// Deterministic inputs of `dtype`: floats spread over a few binades with some
/// negatives and zeros, integers small and signed.
fn input(dtype: DType, shape: &[usize], seed: u64) -> HostArray {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n: usize = shape.iter().product();
    let vals: Vec<f64> = (0..n)
        .map(|_| match dtype {
            DType::I32 | DType::I8 => rng.random_range(-20..20) as f64,
            _ => rng.random_range(-4.0..4.0f64),
        })
        .collect();
    HostArray::from_values(dtype, shape, &vals).unwrap()
}

/// One step of a random chain on `v` (from the pool `pool`), as its kind of data allows.
fn step<'c>(
    pl: &'c Ctx,
    a: &Args,
    rng: &mut ChaCha8Rng,
    pool: &[Value<'c>],
    shape: &[usize],
) -> Value<'c> {
    let v = &pool[rng.random_range(0..pool.len())];
    let w = &pool[rng.random_range(0..pool.len())];
    let t = v.dtype();
    let float = t.is_float();
    match rng.random_range(0..9) {
        0 if float => match rng.random_range(0..6) {
            0 => pl.exp(&(v * 0.25)),
            1 => pl.tanh(v),
            2 => pl.logistic(v),
            3 => pl.sin(v),
            4 => pl.erf(v),
            _ => pl.log1p(&pl.abs(v)),
        },
        0 => match rng.random_range(0..3) {
            0 => -v,
            1 => pl.abs(v),
            _ => pl.sign(v),
        },
        1 => v + w,
        2 => v * w,
        3 => match rng.random_range(0..2) {
            0 => pl.maximum(v, w),
            _ => pl.minimum(v, w),
        },
        4 => {
            let c = v.gt(w);
            pl.where_(&c, v, &(w - 1.0))
        }
        5 => {
            let wide = if float { DType::F32 } else { DType::I32 };
            v.astype(wide).astype(t)
        }
        6 => {
            // A row reduction broadcast back (a softmax's denominator).
            let r = if float { v.max(&[1]) } else { v.sum(&[1]) };
            let dims: Vec<usize> = (0..shape.len()).filter(|&d| d != 1).collect();
            let b = r.broadcast_in_dim(shape, &dims);
            v - &b
        }
        7 => {
            // Through a scratch ref: stored, then read back in place.
            pl.store(a.r("s"), v);
            let back = pl.read(a.r("s"));
            &back + 2.0
        }
        _ => {
            // An output written early, then overwritten later (the first write is dead).
            pl.store(a.r("y"), w);
            v - 3.0
        }
    }
}

/// A kernel of `steps` random steps on `dtype` arrays of `shape` (seeded): the last
/// value stored to `y`, row 0 of `y` updated from another value, `y` sent to the
/// right neighbour's `z` by a remote DMA.
fn kernel(dtype: DType, shape: Vec<usize>, steps: usize, seed: u64) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &shape, dtype)
        .output("y", MemorySpace::Vmem, &shape, dtype)
        .output("z", MemorySpace::Any, &shape, dtype)
        .vmem("s", &shape, dtype)
        .dma_sem("send")
        .dma_sem("recv");
    PallasCall::new("random_chain", spec, move |pl, a| {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut pool = vec![pl.load(a.r("x")), pl.read(a.r("x"))];
        for _ in 0..steps {
            let v = step(pl, a, &mut rng, &pool, &shape);
            pool.push(v);
            if pool.len() > 6 {
                pool.remove(rng.random_range(0..pool.len()));
            }
        }
        pl.store(a.r("y"), pool.last().expect("a value"));
        if shape[0] > 1 {
            let row: Vec<usize> = std::iter::once(1)
                .chain(shape[1..].iter().copied())
                .collect();
            let w = pool[0].slice(&vec![0; shape.len()], &row, &vec![1; shape.len()]);
            pl.store_window(a.r("y"), &vec![0; shape.len()], &(&w * 2.0));
        }
        let n = pl.num_devices();
        let right = (pl.axis_index("x") + 1) % n;
        let dma =
            pl.make_async_remote_copy(a.r("y"), a.r("z"), a.sem("send"), a.sem("recv"), right);
        dma.start();
        dma.wait();
    })
}

fn words(out: &[Vec<HostArray>]) -> Vec<Vec<u32>> {
    out.iter().flatten().map(|a| a.words.clone()).collect()
}

#[test]
fn random_kernels_run_fused_equal_unfused_bit_for_bit() {
    let shapes: [&[usize]; 5] = [&[1, 1], &[3, 37], &[17, 129], &[2, 3, 130], &[64, 1024]];
    let dtypes = [DType::F32, DType::BF16, DType::F16, DType::I32, DType::I8];
    let mut case = 0u64;
    for &dtype in &dtypes {
        for shape in shapes {
            for devices in [1, 2, 1] {
                case += 1;
                let call = kernel(dtype, shape.to_vec(), 20, case);
                let mesh = Mesh::new(devices, "x").unwrap();
                let inputs: Vec<Vec<HostArray>> = (0..devices)
                    .map(|d| vec![input(dtype, shape, case * 10 + d as u64)])
                    .collect();
                let fused = simulate(&call, &mesh, &inputs, &mut CpuExecutor::new()).unwrap();
                let plain = simulate(&call, &mesh, &inputs, &mut CpuExecutor::unfused()).unwrap();
                assert_eq!(
                    words(&fused),
                    words(&plain),
                    "case {case}: {dtype} {shape:?} on {devices} devices"
                );
            }
        }
    }
}

#[test]
fn runs_in_pieces_equal_whole_runs() {
    // Cut anywhere (a partitioned run's pieces), every piece run in turn.
    for (case, dtype) in [(101u64, DType::F32), (102, DType::BF16), (103, DType::I32)] {
        let call = kernel(dtype, vec![9, 300], 20, case);
        let mesh = Mesh::new(2, "x").unwrap();
        let plan = tpusim::run::Job::call(call, mesh).plan().unwrap();
        let (prog, sched) = (&plan.program, &plan.schedule);
        let inputs: Vec<Vec<HostArray>> = (0..2)
            .map(|d| vec![input(dtype, &[9, 300], case * 10 + d)])
            .collect();
        let cpu = CpuExecutor::unfused();
        let mut whole = cpu.prepare(prog, sched).unwrap();
        whole.upload(&inputs).unwrap();
        whole.run(1).unwrap();
        let want = words(&whole.read_outputs().unwrap());
        let ops = sched.ops.len();
        let mut rng = ChaCha8Rng::seed_from_u64(case);
        let mut cuts: Vec<usize> = (0..5).map(|_| rng.random_range(1..ops)).collect();
        cuts.push(ops);
        cuts.sort();
        let fused = CpuExecutor::new();
        let mut run = fused.prepare_pieces(prog, sched, &cuts).unwrap();
        run.upload(&inputs).unwrap();
        for k in 0..=cuts.len() {
            run.run_piece(k).unwrap();
        }
        assert_eq!(
            words(&run.read_outputs().unwrap()),
            want,
            "case {case}: cuts {cuts:?}"
        );
    }
}

#[test]
fn a_run_in_one_piece_leaves_all_its_memory_as_the_unfused_run() {
    // Run while tracing reads every allocation after the steps so far: a write nothing
    // in them reads (here scratch and values a later piece would use) must stay.
    for (case, dtype) in [(201u64, DType::F32), (202, DType::BF16)] {
        let call = kernel(dtype, vec![9, 300], 20, case);
        let mesh = Mesh::new(2, "x").unwrap();
        let plan = tpusim::run::Job::call(call, mesh).plan().unwrap();
        let (prog, sched) = (&plan.program, &plan.schedule);
        let inputs: Vec<Vec<HostArray>> = (0..2)
            .map(|d| vec![input(dtype, &[9, 300], case * 10 + d)])
            .collect();
        let memory = |exec: CpuExecutor| {
            let mut run = exec.prepare_pieces(prog, sched, &[]).unwrap();
            run.upload(&inputs).unwrap();
            run.run_piece(0).unwrap();
            let table = sched.memory(prog);
            (0..table.len())
                .map(|i| {
                    let (d, a) = table.place(i);
                    let n = table.allocs[a].numel();
                    let v = tpusim::ir::View::new(d, a, 0, n);
                    run.read_view(v, 4).unwrap()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            memory(CpuExecutor::new()),
            memory(CpuExecutor::unfused()),
            "case {case}"
        );
    }
}

#[test]
fn a_literal_run_does_every_op_even_writes_nothing_reads() {
    // What an executor's rates are measured on (bench's roof): kernels whose results
    // nothing reads. A fused run may drop such writes; a literal one must not.
    let spec = GridSpec::new()
        .output("y", MemorySpace::Vmem, &[8, 128], DType::F32)
        .vmem("s", &[8, 128], DType::F32);
    let call = PallasCall::new("unread", spec, |pl, a| {
        pl.fill(a.r("y"), 1.0);
        pl.fill(a.r("s"), 3.0);
    });
    let plan = tpusim::run::Job::call(call, Mesh::new(1, "x").unwrap())
        .plan()
        .unwrap();
    let (prog, sched) = (&plan.program, &plan.schedule);
    let s = prog
        .layout
        .allocs
        .iter()
        .position(|a| a.name == "s")
        .unwrap();
    let cpu = CpuExecutor::new();
    let mut run = cpu.prepare_literal(prog, sched).unwrap();
    run.run(1).unwrap();
    let bytes = run
        .read_view(tpusim::ir::View::new(0, s, 0, 1024), 4)
        .unwrap();
    let three = 3.0f32.to_bits().to_le_bytes();
    assert!(bytes.chunks(4).all(|w| w == three), "the unread fill ran");
}

#[test]
fn random_kernels_run_fused_on_the_gpu_equal_unfused_bit_for_bit() {
    // A region is one dispatch of a shader generated from its ops, computing with the
    // same WGSL functions as the one-op shaders: any difference is the region's lowering
    // (its loads, broadcasts, 16-bit words, outputs) or the fusion pass.
    let shapes: [&[usize]; 3] = [&[1, 1], &[3, 37], &[17, 129]];
    let dtypes = [DType::F32, DType::BF16, DType::F16, DType::I8];
    let mut g = common::gpu();
    let mut case = 500u64;
    let mut regions = 0;
    for &dtype in &dtypes {
        for shape in shapes {
            case += 1;
            let call = kernel(dtype, shape.to_vec(), 12, case);
            let mesh = Mesh::new(2, "x").unwrap();
            let inputs: Vec<Vec<HostArray>> = (0..2)
                .map(|d| vec![input(dtype, shape, case * 10 + d as u64)])
                .collect();
            let plan = tpusim::run::Job::call(call.clone(), mesh.clone())
                .plan()
                .unwrap();
            let (prog, sched) = (&plan.program, &plan.schedule);
            let fused_run = g.prepare_run(prog, sched).unwrap().dispatches();
            let literal_run = g.prepare_literal_run(prog, sched).unwrap().dispatches();
            assert!(fused_run <= literal_run, "case {case}");
            regions += usize::from(fused_run < literal_run);
            g.set_fusion(true);
            let fused = simulate(&call, &mesh, &inputs, &mut *g).unwrap();
            // Bindings of 1 KiB (larger regions run op by op) and 2 workgroups (every
            // invocation strides over many elements).
            g.limit_lowering(Some(1024), Some(2));
            let narrow = simulate(&call, &mesh, &inputs, &mut *g);
            g.limit_lowering(None, None);
            g.set_fusion(false);
            let plain = simulate(&call, &mesh, &inputs, &mut *g);
            g.set_fusion(true);
            let plain = words(&plain.unwrap());
            assert_eq!(words(&fused), plain, "case {case}: {dtype} {shape:?}");
            assert_eq!(
                words(&narrow.unwrap()),
                plain,
                "case {case}: {dtype} {shape:?}, narrow bindings"
            );
        }
    }
    // Most kernels have a chain to fuse: fewer dispatches.
    assert!(
        regions >= 8,
        "only {regions} of 12 kernels ran fewer dispatches fused"
    );
}

#[test]
fn compute_ops_are_named_by_their_primitive_in_the_timeline() {
    // What a person reads in a timeline: `exp`, `mul`, `gt`, `select`, not the families
    // (`unary`, `binary`, `compare`) the ops belong to.
    let shape = [8, 128];
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &shape, DType::F32)
        .output("y", MemorySpace::Vmem, &shape, DType::F32);
    let call = PallasCall::new("named", spec, |pl, a| {
        let x = pl.load(a.r("x"));
        let e = pl.exp(&x);
        let m = &e * &x;
        let c = m.gt(&x);
        pl.store(a.r("y"), &pl.where_(&c, &m, &x));
    });
    let model = tpusim::model::ModelSpec::preset("v5e").build().unwrap();
    let job = tpusim::run::Job::call(call, Mesh::new(1, "x").unwrap());
    let r = job.model(&model, None).unwrap();
    let json = r.chrome_trace("named");
    let names: std::collections::BTreeSet<String> = json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .filter_map(|e| e["name"].as_str().map(String::from))
        .collect();
    for want in ["exp", "mul", "gt", "select"] {
        assert!(names.contains(want), "{want} not in {names:?}");
    }
    for family in ["unary", "binary", "compare"] {
        assert!(!names.contains(family), "{family} in {names:?}");
    }
}

/// Values of `dtype` that test a sum's corners: NaNs, infinities, both zeros, values
/// that round, between ordinary ones (for integers: extremes that wrap).
fn corner_input(dtype: DType, shape: &[usize], seed: u64) -> HostArray {
    let mut x = input(dtype, shape, seed);
    let corners = common::corners(dtype);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    for w in x.words.iter_mut() {
        if rng.random_range(0..4) == 0 {
            *w = dtype.bits_of(corners[rng.random_range(0..corners.len())]);
        }
    }
    x
}

#[test]
fn ring_reductions_fused_with_their_copies_equal_unfused_bit_for_bit() {
    use tpusim::collectives::{Options, Registry};
    use tpusim::device_sim::fuse::{fuse_with, Joins, Keep, Step};
    use tpusim::ir::{DataOp, ReduceOp};
    use tpusim::mesh::Placement;
    let registry = Registry::builtin();
    let mut case = 0u64;
    for name in ["psum", "psum_scatter", "ring_allreduce"] {
        let base = registry.by_name(name).unwrap();
        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
            if op != ReduceOp::Sum && !base.takes().op {
                continue;
            }
            let c = match base.takes().op {
                true => base.with_options(&Options { op, perm: None }).unwrap(),
                false => base.clone(),
            };
            for dtype in DType::COLLECTIVE {
                for (devices, shape) in [(4, vec![8, 37]), (3, vec![6, 130]), (2, vec![64, 1024])] {
                    case += 1;
                    let mesh = Mesh::new(devices, "x").unwrap();
                    let job = tpusim::run::Job::collective(c.clone(), Placement::whole(mesh))
                        .with_shape(&shape)
                        .with_dtype(dtype);
                    let plan = job.plan().unwrap();
                    let inputs: Vec<Vec<HostArray>> = (0..devices)
                        .map(|d| {
                            let a = &plan.program.layout.allocs[plan.program.inputs[0]];
                            vec![corner_input(dtype, &a.shape, case * 10 + d as u64)]
                        })
                        .collect();
                    let run = |exec: &mut dyn Executor| {
                        let mut r = exec.prepare(&plan.program, &plan.schedule).unwrap();
                        r.upload(&inputs).unwrap();
                        r.run(2).unwrap();
                        words(&r.read_outputs().unwrap())
                    };
                    let fused = run(&mut CpuExecutor::new());
                    let plain = run(&mut CpuExecutor::unfused());
                    assert!(
                        fused == plain,
                        "case {case}: {name} {op:?} {dtype} {shape:?} on {devices} devices"
                    );
                    // The path under test is taken (the CPU executor's joins): a sum of
                    // 8,192 elements or more joins a region with the copy that feeds it
                    // (in the dtypes whose copies join regions).
                    let joins = Joins {
                        sums: true,
                        ..Joins::default()
                    };
                    let steps =
                        fuse_with(&plan.program, &plan.schedule, &[], Keep::Outputs, joins).steps;
                    let joined = steps.iter().any(|s| match s {
                        Step::Region(r) => r
                            .ops
                            .iter()
                            .any(|&i| matches!(plan.schedule.ops[i], DataOp::Accumulate { .. })),
                        Step::Op(_) => false,
                    });
                    let moves = matches!(dtype, DType::F32 | DType::I32 | DType::BF16)
                        && shape[0] * shape[1] / devices >= 1 << 13;
                    // psum's local copy into its receive buffer, each step, is deferred
                    // past the remote DMA into the region of the sum that reads it, and
                    // its write dropped: nothing writes the receive buffer.
                    let recv = plan
                        .program
                        .layout
                        .allocs
                        .iter()
                        .position(|a| a.name == "vmem_recv");
                    let writes_recv = steps.iter().any(|s| match s {
                        Step::Region(r) => r.writes().any(|v| Some(v.alloc()) == recv),
                        Step::Op(i) => plan.schedule.ops[*i]
                            .writes()
                            .any(|v| Some(v.alloc()) == recv),
                    });
                    if name == "psum" {
                        assert_eq!(writes_recv, !(op == ReduceOp::Sum && moves), "case {case}");
                    }
                    assert_eq!(
                        joined,
                        op == ReduceOp::Sum && moves,
                        "case {case}: {name} {op:?}"
                    );
                }
            }
        }
    }
}

/// Chains whose constants the lowering places in memory a dead value held (gelu as
/// JAX writes it, and one with the constants between wide values), and a constant
/// stored to an output after a wide value covered it.
fn constant_chain(which: usize, dtype: DType, shape: Vec<usize>) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &shape, dtype)
        .output("y", MemorySpace::Vmem, &shape, dtype)
        .output("s", MemorySpace::Vmem, &[1], dtype);
    PallasCall::new("constant_chain", spec, move |pl, a| {
        let x = pl.load(a.r("x"));
        let y = match which {
            0 => {
                let cube = &(&(&x * &x) * &x) * 0.044715;
                let inner = &(&x + &cube) * 0.797_884_560_802_865_4;
                let t = pl.tanh(&inner);
                &(&(&t + 1.0) * &x) * 0.5
            }
            _ => {
                let a1 = &(&x * 3.0) - 1.0;
                let a2 = &(&a1 * &x) + 0.5;
                let a3 = &pl.maximum(&a2, &(&a1 * 0.25)) - 2.0;
                &(&a3 * &a1) * 0.125
            }
        };
        pl.store(a.r("y"), &y);
        pl.store(a.r("s"), &pl.read(a.r("s")).astype(dtype));
    })
}

#[test]
fn chains_with_constants_in_reused_memory_fuse_whole_and_equal_unfused() {
    use tpusim::device_sim::cpu::CpuPlan;
    use tpusim::device_sim::fuse::Step;
    for (case, (dtype, shape)) in [
        (DType::F32, vec![1, 1]),
        (DType::F32, vec![3, 37]),
        (DType::BF16, vec![17, 129]),
        (DType::F16, vec![64, 1024]),
        (DType::F32, vec![130, 1031]),
    ]
    .into_iter()
    .enumerate()
    {
        for which in 0..2 {
            let call = constant_chain(which, dtype, shape.clone());
            let mesh = Mesh::new(1, "x").unwrap();
            let inputs = vec![vec![input(dtype, &shape, case as u64)]];
            let fused = simulate(&call, &mesh, &inputs, &mut CpuExecutor::new()).unwrap();
            let plain = simulate(&call, &mesh, &inputs, &mut CpuExecutor::unfused()).unwrap();
            assert_eq!(words(&fused), words(&plain), "{which}: {dtype} {shape:?}");
            // The chain from x to y is one region (no value written and read back).
            let plan = tpusim::run::Job::call(call, mesh).plan().unwrap();
            let steps = CpuPlan::of(&plan.program, &plan.schedule)
                .fused()
                .steps
                .clone();
            let regions = steps
                .iter()
                .filter(|s| matches!(s, Step::Region(r) if r.n > 1))
                .count();
            if shape[0] * shape[1] > 1 {
                assert_eq!(regions, 1, "{which}: {dtype} {shape:?}: {steps:?}");
            }
        }
    }
}

/// A run prepared to be read through some of its outputs only (`run`'s check reads
/// output 0) leaves those as the unfused run does, bit for bit, over two runs on the
/// same memory: every builtin collective (psum's scratch `hbm_buf` goes out as an
/// output nobody reads: every read is then forwarded to the inputs and the temporaries
/// live in the output), with NaNs, infinities and wrapping integers; and random kernels
/// (a VMEM output ends copied to HBM, outputs are written early and overwritten).
/// The others it says it does not give.
#[test]
fn runs_read_through_some_outputs_equal_unfused_on_those_bit_for_bit() {
    use tpusim::collectives::{Options, Registry};
    use tpusim::ir::{Program, ReduceOp, Schedule};
    use tpusim::mesh::Placement;
    fn compare(
        prog: &Program,
        sched: &Schedule,
        inputs: &[Vec<HostArray>],
        read: &[usize],
    ) -> bool {
        let plain = CpuExecutor::unfused();
        let mut want = plain.prepare(prog, sched).unwrap();
        want.upload(inputs).unwrap();
        want.run(2).unwrap();
        let want = want.read_outputs().unwrap();
        let cpu = CpuExecutor::new();
        let mut got = cpu.prepare_reading(prog, sched, read).unwrap();
        got.upload(inputs).unwrap();
        got.run(2).unwrap();
        for (d, want) in want.iter().enumerate() {
            for (k, want) in want.iter().enumerate() {
                match got.output_words(d, k) {
                    Some(w) if read.contains(&k) => {
                        if w != &want.words[..] {
                            return false;
                        }
                    }
                    None if !read.contains(&k) => {}
                    other => panic!("output {k} of device {d} read {read:?}: {other:?}"),
                }
            }
        }
        true
    }
    let registry = Registry::builtin();
    let mut case = 0u64;
    let mut names = Vec::new();
    for base in registry.iter() {
        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
            if op != ReduceOp::Sum && !base.takes().op {
                continue;
            }
            let c = match base.takes().op {
                true => base.with_options(&Options { op, perm: None }).unwrap(),
                false => base.clone(),
            };
            for dtype in DType::COLLECTIVE {
                for (devices, shape) in [(4, vec![8, 40]), (3, vec![6, 130]), (2, vec![64, 1024])] {
                    case += 1;
                    let mesh = Mesh::new(devices, "x").unwrap();
                    let job = tpusim::run::Job::collective(c.clone(), Placement::whole(mesh))
                        .with_shape(&shape)
                        .with_dtype(dtype);
                    let Ok(plan) = job.plan() else { continue };
                    let prog = &plan.program;
                    let inputs: Vec<Vec<HostArray>> = (0..devices)
                        .map(|d| {
                            prog.inputs
                                .iter()
                                .map(|&a| {
                                    let shape = &prog.layout.allocs[a].shape;
                                    corner_input(dtype, shape, case * 10 + d as u64)
                                })
                                .collect()
                        })
                        .collect();
                    assert!(
                        compare(prog, &plan.schedule, &inputs, &[0]),
                        "case {case}: {} {op:?} {dtype} {shape:?} on {devices} devices",
                        c.name()
                    );
                    names.push(c.name().to_string());
                }
            }
        }
    }
    assert!(
        names.iter().any(|n| n == "psum") && names.len() > 100,
        "{names:?}"
    );
    // The largest spreads its regions over the cores.
    let shapes: [&[usize]; 4] = [&[3, 37], &[17, 129], &[64, 1024], &[256, 1024]];
    for dtype in [DType::F32, DType::BF16, DType::I32] {
        for shape in shapes {
            for devices in [1, 2] {
                case += 1;
                let call = kernel(dtype, shape.to_vec(), 20, case);
                let plan = tpusim::run::Job::call(call, Mesh::new(devices, "x").unwrap())
                    .plan()
                    .unwrap();
                let inputs: Vec<Vec<HostArray>> = (0..devices)
                    .map(|d| vec![input(dtype, shape, case * 10 + d as u64)])
                    .collect();
                for read in [&[0][..], &[1], &[0, 1]] {
                    assert!(
                        compare(&plan.program, &plan.schedule, &inputs, read),
                        "case {case}: {dtype} {shape:?} on {devices} devices, read {read:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_constant_over_a_dead_values_first_element_leaves_the_rest_of_it_unwritten() {
    // t = x * 3 (stored); u = t + 1; t[0] = 0.5 (the lowering places constants in dead values'
    // memory); y = u * t[0]. The constant is stored after its region's blocks, so
    // only t[0] is read after the region: t's wide write is dead. With 64 devices the
    // read of t[0] lies past the region builder's look-ahead, where only the liveness
    // pass over the whole run sees it. Fused equals unfused bit for bit, and equals
    // (x * 3 + 1) * 0.5 computed in f64 (exact here: x is a multiple of 1/4).
    use tpusim::device_sim::fuse::{fuse, Keep, Step};
    use tpusim::kernel::ds;
    use tpusim::run::Job;
    for (devices, shape) in [(1, vec![3, 37]), (64, vec![8, 128]), (2, vec![64, 1024])] {
        let spec = GridSpec::new()
            .input("x", MemorySpace::Vmem, &shape, DType::F32)
            .output("y", MemorySpace::Vmem, &shape, DType::F32)
            .vmem("t", &shape, DType::F32);
        let dims = shape.clone();
        let call = PallasCall::new("k", spec, move |pl: &Ctx, a: &Args| {
            let x = pl.load(a.r("x"));
            let t = &x * 3.0;
            pl.store(a.r("t"), &t);
            let u = &t + 1.0;
            let first = a.r("t").flat().slice(ds(0, 1));
            pl.fill(first, 0.5);
            let s = pl.read(first).broadcast_in_dim(&dims, &[dims.len() - 1]);
            pl.store(a.r("y"), &(&u * &s));
        });
        let mesh = Mesh::new(devices, "x").unwrap();
        let n: usize = shape.iter().product();
        let inputs: Vec<Vec<HostArray>> = (0..devices)
            .map(|d| {
                let vals: Vec<f64> = (0..n)
                    .map(|i| ((i * 7 + d) % 41) as f64 / 4.0 - 5.0)
                    .collect();
                vec![HostArray::from_values(DType::F32, &shape, &vals).unwrap()]
            })
            .collect();
        let fused = simulate(&call, &mesh, &inputs, &mut CpuExecutor::new()).unwrap();
        let plain = simulate(&call, &mesh, &inputs, &mut CpuExecutor::unfused()).unwrap();
        assert_eq!(
            words(&fused),
            words(&plain),
            "{shape:?} on {devices} devices"
        );
        for (d, out) in fused.iter().enumerate() {
            let want: Vec<f32> = (0..n)
                .map(|i| ((((i * 7 + d) % 41) as f64 / 4.0 - 5.0) * 3.0 + 1.0) * 0.5)
                .map(|v| v as f32)
                .collect();
            let got: Vec<f32> = out[0].words.iter().map(|&w| f32::from_bits(w)).collect();
            assert_eq!(got, want, "device {d}: {shape:?} on {devices} devices");
        }
        let plan = Job::call(call, mesh).plan().unwrap();
        let t = plan
            .program
            .layout
            .allocs
            .iter()
            .position(|a| a.name == "t")
            .unwrap();
        let f = fuse(&plan.program, &plan.schedule, &[], Keep::Outputs);
        let ops = f.ops.as_deref().unwrap_or(&plan.schedule.ops);
        for s in &f.steps {
            let writes: Vec<_> = match s {
                Step::Op(i) => ops[*i].writes().collect(),
                Step::Region(r) => r.writes().collect(),
            };
            for w in writes.iter().filter(|w| w.alloc() == t) {
                assert_eq!(
                    w.len(),
                    1,
                    "{shape:?} on {devices} devices: t written past t[0]: {s:?}"
                );
            }
        }
    }
}

/// The steps of the CPU executor's plan of `call` on `mesh` (its own joins), with the
/// ops they index.
fn cpu_steps(
    call: PallasCall,
    mesh: Mesh,
) -> (
    tpusim::ir::Program,
    Vec<tpusim::device_sim::fuse::Step>,
    Vec<tpusim::ir::DataOp>,
) {
    use tpusim::device_sim::cpu::CpuPlan;
    let plan = tpusim::run::Job::call(call, mesh).plan().unwrap();
    let cpu = CpuPlan::of(&plan.program, &plan.schedule);
    let fused = cpu.fused();
    let ops = fused
        .ops
        .clone()
        .unwrap_or_else(|| plan.schedule.ops.clone());
    (plan.program.clone(), fused.steps.clone(), ops)
}

#[test]
fn a_constant_over_a_dead_value_read_by_a_later_region_leaves_the_rest_unwritten() {
    // t = x * 3 (stored, then dead); y = t + 1; t[0] = 0.5; w = z * t[0], with z of
    // another shape (so t[0] is read by a later region, from memory), then 300 ops on w
    // (+1, -1) past the region builder's look-ahead (which then keeps t's wide write). t[0] is
    // stored after its region's blocks, so the liveness pass (`live::prune`) must see
    // that t's wide write of that element is dead, and t's other elements with it.
    use tpusim::device_sim::fuse::Step;
    use tpusim::kernel::ds;
    for (devices, dtype, shape) in [
        (1, DType::F32, vec![3, 37]),
        (2, DType::BF16, vec![16, 128]),
        (1, DType::F32, vec![64, 1024]),
    ] {
        let zshape = vec![shape[0] + 1, 5];
        let spec = GridSpec::new()
            .input("x", MemorySpace::Vmem, &shape, dtype)
            .input("z", MemorySpace::Vmem, &zshape, dtype)
            .output("y", MemorySpace::Vmem, &shape, dtype)
            .output("w", MemorySpace::Vmem, &zshape, dtype)
            .vmem("t", &shape, dtype);
        let zdims = zshape.clone();
        let call = PallasCall::new("k", spec, move |pl: &Ctx, a: &Args| {
            let x = pl.load(a.r("x"));
            let t = &x * 3.0;
            pl.store(a.r("t"), &t);
            pl.store(a.r("y"), &(&t + 1.0));
            let first = a.r("t").flat().slice(ds(0, 1));
            pl.fill(first, 0.5);
            let s = pl.read(first).broadcast_in_dim(&zdims, &[1]);
            let mut w = &pl.load(a.r("z")) * &s;
            for _ in 0..150 {
                w = &(&w + 1.0) - 1.0;
            }
            pl.store(a.r("w"), &w);
        });
        let mesh = Mesh::new(devices, "x").unwrap();
        let quarter = |i: usize, d: usize| ((i * 7 + d) % 41) as f64 / 4.0 - 5.0;
        let inputs: Vec<Vec<HostArray>> = (0..devices)
            .map(|d| {
                let (n, m) = (shape.iter().product(), zshape.iter().product());
                let xs: Vec<f64> = (0..n).map(|i| quarter(i, d)).collect();
                let zs: Vec<f64> = (0..m).map(|i| quarter(i + 3, d)).collect();
                vec![
                    HostArray::from_values(dtype, &shape, &xs).unwrap(),
                    HostArray::from_values(dtype, &zshape, &zs).unwrap(),
                ]
            })
            .collect();
        let case = format!("{dtype} {shape:?} on {devices} devices");
        let fused = simulate(&call, &mesh, &inputs, &mut CpuExecutor::new()).unwrap();
        let plain = simulate(&call, &mesh, &inputs, &mut CpuExecutor::unfused()).unwrap();
        assert_eq!(words(&fused), words(&plain), "{case}");
        // Exact in f64 and in every dtype here: quarters of small integers.
        for (d, out) in fused.iter().enumerate() {
            let y: Vec<f64> = (0..out[0].len())
                .map(|i| quarter(i, d) * 3.0 + 1.0)
                .collect();
            let w: Vec<f64> = (0..out[1].len()).map(|i| quarter(i + 3, d) * 0.5).collect();
            assert_eq!(out[0].values(), y, "y, device {d}: {case}");
            assert_eq!(out[1].values(), w, "w, device {d}: {case}");
        }
        let (program, steps, ops) = cpu_steps(call, mesh);
        let t = program.layout.allocs.iter().position(|a| a.name == "t");
        for s in &steps {
            let writes: Vec<_> = match s {
                Step::Op(i) => ops[*i].writes().collect(),
                Step::Region(r) => r.writes().collect(),
            };
            for w in writes.iter().filter(|w| Some(w.alloc()) == t) {
                assert_eq!(w.len(), 1, "{case}: t written past t[0]: {s:?}");
            }
        }
    }
}

#[test]
fn gelu_as_jax_orders_it_on_many_devices_is_one_region_per_device() {
    // cdf = 0.5 * (tanh(x) + 1); y = x * cdf, with the values placed as the lowering
    // places JAX's: 0.5 lands on the first element of the dead tanh value, and 0.5 *
    // (..) on the rest of it (64 elements on). Whether tanh's other elements are read
    // later is asked of the ops of its own device: with 64 devices the schedule's next
    // 256 ops are those of every device, a few of each. Fused equals unfused bit for
    // bit, and the chain from x to y is one region on every device (f16's stores and
    // loads stay copies of their own: `y2`'s chain is a region of its own there).
    use tpusim::device_sim::fuse::{Instr, Pattern, Region, Step};
    use tpusim::ir::Unary;
    for (devices, dtype, shape) in [
        (64, DType::F32, vec![3, 37]),
        (64, DType::BF16, vec![17, 129]),
        (64, DType::F16, vec![8, 128]),
        (2, DType::F32, vec![64, 1024]),
    ] {
        let spec = GridSpec::new()
            .input("x", MemorySpace::Vmem, &shape, dtype)
            .output("y", MemorySpace::Vmem, &shape, dtype)
            .output("y2", MemorySpace::Vmem, &shape, dtype);
        let call = PallasCall::new("gelu", spec, move |pl: &Ctx, a: &Args| {
            let x = pl.load(a.r("x"));
            let e = pl.tanh(&x);
            let f = &e + 1.0;
            drop(e);
            let cdf = &f * 0.5;
            drop(f);
            pl.store(a.r("y"), &(&x * &cdf));
            // More ops of this device after the chain (past the schedule's look-ahead
            // of 256 ops on 64 devices).
            let mut v = &x * 2.0;
            for _ in 0..4 {
                v = &v - 1.0;
            }
            pl.store(a.r("y2"), &v);
        });
        let mesh = Mesh::new(devices, "x").unwrap();
        let inputs: Vec<Vec<HostArray>> = (0..devices)
            .map(|d| vec![input(dtype, &shape, d as u64)])
            .collect();
        let case = format!("{dtype} {shape:?} on {devices} devices");
        let fused = simulate(&call, &mesh, &inputs, &mut CpuExecutor::new()).unwrap();
        let plain = simulate(&call, &mesh, &inputs, &mut CpuExecutor::unfused()).unwrap();
        assert_eq!(words(&fused), words(&plain), "{case}");
        // No region reads a constant back from memory (the 0.5 another region stored):
        // the chain's constants are its own registers.
        let (_, steps, _) = cpu_steps(call, mesh);
        let regions: Vec<&Region> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Region(r) => Some(&**r),
                Step::Op(_) => None,
            })
            .collect();
        for r in &regions {
            assert!(
                r.inputs.iter().all(|i| i.pattern != Pattern::Scalar),
                "{case}: {r:#?}"
            );
        }
        let tanh = |r: &Region| {
            r.instrs
                .iter()
                .any(|i| matches!(i, Instr::Unary(Unary::Tanh, ..)))
        };
        let chains = regions.iter().filter(|r| tanh(r)).count();
        assert_eq!(chains, devices, "{case}");
    }
}
