//! Scheduling policies: given what can happen next, pick one.

/// One thing the scheduler can do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Run the next op of this device.
    Device(usize),
    /// Complete the in-flight DMA with this id.
    CompleteDma(usize),
}

/// Picks the next step among the runnable choices (never empty).
pub trait Policy {
    /// Short name, e.g. `eager`.
    fn name(&self) -> &str;
    /// Index into `choices` of the step to take.
    fn pick(&mut self, choices: &[Choice]) -> usize;
}

/// The default, deterministic policy: an in-flight DMA completes as soon as it can
/// (oldest first); otherwise devices take turns, one op each, in id order.
#[derive(Debug, Default)]
pub struct Eager {
    next: usize,
}

impl Policy for Eager {
    fn name(&self) -> &str {
        "eager"
    }

    fn pick(&mut self, choices: &[Choice]) -> usize {
        if let Some(i) = choices
            .iter()
            .position(|c| matches!(c, Choice::CompleteDma(_)))
        {
            return i;
        }
        // Round robin: the first device at or after `next`, else the lowest.
        let pick = choices
            .iter()
            .position(|c| matches!(c, Choice::Device(d) if *d >= self.next))
            .unwrap_or(0);
        if let Choice::Device(d) = choices[pick] {
            self.next = d + 1;
        }
        pick
    }
}
