//! `lazy`: DMA completions wait as long as any device can run; then the newest one
//! someone waits on happens (or the newest at all, at the very end).

use super::{next_device, Choice, Choices, Policy, ScheduleSpec};

/// Keeps every DMA in flight as long as possible.
#[derive(Debug, Default)]
pub struct Lazy {
    next: usize,
}

impl Policy for Lazy {
    fn name(&self) -> String {
        ScheduleSpec::Lazy.to_string()
    }

    fn pick(&mut self, choices: &Choices) -> Choice {
        if let Some(c) = next_device(choices, &mut self.next) {
            return c;
        }
        choices
            .last_awaited_dma()
            .or_else(|| choices.last_dma())
            .expect("the scheduler asks only when something can happen")
    }
}
