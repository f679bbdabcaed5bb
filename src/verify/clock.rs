//! Vector clocks for the happens-before checker: one counter per device, and one bit
//! per DMA (a DMA is its own agent that ticks exactly once, when it starts).

/// A vector clock over devices and DMAs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Clock {
    dev: Vec<u32>,
    dmas: Vec<u64>,
}

impl Clock {
    /// The zero clock for `devices` devices and `dmas` DMAs.
    pub fn new(devices: usize, dmas: usize) -> Self {
        Self {
            dev: vec![0; devices],
            dmas: vec![0; dmas.div_ceil(64)],
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

    /// Marks DMA `k` as known (its start and accesses happened before this clock).
    pub fn set_dma(&mut self, k: usize) {
        self.dmas[k / 64] |= 1 << (k % 64);
    }

    /// True when DMA `k` happened before this clock.
    pub fn has_dma(&self, k: usize) -> bool {
        self.dmas[k / 64] & (1 << (k % 64)) != 0
    }

    /// Pointwise maximum.
    pub fn join(&mut self, other: &Clock) {
        for (a, b) in self.dev.iter_mut().zip(&other.dev) {
            *a = (*a).max(*b);
        }
        for (a, b) in self.dmas.iter_mut().zip(&other.dmas) {
            *a |= *b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_is_pointwise_max() {
        let mut a = Clock::new(3, 70);
        let mut b = Clock::new(3, 70);
        a.tick(0);
        b.tick(2);
        b.tick(2);
        b.set_dma(65);
        a.join(&b);
        assert_eq!((a.device(0), a.device(1), a.device(2)), (1, 0, 2));
        assert!(a.has_dma(65) && !a.has_dma(1));
    }
}
