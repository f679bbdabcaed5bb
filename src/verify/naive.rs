//! The replay checked against the plainest implementation of the same rules: a vector
//! of P counters per device, copied at every DMA start and credit, every credit joined
//! into its semaphore's clock at once. Random small programs, random schedules (they
//! may deadlock: the log up to there is replayed) and random orders.

use super::hb::{replay, Agent, Credit, Send, Sink, Wait};
use super::log::{Entry, Event, EventLog};
use super::orders::{Join, Orders};
use super::Clock;
use crate::array::DType;
use crate::ir::{
    Allocation, Block, Cmp, DataOp, Dma, Layout, MemorySpace, Op, OpKind, OpSite, Program,
    ReduceOp, SemInfo, SemKind, SemRef, View, WaitKind,
};
use crate::sched::{observe, ScheduleSpec};
use crate::source::SourceLoc;
use proptest::prelude::*;
use std::collections::HashMap;

/// What a replay told its sink, with every clock written out.
#[derive(Debug, Default, PartialEq)]
struct Told(Vec<String>);

fn plain(c: &Clock) -> Vec<u32> {
    (0..c.len()).map(|d| c.device(d)).collect()
}

impl Sink for Told {
    fn credit(&mut self, id: usize, c: &Credit) {
        self.0
            .push(format!("credit {id} slot {} comp {}", c.slot, c.comp));
    }
    fn wait(&mut self, ordinal: usize, w: &Wait, clock: &Clock) {
        self.0
            .push(format!("wait {ordinal} pos {} {:?}", w.pos, plain(clock)));
    }
    fn access(
        &mut self,
        a: Agent,
        b: &Block,
        write: bool,
        clock: &Clock,
        _: Option<OpSite>,
        _: usize,
    ) {
        self.0
            .push(format!("access {a:?} {b:?} {write} {:?}", plain(clock)));
    }
    fn send(&mut self, s: &Send, clock: &Clock) {
        self.0.push(format!("send {} {:?}", s.to, plain(clock)));
    }
}

fn join(a: &mut [u32], b: &[u32]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = (*x).max(*y);
    }
}

/// The plain replay's state.
struct Plain {
    told: Told,
    /// Per semaphore slot, the join of its credits so far.
    all: HashMap<usize, Vec<u32>>,
    /// Every credit's clock, by id.
    credits: Vec<Vec<u32>>,
}

impl Plain {
    fn credit(&mut self, slot: usize, clock: &[u32], comp: u32) {
        let id = self.credits.len();
        self.told
            .0
            .push(format!("credit {id} slot {slot} comp {comp}"));
        join(
            self.all.entry(slot).or_insert_with(|| vec![0; clock.len()]),
            clock,
        );
        self.credits.push(clock.to_vec());
    }

    fn access(&mut self, a: Agent, v: impl Into<Block>, w: bool, c: &[u32]) {
        let b: Block = v.into();
        self.told.0.push(format!("access {a:?} {b:?} {w} {c:?}"));
    }
}

/// The replay's rules, written the plain way.
fn naive(p: &Program, log: &[Entry], orders: &Orders) -> Told {
    let n = p.devices;
    let sems = p.layout.sems.len();
    let mut s = Plain {
        told: Told::default(),
        all: HashMap::new(),
        credits: Vec::new(),
    };
    let barrier = p.invocations[0].entry_barrier();
    let mut dev = vec![vec![0; n]; n];
    let mut entered = 0;
    let mut starts: HashMap<usize, (Vec<u32>, usize)> = HashMap::new();
    let mut waits = 0;
    for ev in log {
        match ev.get() {
            Event::Prologue(i) => {
                if let DataOp::Copy { src, dst } = p.prologue[i as usize] {
                    let zero = vec![0; n];
                    s.access(Agent::Device(dst.device()), src, false, &zero);
                    s.access(Agent::Device(dst.device()), dst, true, &zero);
                }
            }
            Event::Enter { device: d, .. } => {
                dev[d as usize][d as usize] += 1;
                entered += 1;
                if barrier && entered == n {
                    let all: Vec<u32> = (0..n).map(|e| dev[e][e]).collect();
                    for c in &mut dev {
                        join(c, &all);
                    }
                }
            }
            Event::Op { device, index } => {
                let d = device as usize;
                match &p.ops[d][index as usize].kind {
                    OpKind::Compute(c) => {
                        dev[d][d] += 1;
                        for r in c.reads() {
                            s.access(Agent::Device(d), r, false, &dev[d]);
                        }
                        for w in c.writes() {
                            s.access(Agent::Device(d), w, true, &dev[d]);
                        }
                    }
                    OpKind::Mark(_) => {}
                    OpKind::Read { src, .. } => {
                        dev[d][d] += 1;
                        s.access(Agent::Device(d), *src, false, &dev[d]);
                    }
                    OpKind::SemRead { dst, .. } => {
                        dev[d][d] += 1;
                        s.access(Agent::Device(d), *dst, true, &dev[d]);
                    }
                    OpKind::DmaStart(k) => {
                        let dma = &p.dmas[*k];
                        if dma.is_remote() && dma.dst.device() != d {
                            s.told
                                .0
                                .push(format!("send {} {:?}", dma.dst.device(), dev[d]));
                        }
                        starts.insert(*k, (dev[d].clone(), dma.completions().len()));
                        dev[d][d] += 1;
                    }
                    OpKind::Signal { sem, .. } => {
                        let slot = sem.device() * sems + sem.sem();
                        if sem.device() != d && p.layout.sems[sem.sem()].kind != SemKind::Barrier {
                            s.told.0.push(format!("send {} {:?}", sem.device(), dev[d]));
                        }
                        let c = dev[d].clone();
                        s.credit(slot, &c, c[sem.device()]);
                        dev[d][d] += 1;
                    }
                    OpKind::Wait { sem, .. } => {
                        let slot = sem.device() * sems + sem.sem();
                        match orders.get(waits) {
                            Join::All => {
                                if let Some(c) = s.all.get(&slot) {
                                    join(&mut dev[d], c);
                                }
                            }
                            Join::Nothing => {}
                            Join::Some(ids) => {
                                for &id in ids {
                                    let id = id & !super::orders::CLOCK_ONLY;
                                    if let Some(c) = s.credits.get(id) {
                                        join(&mut dev[d], c);
                                    }
                                }
                            }
                        }
                        dev[d][d] += 1;
                        s.told
                            .0
                            .push(format!("wait {waits} pos {} {:?}", dev[d][d], dev[d]));
                        waits += 1;
                    }
                }
            }
            Event::Complete { dma: k, side } => {
                let k = k as usize;
                let dma = &p.dmas[k];
                let Some((start, left)) = starts.get_mut(&k) else {
                    continue;
                };
                *left -= 1;
                let (start, done) = (start.clone(), *left == 0);
                if let Some(v) = dma.reads_until(side) {
                    s.access(Agent::Dma(k, side), v, false, &start);
                }
                if let Some(v) = dma.writes_until(side) {
                    s.access(Agent::Dma(k, side), v, true, &start);
                }
                if let Some(sem) = dma.credits(side) {
                    s.credit(sem.device() * sems + sem.sem(), &start, start[sem.device()]);
                }
                if done {
                    starts.remove(&k);
                }
            }
        }
    }
    s.told
}

/// Semaphores of the random programs.
const SEND: usize = 0;
const RECV: usize = 1;
const SIG: usize = 2;
const BAR: usize = 3;

/// A program of `n` devices whose ops `codes` describe: (what, a peer, an offset).
fn program(n: usize, codes: &[Vec<(u8, usize, usize)>], entry_barrier: bool) -> Program {
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
        let site = OpSite::new(d as u32, 0, "op", SourceLoc::caller());
        let on = |sem| SemRef::new(d, sem);
        let wait = |sem, amount, why| OpKind::Wait {
            sem: on(sem),
            amount,
            why,
            cmp: Cmp::Ge,
        };
        let dev_ops = list
            .iter()
            .map(|&(what, peer, offset)| {
                let peer = peer % n;
                let offset = offset % 5;
                let kind = match what % 9 {
                    0 => OpKind::Signal {
                        sem: SemRef::new(peer, SIG),
                        inc: 1 + offset as u64 % 2,
                        set: false,
                    },
                    1 => OpKind::Signal {
                        sem: SemRef::new(peer, BAR),
                        inc: 1,
                        set: false,
                    },
                    2 => wait(SIG, 1, WaitKind::Semaphore),
                    3 => wait(BAR, 1, WaitKind::Semaphore),
                    4 | 5 => {
                        dmas.push(Dma {
                            src: view(d, 0, offset).into(),
                            dst: view(peer, 0, 4 - offset % 4).into(),
                            send_sem: (what % 9 == 4).then(|| on(SEND)),
                            recv_sem: SemRef::new(if what % 9 == 4 { peer } else { d }, RECV),
                            bytes: 16,
                            origin: site,
                        });
                        OpKind::DmaStart(dmas.len() - 1)
                    }
                    6 => wait(RECV, 16, WaitKind::WaitRecv),
                    7 => wait(SEND, 16, WaitKind::WaitSend),
                    _ => OpKind::Compute(Box::new(DataOp::Accumulate {
                        dst: view(d, 1, offset),
                        src: view(d, 1, 4 - offset % 4),
                        op: ReduceOp::Sum,
                        dtype: DType::F32,
                    })),
                };
                Op { kind, site }
            })
            .collect();
        ops.push(dev_ops);
    }
    // Local DMAs land on the issuer: point them there.
    for dma in dmas.iter_mut().filter(|m| m.send_sem.is_none()) {
        dma.dst = dma.dst.on_device(dma.src.device());
    }
    Program {
        name: "random".into(),
        devices: n,
        layout,
        ops,
        dmas,
        prologue: (0..n)
            .map(|d| DataOp::Copy {
                src: view(d, 0, 0),
                dst: view(d, 1, 0),
            })
            .collect(),
        epilogue: Vec::new(),
        inputs: vec![0],
        outputs: vec![0],
        invocations: vec![crate::ir::Invocation::single(
            "random",
            &[1],
            (!entry_barrier).then_some(0),
            n,
        )],
        cores: 1,
    }
}

fn codes() -> impl Strategy<Value = Vec<Vec<(u8, usize, usize)>>> {
    (2usize..5).prop_flat_map(|n| {
        proptest::collection::vec(
            proptest::collection::vec((0u8..9, 0usize..8, 0usize..8), 0..14),
            n,
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    /// The replay tells its sink what the plain rules say, under any orders.
    #[test]
    fn replay_matches_the_plain_rules(
        codes in codes(),
        barrier in any::<bool>(),
        seed in 0u64..1000,
        picks in proptest::collection::vec((0u8..4, proptest::collection::vec(0usize..40, 0..4)), 0..60),
    ) {
        let p = program(codes.len(), &codes, barrier);
        let mut log = EventLog::new(p.devices);
        let _ = observe(&p, ScheduleSpec::Random(seed).policy().as_mut(), &mut log);
        let waits = super::hb::tally(&p, &log.events).0;
        let mut orders = Orders::default();
        for i in 0..waits {
            let (what, ids) = picks.get(i).cloned().unwrap_or((0, Vec::new()));
            orders.push(match what {
                0 | 1 => Join::All,
                2 => Join::Nothing,
                _ => Join::Some(&ids),
            });
        }
        let mut fast = Told::default();
        replay(&p, &log.events, &orders, &mut fast);
        prop_assert_eq!(fast, naive(&p, &log.events, &orders));
    }

    /// Every policy runs the random programs (the scheduler checks, under test, that
    /// the choices it keeps from step to step are those a plain listing gives).
    #[test]
    fn policies_keep_their_choices(
        codes in codes(),
        barrier in any::<bool>(),
        seed in 0u64..1000,
    ) {
        let p = program(codes.len(), &codes, barrier);
        for spec in ScheduleSpec::check_set(p.devices, p.devices + 5, seed) {
            let _ = observe(&p, spec.policy().as_mut(), &mut EventLog::new(p.devices));
        }
    }

    /// The fixpoint's facts read back from the log exactly the credits and waits the
    /// replay told them (`Facts` checks each one as it is recorded, under test).
    #[test]
    fn facts_read_back_what_the_replay_told(
        codes in codes(),
        barrier in any::<bool>(),
        seed in 0u64..1000,
    ) {
        let p = program(codes.len(), &codes, barrier);
        let mut log = EventLog::new(p.devices);
        let _ = observe(&p, ScheduleSpec::Random(seed).policy().as_mut(), &mut log);
        let _ = super::fixpoint::check(&p, &log.events, &mut super::reach::Reach::new(&p));
    }
}
