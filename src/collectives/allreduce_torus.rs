//! An all-reduce over every axis of a torus mesh, one kernel over the whole mesh: a
//! ring reduce-scatter along each axis in turn (each on the chunk the one before left
//! the device owning), then ring all-gathers back along the axes in reverse order.
//! On a k-axis torus of sizes n₀ … nₖ₋₁ that is Σ 2(nᵢ − 1) steps per device: 122 on
//! a v5p pod's 16 x 20 x 28 torus, where one ring through its 8960 chips has 17 918.
//! Every push names its target by mesh coordinates; each axis has its own capacity
//! semaphore. [`super::AllReduce2d`] is this kernel on axes x and y.

use super::barrier::mesh_barrier;
use super::ring::{ring_step, RingPos, StepBufs};
use super::ring_allreduce::ring_facts;
use super::{Collective, Options, Span, Takes};
use crate::array::{DType, HostArray};
use crate::error::{Error, Result};
use crate::kernel::{ds, Ctx, GridSpec, MemorySpace, PallasCall, ReduceOp, Ref, Sem};
use crate::mesh::{DeviceId, Mesh};
use crate::model::Traffic;
use crate::trace::{Column, Labels, TraceLayout};
use std::sync::Arc;

/// Grid steps of the kernel on a torus of axis sizes `sizes`: `2(n − 1)` per axis.
pub fn steps(sizes: &[usize]) -> usize {
    sizes.iter().map(|&n| 2 * (n - 1)).sum()
}

/// Which handshakes a torus all-reduce makes right (the broken variants of
/// `allreduce_2d` get one wrong).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Handshakes {
    /// The entry barrier includes the neighbours along every axis (not only the first).
    pub barrier_every_axis: bool,
    /// Each axis has its own capacity semaphore (else every axis uses the first one's).
    pub capacity_per_axis: bool,
    /// The barrier's second round (the docs' double barrier).
    pub double_barrier: bool,
}

impl Handshakes {
    /// As the shipped kernels have them.
    pub const RIGHT: Handshakes = Handshakes {
        barrier_every_axis: true,
        capacity_per_axis: true,
        double_barrier: true,
    };
}

/// The kernel on a mesh whose axes are `axes` (every axis of the mesh, in its order).
/// Grid `(max(1, Σ 2(nᵢ − 1)),)`; `o_ref` is `[1, N]`, N divisible by P. The first
/// `n₀ − 1` steps reduce-scatter the n₀ chunks of `o_ref` along axis 0 (the device at
/// coordinate c₀ ends owning chunk c₀ + 1, reduced over its ring); the next `n₁ − 1`
/// reduce-scatter that chunk in n₁ sub-chunks along axis 1, and so on; then the
/// all-gathers spread the owned chunks back, the last axis first. `capacity` holds one
/// semaphore per axis.
pub(crate) fn torus_allreduce_kernel(
    pl: &Ctx,
    op: ReduceOp,
    h: Handshakes,
    axes: &[String],
    [x_ref, o_ref, hbm_buf, vmem_recv]: [Ref; 4],
    [local_sem, send_sem, recv_sem]: [Sem; 3],
    capacity: &[Sem],
) {
    let coords: Vec<(i64, i64)> = axes
        .iter()
        .map(|a| (pl.axis_index(a), pl.axis_size(a)))
        .collect();
    // The device one step along axis `i` (wrapping around its ring).
    let moved = |i: usize, by: i64| -> DeviceId {
        DeviceId::Mesh(
            coords
                .iter()
                .enumerate()
                .map(|(j, &(c, n))| if j == i { (c + by).rem_euclid(n) } else { c })
                .collect(),
        )
    };
    let rings: Vec<RingPos> = coords
        .iter()
        .enumerate()
        .map(|(i, &(me, n))| RingPos {
            me,
            n,
            left: moved(i, -1),
            right: moved(i, 1),
        })
        .collect();

    let step = pl.program_id(0);
    if step == 0 {
        let barrier_rings = if h.barrier_every_axis {
            &rings[..]
        } else {
            &rings[..1]
        };
        let nbrs: Vec<DeviceId> = barrier_rings
            .iter()
            .flat_map(|r| [r.left.clone(), r.right.clone()])
            .collect();
        mesh_barrier(pl, &nbrs, h.double_barrier);
        pl.copy(o_ref, x_ref);
    }

    // Per axis, the part of `o_ref` its ring works on: (offset, length) of the chunk the
    // axes before it left this device owning.
    let n = o_ref.shape()[1] as i64;
    let mut parts = Vec::with_capacity(coords.len());
    let (mut offset, mut len) = (0i64, n);
    for &(me, size) in &coords {
        parts.push((offset, len));
        len /= size;
        offset += (me + 1).rem_euclid(size) * len;
    }
    let working = step % 2;

    // Step `step` is reduce-scatter along axes 0, 1, …, then all-gather along …, 1, 0.
    let k = coords.len();
    let order = (0..k)
        .map(|i| (i, true))
        .chain((0..k).rev().map(|i| (i, false)));
    let mut first = 0i64;
    for (i, reducing) in order {
        let steps = coords[i].1 - 1;
        if step < first + steps {
            let (offset, len) = parts[i];
            let chunk = len / coords[i].1;
            let block = |c: i64| o_ref.at(0).slice(ds(offset + c * chunk, chunk));
            let capacity_sem = if h.capacity_per_axis {
                capacity[i]
            } else {
                capacity[0]
            };
            let bufs = StepBufs {
                slot: hbm_buf.at(working).slice(ds(0, chunk)),
                stage: vmem_recv.slice(ds(0, chunk)),
                local_sem,
                send_sem,
                recv_sem,
                capacity_sem,
            };
            ring_step(pl, op, &rings[i], reducing, step - first, &block, bufs);
            return;
        }
        first += steps;
    }
}

/// The grid spec of a torus all-reduce named `name` on `mesh`, whose axes are each a
/// ring with its capacity semaphore ([`capacity_of`]).
fn spec(name: &str, mesh: &Mesh, shard: &[usize], dtype: DType) -> Result<GridSpec> {
    let sizes: Vec<usize> = mesh.axes().iter().map(|a| a.1).collect();
    let p = mesh.size();
    let n: usize = shard.iter().product();
    if !n.is_multiple_of(p) {
        let dims: Vec<String> = sizes.iter().map(|s| s.to_string()).collect();
        return Err(Error::bad_input(format!(
            "{name} moves chunks of N/P, but N = {n} elements ({shard:?}) is not divisible by {} = {p}",
            dims.join("x")
        )));
    }
    let first = sizes[0];
    let mut spec = GridSpec::new()
        .input("x_ref", MemorySpace::Vmem, &[1, n], dtype)
        .output("o_ref", MemorySpace::Vmem, &[1, n], dtype)
        .output("hbm_buf", MemorySpace::Any, &[2, n / first], dtype)
        .dma_sem("local_sem")
        .dma_sem("send_sem")
        .dma_sem("recv_sem");
    for (a, _) in mesh.axes() {
        spec = spec.regular_sem(&capacity_of(a));
    }
    Ok(spec
        .vmem("vmem_recv", &[n / first], dtype)
        .grid(&[steps(&sizes).max(1)])
        .collective_id(0))
}

/// A torus all-reduce named `name` on `mesh` with handshakes `h`.
pub(crate) fn call_with(
    name: &'static str,
    op: ReduceOp,
    h: Handshakes,
    mesh: &Mesh,
    shard: &[usize],
    dtype: DType,
) -> Result<PallasCall> {
    let axes: Vec<String> = mesh.axes().iter().map(|a| a.0.clone()).collect();
    // Named once, not at each of the P x steps calls of the kernel.
    let names: Vec<String> = axes.iter().map(|x| capacity_of(x)).collect();
    Ok(PallasCall::new(
        name,
        spec(name, mesh, shard, dtype)?,
        move |pl, a| {
            let capacity: Vec<Sem> = names.iter().map(|x| a.sem(x.as_str())).collect();
            torus_allreduce_kernel(
                pl,
                op,
                h,
                &axes,
                [a.r("x_ref"), a.r("o_ref"), a.r("hbm_buf"), a.r("vmem_recv")],
                [a.sem("local_sem"), a.sem("send_sem"), a.sem("recv_sem")],
                &capacity,
            )
        },
    ))
}

/// The all-reduce over every axis of the mesh (`psum` over all of them), with `--op`.
#[derive(Clone, Debug)]
pub struct AllReduceTorus {
    /// Reduction operator.
    pub op: ReduceOp,
}

/// The capacity semaphore of the ring along `axis`.
pub(crate) fn capacity_of(axis: &str) -> String {
    format!("capacity_{axis}")
}

/// The step table's layout of a torus all-reduce at P devices: one element per device's
/// final chunk, column `o_ref[cK]`.
pub(crate) fn chunk_layout(p: usize) -> TraceLayout {
    TraceLayout {
        shape: vec![p, 1],
        columns: (0..p)
            .map(|c| Column::new(format!("o_ref[c{c}]"), "o_ref", c, 1))
            .collect(),
        labels: Labels::Chunks,
    }
}

impl Collective for AllReduceTorus {
    fn name(&self) -> &'static str {
        "allreduce_torus"
    }

    fn summary(&self) -> &'static str {
        "torus of any axes (a v5p pod: --mesh 16x20x28): reduce-scatter along each axis, then all-gather back; sum of 2(n-1) steps per axis"
    }

    fn span(&self) -> Span {
        Span::Mesh
    }

    // Chunks of N/P: one chunk of rows per device, as the rings'.
    ring_facts!();

    fn with_options(&self, opts: &Options) -> Result<Arc<dyn Collective>> {
        Ok(Arc::new(AllReduceTorus { op: opts.op }))
    }

    /// One element per device's final chunk: column `o_ref[cK]`.
    fn trace_shape(&self, p: usize) -> Option<Vec<usize>> {
        Some(vec![p, 1])
    }

    fn trace_layout(&self, p: usize) -> Option<TraceLayout> {
        Some(chunk_layout(p))
    }

    fn call(&self, mesh: &Mesh, shard: &[usize], dtype: DType) -> Result<PallasCall> {
        call_with(
            "allreduce_torus",
            self.op,
            Handshakes::RIGHT,
            mesh,
            shard,
            dtype,
        )
    }
}
