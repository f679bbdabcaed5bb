//! `lockstep`: no device starts grid point g+1 before every device finished g; DMAs
//! complete as soon as they start. If only a device ahead of the others can move, it
//! moves (the lockstep order is a preference, never a deadlock of its own). Step tables
//! run it at step marks too ([`Lockstep::at_marks`]).

use super::{round_robin, Choice, Choices, Policy, ScheduleSpec};
use crate::ir::{OpKind, Program};

/// Grid points in lockstep across devices.
#[derive(Debug, Default)]
pub struct Lockstep {
    next: usize,
    /// Per device and op: the step marks before it in its grid point (empty: grid
    /// points only).
    phases: Vec<Vec<u32>>,
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
        Lockstep { next: 0, phases }
    }
}

/// Where a device stands whose next op is `op` of grid point `grid`: the grid point,
/// then the marks it passed in it (`phases`: [`Lockstep::phases`]).
fn position(phases: &[Vec<u32>], device: usize, grid: usize, op: usize) -> (usize, u32) {
    let marks = phases
        .get(device)
        .and_then(|p| p.get(op))
        .copied()
        .unwrap_or(0);
    (grid, marks)
}

impl Policy for Lockstep {
    fn name(&self) -> String {
        ScheduleSpec::Lockstep.to_string()
    }

    fn pick(&mut self, choices: &Choices) -> Choice {
        if let Some(c) = choices.first_dma() {
            return c;
        }
        let phases = &self.phases;
        let at = |c: &Choice| match *c {
            Choice::Device {
                device, grid, op, ..
            } => Some(position(phases, device, grid, op)),
            _ => None,
        };
        let lowest = choices.devices().filter_map(|c| at(&c)).min();
        round_robin(choices, &mut self.next, |c| {
            at(c).is_some() && at(c) == lowest
        })
        .expect("the scheduler asks only when something can happen")
    }
}
