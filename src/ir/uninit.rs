//! What memory nothing wrote holds when a kernel reads it: the one definition both
//! executors follow. JAX's TPU interpret mode fills every buffer it allocates (outputs,
//! scratch, VMEM) with NaN for floats, the largest value for integers and `True` for
//! bools (`InterpretParams(uninitialized_memory="nan")`, its default;
//! `get_uninitialized_value` in `jax/_src/pallas/mosaic/interpret/utils.py`), or with
//! zeros (`"zero"`). A run does the same: its schedule begins with a fill of every
//! allocation of a device that the run reads before writing all of it, or does not
//! write whole when it is an output ([`fills`]); the executors run those fills as any
//! other op, over memory that otherwise starts as zeros.

use super::data::DataOp;
use super::program::Program;
use super::view::View;
use super::written::Written;
use crate::array::DType;
use crate::error::{Error, Result};
use std::fmt;

/// What memory nothing wrote reads as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Uninit {
    /// Interpret mode's default: NaN for floats, the largest value for integers, true
    /// for bools.
    #[default]
    Nan,
    /// Zeros.
    Zero,
}

impl Uninit {
    /// The environment variable that sets it (`nan` or `zero`).
    pub const ENV: &'static str = "TPUSIM_UNINIT";

    /// `nan` or `zero`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "nan" => Ok(Uninit::Nan),
            "zero" => Ok(Uninit::Zero),
            _ => Err(Error::bad_input(format!(
                "uninitialized memory `{s}`: `nan` (NaN for floats, the largest value for integers, as JAX's interpret mode) or `zero`"
            ))),
        }
    }

    /// The setting of [`Uninit::ENV`], `nan` when unset.
    pub fn from_env() -> Result<Self> {
        match std::env::var(Self::ENV) {
            Ok(s) => Self::parse(&s).map_err(|e| Error::bad_input(format!("{}: {e}", Self::ENV))),
            Err(_) => Ok(Uninit::default()),
        }
    }

    /// The bits an element of `dtype` holds, as [`DType::bits_of`] stores them.
    pub fn bits(self, dtype: DType) -> u32 {
        match self {
            Uninit::Zero => 0,
            Uninit::Nan => match dtype {
                DType::F32 => f32::NAN.to_bits(),
                DType::F16 => u32::from(half::f16::NAN.to_bits()),
                DType::BF16 => u32::from(half::bf16::NAN.to_bits()),
                DType::I32 => i32::MAX as u32,
                DType::I8 => i8::MAX as u32,
                DType::U8 => u32::from(u8::MAX),
                DType::Bool => 1,
            },
        }
    }
}

impl fmt::Display for Uninit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Uninit::Nan => "nan",
            Uninit::Zero => "zero",
        })
    }
}

/// The fills a run of `ops` on `program` starts with so that memory nothing wrote reads
/// as `uninit` says: one per allocation of a device (not an input: that holds the
/// host's data) that some op reads before it is all written, or that is an output not
/// all written by the end. None for [`Uninit::Zero`]: the executors' memory starts as
/// zeros.
pub fn fills(program: &Program, ops: &[DataOp], uninit: Uninit) -> Vec<DataOp> {
    if uninit == Uninit::Zero {
        return Vec::new();
    }
    let allocs = &program.layout.allocs;
    let mut needs = vec![false; program.devices * allocs.len()];
    let mut written = Written::new(program);
    // The staging area of DMAs in flight is the schedule's own, not the program's.
    let ours = |v: &View| v.alloc() < allocs.len();
    for op in ops {
        for v in op.reads().filter(ours) {
            if written.unwritten(&v).is_some() {
                needs[v.device() * allocs.len() + v.alloc()] = true;
            }
        }
        if let DataOp::Accumulate { dst, .. } = op {
            if written.unwritten(dst).is_some() {
                needs[dst.device() * allocs.len() + dst.alloc()] = true;
            }
        }
        for v in op.writes().filter(ours) {
            written.write(&v);
        }
    }
    let mut out = Vec::new();
    for d in 0..program.devices {
        for (a, alloc) in allocs.iter().enumerate() {
            let whole = View::new(d, a, 0, alloc.numel());
            let output = program.outputs.contains(&a) && written.unwritten(&whole).is_some();
            if (needs[d * allocs.len() + a] || output) && !whole.is_empty() && program.holds(d, a) {
                out.push(DataOp::Fill {
                    dst: whole,
                    bits: uninit.bits(alloc.dtype),
                });
            }
        }
    }
    out
}
