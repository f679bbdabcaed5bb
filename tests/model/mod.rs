//! A test-side model checker: every interleaving of a small program (P <= 5, a few
//! invocations) at the level of kernel entries, signals, waits, DMA starts and DMA
//! completions, with happens-before computed in each execution as JAX's interpret mode
//! does (a vector clock per device and per DMA completion; a semaphore's clock is the
//! join of every credit that reached it, and a wait joins it). A DMA's bytes land in
//! two pieces, all but the last and then the last (its completion), so a wait can pass
//! on a mix of two DMAs' bytes. It finds, by definition, every race (two accesses to the
//! same element, one a write, neither ordered before the other in some execution) and
//! every send to a device whose entry is not ordered before it, named as the verifier
//! names them ([`tpusim::verify::Problem::key`]). Written independently of the
//! verifier: it is the ground truth the verifier is held against.
#![allow(dead_code)]

use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use tpusim::ir::{Cmp, Completion, DataOp, OpKind, Program, SemKind, View};

/// What every interleaving of a program shows.
#[derive(Debug, Default)]
pub struct Truth {
    /// Keys of the races.
    pub races: BTreeSet<String>,
    /// Keys of the sends before entry.
    pub early: BTreeSet<String>,
    /// Some execution deadlocks.
    pub deadlock: bool,
    /// Distinct states explored.
    pub states: usize,
}

impl Truth {
    /// Every problem key, races and early sends.
    pub fn keys(&self) -> BTreeSet<String> {
        self.races.iter().chain(&self.early).cloned().collect()
    }
}

/// An access: who made it (a device at its own clock value, or a DMA side's clock
/// component), what it touches, and where its clock is in the history's clocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Access {
    /// A device: (device, its own clock value); a DMA side: (its component, 0).
    device: bool,
    agent: u32,
    time: u32,
    write: bool,
    /// Index of `op@location` in the model's table.
    site: u32,
    /// (device, allocation, first element, end).
    range: (u32, u32, u32, u32),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    pc: Vec<u32>,
    entered: Vec<u32>,
    /// Per device and invocation: its own clock value at its entry.
    entry: Vec<u32>,
    value: Vec<u64>,
    /// Clocks, `comps` counters each: devices', semaphores', DMA starts'.
    clock: Vec<u32>,
    sem_clock: Vec<u32>,
    start: Vec<u32>,
    /// Per DMA: started; per completion side (send, receive or local): pieces landed.
    started: Vec<bool>,
    landed: Vec<u8>,
    /// Accesses that may still race with a later one, each with its clock (what it
    /// knows: a device's, a DMA's start clock), sorted.
    history: Vec<(Access, Vec<u32>)>,
}

/// One interleaving step.
#[derive(Clone, Copy, Debug)]
enum Step {
    Device(usize),
    Piece(usize, usize),
}

struct Model<'p> {
    p: &'p Program,
    /// Per DMA and completion side: its bytes land in two pieces (else at once: no wait
    /// on its semaphore can pass on part of them, nor on a mix with other bytes).
    pieces: Vec<[bool; 2]>,
    comps: usize,
    /// `op@location` of every op, by id.
    sites: Vec<String>,
    /// Per device and op: its site's id; per DMA: its start's.
    op_site: Vec<Vec<u32>>,
    dma_site: Vec<u32>,
    truth: Truth,
}

fn join(a: &mut [u32], b: &[u32]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = (*x).max(*y);
    }
}

/// A fast 64-bit hash.
struct Mix(u64);

impl Hasher for Mix {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.write_u64(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        }
        for b in words.remainder() {
            self.write_u64(u64::from(*b));
        }
    }
    fn write_u8(&mut self, x: u8) {
        self.write_u64(u64::from(x));
    }
    fn write_u32(&mut self, x: u32) {
        self.write_u64(u64::from(x));
    }
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// A state's 64-bit digest (two of a million states collide with odds under 1e-7).
fn digest(s: &State) -> u64 {
    let mut a = Mix(0x9e37_79b9_7f4a_7c15);
    s.hash(&mut a);
    a.finish()
}

/// Explores every interleaving of `p`; `None` past `limit` distinct states.
pub fn explore(p: &Program, limit: usize) -> Option<Truth> {
    let n = p.devices;
    let comps = n + 2 * p.dmas.len();
    let slots = n * p.layout.sems.len();
    let mut ids: HashMap<String, u32> = HashMap::new();
    let mut sites = Vec::new();
    let mut id = |site: &tpusim::ir::OpSite| {
        let s = format!("{}@{}", site.op(), site.location);
        *ids.entry(s.clone()).or_insert_with(|| {
            sites.push(s);
            sites.len() as u32 - 1
        })
    };
    let op_site = p
        .ops
        .iter()
        .map(|ops| ops.iter().map(|o| id(&o.site)).collect())
        .collect();
    let dma_site = p.dmas.iter().map(|d| id(&d.origin)).collect();
    let mut m = Model {
        p,
        pieces: pieces(p),
        comps,
        sites,
        op_site,
        dma_site,
        truth: Truth::default(),
    };
    let mut s = State {
        pc: vec![0; n],
        entered: vec![0; n],
        entry: vec![0; n * p.invocations.len()],
        value: vec![0; slots],
        clock: vec![0; n * comps],
        sem_clock: vec![0; slots * comps],
        start: vec![0; p.dmas.len() * comps],
        started: vec![false; p.dmas.len()],
        landed: vec![0; 2 * p.dmas.len()],
        history: Vec::new(),
    };
    // The prologue's copies are the inputs, ordered before everything: not modelled.
    for d in 0..n {
        m.locals(&mut s, d);
    }
    let mut seen: HashSet<u64> = HashSet::new();
    seen.insert(digest(&s));
    let mut stack = vec![s];
    while let Some(s) = stack.pop() {
        if seen.len() > limit {
            return None;
        }
        let steps = m.steps(&s);
        if steps.is_empty() {
            let k = p.invocations.len() as u32;
            let done = (0..n).all(|d| s.pc[d] as usize == p.ops[d].len() && s.entered[d] == k);
            m.truth.deadlock |= !done;
            continue;
        }
        for step in steps {
            let mut t = s.clone();
            m.take(&mut t, step);
            for d in 0..n {
                m.locals(&mut t, d);
            }
            m.forget(&mut t);
            if seen.insert(digest(&t)) {
                stack.push(t);
            }
        }
    }
    m.truth.states = seen.len();
    Some(m.truth)
}

impl Model<'_> {
    fn slot(&self, device: usize, sem: usize) -> usize {
        device * self.p.layout.sems.len() + sem
    }

    fn clock<'s>(&self, s: &'s State, d: usize) -> &'s [u32] {
        &s.clock[d * self.comps..(d + 1) * self.comps]
    }

    /// Device `d`'s next step is its entry into an invocation.
    fn entry_due(&self, s: &State, d: usize) -> Option<usize> {
        let k = s.entered[d] as usize;
        let inv = self.p.invocations.get(k)?;
        (s.pc[d] >= inv.starts[d]).then_some(k)
    }

    /// Pallas' entry barrier of invocation `k` still holds its devices.
    fn held(&self, s: &State, k: usize) -> bool {
        self.p.invocations[k].collective_id.is_none() && s.entered.iter().any(|&e| e as usize <= k)
    }

    fn steps(&self, s: &State) -> Vec<Step> {
        let mut out = Vec::new();
        for d in 0..self.p.devices {
            if self.enabled(s, d) {
                out.push(Step::Device(d));
            }
        }
        for k in 0..self.p.dmas.len() {
            if s.started[k] {
                for i in 0..self.p.dmas[k].completions().len() {
                    if s.landed[2 * k + i] < 2 {
                        out.push(Step::Piece(k, i));
                    }
                }
            }
        }
        out
    }

    fn enabled(&self, s: &State, d: usize) -> bool {
        if let Some(k) = self.entry_due(s, d) {
            return k == 0 || !self.held(s, k - 1);
        }
        if s.entered[d] > 0 && self.held(s, s.entered[d] as usize - 1) {
            return false;
        }
        match self.p.ops[d].get(s.pc[d] as usize).map(|o| &o.kind) {
            None => false,
            Some(OpKind::Wait {
                sem, amount, cmp, ..
            }) => {
                let v = s.value[self.slot(sem.device(), sem.sem())];
                match cmp {
                    Cmp::Ge => v >= *amount,
                    Cmp::Eq => v == *amount,
                }
            }
            Some(_) => true,
        }
    }

    fn tick(&self, s: &mut State, d: usize) -> u32 {
        let c = &mut s.clock[d * self.comps + d];
        *c += 1;
        *c
    }

    fn take(&mut self, s: &mut State, step: Step) {
        match step {
            Step::Device(d) => {
                if let Some(k) = self.entry_due(s, d) {
                    s.entered[d] += 1;
                    s.entry[d * self.p.invocations.len() + k] = self.tick(s, d);
                    let barrier = self.p.invocations[k].collective_id.is_none();
                    if barrier && s.entered.iter().all(|&e| e as usize > k) {
                        let mut all = vec![0; self.comps];
                        for c in s.clock.chunks(self.comps) {
                            join(&mut all, c);
                        }
                        for c in s.clock.chunks_mut(self.comps) {
                            join(c, &all);
                        }
                    }
                    return;
                }
                self.sync_op(s, d);
                s.pc[d] += 1;
            }
            Step::Piece(k, i) => self.piece(s, k, i),
        }
    }

    /// Runs device `d`'s ops that only touch its own memory, up to its next step that
    /// another device or a DMA can observe (they need no interleaving of their own: what
    /// they know is the device's clock, which only its own steps change).
    fn locals(&mut self, s: &mut State, d: usize) {
        loop {
            if self.entry_due(s, d).is_some() {
                return;
            }
            if s.entered[d] > 0 && self.held(s, s.entered[d] as usize - 1) {
                return;
            }
            let Some(op) = self.p.ops[d].get(s.pc[d] as usize) else {
                return;
            };
            let site = self.op_site[d][s.pc[d] as usize];
            match &op.kind {
                OpKind::Compute(c) => {
                    let time = self.tick(s, d);
                    self.data(s, d, time, c, site);
                }
                OpKind::SemRead { dst, .. } => {
                    let time = self.tick(s, d);
                    let fill = DataOp::Fill { dst: *dst, bits: 0 };
                    self.data(s, d, time, &fill, site);
                }
                OpKind::Mark(_) => {}
                _ => return,
            }
            s.pc[d] += 1;
        }
    }

    fn data(&mut self, s: &mut State, d: usize, time: u32, op: &DataOp, site: u32) {
        let clock = self.clock(s, d).to_vec();
        let reads = op.reads().map(|v| (v, false));
        let writes = op.writes().map(|v| (v, true));
        let all: Vec<(View, bool)> = reads.chain(writes).collect();
        for (v, write) in all {
            let a = Access {
                device: true,
                agent: d as u32,
                time,
                write,
                site,
                range: range(&v),
            };
            self.access(s, a, &clock);
        }
    }

    /// True when history access `a` happened before what `clock` knows.
    fn known(a: &Access, clock: &[u32]) -> bool {
        if a.device {
            clock[a.agent as usize] >= a.time
        } else {
            clock[a.agent as usize] >= 1
        }
    }

    fn access(&mut self, s: &mut State, a: Access, clock: &[u32]) {
        if a.range.2 == a.range.3 {
            return;
        }
        for (old, _) in &s.history {
            let same = old.device == a.device && old.agent == a.agent;
            if same || !(old.write || a.write) {
                continue;
            }
            let (x, y) = (old.range, a.range);
            if (x.0, x.1) != (y.0, y.1) || x.3 <= y.2 || y.3 <= x.2 {
                continue;
            }
            if Self::known(old, clock) {
                continue;
            }
            let name = self.p.alloc_label(a.range.1 as usize);
            let alloc = Program::unlabeled(&name);
            let (i, j) = (&self.sites[old.site as usize], &self.sites[a.site as usize]);
            let (i, j) = if i <= j { (i, j) } else { (j, i) };
            self.truth.races.insert(format!("race:{alloc}:{i}:{j}"));
        }
        s.history.push((a, clock.to_vec()));
    }

    /// Drops the accesses every later one is ordered after: every device knows them,
    /// and so does every DMA in flight (a later DMA starts from a device's clock).
    fn forget(&self, s: &mut State) {
        let c = self.comps;
        let (clock, start, started, landed) = (&s.clock, &s.start, &s.started, &s.landed);
        s.history.retain(|(a, _)| {
            let devices = clock.chunks(c).all(|k| Self::known(a, k));
            let dmas = (0..started.len()).all(|k| {
                !started[k]
                    || landed[2 * k] == 2 && landed[2 * k + 1] == 2
                    || Self::known(a, &start[k * c..(k + 1) * c])
            });
            !(devices && dmas)
        });
        s.history.sort_unstable();
    }

    /// Checks the entry rule for a send by `d` to `to`.
    fn send(&mut self, s: &State, d: usize, to: usize, location: String) {
        let k = s.entered[d] as usize - 1;
        if self.p.invocations[k].collective_id.is_none() {
            return;
        }
        let entry = s.entry[to * self.p.invocations.len() + k];
        if s.entered[to] as usize <= k || self.clock(s, d)[to] < entry {
            self.truth.early.insert(format!("entry:{location}"));
        }
    }

    fn sync_op(&mut self, s: &mut State, d: usize) {
        let op = &self.p.ops[d][s.pc[d] as usize];
        let c = self.comps;
        match &op.kind {
            OpKind::Signal { sem, inc, set } => {
                let barrier = self.p.layout.sems[sem.sem()].kind == SemKind::Barrier;
                if sem.device() != d && !barrier {
                    self.send(s, d, sem.device(), op.site.location.to_string());
                }
                self.tick(s, d);
                let slot = self.slot(sem.device(), sem.sem());
                if *set {
                    s.value[slot] = *inc;
                } else {
                    s.value[slot] += inc;
                }
                let mine = self.clock(s, d).to_vec();
                join(&mut s.sem_clock[slot * c..(slot + 1) * c], &mine);
            }
            OpKind::Wait {
                sem, amount, why, ..
            } => {
                let slot = self.slot(sem.device(), sem.sem());
                if why.decrements() {
                    s.value[slot] -= amount;
                }
                let theirs = s.sem_clock[slot * c..(slot + 1) * c].to_vec();
                join(&mut s.clock[d * c..(d + 1) * c], &theirs);
                self.tick(s, d);
            }
            OpKind::DmaStart(k) => {
                let dma = &self.p.dmas[*k];
                if dma.is_remote() && dma.dst.device() != d {
                    self.send(s, d, dma.dst.device(), op.site.location.to_string());
                }
                self.tick(s, d);
                let mine = self.clock(s, d).to_vec();
                s.start[k * c..(k + 1) * c].copy_from_slice(&mine);
                s.started[*k] = true;
                s.landed[2 * k] = 0;
                s.landed[2 * k + 1] = 0;
            }
            other => unreachable!("a local op is no step: {other:?}"),
        }
    }

    /// A piece of completion `i` of DMA `k` lands: all its bytes but the last, then the
    /// last (the completion: the DMA's reads or writes until it end there).
    fn piece(&mut self, s: &mut State, k: usize, i: usize) {
        let c = self.comps;
        let dma = &self.p.dmas[k];
        let side = dma.completions()[i];
        let Some((sem, amount)) = self.p.dma_credit(k, side) else {
            unreachable!("every completion credits")
        };
        let slot = self.slot(sem.device(), sem.sem());
        let start = s.start[k * c..(k + 1) * c].to_vec();
        let comp = self.p.devices + 2 * k + usize::from(side == Completion::Send);
        if s.landed[2 * k + i] == 0 && amount > 1 && self.pieces[k][i] {
            s.landed[2 * k + i] = 1;
            s.value[slot] += amount - 1;
            join(&mut s.sem_clock[slot * c..(slot + 1) * c], &start);
            return;
        }
        let landed = if s.landed[2 * k + i] == 1 {
            amount - 1
        } else {
            0
        };
        s.landed[2 * k + i] = 2;
        s.value[slot] += amount - landed;
        let mut done = start.clone();
        done[comp] = 1;
        join(&mut s.sem_clock[slot * c..(slot + 1) * c], &done);
        let site = self.dma_site[k];
        let mut sides = Vec::new();
        if side != Completion::Recv {
            sides.push((dma.src, false));
        }
        if side != Completion::Send {
            sides.push((dma.dst, true));
        }
        for (block, write) in sides {
            for v in block.row_views() {
                let a = Access {
                    device: false,
                    agent: comp as u32,
                    time: 0,
                    write,
                    site,
                    range: range(&v),
                };
                self.access(s, a, &start);
            }
        }
    }
}

/// Which DMA completions land in two pieces: all but those whose semaphore nothing
/// else credits and no wait takes less of than the DMA's bytes.
fn pieces(p: &Program) -> Vec<[bool; 2]> {
    let slot = |s: tpusim::ir::SemRef| s.device() * p.layout.sems.len() + s.sem();
    let mut credits: HashMap<usize, usize> = HashMap::new();
    let mut least: HashMap<usize, u64> = HashMap::new();
    for ops in &p.ops {
        for op in ops {
            match &op.kind {
                OpKind::Signal { sem, .. } => *credits.entry(slot(*sem)).or_default() += 2,
                OpKind::Wait { sem, amount, .. } => {
                    let l = least.entry(slot(*sem)).or_insert(u64::MAX);
                    *l = (*l).min(*amount);
                }
                _ => {}
            }
        }
    }
    for (k, dma) in p.dmas.iter().enumerate() {
        for &side in dma.completions() {
            if let Some((s, _)) = p.dma_credit(k, side) {
                *credits.entry(slot(s)).or_default() += 1;
            }
        }
    }
    (0..p.dmas.len())
        .map(|k| {
            let mut two = [true; 2];
            for (i, &side) in p.dmas[k].completions().iter().enumerate() {
                if let Some((s, amount)) = p.dma_credit(k, side) {
                    let alone = credits[&slot(s)] == 1;
                    two[i] = !(alone && least.get(&slot(s)).is_none_or(|&l| l >= amount));
                }
            }
            two
        })
        .collect()
}

fn range(v: &View) -> (u32, u32, u32, u32) {
    (
        v.device() as u32,
        v.alloc() as u32,
        v.offset() as u32,
        (v.offset() + v.len()) as u32,
    )
}
