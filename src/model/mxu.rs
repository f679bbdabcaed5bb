//! How long a dot takes on the matrix units, by its tile shape.
//!
//! An MXU holds a `D x D` tile of the right operand (the weights) and streams the left
//! operand's rows through it, one row per cycle (scaling-book part 2: one bf16[8,128] @
//! [128,128] every 8 cycles). A dot of `M x K` by `K x N` therefore runs as
//! `ceil(K/D) * ceil(N/D)` tile passes of `ceil8(M)` rows each (rows pad to the 8
//! sublanes of a vreg, K and N to the array's side). Loading a weight tile takes `D`
//! cycles (this model's estimate: one row per cycle); it overlaps the previous pass, so
//! a pass lasts `max(ceil8(M), D)` cycles: a dot of few rows runs far below the peak (8
//! rows on a 128-wide MXU: 1/16 of it), one of at least `D` rows with K and N multiples
//! of `D` at the peak. The passes are shared by the device's MXUs.

use super::CostModel;
use crate::array::DType;
use crate::ir::{Compute, ComputeKind};

/// A dot's shape as the MXU sees it: batch, rows (M), contracted (K), columns (N).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DotShape {
    /// Product of the batch dimensions.
    pub batch: u64,
    /// Rows of the left operand (its free dimensions).
    pub m: u64,
    /// The contracted size.
    pub k: u64,
    /// Columns of the right operand (its free dimensions).
    pub n: u64,
}

impl DotShape {
    /// The shape of compute op `c`, if it is a dot.
    pub fn of(c: &Compute) -> Option<Self> {
        let ComputeKind::Dot(d) = &c.kind else {
            return None;
        };
        let (l, r) = (&c.srcs[0].shape, &c.srcs[1].shape);
        let prod = |s: &[usize], dims: &mut dyn Iterator<Item = usize>| -> u64 {
            dims.map(|i| s[i] as u64).product()
        };
        let batch = prod(l, &mut d.lhs_batch.iter().copied());
        let k = prod(l, &mut d.lhs_contract.iter().copied());
        let free = |s: &[usize], a: &[usize], b: &[usize]| -> u64 {
            (0..s.len())
                .filter(|i| !a.contains(i) && !b.contains(i))
                .map(|i| s[i] as u64)
                .product()
        };
        Some(DotShape {
            batch,
            m: free(l, &d.lhs_batch, &d.lhs_contract),
            k,
            n: free(r, &d.rhs_batch, &d.rhs_contract),
        })
    }

    /// Multiply-adds.
    pub fn macs(&self) -> u64 {
        self.batch * self.m * self.k * self.n
    }
}

impl CostModel {
    /// Rows per second one MXU streams for `dtype` operands: the peak rate
    /// ([`CostModel::mxu_rate`]) spread over the MXUs' `D x D` multiply-adds per row.
    fn mxu_rows_per_second(&self, dtype: DType) -> f64 {
        let d = self.mxu_dim.max(1) as f64;
        self.mxu_rate(dtype) / (self.mxus.max(1) as f64 * d * d)
    }

    /// Seconds the device's MXUs take for dot `s` on `dtype` operands (see the module).
    pub fn dot_seconds(&self, s: DotShape, dtype: DType) -> f64 {
        let d = self.mxu_dim.max(1) as u64;
        let rows = s.m.max(1).next_multiple_of(8).max(d);
        let passes = s.batch * s.k.div_ceil(d) * s.n.div_ceil(d);
        let cycles = passes as f64 * rows as f64 / self.mxus.max(1) as f64;
        cycles / self.mxu_rows_per_second(dtype)
    }

    /// The share of the MXU peak dot `s` reaches (1 at full tiles).
    pub fn dot_efficiency(&self, s: DotShape, dtype: DType) -> f64 {
        let ideal = s.macs() as f64 / self.mxu_rate(dtype);
        ideal / self.dot_seconds(s, dtype).max(f64::MIN_POSITIVE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(m: u64, k: u64, n: u64) -> DotShape {
        DotShape { batch: 1, m, k, n }
    }

    #[test]
    fn full_tiles_run_at_the_peak_and_few_rows_do_not() {
        let m = CostModel::preset("v5e").unwrap();
        // 1024 x 1024 x 1024 bf16: the peak, macs / rate.
        let s = shape(1024, 1024, 1024);
        let peak = s.macs() as f64 / m.mxu_rate(DType::BF16);
        assert!((m.dot_seconds(s, DType::BF16) - peak).abs() < 1e-9 * peak);
        // 8 rows against a 128-wide array: a pass lasts the 128-cycle weight load.
        assert!((m.dot_efficiency(shape(8, 1024, 1024), DType::BF16) - 8.0 / 128.0).abs() < 1e-12);
        // K = 128 on v6e's 256-wide MXU fills half the array.
        let v6 = CostModel::preset("v6e").unwrap();
        assert!((v6.dot_efficiency(shape(1024, 128, 1024), DType::BF16) - 0.5).abs() < 1e-12);
        assert!((m.dot_efficiency(shape(1024, 128, 1024), DType::BF16) - 1.0).abs() < 1e-12);
    }
}
