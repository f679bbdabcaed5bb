//! Happens-before over a recorded run: the run's events replayed with a vector clock per
//! device. Program order (across invocations too), a DMA's start before its completions,
//! a wait after the credits [`Orders`] says it is ordered after, and Pallas' entry
//! barrier of an invocation without a `collective_id` (every device's entry before every
//! device's first op of it) are the only edges. What each event does to memory and
//! semaphores is told to a [`Sink`].

use super::clock::Clock;
use super::log::{Entry, Event};
use super::orders::{Join, Orders, CLOCK_ONLY};
use crate::ir::{Block, Completion, DataOp, Op, OpKind, OpSite, Program, SemKind, View};
use crate::sched::ids::IdMap;
use std::collections::HashSet;

/// Who accesses memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Agent {
    /// A device's own op.
    Device(usize),
    /// A DMA, for the access that its completion `side` ends (source reads end at the
    /// send completion, destination writes at the receive completion).
    Dma(usize, Completion),
}

/// A semaphore credit: a signal, or a DMA completion. Slot and log position are 32 bits
/// (a run at large P has millions of credits; [`Credit::slot`] and [`Credit::at`] give
/// them as `usize`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credit {
    /// Semaphore slot (device * sems + sem).
    pub slot: u32,
    /// Amount added (bytes for DMAs).
    pub amount: u64,
    /// The crediting event's knowledge of the semaphore's device: the credit can only
    /// come after a wait on that device whose position is at most this.
    pub comp: u32,
    /// Its sender's own clock component in its clock: a signal's, or the start's of a
    /// DMA (the sender's credits are ordered by it, and so are their clocks).
    pub from: u32,
    /// A seed-003 `Set` notify (overwrites instead of adding).
    pub set: bool,
    /// Lands whole (a signal) rather than byte by byte (a DMA).
    pub atomic: bool,
    /// The DMA completion it is, if any (the id in 32 bits: a run has millions of credits).
    pub dma: Option<(u32, Completion)>,
    /// Position in the log (a signal's op is there).
    pub at: u32,
}

impl Credit {
    /// The device that sent it: a signal's, or the one that started the DMA.
    pub fn sender(&self, p: &Program, log: &[Entry]) -> usize {
        match self.dma_side() {
            Some((k, _)) => p.dmas[k].origin.device as usize,
            None => op_at(p, log, self.at()).map_or(0, |o| o.site.device as usize),
        }
    }

    /// Semaphore slot.
    pub fn slot(&self) -> usize {
        self.slot as usize
    }

    /// Position in the log.
    pub fn at(&self) -> usize {
        self.at as usize
    }

    /// The DMA completion it is, if any.
    pub fn dma_side(&self) -> Option<(usize, Completion)> {
        self.dma.map(|(k, side)| (k as usize, side))
    }
}

/// A passed wait (32-bit slot and position, as [`Credit`]'s).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    /// Semaphore slot (on the waiting device).
    pub slot: u32,
    /// Amount waited for.
    pub amount: u64,
    /// Subtracts the amount (all but seed-003 signal waits).
    pub decrement: bool,
    /// The waiting device's own clock component just after the wait.
    pub pos: u32,
    /// Position in the log (its op is there).
    pub at: u32,
}

impl Wait {
    /// Semaphore slot.
    pub fn slot(&self) -> usize {
        self.slot as usize
    }

    /// Position in the log.
    pub fn at(&self) -> usize {
        self.at as usize
    }
}

/// A remote DMA or signal sent to another device.
#[derive(Clone, Copy, Debug)]
pub struct Send {
    /// Receiving device.
    pub to: usize,
    /// The op that sends.
    pub site: OpSite,
    /// The semaphore it credits there (None: a DMA, named by `dma`).
    pub sem: Option<usize>,
    /// The DMA, for a DMA.
    pub dma: Option<usize>,
    /// Position of the sending op in the log.
    pub at: usize,
}

/// Receives what the replay finds. All hooks default to nothing.
pub trait Sink {
    /// A credit (ids count from 0 in log order).
    fn credit(&mut self, _id: usize, _c: &Credit) {}
    /// A wait passed (ordinals count from 0 in log order), with the waiter's clock after it.
    fn wait(&mut self, _ordinal: usize, _w: &Wait, _clock: &Clock) {}
    /// A memory access by `agent` (a view, or a DMA's rows) whose ordering is decided by
    /// `clock`, made by the event at log position `at`.
    fn access(
        &mut self,
        _agent: Agent,
        _b: &Block,
        _write: bool,
        _clock: &Clock,
        _site: Option<OpSite>,
        _at: usize,
    ) {
    }
    /// Destination `v` of an op that reads it before writing it (an accumulate's); its
    /// write comes as an access too.
    fn reads_destination(&mut self, _agent: Agent, _v: &View, _site: Option<OpSite>) {}
    /// A device sends to another one, with the sender's clock.
    fn send(&mut self, _s: &Send, _clock: &Clock) {}
    /// Device `device` entered invocation `invocation`; its own clock component is
    /// `pos` from there on.
    fn enter(&mut self, _device: usize, _invocation: usize, _pos: u32) {}
}

/// Two sinks fed by one replay.
impl<A: Sink, B: Sink> Sink for (A, B) {
    fn credit(&mut self, id: usize, c: &Credit) {
        self.0.credit(id, c);
        self.1.credit(id, c);
    }
    fn wait(&mut self, ordinal: usize, w: &Wait, clock: &Clock) {
        self.0.wait(ordinal, w, clock);
        self.1.wait(ordinal, w, clock);
    }
    fn access(
        &mut self,
        agent: Agent,
        b: &Block,
        write: bool,
        clock: &Clock,
        site: Option<OpSite>,
        at: usize,
    ) {
        self.0.access(agent, b, write, clock, site, at);
        self.1.access(agent, b, write, clock, site, at);
    }
    fn reads_destination(&mut self, agent: Agent, v: &View, site: Option<OpSite>) {
        self.0.reads_destination(agent, v, site);
        self.1.reads_destination(agent, v, site);
    }
    fn send(&mut self, s: &Send, clock: &Clock) {
        self.0.send(s, clock);
        self.1.send(s, clock);
    }
    fn enter(&mut self, device: usize, invocation: usize, pos: u32) {
        self.0.enter(device, invocation, pos);
        self.1.enter(device, invocation, pos);
    }
}

/// Replays `log` under `orders`, telling `sink` every credit, wait, access and send.
pub fn replay(p: &Program, log: &[Entry], orders: &Orders, sink: &mut dyn Sink) {
    let n = p.devices;
    let sems = p.layout.sems.len();
    let mut dev: Vec<Clock> = (0..n).map(|d| Clock::new(n).owned_by(d)).collect();
    // Per invocation behind Pallas' entry barrier: the entries so far, joined.
    let mut barrier: IdMap<usize, (Clock, usize)> = IdMap::default();
    let zero = Clock::new(n);
    let mut starts: IdMap<usize, (Clock, u8)> = IdMap::default();
    let mut rel = Released {
        devices: n,
        keep: orders.kept().collect(),
        ..Released::default()
    };
    let mut waits = 0usize;

    for (at, ev) in log.iter().enumerate() {
        match ev.get() {
            Event::Prologue(i) => {
                // Part of entry: ordered before everything the kernel does.
                let op = &p.prologue[i as usize];
                if let DataOp::Copy { dst, .. } = op {
                    let d = dst.device();
                    data_accesses(op, Agent::Device(d), &zero, (None, at), sink);
                }
            }
            Event::Enter { device, invocation } => {
                let (d, k) = (device as usize, invocation as usize);
                dev[d].tick(d);
                sink.enter(d, k, dev[d].device(d));
                if p.invocations[k].entry_barrier() {
                    let (all, entered) = barrier.entry(k).or_insert_with(|| (Clock::new(n), 0));
                    all.join(&dev[d]);
                    *entered += 1;
                    if *entered == n {
                        // Every device waits at the barrier until the last one is in.
                        let (all, _) = barrier.remove(&k).expect("just seen");
                        for c in &mut dev {
                            c.join(&all);
                        }
                    }
                }
            }
            Event::Op { device, index } => {
                let d = device as usize;
                let op = &p.ops[d][index as usize];
                match &op.kind {
                    OpKind::Compute(c) => {
                        dev[d].tick(d);
                        data_accesses(c, Agent::Device(d), &dev[d], (Some(op.site), at), sink);
                    }
                    OpKind::Mark(_) => {}
                    OpKind::Read { src, .. } => {
                        dev[d].tick(d);
                        sink.access(
                            Agent::Device(d),
                            &(*src).into(),
                            false,
                            &dev[d],
                            Some(op.site),
                            at,
                        );
                    }
                    OpKind::SemRead { dst, .. } => {
                        // A write of `dst`; reading a semaphore orders nothing.
                        dev[d].tick(d);
                        let fill = OpKind::fill_of_read(*dst, 0);
                        data_accesses(&fill, Agent::Device(d), &dev[d], (Some(op.site), at), sink);
                    }
                    OpKind::DmaStart(k) => {
                        let dma = &p.dmas[*k];
                        if dma.is_remote() && dma.dst.device() != d {
                            let s = Send {
                                to: dma.dst.device(),
                                site: op.site,
                                sem: None,
                                dma: Some(*k),
                                at,
                            };
                            sink.send(&s, &dev[d]);
                        }
                        let left = dma.completions().len() as u8;
                        starts.insert(*k, (dev[d].clone(), left));
                        dev[d].tick(d);
                    }
                    OpKind::Signal { sem, inc, set } => {
                        let slot = sem.device() * sems + sem.sem();
                        if sem.device() != d && p.layout.sems[sem.sem()].kind != SemKind::Barrier {
                            let s = Send {
                                to: sem.device(),
                                site: op.site,
                                sem: Some(slot),
                                dma: None,
                                at,
                            };
                            sink.send(&s, &dev[d]);
                        }
                        let c = Credit {
                            slot: small(slot),
                            amount: *inc,
                            comp: dev[d].device(sem.device()),
                            from: dev[d].device(d),
                            set: *set,
                            atomic: true,
                            dma: None,
                            at: small(at),
                        };
                        rel.credit(c, &dev[d], sink);
                        dev[d].tick(d);
                    }
                    OpKind::Wait {
                        sem, amount, why, ..
                    } => {
                        let slot = sem.device() * sems + sem.sem();
                        match orders.get(waits) {
                            Join::All => rel.join_all(slot, &mut dev[d], d),
                            Join::Nothing => {}
                            Join::Some(ids) => {
                                for id in ids {
                                    if let Some(c) = rel.kept.get(&(id & !CLOCK_ONLY)) {
                                        dev[d].join(c);
                                    }
                                }
                            }
                        }
                        dev[d].tick(d);
                        let w = Wait {
                            slot: small(slot),
                            amount: *amount,
                            decrement: *why != crate::ir::WaitKind::Signal,
                            pos: dev[d].device(d),
                            at: small(at),
                        };
                        sink.wait(waits, &w, &dev[d]);
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
                if let Some(v) = dma.reads_until(side) {
                    sink.access(Agent::Dma(k, side), &v, false, start, None, at);
                }
                if let Some(v) = dma.writes_until(side) {
                    sink.access(Agent::Dma(k, side), &v, true, start, None, at);
                }
                let done = *left == 0;
                if let Some((s, amount)) = p.dma_credit(k, side) {
                    let c = Credit {
                        slot: small(s.device() * sems + s.sem()),
                        amount,
                        comp: start.device(s.device()),
                        from: start.device(dma.origin.device as usize),
                        set: false,
                        atomic: false,
                        dma: Some((u32::try_from(k).expect("fewer than 2^32 DMAs"), side)),
                        at: small(at),
                    };
                    let clock = start.clone();
                    rel.credit(c, &clock, sink);
                }
                if done {
                    starts.remove(&k);
                }
            }
        }
    }
}

/// Credits a slot holds before they are folded into one clock: enough for the few in
/// flight at once on a semaphore, few enough that their clocks cost little memory
/// (tests fold early, so that the random programs fold too).
const RECENT: usize = if cfg!(test) { 2 } else { 16 };

/// The clocks of the credits so far: per semaphore, those a wait that joins them all
/// has not joined yet, and one by one for the credits some wait joins individually.
#[derive(Default)]
struct Released {
    devices: usize,
    keep: HashSet<usize>,
    /// Per semaphore slot credited so far (a kernel may declare P² semaphores per
    /// device and use a few of them: seed 003's signal matrix).
    pending: IdMap<u32, Pending>,
    kept: IdMap<usize, Clock>,
    next: usize,
}

/// A semaphore's credits not yet joined by a wait that joins them all: the recent ones
/// as they are, older ones folded into one clock.
#[derive(Default)]
struct Pending {
    folded: Option<Clock>,
    recent: Vec<Clock>,
}

impl Released {
    /// Joins into `clock`, device `d`'s, every credit of `slot` so far. The waits on a
    /// slot are its device's, and a device's clock only grows, so the credits an
    /// earlier such wait joined are in it already; so is a clock `d` itself had.
    fn join_all(&mut self, slot: usize, clock: &mut Clock, d: usize) {
        // Dropped once joined: a slot holds clocks only while credits wait on it.
        let Some(p) = self.pending.remove(&small(slot)) else {
            return;
        };
        for c in p.folded.iter().chain(&p.recent) {
            if c.owner() != Some(d) {
                clock.join(c);
            }
        }
    }

    fn credit(&mut self, c: Credit, clock: &Clock, sink: &mut dyn Sink) {
        let p = self.pending.entry(c.slot).or_default();
        if p.recent.len() == RECENT {
            let folded = p.folded.get_or_insert_with(|| Clock::new(self.devices));
            for r in p.recent.drain(..) {
                folded.join(&r);
            }
        }
        p.recent.push(clock.clone());
        if !self.keep.is_empty() && self.keep.contains(&self.next) {
            self.kept.insert(self.next, clock.clone());
        }
        sink.credit(self.next, &c);
        self.next += 1;
    }
}

/// The credit the event at `at` of `log` gave, whose crediting event knew `comp` of the
/// semaphore's device and `from` of its sender's (what [`replay`] tells a [`Sink`]).
pub fn credit_at(p: &Program, log: &[Entry], at: u32, comp: u32, from: u32) -> Credit {
    let sems = p.layout.sems.len();
    match log[at as usize].get() {
        Event::Op { device, index } => match p.ops[device as usize][index as usize].kind {
            OpKind::Signal { sem, inc, set } => Credit {
                slot: small(sem.device() * sems + sem.sem()),
                amount: inc,
                comp,
                from,
                set,
                atomic: true,
                dma: None,
                at,
            },
            _ => unreachable!("a credit's op is a signal"),
        },
        Event::Complete { dma: k, side } => {
            let (s, amount) = p
                .dma_credit(k as usize, side)
                .expect("a credit's completion credits");
            Credit {
                slot: small(s.device() * sems + s.sem()),
                amount,
                comp,
                from,
                set: false,
                atomic: false,
                dma: Some((k, side)),
                at,
            }
        }
        _ => unreachable!("a credit is a signal or a completion"),
    }
}

/// The wait at `at` of `log`, whose device was at `pos` just after it.
pub fn wait_at(p: &Program, log: &[Entry], at: u32, pos: u32) -> Wait {
    let Some(Op {
        kind: OpKind::Wait {
            sem, amount, why, ..
        },
        ..
    }) = op_at(p, log, at as usize)
    else {
        unreachable!("a wait's op is a wait")
    };
    Wait {
        slot: small(sem.device() * p.layout.sems.len() + sem.sem()),
        amount: *amount,
        decrement: *why != crate::ir::WaitKind::Signal,
        pos,
        at,
    }
}

/// `x` in 32 bits: semaphore slots and log positions of a run stay below 2^32.
pub(super) fn small(x: usize) -> u32 {
    u32::try_from(x).expect("fewer than 2^32 semaphore slots and events")
}

/// The reads and writes of a device's data op.
fn data_accesses(
    op: &DataOp,
    agent: Agent,
    clock: &Clock,
    (site, at): (Option<OpSite>, usize),
    sink: &mut dyn Sink,
) {
    for v in op.reads() {
        sink.access(agent, &v.into(), false, clock, site, at);
    }
    if let DataOp::Accumulate { dst, .. } = op {
        sink.reads_destination(agent, dst, site);
    }
    for v in op.writes() {
        sink.access(agent, &v.into(), true, clock, site, at);
    }
}

/// The op the event at `at` of `log` ran, for a device's op.
pub fn op_at<'p>(p: &'p Program, log: &[Entry], at: usize) -> Option<&'p Op> {
    match log.get(at)?.get() {
        Event::Op { device, index } => p.ops[device as usize].get(index as usize),
        _ => None,
    }
}

/// The number of waits in `log` (every wait op a device passed), and at most how many
/// credits its replay has (every signal and DMA completion): the replay's records are
/// sized from them.
pub fn tally(p: &Program, log: &[Entry]) -> (usize, usize) {
    let (mut waits, mut credits) = (0, 0);
    for e in log {
        match e.get() {
            Event::Op { device, index } => match p.ops[device as usize][index as usize].kind {
                OpKind::Wait { .. } => waits += 1,
                OpKind::Signal { .. } => credits += 1,
                _ => {}
            },
            Event::Complete { .. } => credits += 1,
            _ => {}
        }
    }
    (waits, credits)
}
