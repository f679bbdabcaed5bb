//! The ring all-reduce of seed 003: a reduce-scatter of P−1 steps then an all-gather of
//! P−1 steps, each moving one N/P chunk. Two versions on equal data:
//! - [`ring_allreduce_kernel`]: as written in the seed, in its pull model (a
//!   `[2(P−1), P]` signal matrix, non-decrementing waits, `remote_load`);
//! - [`ring_allreduce_push_kernel`]: the same ring in the TPU model (push-only remote
//!   DMAs into an HBM double buffer, DMA/REGULAR semaphores, a capacity handshake).

use super::barrier::neighbor_barrier;
use super::ring::{ring_step, RingPos, StepBufs};
use super::{Collective, Options, Takes};
use crate::array::{DType, HostArray};
use crate::error::{Error, Result};
use crate::kernel::{
    ds, Ctx, GridSpec, MemorySpace, NotifyOp, PallasCall, ReduceOp, Ref, Sem, WaitCmp,
};
use crate::mesh::Mesh;
use crate::model::Traffic;
use crate::trace::{Column, Labels, TraceLayout};
use std::sync::Arc;

/// The seed-003 kernel, line for line. `scratch` is the `[1, N]` working buffer; `recv`
/// and `acc` are the seed's tiles, held in VMEM. The seed elides its prologue: the input
/// becomes the working buffer, and signal row 0 tells the right neighbour it is ready.
pub fn ring_allreduce_kernel(
    pl: &Ctx,
    op: ReduceOp,
    x_ref: Ref,
    scratch: Ref,
    signal: Sem,
    recv: Ref,
    acc: Ref,
) {
    ring_allreduce_kernel_with(pl, op, false, x_ref, scratch, signal, recv, acc)
}

/// [`ring_allreduce_kernel`]; `c_style_left` falls into the seed's trap
/// `(my_rank - 1) % nranks` (−1 at rank 0), only for the `negative-left` variant.
#[allow(clippy::too_many_arguments)]
pub(crate) fn ring_allreduce_kernel_with(
    pl: &Ctx,
    op: ReduceOp,
    c_style_left: bool,
    x_ref: Ref,
    scratch: Ref,
    signal: Sem,
    recv: Ref,
    acc: Ref,
) {
    let nranks = pl.num_devices();
    let my_rank = pl.axis_index("x");
    let chunk = scratch.shape()[1] as i64 / nranks;
    let at = |idx: i64| scratch.at(0).slice(ds(idx * chunk, chunk));

    let left = if c_style_left {
        (my_rank - 1) % nranks // Rust's % truncates like C's: -1 at rank 0
    } else {
        (my_rank - 1 + nranks) % nranks // never negative
    };
    let right = (my_rank + 1) % nranks;

    pl.copy(scratch, x_ref);
    if nranks > 1 {
        pl.notify(signal, right, [0, my_rank], 1, NotifyOp::AtomicAdd);
    }

    // Reduce-scatter: (nr-1) steps. `in_iteration`: reports name the step.
    for s in 0..nranks - 1 {
        pl.in_iteration(s as usize, || {
            let step = s + 1;
            let recv_add_idx = (my_rank - step - 1 + nranks) % nranks;
            let left_send_idx = (left - step + nranks) % nranks;
            // Wait for the left neighbour's chunk of round s (signal row s), then:
            pl.wait(signal, [s, left], 1, WaitCmp::Ge);
            pl.remote_load(recv, at(left_send_idx), left); // recv = remote_load(scratch, peer=left, ...)
            pl.copy(acc, at(recv_add_idx)); // acc = pl.load(scratch, ...)
            pl.accumulate(acc, recv, op); // acc = pl.add(acc, recv)
            pl.copy(at(recv_add_idx), acc); // scratch = pl.store(acc, ...)
                                            // The store readies the next round's send: notify the right neighbour (row s+1).
            pl.notify(signal, right, [s + 1, my_rank], 1, NotifyOp::AtomicAdd);
            pl.trace_step(format!("reduce-scatter {s}")); // tpusim: a row of the step table
        });
    }

    // All-gather: (nr-1) steps (rows nranks-1 .. 2*(nranks-1)-1): copy the left
    // neighbour's reduced chunk into the local chunk.
    for t in 0..nranks - 1 {
        pl.in_iteration(t as usize, || {
            let row = nranks - 1 + t;
            let idx = (left - t + nranks) % nranks;
            pl.wait(signal, [row, left], 1, WaitCmp::Ge);
            pl.remote_load(recv, at(idx), left);
            pl.copy(at(idx), recv);
            if row + 1 < 2 * (nranks - 1) {
                pl.notify(signal, right, [row + 1, my_rank], 1, NotifyOp::AtomicAdd);
            }
            pl.trace_step(format!("all-gather {t}")); // tpusim: a row of the step table
        });
    }
}

/// The same two-phase ring in the TPU model. Grid `(2(P−1),)`: steps `0..P−1` reduce
/// (push chunk `i−s`, add the received chunk `i−s−1`), steps `P−1..` gather (push
/// the reduced chunk `i+1−t`, store the received chunk `i−t`).
#[allow(clippy::too_many_arguments)]
pub fn ring_allreduce_push_kernel(
    pl: &Ctx,
    op: ReduceOp,
    x_ref: Ref,
    o_ref: Ref,
    hbm_buf: Ref,
    local_sem: Sem,
    send_sem: Sem,
    recv_sem: Sem,
    capacity_sem: Sem,
    vmem_recv: Ref,
) {
    ring_allreduce_push_kernel_with(
        pl,
        op,
        true,
        [x_ref, o_ref, hbm_buf, vmem_recv],
        [local_sem, send_sem, recv_sem, capacity_sem],
    )
}

/// [`ring_allreduce_push_kernel`], its barrier in two rounds or (a broken variant) one.
pub(crate) fn ring_allreduce_push_kernel_with(
    pl: &Ctx,
    op: ReduceOp,
    double_barrier: bool,
    [x_ref, o_ref, hbm_buf, vmem_recv]: [Ref; 4],
    [local_sem, send_sem, recv_sem, capacity_sem]: [Sem; 4],
) {
    let p = pl.num_devices();
    let step = pl.program_id(0);
    let working = step % 2;
    let my_id = pl.axis_index("x");
    let right = (my_id + 1) % p;
    let left = (my_id - 1 + p) % p;
    let chunk = o_ref.shape()[1] as i64 / p;
    let block = |c: i64| o_ref.at(0).slice(ds(c * chunk, chunk));

    if step == 0 {
        neighbor_barrier(pl, left, right, double_barrier);
        pl.copy(o_ref, x_ref);
    }
    if p == 1 {
        return;
    }
    let reducing = step < p - 1;
    let t = if reducing { step } else { step - (p - 1) };
    let ring = RingPos {
        me: my_id,
        n: p,
        left: left.into(),
        right: right.into(),
    };
    let bufs = StepBufs {
        slot: hbm_buf.at(working),
        stage: vmem_recv,
        local_sem,
        send_sem,
        recv_sem,
        capacity_sem,
    };
    ring_step(pl, op, &ring, reducing, t, &block, bufs);
}

/// Elements per device for a per-device shape, checked divisible by P.
fn ring_len(name: &str, p: usize, shard: &[usize]) -> Result<usize> {
    let n: usize = shard.iter().product();
    if !n.is_multiple_of(p) {
        return Err(Error::bad_input(format!(
            "{name} moves N/P chunks, but N = {n} elements ({shard:?}) is not divisible by P={p}"
        )));
    }
    Ok(n)
}

/// The grid spec of the seed-003 kernel.
pub(crate) fn pull_spec(p: usize, shard: &[usize], dtype: DType) -> Result<GridSpec> {
    let n = ring_len("ring_allreduce", p, shard)?;
    Ok(GridSpec::new()
        .input("x_ref", MemorySpace::Vmem, &[1, n], dtype)
        .output("scratch", MemorySpace::Vmem, &[1, n], dtype)
        .signal_matrix("signal", 2 * (p - 1), p)
        .vmem("recv", &[n / p], dtype)
        .vmem("acc", &[n / p], dtype)
        .pull_model())
}

/// The seed-003 ring all-reduce (pull model).
#[derive(Clone, Debug)]
pub struct RingAllReduce {
    /// Reduction operator.
    pub op: ReduceOp,
}

/// What the ring all-reduces (and `allreduce_2d`, built from the same ring step) are:
/// an all-reduce of one chunk of rows per device that takes `--op`.
macro_rules! ring_facts {
    () => {
        fn reference(&self, inputs: &[Vec<HostArray>]) -> Result<Vec<Vec<HostArray>>> {
            Ok(super::reference::all_reduce_everywhere(inputs, self.op))
        }

        fn tolerance(&self) -> f32 {
            super::SUM_TOLERANCE
        }

        fn reduction(&self) -> Option<ReduceOp> {
            Some(self.op)
        }

        fn traffic(&self) -> Traffic {
            Traffic::AllReduce
        }

        /// One chunk of rows per device.
        fn rows_multiple(&self, p: usize) -> usize {
            p
        }

        fn takes(&self) -> Takes {
            Takes {
                op: true,
                ..Takes::default()
            }
        }
    };
}
pub(super) use ring_facts;

impl Collective for RingAllReduce {
    ring_facts!();

    fn with_options(&self, opts: &Options) -> Result<Arc<dyn Collective>> {
        Ok(Arc::new(RingAllReduce { op: opts.op }))
    }

    fn trace_shape(&self, p: usize) -> Option<Vec<usize>> {
        Some(vec![p, 1])
    }

    fn trace_layout(&self, p: usize) -> Option<TraceLayout> {
        Some(TraceLayout {
            shape: vec![p, 1],
            columns: (0..p)
                .map(|c| Column::new(format!("scratch[c{c}]"), "scratch", c, 1))
                .chain([
                    Column::new("recv", "recv", 0, 1),
                    Column::new("acc", "acc", 0, 1),
                ])
                .collect(),
            labels: Labels::Chunks,
        })
    }

    fn name(&self) -> &'static str {
        "ring_allreduce"
    }

    fn summary(&self) -> &'static str {
        "seed-003 ring, pull model: 2(P-1) steps, each device pulls one N/P chunk per step"
    }

    fn call(&self, mesh: &Mesh, shard: &[usize], dtype: DType) -> Result<PallasCall> {
        let spec = pull_spec(mesh.size(), shard, dtype)?;
        let op = self.op;
        Ok(PallasCall::new("ring_allreduce", spec, move |pl, a| {
            ring_allreduce_kernel(
                pl,
                op,
                a.r("x_ref"),
                a.r("scratch"),
                a.sem("signal"),
                a.r("recv"),
                a.r("acc"),
            )
        }))
    }
}

/// The two-phase ring all-reduce in the TPU model.
#[derive(Clone, Debug)]
pub struct RingAllReducePush {
    /// Reduction operator.
    pub op: ReduceOp,
}

impl Collective for RingAllReducePush {
    ring_facts!();

    fn with_options(&self, opts: &Options) -> Result<Arc<dyn Collective>> {
        Ok(Arc::new(RingAllReducePush { op: opts.op }))
    }

    fn trace_shape(&self, p: usize) -> Option<Vec<usize>> {
        Some(vec![p, 1])
    }

    fn trace_layout(&self, p: usize) -> Option<TraceLayout> {
        Some(TraceLayout {
            shape: vec![p, 1],
            columns: [
                Column::new("hbm_buf[0]", "hbm_buf", 0, 1),
                Column::new("hbm_buf[1]", "hbm_buf", 1, 1),
            ]
            .into_iter()
            .chain((0..p).map(|c| Column::new(format!("o_ref[c{c}]"), "o_ref", c, 1)))
            .chain([Column::new("vmem_recv", "vmem_recv", 0, 1)])
            .collect(),
            labels: Labels::Chunks,
        })
    }

    fn name(&self) -> &'static str {
        "ring_allreduce_push"
    }

    fn summary(&self) -> &'static str {
        "the same ring in the TPU model: 2(P-1) steps, each device pushes one N/P chunk per step"
    }

    fn call(&self, mesh: &Mesh, shard: &[usize], dtype: DType) -> Result<PallasCall> {
        self.call_with(mesh, shard, dtype, true)
    }
}

impl RingAllReducePush {
    /// The kernel, its barrier in two rounds or (a broken variant) one.
    pub(crate) fn call_with(
        &self,
        mesh: &Mesh,
        shard: &[usize],
        dtype: DType,
        double_barrier: bool,
    ) -> Result<PallasCall> {
        let p = mesh.size();
        let n = ring_len(self.name(), p, shard)?;
        let spec = GridSpec::new()
            .input("x_ref", MemorySpace::Vmem, &[1, n], dtype)
            .output("o_ref", MemorySpace::Vmem, &[1, n], dtype)
            .output("hbm_buf", MemorySpace::Any, &[2, n / p], dtype)
            .dma_sem("local_sem")
            .dma_sem("send_sem")
            .dma_sem("recv_sem")
            .regular_sem("capacity_sem")
            .vmem("vmem_recv", &[n / p], dtype)
            .grid(&[(2 * (p - 1)).max(1)])
            .collective_id(0);
        let op = self.op;
        Ok(PallasCall::new(
            "ring_allreduce_push",
            spec,
            move |pl, a| {
                ring_allreduce_push_kernel_with(
                    pl,
                    op,
                    double_barrier,
                    [a.r("x_ref"), a.r("o_ref"), a.r("hbm_buf"), a.r("vmem_recv")],
                    [
                        a.sem("local_sem"),
                        a.sem("send_sem"),
                        a.sem("recv_sem"),
                        a.sem("capacity_sem"),
                    ],
                )
            },
        ))
    }
}
