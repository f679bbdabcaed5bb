//! The verifier held against the exhaustive model checker (`tests/model`): on random
//! small programs and on the precision suite's kernels, every race and early send the
//! verifier reports is one some interleaving has, and it reports every one the model
//! finds.

mod model;

use proptest::prelude::*;
use std::collections::BTreeSet;
use tpusim::ir::{
    Allocation, Cmp, DataOp, Dma, Invocation, Layout, MemorySpace, Op, OpKind, OpSite, Program,
    ReduceOp, SemInfo, SemKind, SemRef, View, WaitKind,
};
use tpusim::sched::ScheduleSpec;
use tpusim::source::SourceLoc;
use tpusim::verify::{check_program, ProblemKind, Report};
use tpusim::DType;

/// The keys of the races and early sends a report names.
fn verdicts(r: &Report) -> BTreeSet<String> {
    r.findings
        .iter()
        .filter(|f| {
            matches!(
                f.problem.kind(),
                ProblemKind::Race | ProblemKind::SendBeforeEntry
            )
        })
        .map(|f| f.problem.key())
        .collect()
}

/// Semaphores of the random programs.
const SEND: usize = 0;
const RECV: usize = 1;
const SIG: usize = 2;
const BAR: usize = 3;

/// A program of `codes.len()` devices whose ops `codes` describe (what, a peer, an
/// offset), each op on a line of its own; with a `collective_id` or Pallas' entry barrier.
fn program(codes: &[Vec<(u8, usize, usize)>], collective_id: bool) -> Program {
    let n = codes.len();
    let alloc = |name: &str, space| Allocation {
        name: name.into(),
        space,
        dtype: DType::F32,
        shape: vec![8],
    };
    let sem = |name: &str, kind| SemInfo {
        name: name.into(),
        kind,
        carried: false,
    };
    let layout = Layout {
        allocs: vec![
            alloc("hbm", MemorySpace::Any),
            alloc("vmem", MemorySpace::Vmem),
        ],
        sems: vec![
            sem("send", SemKind::Dma),
            sem("recv", SemKind::Dma),
            sem("sig", SemKind::Regular),
            sem("bar", SemKind::Barrier),
        ],
        vmem: Vec::new(),
    };
    let view = |device, alloc, offset| View::new(device, alloc, offset, 4);
    let mut dmas = Vec::new();
    let mut ops = Vec::new();
    for (d, list) in codes.iter().enumerate() {
        let on = |sem| SemRef::new(d, sem);
        let wait = |sem, amount, why| OpKind::Wait {
            sem: on(sem),
            amount,
            why,
            cmp: Cmp::Ge,
        };
        let mut dev_ops = Vec::new();
        for (i, &(what, peer, offset)) in list.iter().enumerate() {
            let line = (100 * d + i + 1) as u32;
            let site = OpSite::new(d as u32, 0, "op", SourceLoc::intern("random.py", line));
            let peer = peer % n;
            let offset = offset % 5;
            let kind = match what % 10 {
                0 => OpKind::Signal {
                    sem: SemRef::new(peer, SIG),
                    inc: 1 + offset as u64 % 2,
                    set: false,
                },
                1 if collective_id => OpKind::Signal {
                    sem: SemRef::new(peer, BAR),
                    inc: 1,
                    set: false,
                },
                2 => wait(SIG, 1, WaitKind::Semaphore),
                3 if collective_id => wait(BAR, 1, WaitKind::Semaphore),
                4 | 5 => {
                    let remote = what % 10 == 4;
                    let to = if remote { peer } else { d };
                    dmas.push(Dma {
                        src: view(d, 0, offset).into(),
                        dst: view(to, if remote { 0 } else { 1 }, 4 - offset % 4).into(),
                        send_sem: remote.then(|| on(SEND)),
                        recv_sem: SemRef::new(to, RECV),
                        bytes: 16,
                        origin: site,
                    });
                    OpKind::DmaStart(dmas.len() - 1)
                }
                6 => wait(RECV, 16, WaitKind::WaitRecv),
                7 => wait(SEND, 16, WaitKind::WaitSend),
                8 => OpKind::Compute(Box::new(DataOp::Accumulate {
                    dst: view(d, 1, offset),
                    src: view(d, 1, 4 - offset % 4),
                    op: ReduceOp::Sum,
                    dtype: DType::F32,
                })),
                _ => OpKind::Compute(Box::new(DataOp::Copy {
                    dst: view(d, 1, offset),
                    src: view(d, 0, 4 - offset % 4),
                })),
            };
            dev_ops.push(Op { kind, site });
        }
        ops.push(dev_ops);
    }
    Program {
        name: "random".into(),
        devices: n,
        layout,
        ops,
        dmas,
        prologue: Vec::new(),
        epilogue: Vec::new(),
        inputs: vec![0],
        outputs: vec![0],
        invocations: vec![Invocation::single(
            "random",
            &[1],
            collective_id.then_some(0),
            n,
        )],
        cores: 1,
    }
}

fn codes(max_ops: usize) -> impl Strategy<Value = Vec<Vec<(u8, usize, usize)>>> {
    (2usize..=4).prop_flat_map(move |n| {
        proptest::collection::vec(
            proptest::collection::vec((0u8..10, 0usize..8, 0usize..8), 0..=max_ops),
            n,
        )
    })
}

/// Holds the verifier's verdicts on `p` against the model's.
fn agree(p: &Program) -> Result<(), TestCaseError> {
    let t0 = std::time::Instant::now();
    let truth = model::explore(p, 20_000);
    if std::env::var("MODEL_DEBUG").is_ok() {
        eprintln!(
            "states {:?} in {:?}",
            truth.as_ref().map(|t| t.states),
            t0.elapsed()
        );
    }
    // A program whose interleavings are too many for a test's time is skipped.
    prop_assume!(truth.is_some());
    let truth = truth.unwrap();
    let specs = ScheduleSpec::check_set(p.devices, 16, 1);
    let found = verdicts(&check_program(p, &specs));
    let real = truth.keys();
    prop_assert!(
        found.is_subset(&real),
        "reported but no interleaving has it: {:?}",
        found.difference(&real).collect::<Vec<_>>()
    );
    prop_assert!(
        real.is_subset(&found),
        "an interleaving has it but the verifier missed it: {:?}",
        real.difference(&found).collect::<Vec<_>>()
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn random_kernels_agree_with_the_model(codes in codes(6), cid in any::<bool>()) {
        agree(&program(&codes, cid))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]
    #[test]
    fn random_sequences_agree_with_the_model(codes in codes(4)) {
        let p = tpusim::ir::sequence(&[program(&codes, true)], 2).unwrap();
        agree(&p)?;
    }
}

mod kernels;

/// A precision-suite kernel (or its twin) at P devices: the verifier's findings are the
/// model's, and there are some exactly for a twin from its `from` on.
fn kernel_agrees(case: &kernels::Case, p: usize, broken: bool) {
    let mesh = tpusim::Mesh::new(p, "x").unwrap();
    let job = tpusim::run::Job::call((case.build)(p, broken), mesh)
        .repeat(case.repeat)
        .unwrap();
    let program = job.lower().unwrap();
    let truth = model::explore(&program, 5_000_000).expect("small enough");
    let found = verdicts(&check_program(&program, &ScheduleSpec::check_set(p, 16, 1)));
    let what = format!(
        "{} P={p} broken={broken}: {} states",
        case.name, truth.states
    );
    assert_eq!(found, truth.keys(), "{what}");
    assert_eq!(truth.keys().is_empty(), !broken || p < case.from, "{what}");
}

/// The precision suite's kernels and their twins against the model, at the P each
/// explores in under a second or two.
#[test]
fn the_precision_kernels_agree_with_the_model() {
    for (case, top) in kernels::cases().iter().zip([5, 3, 3, 4]) {
        for p in 2..=top {
            for broken in [false, true] {
                kernel_agrees(case, p, broken);
            }
        }
    }
}

/// The same one device further: the counting and capacity semaphores at P = 4 and the
/// barrier rounds at P = 5, where the twin's hazard starts (2.7 million states for it,
/// minutes: run with `--ignored`).
#[test]
#[ignore]
fn the_precision_kernels_agree_with_the_model_one_device_further() {
    for (case, p) in kernels::cases().iter().zip([6, 4, 4, 5]) {
        for broken in [false, true] {
            kernel_agrees(case, p, broken);
        }
    }
}
