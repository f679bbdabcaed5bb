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
