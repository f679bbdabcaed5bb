//! `lax.all_gather` on a bidirectional ring: every step each device forwards one shard
//! to the right (what came from the left) and one to the left (what came from the
//! right), so P-1 shards arrive in ceil((P-1)/2) steps.

use super::{all_gather, Collective};
use crate::array::{DType, HostArray};
use crate::error::Result;
use crate::kernel::{Ctx, GridSpec, MemorySpace, PallasCall, Ref, Sem};
use crate::mesh::Mesh;
use crate::model::Traffic;

/// At step s, device `me` sends slot `me - s` right and slot `me + s` left (the left
/// direction stops one step early when P is even), one receive semaphore per step and
/// direction.
#[allow(clippy::too_many_arguments)]
pub fn all_gather_bidir_kernel(
    pl: &Ctx,
    x_ref: Ref,
    out_ref: Ref,
    local_sem: Sem,
    send_sems: Sem,
    right_recv_sems: Sem,
    left_recv_sems: Sem,
) {
    let n = pl.num_devices();
    let step = pl.program_id(0);
    let me = pl.axis_index("x");
    let (right, left) = ((me + 1) % n, (me - 1 + n) % n);

    if step == 0 {
        let local = pl.make_async_copy(x_ref, out_ref.at(me), local_sem);
        local.start();
        local.wait();
    }
    let hops_right = n / 2; // ceil((n-1)/2)
    let hops_left = (n - 1) / 2;
    let to_right = (step < hops_right).then(|| {
        let slot = (me - step + n) % n;
        pl.make_async_remote_copy(
            out_ref.at(slot),
            out_ref.at(slot),
            send_sems.at(0),
            right_recv_sems.at(step),
            right,
        )
    });
    let to_left = (step < hops_left).then(|| {
        let slot = (me + step) % n;
        pl.make_async_remote_copy(
            out_ref.at(slot),
            out_ref.at(slot),
            send_sems.at(1),
            left_recv_sems.at(step),
            left,
        )
    });
    for dma in to_right.iter().chain(&to_left) {
        dma.start();
    }
    for dma in to_right.iter().chain(&to_left) {
        dma.wait();
    }
}

/// The bidirectional ring all_gather.
#[derive(Clone, Debug, Default)]
pub struct AllGatherBidir;

impl Collective for AllGatherBidir {
    fn name(&self) -> &str {
        "all_gather_bidir"
    }

    fn summary(&self) -> &str {
        "bidirectional ring: ceil((P-1)/2) steps, each device forwards one shard (N bytes) each way per step"
    }

    fn call(&self, mesh: &Mesh, shard: &[usize], dtype: DType) -> Result<PallasCall> {
        let p = mesh.size();
        let mut out = vec![p];
        out.extend_from_slice(shard);
        let steps = (p / 2).max(1);
        let spec = GridSpec::new()
            .input("x_ref", MemorySpace::Any, shard, dtype)
            .output("out_ref", MemorySpace::Any, &out, dtype)
            .dma_sem("local_sem")
            .dma_sems("send_sems", 2)
            .dma_sems("right_recv_sems", steps)
            .dma_sems("left_recv_sems", steps)
            .grid(&[steps]);
        Ok(PallasCall::new("all_gather_bidir", spec, |pl, a| {
            all_gather_bidir_kernel(
                pl,
                a.r("x_ref"),
                a.r("out_ref"),
                a.sem("local_sem"),
                a.sem("send_sems"),
                a.sem("right_recv_sems"),
                a.sem("left_recv_sems"),
            )
        }))
    }

    fn reference(&self, inputs: &[Vec<HostArray>]) -> Result<Vec<Vec<HostArray>>> {
        Ok(super::reference::all_gather(inputs))
    }

    fn traffic(&self) -> Traffic {
        Traffic::AllGather
    }

    fn output_shape(&self, devices: usize, shard: &[usize]) -> Vec<usize> {
        all_gather::AllGather.output_shape(devices, shard)
    }

    fn apply_dims(&self) -> (usize, usize) {
        (0, 0)
    }
}
