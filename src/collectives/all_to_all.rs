//! `lax.all_to_all(x, "x", split_axis=0, concat_axis=0, tiled=True)`: each device
//! splits its shard into P blocks of rows and sends block j to device j, which stacks
//! what it receives in source order. Every DMA is in flight at once, each on the
//! receiver's semaphore for its source (one receive semaphore per source, so no wait
//! can be satisfied by another source's bytes).

use super::Collective;
use crate::array::{DType, HostArray};
use crate::error::{Error, Result};
use crate::kernel::{Ctx, GridSpec, MemorySpace, PallasCall, Ref, Sem};
use crate::mesh::Mesh;
use crate::model::Traffic;

/// Device `me` sends `x_ref.at(j)` into `o_ref.at(me)` on every device j (its own block
/// by a local copy), then waits for every send and for every block it receives.
pub fn all_to_all_kernel(
    pl: &Ctx,
    x_ref: Ref,
    o_ref: Ref,
    local_sem: Sem,
    send_sems: Sem,
    recv_sems: Sem,
) {
    let n = pl.num_devices();
    let me = pl.axis_index("x");
    let local = pl.make_async_copy(x_ref.at(me), o_ref.at(me), local_sem);
    local.start();
    // What device j sends us lands in o_ref.at(j), counted on recv_sems.at(j).
    let to = |j: i64| {
        pl.make_async_remote_copy(
            x_ref.at(j),
            o_ref.at(me),
            send_sems.at(j),
            recv_sems.at(me),
            j,
        )
    };
    let from = |j: i64| {
        pl.make_async_remote_copy(
            x_ref.at(me),
            o_ref.at(j),
            send_sems.at(j),
            recv_sems.at(j),
            j,
        )
    };
    for k in 1..n {
        to((me + k) % n).start();
    }
    local.wait();
    for k in 1..n {
        to((me + k) % n).wait_send();
    }
    for k in 1..n {
        from((me - k + n) % n).wait_recv();
    }
}

/// The all_to_all.
#[derive(Clone, Debug, Default)]
pub struct AllToAll;

impl AllToAll {
    /// Block shape `(R, C…)` of a per-device input `(P·R, C…)`.
    fn block(p: usize, shard: &[usize]) -> Result<Vec<usize>> {
        let Some((&rows, rest)) = shard.split_first() else {
            return Err(Error::bad_input(
                "all_to_all needs a shard with a leading dimension",
            ));
        };
        if !rows.is_multiple_of(p) {
            return Err(Error::bad_input(format!(
                "all_to_all splits the leading dimension over P={p} devices, but {rows} rows are not divisible by {p}"
            )));
        }
        let mut b = vec![rows / p];
        b.extend_from_slice(rest);
        Ok(b)
    }
}

impl Collective for AllToAll {
    fn name(&self) -> &str {
        "all_to_all"
    }

    fn summary(&self) -> &str {
        "direct: every device sends block j of its shard (N/P bytes) to device j, all DMAs in flight at once"
    }

    fn call(&self, mesh: &Mesh, shard: &[usize], dtype: DType) -> Result<PallasCall> {
        let p = mesh.size();
        let mut blocks = vec![p];
        blocks.extend(Self::block(p, shard)?);
        let spec = GridSpec::new()
            .input("x_ref", MemorySpace::Any, &blocks, dtype)
            .output("o_ref", MemorySpace::Any, &blocks, dtype)
            .dma_sem("local_sem")
            .dma_sems("send_sems", p)
            .dma_sems("recv_sems", p);
        Ok(PallasCall::new("all_to_all", spec, |pl, a| {
            all_to_all_kernel(
                pl,
                a.r("x_ref"),
                a.r("o_ref"),
                a.sem("local_sem"),
                a.sem("send_sems"),
                a.sem("recv_sems"),
            )
        }))
    }

    fn reference(&self, inputs: &[Vec<HostArray>]) -> Result<Vec<Vec<HostArray>>> {
        Ok(super::reference::all_to_all(inputs))
    }

    fn traffic(&self) -> Traffic {
        Traffic::AllToAll
    }

    /// One block of rows per device.
    fn rows_multiple(&self, p: usize) -> usize {
        p
    }

    /// `shard_map` with `P("x", None)` in and out: rows are split and joined.
    fn apply_dims(&self) -> (usize, usize) {
        (0, 0)
    }
}
