//! The scheduler: runs every device's ops with blocking waits and in-flight DMAs,
//! in an order a [`Policy`] picks, and emits the linear schedule of data ops.
//! Semaphores are incremented in [`Engine::credit`] and decremented in [`Engine::step_device`].

use super::observer::{NoObserver, Observer};
use super::policies::{Choice, Policy};
use super::program::{Cmp, DataOp, OpKind, OpSite, Program, SemKind, SemRef, WaitKind};
use super::schedule::Schedule;
use crate::error::{Blocked, Error, ExitProblem, Result};
use std::collections::{BTreeSet, HashMap, VecDeque};

/// Runs `program` under `policy` and returns its schedule, or the deadlock / exit
/// problems that stop it.
pub fn schedule(program: &Program, policy: &mut dyn Policy) -> Result<Schedule> {
    schedule_observed(program, policy, &mut NoObserver)
}

/// [`schedule`], reporting every event to `obs` as it happens.
pub fn schedule_observed(
    program: &Program,
    policy: &mut dyn Policy,
    obs: &mut dyn Observer,
) -> Result<Schedule> {
    let mut e = Engine::new(program);
    let mut out = Schedule {
        ops: program.prologue.clone(),
        policy: policy.name(),
        steps: 0,
    };
    for op in &program.prologue {
        if let DataOp::Copy { dst, .. } = op {
            obs.data(dst.device, op, None);
        }
    }
    let mut choices = Vec::new();
    for d in 0..program.devices {
        e.refresh(d);
    }
    loop {
        choices.clear();
        choices.extend(e.in_flight.iter().map(|&id| {
            let dma = &program.dmas[id];
            Choice::CompleteDma {
                id,
                issuer: dma.origin.device,
                awaited: e.waits_on(dma.recv_sem) || dma.send_sem.is_some_and(|s| e.waits_on(s)),
            }
        }));
        choices.extend(e.ready.iter().map(|&d| Choice::Device {
            device: d,
            grid: program.ops[d][e.pc[d]].site.grid_linear,
            op: e.pc[d],
        }));
        if choices.is_empty() {
            break;
        }
        let pick = choices[policy.pick(&choices).min(choices.len() - 1)];
        out.steps += 1;
        match pick {
            Choice::CompleteDma { id, .. } => e.complete(id, &mut out, obs),
            Choice::Device { device, .. } => {
                e.step_device(device, &mut out, obs);
                let next = program.ops[device]
                    .get(e.pc[device])
                    .map(|o| o.site.grid_linear);
                obs.after_step(device, next);
            }
        }
        // Only the devices whose semaphores or program counter changed can change readiness.
        while let Some(d) = e.touched.pop() {
            e.refresh(d);
        }
    }
    if (0..program.devices).any(|d| e.pc[d] < program.ops[d].len()) {
        return Err(Error::Deadlock(e.blocked()));
    }
    e.exit_check()?;
    out.ops.extend_from_slice(&program.epilogue);
    Ok(out)
}

struct Engine<'p> {
    p: &'p Program,
    pc: Vec<usize>,
    sems: Vec<u64>,
    /// Per semaphore slot: DMAs whose bytes it holds and nobody has waited for yet
    /// (sparse: most slots, e.g. signal-matrix cells, never hold DMA bytes).
    credits: HashMap<usize, VecDeque<(usize, u64)>>,
    /// DMAs in flight, in start order.
    in_flight: Vec<usize>,
    /// Per semaphore slot: where its last signal came from (sparse).
    last_signal: HashMap<usize, OpSite>,
    /// Devices whose next op can run now.
    ready: BTreeSet<usize>,
    /// Devices to re-examine after the current step.
    touched: Vec<usize>,
}

impl<'p> Engine<'p> {
    fn new(p: &'p Program) -> Self {
        let n = p.devices * p.layout.sems.len();
        Engine {
            p,
            pc: vec![0; p.devices],
            sems: vec![0; n],
            credits: HashMap::new(),
            in_flight: Vec::new(),
            last_signal: HashMap::new(),
            ready: BTreeSet::new(),
            touched: Vec::new(),
        }
    }

    /// Re-derives whether device `d` can run its next op.
    fn refresh(&mut self, d: usize) {
        if self.runnable(d) {
            self.ready.insert(d);
        } else {
            self.ready.remove(&d);
        }
    }

    /// True when `s`'s device is about to wait on `s`.
    fn waits_on(&self, s: SemRef) -> bool {
        matches!(
            self.p.ops[s.device].get(self.pc[s.device]).map(|o| &o.kind),
            Some(OpKind::Wait { sem, .. }) if *sem == s
        )
    }

    fn slot(&self, s: SemRef) -> usize {
        s.device * self.p.layout.sems.len() + s.sem
    }

    fn runnable(&self, d: usize) -> bool {
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

    fn credit(&mut self, s: SemRef, amount: u64, dma: Option<usize>) {
        self.touched.push(s.device);
        let i = self.slot(s);
        self.sems[i] += amount;
        if let Some(id) = dma {
            self.credits.entry(i).or_default().push_back((id, amount));
        }
    }

    fn complete(&mut self, id: usize, out: &mut Schedule, obs: &mut dyn Observer) {
        self.in_flight.retain(|&x| x != id);
        let dma = &self.p.dmas[id];
        out.ops.push(DataOp::Copy {
            src: dma.src,
            dst: dma.dst,
        });
        if let Some(s) = dma.send_sem {
            self.credit(s, dma.bytes, Some(id));
        }
        self.credit(dma.recv_sem, dma.bytes, Some(id));
        obs.dma_complete(id);
    }

    fn step_device(&mut self, d: usize, out: &mut Schedule, obs: &mut dyn Observer) {
        let op = &self.p.ops[d][self.pc[d]];
        self.pc[d] += 1;
        self.touched.push(d);
        match &op.kind {
            OpKind::DmaStart(id) => {
                self.in_flight.push(*id);
                obs.dma_start(d, *id);
            }
            OpKind::Wait {
                sem,
                why: WaitKind::Signal,
                ..
            } => obs.acquire(d, *sem),
            OpKind::Wait { sem, amount, .. } => {
                let i = self.slot(*sem);
                self.sems[i] -= amount;
                if let Some(queue) = self.credits.get_mut(&i) {
                    let mut left = *amount;
                    while left > 0 {
                        let Some(front) = queue.front_mut() else {
                            break;
                        };
                        let take = front.1.min(left);
                        front.1 -= take;
                        left -= take;
                        if front.1 == 0 {
                            queue.pop_front();
                        }
                    }
                }
                obs.acquire(d, *sem);
            }
            OpKind::Signal { sem, inc, set } => {
                let i = self.slot(*sem);
                if *set {
                    self.sems[i] = *inc;
                    self.touched.push(sem.device);
                } else {
                    self.credit(*sem, *inc, None);
                }
                self.last_signal.insert(i, op.site);
                obs.release(d, *sem);
            }
            OpKind::Compute(c) => {
                out.ops.push(*c);
                obs.data(d, c, Some(&op.site));
            }
            OpKind::Mark(label) => obs.mark(d, label),
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
                let s = SemRef { device, sem };
                let i = self.slot(s);
                if self.sems[i] == 0 || info.kind == SemKind::Signal {
                    continue;
                }
                let owed = self.credits.get(&i).filter(|q| !q.is_empty());
                if let (SemKind::Dma, Some(owed)) = (info.kind, owed) {
                    for (id, bytes) in owed {
                        problems.push(ExitProblem::DmaNotWaited {
                            site: self.p.site(&self.p.dmas[*id].origin),
                            semaphore: format!("{} on device {device}", info.name),
                            bytes: *bytes,
                        });
                    }
                } else {
                    problems.push(ExitProblem::SemaphoreNotZero {
                        device,
                        semaphore: info.name.clone(),
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
