//! `lax.all_gather`: the seed's ring kernel (section 2), one receive semaphore per step.

use super::Collective;
use crate::array::{DType, HostArray};
use crate::error::Result;
use crate::kernel::{Ctx, GridSpec, MemorySpace, PallasCall, Ref, Sem};
use crate::mesh::Mesh;

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
            recv_sems.at(step),
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
    fn name(&self) -> &'static str {
        "all_gather"
    }

    fn summary(&self) -> &'static str {
        "ring: P-1 steps, each device forwards one shard (N bytes) to its right neighbour per step"
    }

    fn call(&self, mesh: &Mesh, shard: &[usize], dtype: DType) -> Result<PallasCall> {
        let p = mesh.size();
        let mut out = vec![p];
        out.extend_from_slice(shard);
        let steps = (p - 1).max(1);
        let spec = GridSpec::new()
            .input("x_ref", MemorySpace::Any, shard, dtype)
            .output("out_ref", MemorySpace::Any, &out, dtype)
            .dma_sem("local_sem")
            .dma_sem("send_sem")
            .dma_sems("recv_sems", steps)
            .grid(&[steps]);
        Ok(PallasCall::new("all_gather", spec, |pl, a| {
            all_gather_kernel(pl, a.r(0), a.r(1), a.sem(2), a.sem(3), a.sem(4))
        }))
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
