//! Data ops: the units of data work a schedule lists and the executors run.

use super::compute::{Compute, Work};
use super::layout::Allocation;
use super::view::View;
use crate::array::DType;
use std::sync::Arc;

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
#[derive(Clone, Debug, PartialEq)]
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
    /// A compute op on VMEM values (shared: schedules and replicated programs copy data
    /// ops, and a compute op carries shapes).
    Compute(Arc<Compute>),
}

/// The views an op reads or writes: one, or a compute op's runs.
#[derive(Clone, Debug)]
pub enum Views<'a> {
    /// At most one view.
    One(Option<View>),
    /// Several.
    Many(std::slice::Iter<'a, View>),
}

impl Iterator for Views<'_> {
    type Item = View;
    #[inline]
    fn next(&mut self) -> Option<View> {
        match self {
            Views::One(v) => v.take(),
            Views::Many(i) => i.next().copied(),
        }
    }
}

impl DataOp {
    /// What the op reads (an accumulate also reads its destination, which it writes):
    /// the one definition of a data op's reads.
    pub fn reads(&self) -> Views<'_> {
        match self {
            DataOp::Copy { src, .. } | DataOp::Accumulate { src, .. } => Views::One(Some(*src)),
            DataOp::Fill { .. } => Views::One(None),
            DataOp::Compute(c) => Views::Many(c.reads().iter()),
        }
    }

    /// What the op writes.
    pub fn writes(&self) -> Views<'_> {
        match self {
            DataOp::Copy { dst, .. }
            | DataOp::Fill { dst, .. }
            | DataOp::Accumulate { dst, .. } => Views::One(Some(*dst)),
            DataOp::Compute(c) => Views::Many(c.writes().iter()),
        }
    }

    /// The destination's whole view (a compute op's destination operand).
    pub fn dst(&self) -> View {
        match self {
            DataOp::Copy { dst, .. }
            | DataOp::Fill { dst, .. }
            | DataOp::Accumulate { dst, .. } => *dst,
            DataOp::Compute(c) => c.dst.view,
        }
    }

    /// Width in bytes of the elements the op moves in the executors' memory: its
    /// destination's dtype, or the narrower side of a copy (the staging area holds any
    /// dtype in 4-byte slots). `allocs` is [`crate::ir::Schedule::memory`]'s.
    pub fn elem_bytes(&self, allocs: &[Allocation]) -> usize {
        let width = |v: &View| allocs[v.alloc()].dtype.storage();
        match self {
            DataOp::Copy { src, dst } => width(src).min(width(dst)),
            DataOp::Fill { dst, .. } | DataOp::Accumulate { dst, .. } => width(dst),
            DataOp::Compute(c) => c.dst.dtype.storage(),
        }
    }

    /// Bytes the op writes (see [`DataOp::elem_bytes`]).
    pub fn bytes(&self, allocs: &[Allocation]) -> u64 {
        let e = self.elem_bytes(allocs);
        self.writes().map(|v| v.bytes(e)).sum()
    }

    /// What the op costs: elements read and written, vector ops, matrix multiply-adds.
    pub fn work(&self) -> Work {
        let n = |v: &View| v.len() as u64;
        match self {
            DataOp::Copy { dst, .. } => Work {
                read_elems: n(dst),
                write_elems: n(dst),
                vector_ops: n(dst),
                macs: 0,
            },
            DataOp::Fill { dst, .. } => Work {
                read_elems: 0,
                write_elems: n(dst),
                vector_ops: n(dst),
                macs: 0,
            },
            DataOp::Accumulate { dst, .. } => Work {
                read_elems: 2 * n(dst),
                write_elems: n(dst),
                vector_ops: n(dst),
                macs: 0,
            },
            DataOp::Compute(c) => c.work(),
        }
    }

    /// The same op on the views `f` gives for its own (the one place a program's views
    /// move to other devices, groups of a mesh, or allocations, invocations of a sequence).
    pub fn map_views(&self, f: impl Fn(View) -> View) -> DataOp {
        match self {
            DataOp::Copy { src, dst } => DataOp::Copy {
                src: f(*src),
                dst: f(*dst),
            },
            DataOp::Fill { dst, bits } => DataOp::Fill {
                dst: f(*dst),
                bits: *bits,
            },
            DataOp::Accumulate {
                dst,
                src,
                op,
                dtype,
            } => DataOp::Accumulate {
                dst: f(*dst),
                src: f(*src),
                op: *op,
                dtype: *dtype,
            },
            DataOp::Compute(c) => DataOp::Compute(Arc::new(c.map_views(f))),
        }
    }

    /// The same op with every view moved to device `device(d)`.
    pub fn on_devices(&self, device: impl Fn(usize) -> usize) -> DataOp {
        self.map_views(|v| v.on_device(device(v.device())))
    }
}
