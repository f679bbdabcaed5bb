//! A fused region ([`crate::device_sim::fuse`]) lowered as one dispatch of its generated
//! shader ([`super::region_shader`]), or, where that shader cannot bind it (a buffer
//! range past a binding, more buffers than a stage binds, 16-bit outputs whose words
//! do not line up), as its ops one by one, which is what it stands for.

use super::commands::{Bound, BufId, PipelineKey};
use super::lower_ops::PerOp;
use super::region_shader::{by_words, intern, kernel, Bindings};
use crate::device_sim::fuse::Region;
use crate::error::Result;
use crate::ir::{DataOp, View};

/// Most storage bindings a region's shader declares.
pub const MAX_BINDINGS: usize = 8;

impl PerOp<'_> {
    /// Runs region `r` (standing for `ops`' ops `r.ops`).
    pub(super) fn region(&mut self, r: &Region, ops: &[DataOp]) -> Result<()> {
        match self.region_dispatch(r) {
            Some(()) => Ok(()),
            None => {
                for &i in &r.ops {
                    self.scratch_used = 0;
                    self.op(&ops[i])?;
                }
                Ok(())
            }
        }
    }

    /// Records `r` as one dispatch; `None` (nothing recorded) where it cannot be one.
    fn region_dispatch(&mut self, r: &Region) -> Option<()> {
        if r.n == 0 || r.n > u32::MAX as usize / 2 {
            return None;
        }
        let width = |v: &View| self.memory.allocs[v.alloc()].dtype.storage() as u64;
        // Every view, inputs then outputs, with the buffer holding it.
        let views: Vec<View> = r.reads().chain(r.writes()).collect();
        let mut bufs: Vec<(BufId, u64, u64)> = Vec::new();
        let mut slot = Vec::with_capacity(views.len());
        for v in &views {
            let (buf, lo) = (self.buf(v), self.off(v));
            let hi = lo + v.len() as u64 * width(v);
            match bufs.iter().position(|b| b.0 == buf) {
                Some(k) => {
                    bufs[k].1 = bufs[k].1.min(lo);
                    bufs[k].2 = bufs[k].2.max(hi);
                    slot.push(k);
                }
                None => {
                    slot.push(bufs.len());
                    bufs.push((buf, lo, hi));
                }
            }
        }
        let most = MAX_BINDINGS.min(self.limits.storage_per_stage as usize);
        if bufs.len() > most {
            return None;
        }
        let align = self.limits.offset_align.max(4);
        let mut bound = Vec::with_capacity(bufs.len());
        for &(buf, lo, hi) in &bufs {
            let offset = lo / align * align;
            let size = hi.next_multiple_of(4) - offset;
            if size > self.limits.max_binding {
                return None;
            }
            bound.push(Bound { buf, offset, size });
        }
        // Element offsets in the bindings (16-bit ones in halves: a binding starts on a
        // word, so an offset's parity is its view's).
        let elem = |k: usize, v: &View| (self.off(v) - bound[slot[k]].offset) / width(v);
        let offsets: Vec<u64> = views.iter().enumerate().map(|(k, v)| elem(k, v)).collect();
        let nin = r.inputs.len();
        let mut par = None;
        if by_words(r) {
            let halves: Vec<usize> = (0..r.outputs.len())
                .filter(|&k| r.regs[r.outputs[k].reg].dtype.storage() == 2)
                .collect();
            for &k in &halves {
                if r.outputs[k].view.len() != r.n {
                    return None; // one element of a word another invocation writes
                }
                let p = offsets[nin + k] % 2;
                if *par.get_or_insert(p) != p {
                    return None;
                }
            }
            // Two outputs in one buffer must not share a word.
            let words = |k: usize| {
                let at = offsets[nin + k];
                (slot[nin + k], at / 2, (at + r.n as u64 - 1) / 2)
            };
            for (x, &a) in halves.iter().enumerate() {
                for &b in &halves[x + 1..] {
                    let (sa, a0, a1) = words(a);
                    let (sb, b0, b1) = words(b);
                    if sa == sb && a0 <= b1 && b0 <= a1 {
                        return None;
                    }
                }
            }
        }
        if offsets.iter().any(|&o| o + r.n as u64 > u32::MAX as u64) {
            return None;
        }
        let bind = Bindings {
            count: bufs.len(),
            inputs: slot[..nin].to_vec(),
            outputs: slot[nin..].to_vec(),
        };
        let id = intern(kernel(r, &bind));
        let key = PipelineKey::Region {
            id,
            bindings: bufs.len() as u8,
        };
        let par = par.unwrap_or(0);
        let mut block = vec![r.n as u32, par as u32];
        block.extend(offsets.iter().map(|&o| o as u32));
        // Whole vec4s, as the shader's block declares them.
        block.resize(block.len().next_multiple_of(4), 0);
        let items = if by_words(r) {
            (par + r.n as u64).div_ceil(2)
        } else {
            r.n as u64
        };
        self.dispatch_1d(key, bound, block, items);
        Some(())
    }
}
