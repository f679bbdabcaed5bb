//! `eager`: a DMA completes as soon as it starts; devices take turns, one op each.

use super::{first_dma, round_robin, Choice, Policy, ScheduleSpec};

/// The default, deterministic policy.
#[derive(Debug, Default)]
pub struct Eager {
    next: usize,
}

impl Policy for Eager {
    fn name(&self) -> String {
        ScheduleSpec::Eager.to_string()
    }

    fn pick(&mut self, choices: &[Choice]) -> usize {
        first_dma(choices)
            .or_else(|| round_robin(choices, &mut self.next, |_| true))
            .unwrap_or(0)
    }
}
