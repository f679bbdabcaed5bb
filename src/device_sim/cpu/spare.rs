//! The buffers of a plan's last run, kept for its next: a call through JAX runs the same
//! plan again and again, and fresh memory costs a page fault per 4 KiB touched and, for
//! the buffers a run reads before writing, a zeroing pass. A run takes its own buffers
//! from here and gives them back when it ends; buffers of runs of the same plan at the
//! same time are fresh, and only one set is kept.

use std::sync::Mutex;

/// Buffers by slot of [`crate::ir::Memory`] (empty: none kept).
#[derive(Debug, Default)]
pub struct Spare(Mutex<Vec<Vec<u32>>>);

impl Spare {
    /// The buffer kept for `slot`, if it holds `len` words.
    pub fn take(&self, slot: usize, len: usize) -> Option<Vec<u32>> {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let b = kept.get_mut(slot).filter(|b| b.len() == len && len > 0)?;
        Some(std::mem::take(b))
    }

    /// Keeps `buf` for `slot` unless one is kept already.
    pub fn give(&self, slot: usize, buf: Vec<u32>) {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() <= slot {
            kept.resize_with(slot + 1, Vec::new);
        }
        if kept[slot].is_empty() {
            kept[slot] = buf;
        }
    }

    /// Bytes kept.
    pub fn bytes(&self) -> u64 {
        let kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        kept.iter().map(|b| b.len() as u64 * 4).sum()
    }
}

impl Clone for Spare {
    /// A clone keeps nothing: buffers belong to one plan's runs.
    fn clone(&self) -> Self {
        Spare::default()
    }
}
