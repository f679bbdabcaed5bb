//! Data ops: the units of data work a schedule lists and the executors run.

use super::layout::Allocation;
use super::view::View;
use crate::array::DType;

/// Reduction operator of an accumulate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// `dst += src`
    Sum,
    /// `dst = max(dst, src)`
    Max,
    /// `dst = min(dst, src)`
    Min,
}

impl ReduceOp {
    /// Parses `sum|max|min`.
    pub fn parse(s: &str) -> crate::Result<Self> {
        match s {
            "sum" => Ok(ReduceOp::Sum),
            "max" => Ok(ReduceOp::Max),
            "min" => Ok(ReduceOp::Min),
            _ => Err(crate::Error::bad_input(format!(
                "unknown reduction `{s}` (expected sum, max or min)"
            ))),
        }
    }
}

/// One unit of data work. The scheduler emits these in a valid order; executors run them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DataOp {
    /// Copy `src` into `dst` (a DMA, or a VMEM assignment). Same length.
    Copy {
        /// Source.
        src: View,
        /// Destination.
        dst: View,
    },
    /// Set every element of `dst` to the 32-bit pattern `bits`.
    Fill {
        /// Destination.
        dst: View,
        /// Element bit pattern.
        bits: u32,
    },
    /// `dst = op(dst, src)` element-wise.
    Accumulate {
        /// Destination (read and written).
        dst: View,
        /// Source.
        src: View,
        /// Operator.
        op: ReduceOp,
        /// Element type.
        dtype: DType,
    },
}

impl DataOp {
    /// Width in bytes of the elements the op moves in the executors' memory: its
    /// destination's dtype, or the narrower side of a copy (the staging area holds any dtype in 4-byte slots).
    /// `allocs` is [`crate::ir::Schedule::memory`].
    pub fn elem_bytes(&self, allocs: &[Allocation]) -> usize {
        let width = |v: &View| allocs[v.alloc()].dtype.storage();
        match self {
            DataOp::Copy { src, dst } => width(src).min(width(dst)),
            DataOp::Fill { dst, .. } | DataOp::Accumulate { dst, .. } => width(dst),
        }
    }

    /// Bytes the op writes (see [`DataOp::elem_bytes`]).
    pub fn bytes(&self, allocs: &[Allocation]) -> u64 {
        let (_, dst) = self.reads_writes();
        dst.bytes(self.elem_bytes(allocs))
    }

    /// The same op on the views `f` gives for its own (the one place a program's views
    /// are moved to other devices or allocations).
    pub fn map_views(&self, f: impl Fn(View) -> View) -> DataOp {
        match *self {
            DataOp::Copy { src, dst } => DataOp::Copy {
                src: f(src),
                dst: f(dst),
            },
            DataOp::Fill { dst, bits } => DataOp::Fill { dst: f(dst), bits },
            DataOp::Accumulate {
                dst,
                src,
                op,
                dtype,
            } => DataOp::Accumulate {
                dst: f(dst),
                src: f(src),
                op,
                dtype,
            },
        }
    }

    /// What the op reads (besides its destination) and what it writes: the one
    /// definition of a data op's accesses.
    pub fn reads_writes(&self) -> (Option<View>, View) {
        match *self {
            DataOp::Copy { src, dst } | DataOp::Accumulate { src, dst, .. } => (Some(src), dst),
            DataOp::Fill { dst, .. } => (None, dst),
        }
    }
}
