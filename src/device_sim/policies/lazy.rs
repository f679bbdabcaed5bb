//! `lazy`: DMAs stay in flight as long as any device can run; then the newest DMA
//! someone waits on completes (or the newest at all, at the very end).

use super::{round_robin, Choice, Policy, ScheduleSpec};

/// Keeps every DMA in flight as long as possible.
#[derive(Debug, Default)]
pub struct Lazy {
    next: usize,
}

impl Policy for Lazy {
    fn name(&self) -> String {
        ScheduleSpec::Lazy.to_string()
    }

    fn pick(&mut self, choices: &[Choice]) -> usize {
        if let Some(i) = round_robin(choices, &mut self.next, |_| true) {
            return i;
        }
        let newest = |awaited_only: bool| {
            choices.iter().rposition(
                |c| matches!(c, Choice::CompleteDma { awaited, .. } if *awaited || !awaited_only),
            )
        };
        newest(true).or_else(|| newest(false)).unwrap_or(0)
    }
}
