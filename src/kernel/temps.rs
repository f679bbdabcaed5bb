//! Where a trace's values live: one VMEM allocation per dtype, numbered after the
//! kernel's own, with first-fit runs handed out within a grid point and given back
//! when a value is dropped; the most each ever held is its size.

use crate::array::DType;
use crate::ir::{AllocId, FirstFit};

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
}

impl Temps {
    /// Temporaries numbered from allocation `first`.
    pub(crate) fn new(first: AllocId) -> Self {
        Self {
            first,
            pools: Vec::new(),
        }
    }

    /// A run of `len` elements of `dtype` (allocation, offset).
    pub(crate) fn take(&mut self, dtype: DType, len: usize) -> (AllocId, usize) {
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
        (p.alloc, p.runs.alloc(len.max(1).next_multiple_of(ALIGN)))
    }

    pub(crate) fn give_back(&mut self, alloc: AllocId, offset: usize) {
        if let Some(p) = self.pools.iter_mut().find(|p| p.alloc == alloc) {
            p.runs.free(offset);
        }
    }

    /// Forgets every live value (a new grid point starts).
    pub(crate) fn reset(&mut self) {
        for p in &mut self.pools {
            p.runs.clear();
        }
    }

    /// The allocations the temporaries need: (dtype, elements), in allocation order.
    pub(crate) fn allocations(&self) -> Vec<(DType, usize)> {
        self.pools
            .iter()
            .map(|p| (p.dtype, p.runs.peak().max(ALIGN)))
            .collect()
    }
}
