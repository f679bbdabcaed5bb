//! Memory lent to the CPU executor (`CpuExecutor::prepare_lent`, as Python lends XLA's
//! buffers): the same outputs as a run in the executor's own memory, the caller's inputs
//! left as they were even where the kernel writes them, and outputs zeroed exactly where
//! the run does not write them before reading them (`Coverage`).

use tpusim::collectives::Registry;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::device_sim::cpu::CpuPlan;
use tpusim::device_sim::{Coverage, Lent, Prepared};
use tpusim::ir::{DataOp, ReduceOp, Uninit};
use tpusim::kernel::{ds, GridSpec, MemorySpace, PallasCall};
use tpusim::mesh::Placement;
use tpusim::run::{random_inputs, Job, Plan};
use tpusim::{DType, HostArray, Mesh};

/// Words per device per operand.
type Words = Vec<Vec<Vec<u32>>>;

/// Runs `plan` with every input and output lent (outputs start as `garbage`): the
/// outputs, and the inputs as the caller holds them after.
fn run_lent(plan: &Plan, inputs: &[Vec<HostArray>], garbage: u32) -> (Words, Words) {
    run_lent_with(
        plan,
        &CpuPlan::of(&plan.program, &plan.schedule),
        inputs,
        garbage,
    )
}

/// [`run_lent`] with the CPU executor's plan `cov` (and the buffers it keeps).
fn run_lent_with(
    plan: &Plan,
    cov: &CpuPlan,
    inputs: &[Vec<HostArray>],
    garbage: u32,
) -> (Words, Words) {
    let prog = &plan.program;
    let ins: Words = inputs
        .iter()
        .map(|d| d.iter().map(|a| a.words.clone()).collect())
        .collect();
    let mut outs: Words = (0..prog.devices)
        .map(|_| {
            prog.outputs
                .iter()
                .map(|&a| vec![garbage; prog.layout.allocs[a].numel()])
                .collect()
        })
        .collect();
    {
        let mut lent = Vec::new();
        for (d, dev) in ins.iter().enumerate() {
            for (i, w) in dev.iter().enumerate() {
                lent.push(Lent::Input {
                    device: d,
                    alloc: prog.inputs[i],
                    words: w,
                });
            }
        }
        for (d, dev) in outs.iter_mut().enumerate() {
            for (o, w) in dev.iter_mut().enumerate() {
                lent.push(Lent::Output {
                    device: d,
                    alloc: prog.outputs[o],
                    words: w,
                });
            }
        }
        let cpu = CpuExecutor::new();
        let mut run = cpu.prepare_lent(prog, &plan.schedule, cov, lent).unwrap();
        run.run(1).unwrap();
    }
    (outs, ins)
}

fn words(out: &[Vec<HostArray>]) -> Words {
    out.iter()
        .map(|d| d.iter().map(|a| a.words.clone()).collect())
        .collect()
}

#[test]
fn every_shipped_collective_gives_the_same_outputs_in_lent_memory() {
    let reg = Registry::builtin();
    for c in reg.iter() {
        for dtype in [DType::F32, DType::I32] {
            let mesh = Mesh::new(4, "x").unwrap();
            let job = Job::collective(c.clone(), Placement::whole(mesh)).with_dtype(dtype);
            let Ok(plan) = job.plan() else { continue };
            let inputs = random_inputs(&plan.program, 7).unwrap();
            let want = plan.execute(&mut CpuExecutor::new(), &inputs).unwrap();
            let (got, ins) = run_lent(&plan, &inputs, 0xdead_beef);
            assert_eq!(got, words(&want), "{} {dtype}", c.name());
            assert_eq!(ins, words(&inputs), "{} {dtype}: the inputs stay", c.name());
        }
    }
}

/// Device-local: `y[:half] = x[:half]` by a DMA; `acc += x[:half]` in VMEM (its HBM
/// output written whole after); `z` read (into `v`) before it is written whole; `whole`
/// written whole; then `x` overwritten (a DMA from a filled scratch).
fn writes_its_input() -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Any, &[16, 128], DType::F32)
        .output("y", MemorySpace::Any, &[16, 128], DType::F32)
        .output("acc", MemorySpace::Vmem, &[8, 128], DType::F32)
        .output("whole", MemorySpace::Any, &[8, 128], DType::F32)
        .output("z", MemorySpace::Any, &[8, 128], DType::F32)
        .vmem("s", &[16, 128], DType::F32)
        .vmem("v", &[8, 128], DType::F32)
        .dma_sem("sem");
    PallasCall::new("writes_its_input", spec, |pl, a| {
        let (x, y, acc, whole, z) = (a.r(0), a.r(1), a.r(2), a.r(3), a.r(4));
        let (s, v, sem) = (a.r(5), a.r(6), a.sem(7));
        let half = pl.make_async_copy(x.slice(ds(0, 8)), y.slice(ds(0, 8)), sem);
        half.start();
        half.wait();
        let first = pl.make_async_copy(x.slice(ds(0, 8)), v, sem);
        first.start();
        first.wait();
        pl.accumulate(acc, v, ReduceOp::Sum);
        pl.fill(v, 3.0);
        let all = pl.make_async_copy(v, whole, sem);
        all.start();
        all.wait();
        let early = pl.make_async_copy(z, v, sem);
        early.start();
        early.wait();
        let late = pl.make_async_copy(v, z, sem);
        late.start();
        late.wait();
        pl.fill(s, 5.0);
        let over = pl.make_async_copy(s, x, sem);
        over.start();
        over.wait();
    })
}

#[test]
fn lent_inputs_stay_and_outputs_are_zeroed_where_the_run_does_not_write_them_first() {
    let mesh = Mesh::new(2, "x").unwrap();
    let plan = Job::call(writes_its_input(), mesh)
        .with_uninit(Uninit::Zero)
        .plan()
        .unwrap();
    let prog = &plan.program;
    let cov = Coverage::of(prog, &plan.schedule);
    let [y, acc, whole, z] = prog.outputs[..] else {
        panic!("four outputs")
    };
    let x = prog.inputs[0];
    for d in 0..2 {
        assert!(cov.input_written(d, x), "the kernel overwrites x");
        assert!(cov.needs_zero(d, y), "half of y is never written");
        assert!(cov.needs_zero(d, z), "z is read before it is written");
        assert!(
            !cov.needs_zero(d, acc),
            "acc's HBM output is written whole from VMEM"
        );
        assert!(
            !cov.needs_zero(d, whole),
            "whole is written whole, never read first"
        );
    }
    let inputs: Vec<Vec<HostArray>> = (0..2)
        .map(|d| {
            vec![
                HostArray::from_f32(&[16, 128], (0..2048).map(|i| (i + d * 7) as f32).collect())
                    .unwrap(),
            ]
        })
        .collect();
    let want = plan.execute(&mut CpuExecutor::new(), &inputs).unwrap();
    let (got, ins) = run_lent(&plan, &inputs, 0x7fc0_0000);
    assert_eq!(got, words(&want));
    assert_eq!(ins, words(&inputs), "the caller's x is not overwritten");
    assert!(
        got[0][0][1024..].iter().all(|&w| w == 0),
        "y's unwritten half is zero, not the caller's"
    );
    assert!(
        got[0][3].iter().all(|&w| w == 0),
        "z was read as zeros, then written with them"
    );
}

/// By default memory nothing wrote reads as interpret mode's NaN: the schedule fills
/// the outputs the run reads first or does not write whole, so lent memory needs no
/// zeroing and its unwritten part is NaN, not the caller's garbage.
#[test]
fn lent_outputs_the_run_does_not_write_first_read_as_nan() {
    let mesh = Mesh::new(2, "x").unwrap();
    let plan = Job::call(writes_its_input(), mesh).plan().unwrap();
    let prog = &plan.program;
    let cov = Coverage::of(prog, &plan.schedule);
    let nan = f32::NAN.to_bits();
    let filled: Vec<(usize, usize)> = plan
        .schedule
        .ops
        .iter()
        .map_while(|op| match op {
            DataOp::Fill { dst, bits } if *bits == nan => Some((dst.device(), dst.alloc())),
            _ => None,
        })
        .collect();
    let [y, acc, whole, z] = prog.outputs[..] else {
        panic!("four outputs")
    };
    for d in 0..2 {
        for &a in &prog.outputs {
            assert!(!cov.needs_zero(d, a), "the fills write every output first");
        }
        assert!(
            filled.contains(&(d, y)) && filled.contains(&(d, z)),
            "{filled:?}"
        );
        assert!(!filled.contains(&(d, whole)) && !filled.contains(&(d, prog.inputs[0])));
        // acc is copied out from VMEM whole: its VMEM buffer, read first, is the one filled.
        assert!(!filled.contains(&(d, acc)), "{filled:?}");
    }
    let inputs: Vec<Vec<HostArray>> = (0..2)
        .map(|_| vec![HostArray::from_f32(&[16, 128], vec![1.0; 2048]).unwrap()])
        .collect();
    let want = plan.execute(&mut CpuExecutor::new(), &inputs).unwrap();
    let (got, _) = run_lent(&plan, &inputs, 0xdead_beef);
    assert_eq!(got, words(&want));
    assert!(
        got[0][0][1024..].iter().all(|&w| w == nan),
        "y's unwritten half"
    );
    assert!(got[0][0][..1024].iter().all(|&w| w == 1f32.to_bits()));
    assert!(
        got[0][1].iter().all(|&w| f32::from_bits(w).is_nan()),
        "acc added to NaN"
    );
}

#[test]
fn a_plan_reuses_its_buffers_and_rezeroes_what_a_run_reads_before_writing() {
    let mesh = Mesh::new(2, "x").unwrap();
    let plan = Job::call(writes_its_input(), mesh).plan().unwrap();
    let prog = &plan.program;
    let cpu_plan = CpuPlan::of(prog, &plan.schedule);
    assert_eq!(cpu_plan.kept_bytes(), 0);
    for call in 0..3u32 {
        let inputs: Vec<Vec<HostArray>> = (0..2)
            .map(|d| {
                let x = (0..2048).map(|i| (i * (call + 1) + d * 7) as f32);
                vec![HostArray::from_f32(&[16, 128], x.collect()).unwrap()]
            })
            .collect();
        let want = plan.execute(&mut CpuExecutor::unfused(), &inputs).unwrap();
        let (got, ins) = run_lent_with(&plan, &cpu_plan, &inputs, 0x7fc0_0000 + call);
        assert_eq!(got, words(&want), "call {call}");
        assert_eq!(ins, words(&inputs), "call {call}: the caller's x stays");
        assert!(cpu_plan.kept_bytes() > 0, "the run's own buffers are kept");
    }
}

/// A scratch read before it is written: `t += x` (from zeros), then `out = t`.
fn sums_into_scratch() -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[8, 128], DType::F32)
        .output("out", MemorySpace::Any, &[8, 128], DType::F32)
        .vmem("t", &[8, 128], DType::F32)
        .dma_sem("sem");
    PallasCall::new("sums_into_scratch", spec, |pl, a| {
        let (x, out, t, sem) = (a.r(0), a.r(1), a.r(2), a.sem(3));
        pl.accumulate(t, x, ReduceOp::Sum);
        let c = pl.make_async_copy(t, out, sem);
        c.start();
        c.wait();
    })
}

#[test]
fn a_scratch_read_before_it_is_written_starts_from_zeros_on_every_call() {
    let mesh = Mesh::new(2, "x").unwrap();
    // Zeros: what unwritten memory reads as is then the executor's memory at the start.
    let job = Job::call(sums_into_scratch(), mesh).with_uninit(Uninit::Zero);
    let plan = job.plan().unwrap();
    let prog = &plan.program;
    let cpu_plan = CpuPlan::of(prog, &plan.schedule);
    let t = prog
        .layout
        .allocs
        .iter()
        .position(|a| a.name == "t")
        .unwrap();
    assert!(
        cpu_plan.coverage.needs_zero(0, t),
        "t is read before written"
    );
    for call in 0..3 {
        let inputs: Vec<Vec<HostArray>> = (0..2)
            .map(|d| {
                let x = (0..1024).map(|i| (i + d + call) as f32);
                vec![HostArray::from_f32(&[8, 128], x.collect()).unwrap()]
            })
            .collect();
        let (got, _) = run_lent_with(&plan, &cpu_plan, &inputs, 0);
        assert_eq!(got[1][0], inputs[1][0].words, "call {call}: out = 0 + x");
    }
}

#[test]
fn memory_lent_for_the_wrong_allocation_or_size_is_refused() {
    let mesh = Mesh::new(2, "x").unwrap();
    let plan = Job::call(writes_its_input(), mesh).plan().unwrap();
    let prog = &plan.program;
    let cov = CpuPlan::of(prog, &plan.schedule);
    let refused = |lent: Lent| {
        let cpu = CpuExecutor::new();
        cpu.prepare_lent(prog, &plan.schedule, &cov, vec![lent])
            .err()
            .expect("refused")
            .to_string()
    };
    let (x, y) = (prog.inputs[0], prog.outputs[0]);
    let short = vec![0u32; 10];
    let err = refused(Lent::Input {
        device: 0,
        alloc: x,
        words: &short,
    });
    assert!(err.contains("not its number of elements"), "{err}");
    let mut out = vec![0u32; 2048];
    let err = refused(Lent::Output {
        device: 0,
        alloc: x,
        words: &mut out,
    });
    assert!(err.contains("not an input lent as one"), "{err}");
    let err = refused(Lent::Output {
        device: 5,
        alloc: y,
        words: &mut out,
    });
    assert!(err.contains("no such device"), "{err}");
    let (mut a, mut b) = (vec![0u32; 2048], vec![0u32; 2048]);
    let cpu = CpuExecutor::new();
    let twice = vec![
        Lent::Output {
            device: 0,
            alloc: y,
            words: &mut a,
        },
        Lent::Output {
            device: 0,
            alloc: y,
            words: &mut b,
        },
    ];
    let err = cpu
        .prepare_lent(prog, &plan.schedule, &cov, twice)
        .err()
        .expect("lent twice");
    assert!(err.to_string().contains("lent twice"), "{err}");
}

/// `o = x[:8] + x[8:]` through VMEM (added to what `o` starts as), both operands whole
/// blocks in VMEM; `x` first has one added in VMEM when `writes_input`.
fn through_vmem(writes_input: bool) -> PallasCall {
    through_vmem_in(writes_input, DType::F32)
}

/// [`through_vmem`] in `dtype`.
fn through_vmem_in(writes_input: bool, dtype: DType) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[16, 128], dtype)
        .output("o", MemorySpace::Vmem, &[8, 128], dtype)
        .vmem("one", &[16, 128], dtype);
    PallasCall::new("through_vmem", spec, move |pl, a| {
        let (x, o, one) = (a.r(0), a.r(1), a.r(2));
        if writes_input {
            pl.fill(one, 1.0);
            pl.accumulate(x, one, ReduceOp::Sum);
        }
        pl.accumulate(o, x.slice(ds(0, 8)), ReduceOp::Sum);
        pl.accumulate(o, x.slice(ds(8, 8)), ReduceOp::Sum);
    })
}

/// A VMEM operand copied whole from a lent input, or into a lent output, is that
/// operand's memory (no copy): the caller's input stays as it was, each call's output
/// is its own inputs' (garbage in the output memory zeroed where `o` is read first),
/// and a VMEM input the kernel writes is not shared.
#[test]
fn vmem_operands_share_the_lent_memory_and_give_each_calls_answer() {
    let mesh = Mesh::new(2, "x").unwrap();
    for writes_input in [false, true] {
        for uninit in [Uninit::Zero, Uninit::Nan] {
            let plan = Job::call(through_vmem(writes_input), mesh.clone())
                .with_uninit(uninit)
                .plan()
                .unwrap();
            let cpu_plan = CpuPlan::of(&plan.program, &plan.schedule);
            let want_shared = if writes_input { 2 } else { 4 };
            assert_eq!(cpu_plan.shared_operands(), want_shared, "{writes_input}");
            for call in 0..3u32 {
                let inputs: Vec<Vec<HostArray>> = (0..2u32)
                    .map(|d| {
                        let x = (0..2048u32).map(|i| (i * 3 + d * 1000 + call * 77) as f32);
                        vec![HostArray::from_f32(&[16, 128], x.collect()).unwrap()]
                    })
                    .collect();
                let garbage = 0x4100_0000 + call;
                let (got, ins) = run_lent_with(&plan, &cpu_plan, &inputs, garbage);
                let want = plan.execute(&mut CpuExecutor::unfused(), &inputs).unwrap();
                assert_eq!(got, words(&want), "{writes_input} {uninit:?} call {call}");
                assert_eq!(ins, words(&inputs), "call {call}: the caller's x stays");
                let add = if writes_input { 1.0 } else { 0.0 };
                for (d, dev) in inputs.iter().enumerate() {
                    let x = dev[0].as_f32();
                    let o: Vec<f32> = got[d][0].iter().map(|&w| f32::from_bits(w)).collect();
                    let expect: Vec<f32> =
                        (0..1024).map(|i| x[i] + x[i + 1024] + 2.0 * add).collect();
                    if uninit == Uninit::Zero {
                        assert_eq!(o, expect, "{writes_input} call {call} device {d}");
                    } else {
                        assert!(o.iter().all(|v| v.is_nan()), "o starts as NaN");
                    }
                }
            }
        }
    }
}

/// Ring attention's prologue in small: `q` and `k` copied whole into VMEM and `k`'s copy
/// copied on into a scratch buffer (the copies in fuse into one region), then a dot of
/// `k` with itself, and only then `q`'s VMEM copy read (by a dot). That copy stays out of
/// the region and shares the lent `q` (one buffer, the copy skipped) while `k`'s is
/// forwarded as before; every call gives the unfused run's bits (lent f32 memory, the
/// caller's inputs left as they were; bf16 in the run's own) and the exact products.
fn copies_in_then_dots(dtype: DType) -> PallasCall {
    let spec = GridSpec::new()
        .input("q", MemorySpace::Vmem, &[128, 128], dtype)
        .input("k", MemorySpace::Vmem, &[128, 128], dtype)
        .output("o", MemorySpace::Vmem, &[128, 128], DType::F32)
        .output("t", MemorySpace::Vmem, &[256, 128], DType::F32)
        .vmem("kb", &[256, 128], dtype);
    PallasCall::new("copies_in_then_dots", spec, |pl, a| {
        let (q, k, o, t, kb) = (a.r("q"), a.r("k"), a.r("o"), a.r("t"), a.r("kb"));
        pl.fill(t, 0.0);
        pl.store(kb.slice(ds(0, 128)), &pl.load(k));
        pl.store(kb.slice(ds(128, 128)), &pl.load(k));
        // More steps than the fusion looks back through for a copy before `q`'s
        // VMEM copy is read, as a ring's steps are: each half of `t` sums `k @ k`.
        for i in 0..48 {
            let half = ds(i % 2 * 128, 128);
            let kk = pl.dot(&pl.load(kb.slice(half)), &pl.load(k));
            pl.store(t.slice(half), &(&pl.load(t.slice(half)) + &kk));
        }
        pl.store(o, &pl.dot(&pl.load(q), &pl.load(k)));
    })
}

#[test]
fn a_vmem_input_read_after_a_region_of_copies_shares_lent_memory() {
    let mesh = Mesh::new(2, "x").unwrap();
    for dtype in [DType::F32, DType::BF16] {
        let plan = Job::call(copies_in_then_dots(dtype), mesh.clone())
            .plan()
            .unwrap();
        let prog = &plan.program;
        let cpu_plan = CpuPlan::of(prog, &plan.schedule);
        let vmem = |name: &str| {
            let allocs = &prog.layout.allocs;
            allocs
                .iter()
                .position(|a| a.name == name && a.space == MemorySpace::Vmem)
                .unwrap()
        };
        for d in 0..2 {
            assert!(cpu_plan.shares_operand(d, vmem("q")), "{dtype} device {d}");
        }
        for call in 0..2u32 {
            let inputs: Vec<Vec<HostArray>> = (0..2u32)
                .map(|d| {
                    // Small integers: every product and sum exact in f32 and bf16.
                    let int = |n: u32, salt: u32| -> Vec<f64> {
                        (0..n)
                            .map(|i| ((i * 7 + d * 3 + call * 5 + salt) % 9) as f64 - 4.0)
                            .collect()
                    };
                    vec![
                        HostArray::from_values(dtype, &[128, 128], &int(128 * 128, 1)).unwrap(),
                        HostArray::from_values(dtype, &[128, 128], &int(128 * 128, 2)).unwrap(),
                    ]
                })
                .collect();
            // f32 lent as words; bf16 held by the run (in its twin's buffer).
            let got = match dtype {
                DType::F32 => {
                    let (got, ins) = run_lent_with(&plan, &cpu_plan, &inputs, 0xdead_beef);
                    assert_eq!(ins, words(&inputs), "call {call}: the inputs stay");
                    got
                }
                _ => run_own(&plan, &cpu_plan, &inputs).0,
            };
            let want = plan.execute(&mut CpuExecutor::unfused(), &inputs).unwrap();
            assert_eq!(got, words(&want), "{dtype} call {call}");
            // And against the products themselves (exact: small integers).
            for (d, dev) in inputs.iter().enumerate() {
                let (q, k) = (dev[0].values(), dev[1].values());
                let dot = |a: &[f64], i: usize| -> f64 {
                    let (r, c) = (i / 128 % 128, i % 128);
                    (0..128).map(|j| a[r * 128 + j] * k[j * 128 + c]).sum()
                };
                let f = |w: &u32| f32::from_bits(*w) as f64;
                for (i, v) in got[d][0].iter().map(f).enumerate() {
                    assert_eq!(v, dot(&q, i), "{dtype} device {d} o element {i}");
                }
                for (i, v) in got[d][1].iter().map(f).enumerate() {
                    assert_eq!(v, 24.0 * dot(&k, i), "{dtype} device {d} t element {i}");
                }
            }
        }
    }
}

/// A shipped reduce-scatter's VMEM input and output (`psum_scatter`, whole blocks in
/// VMEM) share the lent operands' memory on every device.
#[test]
fn a_reduce_scatters_vmem_operands_share_lent_memory() {
    let reg = Registry::builtin();
    let c = reg.iter().find(|c| c.name() == "psum_scatter").unwrap();
    let mesh = Mesh::new(4, "x").unwrap();
    let plan = Job::collective(c.clone(), Placement::whole(mesh))
        .with_dtype(DType::F32)
        .plan()
        .unwrap();
    let cpu_plan = CpuPlan::of(&plan.program, &plan.schedule);
    assert_eq!(
        cpu_plan.shared_operands(),
        8,
        "x_ref and o_ref on 4 devices"
    );
    for seed in [3, 4] {
        let inputs = random_inputs(&plan.program, seed).unwrap();
        let want = plan.execute(&mut CpuExecutor::unfused(), &inputs).unwrap();
        let (got, ins) = run_lent_with(&plan, &cpu_plan, &inputs, 0xdead_beef);
        assert_eq!(got, words(&want), "seed {seed}");
        assert_eq!(ins, words(&inputs), "seed {seed}: the inputs stay");
    }
}

/// Outputs of more than a million words (past the size from which fills are spread over
/// the cores): `o` filled whole in VMEM, `h` half written from a filled scratch (its
/// other half zeroed in the lent memory, under `Uninit::Zero`).
fn fills_large() -> PallasCall {
    let spec = GridSpec::new()
        .output("o", MemorySpace::Vmem, &[2056, 512], DType::F32)
        .output("h", MemorySpace::Any, &[2056, 512], DType::F32)
        .vmem("s", &[1028, 512], DType::F32)
        .dma_sem("sem");
    PallasCall::new("fills_large", spec, |pl, a| {
        let (o, h, s, sem) = (a.r(0), a.r(1), a.r(2), a.sem(3));
        pl.fill(o, 2.5);
        pl.fill(s, -7.0);
        let half = pl.make_async_copy(s, h.slice(ds(1028, 1028)), sem);
        half.start();
        half.wait();
    })
}

#[test]
fn large_fills_and_zeroing_reach_every_word_of_lent_memory() {
    let mesh = Mesh::new(2, "x").unwrap();
    let plan = Job::call(fills_large(), mesh)
        .with_uninit(Uninit::Zero)
        .plan()
        .unwrap();
    let prog = &plan.program;
    let n = 2056 * 512;
    assert!(n > 1 << 20);
    assert!(Coverage::of(prog, &plan.schedule).needs_zero(0, prog.outputs[1]));
    let inputs: Vec<Vec<HostArray>> = vec![Vec::new(); 2];
    let want = plan.execute(&mut CpuExecutor::unfused(), &inputs).unwrap();
    let (got, _) = run_lent(&plan, &inputs, 0xdead_beef);
    assert_eq!(got, words(&want));
    assert_eq!(got.len(), 2);
    for (d, outs) in got.iter().enumerate() {
        assert_eq!(outs[0].len(), n);
        let bad = outs[0].iter().position(|&w| w != 2.5f32.to_bits());
        assert_eq!(bad, None, "device {d}: o is 2.5 everywhere");
        let (lo, hi) = outs[1].split_at(n / 2);
        assert_eq!(lo.iter().position(|&w| w != 0), None, "h's unwritten half");
        let bad = hi.iter().position(|&w| w != (-7f32).to_bits());
        assert_eq!(bad, None, "h's copied half");
    }
}

/// Runs `plan` in the executor's own memory as Python runs 16-bit operands (nothing
/// lent: inputs written through `input_words`, outputs read through `output_words`):
/// the outputs, and the bytes of buffers the plan keeps after.
fn run_own(plan: &Plan, cpu_plan: &CpuPlan, inputs: &[Vec<HostArray>]) -> (Words, u64) {
    let prog = &plan.program;
    let cpu = CpuExecutor::new();
    let mut run: Box<dyn Prepared + '_> = cpu
        .prepare_lent(prog, &plan.schedule, cpu_plan, Vec::new())
        .unwrap();
    for (d, dev) in inputs.iter().enumerate() {
        for (i, a) in dev.iter().enumerate() {
            run.input_words(d, i).unwrap().copy_from_slice(&a.words);
        }
    }
    run.run(1).unwrap();
    let outs = (0..prog.devices)
        .map(|d| {
            (0..prog.outputs.len())
                .map(|o| run.output_words(d, o).unwrap().to_vec())
                .collect()
        })
        .collect();
    drop(run);
    (outs, cpu_plan.kept_bytes())
}

/// Operands the run holds itself (bf16: not lent) live in their VMEM twin's buffer:
/// each call's outputs equal the unfused executor's, and the buffers the plan keeps are
/// every allocation on every device but the twinned operands (x unless the kernel
/// writes it, and o).
#[test]
fn vmem_operands_the_run_holds_itself_live_in_their_twins_buffer() {
    let mesh = Mesh::new(2, "x").unwrap();
    for writes_input in [false, true] {
        let plan = Job::call(through_vmem_in(writes_input, DType::BF16), mesh.clone())
            .with_uninit(Uninit::Zero)
            .plan()
            .unwrap();
        let cpu_plan = CpuPlan::of(&plan.program, &plan.schedule);
        let table = plan.schedule.memory(&plan.program);
        // Buffers held as halves ([`CpuPlan::own_halves`]) keep two elements a word.
        let all: u64 = table
            .allocs
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let n = a.numel() as u64;
                (0..2)
                    .map(|d| match cpu_plan.own_halves(d, i) {
                        true => n.div_ceil(2) * 4,
                        false => n * 4,
                    })
                    .sum::<u64>()
            })
            .sum();
        let twinned = if writes_input {
            8 * 128
        } else {
            (16 + 8) * 128
        };
        for call in 0..3u32 {
            let inputs: Vec<Vec<HostArray>> = (0..2u32)
                .map(|d| {
                    // Small integers: exact in bf16, and so are their sums.
                    let x = (0..2048u32)
                        .map(|i| half::bf16::from_f32(((i * 3 + d * 7 + call) % 64) as f32));
                    vec![HostArray::from_bf16(&[16, 128], x.collect()).unwrap()]
                })
                .collect();
            let want = plan.execute(&mut CpuExecutor::unfused(), &inputs).unwrap();
            let (got, kept) = run_own(&plan, &cpu_plan, &inputs);
            assert_eq!(got, words(&want), "{writes_input} call {call}");
            assert_eq!(kept, all - 2 * twinned * 4, "{writes_input} call {call}");
            let add = if writes_input { 2.0 } else { 0.0 };
            for (d, dev) in inputs.iter().enumerate() {
                let x: Vec<f32> = dev[0]
                    .words
                    .iter()
                    .map(|&w| f32::from_bits(w << 16))
                    .collect();
                let o: Vec<f32> = got[d][0].iter().map(|&w| f32::from_bits(w << 16)).collect();
                let expect: Vec<f32> = (0..1024).map(|i| x[i] + x[i + 1024] + add).collect();
                assert_eq!(o, expect, "{writes_input} call {call} device {d}");
            }
        }
    }
}

/// Every device zeroes its VMEM output `o` (whole), then takes rows from its left
/// neighbour's `x` (by a remote DMA, once the neighbour says it has zeroed) and its own
/// (a local DMA), leaving three gaps of zeros: a ragged all-to-all's shape.
fn zeroed_then_landed() -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Any, &[2048, 128], DType::F32)
        .output("o", MemorySpace::Vmem, &[2048, 128], DType::F32)
        .dma_sem("send")
        .dma_sem("recv")
        .dma_sem("local")
        .regular_sem("ready");
    PallasCall::new("zeroed_then_landed", spec, |pl, a| {
        let (x, o, ready) = (a.r("x"), a.r("o"), a.sem("ready"));
        let n = pl.num_devices();
        let me = pl.axis_index("x");
        let (left, right) = ((me + n - 1) % n, (me + 1) % n);
        pl.fill(o, 0.0);
        pl.semaphore_signal(ready, 1, left);
        pl.semaphore_wait(ready, 1);
        let remote = pl.make_async_remote_copy(
            x.slice(ds(0, 512)),
            o.slice(ds(256, 512)),
            a.sem("send"),
            a.sem("recv"),
            right,
        );
        remote.start();
        let local = pl.make_async_copy(
            x.slice(ds(1024, 512)),
            o.slice(ds(1024, 512)),
            a.sem("local"),
        );
        local.start();
        local.wait();
        remote.wait_send();
        remote.wait_recv();
    })
}

#[test]
fn a_fill_is_cut_to_the_rows_no_dma_lands_in_and_the_results_stay_exact() {
    let mesh = Mesh::new(4, "x").unwrap();
    let plan = Job::call(zeroed_then_landed(), mesh).plan().unwrap();
    let cpu_plan = CpuPlan::of(&plan.program, &plan.schedule);
    // Of each device's 2048 rows, 1024 are landed in: only the other 1024 are filled.
    assert_eq!(cpu_plan.fill_words(&plan.schedule), 4 * 1024 * 128);
    let inputs = random_inputs(&plan.program, 11).unwrap();
    let want = plan.execute(&mut CpuExecutor::unfused(), &inputs).unwrap();
    for garbage in [0xdead_beef, 0] {
        let (got, _) = run_lent_with(&plan, &cpu_plan, &inputs, garbage);
        assert_eq!(got, words(&want));
    }
    // The same through the fused executor's own memory.
    let own = plan.execute(&mut CpuExecutor::new(), &inputs).unwrap();
    assert_eq!(words(&own), words(&want));
    // The zeros are where nothing landed, the neighbour's rows where they landed.
    let x = |d: usize| &inputs[d][0].words;
    for (d, outs) in words(&want).iter().enumerate() {
        let o = &outs[0];
        let row = |r: usize| &o[r * 128..(r + 1) * 128];
        assert!(
            row(0).iter().chain(row(1600)).all(|&w| w == 0),
            "device {d}"
        );
        assert_eq!(row(256), &x((d + 3) % 4)[..128], "device {d}");
        assert_eq!(row(1024), &x(d)[1024 * 128..1025 * 128], "device {d}");
    }
}
