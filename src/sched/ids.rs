//! Hash maps keyed by ids (DMA ids, credit ids, semaphore slots): the scheduler and the
//! verifier's replay look one up per event, and SipHash, made for keys an attacker
//! picks, costs more than the rest of the lookup.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A hash map keyed by ids.
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// One multiply per word (Fibonacci hashing): distinct ids spread over the table.
#[derive(Clone, Copy, Debug, Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_every_id() {
        let mut m: IdMap<usize, usize> = IdMap::default();
        for i in 0..10_000 {
            m.insert(i * 64, i);
        }
        assert!((0..10_000).all(|i| m[&(i * 64)] == i));
    }
}
