//! The cost model's figures as users set them: a preset with named overrides in the
//! units people quote (GB/s, microseconds, giga-elements per second, bytes). The command
//! line's `--link-gbps` and Python's `link_gbps=` are the same [`Knob`], so their units
//! and checks are defined once.

use super::{CostModel, Topology};
use crate::error::{Error, Result};

/// The longest modeled time: 2^63 nanoseconds (about 292 years), the range of the
/// 64-bit nanosecond timestamps a timeline viewer (Perfetto) reads. Overrides whose
/// modeled times go beyond it are bad input.
pub const MAX_MODELED_SECONDS: f64 = 9_223_372_036.854_775;

/// The figures of `m` that differ from its preset's, as flags in the knobs' units
/// (`--dma-latency-us 1e308`): what to name when the model's times leave their range.
pub fn overridden(m: &CostModel) -> Vec<String> {
    let base = m.name.split(" (").next().unwrap_or_default();
    let Ok(preset) = CostModel::preset(base) else {
        return Vec::new();
    };
    Knob::ALL
        .into_iter()
        .filter(|k| {
            let (a, b) = (k.get(m), k.get(&preset));
            (a - b).abs() > 1e-9 * a.abs().max(b.abs())
        })
        .map(|k| format!("{} {}", k.flag(), crate::units::number(k.get(m))))
        .collect()
}

/// Fails when a modeled time `seconds` of `what` is beyond [`MAX_MODELED_SECONDS`] (or
/// not a number), naming the figures of `m` that were overridden.
pub fn check_modeled(m: &CostModel, what: &str, seconds: f64) -> Result<()> {
    if seconds.is_finite() && seconds <= MAX_MODELED_SECONDS {
        return Ok(());
    }
    let figures = overridden(m);
    Err(Error::bad_input(format!(
        "the modeled time of {what} is {} s on {}, beyond the {} s modeled times may reach \
         (2^63 ns, the range of a timeline's timestamps): {}",
        crate::units::approx(seconds),
        m.name,
        crate::units::approx(MAX_MODELED_SECONDS),
        if figures.is_empty() {
            "the kernel moves too much for the model's figures".to_string()
        } else {
            format!("lower or drop the override {}", figures.join(", "))
        }
    )))
}

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

    /// The command line's flag (`--link-gbps`).
    pub fn flag(self) -> String {
        format!("--{}", self.name().replace('_', "-"))
    }

    /// The knob's unit, as messages name it.
    pub fn unit(self) -> &'static str {
        match self {
            Knob::LinkGbps | Knob::HbmGbps => "GB/s",
            Knob::LinkLatencyUs | Knob::DmaLatencyUs => "us",
            Knob::VectorGelems => "giga-elements/s",
            Knob::MxuTflops => "TFLOP/s",
            Knob::VmemBytes => "bytes",
        }
    }

    /// The figure of `m` this knob sets, in the knob's units.
    pub fn get(self, m: &CostModel) -> f64 {
        match self {
            Knob::LinkGbps => m.link_bw / 1e9,
            Knob::LinkLatencyUs => m.link_latency / 1e-6,
            Knob::HbmGbps => m.hbm_bw / 1e9,
            Knob::DmaLatencyUs => m.dma_latency / 1e-6,
            Knob::VectorGelems => m.vector_rate / 1e9,
            Knob::MxuTflops => m.mxu_flops / 1e12,
            Knob::VmemBytes => m.vmem_bytes.map_or(0.0, |v| v as f64),
        }
    }

    /// Checks `v` in the knob's units, before it is converted: finite, positive for a
    /// rate, zero or positive for a latency or a size, and such that the model's times
    /// stay in range ([`MAX_MODELED_SECONDS`]): a latency below it, a rate that moves a
    /// byte (or an element) within it. The message echoes `v` as the user wrote it.
    pub fn check(self, v: f64) -> Result<()> {
        let shown = crate::units::number(v);
        let name = format!("model override {} ({}) {shown}", self.name(), self.flag());
        let bad = |why: String| Err(Error::bad_input(format!("{name} {}: {why}", self.unit())));
        if !v.is_finite() {
            return bad("it must be a finite number".into());
        }
        let max = crate::units::approx(MAX_MODELED_SECONDS);
        match self {
            Knob::LinkGbps | Knob::HbmGbps | Knob::VectorGelems | Knob::MxuTflops => {
                if v <= 0.0 {
                    return bad(format!("it must be positive (got {shown})"));
                }
                let scale = if self == Knob::MxuTflops { 1e12 } else { 1e9 };
                let per_second = v * scale;
                if !per_second.is_finite() {
                    return bad(format!(
                        "it is beyond what a 64-bit float holds once in units per second (at most {})",
                        crate::units::approx(f64::MAX / scale)
                    ));
                }
                if 1.0 / per_second > MAX_MODELED_SECONDS {
                    return bad(format!(
                        "one {} would take {} s, beyond the {max} s modeled times may reach (2^63 ns, the range of a timeline's timestamps)",
                        match self {
                            Knob::VectorGelems => "element",
                            Knob::MxuTflops => "FLOP",
                            _ => "byte",
                        },
                        crate::units::approx(1.0 / per_second)
                    ));
                }
            }
            Knob::LinkLatencyUs | Knob::DmaLatencyUs => {
                if v < 0.0 {
                    return bad(format!("it must be zero or positive (got {shown})"));
                }
                if v * 1e-6 > MAX_MODELED_SECONDS {
                    return bad(format!(
                        "a latency of {} s is beyond the {max} s modeled times may reach (2^63 ns, the range of a timeline's timestamps)",
                        crate::units::approx(v * 1e-6)
                    ));
                }
            }
            Knob::VmemBytes => {
                if v < 0.0 || v.fract() != 0.0 || v > u64::MAX as f64 {
                    return bad(format!(
                        "it must be a whole number of bytes from 0 (unlimited) to {} (got {shown})",
                        u64::MAX
                    ));
                }
            }
        }
        Ok(())
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
            k.check(v)?;
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
