//! Where a trace's values live: one VMEM allocation per dtype, numbered after the
//! kernel's own, with first-fit runs handed out within a grid point and given back
//! when a value is dropped; the most each ever held is its size. What the VMEM check
//! counts is another figure: the most bytes live at once over every dtype (a loop's
//! temporaries, given back each iteration, count once), where a value loaded from a
//! ref counts nothing: on a TPU it is the ref's own bytes, which Mosaic streams into
//! vector registers as the ops that use it run (the executor still copies it).

use crate::array::DType;
use crate::ir::{AllocId, FirstFit};
use std::collections::HashSet;

/// Elements a value's run is rounded up to (256 bytes of f32: aligned GPU bindings).
const ALIGN: usize = 64;

/// The temporaries of one dtype: an allocation of the kernel (its id assigned at the
/// first value of that dtype), first-fit runs of it within a grid point, and the most
/// it ever held.
#[derive(Debug)]
struct Pool {
    dtype: DType,
    alloc: AllocId,
    runs: FirstFit,
}

/// The value temporaries of a trace: one allocation per dtype, after the kernel's own.
#[derive(Debug, Default)]
pub(crate) struct Temps {
    first: AllocId,
    pools: Vec<Pool>,
    /// Runs of loaded values (allocation, offset): not counted as live.
    loaded: HashSet<(AllocId, usize)>,
    /// Bytes of values live now, as a TPU holds them.
    live: u64,
    /// The most bytes ever live at once.
    peak_live: u64,
}

impl Temps {
    /// Temporaries numbered from allocation `first`.
    pub(crate) fn new(first: AllocId) -> Self {
        Self {
            first,
            ..Self::default()
        }
    }

    /// The allocation of the first dtype's temporaries.
    pub(crate) fn first(&self) -> AllocId {
        self.first
    }

    /// Takes in the temporaries of a trace of other devices of the same kernel: each
    /// dtype's allocation holds the larger of the two, and the peak of live values is
    /// the larger. False, nothing changed, where `other` met the dtypes in another order
    /// (its values' allocations are numbered otherwise).
    pub(crate) fn absorb(&mut self, other: Temps) -> bool {
        let same = self.first == other.first
            && self
                .pools
                .iter()
                .zip(&other.pools)
                .all(|(a, b)| a.dtype == b.dtype);
        if !same {
            return false;
        }
        for (k, p) in other.pools.into_iter().enumerate() {
            match self.pools.get_mut(k) {
                Some(mine) => mine.runs.at_least(p.runs.peak()),
                None => self.pools.push(p),
            }
        }
        self.peak_live = self.peak_live.max(other.peak_live);
        true
    }

    /// A run of `len` elements of `dtype` (allocation, offset); `loaded`: it holds a
    /// value loaded from a ref, which takes no VMEM of its own on a TPU.
    pub(crate) fn take(&mut self, dtype: DType, len: usize, loaded: bool) -> (AllocId, usize) {
        let k = match self.pools.iter().position(|p| p.dtype == dtype) {
            Some(k) => k,
            None => {
                self.pools.push(Pool {
                    dtype,
                    alloc: self.first + self.pools.len(),
                    runs: FirstFit::default(),
                });
                self.pools.len() - 1
            }
        };
        let p = &mut self.pools[k];
        let run = len.max(1).next_multiple_of(ALIGN);
        let at = (p.alloc, p.runs.alloc(run));
        if loaded {
            self.loaded.insert(at);
        } else {
            self.live += (run * dtype.size()) as u64;
            self.peak_live = self.peak_live.max(self.live);
        }
        at
    }

    pub(crate) fn give_back(&mut self, alloc: AllocId, offset: usize) {
        if let Some(p) = self.pools.iter_mut().find(|p| p.alloc == alloc) {
            if let Some(run) = p.runs.free(offset) {
                if !self.loaded.remove(&(alloc, offset)) {
                    self.live -= (run * p.dtype.size()) as u64;
                }
            }
        }
    }

    /// Forgets every live value (a new grid point starts).
    pub(crate) fn reset(&mut self) {
        for p in &mut self.pools {
            p.runs.clear();
        }
        self.loaded.clear();
        self.live = 0;
    }

    /// The most bytes of values live at once (what the chip's VMEM must hold of them).
    pub(crate) fn peak_live_bytes(&self) -> u64 {
        self.peak_live
    }

    /// The allocations the temporaries need: (dtype, elements), in allocation order.
    pub(crate) fn allocations(&self) -> Vec<(DType, usize)> {
        self.pools
            .iter()
            .map(|p| (p.dtype, p.runs.peak().max(ALIGN)))
            .collect()
    }
}
