//! Float max and min of runs of words, branch-free and over several accumulators so
//! that they vectorize without a chain of dependent compares: each value's bits map to
//! an integer whose order is the float order with -0 below +0, and NaN is noted apart.
//! [`lanes::fmax`] and [`lanes::fmin`] are associative and commutative to the bit (NaN
//! if any is, else the greatest or least with -0 below +0), so any order of folding
//! gives the bits a fold in order gives.
//!
//! [`lanes::fmax`]: super::lanes::fmax
//! [`lanes::fmin`]: super::lanes::fmin

/// Accumulators a scan keeps: with the magnitudes' as many, eight AVX2 registers (four
/// AVX-512 ones). Twice as many no longer fit AVX2's sixteen with the key's temporaries:
/// they were stored and loaded every step.
const ACC: usize = 32;

/// Integer key of an f32's bits: their signed order is the float order, -0 below +0
/// (NaNs aside). Its own inverse.
#[inline(always)]
fn key(b: u32) -> i32 {
    (b ^ (((b as i32) >> 31) as u32 >> 1)) as i32
}

/// A max or min as it goes over a group's values.
#[derive(Clone, Copy)]
pub(super) struct Extreme {
    /// True for max, false for min.
    max: bool,
    /// The greatest (least) key so far.
    best: i32,
    /// The greatest magnitude bits so far: above +inf's when a NaN was seen.
    mag: u32,
}

impl Extreme {
    /// Nothing seen yet (the result so far is the identity, -inf for max, +inf for min).
    #[inline(always)]
    pub(super) fn new(max: bool) -> Self {
        let init = if max {
            f32::NEG_INFINITY
        } else {
            f32::INFINITY
        };
        Extreme {
            max,
            best: key(init.to_bits()),
            mag: 0,
        }
    }

    /// Takes in the words (or 16-bit elements as stored) `x`, each widened to its f32
    /// value by `w`.
    #[inline(always)]
    pub(super) fn scan<T: Copy + Into<u32>, W: Fn(u32) -> f32 + Copy>(&mut self, x: &[T], w: W) {
        if self.max {
            self.scan_with(x, w, i32::max);
        } else {
            self.scan_with(x, w, i32::min);
        }
    }

    #[inline(always)]
    fn scan_with<T, W, P>(&mut self, x: &[T], w: W, pick: P)
    where
        T: Copy + Into<u32>,
        W: Fn(u32) -> f32 + Copy,
        P: Fn(i32, i32) -> i32 + Copy,
    {
        let mut it = x.chunks_exact(ACC);
        if x.len() >= ACC {
            // Every accumulator starts at the result so far: picking is idempotent.
            let mut best = [self.best; ACC];
            let mut mag = [self.mag; ACC];
            for c in &mut it {
                for j in 0..ACC {
                    let b = w(c[j].into()).to_bits();
                    best[j] = pick(best[j], key(b));
                    mag[j] = mag[j].max(b & 0x7fff_ffff);
                }
            }
            self.best = best.into_iter().fold(self.best, pick);
            self.mag = mag.into_iter().fold(self.mag, u32::max);
        }
        for &v in it.remainder() {
            let b = w(v.into()).to_bits();
            self.best = pick(self.best, key(b));
            self.mag = self.mag.max(b & 0x7fff_ffff);
        }
    }

    /// The max (min) of the values seen, as [`super::lanes::fmax`] (`fmin`) folds give it.
    #[inline(always)]
    pub(super) fn value(&self) -> f32 {
        if self.mag > 0x7f80_0000 {
            f32::NAN
        } else {
            f32::from_bits(key(self.best as u32) as u32)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device_sim::cpu::lanes::{fmax, fmin};

    #[test]
    fn same_bits_as_a_fold_in_order() {
        let specials = [
            0.0f32,
            -0.0,
            1.0,
            -1.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            f32::from_bits(1),
            f32::from_bits(0x8000_0001),
            f32::MAX,
            f32::MIN,
        ];
        let mut s = 12345u32;
        let mut next = || {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            s
        };
        for len in [1usize, 2, 31, 32, 33, 63, 64, 65, 129, 1000] {
            for trial in 0..40 {
                // Every fourth trial has NaNs (either sign, quiet or not), infinities and
                // specials; the others finite values and specials.
                let wild = trial % 4 == 0;
                let mut x = Vec::with_capacity(len);
                while x.len() < len {
                    let b = match next() % 4 {
                        0 => specials[(next() % specials.len() as u32) as usize].to_bits(),
                        1 if wild && next() % 50 == 0 => 0x7f80_0001 | (next() & 0x807f_ffff),
                        _ => next(),
                    };
                    if wild || f32::from_bits(b).is_finite() {
                        x.push(b);
                    }
                }
                if x.is_empty() {
                    continue;
                }
                for max in [true, false] {
                    let f = if max { fmax } else { fmin };
                    let init = if max {
                        f32::NEG_INFINITY
                    } else {
                        f32::INFINITY
                    };
                    let want = x.iter().fold(init, |a, &b| f(a, f32::from_bits(b)));
                    // Split anywhere: a group's scan goes on across blocks.
                    let cut = (next() as usize) % (x.len() + 1);
                    let mut e = Extreme::new(max);
                    e.scan(&x[..cut], f32::from_bits);
                    e.scan(&x[cut..], f32::from_bits);
                    assert_eq!(e.value().to_bits(), want.to_bits(), "max {max}, {x:08x?}");
                }
            }
        }
    }
}
