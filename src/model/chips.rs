//! The chips: one preset per TPU generation, each figure with where it comes from.
//!
//! Sources, named in each preset's `source`:
//! - Google Cloud's system architecture pages (docs.cloud.google.com/tpu/docs/v5e, v5p,
//!   v6e, v4, tpu7x): peak bf16 TFLOP/s, HBM bandwidth, ICI bandwidth per chip and ports,
//!   pod shape and torus.
//! - JAX's own table of TPU hardware, `jax._src.tpu_info` (jax 0.12): per TensorCore, the
//!   MXUs and their column size (128 before v6, 256 from v6e), VMEM capacity, the
//!   TensorCores per chip and which chips are megacore.
//! - "How to Scale Your Model" (jax-ml.github.io/scaling-book, part 2 "How to Think About
//!   TPUs"): the MXU streams one bf16[8,128] @ [128,128] every 8 cycles (a row of the
//!   left operand per cycle against a stationary tile of the right); ICI one-way
//!   bandwidth per link (v4p and v5e 4.5e10 B/s, v5p and v6e 9e10 B/s) as a cross-check
//!   of the Cloud figures; 1.5 GHz on v5e.
//! - Hot Chips 2020, "Google's Training Chips Revealed: TPUv2 and TPUv3" (Norrie, Patil):
//!   the TensorCore's VLIW bundle has 2 scalar slots, 2 vector load/store slots, 2 vector
//!   ALU slots and 2 matrix slots (push, pop): the rule of [`super::timed`]'s overlap.
//!
//! Not published, and labelled estimates: the link latency per hop (1 µs), the fixed cost
//! of a local DMA (0.5 µs), the vector unit's rate (one 8 x 128 vreg per cycle at the
//! clock the MXU peak implies) and the cycles an MXU needs to load a weight tile (one row
//! per cycle: `mxu_dim` cycles, hidden behind the previous tile's rows when it has at
//! least as many).

use super::CostModel;

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

/// The presets. A device is what JAX calls one: a chip (v4, v5p: megacore, both
/// TensorCores; v5e, v6e: one TensorCore), or one TensorCore of a v7 chip (JAX makes each
/// a device of its own). Per-link bandwidth is the chip's published bidirectional ICI
/// bandwidth divided by its ICI ports and by 2 directions.
pub fn presets() -> Vec<Preset> {
    vec![
        Preset {
            name: "v4",
            model: || CostModel {
                name: "v4".into(),
                link_bw: 45.0 * GB,
                link_latency: 1e-6,
                hbm_bw: 1228.0 * GB,
                dma_latency: 0.5e-6,
                vector_rate: 2.0 * 1024.0 * 1.05e9,
                mxu_flops: 275e12,
                vmem_bytes: Some(16 * MIB),
                mxus: 8,
                mxu_dim: 128,
                tensorcores: 2,
                pod: vec![16, 16, 16],
                topology: None,
            },
            source: "Cloud TPU v4 system architecture (docs.cloud.google.com/tpu/docs/v4): \
                     275 TFLOP/s bf16, 1228 GBps HBM per chip, 4096 chips in a 3-D torus (16x16x16); \
                     ICI 4.5e10 B/s per link and direction (scaling-book part 2); \
                     jax._src.tpu_info: 2 TensorCores (megacore), 4 MXUs of 128x128 each, \
                     VMEM 16 MiB per core; 1.05 GHz (TPU v4 paper, ISCA 2023)",
        },
        Preset {
            name: "v5e",
            model: || CostModel {
                name: "v5e".into(),
                link_bw: 400.0 * GB / 4.0 / 2.0,
                link_latency: 1e-6,
                hbm_bw: 819.0 * GB,
                dma_latency: 0.5e-6,
                vector_rate: 1024.0 * 1.5e9,
                mxu_flops: 197e12,
                vmem_bytes: Some(128 * MIB),
                mxus: 4,
                mxu_dim: 128,
                tensorcores: 1,
                pod: vec![16, 16],
                topology: None,
            },
            source: "Cloud TPU v5e system architecture (docs.cloud.google.com/tpu/docs/v5e): \
                     400 GBps bidirectional ICI per chip over 4 ports, 819 GBps HBM, \
                     197 TFLOP/s bf16 (394 TOP/s int8) per chip, \
                     256 chips per pod in a 2-D torus (16x16); \
                     jax._src.tpu_info: 1 TensorCore, 4 MXUs of 128x128, VMEM 128 MiB; \
                     1.5 GHz (scaling-book part 2)",
        },
        Preset {
            name: "v5p",
            model: || CostModel {
                name: "v5p".into(),
                link_bw: 1200.0 * GB / 6.0 / 2.0,
                link_latency: 1e-6,
                hbm_bw: 2765.0 * GB,
                dma_latency: 0.5e-6,
                vector_rate: 2.0 * 1024.0 * 1.75e9,
                mxu_flops: 459e12,
                vmem_bytes: Some(64 * MIB),
                mxus: 8,
                mxu_dim: 128,
                tensorcores: 2,
                pod: vec![16, 20, 28],
                topology: None,
            },
            source: "Cloud TPU v5p system architecture (docs.cloud.google.com/tpu/docs/v5p): \
                     1200 GBps bidirectional ICI per chip, 3D torus (6 ports), 2765 GBps HBM, \
                     459 TFLOP/s bf16 (918 TOP/s int8) per chip, \
                     8960 chips per pod (16x20x28); \
                     jax._src.tpu_info: 2 TensorCores (megacore), 4 MXUs of 128x128 each, \
                     VMEM 64 MiB per core",
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
                mxu_flops: 918e12,
                vmem_bytes: Some(128 * MIB),
                mxus: 2,
                mxu_dim: 256,
                tensorcores: 1,
                pod: vec![16, 16],
                topology: None,
            },
            source: "Cloud TPU v6e (Trillium) system architecture (docs.cloud.google.com/tpu/docs/v6e): \
                     800 GBps bidirectional ICI per chip over 4 ports, 1638 GBps HBM, \
                     918 TFLOP/s bf16 (1836 TOP/s int8) per chip, \
                     256 chips per pod in a 2-D torus (16x16); \
                     jax._src.tpu_info: 1 TensorCore, 2 MXUs of 256x256, VMEM 128 MiB",
        },
        Preset {
            name: "v7",
            model: || CostModel {
                name: "v7".into(),
                link_bw: 1200.0 * GB / 6.0 / 2.0,
                link_latency: 1e-6,
                hbm_bw: 7370.0 * GB / 2.0,
                dma_latency: 0.5e-6,
                vector_rate: 1024.0 * 1.75e9,
                mxu_flops: 2307e12 / 2.0,
                vmem_bytes: Some(64 * MIB),
                mxus: 2,
                mxu_dim: 256,
                tensorcores: 1,
                pod: vec![],
                topology: None,
            },
            source: "Cloud TPU7x (Ironwood) (docs.cloud.google.com/tpu/docs/tpu7x): \
                     2307 TFLOP/s bf16 and 7.37 TBps HBM per chip, 1.2 TBps bidirectional ICI \
                     per chip in a 3-D torus (6 ports assumed), 9216 chips per pod; \
                     a device is one of the chip's 2 TensorCores (no megacore: JAX makes each \
                     a device), with half the chip's MXU peak and HBM bandwidth; \
                     jax._src.tpu_info: 2 MXUs of 256x256 and VMEM 64 MiB per core. \
                     The pod's torus dimensions are not modeled (runs are wired as rings \
                     unless a topology is given)",
        },
    ]
}
