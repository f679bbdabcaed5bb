//! `Timed`: a scheduling policy that runs a discrete-event simulation of the cost
//! model and always takes the step that happens first in modeled time, and an observer
//! of the scheduler that stamps every credit with the time it arrives (the engine says
//! which semaphore gains or loses what; the model only says when).

use super::mxu::DotShape;
use super::topology::route;
use super::CostModel;
use crate::ir::{Completion, ComputeKind, DataOp, OpKind, Program, SemRef};
use crate::sched::credits::Credits;
use crate::sched::policies::{Choice, Choices, Policy};
use crate::sched::{Credit, Driver, Observer};
use std::collections::HashMap;

/// What the timeline shows.
#[derive(Clone, Debug, PartialEq)]
pub enum TimedEvent {
    /// A device worked on a grid point from `start` to `end` (seconds).
    Grid {
        /// Device.
        device: usize,
        /// The kernel invocation, in a sequence of them.
        invocation: Option<usize>,
        /// Grid point (coordinates).
        grid: Vec<usize>,
        /// Start.
        start: f64,
        /// End.
        end: f64,
    },
    /// A VMEM compute op, on one of the device's units.
    Compute {
        /// Device.
        device: usize,
        /// API call.
        op: &'static str,
        /// The unit it occupied.
        unit: Unit,
        /// Its multiply-adds (0 off the MXU).
        macs: u64,
        /// Start.
        start: f64,
        /// End.
        end: f64,
    },
    /// A DMA in flight from `start` to `end`.
    Dma {
        /// DMA id.
        id: usize,
        /// Sending device.
        from: usize,
        /// Receiving device.
        to: usize,
        /// Bytes.
        bytes: u64,
        /// Start.
        start: f64,
        /// Send completion (the source has been read, `send_sem` credited); the same as
        /// `end` for a local DMA.
        sent: f64,
        /// Receive completion (the destination has been written, `recv_sem` credited).
        end: f64,
        /// The devices it passed, sender first (one device for a local DMA).
        route: Vec<usize>,
    },
    /// A device was in kernel invocation `invocation` of a sequence from its entry to
    /// its entry into the next (a device may be in one while another is in the next).
    Invocation {
        /// Device.
        device: usize,
        /// Invocation.
        invocation: usize,
        /// Its kernel's name.
        name: String,
        /// Entry.
        start: f64,
        /// Exit.
        end: f64,
    },
    /// A device blocked on a semaphore.
    Wait {
        /// Device.
        device: usize,
        /// Semaphore name.
        semaphore: String,
        /// Start.
        start: f64,
        /// End.
        end: f64,
    },
}

/// A device's compute unit. Each runs one op at a time; the units of a device run at
/// once, as the TensorCore's VLIW bundles issue to them side by side (Hot Chips 2020,
/// TPUv2/v3: 2 vector load/store slots, 2 vector ALU slots and 2 matrix slots per
/// bundle). The rule: an op is issued in program order (its device's clock does not wait
/// for it) and starts once its unit is free; an op that depends on one of another unit
/// (reads what it writes, or writes what it reads or writes: byte ranges of VMEM)
/// streams behind it (Mosaic works vreg by vreg and the bundles software-pipeline the
/// units: it starts when that op starts and ends no earlier than it); one that depends
/// on an op of its own unit waits for that op's end; a DMA start,
/// a signal and a scalar read wait for every compute op issued before them (what they
/// send or say must be in memory). So loads, stores, casts and elementwise work overlap
/// the matmuls they do not feed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// The matrix units: `dot_general`, by [`CostModel::dot_seconds`].
    Mxu,
    /// The vector ALUs: elementwise ops, casts, reductions, `+=`, at `vector_rate`
    /// elements/s.
    Vpu,
    /// The vector load/store slots: VMEM copies (`x_ref[...]` into a value, a value into
    /// a ref) and fills, one 4 KiB vreg per cycle (`vector_rate` 32-bit elements/s; twice
    /// as many packed 16-bit ones).
    LoadStore,
}

impl Unit {
    /// `MXU`, `VPU` or `ld/st`.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Mxu => "MXU",
            Unit::Vpu => "VPU",
            Unit::LoadStore => "ld/st",
        }
    }

    fn index(self) -> usize {
        match self {
            Unit::Mxu => 0,
            Unit::Vpu => 1,
            Unit::LoadStore => 2,
        }
    }
}

/// Cycles per vreg of a transcendental (exp, log, tanh, reciprocal, ...): the EUP
/// accepts one every 2 cycles (measured with the TensorCore's cycle counter: "pallas-tpu-
/// tutorial", ayaka14732.github.io, chapter 1 table of units: vpow2, vlog2, vrcp, vrsqrt,
/// vtanh issue every 2 cycles; f32 add and multiply every cycle, as `vector_rate` counts).
const EUP_CYCLES_PER_VREG: f64 = 2.0;

/// A VMEM byte range a compute op in flight reads or writes, until `end`.
#[derive(Clone, Copy, Debug)]
struct Access {
    alloc: usize,
    lo: usize,
    hi: usize,
    write: bool,
    unit: Unit,
    start: f64,
    end: f64,
}

/// The outcome of a timed run.
#[derive(Clone, Debug)]
pub struct TimedRun {
    /// Modeled seconds from the first op to the last completion.
    pub seconds: f64,
    /// Timeline events.
    pub events: Vec<TimedEvent>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Res {
    /// One direction of the link between two neighbours.
    Link(usize, usize),
    /// A device's local HBM<->VMEM DMA engine.
    Local(usize),
}

/// A transfer in progress: bytes left and the resources it crosses.
#[derive(Clone, Debug)]
struct Flow {
    id: usize,
    left: f64,
    path: Vec<Res>,
}

/// Every transfer in flight. A transfer moves at the rate of the most shared resource
/// on its path (each resource's bandwidth split equally among the transfers crossing
/// it); a transfer on one resource is exactly processor sharing.
#[derive(Clone, Debug, Default)]
struct Network {
    now: f64,
    flows: Vec<Flow>,
    /// Finish times of every flow if nothing else joins (cleared on every change).
    projection: std::cell::RefCell<Option<HashMap<usize, f64>>>,
}

impl Network {
    fn rates(&self, bw: &dyn Fn(Res) -> f64) -> Vec<f64> {
        let mut count: HashMap<Res, usize> = HashMap::new();
        for f in &self.flows {
            for r in &f.path {
                *count.entry(*r).or_default() += 1;
            }
        }
        self.flows
            .iter()
            .map(|f| {
                f.path
                    .iter()
                    .map(|r| bw(*r) / count[r] as f64)
                    .fold(f64::INFINITY, f64::min)
            })
            .collect()
    }

    /// Runs the transfers to time `t`; `done` gets the finish time of each that ends.
    fn advance(&mut self, t: f64, bw: &dyn Fn(Res) -> f64, done: &mut HashMap<usize, f64>) {
        while !self.flows.is_empty() && self.now < t {
            let rates = self.rates(bw);
            let dt = self
                .flows
                .iter()
                .zip(&rates)
                .map(|(f, r)| f.left / r)
                .fold(f64::INFINITY, f64::min);
            let step = dt.min(t - self.now);
            for (f, r) in self.flows.iter_mut().zip(&rates) {
                f.left -= r * step;
            }
            self.now += step;
            let now = self.now;
            self.flows.retain(|f| {
                let finished = f.left <= 1e-9;
                if finished {
                    done.insert(f.id, now);
                }
                !finished
            });
            self.projection.replace(None);
        }
        self.now = self.now.max(t);
    }

    fn add(&mut self, f: Flow) {
        self.flows.push(f);
        self.projection.replace(None);
    }

    fn remove(&mut self, id: usize) {
        self.flows.retain(|f| f.id != id);
        self.projection.replace(None);
    }

    /// When transfer `id`'s last byte is through, if nothing else joins.
    fn projected(&self, id: usize, bw: &dyn Fn(Res) -> f64) -> Option<f64> {
        if self.projection.borrow().is_none() {
            let mut copy = Network {
                now: self.now,
                flows: self.flows.clone(),
                projection: Default::default(),
            };
            let mut done = HashMap::new();
            copy.advance(f64::INFINITY, bw, &mut done);
            self.projection.replace(Some(done));
        }
        self.projection
            .borrow()
            .as_ref()
            .and_then(|p| p.get(&id).copied())
    }
}

/// The cost model's clock: a program scheduled on it ([`Timed::run`]) gives the modeled
/// time and timeline. It is the scheduler's policy and the observer of its credits at
/// once, so it is only a [`Driver`] (a plain policy would hear no credit).
pub struct Timed<'p>(Clock<'p>);

/// The clock's state: the policy that picks the step that happens first, and the
/// observer that stamps credits.
struct Clock<'p> {
    p: &'p Program,
    m: CostModel,
    t_dev: Vec<f64>,
    /// Per semaphore slot: the credits not yet consumed, tagged and ordered by arrival time.
    credits: HashMap<usize, Credits<f64>>,
    /// Torus dimensions, or `None` for a direct link between every pair.
    dims: Option<Vec<usize>>,
    net: Network,
    /// Devices each DMA in flight passes.
    routes: HashMap<usize, Vec<usize>>,
    done: HashMap<usize, f64>,
    dma_start: HashMap<usize, f64>,
    /// Completions seen so far of DMAs in flight: (send, receive) times.
    landed: HashMap<usize, (Option<f64>, Option<f64>)>,
    grid: HashMap<(usize, usize), (f64, f64)>,
    /// Per device in a sequence: its current invocation and when it entered it.
    entered: Vec<Option<(usize, f64)>>,
    end: f64,
    events: Vec<TimedEvent>,
    /// The modeled time of the step being taken (credits it makes arrive from then).
    now: f64,
    /// Per device: when each [`Unit`] is free.
    units: Vec<[f64; 3]>,
    /// Per device: the accesses of its compute ops that may still be in flight.
    pending: Vec<Vec<Access>>,
    /// Per allocation: whether it holds values (temporaries), not a buffer of the kernel's.
    values: Vec<bool>,
}

impl<'p> Timed<'p> {
    /// The clock for `p` under model `m`, or an error when the model's topology does not
    /// fit `p`'s devices.
    pub fn new(p: &'p Program, m: CostModel) -> crate::Result<Self> {
        Clock::new(p, m).map(Timed)
    }

    /// Schedules the program on the model's clock and returns the modeled time and the
    /// timeline.
    pub fn run(mut self) -> crate::Result<TimedRun> {
        let p = self.0.p;
        crate::sched::schedule_driven(p, &mut self)?;
        Ok(self.0.finish())
    }

    /// [`Timed::run`] over a program traced while it runs ([`crate::steer`]): from
    /// the steps of `resume`, stopping where it says.
    pub fn run_steps(
        mut self,
        resume: &crate::sched::Resume,
    ) -> crate::Result<crate::steer::Attempt<TimedRun>> {
        let p = self.0.p;
        let steps = crate::sched::run_steps(p, &mut self, resume)?;
        Ok(match steps.paused {
            Some(_) => crate::steer::Attempt::Paused(steps),
            None => crate::steer::Attempt::Done(self.0.finish()),
        })
    }
}

impl Driver for Timed<'_> {
    fn policy(&mut self) -> &mut dyn Policy {
        &mut self.0
    }
    fn observer(&mut self) -> &mut dyn Observer {
        &mut self.0
    }
}

impl<'p> Clock<'p> {
    fn new(p: &'p Program, m: CostModel) -> crate::Result<Self> {
        let dims = m.topology_for(p.devices).dims(p.devices)?;
        Ok(Self {
            p,
            m,
            t_dev: vec![0.0; p.devices],
            credits: HashMap::new(),
            dims,
            net: Network::default(),
            routes: HashMap::new(),
            done: HashMap::new(),
            dma_start: HashMap::new(),
            landed: HashMap::new(),
            grid: HashMap::new(),
            entered: vec![None; p.devices],
            end: 0.0,
            events: Vec::new(),
            now: 0.0,
            units: vec![[0.0; 3]; p.devices],
            pending: vec![Vec::new(); p.devices],
            values: p.layout.allocs.iter().map(|a| a.holds_values()).collect(),
        })
    }

    /// Bandwidth of a resource.
    fn bw(&self) -> impl Fn(Res) -> f64 + '_ {
        |r| match r {
            Res::Link(..) => self.m.link_bw,
            Res::Local(_) => self.m.hbm_bw,
        }
    }

    /// Links between `a` and `b` (a route's hops; at least one for distinct devices).
    fn hops(&self, a: usize, b: usize) -> usize {
        route(self.dims.as_deref(), a, b).len().saturating_sub(1)
    }

    fn slot(&self, s: SemRef) -> usize {
        self.p.layout.sem_slot(s)
    }

    /// When a wait for `amount` on `slot` is satisfied by the credits so far.
    fn arrival(&self, slot: usize, amount: u64) -> f64 {
        self.credits
            .get(&slot)
            .and_then(|q| q.covering(amount))
            .unwrap_or(0.0)
    }

    /// Time from the last byte leaving the source to completion `side`: a remote DMA's
    /// source is read when its last byte has left; it lands a link latency per hop later.
    fn latency(&self, id: usize, side: Completion) -> f64 {
        let d = &self.p.dmas[id];
        match side {
            Completion::Send => 0.0,
            Completion::Recv if d.src.device() != d.dst.device() => {
                self.m.link_latency * self.hops(d.src.device(), d.dst.device()) as f64
            }
            _ => self.m.dma_latency,
        }
    }

    fn completion(&self, id: usize, side: Completion) -> f64 {
        let bytes_done = match self.done.get(&id) {
            Some(t) => *t,
            None => match self.net.projected(id, &self.bw()) {
                Some(t) => t,
                None => self.dma_start.get(&id).copied().unwrap_or(0.0),
            },
        };
        bytes_done + self.latency(id, side)
    }

    fn ready(&self, c: &Choice) -> f64 {
        match *c {
            Choice::CompleteDma { id, side, .. } => self.completion(id, side),
            Choice::Device {
                device,
                enter: true,
                ..
            } => self.t_dev[device],
            Choice::Device { device, op, .. } => {
                let t = self.t_dev[device];
                match &self.p.ops[device][op].kind {
                    OpKind::Wait { sem, amount, .. } => {
                        t.max(self.arrival(self.slot(*sem), *amount))
                    }
                    OpKind::DmaStart(_)
                    | OpKind::Signal { .. }
                    | OpKind::SemRead { .. }
                    | OpKind::Read { .. } => t.max(self.fence(device)),
                    _ => t,
                }
            }
        }
    }

    fn advance(&mut self, t: f64) {
        let (link, hbm) = (self.m.link_bw, self.m.hbm_bw);
        let bw = move |r| match r {
            Res::Link(..) => link,
            Res::Local(_) => hbm,
        };
        self.net.advance(t, &bw, &mut self.done);
    }

    /// TensorCores of its chip the op at `op_index` of `device` runs on (a device is a
    /// whole megacore chip, whose figures the model has): all of them for a grid of more
    /// than one point with a `parallel` dimension, which the compiler splits over them;
    /// one otherwise (a `pallas_call` runs on one TensorCore unless a grid dimension is
    /// `parallel`: JAX's Pallas TPU pipelining guide, "TPUs in Megacore configuration";
    /// `dimension_semantics` defaults to `arbitrary`).
    fn cores_used(&self, device: usize, op_index: usize) -> f64 {
        let chip = self.m.tensorcores.max(1);
        if chip == 1 || self.p.cores > 1 {
            return chip as f64;
        }
        let inv = self.p.invocations.iter().rev().find(|inv| {
            inv.starts
                .get(device)
                .is_some_and(|&s| s as usize <= op_index)
        });
        match inv {
            Some(inv) if !inv.parallel || inv.grid.iter().product::<usize>() <= 1 => 1.0,
            _ => chip as f64,
        }
    }

    fn run_op(&mut self, device: usize, op_index: usize, t: f64) {
        let op = &self.p.ops[device][op_index];
        let g = op.site.grid_linear as usize;
        let end = t;
        match &op.kind {
            OpKind::Wait { sem, .. } => {
                if t > self.t_dev[device] {
                    self.events.push(TimedEvent::Wait {
                        device,
                        semaphore: self.p.sem_name(*sem),
                        start: self.t_dev[device],
                        end: t,
                    });
                }
            }
            OpKind::Signal { .. } => {}
            OpKind::DmaStart(id) => {
                let d = &self.p.dmas[*id];
                let (path, devices) = if d.src.device() != d.dst.device() {
                    let devices = route(self.dims.as_deref(), d.src.device(), d.dst.device());
                    let links = devices.windows(2).map(|w| Res::Link(w[0], w[1])).collect();
                    (links, devices)
                } else {
                    (vec![Res::Local(device)], vec![device])
                };
                self.advance(t);
                if d.bytes == 0 {
                    self.done.insert(*id, t);
                } else {
                    self.net.add(Flow {
                        id: *id,
                        left: d.bytes as f64,
                        path,
                    });
                }
                self.routes.insert(*id, devices);
                self.dma_start.insert(*id, t);
            }
            // A scalar read of a semaphore or of memory: no time the model counts.
            OpKind::Mark(_) | OpKind::SemRead { .. } | OpKind::Read { .. } => {}
            OpKind::Compute(c) => {
                let work = c.work();
                // One TensorCore of a megacore chip has its share of the chip's units.
                let scale = self.m.tensorcores.max(1) as f64 / self.cores_used(device, op_index);
                let (unit, dur) = match &**c {
                    DataOp::Copy { src, dst } if src.device() != dst.device() => {
                        // A seed-003 pull: over the link, plus its latency.
                        let t = c.bytes(&self.p.layout.allocs) as f64 / self.m.link_bw
                            + self.m.link_latency;
                        (Unit::LoadStore, t / scale)
                    }
                    DataOp::Compute(k) => match (DotShape::of(k), &k.kind) {
                        (Some(s), _) => (Unit::Mxu, self.m.dot_seconds(s, k.srcs[0].dtype)),
                        // A window of a ref (`x_ref[:, pl.ds(..)]`, strided or not) is a
                        // load: the load/store slots read it, the ALUs are not involved.
                        (None, ComputeKind::Slice { .. }) => {
                            let bytes = (k.dst.view.len() * k.dst.dtype.size()) as f64;
                            (Unit::LoadStore, bytes / 4.0 / self.m.vector_rate)
                        }
                        (None, ComputeKind::Unary(u)) if u.is_transcendental() => (
                            Unit::Vpu,
                            EUP_CYCLES_PER_VREG * work.write_elems as f64 / self.m.vector_rate,
                        ),
                        _ => (Unit::Vpu, work.vector_ops as f64 / self.m.vector_rate),
                    },
                    DataOp::Copy { .. } | DataOp::Fill { .. } => {
                        // A vreg holds 4 KiB: 1024 f32, 2048 packed bf16.
                        let dst = c.dst();
                        let width = self.p.layout.allocs[dst.alloc()].dtype.size();
                        let bytes = (dst.len() * width) as f64;
                        (Unit::LoadStore, bytes / 4.0 / self.m.vector_rate)
                    }
                    DataOp::Accumulate { .. } => {
                        (Unit::Vpu, work.vector_ops as f64 / self.m.vector_rate)
                    }
                };
                let dur = dur * scale;
                let (start, not_before) = self.compute_start(device, c, unit, t);
                let stop = (start + dur).max(not_before);
                // A streamed op's unit does its `dur` of work spread over the span: other
                // ops may use it in between (their bundles interleave).
                self.units[device][unit.index()] = start + dur;
                self.note_accesses(device, c, unit, start, stop);
                self.end = self.end.max(stop);
                let span = self.grid.entry((device, g)).or_insert((start, stop));
                span.0 = span.0.min(start);
                span.1 = span.1.max(stop);
                self.events.push(TimedEvent::Compute {
                    device,
                    op: op.site.op(),
                    unit,
                    macs: work.macs,
                    start,
                    end: stop,
                });
                // Issued: the device's clock goes on to its next op.
            }
        }
        self.t_dev[device] = end;
        self.end = self.end.max(end);
        let span = self.grid.entry((device, g)).or_insert((t, end));
        span.0 = span.0.min(t);
        span.1 = span.1.max(end);
    }

    /// When every compute op `device` issued has ended (and its clock has come).
    fn fence(&self, device: usize) -> f64 {
        self.units[device]
            .iter()
            .fold(self.t_dev[device], |a, &b| a.max(b))
    }

    /// When compute op `c`, issued at `t` on `device`, may start on `unit`, and the
    /// earliest it may end: its unit free; after each op in flight it depends on (it
    /// reads what that op writes, or writes what that op reads or writes): behind an op
    /// of another unit it streams (starts with it, vreg by vreg, and ends no earlier),
    /// behind one of its own unit it waits for its end.
    fn compute_start(&mut self, device: usize, c: &DataOp, unit: Unit, t: f64) -> (f64, f64) {
        let pending = &mut self.pending[device];
        pending.retain(|a| a.end > t);
        let mut start = t.max(self.units[device][unit.index()]);
        let mut end = start;
        let overlaps = |a: &Access, v: &crate::ir::View| {
            a.alloc == v.alloc() && a.lo < v.offset() + v.len() && v.offset() < a.hi
        };
        let values = &self.values;
        let reads = c.reads().map(|v| (v, false));
        for (v, write) in reads.chain(c.writes().map(|v| (v, true))) {
            // A value is written once: its storage reused after its last use is no
            // dependency (the chip would hold it elsewhere); only reading it is.
            let hazard = |a: &&Access| {
                overlaps(a, &v)
                    && if write {
                        !values.get(v.alloc()).copied().unwrap_or(false)
                    } else {
                        a.write
                    }
            };
            for a in pending.iter().filter(hazard) {
                if a.unit == unit {
                    start = start.max(a.end);
                } else {
                    start = start.max(a.start);
                    end = end.max(a.end);
                }
            }
        }
        (start, end.max(start))
    }

    /// Records what compute op `c` on `device` (on `unit`, from `start` to `end`) reads
    /// and writes.
    fn note_accesses(&mut self, device: usize, c: &DataOp, unit: Unit, start: f64, end: f64) {
        let pending = &mut self.pending[device];
        for (v, write) in c
            .reads()
            .map(|v| (v, false))
            .chain(c.writes().map(|v| (v, true)))
        {
            if v.device() == device {
                pending.push(Access {
                    alloc: v.alloc(),
                    lo: v.offset(),
                    hi: v.offset() + v.len(),
                    write,
                    unit,
                    start,
                    end,
                });
            }
        }
    }

    fn complete(&mut self, id: usize, side: Completion, t: f64) {
        let d = &self.p.dmas[id];
        self.end = self.end.max(t);
        let landed = self.landed.entry(id).or_default();
        match side {
            Completion::Send => landed.0 = Some(t),
            Completion::Recv => landed.1 = Some(t),
            Completion::Local => *landed = (Some(t), Some(t)),
        }
        let (Some(sent), Some(end)) = *landed else {
            return;
        };
        self.landed.remove(&id);
        self.net.remove(id);
        self.done.remove(&id);
        let route = self.routes.remove(&id).unwrap_or_default();
        self.events.push(TimedEvent::Dma {
            id,
            from: d.src.device(),
            to: d.dst.device(),
            bytes: d.bytes,
            start: self.dma_start.remove(&id).unwrap_or(t),
            sent,
            end,
            route,
        });
    }

    /// Closes device `device`'s span in the invocation it is in, at its clock.
    fn leave(&mut self, device: usize) {
        if let Some((k, start)) = self.entered[device].take() {
            self.events.push(TimedEvent::Invocation {
                device,
                invocation: k,
                name: self.p.invocations[k].name.clone(),
                start,
                end: self.fence(device),
            });
        }
    }

    /// The modeled time and the timeline.
    fn finish(mut self) -> TimedRun {
        let mut spans: Vec<_> = self.grid.drain().collect();
        spans.sort_by_key(|s| s.0);
        for ((device, g), (start, end)) in spans {
            self.events.push(TimedEvent::Grid {
                device,
                invocation: self.p.is_sequence().then(|| self.p.invocation_of_step(g)),
                grid: self.p.grid_point(g),
                start,
                end,
            });
        }
        for d in 0..self.p.devices {
            self.leave(d);
        }
        TimedRun {
            seconds: self.end,
            events: self.events,
        }
    }
}

impl Policy for Clock<'_> {
    fn name(&self) -> String {
        format!("timed:{}", self.m.name)
    }

    fn pick(&mut self, choices: &Choices) -> Choice {
        let (c, _) = choices
            .iter()
            .map(|c| (c, self.ready(&c)))
            .fold(None, |best: Option<(Choice, f64)>, cur| match best {
                Some(b) if b.1 <= cur.1 => Some(b),
                _ => Some(cur),
            })
            .expect("the scheduler asks only when something can happen");
        self.take(c);
        c
    }

    fn forced(&mut self, _choices: &Choices, c: Choice) {
        self.take(c);
    }
}

impl Clock<'_> {
    /// Takes step `c` at the time it is ready.
    fn take(&mut self, c: Choice) {
        let t = self.ready(&c);
        self.advance(t);
        self.now = t;
        match c {
            Choice::CompleteDma { id, side, .. } => self.complete(id, side, t),
            Choice::Device { enter: true, .. } => {}
            Choice::Device { device, op, .. } => self.run_op(device, op, t),
        }
    }
}

impl Observer for Clock<'_> {
    fn enter(&mut self, device: usize, invocation: usize) {
        if self.p.is_sequence() {
            self.leave(device);
            self.entered[device] = Some((invocation, self.t_dev[device]));
        }
    }

    /// A DMA's credit arrives at its completion; a signal a link latency per hop after
    /// it is sent.
    fn credit(&mut self, sem: SemRef, amount: u64, by: Credit) {
        let at = match by {
            Credit::Dma { .. } => self.now,
            Credit::Signal { device, .. } => {
                self.now + self.m.link_latency * self.hops(device, sem.device()) as f64
            }
        };
        let q = self.credits.entry(self.slot(sem)).or_default();
        if let Credit::Signal { set: true, .. } = by {
            q.clear();
        }
        q.insert_by(at, amount, |t| *t);
    }

    fn consume(&mut self, sem: SemRef, amount: u64) {
        if let Some(q) = self.credits.get_mut(&self.slot(sem)) {
            q.consume(amount, |_| {});
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfers_share_the_most_shared_resource_on_their_path() {
        let bw = |_: Res| 100.0;
        let mut n = Network::default();
        let (a, b, c) = (Res::Link(0, 1), Res::Link(1, 2), Res::Link(2, 3));
        n.add(Flow {
            id: 1,
            left: 100.0,
            path: vec![a],
        });
        n.add(Flow {
            id: 2,
            left: 300.0,
            path: vec![a, b, c],
        });
        // Both at 50 B/s on link a: #1 is through at t=2; then #2 alone at 100 B/s.
        assert_eq!(n.projected(1, &bw), Some(2.0));
        assert_eq!(n.projected(2, &bw), Some(4.0));
        let mut done = HashMap::new();
        n.advance(3.0, &bw, &mut done);
        assert_eq!(done.get(&1), Some(&2.0));
        assert!((n.flows[0].left - 100.0).abs() < 1e-9);
    }
}
