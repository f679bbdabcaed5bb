//! 16-bit operands lent to the CPU executor as stored, two bytes an element
//! (`Lent::InputHalves`, `Lent::OutputHalves`, as Python lends XLA's bf16 and f16
//! buffers): where the plan allows it (only fused regions load the input element for
//! element, and store the output whole) the run gives the bits the unfused executor
//! gives in its own memory, for every 16-bit pattern of the input (NaN payloads,
//! signalling NaNs, infinities, -0, subnormals), at row lengths shorter than a block,
//! not a multiple of it, and over the cores; where it does not, lending halves is
//! refused with an error.

use tpusim::device_sim::cpu::{CpuExecutor, CpuPlan};
use tpusim::device_sim::Lent;
use tpusim::kernel::{GridSpec, MemorySpace, PallasCall, Value};
use tpusim::run::{Job, Plan};
use tpusim::{DType, HostArray, Mesh};

type Op = for<'c> fn(&'c tpusim::kernel::Ctx, &Value<'c>) -> Value<'c>;

/// The ops: elementwise chains, a row reduction spread back, divisions converted to the
/// dtype (by a row's sum, by lanes), a softmax.
fn ops() -> Vec<(&'static str, Op)> {
    vec![
        ("x*2", |_, x| x * 2.0),
        ("x*2+1", |_, x| &(x * 2.0) + 1.0),
        ("exp", |pl, x| pl.exp(x)),
        ("gelu", |pl, x| {
            let cube = &(&(x * x) * x) * 0.044715;
            let inner = &(x + &cube) * 0.797_884_560_802_865_4;
            let t = pl.tanh(&inner);
            &(&(&t + 1.0) * x) * 0.5
        }),
        ("sum_rows", |_, x| {
            let shape = x.shape().to_vec();
            x.sum(&[1]).broadcast_in_dim(&shape, &[0])
        }),
        ("sum_f32", |_, x| {
            // A 16-bit sum as JAX writes it: widened to f32, the sum rounded back.
            let shape = x.shape().to_vec();
            x.astype(DType::F32)
                .sum(&[1])
                .astype(x.dtype())
                .broadcast_in_dim(&shape, &[0])
        }),
        ("max_rows", |_, x| {
            let shape = x.shape().to_vec();
            x.max(&[1]).broadcast_in_dim(&shape, &[0])
        }),
        ("quotient_rows", |_, x| {
            // An f32 division converted back, stored straight as halves: x / x's row
            // sum (a NaN, an infinity or zero in most rows: their specials too).
            let shape = x.shape().to_vec();
            let x32 = x.astype(DType::F32);
            let s = x32.sum(&[1]).broadcast_in_dim(&shape, &[0]);
            (&x32 / &s).astype(x.dtype())
        }),
        ("quotient_lanes", |_, x| {
            let x32 = x.astype(DType::F32);
            (&x32 / &(&x32 + 3.0)).astype(x.dtype())
        }),
        ("softmax", |pl, x| {
            let shape = x.shape().to_vec();
            let x = x.astype(DType::F32);
            let m = x.max(&[1]).broadcast_in_dim(&shape, &[0]);
            let e = pl.exp(&(&x - &m));
            let s = e.sum(&[1]).broadcast_in_dim(&shape, &[0]);
            (&e / &s).astype(DType::BF16)
        }),
    ]
}

fn plan_of(name: &'static str, f: Op, shape: &[usize], dtype: DType) -> Plan {
    let out = if name == "softmax" {
        DType::BF16
    } else {
        dtype
    };
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, shape, dtype)
        .output("y", MemorySpace::Vmem, shape, out);
    let call = PallasCall::new(name, spec, move |pl, a| {
        let x = pl.load(a.r("x"));
        pl.store(a.r("y"), &f(pl, &x));
    });
    Job::call(call, Mesh::new(1, "x").unwrap()).plan().unwrap()
}

/// Every 16-bit pattern in turn (so NaN payloads, signalling NaNs, infinities, -0 and
/// subnormals all occur), then ordinary values of a small range.
fn bits(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| {
            if i < 65536 {
                (i * 40503 + seed) & 0xffff
            } else {
                // Values in [-4, 4) of either dtype: bf16 and f16 share sign and low bits.
                let v = (i.wrapping_mul(2_654_435_761) >> 16) & 0x3fff;
                (v | 0x3000) ^ ((i & 1) << 15)
            }
        })
        .collect()
}

/// Runs `plan` with its input and output lent as halves; the output's bits.
fn run_halves(plan: &Plan, cpu: &CpuPlan, x: &[u32], garbage: u16) -> Vec<u32> {
    let prog = &plan.program;
    let ins: Vec<u16> = x.iter().map(|&w| w as u16).collect();
    let mut outs = vec![garbage; prog.layout.allocs[prog.outputs[0]].numel()];
    {
        let lent = vec![
            Lent::InputHalves {
                device: 0,
                alloc: prog.inputs[0],
                halves: &ins,
            },
            Lent::OutputHalves {
                device: 0,
                alloc: prog.outputs[0],
                halves: &mut outs,
            },
        ];
        let exec = CpuExecutor::new();
        let mut run = exec.prepare_lent(prog, &plan.schedule, cpu, lent).unwrap();
        run.run(1).unwrap();
    }
    assert_eq!(ins, x.iter().map(|&w| w as u16).collect::<Vec<_>>());
    outs.into_iter().map(u32::from).collect()
}

#[test]
fn halves_lent_give_the_bits_of_a_run_in_words() {
    for shape in [[7usize, 2500], [300, 613], [1100, 1024]] {
        let n = shape[0] * shape[1];
        for dtype in [DType::BF16, DType::F16] {
            for (name, f) in ops() {
                if name == "softmax" && dtype == DType::F16 {
                    continue;
                }
                let plan = plan_of(name, f, &shape, dtype);
                let prog = &plan.program;
                let cpu = CpuPlan::of(prog, &plan.schedule);
                let lendable = cpu.halves(0, prog.inputs[0]) && cpu.halves(0, prog.outputs[0]);
                // bf16 chains fuse; f16 ones run op by op here (a region's f16 ops
                // are not fused), and are then not lent.
                if dtype == DType::F16 && !lendable {
                    continue;
                }
                assert!(lendable, "{name} {dtype} {shape:?}: both lent as halves");
                let x = bits(n, 7);
                let input = HostArray::from_words(dtype, &shape, x.clone()).unwrap();
                let words = plan
                    .execute(&mut CpuExecutor::new(), &[vec![input.clone()]])
                    .unwrap();
                let unfused = plan
                    .execute(&mut CpuExecutor::unfused(), &[vec![input]])
                    .unwrap();
                let (words, unfused) = (&words[0][0], &unfused[0][0]);
                let vals = (words.values(), unfused.values());
                // The fused run in words equals the unfused one (NaN payloads aside:
                // the fold's order picks which NaN a sum keeps).
                for (i, (a, b)) in vals.0.iter().zip(&vals.1).enumerate() {
                    let same = (a.is_nan() && b.is_nan())
                        || (a == b && a.is_sign_negative() == b.is_sign_negative());
                    assert!(same, "{name} {dtype} {shape:?} element {i}: {a} for {b}");
                }
                // Twice: the second run reuses the kept buffers.
                for _ in 0..2 {
                    let got = run_halves(&plan, &cpu, &x, 0xdead);
                    let bad = got.iter().zip(&words.words).position(|(a, b)| a != b);
                    assert!(
                        bad.is_none(),
                        "{name} {dtype} {shape:?}: element {bad:?}: {:#x} for {:#x}",
                        got[bad.unwrap()],
                        words.words[bad.unwrap()]
                    );
                }
            }
        }
    }
}

#[test]
fn exact_ops_on_halves_equal_values_computed_here() {
    // y = x * 2 is exact in f32 then in the 16-bit dtype (overflow to inf included).
    let shape = [300usize, 613];
    let n = shape[0] * shape[1];
    for dtype in [DType::BF16] {
        let plan = plan_of("x*2", ops()[0].1, &shape, dtype);
        let cpu = CpuPlan::of(&plan.program, &plan.schedule);
        let x = bits(n, 3);
        let got = run_halves(&plan, &cpu, &x, 0);
        for (i, (&w, &y)) in x.iter().zip(&got).enumerate() {
            let v = HostArray::from_words(dtype, &[1], vec![w])
                .unwrap()
                .values()[0];
            let want = HostArray::from_values(dtype, &[1], &[v * 2.0])
                .unwrap()
                .values()[0];
            let y = HostArray::from_words(dtype, &[1], vec![y])
                .unwrap()
                .values()[0];
            let same = (want.is_nan() && y.is_nan())
                || (want == y && want.is_sign_negative() == y.is_sign_negative());
            assert!(same, "{dtype} element {i}: {w:#x} * 2 = {y} for {want}");
        }
    }
}

/// A kernel storing `f` of its input (shape `shape`) to an output of shape `out`.
fn call_plan(name: &'static str, shape: &[usize], out: &[usize], dtype: DType, f: Op) -> Plan {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, shape, dtype)
        .output("y", MemorySpace::Vmem, out, dtype);
    let call = PallasCall::new(name, spec, move |pl, a| {
        let x = pl.load(a.r("x"));
        pl.store(a.r("y"), &f(pl, &x));
    });
    Job::call(call, Mesh::new(1, "x").unwrap()).plan().unwrap()
}

#[test]
fn transposes_move_halves_as_stored() {
    // Alone (both operands lent), and feeding a region (the input lent, the region's
    // source in words) or fed by one (the output lent, the source in words).
    let cases: [(&str, Op); 3] = [
        ("t", |_, x| x.transpose(&[1, 0])),
        ("t+1", |_, x| &x.transpose(&[1, 0]) + 1.0),
        ("(x*2)t", |_, x| (x * 2.0).transpose(&[1, 0])),
    ];
    for shape in [[7usize, 2500], [300, 613], [1100, 1024]] {
        let n = shape[0] * shape[1];
        let out = [shape[1], shape[0]];
        for dtype in [DType::BF16, DType::F16] {
            for (name, f) in cases {
                let plan = call_plan(name, &shape, &out, dtype, f);
                let prog = &plan.program;
                let cpu = CpuPlan::of(prog, &plan.schedule);
                let (lin, lout) = (
                    cpu.halves(0, prog.inputs[0]),
                    cpu.halves(0, prog.outputs[0]),
                );
                // bf16 copies and chains fuse, so the transpose reads the input and
                // writes the output themselves; f16 ones run op by op here, and are
                // then not lent.
                if dtype == DType::F16 && !(lin && lout) {
                    continue;
                }
                assert!(lin && lout, "{name} {dtype}: both lent");
                let x = bits(n, 11);
                let input = HostArray::from_words(dtype, &shape, x.clone()).unwrap();
                let words = plan
                    .execute(&mut CpuExecutor::unfused(), &[vec![input]])
                    .unwrap();
                let words = &words[0][0].words;
                if name == "t" {
                    // Bits moved as they are: element (j, i) is input element (i, j).
                    for (k, &w) in words.iter().enumerate() {
                        let (j, i) = (k / shape[0], k % shape[0]);
                        assert_eq!(w, x[i * shape[1] + j], "{dtype} {shape:?} element {k}");
                    }
                }
                for _ in 0..2 {
                    let got = run_halves(&plan, &cpu, &x, 0xdead);
                    let bad = got.iter().zip(words).position(|(a, b)| a != b);
                    assert!(
                        bad.is_none(),
                        "{name} {dtype} {shape:?}: element {bad:?}: {:#x} for {:#x}",
                        got[bad.unwrap()],
                        words[bad.unwrap()]
                    );
                }
            }
        }
    }
}

#[test]
fn halves_are_refused_where_not_only_regions_touch_the_operand() {
    // The input is read by a transpose of the first two of three dimensions (a gather
    // in words, not a swap of 16-bit rows) and the output written by it: neither may
    // be lent as halves.
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[4, 16, 8], DType::BF16)
        .output("y", MemorySpace::Vmem, &[16, 4, 8], DType::BF16);
    let call = PallasCall::new("transpose", spec, |pl, a| {
        let x = pl.load(a.r("x"));
        pl.store(a.r("y"), &x.transpose(&[1, 0, 2]));
    });
    let plan = Job::call(call, Mesh::new(1, "x").unwrap()).plan().unwrap();
    let prog = &plan.program;
    let cpu = CpuPlan::of(prog, &plan.schedule);
    assert!(!cpu.halves(0, prog.inputs[0]));
    assert!(!cpu.halves(0, prog.outputs[0]));
    let ins = vec![0u16; 16 * 4 * 8];
    let lent = vec![Lent::InputHalves {
        device: 0,
        alloc: prog.inputs[0],
        halves: &ins,
    }];
    let exec = CpuExecutor::new();
    let err = match exec.prepare_lent(prog, &plan.schedule, &cpu, lent) {
        Ok(_) => panic!("lending halves a transpose reads was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("16-bit"), "{err}");
}

/// An output whose VMEM ref is written in row blocks with compute ops between (a dot's
/// result rounded into one block, an elementwise op into the other, then a region that
/// reads both blocks back), copied out whole at the end: the ref shares the output's
/// memory, and the output is lent as halves where every write and read of the ref is a
/// region's. The bits equal the run in words and the unfused run's, twice.
#[test]
fn an_output_written_in_blocks_through_its_vmem_ref_is_lent_as_halves() {
    let (m, k) = (40usize, 48usize);
    let rows = move |s: usize| tpusim::kernel::ds(s as i64, m as i64);
    for dtype in [DType::BF16, DType::F16] {
        let spec = GridSpec::new()
            .input("x", MemorySpace::Vmem, &[m, k], dtype)
            .input("w", MemorySpace::Vmem, &[k, k], dtype)
            .output("y", MemorySpace::Vmem, &[2 * m, k], dtype);
        let call = PallasCall::new("blocks", spec, move |pl, a| {
            let x = pl.load(a.r("x"));
            let top = pl.dot(&x, &pl.load(a.r("w")));
            pl.store(a.r("y").slice(rows(0)), &top.astype(dtype));
            let bottom = &(&x * 2.0) + 1.0;
            pl.store(a.r("y").slice(rows(m)), &bottom);
            let sum = &pl.load(a.r("y").slice(rows(0))) + &pl.load(a.r("y").slice(rows(m)));
            pl.store(a.r("y").slice(rows(m)), &sum);
        });
        let plan = Job::call(call, Mesh::new(1, "x").unwrap()).plan().unwrap();
        let prog = &plan.program;
        let cpu = CpuPlan::of(prog, &plan.schedule);
        if dtype == DType::F16 && !cpu.halves(0, prog.outputs[0]) {
            continue; // f16 ops run one by one here (not regions)
        }
        assert!(
            cpu.halves(0, prog.outputs[0]),
            "{dtype}: {:#?}",
            cpu.fused()
        );
        assert!(
            cpu.shared_operands() >= 1,
            "{dtype}: the ref is the output's twin"
        );
        // Small integers and halves: exact sums; every row has a few of each.
        let xs: Vec<f64> = (0..m * k)
            .map(|i| ((i * 37) % 17) as f64 / 2.0 - 4.0)
            .collect();
        let ws: Vec<f64> = (0..k * k).map(|i| ((i * 11) % 5) as f64 - 2.0).collect();
        let x = HostArray::from_values(dtype, &[m, k], &xs).unwrap();
        let w = HostArray::from_values(dtype, &[k, k], &ws).unwrap();
        let inputs = [vec![x.clone(), w.clone()]];
        let words = plan.execute(&mut CpuExecutor::new(), &inputs).unwrap();
        let unfused = plan.execute(&mut CpuExecutor::unfused(), &inputs).unwrap();
        assert_eq!(words[0][0].words, unfused[0][0].words, "{dtype}");
        let top: Vec<f64> = (0..m * k)
            .map(|o| {
                (0..k)
                    .map(|j| xs[(o / k) * k + j] * ws[j * k + o % k])
                    .sum()
            })
            .collect();
        let top = HostArray::from_values(dtype, &[m * k], &top)
            .unwrap()
            .values();
        let want: Vec<f64> = top
            .iter()
            .chain(
                top.iter()
                    .zip(&xs)
                    .map(|(t, v)| t + v * 2.0 + 1.0)
                    .collect::<Vec<_>>()
                    .iter(),
            )
            .copied()
            .collect();
        let want = HostArray::from_values(dtype, &[2 * m * k], &want).unwrap();
        assert_eq!(
            words[0][0].words, want.words,
            "{dtype}: against sums made here"
        );
        for _ in 0..2 {
            let mut outs = vec![0xdeadu16; 2 * m * k];
            {
                // The inputs are read by a dot: uploaded into the run's own words.
                let lent = vec![Lent::OutputHalves {
                    device: 0,
                    alloc: prog.outputs[0],
                    halves: &mut outs,
                }];
                let exec = CpuExecutor::new();
                let mut run = exec.prepare_lent(prog, &plan.schedule, &cpu, lent).unwrap();
                run.upload(&inputs).unwrap();
                run.run(1).unwrap();
            }
            let got: Vec<u32> = outs.into_iter().map(u32::from).collect();
            assert_eq!(got, words[0][0].words, "{dtype}: lent as halves");
        }
    }
}

/// tp_mlp's pattern: an input copied whole into VMEM and read by a dot, a 16-bit scratch
/// buffer a region stores a dot's rounded result into, read back by dots a row block
/// at a time. The plan lends the input as halves (its VMEM twin too) and holds the
/// scratch buffer at two bytes an element; the run equals the run in words, the
/// unfused run and sums made here (exact small integers), bit for bit, twice.
#[test]
fn a_scratch_buffer_dots_read_is_held_as_halves() {
    let (mb, k, hid, n) = (37usize, 48usize, 29usize, 23usize);
    let m = 2 * mb;
    let rows = move |s: usize| tpusim::kernel::ds(s as i64, mb as i64);
    for dtype in [DType::BF16, DType::F16] {
        let spec = GridSpec::new()
            .input("x", MemorySpace::Vmem, &[m, k], dtype)
            .input("w1", MemorySpace::Vmem, &[k, hid], dtype)
            .input("w2", MemorySpace::Vmem, &[hid, n], dtype)
            .output("y", MemorySpace::Vmem, &[mb, n], DType::F32)
            .vmem("h", &[m, hid], dtype);
        let call = PallasCall::new("mlp", spec, move |pl, a| {
            let h = pl.dot(&pl.load(a.r("x")), &pl.load(a.r("w1")));
            pl.store(a.r("h"), &(&h * 0.5).astype(dtype));
            let w2 = pl.load(a.r("w2"));
            let top = pl.dot(&pl.load(a.r("h").slice(rows(0))), &w2);
            let bottom = pl.dot(&pl.load(a.r("h").slice(rows(mb))), &w2);
            pl.store(a.r("y"), &(&top + &bottom));
        });
        let plan = Job::call(call, Mesh::new(1, "x").unwrap()).plan().unwrap();
        let prog = &plan.program;
        let cpu = CpuPlan::of(prog, &plan.schedule);
        let allocs = &prog.layout.allocs;
        let scratch = (0..allocs.len())
            .find(|&a| allocs[a].shape == [m, hid] && allocs[a].dtype == dtype)
            .expect("the scratch buffer");
        let x = prog.inputs[0];
        if dtype == DType::F16 && !cpu.own_halves(0, scratch) {
            continue; // f16 ops run one by one here (not regions)
        }
        assert!(cpu.own_halves(0, scratch), "{dtype}: {:#?}", cpu.fused());
        assert!(
            cpu.halves(0, x),
            "{dtype}: x, read by a dot through its twin"
        );
        assert!(!cpu.own_halves(0, x) && !cpu.halves(0, prog.outputs[0]));
        // Small integers: every product and sum exact in f32 and in `dtype`.
        let xs: Vec<f64> = (0..m * k).map(|i| ((i * 37) % 5) as f64 - 2.0).collect();
        let w1s: Vec<f64> = (0..k * hid).map(|i| ((i * 11) % 3) as f64 - 1.0).collect();
        let w2s: Vec<f64> = (0..hid * n).map(|i| ((i * 7) % 5) as f64 - 2.0).collect();
        let arr = |v: &[f64], s: &[usize]| HostArray::from_values(dtype, s, v).unwrap();
        let inputs = [vec![
            arr(&xs, &[m, k]),
            arr(&w1s, &[k, hid]),
            arr(&w2s, &[hid, n]),
        ]];
        let words = plan.execute(&mut CpuExecutor::new(), &inputs).unwrap();
        let unfused = plan.execute(&mut CpuExecutor::unfused(), &inputs).unwrap();
        assert_eq!(words[0][0].words, unfused[0][0].words, "{dtype}");
        let h: Vec<f64> = (0..m * hid)
            .map(|o| {
                (0..k)
                    .map(|j| xs[(o / hid) * k + j] * w1s[j * hid + o % hid])
                    .sum::<f64>()
                    * 0.5
            })
            .collect();
        let want: Vec<f64> = (0..mb * n)
            .map(|o| {
                let (i, c) = (o / n, o % n);
                (0..hid)
                    .map(|j| (h[i * hid + j] + h[(i + mb) * hid + j]) * w2s[j * n + c])
                    .sum()
            })
            .collect();
        let want = HostArray::from_values(DType::F32, &[mb, n], &want).unwrap();
        assert_eq!(
            words[0][0].words, want.words,
            "{dtype}: against sums made here"
        );
        let halves: Vec<Vec<u16>> = inputs[0]
            .iter()
            .map(|a| a.words.iter().map(|&w| w as u16).collect())
            .collect();
        for _ in 0..2 {
            let mut out = vec![0xdead_beefu32; mb * n];
            {
                let mut lent: Vec<Lent> = prog
                    .inputs
                    .iter()
                    .zip(&halves)
                    .filter(|(&a, _)| cpu.halves(0, a))
                    .map(|(&alloc, h)| Lent::InputHalves {
                        device: 0,
                        alloc,
                        halves: h,
                    })
                    .collect();
                let lent_x = lent.len();
                lent.push(Lent::Output {
                    device: 0,
                    alloc: prog.outputs[0],
                    words: &mut out,
                });
                let exec = CpuExecutor::new();
                let mut run = exec.prepare_lent(prog, &plan.schedule, &cpu, lent).unwrap();
                for (i, &a) in prog.inputs.iter().enumerate() {
                    if !cpu.halves(0, a) {
                        let w = run.input_words(0, i).unwrap();
                        w.copy_from_slice(&inputs[0][i].words);
                    }
                }
                assert!(lent_x >= 1);
                run.run(1).unwrap();
            }
            assert_eq!(
                out, words[0][0].words,
                "{dtype}: x lent as halves, h held so"
            );
        }
    }
}

/// moe's pattern: a 16-bit `pl.ANY` input sent a row block at a time by DMAs into VMEM
/// scratch buffers, on this device and the next, read back by a region. The plan lends
/// the input and the output as halves and holds both scratch buffers at two bytes an
/// element (the DMAs move 16-bit elements as stored); the run equals the run in words,
/// the unfused run and values made here, bit for bit, twice.
#[test]
fn dmas_move_halves_as_stored() {
    let (mb, k, p) = (37usize, 29usize, 2usize);
    let rows = move |s: usize| tpusim::kernel::ds(s as i64, mb as i64);
    for dtype in [DType::BF16, DType::F16] {
        let spec = GridSpec::new()
            .input("x", MemorySpace::Any, &[2 * mb, k], dtype)
            .output("y", MemorySpace::Vmem, &[mb, k], dtype)
            .vmem("inbox", &[mb, k], dtype)
            .vmem("mine", &[mb, k], dtype)
            .dma_sem("send")
            .dma_sem("recv")
            .dma_sem("local");
        let call = PallasCall::new("dmas", spec, move |pl, a| {
            let right = (pl.axis_index("x") + 1) % pl.axis_size("x");
            let x = a.r("x");
            let c = pl.make_async_remote_copy(
                x.slice(rows(0)),
                a.r("inbox"),
                a.sem("send"),
                a.sem("recv"),
                right,
            );
            c.start();
            let l = pl.make_async_copy(x.slice(rows(mb)), a.r("mine"), a.sem("local"));
            l.start();
            c.wait_send();
            c.wait_recv();
            l.wait();
            let sum = &pl.load(a.r("inbox")) + &(&pl.load(a.r("mine")) * 2.0);
            pl.store(a.r("y"), &sum);
        });
        let plan = Job::call(call, Mesh::new(p, "x").unwrap()).plan().unwrap();
        let prog = &plan.program;
        let cpu = CpuPlan::of(prog, &plan.schedule);
        let allocs = &prog.layout.allocs;
        let (x, y) = (prog.inputs[0], prog.outputs[0]);
        let scratch: Vec<usize> = (0..allocs.len())
            .filter(|&a| ["inbox", "mine"].contains(&allocs[a].name.as_str()))
            .collect();
        if dtype == DType::F16 && !cpu.halves(0, y) {
            continue; // f16 ops run one by one here (not regions)
        }
        assert_eq!(scratch.len(), 2, "{allocs:?}");
        for d in 0..p {
            assert!(
                cpu.halves(d, x) && cpu.halves(d, y),
                "{dtype}: lent as halves"
            );
            for &a in &scratch {
                assert!(cpu.own_halves(d, a), "{dtype} {}: halves", allocs[a].name);
            }
        }
        // Small integers: exact in either dtype.
        let xs: Vec<Vec<f64>> = (0..p)
            .map(|d| {
                (0..2 * mb * k)
                    .map(|i| ((i * 7 + d * 3) % 9) as f64 - 4.0)
                    .collect()
            })
            .collect();
        let inputs: Vec<Vec<HostArray>> = xs
            .iter()
            .map(|v| vec![HostArray::from_values(dtype, &[2 * mb, k], v).unwrap()])
            .collect();
        let words = plan.execute(&mut CpuExecutor::new(), &inputs).unwrap();
        let unfused = plan.execute(&mut CpuExecutor::unfused(), &inputs).unwrap();
        for d in 0..p {
            assert_eq!(words[d][0].words, unfused[d][0].words, "{dtype} {d}");
            let from = &xs[(d + p - 1) % p];
            let want: Vec<f64> = (0..mb * k)
                .map(|i| from[i] + xs[d][mb * k + i] * 2.0)
                .collect();
            let want = HostArray::from_values(dtype, &[mb, k], &want).unwrap();
            assert_eq!(words[d][0].words, want.words, "{dtype} device {d}: values");
        }
        let ins: Vec<Vec<u16>> = inputs
            .iter()
            .map(|i| i[0].words.iter().map(|&w| w as u16).collect())
            .collect();
        for _ in 0..2 {
            let mut outs = vec![vec![0xdeadu16; mb * k]; p];
            {
                let mut lent = Vec::new();
                for (d, (h, o)) in ins.iter().zip(outs.iter_mut()).enumerate() {
                    lent.push(Lent::InputHalves {
                        device: d,
                        alloc: x,
                        halves: h,
                    });
                    lent.push(Lent::OutputHalves {
                        device: d,
                        alloc: y,
                        halves: o,
                    });
                }
                let exec = CpuExecutor::new();
                let mut run = exec.prepare_lent(prog, &plan.schedule, &cpu, lent).unwrap();
                run.run(1).unwrap();
            }
            for d in 0..p {
                let got: Vec<u32> = outs[d].iter().map(|&h| u32::from(h)).collect();
                assert_eq!(got, words[d][0].words, "{dtype} device {d}: lent as halves");
            }
        }
    }
}
