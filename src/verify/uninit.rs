//! Reads of memory nothing wrote: a kernel's scratch, its outputs and VMEM blocks hold
//! whatever was there before the kernel (on a TPU, the last kernel's data), so a read of
//! bytes no write reached first returns garbage, silently. The host's inputs are the only
//! memory written at entry. Whether the write that covers a read is *ordered* before it
//! is the race checker's question: here a write counts once the replay saw it, so a
//! read is reported when, in this run, no write to those bytes came before it at all.

use super::side::RaceSide;
use crate::error::DeviceName;
use crate::ir::Program;
use serde::Serialize;
use std::fmt;

/// A read of bytes no write reached before it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UninitRead {
    /// Allocation name.
    pub alloc: String,
    /// Device whose memory it is.
    #[serde(flatten)]
    pub device: DeviceName,
    /// The first run of bytes `[lo, hi)` of the read that nothing wrote.
    pub bytes: (u64, u64),
    /// The read.
    pub read: RaceSide,
}

impl UninitRead {
    /// A key that names the bug: the read's kernel line and the allocation.
    pub fn key(&self) -> String {
        let at = self
            .read
            .site
            .as_ref()
            .map_or_else(|| "epilogue".into(), |s| format!("{}@{}", s.op, s.location));
        format!("uninit:{}:{at}", Program::unlabeled(&self.alloc))
    }
}

impl fmt::Display for UninitRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "read of uninitialized memory: `{}` of {}, bytes {}..{}, read before anything wrote them:",
            self.alloc, self.device, self.bytes.0, self.bytes.1
        )?;
        writeln!(f, "    {}", self.read)?;
        write!(
            f,
            "    a kernel's scratch, outputs and VMEM blocks start with whatever the memory held before (on a TPU, \
             the last kernel's data): write these bytes before reading them"
        )
    }
}
