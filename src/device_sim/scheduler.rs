//! The scheduler: runs every device's ops with blocking waits and in-flight DMAs,
//! in an order a [`Policy`] picks, and emits the linear schedule of data ops.
//! Semaphores are incremented in [`Engine::credit`] and decremented in [`Engine::step_device`].

use super::policy::{Choice, Policy};
use super::program::{Cmp, OpKind, Program, SemKind, SemRef, WaitKind};
use super::schedule::Schedule;
use crate::error::{Blocked, Error, ExitProblem, Result};
use std::collections::VecDeque;

/// Runs `program` under `policy` and returns its schedule, or the deadlock / exit
/// problems that stop it.
pub fn schedule(program: &Program, policy: &mut dyn Policy) -> Result<Schedule> {
    let mut e = Engine::new(program);
    let mut out = Schedule {
        ops: program.prologue.clone(),
        policy: policy.name().to_string(),
        steps: 0,
    };
    let mut choices = Vec::new();
    loop {
        choices.clear();
        choices.extend(e.in_flight.iter().map(|&d| Choice::CompleteDma(d)));
        choices.extend(
            (0..program.devices)
                .filter(|&d| e.runnable(d))
                .map(Choice::Device),
        );
        if choices.is_empty() {
            break;
        }
        let pick = choices[policy.pick(&choices)];
        out.steps += 1;
        match pick {
            Choice::CompleteDma(id) => e.complete(id, &mut out),
            Choice::Device(d) => e.step_device(d, &mut out),
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
    /// Per semaphore slot: DMAs whose bytes it holds and nobody has waited for yet.
    credits: Vec<VecDeque<(usize, u64)>>,
    in_flight: Vec<usize>,
}

impl<'p> Engine<'p> {
    fn new(p: &'p Program) -> Self {
        let n = p.devices * p.layout.sems.len();
        Engine {
            p,
            pc: vec![0; p.devices],
            sems: vec![0; n],
            credits: vec![VecDeque::new(); n],
            in_flight: Vec::new(),
        }
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
        let i = self.slot(s);
        self.sems[i] += amount;
        if let Some(id) = dma {
            self.credits[i].push_back((id, amount));
        }
    }

    fn complete(&mut self, id: usize, out: &mut Schedule) {
        self.in_flight.retain(|&x| x != id);
        let dma = &self.p.dmas[id];
        out.ops.push(super::program::DataOp::Copy {
            src: dma.src,
            dst: dma.dst,
        });
        if let Some(s) = dma.send_sem {
            self.credit(s, dma.bytes, Some(id));
        }
        self.credit(dma.recv_sem, dma.bytes, Some(id));
    }

    fn step_device(&mut self, d: usize, out: &mut Schedule) {
        let op = &self.p.ops[d][self.pc[d]];
        self.pc[d] += 1;
        match &op.kind {
            OpKind::DmaStart(id) => self.in_flight.push(*id),
            OpKind::Wait {
                why: WaitKind::Signal,
                ..
            } => {}
            OpKind::Wait { sem, amount, .. } => {
                let i = self.slot(*sem);
                self.sems[i] -= amount;
                let mut left = *amount;
                while left > 0 {
                    let Some(front) = self.credits[i].front_mut() else {
                        break;
                    };
                    let take = front.1.min(left);
                    front.1 -= take;
                    left -= take;
                    if front.1 == 0 {
                        self.credits[i].pop_front();
                    }
                }
            }
            OpKind::Signal {
                sem,
                inc,
                set: true,
            } => {
                let i = self.slot(*sem);
                self.sems[i] = *inc;
            }
            OpKind::Signal { sem, inc, .. } => self.credit(*sem, *inc, None),
            OpKind::Compute(c) => out.ops.push(*c),
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
                if info.kind == SemKind::Dma && !self.credits[i].is_empty() {
                    for (id, bytes) in &self.credits[i] {
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
