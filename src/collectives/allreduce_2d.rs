//! A 2-D all-reduce on an X x Y torus (axes x, y), one kernel over the whole mesh:
//! a ring reduce-scatter along x, a ring all-reduce along y of the chunk each device
//! then owns, and a ring all-gather along x. Every push names its target by mesh
//! coordinates `(x, y)`; each axis has its own capacity semaphore.

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

/// Grid steps of the kernel on an `nx` x `ny` torus: `2(X−1)` along x, `2(Y−1)` along y.
pub fn steps(nx: usize, ny: usize) -> usize {
    2 * (nx - 1) + 2 * (ny - 1)
}

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
    [local_sem, send_sem, recv_sem]: [Sem; 3],
    [capacity_x, capacity_y]: [Sem; 2],
    vmem_recv: Ref,
) {
    allreduce_2d_kernel_with(
        pl,
        op,
        Handshakes2d::RIGHT,
        [x_ref, o_ref, hbm_buf, vmem_recv],
        [local_sem, send_sem, recv_sem],
        [capacity_x, capacity_y],
    )
}

/// Which handshakes an allreduce_2d kernel makes right (the broken variants get one wrong).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Handshakes2d {
    /// The entry barrier includes the neighbours along y (not only along x).
    pub barrier_y: bool,
    /// Each axis has its own capacity semaphore (else x and y share `capacity_x`).
    pub capacity_per_axis: bool,
    /// The barrier's second round (the docs' double barrier).
    pub double_barrier: bool,
}

impl Handshakes2d {
    /// As the shipped kernel has them.
    pub const RIGHT: Handshakes2d = Handshakes2d {
        barrier_y: true,
        capacity_per_axis: true,
        double_barrier: true,
    };
}

/// [`allreduce_2d_kernel`] with its handshakes switchable (off only for the variants).
pub(crate) fn allreduce_2d_kernel_with(
    pl: &Ctx,
    op: ReduceOp,
    h: Handshakes2d,
    [x_ref, o_ref, hbm_buf, vmem_recv]: [Ref; 4],
    [local_sem, send_sem, recv_sem]: [Sem; 3],
    [capacity_x, capacity_y]: [Sem; 2],
) {
    let capacity_y = if h.capacity_per_axis {
        capacity_y
    } else {
        capacity_x
    };
    let two_d = pl.has_axis("y");
    let (x, nx) = (pl.axis_index("x"), pl.axis_size("x"));
    let (y, ny) = if two_d {
        (pl.axis_index("y"), pl.axis_size("y"))
    } else {
        (0, 1)
    };
    let id = |x: i64, y: i64| -> DeviceId {
        let (x, y) = (x.rem_euclid(nx), y.rem_euclid(ny));
        DeviceId::Mesh(if two_d { vec![x, y] } else { vec![x] })
    };
    let along_x = RingPos {
        me: x,
        n: nx,
        left: id(x - 1, y),
        right: id(x + 1, y),
    };
    let along_y = RingPos {
        me: y,
        n: ny,
        left: id(x, y - 1),
        right: id(x, y + 1),
    };

    let step = pl.program_id(0);
    if step == 0 {
        let rings: &[&RingPos] = if h.barrier_y {
            &[&along_x, &along_y]
        } else {
            &[&along_x]
        };
        let nbrs: Vec<DeviceId> = rings
            .iter()
            .flat_map(|r| [r.left.clone(), r.right.clone()])
            .collect();
        mesh_barrier(pl, &nbrs, h.double_barrier);
        pl.copy(o_ref, x_ref);
    }

    let cx = o_ref.shape()[1] as i64 / nx; // a chunk along x
    let cy = cx / ny; // a sub-chunk along y of the chunk this device owns
    let owned = (x + 1).rem_euclid(nx);
    let chunk_x = |c: i64| o_ref.at(0).slice(ds(c * cx, cx));
    let chunk_y = |c: i64| o_ref.at(0).slice(ds(owned * cx + c * cy, cy));
    let working = step % 2;
    let bufs = |len: i64, capacity_sem: Sem| StepBufs {
        slot: hbm_buf.at(working).slice(ds(0, len)),
        stage: vmem_recv.slice(ds(0, len)),
        local_sem,
        send_sem,
        recv_sem,
        capacity_sem,
    };

    let (rs_x, ar_y) = (nx - 1, 2 * (ny - 1));
    if step < rs_x {
        ring_step(pl, op, &along_x, true, step, &chunk_x, bufs(cx, capacity_x));
    } else if step < rs_x + ar_y {
        let t = step - rs_x;
        let (reducing, t) = if t < ny - 1 {
            (true, t)
        } else {
            (false, t - (ny - 1))
        };
        ring_step(
            pl,
            op,
            &along_y,
            reducing,
            t,
            &chunk_y,
            bufs(cy, capacity_y),
        );
    } else if step < rs_x + ar_y + rs_x {
        let t = step - rs_x - ar_y;
        ring_step(pl, op, &along_x, false, t, &chunk_x, bufs(cx, capacity_x));
    }
}

/// The 2-D torus all-reduce (`psum` over both axes), with `--op`.
#[derive(Clone, Debug)]
pub struct AllReduce2d {
    /// Reduction operator.
    pub op: ReduceOp,
}

/// The torus `(X, Y)` of `mesh`: axes x and y, or x alone (Y = 1).
fn torus(mesh: &Mesh) -> Result<(usize, usize)> {
    match mesh.axes() {
        [(a, nx)] if a == "x" => Ok((*nx, 1)),
        [(a, nx), (b, ny)] if a == "x" && b == "y" => Ok((*nx, *ny)),
        axes => {
            let names: Vec<&str> = axes.iter().map(|a| a.0.as_str()).collect();
            Err(Error::bad_input(format!(
                "allreduce_2d runs on a mesh with axes x and y (e.g. --mesh 4x4), not on axes {}",
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
        Some(TraceLayout {
            shape: vec![p, 1],
            columns: (0..p)
                .map(|c| Column::new(format!("o_ref[c{c}]"), "o_ref", c, 1))
                .collect(),
            labels: Labels::Chunks,
        })
    }

    fn call(&self, mesh: &Mesh, shard: &[usize], dtype: DType) -> Result<PallasCall> {
        let spec = spec(mesh, shard, dtype)?;
        let op = self.op;
        Ok(PallasCall::new("allreduce_2d", spec, move |pl, a| {
            allreduce_2d_kernel(
                pl,
                op,
                a.r("x_ref"),
                a.r("o_ref"),
                a.r("hbm_buf"),
                [a.sem("local_sem"), a.sem("send_sem"), a.sem("recv_sem")],
                [a.sem("capacity_x"), a.sem("capacity_y")],
                a.r("vmem_recv"),
            )
        }))
    }
}

/// The grid spec of allreduce_2d on `mesh` (axes x and y, or x alone).
pub(crate) fn spec(mesh: &Mesh, shard: &[usize], dtype: DType) -> Result<GridSpec> {
    let (nx, ny) = torus(mesh)?;
    let p = nx * ny;
    let n: usize = shard.iter().product();
    if !n.is_multiple_of(p) {
        return Err(Error::bad_input(format!(
                "allreduce_2d moves chunks of N/(X·Y), but N = {n} elements ({shard:?}) is not divisible by {nx}x{ny} = {p}"
            )));
    }
    let spec = GridSpec::new()
        .input("x_ref", MemorySpace::Vmem, &[1, n], dtype)
        .output("o_ref", MemorySpace::Vmem, &[1, n], dtype)
        .output("hbm_buf", MemorySpace::Any, &[2, n / nx], dtype)
        .dma_sem("local_sem")
        .dma_sem("send_sem")
        .dma_sem("recv_sem")
        .regular_sem("capacity_x")
        .regular_sem("capacity_y")
        .vmem("vmem_recv", &[n / nx], dtype)
        .grid(&[steps(nx, ny).max(1)])
        .collective_id(0);
    Ok(spec)
}

/// The kernel with handshakes `h`, for the broken variants.
pub(crate) fn call_with(
    h: Handshakes2d,
    mesh: &Mesh,
    shard: &[usize],
    dtype: DType,
) -> Result<PallasCall> {
    Ok(PallasCall::new(
        "allreduce_2d",
        spec(mesh, shard, dtype)?,
        move |pl, a| {
            allreduce_2d_kernel_with(
                pl,
                ReduceOp::Sum,
                h,
                [a.r("x_ref"), a.r("o_ref"), a.r("hbm_buf"), a.r("vmem_recv")],
                [a.sem("local_sem"), a.sem("send_sem"), a.sem("recv_sem")],
                [a.sem("capacity_x"), a.sem("capacity_y")],
            )
        },
    ))
}
