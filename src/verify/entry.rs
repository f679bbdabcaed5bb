//! The entry rule's report: a remote DMA or a signal on a non-barrier semaphore sent to a
//! device not known to have entered the kernel invocation the sender is in, and, when a
//! wait of the sender looked like it knew (it took a signal of the receiver), the other
//! credit that can satisfy that wait instead. Across invocations that is the hazard the
//! Pallas docs' double barrier is for: a barrier semaphore outlives the kernel, so a
//! neighbour that never waits for this device can leave the invocation, enter the next
//! and signal it again, standing in for a neighbour that has not entered yet.

use super::hb::{op_at, Credit};
use super::log::Entry;
use super::orders::{Join, Orders};
use super::side::RaceSide;
use super::sync::Facts;
use crate::error::{DeviceName, Site};
use crate::ir::Program;
use std::collections::HashMap;
use std::fmt;

/// A remote DMA or signal sent to a device not known to have entered the kernel.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct EarlySend {
    /// What was sent: `DMA into `out_ref`` or `signal on `capacity_sem``.
    pub what: String,
    /// The sending op.
    pub sender: Site,
    /// The device sent to.
    #[serde(flatten)]
    pub to: DeviceName,
    /// The invocation it was sent into (the sender's), in a sequence of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invocation: Option<usize>,
    /// The receiving device's first op, where it enters the kernel.
    pub entry: Option<Site>,
    /// Why the sender's handshake does not know the entry, when it looked like it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stand_in: Option<Box<StandIn>>,
}

/// A wait of the sender that took the receiver's signal in the run that was checked,
/// and another credit that can satisfy it before the receiver has signalled.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct StandIn {
    /// The semaphore waited on.
    pub semaphore: String,
    /// The wait.
    pub wait: Site,
    /// The receiver's signal it took in this run.
    pub took: RaceSide,
    /// A credit that can satisfy it instead.
    pub instead: RaceSide,
}

impl fmt::Display for EarlySend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kernel = match self.invocation {
            Some(k) => format!("invocation {k}"),
            None => "the kernel".into(),
        };
        writeln!(
            f,
            "sent to {} before it is known to have entered {kernel}:",
            self.to
        )?;
        writeln!(f, "    {} by {}", self.what, self.sender)?;
        match &self.entry {
            Some(e) => writeln!(
                f,
                "    {} enters {kernel} before its first op, {e}; nothing orders that entry before the send",
                self.to
            )?,
            None => writeln!(
                f,
                "    {} has no op in {kernel}; nothing orders its entry before the send",
                self.to
            )?,
        }
        if let Some(s) = &self.stand_in {
            writeln!(
                f,
                "    the wait on `{}` at {} took {} in this run, but {} can satisfy it as well",
                s.semaphore,
                s.wait,
                side(&s.took),
                side(&s.instead)
            )?;
            let later = |x: &RaceSide| x.site.as_ref().and_then(|s| s.invocation);
            if later(&s.instead) > s.wait.invocation {
                writeln!(
                    f,
                    "    a barrier semaphore outlives the kernel: a neighbour that never waits for this device can leave invocation {}, enter the next and signal it again; a second barrier round (the Pallas docs' double barrier) orders that",
                    s.wait.invocation.unwrap_or(0)
                )?;
            }
        }
        write!(
            f,
            "    its semaphores and buffers may not exist yet: handshake with {} on the barrier semaphore first, or drop the collective_id to get Pallas' entry barrier",
            self.to
        )
    }
}

/// A credit's side as a sentence's subject: `the signal of device 2 in invocation 1 at …`.
fn side(s: &RaceSide) -> String {
    match &s.site {
        Some(site) => format!("the signal of {site}"),
        None => s.actor.clone(),
    }
}

/// For a send from `sender` to `to` made after the replay's first `before` waits: a
/// wait of the sender that consumed a signal of `to` in this run (`by`: each credit's
/// consumer) without being ordered after it, and a credit that can satisfy it instead
/// (one of a later invocation first, then any).
#[allow(clippy::too_many_arguments)]
pub(super) fn stand_in(
    p: &Program,
    log: &[Entry],
    orders: &Orders,
    facts: &Facts<'_>,
    by: &HashMap<usize, usize>,
    sender: usize,
    to: usize,
    before: usize,
) -> Option<StandIn> {
    let sems = p.layout.sems.len();
    let signal = |c: &Credit| {
        let site = op_at(p, log, c.at()).map(|o| o.site)?;
        (c.dma.is_none()).then(|| RaceSide {
            actor: "a signal".into(),
            site: Some(p.site(&site)),
            access: "signal",
        })
    };
    let from = |c: &Credit| op_at(p, log, c.at()).map(|o| o.site.device as usize);
    for id in 0..facts.credit_count() {
        let c = facts.credit(id);
        if c.slot() / sems != sender || from(&c) != Some(to) {
            continue;
        }
        let Some(&w_ord) = by.get(&id).filter(|&&w| w < before) else {
            continue;
        };
        match orders.get(w_ord) {
            Join::All => continue,
            Join::Some(ids) if ids.contains(&id) => continue,
            _ => {}
        }
        let w = facts.wait(w_ord);
        let took = signal(&c)?;
        let wait = p.site(&op_at(p, log, w.at())?.site);
        let others: Vec<(RaceSide, Credit)> = facts
            .candidates(&w)
            .filter(|&i| i != id)
            .map(|i| facts.credit(i))
            .filter(|o| from(o) != Some(to))
            .filter_map(|o| Some((signal(&o)?, o)))
            .collect();
        let of = |x: &RaceSide| x.site.as_ref().and_then(|s| s.invocation);
        let instead = others
            .iter()
            .find(|(s, _)| of(s) > wait.invocation)
            .or_else(|| others.first())?
            .0
            .clone();
        return Some(StandIn {
            semaphore: p.sem_label(w.slot() % sems),
            wait,
            took,
            instead,
        });
    }
    None
}
