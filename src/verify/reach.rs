//! What a kernel can do before what, exactly: the ground truth a finding of the
//! happens-before replay is held against before it is reported.
//!
//! The replay's happens-before is a sound over-approximation of the races and early
//! sends of every schedule (it never misses one); this search rules out those no
//! schedule has. A race between `a` and `b` is real when some schedule runs both with
//! neither ordered before the other; an early send is real when some schedule sends
//! before the receiver has entered. Both questions are answered by one search: let every
//! device run as far as it can while the devices of `a` and `b` stop right after them
//! (and a DMA side stays in flight: all its bytes but the last land), and see whether `a`
//! and `b` are reached. The most a program can run under such stops is well defined
//! because nothing can take away what lets a wait pass: credits only add up, and the
//! waits that consume a semaphore are its own device's, in program order (a `Set`
//! notify or an `==` wait breaks this; such a program's findings are kept as the replay
//! found them). It is also exact: the events that know neither `a` nor `b` in a schedule
//! where the two are unordered form a run these stops allow, so if the search does not
//! reach both, every schedule orders them; if it does, the run it found is a schedule
//! that leaves them unordered (a wait is ordered only after the credits that reached its
//! semaphore before it, and none of those knows `a` or `b`).

use crate::ir::{Cmp, Completion, OpKind, Program};
use std::collections::HashMap;

/// One side of a race or send, as the search stops it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Point {
    /// Op `index` of device `device` (it runs, and the device stops after it).
    Op {
        /// Device.
        device: u32,
        /// Index in the device's ops.
        index: u32,
    },
    /// A DMA side in flight: the DMA is started and that completion held back.
    Dma {
        /// DMA id.
        dma: u32,
        /// The completion held back.
        side: Completion,
    },
}

/// What the search holds back: devices stop after an op or before entering an
/// invocation, DMA completions stay in flight.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Stops {
    /// (device, ops it may run), sorted.
    ops: Vec<(u32, u32)>,
    /// (device, the first invocation it may not enter).
    enter: Option<(u32, u32)>,
    /// DMA completions held back, sorted.
    held: Vec<(u32, Completion)>,
}

/// The search over one program, with the answers found so far (a check asks the same
/// questions under many schedules).
pub struct Reach<'p> {
    p: &'p Program,
    /// Per DMA: the device and op index that start it.
    starts: Vec<(u32, u32)>,
    /// False when a semaphore can lose value other than by its own device's waits (a
    /// `Set`) or a wait needs an exact value: the search's answer is then not exact.
    exact: bool,
    answers: HashMap<Stops, Vec<u32>>,
    /// Searches run (for tests and the budget's accounting).
    pub searches: usize,
}

impl<'p> Reach<'p> {
    /// The search over `p`.
    pub fn new(p: &'p Program) -> Self {
        let mut starts = vec![(u32::MAX, u32::MAX); p.dmas.len()];
        let mut exact = true;
        for (d, ops) in p.ops.iter().enumerate() {
            for (i, op) in ops.iter().enumerate() {
                match &op.kind {
                    OpKind::DmaStart(k) => starts[*k] = (d as u32, i as u32),
                    OpKind::Signal { set: true, .. } => exact = false,
                    OpKind::Wait { cmp: Cmp::Eq, .. } => exact = false,
                    _ => {}
                }
            }
        }
        Reach {
            p,
            starts,
            exact,
            answers: HashMap::new(),
            searches: 0,
        }
    }

    /// True when some schedule runs `a` and `b` with neither ordered before the other.
    pub fn unordered(&mut self, a: Point, b: Point) -> bool {
        if !self.exact {
            return true;
        }
        let mut stops = Stops::default();
        for x in [a, b] {
            self.stop_at(&mut stops, x);
        }
        let pc = self.search(stops);
        self.reached(&pc, a) && self.reached(&pc, b)
    }

    /// True when some schedule runs op `send` while device `to` has not entered
    /// invocation `invocation`.
    pub fn before_entry(&mut self, send: Point, to: usize, invocation: usize) -> bool {
        if !self.exact {
            return true;
        }
        let mut stops = Stops {
            enter: Some((to as u32, invocation as u32)),
            ..Stops::default()
        };
        self.stop_at(&mut stops, send);
        let pc = self.search(stops);
        self.reached(&pc, send)
    }

    fn stop_at(&self, stops: &mut Stops, x: Point) {
        match x {
            Point::Op { device, index } => {
                let cap = index + 1;
                match stops.ops.iter_mut().find(|(d, _)| *d == device) {
                    Some((_, c)) => *c = (*c).min(cap),
                    None => stops.ops.push((device, cap)),
                }
                stops.ops.sort_unstable();
            }
            Point::Dma { dma, side } => {
                // A local DMA's one completion ends its reads and writes alike.
                let side = if self.p.dmas[dma as usize].is_remote() {
                    side
                } else {
                    Completion::Local
                };
                if !stops.held.contains(&(dma, side)) {
                    stops.held.push((dma, side));
                    stops.held.sort_unstable_by_key(|&(k, s)| (k, s as u8));
                }
            }
        }
    }

    fn reached(&self, pc: &[u32], x: Point) -> bool {
        match x {
            Point::Op { device, index } => pc[device as usize] > index,
            Point::Dma { dma, .. } => {
                let (d, i) = self.starts[dma as usize];
                d != u32::MAX && pc[d as usize] > i
            }
        }
    }

    /// How far every device gets under `stops`: per device, the number of its ops run.
    fn search(&mut self, stops: Stops) -> Vec<u32> {
        if let Some(pc) = self.answers.get(&stops) {
            return pc.clone();
        }
        self.searches += 1;
        let pc = run(self.p, &stops);
        self.answers.insert(stops, pc.clone());
        pc
    }
}

/// Runs every device of `p` as far as `stops` lets it, every DMA completion landing
/// as soon as its DMA starts (a held one: all its bytes but the last): more credit
/// never keeps a wait from passing, so this is the most any schedule runs.
fn run(p: &Program, stops: &Stops) -> Vec<u32> {
    let n = p.devices;
    let table = p.layout.sem_table();
    let mut cap: Vec<u32> = p.ops.iter().map(|o| o.len() as u32).collect();
    for &(d, c) in &stops.ops {
        cap[d as usize] = cap[d as usize].min(c);
    }
    let k_all = p.invocations.len() as u32;
    let mut pc = vec![0u32; n];
    let mut entered = vec![0u32; n];
    let mut inside = vec![0usize; p.invocations.len()];
    let mut value = vec![0u64; table.len(n)];
    let mut consumed = vec![0u64; table.len(n)];
    let held_back = |k: usize| p.invocations[k].entry_barrier();
    let mut work: Vec<usize> = (0..n).rev().collect();
    let mut queued = vec![true; n];
    while let Some(d) = work.pop() {
        queued[d] = false;
        loop {
            let k = entered[d];
            if k < k_all && pc[d] >= p.invocations[k as usize].starts[d] {
                // Entering k leaves k - 1, behind its entry barrier until every device is in.
                if stops.enter == Some((d as u32, k))
                    || (k > 0 && held_back(k as usize - 1) && inside[k as usize - 1] < n)
                {
                    break;
                }
                entered[d] += 1;
                inside[k as usize] += 1;
                if held_back(k as usize) && inside[k as usize] == n {
                    for (e, q) in queued.iter_mut().enumerate() {
                        if !*q {
                            *q = true;
                            work.push(e);
                        }
                    }
                }
                continue;
            }
            let k = entered[d] as usize;
            if k > 0 && held_back(k - 1) && inside[k - 1] < n {
                break;
            }
            let i = pc[d] as usize;
            if pc[d] >= cap[d] || i >= p.ops[d].len() {
                break;
            }
            let mut credit = |slot: usize, amount: u64, value: &mut Vec<u64>| {
                value[slot] += amount;
                let owner = table.split(slot).0;
                if owner != d && !queued[owner] {
                    queued[owner] = true;
                    work.push(owner);
                }
            };
            match &p.ops[d][i].kind {
                OpKind::Wait {
                    sem, amount, why, ..
                } => {
                    let slot = p.layout.sem_slot(*sem);
                    if value[slot] < consumed[slot] + amount {
                        break;
                    }
                    if why.decrements() {
                        consumed[slot] += amount;
                    }
                }
                OpKind::Signal { sem, inc, .. } => {
                    credit(p.layout.sem_slot(*sem), *inc, &mut value);
                }
                OpKind::DmaStart(k) => {
                    for &side in p.dmas[*k].completions() {
                        let Some((s, amount)) = p.dma_credit(*k, side) else {
                            continue;
                        };
                        let held = stops.held.contains(&(*k as u32, side));
                        let amount = if held {
                            amount.saturating_sub(1)
                        } else {
                            amount
                        };
                        credit(p.layout.sem_slot(s), amount, &mut value);
                    }
                }
                _ => {}
            }
            pc[d] += 1;
        }
    }
    pc
}
