//! `Timed`: a scheduling policy that runs a discrete-event simulation of the cost
//! model and always takes the step that happens first in modeled time.

use super::CostModel;
use crate::device_sim::credits::Credits;
use crate::device_sim::policies::{Choice, Choices, Policy};
use crate::device_sim::program::{Completion, DataOp, OpKind, Program, SemRef, WaitKind};
use std::collections::HashMap;

/// What the timeline shows.
#[derive(Clone, Debug, PartialEq)]
pub enum TimedEvent {
    /// A device worked on a grid point from `start` to `end` (seconds).
    Grid {
        /// Device.
        device: usize,
        /// Grid point (coordinates).
        grid: Vec<usize>,
        /// Start.
        start: f64,
        /// End.
        end: f64,
    },
    /// A VMEM compute op.
    Compute {
        /// Device.
        device: usize,
        /// API call.
        op: &'static str,
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
    Link(usize, usize),
    Local(usize),
}

/// One link or DMA engine: its active transfers share its bandwidth equally.
#[derive(Debug)]
struct Resource {
    bw: f64,
    now: f64,
    active: Vec<(usize, f64)>,
}

impl Resource {
    fn advance(&mut self, t: f64, done: &mut HashMap<usize, f64>) {
        while !self.active.is_empty() && self.now < t {
            let rate = self.bw / self.active.len() as f64;
            let min = self
                .active
                .iter()
                .map(|a| a.1)
                .fold(f64::INFINITY, f64::min);
            let t_fin = self.now + min / rate;
            if t_fin <= t {
                for a in &mut self.active {
                    a.1 -= min;
                }
                self.now = t_fin;
                self.active.retain(|a| {
                    let finished = a.1 <= 1e-9;
                    if finished {
                        done.insert(a.0, t_fin);
                    }
                    !finished
                });
            } else {
                for a in &mut self.active {
                    a.1 -= (t - self.now) * rate;
                }
                self.now = t;
            }
        }
        self.now = self.now.max(t);
    }

    /// When transfer `id`'s last byte is through, if nothing else joins.
    fn projected(&self, id: usize) -> f64 {
        let mut rem: Vec<(usize, f64)> = self.active.clone();
        rem.sort_by(|a, b| a.1.total_cmp(&b.1));
        let n = rem.len();
        let (mut t, mut prev) = (self.now, 0.0);
        for (i, (k, r)) in rem.iter().enumerate() {
            t += (r - prev) * (n - i) as f64 / self.bw;
            prev = *r;
            if *k == id {
                return t;
            }
        }
        self.now
    }
}

/// The timed policy. Run it through `schedule`, then take [`Timed::finish`].
pub struct Timed<'p> {
    p: &'p Program,
    m: CostModel,
    t_dev: Vec<f64>,
    /// Per semaphore slot: the credits not yet consumed, tagged and ordered by arrival time.
    credits: HashMap<usize, Credits<f64>>,
    res: HashMap<Res, Resource>,
    dma_res: HashMap<usize, Res>,
    done: HashMap<usize, f64>,
    dma_start: HashMap<usize, f64>,
    /// Completions seen so far of DMAs in flight: (send, receive) times.
    landed: HashMap<usize, (Option<f64>, Option<f64>)>,
    grid: HashMap<(usize, usize), (f64, f64)>,
    end: f64,
    events: Vec<TimedEvent>,
}

impl<'p> Timed<'p> {
    /// A timed policy for `p` under model `m`.
    pub fn new(p: &'p Program, m: CostModel) -> Self {
        Self {
            p,
            m,
            t_dev: vec![0.0; p.devices],
            credits: HashMap::new(),
            res: HashMap::new(),
            dma_res: HashMap::new(),
            done: HashMap::new(),
            dma_start: HashMap::new(),
            landed: HashMap::new(),
            grid: HashMap::new(),
            end: 0.0,
            events: Vec::new(),
        }
    }

    fn slot(&self, s: SemRef) -> usize {
        s.device * self.p.layout.sems.len() + s.sem
    }

    /// When a wait for `amount` on `slot` is satisfied by the credits so far.
    fn arrival(&self, slot: usize, amount: u64) -> f64 {
        self.credits
            .get(&slot)
            .and_then(|q| q.covering(amount))
            .unwrap_or(0.0)
    }

    fn add_credit(&mut self, slot: usize, t: f64, amount: u64, set: bool) {
        let q = self.credits.entry(slot).or_default();
        if set {
            q.clear();
        }
        q.insert_by(t, amount, |t| *t);
    }

    fn consume(&mut self, slot: usize, amount: u64) {
        if let Some(q) = self.credits.get_mut(&slot) {
            q.consume(amount, |_| {});
        }
    }

    /// Time from the last byte leaving the source to completion `side`: a remote DMA's
    /// source is read when its last byte has left; it lands a link latency later.
    fn latency(&self, id: usize, side: Completion) -> f64 {
        let d = &self.p.dmas[id];
        match side {
            Completion::Send => 0.0,
            Completion::Recv if d.src.device != d.dst.device => self.m.link_latency,
            _ => self.m.dma_latency,
        }
    }

    fn completion(&self, id: usize, side: Completion) -> f64 {
        let bytes_done = match self.done.get(&id) {
            Some(t) => *t,
            None => match self.dma_res.get(&id).and_then(|r| self.res.get(r)) {
                Some(r) => r.projected(id),
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
                    _ => t,
                }
            }
        }
    }

    fn advance(&mut self, t: f64) {
        for r in self.res.values_mut() {
            r.advance(t, &mut self.done);
        }
    }

    fn run_op(&mut self, device: usize, op_index: usize, t: f64) {
        let op = &self.p.ops[device][op_index];
        let g = op.site.grid_linear;
        let mut end = t;
        match &op.kind {
            OpKind::Wait {
                sem, amount, why, ..
            } => {
                if t > self.t_dev[device] {
                    self.events.push(TimedEvent::Wait {
                        device,
                        semaphore: self.p.sem_name(*sem),
                        start: self.t_dev[device],
                        end: t,
                    });
                }
                if *why != WaitKind::Signal {
                    self.consume(self.slot(*sem), *amount);
                }
            }
            OpKind::Signal { sem, inc, set } => {
                let arrive = if sem.device == device {
                    t
                } else {
                    t + self.m.link_latency
                };
                self.add_credit(self.slot(*sem), arrive, *inc, *set);
            }
            OpKind::DmaStart(id) => {
                let d = &self.p.dmas[*id];
                let (r, bw) = if d.src.device != d.dst.device {
                    (Res::Link(d.src.device, d.dst.device), self.m.link_bw)
                } else {
                    (Res::Local(device), self.m.hbm_bw)
                };
                let res = self.res.entry(r).or_insert(Resource {
                    bw,
                    now: t,
                    active: Vec::new(),
                });
                res.advance(t, &mut self.done);
                if d.bytes == 0 {
                    self.done.insert(*id, t);
                } else {
                    res.active.push((*id, d.bytes as f64));
                }
                self.dma_res.insert(*id, r);
                self.dma_start.insert(*id, t);
            }
            OpKind::Mark(_) => {}
            OpKind::Compute(c) => {
                let dur = match c {
                    DataOp::Copy { src, dst } if src.device != dst.device => {
                        // A seed-003 pull: over the link, plus its latency.
                        src.bytes() as f64 / self.m.link_bw + self.m.link_latency
                    }
                    DataOp::Copy { dst, .. }
                    | DataOp::Fill { dst, .. }
                    | DataOp::Accumulate { dst, .. } => dst.len as f64 / self.m.vector_rate,
                };
                end = t + dur;
                self.events.push(TimedEvent::Compute {
                    device,
                    op: op.site.op,
                    start: t,
                    end,
                });
            }
        }
        self.t_dev[device] = end;
        self.end = self.end.max(end);
        let span = self.grid.entry((device, g)).or_insert((t, end));
        span.0 = span.0.min(t);
        span.1 = span.1.max(end);
    }

    fn complete(&mut self, id: usize, side: Completion, t: f64) {
        let d = &self.p.dmas[id];
        if let Some(s) = d.credits(side) {
            self.add_credit(self.slot(s), t, d.bytes, false);
        }
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
        if let Some(r) = self.dma_res.remove(&id).and_then(|r| self.res.get_mut(&r)) {
            r.active.retain(|a| a.0 != id);
        }
        self.done.remove(&id);
        self.events.push(TimedEvent::Dma {
            id,
            from: d.src.device,
            to: d.dst.device,
            bytes: d.bytes,
            start: self.dma_start.remove(&id).unwrap_or(t),
            sent,
            end,
        });
    }

    /// The modeled time and the timeline.
    pub fn finish(mut self) -> TimedRun {
        let mut spans: Vec<_> = self.grid.drain().collect();
        spans.sort_by_key(|s| s.0);
        for ((device, g), (start, end)) in spans {
            self.events.push(TimedEvent::Grid {
                device,
                grid: self.p.grid_point(g),
                start,
                end,
            });
        }
        TimedRun {
            seconds: self.end,
            events: self.events,
        }
    }
}

impl Policy for Timed<'_> {
    fn name(&self) -> String {
        format!("timed:{}", self.m.name)
    }

    fn pick(&mut self, choices: &Choices) -> Choice {
        let (c, t) = choices
            .iter()
            .map(|c| (c, self.ready(&c)))
            .fold(None, |best: Option<(Choice, f64)>, cur| match best {
                Some(b) if b.1 <= cur.1 => Some(b),
                _ => Some(cur),
            })
            .expect("the scheduler asks only when something can happen");
        self.advance(t);
        match c {
            Choice::CompleteDma { id, side, .. } => self.complete(id, side, t),
            Choice::Device { enter: true, .. } => {}
            Choice::Device { device, op, .. } => self.run_op(device, op, t),
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_transfers_share_a_link() {
        let mut done = HashMap::new();
        let mut r = Resource {
            bw: 100.0,
            now: 0.0,
            active: vec![(1, 100.0), (2, 300.0)],
        };
        // Both at 50 B/s: #1 is through at t=2; then #2 alone: 200 B left at 100 B/s.
        assert_eq!(r.projected(1), 2.0);
        assert_eq!(r.projected(2), 4.0);
        r.advance(3.0, &mut done);
        assert_eq!(done.get(&1), Some(&2.0));
        assert!((r.active[0].1 - 100.0).abs() < 1e-9);
    }
}
