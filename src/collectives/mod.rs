//! The seed collectives, their XLA-semantics references, and the API that runs them.

mod all_gather;
mod all_gather_bidir;
mod all_gather_matmul;
mod all_to_all;
mod allreduce_2d;
mod allreduce_torus;
mod barrier;
mod matmul_reduce_scatter;
mod ppermute;
mod psum;
mod psum_scatter;
pub mod reference;
mod registry;
mod ring;
mod ring_allreduce;
mod second_round;
mod variant;
pub mod variants;

use crate::kernel::ReduceOp;
pub use all_gather::{all_gather_kernel, AllGather};
pub use all_gather_bidir::{all_gather_bidir_kernel, AllGatherBidir};
pub use all_gather_matmul::{all_gather_matmul_kernel, AllGatherMatmul};
pub use all_to_all::{all_to_all_kernel, AllToAll};
pub use allreduce_2d::{allreduce_2d_kernel, AllReduce2d};
pub use allreduce_torus::AllReduceTorus;
pub use barrier::{mesh_barrier, neighbor_barrier};
pub use matmul_reduce_scatter::{matmul_reduce_scatter_kernel, MatmulReduceScatter};
pub use ppermute::{ppermute_kernel, right_shift_kernel, Ppermute};
pub use psum::{psum_kernel, Psum};
pub use psum_scatter::{reduce_scatter_kernel, PsumScatter};
pub use registry::Registry;
pub use ring::{ring_step, RingPos, StepBufs};
pub use ring_allreduce::{
    ring_allreduce_kernel, ring_allreduce_push_kernel, RingAllReduce, RingAllReducePush,
};
pub use second_round::barrier_shift;

pub use crate::mesh::Span;

use crate::array::{DType, HostArray};
use crate::error::{Error, Result};
use crate::kernel::PallasCall;
use crate::mesh::Mesh;
use crate::model::Traffic;
use crate::trace::TraceLayout;
use std::sync::Arc;

/// A collective: everything the tool knows about one, on the collective itself (its
/// kernel, its reference, how to size and shard it, what it measures, which options it
/// takes, how its step table reads). A [`Registry`] lists collectives; nothing else
/// switches on a collective's name, so a user's collective gets every command a shipped
/// one gets.
pub trait Collective: Send + Sync {
    /// CLI name.
    fn name(&self) -> &str;
    /// One line: algorithm and cost (steps, bytes per step).
    fn summary(&self) -> &str;
    /// The kernel for `mesh`, with `shard` the per-device input shape.
    fn call(&self, mesh: &Mesh, shard: &[usize], dtype: DType) -> Result<PallasCall>;
    /// XLA's result for `inputs[device][operand]`, as `outputs[device][operand]`.
    fn reference(&self, inputs: &[Vec<HostArray>]) -> Result<Vec<Vec<HostArray>>>;
    /// Where it runs: over one ring (per group along `--axis` on a multi-axis mesh) or
    /// as one kernel over the whole mesh.
    fn span(&self) -> Span {
        Span::Ring
    }
    /// What nccl-tests would call it: decides its size and bus bandwidth.
    fn traffic(&self) -> Traffic;
    /// True when its reference is element-wise across devices: one operand in, each
    /// device's result of the input's shape, its element at a position a function of
    /// every device's input at that position alone (the all-reduces). A run then
    /// computes the reference in chunks of positions, so that each rank of a
    /// partitioned run holds its own devices' inputs, reference and results only.
    fn elementwise(&self) -> bool {
        self.reduction().is_some()
    }
    /// The reduction when its reference is the all-reduce of its one operand over
    /// each ring ([`reference::all_reduce_everywhere`] with this op), which makes it
    /// [`Collective::elementwise`]: a run's check then reduces the inputs where they
    /// lie, a block at a time, with no copy of them and none of the reference.
    fn reduction(&self) -> Option<crate::ir::ReduceOp> {
        None
    }
    /// Relative float tolerance for comparing with the reference (0 for pure data movement).
    fn tolerance(&self) -> f32 {
        0.0
    }
    /// The tolerance for results in `dtype` when up to `terms` values are reduced: in a
    /// 16-bit float each accumulate rounds (relative error at most the unit roundoff u),
    /// so a reduction allows `2 * terms * u` (the ring's roundings and the reference's
    /// one); [`Collective::tolerance`] otherwise.
    fn tolerance_for(&self, dtype: DType, terms: usize) -> f32 {
        let t = self.tolerance();
        match dtype {
            DType::F16 | DType::BF16 if t > 0.0 => {
                t.max((2 * terms.max(1)) as f32 * dtype.unit_roundoff() as f32)
            }
            _ => t,
        }
    }
    /// The relative tolerance for a run at shard shape `shard` in `dtype` over `devices`
    /// devices: [`Collective::tolerance_for`] unless the bound depends on the shape (a
    /// matmul's on the number of terms it sums).
    fn tolerance_at(&self, _shard: &[usize], dtype: DType, devices: usize) -> f32 {
        self.tolerance_for(dtype, devices)
    }
    /// Bytes of one device's part of the collective in nccl-tests' terms, before the
    /// traffic class scales it ([`Traffic::size`]): its input buffer (the default), or
    /// for a collective that computes, the operand its communication moves.
    fn shard_bytes(&self, shard: &[usize], dtype: DType) -> u64 {
        (crate::array::numel(shard).unwrap_or(usize::MAX) as u64)
            .saturating_mul(dtype.size() as u64)
    }
    /// One device's result shape for a per-device input of shape `shard` (XLA's
    /// per-shard output; the kernel's own output ref may be a reshape of it).
    fn output_shape(&self, _devices: usize, shard: &[usize]) -> Vec<usize> {
        shard.to_vec()
    }
    /// The leading dimension of one device's shard must be a multiple of this at `p`
    /// devices (1: any).
    fn rows_multiple(&self, _p: usize) -> usize {
        1
    }
    /// A small shard shape that works at `p` devices: what `run` and `check` use when
    /// no shape is given.
    fn default_shape(&self, p: usize) -> Vec<usize> {
        vec![8usize.next_multiple_of(self.rows_multiple(p).max(1)), 128]
    }
    /// One device's input shape for `size` bytes (nccl-tests' size for this
    /// collective's traffic) at `p` devices, rounded down to what the algorithm
    /// serves; `None` when nothing fits.
    fn bench_shape(&self, p: usize, size: u64, dtype: DType) -> Option<Vec<usize>> {
        let elems = (size / dtype.size() as u64) as usize;
        let count = match self.traffic() {
            Traffic::AllGather => elems / p.max(1),
            _ => elems,
        };
        let multiple = self.rows_multiple(p).max(1);
        let cols = if count >= 128 * multiple { 128 } else { 1 };
        let rows = count / cols / multiple * multiple;
        (rows > 0).then(|| vec![rows, cols])
    }
    /// For `apply` (like `shard_map`'s in_specs and out_specs): the dimension of the
    /// global input split over the devices, and the one the results are joined along.
    fn apply_dims(&self) -> (usize, usize) {
        (1, 1)
    }
    /// The options it takes (`--op`, `--perm`).
    fn takes(&self) -> Takes {
        Takes::default()
    }
    /// This collective with `opts` (only called with options [`Collective::takes`] allows
    /// and that differ from the defaults).
    fn with_options(&self, _opts: &Options) -> Result<Arc<dyn Collective>> {
        Err(Error::bad_input(format!(
            "`{}` takes no options",
            self.name()
        )))
    }
    /// Step-table columns in the source document's names; `None`: columns derived from
    /// the kernel's own allocations.
    fn trace_layout(&self, _p: usize) -> Option<TraceLayout> {
        None
    }
    /// The shard shape of [`Collective::trace_layout`] at `p`, for the budget to check
    /// before the layout is made (a layout may have a column per device). Collectives
    /// whose layout grows with `p` say it without making it.
    fn trace_shape(&self, p: usize) -> Option<Vec<usize>> {
        self.trace_layout(p).map(|l| l.shape)
    }
}

/// Relative tolerance for float reductions. The kernels sum in ring order in f32, the
/// reference in f64 rounded once: for up to a few dozen terms in [0, 1) the two differ
/// by a few ulps of the result, far below 1e-5 of it (or of 1 near zero).
pub const SUM_TOLERANCE: f32 = 1e-5;

/// Options that some collectives take.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Reduction operator (psum and the ring all-reduces).
    pub op: ReduceOp,
    /// Explicit `(src, dst)` pairs (ppermute).
    pub perm: Option<Vec<(usize, usize)>>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            op: ReduceOp::Sum,
            perm: None,
        }
    }
}

/// Which [`Options`] a collective takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Takes {
    /// `--op sum|max|min`.
    pub op: bool,
    /// `--perm src:dst,...`.
    pub perm: bool,
}

/// The identity of `op` in `dtype`, as a fill value (what an accumulator starts at).
pub fn identity(op: ReduceOp, dtype: DType) -> f64 {
    match (op, dtype) {
        (ReduceOp::Sum, _) => 0.0,
        (ReduceOp::Max, DType::F32 | DType::F16 | DType::BF16) => f64::NEG_INFINITY,
        (ReduceOp::Min, DType::F32 | DType::F16 | DType::BF16) => f64::INFINITY,
        (ReduceOp::Max, DType::I32) => i32::MIN as f64,
        (ReduceOp::Min, DType::I32) => i32::MAX as f64,
        (ReduceOp::Max, DType::I8) => i8::MIN as f64,
        (ReduceOp::Min, DType::I8) => i8::MAX as f64,
        (ReduceOp::Max, DType::U8 | DType::Bool) => 0.0,
        (ReduceOp::Min, DType::U8) => u8::MAX as f64,
        (ReduceOp::Min, DType::Bool) => 1.0,
    }
}

/// The operands of a matmul collective, from its shard shape: `MxKxN` (x is `[M, K]` on
/// every device, w `[K, N]`), or `MxK` for a square `w` (`N = K`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulShape {
    /// Rows of one device's x.
    pub m: usize,
    /// Columns of x, rows of w: the terms of each product's sum.
    pub k: usize,
    /// Columns of w.
    pub n: usize,
}

impl MatmulShape {
    /// The shape `shard` gives collective `name`, or why it gives none.
    pub fn of(name: &str, shard: &[usize]) -> Result<Self> {
        match *shard {
            [m, k, n] if m > 0 && k > 0 && n > 0 => Ok(Self { m, k, n }),
            [m, k] if m > 0 && k > 0 => Ok(Self { m, k, n: k }),
            _ => Err(Error::bad_input(format!(
                "`{name}` takes a shape MxKxN (x is MxK on every device, w is KxN) or MxK (w square), not {shard:?}"
            ))),
        }
    }

    /// x's shape.
    pub fn x(&self) -> [usize; 2] {
        [self.m, self.k]
    }

    /// w's shape.
    pub fn w(&self) -> [usize; 2] {
        [self.k, self.n]
    }
}

/// The dtype a matmul in `dtype` accumulates in on the MXU (`preferred_element_type`):
/// f32 for floats, i32 for integers.
pub fn accumulator(dtype: DType) -> DType {
    if dtype.is_float() {
        DType::F32
    } else {
        DType::I32
    }
}

/// The relative tolerance of a matmul result in `dtype` whose elements sum `terms`
/// products in f32 and are rounded once to `dtype`, against the exact sum rounded once
/// (the reference): the standard bound on a sum of `terms` products in f32, `terms · u`
/// relative to `Σ|a_i b_i|` (u = 2^-24; the inputs are in [0, 1), so that is the
/// result), plus the two roundings to `dtype` (the kernel's and the reference's, one
/// unit roundoff each). 0 for integers: exact, wrapping as i32 does.
pub fn matmul_tolerance(dtype: DType, terms: usize) -> f32 {
    if !dtype.is_float() {
        return 0.0;
    }
    let u32f = DType::F32.unit_roundoff();
    (2.0 * dtype.unit_roundoff() + (terms as f64 + 1.0) * u32f) as f32
}
