//! `lockstep`: no device starts grid point g+1 before every device finished g; DMAs
//! complete as soon as they start. If only a device ahead of the others can move, it
//! moves (the lockstep order is a preference, never a deadlock of its own). Step tables
//! run it at step marks too ([`Lockstep::at_marks`]).

use super::{Choice, Choices, Policy, ScheduleSpec};
use crate::ir::{OpKind, Program};
use std::collections::BTreeSet;

/// Where a device stands: its grid point, then the step marks it passed in it.
type Position = (usize, u32);

/// Grid points in lockstep across devices. The runnable devices are kept ordered by
/// position, updated for the devices that changed at each step (O(log P) a step).
#[derive(Debug, Default)]
pub struct Lockstep {
    next: usize,
    /// Per device and op: the step marks before it in its grid point (empty: grid
    /// points only).
    phases: Vec<Vec<u32>>,
    /// The runnable devices by position, then id.
    order: BTreeSet<(Position, usize)>,
    /// Per device: its position in `order`, if runnable.
    at: Vec<Option<Position>>,
    /// The step of the choices `order` was last brought up to date with.
    synced: Option<usize>,
}

impl Lockstep {
    /// Lockstep at the step marks of `program` as well (`Ctx::trace_step`, a Python
    /// loop's iterations): within a grid point no device passes its k-th mark while a
    /// device that has passed fewer can move, so the row of a step shows every device
    /// right after that step (what `tpusim trace` runs).
    pub fn at_marks(program: &Program) -> Self {
        let phases = program
            .ops
            .iter()
            .map(|ops| {
                let mut grid = None;
                let mut marks = 0u32;
                ops.iter()
                    .map(|op| {
                        if grid != Some(op.site.grid_linear) {
                            grid = Some(op.site.grid_linear);
                            marks = 0;
                        }
                        let before = marks;
                        marks += matches!(op.kind, OpKind::Mark(_)) as u32;
                        before
                    })
                    .collect()
            })
            .collect();
        Lockstep {
            phases,
            ..Lockstep::default()
        }
    }
}

/// Where a device stands whose next op is `op` of grid point `grid`: the grid point,
/// then the marks it passed in it (`phases`: [`Lockstep::phases`]).
fn position(phases: &[Vec<u32>], device: usize, grid: usize, op: usize) -> Position {
    let marks = phases
        .get(device)
        .and_then(|p| p.get(op))
        .copied()
        .unwrap_or(0);
    (grid, marks)
}

impl Lockstep {
    /// Device `d` is runnable as `c`, or not (`None`).
    fn update(&mut self, d: usize, c: Option<Choice>) {
        if self.at.len() <= d {
            self.at.resize(d + 1, None);
        }
        let now = match c {
            Some(Choice::Device { grid, op, .. }) => Some(position(&self.phases, d, grid, op)),
            _ => None,
        };
        if now == self.at[d] {
            return; // most devices touched by a step stay where they were
        }
        if let Some(old) = self.at[d].take() {
            self.order.remove(&(old, d));
        }
        if let Some(at) = now {
            self.order.insert((at, d));
            self.at[d] = Some(at);
        }
    }

    /// Brings `order` up to date with `choices`: the devices that changed since the
    /// step before, or all of them when this policy did not see that step.
    fn sync(&mut self, choices: &Choices) {
        let step = choices.step();
        match (self.synced, choices.changed()) {
            (Some(s), _) if s == step => {}
            (Some(s), Some(changed)) if s + 1 == step => {
                for &d in changed {
                    self.update(d, choices.device(d));
                }
            }
            _ => {
                self.order.clear();
                self.at.clear();
                for c in choices.devices() {
                    if let Choice::Device { device, .. } = c {
                        self.update(device, Some(c));
                    }
                }
            }
        }
        self.synced = Some(step);
    }
}

#[cfg(test)]
impl Lockstep {
    /// The pick from a listing of every runnable device: the lowest position, round
    /// robin among the devices there.
    fn plain_pick(&self, choices: &Choices) -> usize {
        let at = |c: &Choice| match *c {
            Choice::Device {
                device, grid, op, ..
            } => (position(&self.phases, device, grid, op), device),
            _ => unreachable!("devices only"),
        };
        let all: Vec<(Position, usize)> = choices.devices().map(|c| at(&c)).collect();
        let lowest = all.iter().map(|a| a.0).min().expect("a runnable device");
        let there = || all.iter().filter(|a| a.0 == lowest).map(|a| a.1);
        there()
            .find(|&d| d >= self.next)
            .or_else(|| there().next())
            .expect("a runnable device")
    }
}

impl Policy for Lockstep {
    fn name(&self) -> String {
        ScheduleSpec::Lockstep.to_string()
    }

    fn pick(&mut self, choices: &Choices) -> Choice {
        // Kept up to date at every step, DMA completions too (a gap costs a rebuild).
        self.sync(choices);
        if let Some(c) = choices.first_dma() {
            return c;
        }
        // Round robin among the runnable devices at the lowest position.
        let &(lowest, first) = self
            .order
            .first()
            .expect("the scheduler asks only when something can happen");
        let d = self
            .order
            .range((lowest, self.next)..)
            .next()
            .filter(|(at, _)| *at == lowest)
            .map_or(first, |&(_, d)| d);
        #[cfg(test)]
        assert_eq!(
            d,
            self.plain_pick(choices),
            "the kept order picks as a listing does"
        );
        self.next = d + 1;
        choices.device(d).expect("a runnable device")
    }

    fn forced(&mut self, choices: &Choices, _c: Choice) {
        self.sync(choices);
    }
}
