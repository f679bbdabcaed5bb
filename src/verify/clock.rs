//! Vector clocks for the happens-before checker: one counter per device. A DMA's
//! accesses are not a component of their own: a DMA side is known to a clock once the
//! clock knows a wait that was ordered after that side's completion (see `race.rs`).

/// A vector clock over devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Clock {
    dev: Vec<u32>,
}

impl Clock {
    /// The zero clock for `devices` devices.
    pub fn new(devices: usize) -> Self {
        Self {
            dev: vec![0; devices],
        }
    }

    /// The clock with every component at `v`.
    pub fn filled(devices: usize, v: u32) -> Self {
        Self {
            dev: vec![v; devices],
        }
    }

    /// Component of device `d`.
    pub fn device(&self, d: usize) -> u32 {
        self.dev[d]
    }

    /// Advances device `d`'s own component.
    pub fn tick(&mut self, d: usize) {
        self.dev[d] += 1;
    }

    /// Pointwise maximum.
    pub fn join(&mut self, other: &Clock) {
        for (a, b) in self.dev.iter_mut().zip(&other.dev) {
            *a = (*a).max(*b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_is_pointwise_max() {
        let mut a = Clock::new(3);
        let mut b = Clock::new(3);
        a.tick(0);
        b.tick(2);
        b.tick(2);
        a.join(&b);
        assert_eq!((a.device(0), a.device(1), a.device(2)), (1, 0, 2));
        assert_eq!(Clock::filled(2, 1).device(1), 1);
    }
}
