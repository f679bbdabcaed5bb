//! The verifier's fixpoint over one run: replay the log under the orders guessed so far
//! (checking races and the entry rule as it goes), let the facts of that replay decide
//! which credits each wait is really ordered after ([`super::sync`]), and repeat until
//! the answer holds.

use super::hb::{replay, tally};
use super::log::Entry;
use super::orders::Orders;
use super::race::{Findings, RaceChecker};
use super::sync::Facts;
use crate::ir::Program;

/// The fixpoint over the run in `log`: what every wait is ordered after, and the races
/// and entry violations of the replay under those orders (each replay checks as it
/// goes, so a run whose first guess holds is replayed once).
pub fn check(p: &Program, log: &[Entry]) -> Findings {
    let slots = p.layout.sem_table().len(p.devices);
    let (waits, credits) = tally(p, log);
    let mut orders = Orders::all(waits);
    loop {
        let facts = Facts::new(p, log, credits, waits);
        let mut pass = (facts, RaceChecker::new(p, &orders, log));
        replay(p, log, &orders, &mut pass);
        let (facts, checker) = pass;
        let next = facts.decide(slots).meet(&orders);
        if next == orders {
            return checker.finish(&facts);
        }
        orders = next;
    }
}
