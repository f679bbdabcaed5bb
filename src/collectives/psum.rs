//! `lax.psum` (and `pmax` / `pmin`): the seed's unidirectional ring all-reduce
//! (section 3) with the double neighbour barrier, an HBM double buffer, a VMEM receive
//! buffer and the capacity-semaphore handshake.

use super::barrier::neighbor_barrier;
use super::{identity, Collective, Options, Takes};
use crate::array::{DType, HostArray};
use crate::error::Result;
use crate::kernel::{Ctx, GridSpec, MemorySpace, PallasCall, ReduceOp, Ref, Sem};
use crate::mesh::Mesh;
use crate::model::Traffic;
use crate::trace::{Column, Labels, TraceLayout};
use std::sync::Arc;

/// The seed's `psum_kernel`, line for line; `op` generalises `+=` to max / min
/// (and `o_ref` starts at that operator's identity instead of zero).
#[allow(clippy::too_many_arguments)]
pub fn psum_kernel(
    pl: &Ctx,
    op: ReduceOp,
    x_ref: Ref,
    o_ref: Ref,
    hbm_buf: Ref,
    local_copy_sem: Sem,
    remote_recv_sem: Sem,
    remote_send_sem: Sem,
    capacity_sem: Sem,
    vmem_recv: Ref,
) {
    psum_kernel_with(
        pl,
        op,
        Handshakes::SEED,
        [x_ref, o_ref, hbm_buf, vmem_recv],
        [
            local_copy_sem,
            remote_recv_sem,
            remote_send_sem,
            capacity_sem,
        ],
    )
}

/// Which of the seed's handshakes a psum kernel makes (the broken variants drop one).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Handshakes {
    /// The neighbour barrier at kernel entry.
    pub barrier: bool,
    /// The capacity semaphore before each write to the right neighbour.
    pub capacity: bool,
    /// The barrier's second round (the docs' double barrier).
    pub double_barrier: bool,
    /// The output's fill at the first step (the accumulator's starting value): not a
    /// handshake, the one initialisation a broken variant drops.
    pub fill_output: bool,
}

impl Handshakes {
    /// Both, as the seed has them.
    pub const SEED: Handshakes = Handshakes {
        barrier: true,
        capacity: true,
        double_barrier: true,
        fill_output: true,
    };
}

/// [`psum_kernel`], with the handshakes switchable (off only for the broken variants).
pub(crate) fn psum_kernel_with(
    pl: &Ctx,
    op: ReduceOp,
    handshakes: Handshakes,
    [x_ref, o_ref, hbm_buf, vmem_recv]: [Ref; 4],
    [local_copy_sem, remote_recv_sem, remote_send_sem, capacity_sem]: [Sem; 4],
) {
    let num_devices = pl.num_devices();
    let step = pl.program_id(0);
    let working = step % 2;
    let receiving = 1 - working;

    let my_id = pl.axis_index("x");
    let right = (my_id + 1) % num_devices;
    let left = (my_id - 1 + num_devices) % num_devices;

    if step == 0 {
        if handshakes.barrier {
            neighbor_barrier(pl, left, right, handshakes.double_barrier);
        }
        if handshakes.fill_output {
            pl.fill(o_ref, identity(op, o_ref.dtype()));
        }
        pl.fill(vmem_recv, 0.0);

        let first = pl.make_async_remote_copy(
            x_ref,
            hbm_buf.at(working),
            remote_send_sem,
            remote_recv_sem,
            right,
        );
        first.start();
        first.wait();
    }

    // Tell the left neighbour: I am ready for its next write.
    if handshakes.capacity {
        pl.semaphore_signal(capacity_sem, 1, left);
    }

    // Local HBM -> VMEM, for the accumulate.
    let local = pl.make_async_copy(hbm_buf.at(working), vmem_recv, local_copy_sem);
    local.start();

    // Before writing the right neighbour, wait until it says it is ready.
    if handshakes.capacity {
        pl.semaphore_wait(capacity_sem, 1);
    }

    let remote = pl.make_async_remote_copy(
        hbm_buf.at(working),
        hbm_buf.at(receiving),
        remote_send_sem,
        remote_recv_sem,
        right,
    );
    remote.start();

    local.wait();
    pl.accumulate(o_ref, vmem_recv, op); // o_ref[...] += vmem_recv[...]
    remote.wait();
}

/// Ring `psum` / `pmax` / `pmin`.
#[derive(Clone, Debug)]
pub struct Psum {
    /// Reduction operator.
    pub op: ReduceOp,
}

impl Collective for Psum {
    fn traffic(&self) -> Traffic {
        Traffic::AllReduce
    }

    fn takes(&self) -> Takes {
        Takes {
            op: true,
            ..Takes::default()
        }
    }

    fn with_options(&self, opts: &Options) -> Result<Arc<dyn Collective>> {
        Ok(Arc::new(Psum { op: opts.op }))
    }

    fn trace_layout(&self, _p: usize) -> Option<TraceLayout> {
        Some(TraceLayout {
            shape: vec![1, 2],
            columns: vec![
                Column::new("hbm_buf[0]", "hbm_buf", 0, 2),
                Column::new("hbm_buf[1]", "hbm_buf", 2, 2),
                Column::new("o_ref", "o_ref", 0, 2),
            ],
            labels: Labels::Whole { elems: 2 },
        })
    }

    fn name(&self) -> &'static str {
        "psum"
    }

    fn summary(&self) -> &'static str {
        "unidirectional ring, double buffered: P steps, each device forwards one whole shard (N bytes) per step"
    }

    fn call(&self, mesh: &Mesh, shard: &[usize], dtype: DType) -> Result<PallasCall> {
        let op = self.op;
        Ok(PallasCall::new(
            "psum",
            spec(mesh.size(), shard, dtype),
            move |pl, a| {
                psum_kernel(
                    pl,
                    op,
                    a.r("x_ref"),
                    a.r("o_ref"),
                    a.r("hbm_buf"),
                    a.sem("local_copy_sem"),
                    a.sem("remote_recv_sem"),
                    a.sem("remote_send_sem"),
                    a.sem("capacity_sem"),
                    a.r("vmem_recv"),
                )
            },
        ))
    }

    fn reference(&self, inputs: &[Vec<HostArray>]) -> Result<Vec<Vec<HostArray>>> {
        Ok(super::reference::all_reduce_everywhere(inputs, self.op))
    }

    fn tolerance(&self) -> f32 {
        super::SUM_TOLERANCE
    }

    fn reduction(&self) -> Option<ReduceOp> {
        Some(self.op)
    }
}

/// The seed's grid spec for psum over `p` devices.
pub(crate) fn spec(p: usize, shard: &[usize], dtype: DType) -> GridSpec {
    let mut hbm = vec![2];
    hbm.extend_from_slice(shard);
    GridSpec::new()
        .input("x_ref", MemorySpace::Vmem, shard, dtype)
        .output("o_ref", MemorySpace::Vmem, shard, dtype)
        .output("hbm_buf", MemorySpace::Any, &hbm, dtype)
        .dma_sem("local_copy_sem")
        .dma_sem("remote_recv_sem")
        .dma_sem("remote_send_sem")
        .regular_sem("capacity_sem")
        .vmem("vmem_recv", shard, dtype)
        .grid(&[p])
        .collective_id(0)
}

/// The seed's psum with only the handshakes in `h`.
pub(super) fn psum_without(
    h: Handshakes,
    mesh: &Mesh,
    shard: &[usize],
    dtype: DType,
) -> Result<PallasCall> {
    let spec = spec(mesh.size(), shard, dtype);
    Ok(PallasCall::new("psum", spec, move |pl, a| {
        psum_kernel_with(
            pl,
            ReduceOp::Sum,
            h,
            [a.r("x_ref"), a.r("o_ref"), a.r("hbm_buf"), a.r("vmem_recv")],
            [
                a.sem("local_copy_sem"),
                a.sem("remote_recv_sem"),
                a.sem("remote_send_sem"),
                a.sem("capacity_sem"),
            ],
        )
    }))
}
