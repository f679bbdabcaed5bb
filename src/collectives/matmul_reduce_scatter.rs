//! `psum_scatter(x @ w)`, the collective matmul of a transformer MLP's second layer: x
//! is sharded by columns (the contracted dimension), every device holds the matching
//! rows of w, and the partial products are summed over the devices and scattered by
//! rows. A unidirectional ring reduce-scatter in which the partial sums travel: at each
//! step a device multiplies the row block the ring is working on, adds the partial sum
//! its left neighbour sent for that block, and pushes the sum on to the right, so each
//! block's product is computed while the previous sums are in flight.

use super::barrier::neighbor_barrier;
use super::{accumulator, matmul_tolerance, Collective, MatmulShape, SUM_TOLERANCE};
use crate::array::{DType, HostArray};
use crate::error::{Error, Result};
use crate::ir::DotDims;
use crate::kernel::{ds, Ctx, GridSpec, MemorySpace, PallasCall, Ref, Sem};
use crate::mesh::Mesh;
use crate::model::Traffic;
use crate::trace::{Column, Labels, TraceLayout};

/// What one [`matmul_reduce_scatter_kernel`] does differently (the broken variants).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Order {
    /// The capacity handshake before each push (the right neighbour says the receive
    /// buffer is free).
    pub capacity: bool,
    /// Wait for the left neighbour's partial sum before adding it (else the add reads
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
    /// This device's x, `[M, K]` in HBM: P row blocks of `M/P`.
    pub x_ref: Ref,
    /// This device's w, `[K, N]`, in VMEM.
    pub w_ref: Ref,
    /// The result, `[M/P, N]` in VMEM: row block `i` of `Σ_j x_j @ w_j`.
    pub o_ref: Ref,
    /// The VMEM double buffer of x row blocks, `[2, M/P, K]`.
    pub x_blk: Ref,
    /// Partial sums on their way to the right neighbour, `[2, M/P, N]` in f32 (i32).
    pub send_buf: Ref,
    /// Partial sums from the left neighbour, `[2, M/P, N]`.
    pub recv_buf: Ref,
    /// Local DMAs of x blocks.
    pub local_sem: Sem,
    /// Send completions of the pushes.
    pub send_sem: Sem,
    /// Receive completions (one push from the left in flight at a time: the capacity
    /// word for the next slot comes after the wait for this one).
    pub recv_sem: Sem,
    /// The capacity handshake (REGULAR).
    pub capacity_sem: Sem,
}

/// Step `s` of P on device `i` works on row block `b = (i − 1 − s) mod P`: it waits for
/// `x[b]` (prefetched into `x_blk[s % 2]` a step earlier) and starts the prefetch of the
/// next block, tells the left neighbour the slot it will push into next is free,
/// multiplies `x[b] @ w` on the MXU (f32 or i32 accumulation), waits for the left
/// neighbour's partial sum of block b (pushed at its step s−1 into `recv_buf[s % 2]`) and
/// adds it, waits until its own previous push has left, and pushes the sum into the
/// right neighbour's `recv_buf[(s+1) % 2]` once the right neighbour says that slot is
/// free. At the last step, `b = i`: the sum is the whole reduction of block i, rounded
/// once into `o_ref`.
pub fn matmul_reduce_scatter_kernel(pl: &Ctx, b: Bufs) {
    matmul_reduce_scatter_kernel_with(pl, Order::RIGHT, b)
}

/// [`matmul_reduce_scatter_kernel`] in the order `o` (other than [`Order::RIGHT`] only
/// for the broken variants).
pub(crate) fn matmul_reduce_scatter_kernel_with(pl: &Ctx, o: Order, b: Bufs) {
    let p = pl.num_devices();
    let step = pl.program_id(0);
    let me = pl.axis_index("x");
    let right = (me + 1) % p;
    let left = (me - 1 + p) % p;
    let slot = step % 2;
    let last = step == p - 1;
    let rows = b.o_ref.shape()[0] as i64;
    let block = |s: i64| (me - 1 - s).rem_euclid(p);
    let fetch = |s: i64| {
        pl.make_async_copy(
            b.x_ref.slice(ds(block(s) * rows, rows)),
            b.x_blk.at(s % 2),
            b.local_sem,
        )
    };
    // This step's push, and the one that fills this step's receive slot.
    let push = pl.make_async_remote_copy(
        b.send_buf.at(slot),
        b.recv_buf.at(1 - slot),
        b.send_sem,
        b.recv_sem,
        right,
    );
    let arrival = pl.make_async_remote_copy(
        b.send_buf.at(1 - slot),
        b.recv_buf.at(slot),
        b.send_sem,
        b.recv_sem,
        right,
    );
    // My slot `1 - slot` was last read at step s−1, and the push that fills `slot` has
    // landed: the left neighbour may push into `1 - slot`.
    let free = || {
        if o.capacity && !last {
            pl.semaphore_signal(b.capacity_sem, 1, left);
        }
    };

    if step == 0 {
        fetch(0).start();
        neighbor_barrier(pl, left, right, true);
    }
    fetch(step).wait();
    if !last {
        fetch(step + 1).start();
    }
    let acc = accumulator(b.o_ref.dtype());
    let product = {
        let x = pl.read(b.x_blk.at(slot));
        let w = pl.read(b.w_ref);
        let dims = DotDims {
            lhs_contract: vec![1],
            rhs_contract: vec![0],
            ..DotDims::default()
        };
        pl.dot_general(&x, &w, dims, acc)
    };
    let sum = if step == 0 {
        free();
        product
    } else {
        if o.wait_first {
            arrival.wait_recv();
            free();
        }
        let s = &product + &pl.read(b.recv_buf.at(slot));
        if !o.wait_first {
            arrival.wait_recv();
            free();
        }
        s
    };
    if step > 0 {
        // My previous push (from the other send slot) has left.
        arrival.wait_send();
    }
    if last {
        if b.o_ref.dtype() == acc {
            pl.store(b.o_ref, &sum);
        } else {
            pl.store(b.o_ref, &sum.astype(b.o_ref.dtype()));
        }
    } else {
        pl.store(b.send_buf.at(slot), &sum);
        if o.capacity {
            pl.semaphore_wait(b.capacity_sem, 1);
        }
        push.start();
    }
}

/// The spec of [`matmul_reduce_scatter_kernel`] on `p` devices.
pub(crate) fn spec(p: usize, s: MatmulShape, dtype: DType) -> GridSpec {
    let rows = s.m / p;
    let acc = accumulator(dtype);
    GridSpec::new()
        .input("x_ref", MemorySpace::Any, &s.x(), dtype)
        .input("w_ref", MemorySpace::Vmem, &s.w(), dtype)
        .output("o_ref", MemorySpace::Vmem, &[rows, s.n], dtype)
        .vmem("x_blk", &[2, rows, s.k], dtype)
        .vmem("send_buf", &[2, rows, s.n], acc)
        .vmem("recv_buf", &[2, rows, s.n], acc)
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
        o_ref: a.r("o_ref"),
        x_blk: a.r("x_blk"),
        send_buf: a.r("send_buf"),
        recv_buf: a.r("recv_buf"),
        local_sem: a.sem("local_sem"),
        send_sem: a.sem("send_sem"),
        recv_sem: a.sem("recv_sem"),
        capacity_sem: a.sem("capacity_sem"),
    }
}

/// The shape `shard` gives at `p` devices (M a multiple of P).
fn shape_at(p: usize, shard: &[usize]) -> Result<MatmulShape> {
    let s = MatmulShape::of("matmul_reduce_scatter", shard)?;
    if s.m % p.max(1) != 0 {
        return Err(Error::bad_input(format!(
            "`matmul_reduce_scatter` scatters x @ w by rows: M = {} is not divisible by {p} devices",
            s.m
        )));
    }
    Ok(s)
}

/// A call of the kernel in order `o`.
pub(crate) fn call_with(
    o: Order,
    mesh: &Mesh,
    shard: &[usize],
    dtype: DType,
) -> Result<PallasCall> {
    let s = shape_at(mesh.size(), shard)?;
    Ok(PallasCall::new(
        "matmul_reduce_scatter",
        spec(mesh.size(), s, dtype),
        move |pl, a| matmul_reduce_scatter_kernel_with(pl, o, bufs(a)),
    ))
}

/// `y = psum_scatter(x @ w)` on a ring.
#[derive(Clone, Debug, Default)]
pub struct MatmulReduceScatter;

impl Collective for MatmulReduceScatter {
    fn name(&self) -> &str {
        "matmul_reduce_scatter"
    }

    fn summary(&self) -> &str {
        "y = psum_scatter(x @ w): ring, the partial sums travel (f32); P steps, each multiplies one row block while the previous sums (N/P bytes of x @ w) are in flight"
    }

    fn call(&self, mesh: &Mesh, shard: &[usize], dtype: DType) -> Result<PallasCall> {
        call_with(Order::RIGHT, mesh, shard, dtype)
    }

    fn reference(&self, inputs: &[Vec<HostArray>]) -> Result<Vec<Vec<HostArray>>> {
        Ok(super::reference::matmul_reduce_scatter(inputs))
    }

    fn traffic(&self) -> Traffic {
        Traffic::ReduceScatter
    }

    fn tolerance(&self) -> f32 {
        SUM_TOLERANCE
    }

    /// Each result sums `P · K` products (and P partial sums).
    fn tolerance_at(&self, shard: &[usize], dtype: DType, devices: usize) -> f32 {
        let k = MatmulShape::of(self.name(), shard).map_or(1, |s| s.k);
        matmul_tolerance(dtype, devices.max(1) * (k + 1))
    }

    /// The partial product `x @ w` in its accumulator type: what is reduce-scattered.
    fn shard_bytes(&self, shard: &[usize], dtype: DType) -> u64 {
        MatmulShape::of(self.name(), shard)
            .map_or(0, |s| (s.m * s.n * accumulator(dtype).size()) as u64)
    }

    fn output_shape(&self, devices: usize, shard: &[usize]) -> Vec<usize> {
        MatmulShape::of(self.name(), shard)
            .map_or_else(|_| shard.to_vec(), |s| vec![s.m / devices.max(1), s.n])
    }

    fn rows_multiple(&self, p: usize) -> usize {
        p
    }

    fn default_shape(&self, p: usize) -> Vec<usize> {
        vec![8usize.next_multiple_of(p.max(1)), 128, 128]
    }

    /// x of `M x K`, w of `K x K` (size: the partial product, `M x K` in the accumulator
    /// type), K = 128 (or less, for sizes below P rows of 128), M a multiple of P.
    fn bench_shape(&self, p: usize, size: u64, dtype: DType) -> Option<Vec<usize>> {
        let p = p.max(1);
        let elems = (size / accumulator(dtype).size() as u64) as usize;
        let k = (elems / p).min(128);
        (k > 0).then(|| vec![elems / k / p * p, k, k])
    }

    /// Columns for one-row blocks of x (`x_i` is P x 2, w 2 x 2): the partial sums in
    /// `recv_buf` / `send_buf` show `f(x1.2,x0.2)` (block 2 of devices 1 and 0 so far),
    /// `o_ref` the whole reduction of the device's block.
    fn trace_layout(&self, p: usize) -> Option<TraceLayout> {
        let mut columns = Vec::new();
        for name in ["recv_buf", "send_buf"] {
            for k in 0..2 {
                columns.push(Column::new(format!("{name}[{k}]"), name, k * 2, 2));
            }
        }
        columns.push(Column::new("o_ref", "o_ref", 0, 2));
        Some(TraceLayout {
            shape: vec![p, 2, 2],
            columns,
            labels: Labels::Blocks {
                elems: 2,
                per_shard: p,
            },
        })
    }
}
