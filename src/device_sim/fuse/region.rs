//! A fused region: elementwise data ops of one device over the same `n` elements, as a
//! small register program that an executor evaluates block by block (a block of every
//! register at a time, so its values stay in cache between the ops), reading its inputs
//! and writing its live outputs once.

use crate::array::DType;
use crate::ir::{Binary, Comparison, Reduction, Unary, View};

/// How element `i` of a region reads an input view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Element `i` (the view holds the region's `n` elements).
    Full,
    /// Element 0, for every `i` (a scalar).
    Scalar,
    /// `lax.broadcast_in_dim` of the view (an array of `shape`) into the region's
    /// `into` shape: source dimension `k` is destination dimension `dims[k]`.
    Broadcast {
        /// The view's shape.
        shape: Vec<usize>,
        /// Destination dimension of each source dimension.
        dims: Vec<usize>,
        /// The region's shape (its `n` elements, row-major).
        into: Vec<usize>,
    },
}

impl Pattern {
    /// Per destination dimension of `into`, the stride of the source element (0 where
    /// the source does not vary along it): element `idx` of the destination reads
    /// source element `sum(idx[d] * strides[d])`.
    pub fn strides(shape: &[usize], dims: &[usize], into: &[usize]) -> Vec<usize> {
        let mut src = vec![1usize; shape.len()];
        for k in (0..shape.len().saturating_sub(1)).rev() {
            src[k] = src[k + 1] * shape[k + 1];
        }
        let mut out = vec![0usize; into.len()];
        for (k, &d) in dims.iter().enumerate() {
            if shape[k] != 1 {
                out[d] = src[k];
            }
        }
        out
    }
}

/// One input of a region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// Where its elements are.
    pub view: View,
    /// Their dtype (the allocation's).
    pub dtype: DType,
    /// How element `i` of the region reads it.
    pub pattern: Pattern,
}

/// An elementwise operation of a region, on the values of its argument registers.
#[derive(Clone, Debug, PartialEq)]
pub enum Instr {
    /// Input `k`'s elements as stored (16-bit floats still 16-bit: [`Instr::Widen`]).
    Load(usize),
    /// One element's stored bits of `dtype`, in every lane.
    Const {
        /// The bits ([`DType::bits_of`]'s form).
        bits: u32,
        /// Their dtype.
        dtype: DType,
    },
    /// A 16-bit float register as stored, widened to its f32 values.
    Widen(usize),
    /// [`crate::ir::ComputeKind::Unary`] in `dtype`.
    Unary(Unary, DType, usize),
    /// [`crate::ir::ComputeKind::Binary`] in `dtype`.
    Binary(Binary, DType, usize, usize),
    /// [`crate::ir::ComputeKind::Compare`] of two values of `dtype` (bools out).
    Compare(Comparison, DType, usize, usize),
    /// [`crate::ir::ComputeKind::Select`]: predicate, then on true, on false.
    Select(usize, usize, usize),
    /// [`crate::ir::ComputeKind::Convert`] from the first dtype to the second.
    Convert(DType, DType, usize),
}

impl Instr {
    /// The registers it reads.
    pub fn args(&self) -> Vec<usize> {
        match *self {
            Instr::Load(_) | Instr::Const { .. } => vec![],
            Instr::Widen(a) | Instr::Unary(_, _, a) | Instr::Convert(_, _, a) => vec![a],
            Instr::Binary(_, _, a, b) | Instr::Compare(_, _, a, b) => vec![a, b],
            Instr::Select(p, t, f) => vec![p, t, f],
        }
    }
}

/// What a register holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reg {
    /// Its dtype.
    pub dtype: DType,
    /// True when it holds 16-bit floats as stored (a load or constant), false when it
    /// holds values: f32 for floats (16-bit ones rounded to their dtype), i32 for
    /// integers and bools (8-bit ones wrapped to their width).
    pub raw: bool,
    /// True when every element is the same (constants, scalars, ops of them only):
    /// computed once per run of the region, not per block.
    pub uniform: bool,
}

/// One write of a region: a register into a view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    /// The register written.
    pub reg: usize,
    /// Where: `n` elements (a whole block's worth each block), or one element of a
    /// uniform register.
    pub view: View,
}

/// A reduction a region folds from one of its registers as its blocks go (a reduction
/// over trailing dimensions that read the region's output: [`super::Joins::reduces`]):
/// the register's elements in groups of `k` adjacent ones, group `g` folded into
/// element `g` of `dst`, in the order the reduction alone folds them (bit for bit).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowReduce {
    /// The register folded (a float dtype's).
    pub reg: usize,
    /// How.
    pub op: Reduction,
    /// Elements per group (at least one).
    pub k: usize,
    /// Where the results go: `n / k` elements.
    pub dst: View,
    /// Their dtype (a float one; results rounded once to it).
    pub dtype: DType,
}

/// A fused region: `instrs[i]` computes register `i` (of `regs[i]`) over `n` elements;
/// then every output is written. Uniform registers are computed once, the others a
/// block of elements at a time; `slots[i]` is the buffer register `i` lives in (slots
/// are shared by registers whose lives do not overlap).
#[derive(Clone, Debug, PartialEq)]
pub struct Region {
    /// Elements per register.
    pub n: usize,
    /// The device every view is on.
    pub device: usize,
    /// Inputs, read by [`Instr::Load`].
    pub inputs: Vec<Input>,
    /// The program.
    pub instrs: Vec<Instr>,
    /// What each register holds.
    pub regs: Vec<Reg>,
    /// Buffer of each register.
    pub slots: Vec<usize>,
    /// Number of buffers.
    pub nslots: usize,
    /// Writes, after the last instruction of each block.
    pub outputs: Vec<Output>,
    /// Reductions folded from its registers (the CPU executor's only; all of one `k`).
    pub reduces: Vec<RowReduce>,
    /// The schedule's ops it stands for, in order.
    pub ops: Vec<usize>,
}

impl Region {
    /// Views it reads (its inputs').
    pub fn reads(&self) -> impl Iterator<Item = View> + '_ {
        self.inputs.iter().map(|i| i.view)
    }

    /// Views it writes.
    pub fn writes(&self) -> impl Iterator<Item = View> + '_ {
        self.outputs
            .iter()
            .map(|o| o.view)
            .chain(self.reduces.iter().map(|q| q.dst))
    }

    /// True when it computes nothing: its outputs are loads and constants (copies and
    /// fills).
    pub fn copies_only(&self) -> bool {
        self.instrs
            .iter()
            .all(|i| matches!(i, Instr::Load(_) | Instr::Const { .. }))
    }
}
