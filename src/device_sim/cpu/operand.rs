//! The elements of a dot's operand as the executor holds them: one a word, or 16-bit
//! floats as stored; read by the `gemm` path (widened) and the AMX tiles (as bf16).

use super::lanes;
use crate::array::DType;

/// The elements of a dot's operand: words, or 16-bit floats as stored.
#[derive(Clone, Copy)]
pub enum Src<'a> {
    /// One element a word ([`DType::bits_of`]'s form).
    Words(&'a [u32]),
    /// 16-bit float elements as stored (bf16 or f16; two bytes each).
    Halves(&'a [u16]),
}

impl Src<'_> {
    /// Elements `from..to` of float dtype `t` widened to f32 values into `out`.
    pub(super) fn widen(self, t: DType, from: usize, to: usize, out: &mut [u32]) {
        match self {
            Src::Words(w) => lanes::widen_all(t, &w[from..to], out),
            Src::Halves(h) => lanes::widen_all_halves(t, &h[from..to], out),
        }
    }

    /// How many elements it holds.
    pub(super) fn len(self) -> usize {
        match self {
            Src::Words(w) => w.len(),
            Src::Halves(h) => h.len(),
        }
    }
}
