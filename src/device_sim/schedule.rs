//! The scheduler's output: one linear order of data ops, valid for every executor.

use super::program::DataOp;

/// A linear schedule of data ops (prologue, the grid's work, epilogue).
#[derive(Clone, Debug)]
pub struct Schedule {
    /// Data ops in execution order.
    pub ops: Vec<DataOp>,
    /// The name of the policy that produced it.
    pub policy: String,
    /// Number of scheduler steps taken (ops run plus DMAs completed).
    pub steps: usize,
}

impl Schedule {
    /// Bytes the schedule moves per run, in plain-copy equivalents: a copy of B bytes
    /// reads and writes B (counts B), an accumulate reads 2B and writes B (1.5B), a fill
    /// writes B (0.5B). Dividing by time gives a rate comparable to copy bandwidth.
    pub fn copy_equivalent_bytes(&self) -> f64 {
        self.ops
            .iter()
            .map(|o| match o {
                DataOp::Copy { src, .. } => src.bytes() as f64,
                DataOp::Accumulate { dst, .. } => 1.5 * dst.bytes() as f64,
                DataOp::Fill { dst, .. } => 0.5 * dst.bytes() as f64,
            })
            .sum()
    }

    /// Bytes moved by copies (DMAs and VMEM copies) in this schedule.
    pub fn bytes_copied(&self) -> u64 {
        self.ops
            .iter()
            .map(|o| match o {
                DataOp::Copy { src, .. } => src.bytes(),
                _ => 0,
            })
            .sum()
    }
}
