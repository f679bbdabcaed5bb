//! The verifier's fixpoint over one run: replay the log under the orders guessed so far
//! (checking races and the entry rule as it goes), let the facts of that replay decide
//! which credits each wait is really ordered after ([`super::sync`]), and repeat until
//! the answer holds. What the replay finds is then held against the exact search
//! ([`super::reach`]).

use super::hb::{replay, tally};
use super::log::Entry;
use super::orders::Orders;
use super::race::{Findings, RaceChecker};
use super::reach::Reach;
use super::sync::Facts;
use crate::ir::Program;

/// The fixpoint over the run in `log`: what every wait is ordered after, and the races
/// and entry violations of the replay under those orders that some schedule really has
/// (each replay checks as it goes, so a run whose first guess holds is replayed once).
pub fn check(p: &Program, log: &[Entry], reach: &mut Reach<'_>) -> Findings {
    let (waits, credits) = tally(p, log);
    let mut orders = Orders::all(waits);
    loop {
        let facts = Facts::new(p, log, credits, waits);
        let mut pass = (facts, RaceChecker::new(p, &orders, log));
        replay(p, log, &orders, &mut pass);
        let (facts, checker) = pass;
        let next = facts.decide().meet(&orders);
        if next == orders {
            let found = checker.finish(&facts, reach);
            if found.refuted.is_empty() {
                return found;
            }
            // A ruled-out race may have stood for others of the accesses it covered:
            // replay once more keeping every access where that happened.
            let facts = Facts::new(p, log, credits, waits);
            let checker = RaceChecker::new(p, &orders, log).keeping_every_access(&found.refuted);
            let mut pass = (facts, checker);
            replay(p, log, &orders, &mut pass);
            let (facts, checker) = pass;
            let mut again = checker.finish(&facts, reach);
            again.refuted.clear();
            return again;
        }
        orders = next;
    }
}
