//! Which credits a wait is ordered after, in every schedule, not only the one that ran.
//!
//! A wait on semaphore S that has consumed C in all (its own amount and those of the
//! waits on S before it) is ordered after S's credits only when it could not have
//! passed without them. The credits that can reach S before the wait, in some schedule,
//! are those not ordered after the wait by happens-before; call their total T. DMA bytes
//! land piece by piece, so a DMA's credit is certain only when T <= C (then every one
//! of them is); a signal lands whole, so it is certain when the others alone fall short
//! of C. When neither holds, a sender whose credits the others alone fall short of
//! without still sent the wait some of them: the wait is ordered after that sender's
//! earliest credit by which the shortfall was sent (a wait synchronizes with the
//! credits that reached its semaphore before it, whichever those were, and one
//! sender's credits know each other in its program order).
//! Happens-before itself depends on these answers, so they are computed as a
//! fixpoint: start from "every wait is ordered after every credit before it in this
//! run" and drop what the rule does not support until nothing changes. What remains is
//! sound: a wait that broke its answer in some execution would need an earlier one that
//! broke its own first.

use super::hb::{credit_at, wait_at, Credit, Sink, Wait};
use super::log::Entry;
use super::orders::{Join, Orders, CLOCK_ONLY};
use super::Clock;
use crate::ir::Program;
use crate::sched::credits::Credits;
use crate::sched::ids::IdMap;
use std::collections::HashMap;

/// Credits and waits of one replay. Each keeps only what the replay alone knows (its
/// clock component) and where it is in the log; the rest is read back from the log and
/// the program when asked (8 bytes a credit or wait: a run at large P has millions).
pub struct Facts<'a> {
    p: &'a Program,
    log: &'a [Entry],
    /// Per credit id: (log position, `comp`, `from`).
    credits: Vec<(u32, u32, u32)>,
    /// Per wait ordinal: (log position, `pos`).
    waits: Vec<(u32, u32)>,
}

impl Sink for Facts<'_> {
    fn credit(&mut self, _id: usize, c: &Credit) {
        self.credits.push((c.at, c.comp, c.from));
        if cfg!(test) {
            assert_eq!(&Facts::credit(self, self.credits.len() - 1), c);
        }
    }

    fn wait(&mut self, _ordinal: usize, w: &Wait, _clock: &Clock) {
        self.waits.push((w.at, w.pos));
        if cfg!(test) {
            assert_eq!(&Facts::wait(self, self.waits.len() - 1), w);
        }
    }
}

/// Per semaphore slot credited in the run: its credits sorted by `comp`, with running
/// totals, and what the waits on it so far consumed and could count on.
struct SlotCredits {
    /// Credit ids, by increasing `comp` (32 bits: a run has millions).
    ids: Vec<u32>,
    /// `comps[i]` = comp of `ids[i]`.
    comps: Vec<u32>,
    /// Prefix sums of amounts (one longer than `ids`).
    total: Vec<u64>,
    /// Index in `ids` of the first `set` credit (`ids.len()` if none).
    first_set: usize,
    /// Amount the decrementing waits on the slot so far consumed.
    consumed: u64,
    /// How many of `comps` the slot's last wait could count on ([`below`]).
    cursor: usize,
}

/// The number of the sorted `comps` below `pos`. `at` holds that number for the
/// slot's previous wait, whose `pos` was no larger (a slot's waits are its device's,
/// whose own position only grows), so a slot's waits cost one pass over its credits.
fn below(comps: &[u32], pos: u32, at: &mut usize) -> usize {
    if *at > 0 && comps[*at - 1] >= pos {
        *at = comps.partition_point(|&c| c < pos);
    }
    while *at < comps.len() && comps[*at] < pos {
        *at += 1;
    }
    *at
}

impl<'a> Facts<'a> {
    /// Room for `credits` credits and `waits` waits of a replay of `log`, a run of `p`.
    pub fn new(p: &'a Program, log: &'a [Entry], credits: usize, waits: usize) -> Self {
        Facts {
            p,
            log,
            credits: Vec::with_capacity(credits),
            waits: Vec::with_capacity(waits),
        }
    }

    /// The number of credits.
    pub fn credit_count(&self) -> usize {
        self.credits.len()
    }

    /// Credit `id`.
    pub fn credit(&self, id: usize) -> Credit {
        let (at, comp, from) = self.credits[id];
        credit_at(self.p, self.log, at, comp, from)
    }

    /// Wait `ordinal`.
    pub fn wait(&self, ordinal: usize) -> Wait {
        let (at, pos) = self.waits[ordinal];
        wait_at(self.p, self.log, at, pos)
    }

    /// Per semaphore slot credited in the run, its credits (a kernel may declare P²
    /// semaphores per device and credit a few of them: seed 003's signal matrix).
    fn by_slot(&self) -> IdMap<u32, SlotCredits> {
        let mut m: IdMap<u32, Vec<u32>> = IdMap::default();
        for id in 0..self.credits.len() {
            let slot = self.credit(id).slot;
            m.entry(slot)
                .or_default()
                .push(u32::try_from(id).expect("fewer than 2^32 credits"));
        }
        m.into_iter()
            .map(|(slot, mut ids)| {
                ids.sort_by_key(|&i| self.credits[i as usize].1);
                let mut total = Vec::with_capacity(ids.len() + 1);
                total.push(0);
                let mut first_set = None;
                for (n, &i) in ids.iter().enumerate() {
                    let c = self.credit(i as usize);
                    total.push(total.last().unwrap_or(&0) + c.amount);
                    if c.set && first_set.is_none() {
                        first_set = Some(n);
                    }
                }
                let comps = ids.iter().map(|&i| self.credits[i as usize].1).collect();
                let s = SlotCredits {
                    first_set: first_set.unwrap_or(ids.len()),
                    ids,
                    comps,
                    total,
                    consumed: 0,
                    cursor: 0,
                };
                (slot, s)
            })
            .collect()
    }

    /// The credits that can reach wait `w`'s semaphore before it in some schedule.
    pub fn candidates<'w>(&'w self, w: &'w Wait) -> impl Iterator<Item = usize> + 'w {
        (0..self.credits.len()).filter(move |&i| {
            let c = self.credit(i);
            c.slot == w.slot && c.comp < w.pos
        })
    }

    /// What each wait is ordered after, given the happens-before these facts came from.
    pub(super) fn decide(&self) -> Orders {
        let mut by_slot = self.by_slot();
        let mut orders = Orders::default();
        for i in 0..self.waits.len() {
            let w = &self.wait(i);
            let Some(s) = by_slot.get_mut(&w.slot) else {
                // Nothing credits the slot: the wait is ordered after nothing.
                orders.push(Join::Nothing);
                continue;
            };
            let need = if w.decrement {
                s.consumed += w.amount;
                s.consumed
            } else {
                w.amount
            };
            let k = below(&s.comps, w.pos, &mut s.cursor);
            let forced = self.forced(s, k, w, need);
            orders.push(match &forced {
                None => Join::All,
                Some(ids) => Join::Some(ids),
            });
        }
        orders
    }

    /// The credits of slot `s` that wait `w`, having consumed `need` in all, is ordered
    /// after (`k`: how many of them can come before it): `None` for all of them.
    fn forced(&self, s: &SlotCredits, k: usize, w: &Wait, need: u64) -> Option<Vec<usize>> {
        let nothing = Some(Vec::new());
        if s.ids.is_empty() {
            return nothing;
        }
        let total = s.total[k];
        if s.first_set < k {
            // A `Set` can replace any value: no credit is certain.
            return nothing;
        }
        if total <= need {
            return None;
        }
        let slack = total - need;
        let candidates: Vec<Credit> = s.ids[..k]
            .iter()
            .map(|&i| self.credit(i as usize))
            .collect();
        let mut forced: Vec<usize> = s.ids[..k]
            .iter()
            .zip(&candidates)
            .filter(|(_, c)| c.atomic && c.amount > slack && c.at < w.at)
            .map(|(&i, _)| i as usize)
            .collect();
        forced.extend(self.sender_shares(&s.ids[..k], &candidates, w, slack));
        forced.sort_unstable();
        forced.dedup();
        Some(forced)
    }

    /// For each sender whose credits among `candidates` (ids `ids`) exceed `slack`, the
    /// rest cannot pass the wait alone: it took at least that excess from this sender,
    /// so it comes after the earliest credit of the sender by which so much was sent
    /// (its clock, a DMA's start's, is below that of any later one of the sender's).
    /// Of that one, or an earlier one of the sender's credited before the wait in this
    /// run, the id, as [`CLOCK_ONLY`]: a DMA's bytes may have landed only in part.
    fn sender_shares(
        &self,
        ids: &[u32],
        candidates: &[Credit],
        w: &Wait,
        slack: u64,
    ) -> Vec<usize> {
        let mut by_sender: HashMap<usize, Vec<(u32, usize, &Credit)>> = HashMap::new();
        for (&id, c) in ids.iter().zip(candidates) {
            let e = c.sender(self.p, self.log);
            by_sender
                .entry(e)
                .or_default()
                .push((c.from, id as usize, c));
        }
        let mut out = Vec::new();
        for (_, mut sent) in by_sender {
            let total: u64 = sent.iter().map(|(_, _, c)| c.amount).sum();
            if total <= slack {
                continue;
            }
            let mut left = total - slack;
            sent.sort_unstable_by_key(|&(from, id, _)| (from, id));
            let mut pick = None;
            for &(_, id, c) in &sent {
                if c.at < w.at {
                    pick = Some(id);
                }
                if c.amount >= left {
                    break;
                }
                left -= c.amount;
            }
            out.extend(pick.map(|id| id | CLOCK_ONLY));
        }
        out
    }

    /// For each credit id, the decrementing wait (ordinal) that consumed its last unit
    /// in this run, first in, first out.
    pub fn consumers(&self) -> HashMap<usize, usize> {
        let mut queues: HashMap<usize, Credits<usize>> = HashMap::new();
        let mut out = HashMap::new();
        let (mut ci, mut wi) = (0, 0);
        while ci < self.credits.len() || wi < self.waits.len() {
            let credit_first = match (self.credits.get(ci), self.waits.get(wi)) {
                (Some(c), Some(w)) => c.0 < w.0,
                (Some(_), None) => true,
                _ => false,
            };
            if credit_first {
                let c = self.credit(ci);
                queues.entry(c.slot()).or_default().push(ci, c.amount);
                ci += 1;
                continue;
            }
            let w = self.wait(wi);
            if w.decrement {
                queues.entry(w.slot()).or_default().consume(w.amount, |id| {
                    out.insert(id, wi);
                });
            }
            wi += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::below;
    use proptest::prelude::*;

    proptest! {
        /// The cursor answers as a binary search does, whatever order the positions come in.
        #[test]
        fn below_is_the_partition_point(
            mut comps in proptest::collection::vec(0u32..50, 0..40),
            positions in proptest::collection::vec(0u32..60, 0..30),
        ) {
            comps.sort_unstable();
            let mut at = 0;
            for pos in positions {
                prop_assert_eq!(below(&comps, pos, &mut at), comps.partition_point(|&c| c < pos));
            }
        }
    }
}
