//! The happens-before race checker: an [`Observer`] that keeps a vector clock per
//! device and per DMA, and the accesses to every byte range of every allocation.
//! A DMA reads its source with the clock of its `start` and writes its destination
//! before its completion credits the semaphores. Two accesses to overlapping bytes,
//! one a write, that happens-before does not order, are a race.

use super::clock::Clock;
use crate::device_sim::program::{DataOp, OpSite, Program, SemRef, View};
use crate::device_sim::Observer;
use crate::error::Site;
use std::collections::HashMap;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Agent {
    Device(usize),
    Dma(usize),
}

#[derive(Clone, Copy, Debug)]
struct Access {
    lo: usize,
    hi: usize,
    write: bool,
    agent: Agent,
    time: u32,
    site: Option<OpSite>,
}

/// One side of a race.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaceSide {
    /// Who accessed: `device 2`, or `DMA device 1 -> device 2`.
    pub actor: String,
    /// Where the access (or the DMA's `start`) is in the kernel.
    pub site: Option<Site>,
    /// `read` or `write`.
    pub access: &'static str,
}

/// Two unordered accesses to the same bytes, at least one a write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Race {
    /// Allocation name.
    pub alloc: String,
    /// Device whose memory it is.
    pub device: usize,
    /// Overlapping byte range `[lo, hi)`.
    pub bytes: (u64, u64),
    /// The access recorded first.
    pub first: RaceSide,
    /// The access recorded second.
    pub second: RaceSide,
}

impl Race {
    /// A key that names the bug, not the instance: both sides' kernel lines and the allocation.
    pub fn key(&self) -> String {
        let loc = |s: &RaceSide| {
            s.site
                .as_ref()
                .map(|s| format!("{}@{}", s.op, s.location))
                .unwrap_or_else(|| "prologue".into())
        };
        let (a, b) = (loc(&self.first), loc(&self.second));
        let (a, b) = if a <= b { (a, b) } else { (b, a) };
        format!("race:{}:{a}:{b}", self.alloc)
    }
}

impl fmt::Display for RaceSide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} by {}", self.access, self.actor)?;
        if let Some(s) = &self.site {
            let what = if self.actor.starts_with("DMA") {
                "started at"
            } else {
                "at"
            };
            write!(f, ", {what} {s}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Race {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "race on `{}` of device {}, bytes {}..{}:",
            self.alloc, self.device, self.bytes.0, self.bytes.1
        )?;
        writeln!(f, "    {}", self.first)?;
        writeln!(f, "    {}", self.second)?;
        write!(
            f,
            "    no semaphore orders one before the other: make the second wait for a signal the first side sends once it is done"
        )
    }
}

/// The race checker. Feed it a run through `schedule_observed`, then read `races`.
pub struct RaceChecker<'p> {
    p: &'p Program,
    dev: Vec<Clock>,
    dma: Vec<Option<Clock>>,
    /// Release clocks of the semaphores signalled so far (sparse).
    sem: HashMap<usize, Clock>,
    zero: Clock,
    shadow: Vec<Vec<Access>>,
    /// Races found so far, in order.
    pub races: Vec<Race>,
}

impl<'p> RaceChecker<'p> {
    /// A checker for `p`.
    pub fn new(p: &'p Program) -> Self {
        let zero = Clock::new(p.devices, p.dmas.len());
        let dev = (0..p.devices)
            .map(|d| {
                let mut c = zero.clone();
                c.tick(d);
                c
            })
            .collect();
        Self {
            p,
            dev,
            dma: vec![None; p.dmas.len()],
            sem: HashMap::new(),
            zero,
            shadow: vec![Vec::new(); p.devices * p.layout.allocs.len()],
            races: Vec::new(),
        }
    }

    fn sem_slot(&self, s: SemRef) -> usize {
        s.device * self.p.layout.sems.len() + s.sem
    }

    fn ordered(a: &Access, c: &Clock) -> bool {
        match a.agent {
            Agent::Device(q) => c.device(q) >= a.time,
            Agent::Dma(k) => c.has_dma(k),
        }
    }

    fn side(&self, a: &Access) -> RaceSide {
        let (actor, site) = match a.agent {
            Agent::Device(d) => (format!("device {d}"), a.site),
            Agent::Dma(k) => {
                let m = &self.p.dmas[k];
                let actor = if m.src.device == m.dst.device {
                    format!("DMA on device {} (local)", m.src.device)
                } else {
                    format!("DMA device {} -> device {}", m.src.device, m.dst.device)
                };
                (actor, Some(m.origin))
            }
        };
        RaceSide {
            actor,
            site: site.map(|s| self.p.site(&s)),
            access: if a.write { "write" } else { "read" },
        }
    }

    fn access(
        &mut self,
        view: &View,
        write: bool,
        agent: Agent,
        clock: &Clock,
        site: Option<OpSite>,
    ) {
        if view.len == 0 {
            return;
        }
        let time = match agent {
            Agent::Device(d) => clock.device(d),
            Agent::Dma(_) => 1,
        };
        let x = Access {
            lo: view.offset,
            hi: view.offset + view.len,
            write,
            agent,
            time,
            site,
        };
        let slot = view.device * self.p.layout.allocs.len() + view.alloc;
        let mut found = Vec::new();
        for a in &self.shadow[slot] {
            if a.lo < x.hi
                && x.lo < a.hi
                && (a.write || write)
                && a.agent != agent
                && !Self::ordered(a, clock)
            {
                found.push(Race {
                    alloc: self.p.layout.allocs[view.alloc].name.clone(),
                    device: view.device,
                    bytes: (a.lo.max(x.lo) as u64 * 4, a.hi.min(x.hi) as u64 * 4),
                    first: self.side(a),
                    second: self.side(&x),
                });
            }
        }
        self.races.extend(found);
        // Accesses covered by this one and ordered before it can no longer race with
        // anything this one does not race with.
        self.shadow[slot].retain(|a| {
            !(a.lo >= x.lo && a.hi <= x.hi && (write || !a.write) && Self::ordered(a, clock))
        });
        self.shadow[slot].push(x);
    }

    fn data_op(&mut self, op: &DataOp, agent: Agent, clock: &Clock, site: Option<OpSite>) {
        match op {
            DataOp::Copy { src, dst } => {
                self.access(src, false, agent, clock, site);
                self.access(dst, true, agent, clock, site);
            }
            DataOp::Fill { dst, .. } => self.access(dst, true, agent, clock, site),
            DataOp::Accumulate { dst, src, .. } => {
                self.access(src, false, agent, clock, site);
                self.access(dst, true, agent, clock, site);
            }
        }
    }
}

impl Observer for RaceChecker<'_> {
    fn data(&mut self, device: usize, op: &DataOp, site: Option<&OpSite>) {
        self.dev[device].tick(device);
        // Taken out (not cloned) while the accesses are checked: clocks can be large.
        let clock = std::mem::replace(&mut self.dev[device], Clock::new(0, 0));
        self.data_op(op, Agent::Device(device), &clock, site.copied());
        self.dev[device] = clock;
    }

    fn dma_start(&mut self, device: usize, dma: usize) {
        let mut c = self.dev[device].clone();
        c.set_dma(dma);
        self.dma[dma] = Some(c);
        self.dev[device].tick(device);
    }

    fn dma_complete(&mut self, dma: usize) {
        // A DMA's clock is only needed while it is in flight.
        let Some(clock) = self.dma[dma].take() else {
            return;
        };
        let m = &self.p.dmas[dma];
        let op = DataOp::Copy {
            src: m.src,
            dst: m.dst,
        };
        let (send, recv) = (m.send_sem, m.recv_sem);
        self.data_op(&op, Agent::Dma(dma), &clock, None);
        for s in send.into_iter().chain([recv]) {
            let i = self.sem_slot(s);
            self.sem
                .entry(i)
                .or_insert_with(|| self.zero.clone())
                .join(&clock);
        }
    }

    fn release(&mut self, device: usize, sem: SemRef) {
        let i = self.sem_slot(sem);
        let c = &self.dev[device];
        self.sem
            .entry(i)
            .or_insert_with(|| self.zero.clone())
            .join(c);
        self.dev[device].tick(device);
    }

    fn acquire(&mut self, device: usize, sem: SemRef) {
        let i = self.sem_slot(sem);
        if let Some(c) = self.sem.get(&i) {
            self.dev[device].join(c);
        }
        self.dev[device].tick(device);
    }
}
