//! `random:SEED`: a seeded uniform choice among every runnable device and every
//! pending DMA completion, so both the interleaving and the completion order vary.

use super::{Choice, Choices, Policy, ScheduleSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Seeded random schedule; the same seed gives the same schedule.
#[derive(Debug)]
pub struct Random {
    seed: u64,
    rng: ChaCha8Rng,
}

impl Random {
    /// A random policy from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }
}

impl Policy for Random {
    fn name(&self) -> String {
        ScheduleSpec::Random(self.seed).to_string()
    }

    fn pick(&mut self, choices: &Choices) -> Choice {
        let i = self.rng.random_range(0..choices.len());
        choices
            .get(i)
            .expect("the scheduler asks only when something can happen")
    }
}
