//! `lockstep`: no device starts grid point g+1 before every device finished g; DMAs
//! complete as soon as they start. If only a device ahead of the others can move, it
//! moves (the lockstep order is a preference, never a deadlock of its own).

use super::{round_robin, Choice, Choices, Policy, ScheduleSpec};

/// Grid points in lockstep across devices.
#[derive(Debug, Default)]
pub struct Lockstep {
    next: usize,
}

impl Policy for Lockstep {
    fn name(&self) -> String {
        ScheduleSpec::Lockstep.to_string()
    }

    fn pick(&mut self, choices: &Choices) -> Choice {
        if let Some(c) = choices.first_dma() {
            return c;
        }
        let lowest = choices
            .devices()
            .filter_map(|c| match c {
                Choice::Device { grid, .. } => Some(grid),
                _ => None,
            })
            .min();
        round_robin(
            choices,
            &mut self.next,
            |c| matches!(c, Choice::Device { grid, .. } if Some(*grid) == lowest),
        )
        .expect("the scheduler asks only when something can happen")
    }
}
