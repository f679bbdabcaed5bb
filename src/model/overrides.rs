//! The cost model's figures as users set them: a preset with named overrides in the
//! units people quote (GB/s, microseconds, giga-elements per second, bytes). The command
//! line's `--link-gbps` and Python's `link_gbps=` are the same [`Knob`], so their units
//! and checks are defined once.

use super::{CostModel, Topology};
use crate::error::{Error, Result};

/// A figure of the cost model a user may override.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Knob {
    /// Link bandwidth per direction, GB/s.
    LinkGbps,
    /// Link latency per hop, microseconds.
    LinkLatencyUs,
    /// Local HBM<->VMEM DMA bandwidth, GB/s.
    HbmGbps,
    /// Local DMA latency, microseconds.
    DmaLatencyUs,
    /// Vector unit rate, giga-elements per second.
    VectorGelems,
    /// Matrix unit peak (bf16), TFLOP/s.
    MxuTflops,
    /// VMEM bytes per device (0: unlimited).
    VmemBytes,
}

impl Knob {
    /// Every knob, in the order messages list them.
    pub const ALL: [Knob; 7] = [
        Knob::LinkGbps,
        Knob::LinkLatencyUs,
        Knob::HbmGbps,
        Knob::DmaLatencyUs,
        Knob::VectorGelems,
        Knob::MxuTflops,
        Knob::VmemBytes,
    ];

    /// Its name (Python's keyword; the command line's flag with dashes).
    pub fn name(self) -> &'static str {
        match self {
            Knob::LinkGbps => "link_gbps",
            Knob::LinkLatencyUs => "link_latency_us",
            Knob::HbmGbps => "hbm_gbps",
            Knob::DmaLatencyUs => "dma_latency_us",
            Knob::VectorGelems => "vector_gelems",
            Knob::MxuTflops => "mxu_tflops",
            Knob::VmemBytes => "vmem_bytes",
        }
    }

    /// The knob called `name` (`link_gbps` or `link-gbps`).
    pub fn parse(name: &str) -> Result<Self> {
        let n = name.trim_start_matches("--").replace('-', "_");
        Knob::ALL
            .into_iter()
            .find(|k| k.name() == n)
            .ok_or_else(|| {
                let names: Vec<&str> = Knob::ALL.iter().map(|k| k.name()).collect();
                Error::bad_input(format!(
                    "unknown model override `{name}` ({})",
                    names.join(", ")
                ))
            })
    }

    /// Sets this figure of `m` to `v` in the knob's units.
    fn apply(self, m: &mut CostModel, v: f64) {
        match self {
            Knob::LinkGbps => m.link_bw = v * 1e9,
            Knob::LinkLatencyUs => m.link_latency = v * 1e-6,
            Knob::HbmGbps => m.hbm_bw = v * 1e9,
            Knob::DmaLatencyUs => m.dma_latency = v * 1e-6,
            Knob::VectorGelems => m.vector_rate = v * 1e9,
            Knob::MxuTflops => m.mxu_flops = v * 1e12,
            Knob::VmemBytes => m.vmem_bytes = (v > 0.0).then_some(v as u64),
        }
    }
}

/// A preset, the figures overridden and the wiring: what `--model` and its flags (or
/// Python's `model(preset=..., link_gbps=...)`) ask for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelSpec {
    /// The preset (`v5e`, `v5p`, `v6e`).
    pub preset: String,
    /// Overridden figures, in the knobs' units.
    pub overrides: Vec<(Knob, f64)>,
    /// How the devices are wired (`None`: the pipeline's default for the mesh).
    pub topology: Option<Topology>,
}

impl ModelSpec {
    /// Preset `preset` with nothing overridden.
    pub fn preset(preset: &str) -> Self {
        Self {
            preset: preset.to_string(),
            ..Self::default()
        }
    }

    /// The cost model: the preset's figures, the overrides applied and checked.
    pub fn build(&self) -> Result<CostModel> {
        let mut m = CostModel::preset(&self.preset)?;
        for &(k, v) in &self.overrides {
            k.apply(&mut m, v);
        }
        if !self.overrides.is_empty() || self.topology.is_some() {
            m.name = format!("{} (overridden)", m.name);
        }
        m.topology = self.topology.clone();
        m.validate()?;
        Ok(m)
    }
}
