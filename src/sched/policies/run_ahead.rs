//! `run-ahead:D`: device D runs as far ahead as the semaphores allow. When it cannot
//! move, the DMA completions someone waits on happen first, then the other devices move
//! one op at a time (lowest id first), so they lag as much as possible.

use super::{Choice, Choices, Policy, ScheduleSpec};

/// One device races ahead of the others.
#[derive(Debug)]
pub struct RunAhead {
    leader: usize,
}

impl RunAhead {
    /// Device `leader` runs ahead.
    pub fn new(leader: usize) -> Self {
        Self { leader }
    }
}

impl Policy for RunAhead {
    fn name(&self) -> String {
        ScheduleSpec::RunAhead(self.leader).to_string()
    }

    fn pick(&mut self, choices: &Choices) -> Choice {
        choices
            .device(self.leader)
            .or_else(|| choices.first_awaited_dma())
            .or_else(|| choices.devices().next())
            .or_else(|| choices.first_dma())
            .expect("the scheduler asks only when something can happen")
    }
}
