//! `eager`: a DMA completes as soon as it starts; devices take turns, one op each.

use super::{next_device, Choice, Choices, Policy, ScheduleSpec};

/// The default, deterministic policy; a step costs O(log P).
#[derive(Debug, Default)]
pub struct Eager {
    next: usize,
}

impl Policy for Eager {
    fn name(&self) -> String {
        ScheduleSpec::Eager.to_string()
    }

    fn pick(&mut self, choices: &Choices) -> Choice {
        choices
            .first_dma()
            .or_else(|| next_device(choices, &mut self.next))
            .expect("the scheduler asks only when something can happen")
    }
}
