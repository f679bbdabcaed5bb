//! A cost model for the scheduler's clock: modeled time, timelines and bus bandwidth.
//!
//! Links carry `link_bw` bytes/s per direction with `link_latency` seconds of latency;
//! concurrent DMAs on one link (or on one device's local HBM↔VMEM engine) share its
//! bandwidth equally. VMEM compute runs at `vector_rate` elements/s. Presets use public
//! figures (see [`Preset`]); every figure can be overridden.

mod nccl;
mod overrides;
mod timed;
mod timeline;
mod topology;

pub use nccl::{bus_factor, ideal_seconds, Traffic};
pub use overrides::{check_modeled, overridden, Knob, ModelSpec, MAX_MODELED_SECONDS};
pub use timed::{Timed, TimedEvent, TimedRun};
pub use timeline::chrome_trace;
pub use topology::{route, Topology};

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
    /// Elements per second of VMEM compute (accumulate, copy, fill).
    pub vector_rate: f64,
    /// VMEM bytes per device; a kernel whose VMEM is larger fails, as on the chip.
    pub vmem_bytes: Option<u64>,
    /// The torus of a full pod of this generation (dimensions, x fastest).
    pub pod: Vec<usize>,
    /// How the run's devices are wired; `None`: the pod's torus when the run fills the
    /// pod, else a ring of the run's devices (see [`CostModel::topology_for`]).
    pub topology: Option<Topology>,
}

/// A named preset with its sources.
pub struct Preset {
    /// Name (`--model NAME`).
    pub name: &'static str,
    /// The figures.
    pub model: fn() -> CostModel,
    /// Where the figures come from.
    pub source: &'static str,
}

const GB: f64 = 1e9;
const MIB: u64 = 1 << 20;

/// The presets. Per-link bandwidth is the chip's published bidirectional ICI bandwidth
/// divided by its ICI ports and by 2 directions. Latencies and the vector rate are not
/// published: they are estimates (1 µs per hop, 0.5 µs per local DMA, 8 sublanes × 128
/// lanes per cycle at about 1.5 GHz), to be overridden when better figures are known.
pub fn presets() -> Vec<Preset> {
    vec![
        Preset {
            name: "v5e",
            model: || CostModel {
                name: "v5e".into(),
                link_bw: 400.0 * GB / 4.0 / 2.0,
                link_latency: 1e-6,
                hbm_bw: 819.0 * GB,
                dma_latency: 0.5e-6,
                vector_rate: 1024.0 * 1.5e9,
                vmem_bytes: Some(128 * MIB),
                pod: vec![16, 16],
                topology: None,
            },
            source: "Cloud TPU v5e system architecture (docs.cloud.google.com/tpu/docs/v5e): \
                     400 GBps bidirectional ICI per chip over 4 ports, 819 GBps HBM, \
                     256 chips per pod in a 2-D torus (16x16); \
                     VMEM 128 MiB per core from jax.experimental.pallas.tpu get_tpu_info",
        },
        Preset {
            name: "v5p",
            model: || CostModel {
                name: "v5p".into(),
                link_bw: 1200.0 * GB / 6.0 / 2.0,
                link_latency: 1e-6,
                hbm_bw: 2765.0 * GB,
                dma_latency: 0.5e-6,
                vector_rate: 1024.0 * 1.75e9,
                vmem_bytes: Some(64 * MIB),
                pod: vec![16, 20, 28],
                topology: None,
            },
            source: "Cloud TPU v5p system architecture (docs.cloud.google.com/tpu/docs/v5p): \
                     1200 GBps bidirectional ICI per chip, 3D torus (6 ports), 2765 GBps HBM, \
                     8960 chips per pod (16x20x28); \
                     VMEM 64 MiB per core from get_tpu_info",
        },
        Preset {
            name: "v6e",
            model: || CostModel {
                name: "v6e".into(),
                link_bw: 800.0 * GB / 4.0 / 2.0,
                link_latency: 1e-6,
                hbm_bw: 1638.0 * GB,
                dma_latency: 0.5e-6,
                vector_rate: 1024.0 * 1.75e9,
                vmem_bytes: Some(128 * MIB),
                pod: vec![16, 16],
                topology: None,
            },
            source: "Cloud TPU v6e (Trillium) system architecture (docs.cloud.google.com/tpu/docs/v6e): \
                     800 GBps bidirectional ICI per chip over 4 ports, 1638 GBps HBM, \
                     256 chips per pod in a 2-D torus (16x16); \
                     VMEM 128 MiB per core from get_tpu_info",
        },
    ]
}

impl CostModel {
    /// The wiring of a run on `p` devices: the override, else the pod's torus when `p`
    /// fills the pod, else a ring of `p` devices (the 1-D meshes the collectives use).
    pub fn topology_for(&self, p: usize) -> Topology {
        match &self.topology {
            Some(t) => t.clone(),
            None if self.pod.iter().product::<usize>() == p => Topology::Torus(self.pod.clone()),
            None => Topology::Ring,
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

    /// Fails when the kernel's VMEM does not fit this generation's VMEM.
    pub fn check_vmem(&self, program: &Program) -> Result<()> {
        let Some(cap) = self.vmem_bytes else {
            return Ok(());
        };
        let used: u64 = program
            .layout
            .allocs
            .iter()
            .filter(|a| a.space == MemorySpace::Vmem)
            .map(|a| a.bytes())
            .sum();
        if used > cap {
            let list: Vec<String> = program
                .layout
                .allocs
                .iter()
                .filter(|a| a.space == MemorySpace::Vmem)
                .map(|a| format!("`{}` {} B", a.name, a.bytes()))
                .collect();
            return Err(Error::Limit {
                what: format!(
                    "VMEM of `{}` on {} ({})",
                    program.name,
                    self.name,
                    list.join(", ")
                ),
                requested: used,
                limit: cap,
            });
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
