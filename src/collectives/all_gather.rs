//! `lax.all_gather`: the seed's ring kernel (section 2), one receive semaphore per step.

use super::Collective;
use crate::array::{DType, HostArray};
use crate::error::Result;
use crate::kernel::{Ctx, GridSpec, MemorySpace, PallasCall, Ref, Sem};
use crate::mesh::Mesh;
use crate::model::Traffic;
use crate::trace::{Column, Labels, TraceLayout};

/// The seed's `all_gather_kernel`, line for line. At each step every device forwards
/// slot `(my_id - step) mod P` of `out_ref` to the same slot on its right neighbour.
///
/// One deviation, for P = 1: the seed's grid `(P-1,)` is empty there, so its local
/// copy would never run; tpusim runs one step and skips the hop to itself.
pub fn all_gather_kernel(
    pl: &Ctx,
    x_ref: Ref,
    out_ref: Ref,
    local_sem: Sem,
    send_sem: Sem,
    recv_sems: Sem,
) {
    all_gather_kernel_with(pl, true, x_ref, out_ref, local_sem, send_sem, recv_sems)
}

/// [`all_gather_kernel`], with one receive semaphore per step (the seed) or, for the
/// broken `shared-recv-sem` variant, one for all steps.
pub(crate) fn all_gather_kernel_with(
    pl: &Ctx,
    sem_per_step: bool,
    x_ref: Ref,
    out_ref: Ref,
    local_sem: Sem,
    send_sem: Sem,
    recv_sems: Sem,
) {
    let num_devices = pl.num_devices();
    let step = pl.program_id(0);
    let my_id = pl.axis_index("x");
    let right = (my_id + 1) % num_devices;

    let slot = (my_id - step + num_devices) % num_devices;

    if step == 0 {
        let local = pl.make_async_copy(x_ref, out_ref.at(my_id), local_sem);
        local.start();
        local.wait();
    }

    if num_devices > 1 {
        let remote = pl.make_async_remote_copy(
            out_ref.at(slot),
            out_ref.at(slot),
            send_sem,
            if sem_per_step {
                recv_sems.at(step)
            } else {
                recv_sems
            },
            right,
        );
        remote.start();
        remote.wait();
    }
}

/// Ring `all_gather`.
#[derive(Clone, Debug, Default)]
pub struct AllGather;

impl Collective for AllGather {
    fn traffic(&self) -> Traffic {
        Traffic::AllGather
    }

    /// The seed shards rows (`P("x", None)`) and joins the gathered blocks along rows.
    fn apply_dims(&self) -> (usize, usize) {
        (0, 0)
    }

    fn trace_shape(&self, _p: usize) -> Option<Vec<usize>> {
        Some(vec![1, 2])
    }

    fn trace_layout(&self, p: usize) -> Option<TraceLayout> {
        Some(TraceLayout {
            shape: vec![1, 2],
            columns: (0..p)
                .map(|i| Column::new(format!("out_ref[{i}]"), "out_ref", i * 2, 2))
                .collect(),
            labels: Labels::Whole { elems: 2 },
        })
    }

    fn name(&self) -> &'static str {
        "all_gather"
    }

    fn summary(&self) -> &'static str {
        "ring: P-1 steps, each device forwards one shard (N bytes) to its right neighbour per step"
    }

    fn call(&self, mesh: &Mesh, shard: &[usize], dtype: DType) -> Result<PallasCall> {
        Ok(PallasCall::new(
            "all_gather",
            spec(mesh.size(), shard, dtype, true),
            |pl, a| {
                all_gather_kernel(
                    pl,
                    a.r("x_ref"),
                    a.r("out_ref"),
                    a.sem("local_sem"),
                    a.sem("send_sem"),
                    a.sem("recv_sems"),
                )
            },
        ))
    }

    fn reference(&self, inputs: &[Vec<HostArray>]) -> Result<Vec<Vec<HostArray>>> {
        Ok(super::reference::all_gather(inputs))
    }

    fn output_shape(&self, devices: usize, shard: &[usize]) -> Vec<usize> {
        let mut s = vec![devices];
        s.extend_from_slice(shard);
        s
    }
}

/// The seed's grid spec for all_gather over `p` devices: one receive semaphore per
/// step, or one `recv_sem` for all of them (`sem_per_step` false).
pub(crate) fn spec(p: usize, shard: &[usize], dtype: DType, sem_per_step: bool) -> GridSpec {
    let mut out = vec![p];
    out.extend_from_slice(shard);
    let steps = (p - 1).max(1);
    let spec = GridSpec::new()
        .input("x_ref", MemorySpace::Any, shard, dtype)
        .output("out_ref", MemorySpace::Any, &out, dtype)
        .dma_sem("local_sem")
        .dma_sem("send_sem");
    let spec = if sem_per_step {
        spec.dma_sems("recv_sems", steps)
    } else {
        spec.dma_sem("recv_sem")
    };
    spec.grid(&[steps])
}
