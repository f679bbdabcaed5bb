//! Reads of memory nothing wrote: a kernel's scratch, its outputs and VMEM blocks hold
//! whatever was there before the kernel (on a TPU, the last kernel's data), so a read of
//! bytes no write reached first returns garbage, silently. The host's inputs are the only
//! memory written at entry. Whether the write that covers a read is *ordered* before it
//! is the race checker's question: here a write counts once the replay saw it, so a
//! read is reported when, in this run, no write to those bytes came before it at all.
//! An output some of which nothing wrote by the end of a run is reported too.

use super::side::RaceSide;
use crate::error::DeviceName;
use crate::ir::{AllocId, DataOp, Program, View, Written};
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

/// An output some of which no device wrote by the end of a run: it holds whatever the
/// memory held (NaN or the largest integer under tpusim, as in JAX's interpret mode;
/// the last kernel's data on a TPU).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnwrittenOutput {
    /// The output's allocation.
    pub alloc: String,
    /// The first device with bytes of it unwritten.
    #[serde(flatten)]
    pub device: DeviceName,
    /// Its first run of bytes `[lo, hi)` no device wrote.
    pub bytes: (u64, u64),
    /// Bytes unwritten over every device.
    pub total: u64,
    /// Devices with bytes of it unwritten.
    pub devices: usize,
}

impl UnwrittenOutput {
    /// A key that names the bug: the output.
    pub fn key(&self) -> String {
        format!("unwritten:{}", Program::unlabeled(&self.alloc))
    }
}

impl fmt::Display for UnwrittenOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let others = match self.devices {
            1 => String::new(),
            n => format!(" (and on {} more devices)", n - 1),
        };
        writeln!(
            f,
            "output not written: `{}` of {}, bytes {}..{}{others}, {} bytes in all, written by no device:",
            self.alloc, self.device, self.bytes.0, self.bytes.1, self.total
        )?;
        write!(
            f,
            "    the kernel returns whatever the memory held there (NaN for floats and the largest integer under \
             tpusim, as in JAX's interpret mode; the last kernel's data on a TPU): write every element of an output"
        )
    }
}

/// The outputs of `p` that `written` (a replay of a whole run, VMEM outputs still to
/// be copied out) leaves unwritten somewhere.
pub fn unwritten_outputs(p: &Program, written: &mut Written) -> Vec<UnwrittenOutput> {
    // The epilogue copies VMEM outputs out: what it copies is written where its source was.
    for op in &p.epilogue {
        if let DataOp::Copy { src, dst } = op {
            copy_written(written, src, dst);
        }
    }
    let size = |a: AllocId| p.layout.allocs[a].dtype.size() as u64;
    // A VMEM output is named as the kernel names it: its VMEM buffer's name.
    let name = |a: AllocId| {
        let vmem = p.epilogue.iter().find_map(|op| match op {
            DataOp::Copy { src, dst } if dst.alloc() == a => Some(src.alloc()),
            _ => None,
        });
        p.alloc_label(vmem.unwrap_or(a))
    };
    let mut out: Vec<UnwrittenOutput> = Vec::new();
    for &a in &p.outputs {
        for d in (0..p.devices).filter(|&d| p.holds(d, a)) {
            let whole = View::new(d, a, 0, p.layout.allocs[a].numel());
            let mut lo = 0;
            let mut gaps = Vec::new();
            while let Some((x, y)) = written.unwritten(&View::new(d, a, lo, whole.len() - lo)) {
                gaps.push((x, y));
                lo = y;
                if lo >= whole.len() {
                    break;
                }
            }
            let Some(&(x, y)) = gaps.first() else {
                continue;
            };
            let total: u64 = gaps.iter().map(|(x, y)| (y - x) as u64 * size(a)).sum();
            match out.iter_mut().find(|u| u.alloc == name(a)) {
                Some(u) => {
                    u.total += total;
                    u.devices += 1;
                }
                None => out.push(UnwrittenOutput {
                    alloc: name(a),
                    device: p.device_name(d),
                    bytes: (x as u64 * size(a), y as u64 * size(a)),
                    total,
                    devices: 1,
                }),
            }
        }
    }
    out
}

/// Marks the elements of `dst` written whose element of `src` (as long) is.
fn copy_written(written: &mut Written, src: &View, dst: &View) {
    let n = src.len().min(dst.len());
    let at =
        |v: &View, lo: usize, len: usize| View::new(v.device(), v.alloc(), v.offset() + lo, len);
    let mut lo = 0;
    while lo < n {
        match written.unwritten(&at(src, lo, n - lo)) {
            None => {
                written.write(&at(dst, lo, n - lo));
                return;
            }
            Some((a, b)) => {
                let (a, b) = (a - src.offset(), b - src.offset());
                if a > lo {
                    written.write(&at(dst, lo, a - lo));
                }
                lo = b;
            }
        }
    }
}
