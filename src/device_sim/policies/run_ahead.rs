//! `run-ahead:D`: device D runs as far ahead as the semaphores allow. When it cannot
//! move, the DMAs it needs complete first, then the other devices move one op at a
//! time (lowest id first), so they lag as much as possible.

use super::{Choice, Policy, ScheduleSpec};

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

    fn pick(&mut self, choices: &[Choice]) -> usize {
        let find = |f: &dyn Fn(&Choice) -> bool| choices.iter().position(f);
        find(&|c| matches!(c, Choice::Device { device, .. } if *device == self.leader))
            .or_else(|| find(&|c| matches!(c, Choice::CompleteDma { awaited: true, .. })))
            .or_else(|| find(&|c| matches!(c, Choice::Device { .. })))
            .unwrap_or(0)
    }
}
