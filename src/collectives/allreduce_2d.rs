//! A 2-D all-reduce on an X x Y torus (axes x, y), one kernel over the whole mesh:
//! a ring reduce-scatter along x, a ring all-reduce along y of the chunk each device
//! then owns, and a ring all-gather along x: the torus all-reduce
//! ([`super::allreduce_torus`]) on two axes. Every push names its target by mesh
//! coordinates `(x, y)`; each axis has its own capacity semaphore.

use super::allreduce_torus::{
    call_with as torus_call, chunk_layout, torus_allreduce_kernel, Handshakes,
};
use super::ring_allreduce::ring_facts;
use super::{Collective, Options, Span, Takes};
use crate::array::{DType, HostArray};
use crate::error::{Error, Result};
use crate::kernel::{Ctx, PallasCall, ReduceOp, Ref, Sem};
use crate::mesh::Mesh;
use crate::model::Traffic;
use crate::trace::TraceLayout;
use std::sync::Arc;

/// The handshakes of the kernel, switchable for the broken variants.
pub(crate) type Handshakes2d = Handshakes;

/// The kernel. Grid `(max(1, 2(X−1) + 2(Y−1)),)`; `o_ref` is `[1, N]`, N divisible by
/// X·Y. Steps `0..X−1` reduce-scatter the X chunks of `o_ref` along x (device `(x, y)`
/// ends with chunk `x+1` reduced over its ring along x); the next `2(Y−1)` steps
/// all-reduce that chunk along y in Y sub-chunks; the last `X−1` gather the chunks
/// along x. On a 1-D mesh (`-p P`) it is the P x 1 torus: no y steps.
#[allow(clippy::too_many_arguments)]
pub fn allreduce_2d_kernel(
    pl: &Ctx,
    op: ReduceOp,
    x_ref: Ref,
    o_ref: Ref,
    hbm_buf: Ref,
    sems: [Sem; 3],
    [capacity_x, capacity_y]: [Sem; 2],
    vmem_recv: Ref,
) {
    let axes: &[String] = &["x".into(), "y".into()];
    let k = if pl.has_axis("y") { 2 } else { 1 };
    torus_allreduce_kernel(
        pl,
        op,
        Handshakes::RIGHT,
        &axes[..k],
        [x_ref, o_ref, hbm_buf, vmem_recv],
        sems,
        &[capacity_x, capacity_y][..k],
    )
}

/// The 2-D torus all-reduce (`psum` over both axes), with `--op`.
#[derive(Clone, Debug)]
pub struct AllReduce2d {
    /// Reduction operator.
    pub op: ReduceOp,
}

/// Checks that `mesh` has axes x and y, or x alone (the X x 1 torus).
fn torus(mesh: &Mesh) -> Result<()> {
    match mesh.axes() {
        [(a, _)] if a == "x" => Ok(()),
        [(a, _), (b, _)] if a == "x" && b == "y" => Ok(()),
        axes => {
            let names: Vec<&str> = axes.iter().map(|a| a.0.as_str()).collect();
            Err(Error::bad_input(format!(
                "allreduce_2d runs on a mesh with axes x and y (e.g. --mesh 4x4; allreduce_torus takes any axes), not on axes {}",
                names.join(", ")
            )))
        }
    }
}

impl Collective for AllReduce2d {
    fn name(&self) -> &'static str {
        "allreduce_2d"
    }

    fn summary(&self) -> &'static str {
        "2-D torus: reduce-scatter along x, all-reduce along y, all-gather along x; 2(X-1)+2(Y-1) steps of N/X or N/(XY)"
    }

    fn span(&self) -> Span {
        Span::Mesh
    }

    // Chunks of N/(X·Y): one chunk of rows per device, as the rings'.
    ring_facts!();

    fn with_options(&self, opts: &Options) -> Result<Arc<dyn Collective>> {
        Ok(Arc::new(AllReduce2d { op: opts.op }))
    }

    /// One element per sub-chunk: column `o_ref[cK]` is sub-chunk K (chunk K/Y along x).
    fn trace_shape(&self, p: usize) -> Option<Vec<usize>> {
        Some(vec![p, 1])
    }

    fn trace_layout(&self, p: usize) -> Option<TraceLayout> {
        Some(chunk_layout(p))
    }

    fn call(&self, mesh: &Mesh, shard: &[usize], dtype: DType) -> Result<PallasCall> {
        build(self.op, Handshakes::RIGHT, mesh, shard, dtype)
    }
}

/// The kernel with handshakes `h`, for the broken variants.
pub(crate) fn call_with(
    h: Handshakes2d,
    mesh: &Mesh,
    shard: &[usize],
    dtype: DType,
) -> Result<PallasCall> {
    build(ReduceOp::Sum, h, mesh, shard, dtype)
}

/// The torus all-reduce on `mesh`, whose axes must be x and y (or x alone).
fn build(
    op: ReduceOp,
    h: Handshakes,
    mesh: &Mesh,
    shard: &[usize],
    dtype: DType,
) -> Result<PallasCall> {
    torus(mesh)?;
    torus_call("allreduce_2d", op, h, mesh, shard, dtype)
}
