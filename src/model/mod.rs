//! A cost model for the scheduler's clock: modeled time, timelines and bus bandwidth.
//!
//! Links carry `link_bw` bytes/s per direction with `link_latency` seconds of latency;
//! concurrent DMAs on one link (or on one device's local HBM↔VMEM engine) share its
//! bandwidth equally. VMEM compute runs on one of two units of each device: matrix
//! products on the MXU at `mxu_flops` (bf16; other dtypes by [`CostModel::mxu_rate`]),
//! everything else on the vector unit at `vector_rate` elements/s. Presets use public
//! figures (see [`Preset`]); every figure can be overridden.

mod chips;
mod mxu;
mod nccl;
mod overlap;
mod overrides;
mod timed;
mod timeline;
mod topology;

pub use chips::{presets, Preset};
pub use mxu::DotShape;
pub use nccl::{bus_factor, ideal_seconds, Traffic};
pub use overlap::Overlap;
pub use overrides::{check_modeled, overridden, Knob, ModelSpec, MAX_MODELED_SECONDS};
pub use timed::{Timed, TimedEvent, TimedRun, Unit};
pub use timeline::chrome_trace;
pub use topology::{route, Topology};

use crate::array::DType;
use crate::error::{Error, Result};
use crate::ir::MemorySpace;
use crate::ir::Program;

/// Figures of one TPU generation (per chip; links per direction).
#[derive(Clone, Debug, PartialEq)]
pub struct CostModel {
    /// Preset name, or `custom`.
    pub name: String,
    /// Bytes per second of one inter-chip link, per direction.
    pub link_bw: f64,
    /// Seconds from a remote DMA's last byte (or a remote signal) to its arrival.
    pub link_latency: f64,
    /// Bytes per second of a device's local HBM↔VMEM DMA engine.
    pub hbm_bw: f64,
    /// Seconds of fixed cost per local DMA.
    pub dma_latency: f64,
    /// Elements per second of the vector unit (accumulate, copy, fill, elementwise
    /// compute, reductions, casts).
    pub vector_rate: f64,
    /// Dense bf16 FLOP/s of the chip's matrix units (two FLOPs per multiply-add); other
    /// dtypes run at [`CostModel::mxu_rate`]'s fraction of it.
    pub mxu_flops: f64,
    /// VMEM bytes per device; a kernel whose VMEM is larger fails, as on the chip.
    pub vmem_bytes: Option<u64>,
    /// Matrix units per device (all of them stream at once: a dot is split over them).
    pub mxus: usize,
    /// Side of one MXU's systolic array (128 or 256): a dot runs in tiles of it.
    pub mxu_dim: usize,
    /// TensorCores per device (2 on a megacore chip, whose figures are the chip's).
    pub tensorcores: usize,
    /// The torus of a full pod of this generation (dimensions, x fastest).
    pub pod: Vec<usize>,
    /// How the run's devices are wired; `None`: the pod's torus when the run fills the
    /// pod, else a ring of the run's devices (see [`CostModel::topology_for`]).
    pub topology: Option<Topology>,
}

impl CostModel {
    /// The wiring of a run on `p` devices: the override, else the pod's torus when `p`
    /// fills the pod, else a ring of `p` devices (the 1-D meshes the collectives use).
    pub fn topology_for(&self, p: usize) -> Topology {
        match &self.topology {
            Some(t) => t.clone(),
            None if !self.pod.is_empty() && self.pod.iter().product::<usize>() == p => {
                Topology::Torus(self.pod.clone())
            }
            None => Topology::Ring,
        }
    }

    /// Multiply-adds per second of the matrix units on operands of `dtype` (half the
    /// FLOP/s): bf16 at the peak; int8 and uint8 at twice it (Google's published int8
    /// TOP/s are twice the bf16 TFLOP/s on every generation); f32 (and i32, which has no
    /// MXU path of its own) at a sixth of it: an f32 matmul to f32 accuracy (XLA's and
    /// Mosaic's `Precision.HIGHEST`) is six bf16 passes over the hi/lo bf16 parts of its
    /// operands; f16 at a third: its 11-bit significand needs a hi and a lo bf16 part,
    /// three passes (hi·hi, hi·lo, lo·hi). These factors are this model's assumption, not
    /// published rates.
    pub fn mxu_rate(&self, dtype: DType) -> f64 {
        let bf16 = self.mxu_flops / 2.0;
        match dtype {
            DType::BF16 => bf16,
            DType::I8 | DType::U8 => 2.0 * bf16,
            DType::F16 => bf16 / 3.0,
            DType::F32 | DType::I32 | DType::Bool => bf16 / 6.0,
        }
    }

    /// The preset called `name`.
    pub fn preset(name: &str) -> Result<Self> {
        presets()
            .into_iter()
            .find(|p| p.name == name)
            .map(|p| (p.model)())
            .ok_or_else(|| {
                let names: Vec<_> = presets().iter().map(|p| p.name).collect();
                Error::bad_input(format!(
                    "unknown model `{name}` (presets: {})",
                    names.join(", ")
                ))
            })
    }

    /// Checks every figure is positive and finite.
    pub fn validate(&self) -> Result<()> {
        for (what, v) in [
            ("link bandwidth", self.link_bw),
            ("HBM bandwidth", self.hbm_bw),
            ("vector rate", self.vector_rate),
            ("MXU rate", self.mxu_flops),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::bad_input(format!(
                    "model {what} must be positive and finite, got {}",
                    crate::units::number(v)
                )));
            }
        }
        for (what, v) in [
            ("link latency", self.link_latency),
            ("DMA latency", self.dma_latency),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::bad_input(format!(
                    "model {what} must be zero or positive and finite, got {}",
                    crate::units::number(v)
                )));
            }
        }
        Ok(())
    }

    /// Fails when a kernel's VMEM does not fit: what it holds at once (its own buffers
    /// and the most bytes its values hold live together, see [`crate::ir::VmemUse`])
    /// against the chip's VMEM, or the kernel's own `vmem_limit_bytes` when it sets a
    /// lower one (the compiler holds it to that). A program built by hand counts every
    /// VMEM allocation.
    pub fn check_vmem(&self, program: &Program) -> Result<()> {
        let Some(chip) = self.vmem_bytes else {
            return Ok(());
        };
        let vmem_allocs = || {
            program
                .layout
                .allocs
                .iter()
                .filter(|a| a.space == MemorySpace::Vmem)
        };
        let uses = if program.layout.vmem.is_empty() {
            vec![crate::ir::VmemUse {
                kernel: program.name.clone(),
                buffers: vmem_allocs().map(|a| a.bytes()).sum(),
                values: 0,
                limit: None,
            }]
        } else {
            program.layout.vmem.clone()
        };
        for u in uses {
            let (cap, whose) = match u.limit {
                Some(l) if l < chip => (l, "its vmem_limit_bytes".to_string()),
                _ => (chip, self.name.clone()),
            };
            if u.bytes() > cap {
                let mut list: Vec<String> = vmem_allocs()
                    .filter(|a| !a.holds_values())
                    .map(|a| format!("`{}` {} B", a.name, a.bytes()))
                    .collect();
                if u.values > 0 {
                    list.push(format!("values live at once {} B", u.values));
                }
                return Err(Error::Limit {
                    what: format!("VMEM of `{}` on {whose} ({})", u.kernel, list.join(", ")),
                    requested: u.bytes(),
                    limit: cap,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid_and_named() {
        for p in presets() {
            let m = (p.model)();
            assert_eq!(m.name, p.name);
            m.validate().unwrap();
        }
        assert!(CostModel::preset("v9").is_err());
        let mut m = CostModel::preset("v5e").unwrap();
        assert_eq!(m.link_bw, 50e9);
        m.link_bw = 0.0;
        assert!(m.validate().is_err());
    }
}
