//! Which credits a wait is ordered after, in every schedule, not only the one that ran.
//!
//! A wait on semaphore S that has consumed C in all (its own amount and those of the
//! waits on S before it) is ordered after S's credits only when it could not have
//! passed without them. The credits that can reach S before the wait, in some schedule,
//! are those not ordered after the wait by happens-before; call their total T. DMA bytes
//! land piece by piece, so a DMA's credit is certain only when T <= C (then every one
//! of them is); a signal lands whole, so it is certain when the others alone fall short
//! of C. Happens-before itself depends on these answers, so they are computed as a
//! fixpoint: start from "every wait is ordered after every credit before it in this
//! run" and drop what the rule does not support until nothing changes. What remains is
//! sound: a wait that broke its answer in some execution would need an earlier one that
//! broke its own first.

use super::hb::{credit_at, wait_at, Credit, Sink, Wait};
use super::log::Entry;
use super::orders::{Join, Orders};
use super::Clock;
use crate::ir::Program;
use crate::sched::credits::Credits;
use std::collections::HashMap;

/// Credits and waits of one replay. Each keeps only what the replay alone knows (its
/// clock component) and where it is in the log; the rest is read back from the log and
/// the program when asked (8 bytes a credit or wait: a run at large P has millions).
pub struct Facts<'a> {
    p: &'a Program,
    log: &'a [Entry],
    /// Per credit id: (log position, `comp`).
    credits: Vec<(u32, u32)>,
    /// Per wait ordinal: (log position, `pos`).
    waits: Vec<(u32, u32)>,
}

impl Sink for Facts<'_> {
    fn credit(&mut self, _id: usize, c: &Credit) {
        self.credits.push((c.at, c.comp));
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

/// Per semaphore slot: its credits sorted by `comp`, with running totals.
struct SlotCredits {
    /// Credit ids, by increasing `comp` (32 bits: a run has millions).
    ids: Vec<u32>,
    /// `comps[i]` = comp of `ids[i]`.
    comps: Vec<u32>,
    /// Prefix sums of amounts (one longer than `ids`).
    total: Vec<u64>,
    /// Index in `ids` of the first `set` credit (`ids.len()` if none).
    first_set: usize,
    /// Largest amount of a whole-landing credit.
    max_atomic: u64,
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
        let (at, comp) = self.credits[id];
        credit_at(self.p, self.log, at, comp)
    }

    /// Wait `ordinal`.
    pub fn wait(&self, ordinal: usize) -> Wait {
        let (at, pos) = self.waits[ordinal];
        wait_at(self.p, self.log, at, pos)
    }

    /// Per semaphore slot (of `slots`), its credits.
    fn by_slot(&self, slots: usize) -> Vec<SlotCredits> {
        let mut m: Vec<Vec<u32>> = vec![Vec::new(); slots];
        for id in 0..self.credits.len() {
            m[self.credit(id).slot()].push(u32::try_from(id).expect("fewer than 2^32 credits"));
        }
        m.into_iter()
            .map(|mut ids| {
                ids.sort_by_key(|&i| self.credits[i as usize].1);
                let mut total = Vec::with_capacity(ids.len() + 1);
                total.push(0);
                let mut max_atomic = 0;
                let mut first_set = None;
                for (n, &i) in ids.iter().enumerate() {
                    let c = self.credit(i as usize);
                    total.push(total.last().unwrap_or(&0) + c.amount);
                    if c.atomic {
                        max_atomic = max_atomic.max(c.amount);
                    }
                    if c.set && first_set.is_none() {
                        first_set = Some(n);
                    }
                }
                let comps = ids.iter().map(|&i| self.credits[i as usize].1).collect();
                SlotCredits {
                    first_set: first_set.unwrap_or(ids.len()),
                    ids,
                    comps,
                    total,
                    max_atomic,
                }
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

    /// What each wait is ordered after, given the happens-before these facts came from
    /// (`slots`: the number of semaphore slots).
    pub(super) fn decide(&self, slots: usize) -> Orders {
        let by_slot = self.by_slot(slots);
        let mut consumed = vec![0u64; slots];
        let mut cursor = vec![0usize; slots];
        let mut orders = Orders::default();
        for i in 0..self.waits.len() {
            let w = &self.wait(i);
            let need = if w.decrement {
                consumed[w.slot()] += w.amount;
                consumed[w.slot()]
            } else {
                w.amount
            };
            let s = &by_slot[w.slot()];
            let k = below(&s.comps, w.pos, &mut cursor[w.slot()]);
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
        if s.max_atomic <= slack {
            return nothing;
        }
        let mut forced: Vec<usize> = s.ids[..k]
            .iter()
            .map(|&i| i as usize)
            .filter(|&i| {
                let c = self.credit(i);
                c.atomic && c.amount > slack && c.at < w.at
            })
            .collect();
        forced.sort_unstable();
        Some(forced)
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
