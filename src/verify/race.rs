//! The happens-before race checker and the kernel-entry rule, over a replayed run.
//!
//! A DMA is an agent of its own: it reads its source from `start` until its send
//! completion and writes its destination until its receive completion (a local DMA:
//! until its one completion). Another access is ordered after a DMA side only through a
//! wait that is ordered after that side's completion ([`super::sync`] says which waits
//! are). Two accesses to overlapping bytes, one a write, that happens-before does not
//! order are a race. A remote DMA or a signal on a non-barrier semaphore sent to a device
//! not known to have entered the kernel invocation the sender is in breaks the entry rule
//! (the receiver's semaphores and buffers of that invocation do not exist before).

use super::clock::Clock;
use super::entry::{stand_in, EarlySend, StandIn};
use super::hb::{op_at, small, Agent, Credit, Send, Sink, Wait};
use super::log::{Entry, Event};
use super::orders::{Join, Orders, CLOCK_ONLY};
use super::reach::{Point, Reach};
use super::shadow::Shadow;
use super::side::RaceSide;
use super::sync::Facts;
use super::uninit::{unwritten_outputs, UninitRead, UnwrittenOutput};
use crate::error::{DeviceName, Site};
use crate::ir::Written;
use crate::ir::{AllocId, Block, Completion, OpSite, Program, View};
use crate::sched::ids::IdMap;
use crate::source::SourceLoc;
use std::collections::HashMap;
use std::fmt;

/// A DMA and one of its completions.
type DmaSide = (usize, Completion);

#[derive(Clone, Copy, Debug)]
struct Access {
    block: Block,
    write: bool,
    agent: Agent,
    time: u32,
    site: Option<OpSite>,
    /// Position in the log of the event that made it.
    at: u32,
}

/// Why a wait that looked like it ordered a DMA does not: its semaphore can be
/// credited by other DMAs (or signals) in flight at the same time.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SharedSemaphore {
    /// The semaphore.
    pub semaphore: String,
    /// The device it is on.
    #[serde(flatten)]
    pub device: DeviceName,
    /// The wait that consumed the DMA's bytes in the run that was checked.
    pub wait: Site,
    /// Another credit that could have satisfied that wait instead.
    pub instead: RaceSide,
}

/// Two unordered accesses to the same bytes, at least one a write.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Race {
    /// Allocation name.
    pub alloc: String,
    /// Device whose memory it is.
    #[serde(flatten)]
    pub device: DeviceName,
    /// Overlapping byte range `[lo, hi)`.
    pub bytes: (u64, u64),
    /// The access recorded first.
    pub first: RaceSide,
    /// The access recorded second.
    pub second: RaceSide,
    /// When a DMA's side looked waited for, the shared semaphore that makes the wait
    /// not enough.
    #[serde(rename = "shared_semaphore")]
    pub shared: Option<Box<SharedSemaphore>>,
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
        format!("race:{}:{a}:{b}", Program::unlabeled(&self.alloc))
    }
}

impl Race {
    /// The sender, when this race is a remote DMA's write into this device's buffer after
    /// the device's own earlier use of the buffer (a read by it, or by a DMA it started):
    /// the sender runs ahead of a receiver that has not released the buffer, which a
    /// capacity handshake fixes (not separate semaphores: the bytes are the same).
    pub fn overwrite_of_a_buffer_in_use(&self) -> Option<String> {
        let d = self.device.to_string();
        let (first, second) = (&self.first, &self.second);
        if first.access != "read" || second.access != "write" {
            return None;
        }
        let (from, to) = second.actor.strip_prefix("DMA ")?.split_once(" -> ")?;
        let by_receiver = first.actor == d
            || first.actor == format!("DMA on {d} (local)")
            || first.actor.starts_with(&format!("DMA {d} -> "));
        (to == d && from != d && by_receiver).then(|| from.to_string())
    }
}

impl fmt::Display for Race {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "race on `{}` of {}, bytes {}..{}:",
            self.alloc, self.device, self.bytes.0, self.bytes.1
        )?;
        writeln!(f, "    {}", self.first)?;
        writeln!(f, "    {}", self.second)?;
        if let Some(sender) = self.overwrite_of_a_buffer_in_use() {
            return write!(
                f,
                "    {sender}'s DMA overwrites `{}` while {} still uses what it holds: \
                 have {} signal {sender} once it is done with the buffer (a capacity \
                 semaphore), and {sender} wait for that signal before it starts the DMA",
                self.alloc, self.device, self.device
            );
        }
        match &self.shared {
            Some(s) => write!(
                f,
                "    `{}` of {} is shared by credits that can be in flight together: the \
                 wait at {} took this DMA's bytes in this run, but {} can satisfy it as well, \
                 before this DMA has landed: give each DMA in flight its own semaphore, or \
                 wait for all of them before the access",
                s.semaphore,
                s.device,
                s.wait,
                s.instead.actor_and_site()
            ),
            None => write!(
                f,
                "    no semaphore orders one before the other: make the second wait for a signal the first side sends once it is done"
            ),
        }
    }
}

/// Two unordered accesses, as found (turned into a [`Race`] by [`RaceChecker::finish`]).
#[derive(Clone, Copy, Debug)]
struct Found {
    first: Access,
    second: Access,
    /// The first run of elements both touch.
    at: (usize, usize),
}

/// The race checker: a [`Sink`] for a replay under the orders of the fixpoint.
pub struct RaceChecker<'a> {
    p: &'a Program,
    orders: &'a Orders,
    log: &'a [Entry],
    /// Per credit id: the DMA side it is, if any.
    credit_dma: Vec<u32>,
    /// The waits ordered after each DMA side's completion.
    joined: Joined,
    /// Per semaphore slot credited by a DMA: its DMA sides credited since the last wait
    /// that joined them all.
    since_all: IdMap<u32, Vec<DmaSide>>,
    /// Per allocation of every device: the accesses kept.
    shadow: Vec<Shadow<Access>>,
    found: Vec<Found>,
    /// Sends happens-before does not order after the receiver's entry, in order.
    early: Vec<EarlyCandidate>,
    /// Waits passed so far in the replay.
    waits: usize,
    /// Per (device, invocation): the device's own clock component from its entry on
    /// (0: not entered yet).
    entries: Vec<u32>,
    /// What the replay has written so far, for reads of memory nothing wrote.
    written: Written,
    /// Reads of memory nothing wrote (one per kernel line and allocation).
    uninit: Vec<UninitRead>,
    /// Per allocation of every device: keep every access (none covered is dropped).
    keep_all: Vec<bool>,
}

/// A send that happens-before does not order after its receiver's entry.
struct EarlyCandidate {
    send: Send,
    /// The sender's invocation.
    invocation: usize,
    /// The waits the replay had passed when it was sent.
    before: usize,
}

/// Per DMA side, (device, position) of the waits ordered after its completion: the
/// first one inline (most sides have exactly one), the others on the side.
#[derive(Default)]
struct Joined {
    first: Vec<(u32, u32)>,
    more: HashMap<usize, Vec<(u32, u32)>>,
}

/// A credit that is no DMA side.
const NO_SIDE: u32 = u32::MAX;

/// Not joined by any wait.
const UNJOINED: (u32, u32) = (u32::MAX, 0);

impl Joined {
    fn index((k, side): DmaSide) -> usize {
        2 * k + usize::from(side == Completion::Send)
    }

    /// Marks wait (`device`, `pos`) as ordered after DMA side number `i`.
    fn push(&mut self, i: usize, device: usize, pos: u32) {
        if self.first.len() <= i {
            self.first.resize(i + 1, UNJOINED);
        }
        let mark = (device as u32, pos);
        if self.first[i] == UNJOINED {
            self.first[i] = mark;
        } else {
            self.more.entry(i).or_default().push(mark);
        }
    }

    /// True when `c` knows a wait ordered after `side`'s completion.
    fn known(&self, side: DmaSide, c: &Clock) -> bool {
        let i = Self::index(side);
        let seen = |&(d, pos): &(u32, u32)| c.device(d as usize) >= pos;
        match self.first.get(i) {
            None | Some(&UNJOINED) => false,
            Some(m) => seen(m) || self.more.get(&i).is_some_and(|w| w.iter().any(seen)),
        }
    }
}

/// The kernel line and API call (by number) of access `a` (a DMA's: its start's), as a
/// race's key names it.
fn line_of(p: &Program, a: &Access) -> Option<(SourceLoc, u32)> {
    let site = match a.agent {
        Agent::Device(_) => a.site?,
        Agent::Dma(k, _) => p.dmas[k].origin,
    };
    Some((site.location, site.op_number()))
}

/// True when access `a` happened before `c`: a device's access through its component, a
/// DMA side's through a wait ordered after its completion (`joined`).
fn ordered(joined: &Joined, a: &Access, c: &Clock) -> bool {
    match a.agent {
        Agent::Device(q) => c.device(q) >= a.time,
        Agent::Dma(k, side) => joined.known((k, side), c),
    }
}

/// What [`RaceChecker::finish`] reports.
#[derive(Debug, Default)]
pub struct Findings {
    /// Races, in the order found.
    pub races: Vec<Race>,
    /// Entry-rule violations, in order (one per kernel line).
    pub early: Vec<EarlySend>,
    /// Reads of memory nothing wrote, in order (one per kernel line and allocation).
    pub uninit: Vec<UninitRead>,
    /// Outputs some of which nothing wrote by the end of the replay (of a whole run, when
    /// it did not stop at a deadlock or an exit problem).
    pub unwritten: Vec<UnwrittenOutput>,
    /// Memory (its index among every device's allocations) where a race happens-before
    /// left unordered was ruled out: another access to it, which a ruled-out one stood
    /// for in the replay, may still race ([`RaceChecker::keeping_every_access`]).
    pub refuted: Vec<usize>,
}

/// The explanations a finished replay can give: its facts, and per DMA side its credit
/// id and the wait that consumed it.
struct Explain<'f> {
    facts: &'f Facts<'f>,
    consumed: HashMap<DmaSide, (usize, Option<usize>)>,
}

impl<'a> RaceChecker<'a> {
    /// Elements `lo..hi` of allocation `alloc` as the byte range a TPU holds them in.
    fn bytes_of(&self, alloc: AllocId, lo: usize, hi: usize) -> (u64, u64) {
        let size = self.p.layout.allocs[alloc].dtype.size() as u64;
        (lo as u64 * size, hi as u64 * size)
    }

    /// A checker for `p`, whose waits are ordered as `orders` says.
    pub fn new(p: &'a Program, orders: &'a Orders, log: &'a [Entry]) -> Self {
        Self {
            p,
            orders,
            log,
            credit_dma: Vec::new(),
            joined: Joined::default(),
            since_all: IdMap::default(),
            shadow: vec![Shadow::default(); p.devices * p.layout.allocs.len()],
            found: Vec::new(),
            early: Vec::new(),
            waits: 0,
            entries: vec![0; p.devices * p.invocations.len()],
            written: Written::new(p),
            uninit: Vec::new(),
            keep_all: Vec::new(),
        }
    }

    /// This checker, keeping every access to the allocations `slots` (indices among
    /// every device's allocations): a replay that finds every race there, not one that
    /// stands for those of the accesses it covers.
    pub fn keeping_every_access(mut self, slots: &[usize]) -> Self {
        self.keep_all = vec![false; self.shadow.len()];
        for &s in slots {
            self.keep_all[s] = true;
        }
        self
    }

    /// The races and entry violations, explained with `facts` (the credits and waits of
    /// the same replay): of each bug (a race's key, an early send's line), the first
    /// instance some schedule really has ([`Reach`] rules out the others).
    pub fn finish(mut self, facts: &Facts<'_>, reach: &mut Reach<'_>) -> Findings {
        let explain = (!self.found.is_empty()).then(|| {
            let by = facts.consumers();
            Explain {
                facts,
                consumed: (0..facts.credit_count())
                    .filter_map(|id| {
                        let side = facts.credit(id).dma_side()?;
                        Some((side, (id, by.get(&id).copied())))
                    })
                    .collect(),
            }
        });
        let mut races: Vec<Race> = Vec::new();
        // Every instance of a bug found real (for the reads of uninitialized memory).
        let mut instances: Vec<Race> = Vec::new();
        let mut refuted = Vec::new();
        for f in &self.found {
            let b = &f.second.block;
            let mut race = Race {
                alloc: self.p.alloc_label(b.alloc()),
                device: self.p.device_name(b.device()),
                bytes: self.bytes_of(b.alloc(), f.at.0, f.at.1),
                first: self.side(&f.first),
                second: self.side(&f.second),
                shared: None,
            };
            if races.iter().any(|r| r.key() == race.key()) {
                instances.push(race);
                continue;
            }
            let real = match (self.point(&f.first), self.point(&f.second)) {
                (Some(a), Some(b)) => reach.unordered(a, b),
                _ => true,
            };
            if !real {
                refuted.push(b.device() * self.p.layout.allocs.len() + b.alloc());
                continue;
            }
            let shared = explain.as_ref().and_then(|e| {
                self.shared_semaphore(e, f.first.agent)
                    .or_else(|| self.shared_semaphore(e, f.second.agent))
            });
            race.shared = shared.map(Box::new);
            races.push(race);
        }
        instances.retain(|i| races.iter().any(|r| r.key() == i.key()));
        instances.extend(races.iter().cloned());
        let by = (!self.early.is_empty()).then(|| facts.consumers());
        let mut early: Vec<EarlySend> = Vec::new();
        for c in &self.early {
            let sender = self.p.site(&c.send.site);
            if early.iter().any(|e| e.sender.location == sender.location) {
                continue;
            }
            let Event::Op { device, index } = self.log[c.send.at].get() else {
                unreachable!("a send is an op")
            };
            if !reach.before_entry(Point::Op { device, index }, c.send.to, c.invocation) {
                continue;
            }
            let why = by.as_ref().and_then(|by| {
                stand_in(
                    self.p,
                    self.log,
                    self.orders,
                    facts,
                    by,
                    c.send.site.device as usize,
                    c.send.to,
                    c.before,
                )
            });
            early.push(self.early_send(&c.send, sender, c.invocation, why));
        }
        // A read racing with the write that would have initialised it is that race: the
        // race names both sides and the fix.
        let uninit = self
            .uninit
            .into_iter()
            .filter(|u| {
                !instances.iter().any(|r: &Race| {
                    r.device == u.device
                        && r.alloc == u.alloc
                        && (r.first == u.read || r.second == u.read)
                })
            })
            .collect();
        refuted.sort_unstable();
        refuted.dedup();
        let unwritten = unwritten_outputs(self.p, &mut self.written);
        Findings {
            races,
            early,
            uninit,
            unwritten,
            refuted,
        }
    }

    /// The report of send `s` into `invocation`, by `sender`, with why its handshake
    /// does not know the entry when it looked like it did.
    fn early_send(
        &self,
        s: &Send,
        sender: Site,
        invocation: usize,
        stand_in: Option<StandIn>,
    ) -> EarlySend {
        let what = match (s.dma, s.sem) {
            (Some(k), _) => format!(
                "DMA into `{}`",
                self.p.alloc_label(self.p.dmas[k].dst.alloc())
            ),
            (None, Some(slot)) => format!(
                "signal on `{}`",
                self.p.sem_label(slot % self.p.layout.sems.len())
            ),
            (None, None) => "a send".into(),
        };
        // The receiver's first op of that invocation, if it has one.
        let ops = &self.p.ops[s.to];
        let from = self.p.invocations[invocation].starts[s.to] as usize;
        let to = self
            .p
            .invocations
            .get(invocation + 1)
            .map_or(ops.len(), |i| i.starts[s.to] as usize);
        let entry = ops[from..to].first().map(|o| self.p.site(&o.site));
        EarlySend {
            what,
            sender,
            to: self.p.device_name(s.to),
            invocation: self.p.is_sequence().then_some(invocation),
            entry,
            stand_in: stand_in.map(Box::new),
        }
    }

    /// Where the search stops for access `a`: after its op, or with its DMA side in
    /// flight (`None` for a prologue copy, ordered before everything).
    fn point(&self, a: &Access) -> Option<Point> {
        match a.agent {
            Agent::Dma(k, side) => Some(Point::Dma {
                dma: small(k),
                side,
            }),
            Agent::Device(_) => match self.log[a.at as usize].get() {
                Event::Op { device, index } => Some(Point::Op { device, index }),
                _ => None,
            },
        }
    }

    /// Notes a read of `view` by `agent` when part of it was never written.
    fn check_written(&mut self, agent: Agent, view: &View, site: Option<OpSite>) {
        let Some((lo, hi)) = self.written.unwritten(view) else {
            return;
        };
        let read = self.side(&Access {
            block: View::new(view.device(), view.alloc(), lo, hi - lo).into(),
            write: false,
            agent,
            time: 0,
            site,
            at: 0,
        });
        let found = UninitRead {
            alloc: self.p.alloc_label(view.alloc()),
            device: self.p.device_name(view.device()),
            bytes: self.bytes_of(view.alloc(), lo, hi),
            read,
        };
        if !self.uninit.iter().any(|u| u.key() == found.key()) {
            self.uninit.push(found);
        }
    }

    fn dma_actor(&self, k: usize) -> String {
        let m = &self.p.dmas[k];
        if m.is_remote() {
            let (from, to) = (m.src.device(), m.dst.device());
            format!(
                "DMA {} -> {}",
                self.p.device_name(from),
                self.p.device_name(to)
            )
        } else {
            format!("DMA on {} (local)", self.p.device_name(m.src.device()))
        }
    }

    fn side(&self, a: &Access) -> RaceSide {
        let (actor, site) = match a.agent {
            Agent::Device(d) => (self.p.device_name(d).to_string(), a.site),
            Agent::Dma(k, _) => (self.dma_actor(k), Some(self.p.dmas[k].origin)),
        };
        RaceSide {
            actor,
            site: site.map(|s| self.p.site(&s)),
            access: if a.write { "write" } else { "read" },
        }
    }

    fn credit_side(&self, c: &Credit) -> RaceSide {
        match (
            c.dma_side(),
            op_at(self.p, self.log, c.at()).map(|o| o.site),
        ) {
            (Some((k, _)), _) => RaceSide {
                actor: self.dma_actor(k),
                site: Some(self.p.site(&self.p.dmas[k].origin)),
                access: "write",
            },
            (None, site) => RaceSide {
                actor: "a signal".into(),
                site: site.map(|s| self.p.site(&s)),
                access: "signal",
            },
        }
    }

    /// For a DMA side in a race: the wait that consumed its bytes without being ordered
    /// after it, and a credit that could have satisfied that wait instead.
    fn shared_semaphore(&self, e: &Explain, agent: Agent) -> Option<SharedSemaphore> {
        let Agent::Dma(k, side) = agent else {
            return None;
        };
        let (id, w_ord) = *e.consumed.get(&(k, side))?;
        let w_ord = w_ord?;
        match self.orders.get(w_ord) {
            Join::All => return None,
            Join::Some(ids) if ids.contains(&id) => return None,
            _ => {}
        }
        let w: &Wait = &e.facts.wait(w_ord);
        let site = op_at(self.p, self.log, w.at())?.site;
        let others: Vec<usize> = e.facts.candidates(w).filter(|&i| i != id).collect();
        let alt = others
            .iter()
            .copied()
            .find(|&i| e.facts.credit(i).at > w.at)
            .or_else(|| others.first().copied())?;
        Some(SharedSemaphore {
            semaphore: self.p.sem_label(w.slot() % self.p.layout.sems.len()),
            device: self.p.device_name(w.slot() / self.p.layout.sems.len()),
            wait: self.p.site(&site),
            instead: self.credit_side(&e.facts.credit(alt)),
        })
    }
}

impl Sink for RaceChecker<'_> {
    fn credit(&mut self, _id: usize, c: &Credit) {
        let side = c.dma_side().map_or(NO_SIDE, |side| {
            u32::try_from(Joined::index(side)).expect("fewer than 2^31 DMAs")
        });
        self.credit_dma.push(side);
        if let Some(side) = c.dma_side() {
            self.since_all.entry(c.slot).or_default().push(side);
        }
    }

    fn wait(&mut self, ordinal: usize, w: &Wait, _clock: &Clock) {
        self.waits += 1;
        let mark = (w.slot() / self.p.layout.sems.len(), w.pos);
        match self.orders.get(ordinal) {
            Join::All => {
                // Drained in place: the slot's vector keeps its room for the next credits.
                if let Some(sides) = self.since_all.get_mut(&w.slot) {
                    for side in sides.drain(..) {
                        self.joined.push(Joined::index(side), mark.0, mark.1);
                    }
                }
            }
            Join::Some(ids) => {
                for &id in ids.iter().filter(|&&i| i & CLOCK_ONLY == 0) {
                    let side = self.credit_dma[id];
                    if side != NO_SIDE {
                        self.joined.push(side as usize, mark.0, mark.1);
                    }
                }
            }
            Join::Nothing => {}
        }
    }

    fn access(
        &mut self,
        agent: Agent,
        block: &Block,
        write: bool,
        clock: &Clock,
        site: Option<OpSite>,
        at: usize,
    ) {
        if block.numel() == 0 {
            return;
        }
        for row in block.row_views() {
            if write {
                self.written.write(&row);
            } else {
                self.check_written(agent, &row, site);
            }
        }
        let time = match agent {
            Agent::Device(d) => clock.device(d),
            Agent::Dma(..) => 0,
        };
        let x = Access {
            block: *block,
            write,
            agent,
            time,
            site,
            at: small(at),
        };
        let slot = block.device() * self.p.layout.allocs.len() + block.alloc();
        // Accesses of the same kernel line covered by this one and ordered before it can
        // no longer race with anything this one does not race with, so they are one bug
        // (but a race of this one ruled out by the exact search may leave one of theirs:
        // then every access is kept). Another line's race would be another bug.
        let keep_all = self.keep_all.get(slot).copied().unwrap_or(false);
        let line = line_of(self.p, &x);
        let (p, joined, found) = (self.p, &self.joined, &mut self.found);
        let bounds = block.bounds();
        self.shadow[slot].visit_meeting(bounds, |a| {
            if (a.write || write) && a.agent != agent {
                if let Some(at) = a.block.overlap(block) {
                    if !ordered(joined, a, clock) {
                        found.push(Found {
                            first: *a,
                            second: x,
                            at,
                        });
                    }
                }
            }
            !keep_all
                && a.block.within(block)
                && (write || !a.write)
                && line_of(p, a) == line
                && ordered(joined, a, clock)
        });
        self.shadow[slot].push(bounds, x);
    }

    fn reads_destination(&mut self, agent: Agent, view: &View, site: Option<OpSite>) {
        if !view.is_empty() {
            self.check_written(agent, view, site);
        }
    }

    fn enter(&mut self, device: usize, invocation: usize, pos: u32) {
        self.entries[device * self.p.invocations.len() + invocation] = pos;
    }

    fn send(&mut self, s: &Send, clock: &Clock) {
        let k = self.p.invocation_of_step(s.site.grid_linear as usize);
        let entered = self.entries[s.to * self.p.invocations.len() + k];
        if self.p.invocations[k].entry_barrier() || (entered > 0 && clock.device(s.to) >= entered) {
            return;
        }
        self.early.push(EarlyCandidate {
            send: *s,
            invocation: k,
            before: self.waits,
        });
    }
}
