//! The buffers of a plan's last run, kept for its next: a call through JAX runs the same
//! plan again and again, and fresh memory costs a page fault per 4 KiB touched and, for
//! the buffers a run reads before writing, a zeroing pass. A run takes its own buffers
//! from here and gives them back when it ends; buffers of runs of the same plan at the
//! same time are fresh, and only one set is kept.

use super::words::Words;
use std::sync::Mutex;

/// Buffers by slot of [`crate::ir::Memory`] (empty: none kept).
#[derive(Debug, Default)]
pub struct Spare(Mutex<Vec<Words>>);

impl Spare {
    /// The buffer kept for `slot`, if it holds `len` words.
    pub fn take(&self, slot: usize, len: usize) -> Option<Words> {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let b = kept.get_mut(slot).filter(|b| b.len() == len && len > 0)?;
        Some(std::mem::take(b))
    }

    /// Keeps `buf` for `slot` unless one is kept already.
    pub fn give(&self, slot: usize, buf: Words) {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() <= slot {
            kept.resize_with(slot + 1, Words::default);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_buffer_is_the_same_memory_for_its_slot_and_length() {
        let spare = Spare::default();
        let mut b = Words::zeroed(1 << 18).unwrap();
        b[5] = 9;
        let at = b.as_ptr();
        spare.give(2, b);
        assert_eq!(spare.bytes(), 1 << 20);
        assert!(spare.take(1, 1 << 18).is_none());
        assert!(spare.take(2, 1000).is_none());
        let again = spare.take(2, 1 << 18).unwrap();
        assert_eq!((again.as_ptr(), again[5]), (at, 9));
        assert!(spare.take(2, 1 << 18).is_none());
        assert_eq!(spare.bytes(), 0);
    }
}
