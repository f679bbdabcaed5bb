//! The scheduler: runs every device's ops with blocking waits and in-flight DMAs,
//! in an order a [`Policy`] picks, and emits the linear schedule of data ops.
//! Each device enters each kernel invocation before its first op of it (an event of its
//! own, once it has left the invocation before; behind Pallas' entry barrier when the
//! kernel has no barrier semaphore). A remote DMA's send and receive
//! completions are separate events, in any order. Semaphores are incremented in
//! [`Engine::credit`] and decremented in [`Engine::step_device`]; a DMA's data moves in
//! [`Engine::complete`].

use super::credits::Credits;
use super::ids::IdMap;
use super::observer::{Credit, Driver, NoObserver, Observer, Split};
use super::pending::Pending;
use super::policies::{Choice, Choices, Completions, Policy, RankedSet, ReadySet};
use crate::error::{Blocked, Error, ExitProblem, Result};
use crate::ir::{
    Cmp, Completion, DataOp, FirstFit, OpKind, OpSite, Program, Schedule, SemKind, SemRef, View,
};

/// Runs `program` under `policy` and returns its schedule, or the deadlock / exit
/// problems that stop it.
pub fn schedule(program: &Program, policy: &mut dyn Policy) -> Result<Schedule> {
    schedule_observed(program, policy, &mut NoObserver)
}

/// [`schedule`] under a driver that is policy and observer at once (the cost model's
/// clock).
pub fn schedule_driven(program: &Program, driver: &mut dyn Driver) -> Result<Schedule> {
    run(program, driver, true)
}

/// [`schedule`], reporting every event to `obs` as it happens.
pub fn schedule_observed(
    program: &Program,
    policy: &mut dyn Policy,
    obs: &mut dyn Observer,
) -> Result<Schedule> {
    let mut d = Split {
        policy,
        observer: obs,
    };
    run(program, &mut d, true)
}

/// [`schedule_observed`] for an observer that needs nothing else: the schedule's data
/// ops are not kept (the verifier at large P would hold millions of them for nothing).
pub fn observe(program: &Program, policy: &mut dyn Policy, obs: &mut dyn Observer) -> Result<()> {
    let mut d = Split {
        policy,
        observer: obs,
    };
    run(program, &mut d, false).map(|_| ())
}

/// Runs the schedule; `record`: keep its data ops.
fn run(program: &Program, d: &mut dyn Driver, record: bool) -> Result<Schedule> {
    run_from(program, d, record, &Resume::default()).map(|s| s.schedule)
}

/// Where a run that may stop at a scalar read starts and stops ([`run_steps`]).
#[derive(Clone, Debug, Default)]
pub struct Resume<'a> {
    /// The steps an earlier run took, taken again first, as they were.
    pub forced: &'a [Choice],
    /// Per device: whether its program goes on past its last op (a front end is still
    /// tracing it). Such a device's last op is a [`OpKind::Read`]: the run stops when
    /// the device has run it. Empty: no device goes on.
    pub open: &'a [bool],
    /// Keep every step taken ([`Steps::choices`]).
    pub log: bool,
}

/// A run that may have stopped at a scalar read.
#[derive(Clone, Debug)]
pub struct Steps {
    /// The schedule (of the steps taken so far, when the run stopped).
    pub schedule: Schedule,
    /// Every step taken, in order (with [`Resume::log`]).
    pub choices: Vec<Choice>,
    /// The device whose last traced op, a read, the run stopped after.
    pub paused: Option<usize>,
    /// When it stopped: the other open devices whose next op is the read their program
    /// ends with. Such a read finds what it would find now unless a write races it
    /// (nothing orders another agent's write before it but a wait of its device, and
    /// none comes between), so it is answered at this stop too.
    pub reading: Vec<usize>,
}

/// Runs `program` under `driver`: the steps of `resume.forced` first, then the
/// driver's; stops after an open device ran its last op (see [`Resume`]). Errors as
/// [`schedule`] (a deadlock, exit problems), which a stopped run does not check.
pub fn run_steps(program: &Program, driver: &mut dyn Driver, resume: &Resume) -> Result<Steps> {
    run_from(program, driver, true, resume)
}

fn run_from(program: &Program, d: &mut dyn Driver, record: bool, resume: &Resume) -> Result<Steps> {
    let mut e = Engine::new(program);
    let mut choices = Vec::new();
    let mut paused = None;
    e.record = record;
    let mut out = Schedule {
        ops: if record {
            program.prologue.clone()
        } else {
            Vec::new()
        },
        policy: d.policy().name(),
        steps: 0,
        staging: 0,
    };
    for op in &program.prologue {
        if let DataOp::Copy { dst, .. } = op {
            d.observer().data(dst.device(), op, None);
        }
    }
    for d in 0..program.devices {
        e.refresh(d);
    }
    // The devices re-examined after the step before (what a policy keeping its own
    // order of the devices updates).
    let mut changed = Vec::new();
    loop {
        if e.pending.is_empty() && e.ready.is_empty() {
            break;
        }
        let describe = |d: usize| e.device_choice(d);
        let can = Choices::new(&e.pending, &e.ready, &describe).at_step(out.steps, &changed);
        #[cfg(test)]
        e.check_choices(&can);
        let mut pick = match resume.forced.get(out.steps) {
            Some(c) => {
                // The program before the step it stopped at is the same: so is its run.
                let c = can.same_step(c).ok_or_else(|| {
                    Error::bad_input(format!(
                        "a run traced while it runs could not take step {} of the run before again",
                        out.steps
                    ))
                })?;
                d.policy().forced(&can, c);
                c
            }
            None => d.policy().pick(&can),
        };
        if !can.contains(&pick) {
            // A policy can only pick what can happen; anything else takes the first choice.
            pick = can.iter().next().expect("not empty");
        }
        out.steps += 1;
        if resume.log {
            choices.push(pick);
        }
        // A watched caller may stop a long schedule (crate::interrupt).
        if out.steps.is_multiple_of(4096) {
            crate::interrupt::check()?;
        }
        match pick {
            Choice::CompleteDma { id, side, .. } => e.complete(id, side, &mut out, d.observer()),
            Choice::Device { device, enter, .. } => {
                e.step_device(device, &mut out, d.observer());
                d.observer().after_step(device, e.next_grid(device));
                let last = e.pc[device] == program.ops[device].len();
                if !enter && last && resume.open.get(device).copied().unwrap_or(false) {
                    paused = Some(device);
                    break;
                }
            }
        }
        // Only the devices whose semaphores or program counter changed can change readiness.
        changed.clear();
        while let Some(d) = e.touched.pop() {
            e.refresh(d);
            changed.push(d);
        }
    }
    out.staging = e.staging.iter().map(|s| s.peak()).max().unwrap_or(0);
    // Open devices whose next op is the read their program ends with (a device that has
    // entered and reads runs it whenever it is picked, and nothing it does comes between).
    let reading = match paused {
        None => Vec::new(),
        Some(p) => (0..program.devices)
            .filter(|&d| {
                d != p
                    && resume.open.get(d).copied().unwrap_or(false)
                    && e.entry_due(d).is_none()
                    && e.pc[d] + 1 == program.ops[d].len()
                    && matches!(program.ops[d][e.pc[d]].kind, OpKind::Read { .. })
            })
            .collect(),
    };
    if paused.is_none() {
        let k = program.invocations.len() as u32;
        if (0..program.devices).any(|d| e.pc[d] < program.ops[d].len() || e.entered[d] < k) {
            return Err(Error::Deadlock(e.blocked()));
        }
        e.exit_check()?;
        if record {
            out.ops.extend_from_slice(&program.epilogue);
        }
    }
    Ok(Steps {
        schedule: out,
        choices,
        paused,
        reading,
    })
}

/// A DMA in flight: which of its completions are still to come, and where its data
/// waits when its source was read before its destination was written.
struct InFlight {
    send: bool,
    recv: bool,
    staged: Option<View>,
}

#[cfg(test)]
impl InFlight {
    fn pending(&self, side: Completion) -> bool {
        match side {
            Completion::Send => self.send,
            Completion::Recv | Completion::Local => self.recv,
        }
    }
}

/// Word ranges of one device's staging area.
type Staging = FirstFit;

struct Engine<'p> {
    p: &'p Program,
    pc: Vec<usize>,
    /// Per device: the invocations it has entered.
    entered: Vec<u32>,
    /// Per invocation: the devices that have entered it.
    inside: Vec<usize>,
    sems: Vec<u64>,
    /// Per semaphore slot: DMAs whose bytes it holds and nobody has waited for yet
    /// (sparse: most slots, e.g. signal-matrix cells, never hold DMA bytes).
    credits: IdMap<usize, Credits<usize>>,
    /// DMAs in flight, by id.
    in_flight: IdMap<usize, InFlight>,
    /// Their pending completions, as choices.
    pending: Pending<'p>,
    /// Per device: the staging area of the DMAs it sent whose data is in flight.
    staging: Vec<Staging>,
    /// Per semaphore slot: where its last signal came from (sparse).
    last_signal: IdMap<usize, OpSite>,
    /// Devices whose next step can run now.
    ready: RankedSet,
    /// Devices to re-examine after the current step.
    touched: Vec<usize>,
    /// Keep the data ops in the schedule.
    record: bool,
}

impl<'p> Engine<'p> {
    fn new(p: &'p Program) -> Self {
        let n = p.layout.sem_table().len(p.devices);
        Engine {
            p,
            pc: vec![0; p.devices],
            entered: vec![0; p.devices],
            inside: vec![0; p.invocations.len()],
            sems: vec![0; n],
            credits: IdMap::default(),
            in_flight: IdMap::default(),
            pending: Pending::new(p),
            staging: (0..p.devices).map(|_| Staging::default()).collect(),
            last_signal: IdMap::default(),
            ready: RankedSet::new(p.devices),
            touched: Vec::new(),
            record: true,
        }
    }

    /// Under test: the choices kept from step to step are those a plain listing of
    /// every in-flight DMA and every device gives, in the same order.
    #[cfg(test)]
    fn check_choices(&self, can: &Choices) {
        let mut flights: Vec<(&usize, &InFlight)> = self.in_flight.iter().collect();
        flights.sort_by_key(|(id, _)| self.pending.start_order(**id));
        let waits_on = |s: SemRef| {
            matches!(
                self.p.ops[s.device()].get(self.pc[s.device()]).map(|o| &o.kind),
                Some(OpKind::Wait { sem, .. }) if *sem == s
            )
        };
        let mut listed = Vec::new();
        for (&id, f) in flights {
            let dma = &self.p.dmas[id];
            for &side in dma.completions().iter().filter(|&&c| f.pending(c)) {
                listed.push(Choice::CompleteDma {
                    id,
                    side,
                    issuer: dma.origin.device as usize,
                    awaited: dma.credits(side).is_some_and(waits_on),
                });
            }
        }
        let dmas = listed.len();
        listed.extend(
            (0..self.p.devices)
                .filter(|&d| self.runnable(d))
                .map(|d| self.device_choice(d)),
        );
        assert_eq!(can.iter().collect::<Vec<_>>(), listed);
        assert_eq!(can.len(), listed.len());
        for (i, c) in listed.iter().enumerate() {
            assert_eq!(can.get(i), Some(*c));
            assert!(can.contains(c));
        }
        let awaited = |c: &&Choice| matches!(c, Choice::CompleteDma { awaited: true, .. });
        let dmas = &listed[..dmas];
        assert_eq!(can.first_awaited_dma(), dmas.iter().find(awaited).copied());
        assert_eq!(
            can.last_awaited_dma(),
            dmas.iter().rev().find(awaited).copied()
        );
        assert_eq!(can.last_dma(), dmas.last().copied());
    }

    /// Device `d`'s next step as a choice.
    fn device_choice(&self, d: usize) -> Choice {
        Choice::Device {
            device: d,
            grid: self.next_grid(d).unwrap_or(0),
            op: self.pc[d],
            enter: self.entry_due(d).is_some(),
        }
    }

    /// The invocation device `d` enters next, when its next step is that entry: it has
    /// run every op before the invocation's first.
    fn entry_due(&self, d: usize) -> Option<usize> {
        let k = self.entered[d] as usize;
        let inv = self.p.invocations.get(k)?;
        (self.pc[d] >= inv.starts[d] as usize).then_some(k)
    }

    /// True while Pallas' entry barrier of invocation `k` holds its devices: it has one
    /// (no `collective_id`) and some device has not entered yet.
    fn held(&self, k: usize) -> bool {
        self.p.invocations[k].entry_barrier() && self.inside[k] < self.p.devices
    }

    /// Grid point (row-major) of device `d`'s next op, if any.
    fn next_grid(&self, d: usize) -> Option<usize> {
        self.p.ops[d]
            .get(self.pc[d])
            .map(|o| o.site.grid_linear as usize)
    }

    /// Re-derives whether device `d` can take its next step, and which of its
    /// semaphores it is about to wait on.
    fn refresh(&mut self, d: usize) {
        if self.runnable(d) {
            self.ready.insert(d);
        } else {
            self.ready.remove(d);
        }
        let waits = match self.p.ops[d].get(self.pc[d]).map(|o| &o.kind) {
            Some(OpKind::Wait { sem, .. }) if sem.device() == d => Some(self.slot(*sem)),
            _ => None,
        };
        self.pending.set_waiting(d, waits);
    }

    fn slot(&self, s: SemRef) -> usize {
        self.p.layout.sem_slot(s)
    }

    fn runnable(&self, d: usize) -> bool {
        if let Some(k) = self.entry_due(d) {
            // Entering k leaves k - 1, behind its entry barrier until every device is in.
            return k == 0 || !self.held(k - 1);
        }
        if self.held(self.entered[d] as usize - 1) {
            return false;
        }
        match self.p.ops[d].get(self.pc[d]) {
            None => false,
            Some(op) => match &op.kind {
                OpKind::Wait {
                    sem, amount, cmp, ..
                } => {
                    let v = self.sems[self.slot(*sem)];
                    match cmp {
                        Cmp::Ge => v >= *amount,
                        Cmp::Eq => v == *amount,
                    }
                }
                _ => true,
            },
        }
    }

    /// The one place a semaphore gains value: a signal or a DMA completion (`by`).
    fn credit(&mut self, s: SemRef, amount: u64, by: Credit, obs: &mut dyn Observer) {
        self.touched.push(s.device());
        let i = self.slot(s);
        match by {
            Credit::Signal { set: true, .. } => self.sems[i] = amount,
            _ => self.sems[i] += amount,
        }
        if let Credit::Dma { id, .. } = by {
            self.credits.entry(i).or_default().push(id, amount);
        }
        obs.credit(s, amount, by);
    }

    /// Completion `side` of DMA `id`. The data moves once: at the receive completion
    /// when it comes first (or a local DMA's only one); when the send completion comes
    /// first, the source is copied into the sender's staging area then and from there
    /// into the destination at the receive completion.
    fn complete(
        &mut self,
        id: usize,
        side: Completion,
        out: &mut Schedule,
        obs: &mut dyn Observer,
    ) {
        let dma = &self.p.dmas[id];
        let Some(f) = self.in_flight.get_mut(&id) else {
            return;
        };
        self.pending.complete(id, side);
        let moved: Vec<DataOp> = match side {
            Completion::Local => {
                f.recv = false;
                dma.copies(None).collect()
            }
            Completion::Recv => {
                f.recv = false;
                let via = f.staged.take();
                if let Some(v) = via {
                    self.staging[v.device()].free(v.offset());
                }
                dma.copies(via).collect()
            }
            Completion::Send => {
                f.send = false;
                if f.recv {
                    let dev = dma.src.device();
                    let n = dma.src.numel();
                    let v = View::new(
                        dev,
                        Schedule::staging_alloc(self.p),
                        self.staging[dev].alloc(n),
                        n,
                    );
                    f.staged = Some(v);
                    dma.stage(v).collect()
                } else {
                    Vec::new()
                }
            }
        };
        if !f.send && !f.recv {
            self.in_flight.remove(&id);
        }
        if self.record {
            out.ops.extend_from_slice(&moved);
        }
        if let Some((s, amount)) = self.p.dma_credit(id, side) {
            self.credit(s, amount, Credit::Dma { id, side }, obs);
        }
        obs.dma_complete(id, side, &moved);
    }

    fn step_device(&mut self, d: usize, out: &mut Schedule, obs: &mut dyn Observer) {
        self.touched.push(d);
        if let Some(k) = self.entry_due(d) {
            self.entered[d] += 1;
            self.inside[k] += 1;
            if self.p.invocations[k].entry_barrier() && self.inside[k] == self.p.devices {
                self.touched.extend(0..self.p.devices);
            }
            obs.enter(d, k);
            return;
        }
        let op = &self.p.ops[d][self.pc[d]];
        self.pc[d] += 1;
        match &op.kind {
            OpKind::DmaStart(id) => {
                let remote = self.p.dmas[*id].is_remote();
                self.in_flight.insert(
                    *id,
                    InFlight {
                        send: remote,
                        recv: true,
                        staged: None,
                    },
                );
                self.pending.start(*id);
                obs.dma_start(d, *id);
            }
            OpKind::Wait {
                sem, amount, why, ..
            } => {
                if why.decrements() {
                    // The one place a semaphore loses value.
                    let i = self.slot(*sem);
                    self.sems[i] -= amount;
                    if let Some(queue) = self.credits.get_mut(&i) {
                        queue.consume(*amount, |_| {});
                    }
                    obs.consume(*sem, *amount);
                }
                obs.acquire(d, op);
            }
            OpKind::Signal { sem, inc, set } => {
                let i = self.slot(*sem);
                self.credit(
                    *sem,
                    *inc,
                    Credit::Signal {
                        device: d,
                        set: *set,
                    },
                    obs,
                );
                self.last_signal.insert(i, op.site);
                obs.release(d, op);
            }
            OpKind::Compute(c) => {
                if self.record {
                    out.ops.push((**c).clone());
                }
                obs.data(d, c, Some(&op.site));
            }
            OpKind::Mark(label) => obs.mark(d, label),
            OpKind::Read { .. } => obs.scalar_read(d, op),
            OpKind::SemRead { sem, dst } => {
                // The value the schedule gives the semaphore here, written as data.
                let fill = OpKind::fill_of_read(*dst, self.sems[self.slot(*sem)]);
                if self.record {
                    out.ops.push(fill.clone());
                }
                obs.data(d, &fill, Some(&op.site));
            }
        }
    }

    fn blocked(&self) -> Vec<Blocked> {
        (0..self.p.devices)
            .filter_map(|d| {
                let op = self.p.ops[d].get(self.pc[d])?;
                let OpKind::Wait {
                    sem, amount, cmp, ..
                } = &op.kind
                else {
                    return None;
                };
                Some(Blocked {
                    site: self.p.site(&op.site),
                    semaphore: self.p.sem_name(*sem),
                    value: self.sems[self.slot(*sem)],
                    awaited: *amount,
                    exact: *cmp == Cmp::Eq,
                })
            })
            .collect()
    }

    fn exit_check(&self) -> Result<()> {
        let mut problems = Vec::new();
        for device in 0..self.p.devices {
            for (sem, info) in self.p.layout.sems.iter().enumerate() {
                let name = || self.p.sem_label(sem);
                let s = SemRef::new(device, sem);
                let i = self.slot(s);
                if self.sems[i] == 0 || info.kind == SemKind::Signal {
                    continue;
                }
                let owed = self.credits.get(&i).filter(|q| !q.is_empty());
                if info.carried && !(info.kind == SemKind::Dma && owed.is_some()) {
                    continue; // its count is the kernel's output
                }
                if let (SemKind::Dma, Some(owed)) = (info.kind, owed) {
                    for (id, bytes) in owed.iter() {
                        problems.push(ExitProblem::DmaNotWaited {
                            site: self.p.site(&self.p.dmas[*id].origin),
                            semaphore: format!("{} on {}", name(), self.p.device_name(device)),
                            bytes: *bytes,
                        });
                    }
                } else {
                    problems.push(ExitProblem::SemaphoreNotZero {
                        device: self.p.device_name(device),
                        semaphore: name(),
                        value: self.sems[i],
                        last_signal: self.last_signal.get(&i).map(|s| self.p.site(s)),
                    });
                }
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::Exit(problems))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectives::{Registry, Span};
    use crate::sched::policies::{Lockstep, ScheduleSpec};
    use crate::{DType, Mesh};

    /// Every shipped collective, under every policy (and lockstep at step marks): the
    /// scheduler checks at each step, under test, that the choices it keeps are those
    /// a plain listing gives, and lockstep that its kept order picks as a listing does.
    #[test]
    fn kept_choices_match_a_listing_on_the_collectives() {
        for c in Registry::builtin().iter() {
            for p in [3usize, 4] {
                let mesh = match c.span() {
                    Span::Ring => Mesh::new(p, "x").unwrap(),
                    Span::Mesh => Mesh::with_axes(&[("x", p), ("y", 2)]).unwrap(),
                };
                let shape = c.default_shape(mesh.size());
                let program = c
                    .call(&mesh, &shape, DType::F32)
                    .unwrap()
                    .lower(&mesh)
                    .unwrap();
                for spec in ScheduleSpec::check_set(mesh.size(), mesh.size() + 8, 0) {
                    schedule(&program, spec.policy().as_mut()).unwrap();
                }
                schedule(&program, &mut Lockstep::at_marks(&program)).unwrap();
            }
        }
    }
}
