//! `all_gather(x) @ w`, the collective matmul of a transformer MLP's first layer: x is
//! sharded by rows, every device holds its own w (a column shard of the layer's
//! weights). A unidirectional ring, double-buffered in VMEM: at each step a device
//! forwards the block it holds to its right neighbour and multiplies that block by w
//! while the forward is in flight, so the matrix unit hides the ring's transfers.

use super::barrier::neighbor_barrier;
use super::{matmul_tolerance, Collective, MatmulShape, SUM_TOLERANCE};
use crate::array::{DType, HostArray};
use crate::error::Result;
use crate::ir::DotDims;
use crate::kernel::{Ctx, GridSpec, MemorySpace, PallasCall, Ref, Sem};
use crate::mesh::Mesh;
use crate::model::Traffic;
use crate::trace::{Column, Labels, TraceLayout};

/// What one [`all_gather_matmul_kernel`] does differently (the broken variants).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Order {
    /// The capacity handshake before each forward (the right neighbour says its other
    /// buffer is free).
    pub capacity: bool,
    /// Wait for a block's arrival before multiplying it (else after: the matmul reads
    /// the receive buffer while the DMA may still write it).
    pub wait_first: bool,
}

impl Order {
    /// The kernel as it should be.
    pub const RIGHT: Order = Order {
        capacity: true,
        wait_first: true,
    };
}

/// The refs and semaphores of the kernel, as its spec names them.
#[derive(Clone, Copy, Debug)]
pub struct Bufs {
    /// This device's x, `[M, K]`, in HBM.
    pub x_ref: Ref,
    /// This device's w, `[K, N]`, in VMEM.
    pub w_ref: Ref,
    /// The result, `[P, M, N]` in HBM: block j is `x_j @ w`.
    pub y_ref: Ref,
    /// The VMEM double buffer of x blocks, `[2, M, K]`.
    pub x_buf: Ref,
    /// One product block in VMEM, `[M, N]`, on its way to `y_ref`.
    pub y_stage: Ref,
    /// Local DMAs (x in, products out).
    pub local_sem: Sem,
    /// Send completions of the forwards.
    pub send_sem: Sem,
    /// Receive completions of the forwards (one in flight at a time per device: the
    /// capacity handshake comes after the wait for the previous one).
    pub recv_sem: Sem,
    /// The capacity handshake (REGULAR): "my other buffer is free".
    pub capacity_sem: Sem,
}

/// Step `s` of P on device `i`: block `b = (i − s) mod P` of the gathered x is in
/// `x_buf[s % 2]` (its own at step 0, copied from `x_ref`; the left neighbour's push of
/// step s−1 otherwise). The device waits for it, tells its left neighbour that its
/// other buffer is free, waits until the right neighbour says the same, forwards the
/// block into the right neighbour's other buffer, computes `x_b @ w` on the MXU while
/// the forward is in flight, and sends the product to `y_ref[b]` by a local DMA (waited
/// a step later, before the stage is written again). The last step forwards nothing.
pub fn all_gather_matmul_kernel(pl: &Ctx, b: Bufs) {
    all_gather_matmul_kernel_with(pl, Order::RIGHT, b)
}

/// [`all_gather_matmul_kernel`] in the order `o` (other than [`Order::RIGHT`] only for
/// the broken variants).
pub(crate) fn all_gather_matmul_kernel_with(pl: &Ctx, o: Order, b: Bufs) {
    let p = pl.num_devices();
    let step = pl.program_id(0);
    let me = pl.axis_index("x");
    let right = (me + 1) % p;
    let left = (me - 1 + p) % p;
    let working = step % 2;
    let receiving = 1 - working;
    let block = (me - step).rem_euclid(p);
    let last = step == p - 1;

    let local = pl.make_async_copy(b.x_ref, b.x_buf.at(0), b.local_sem);
    // The forward of this step, and (for its wait) the one that filled this step's buffer.
    let forward = pl.make_async_remote_copy(
        b.x_buf.at(working),
        b.x_buf.at(receiving),
        b.send_sem,
        b.recv_sem,
        right,
    );
    // Tell the left neighbour my other buffer is free (this step reads only
    // `working`), wait for the right neighbour's word, forward the block.
    let hand_on = || {
        if !last {
            if o.capacity {
                pl.semaphore_signal(b.capacity_sem, 1, left);
                pl.semaphore_wait(b.capacity_sem, 1);
            }
            forward.start();
        }
    };
    if step == 0 {
        neighbor_barrier(pl, left, right, true);
        local.start();
        local.wait();
    }
    if o.wait_first {
        if step > 0 {
            forward.wait_recv();
        }
        hand_on();
    }
    let product = {
        let x = pl.read(b.x_buf.at(working));
        let w = pl.read(b.w_ref);
        let dims = DotDims {
            lhs_contract: vec![1],
            rhs_contract: vec![0],
            ..DotDims::default()
        };
        pl.dot_general(&x, &w, dims, b.y_ref.dtype())
    };
    if !o.wait_first {
        // The broken order: the block was multiplied before it was known to be there.
        if step > 0 {
            forward.wait_recv();
        }
        hand_on();
    }
    let drain = pl.make_async_copy(b.y_stage, b.y_ref.at(block), b.local_sem);
    if step > 0 {
        // The previous product's copy out of the stage (same shape, same semaphore).
        drain.wait();
    }
    pl.store(b.y_stage, &product);
    drain.start();
    if !last {
        forward.wait_send();
    } else {
        drain.wait();
    }
}

/// The spec of [`all_gather_matmul_kernel`] on `p` devices.
pub(crate) fn spec(p: usize, s: MatmulShape, dtype: DType) -> GridSpec {
    GridSpec::new()
        .input("x_ref", MemorySpace::Any, &s.x(), dtype)
        .input("w_ref", MemorySpace::Vmem, &s.w(), dtype)
        .output("y_ref", MemorySpace::Any, &[p, s.m, s.n], dtype)
        .vmem("x_buf", &[2, s.m, s.k], dtype)
        .vmem("y_stage", &[s.m, s.n], dtype)
        .dma_sem("local_sem")
        .dma_sem("send_sem")
        .dma_sem("recv_sem")
        .regular_sem("capacity_sem")
        .grid(&[p])
        .collective_id(0)
}

/// The kernel's refs and semaphores from its arguments.
pub(crate) fn bufs(a: &crate::kernel::Args) -> Bufs {
    Bufs {
        x_ref: a.r("x_ref"),
        w_ref: a.r("w_ref"),
        y_ref: a.r("y_ref"),
        x_buf: a.r("x_buf"),
        y_stage: a.r("y_stage"),
        local_sem: a.sem("local_sem"),
        send_sem: a.sem("send_sem"),
        recv_sem: a.sem("recv_sem"),
        capacity_sem: a.sem("capacity_sem"),
    }
}

/// A call of the kernel in order `o`.
pub(crate) fn call_with(
    o: Order,
    mesh: &Mesh,
    shard: &[usize],
    dtype: DType,
) -> Result<PallasCall> {
    let s = MatmulShape::of("all_gather_matmul", shard)?;
    Ok(PallasCall::new(
        "all_gather_matmul",
        spec(mesh.size(), s, dtype),
        move |pl, a| all_gather_matmul_kernel_with(pl, o, bufs(a)),
    ))
}

/// `y = all_gather(x) @ w` on a ring.
#[derive(Clone, Debug, Default)]
pub struct AllGatherMatmul;

impl Collective for AllGatherMatmul {
    fn name(&self) -> &str {
        "all_gather_matmul"
    }

    fn summary(&self) -> &str {
        "y = all_gather(x) @ w: ring, VMEM double buffer; P steps, each forwards one x block (N bytes) while the MXU multiplies it"
    }

    fn call(&self, mesh: &Mesh, shard: &[usize], dtype: DType) -> Result<PallasCall> {
        call_with(Order::RIGHT, mesh, shard, dtype)
    }

    fn reference(&self, inputs: &[Vec<HostArray>]) -> Result<Vec<Vec<HostArray>>> {
        Ok(super::reference::all_gather_matmul(inputs))
    }

    fn traffic(&self) -> Traffic {
        Traffic::AllGather
    }

    fn tolerance(&self) -> f32 {
        SUM_TOLERANCE
    }

    fn tolerance_at(&self, shard: &[usize], dtype: DType, _devices: usize) -> f32 {
        let k = MatmulShape::of(self.name(), shard).map_or(1, |s| s.k);
        matmul_tolerance(dtype, k)
    }

    /// x's bytes: what the ring moves.
    fn shard_bytes(&self, shard: &[usize], dtype: DType) -> u64 {
        MatmulShape::of(self.name(), shard).map_or(0, |s| (s.m * s.k * dtype.size()) as u64)
    }

    fn output_shape(&self, devices: usize, shard: &[usize]) -> Vec<usize> {
        MatmulShape::of(self.name(), shard)
            .map_or_else(|_| shard.to_vec(), |s| vec![devices * s.m, s.n])
    }

    fn default_shape(&self, _p: usize) -> Vec<usize> {
        vec![8, 128, 128]
    }

    /// x of `M x K` per device (size: the gathered x), w of `K x K`, K = 128 (or the
    /// whole x's elements, in one row, when there are fewer).
    fn bench_shape(&self, p: usize, size: u64, dtype: DType) -> Option<Vec<usize>> {
        let elems = (size / dtype.size() as u64 / p.max(1) as u64) as usize;
        let k = elems.min(128);
        (k > 0).then(|| vec![elems / k, k, k])
    }

    fn apply_dims(&self) -> (usize, usize) {
        (0, 0)
    }

    /// Columns for x shards of 1 x 2 and w of 2 x 2: each result block `y_ref[j]` shows
    /// `f(xj)` once the product of x_j has reached it; `x_buf` the block in transit.
    fn trace_layout(&self, p: usize) -> Option<TraceLayout> {
        let mut columns: Vec<Column> = (0..p)
            .map(|j| Column::new(format!("y_ref[{j}]"), "y_ref", j * 2, 2))
            .collect();
        columns.push(Column::new("x_buf[0]", "x_buf", 0, 2));
        columns.push(Column::new("x_buf[1]", "x_buf", 2, 2));
        Some(TraceLayout {
            shape: vec![1, 2, 2],
            columns,
            labels: Labels::Whole { elems: 2 },
        })
    }
}
