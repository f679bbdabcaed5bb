//! Your own collective with every `tpusim` subcommand: a broadcast from device 0 down
//! a ring (0 -> 1 -> ... -> P-1), registered next to the shipped collectives.
//!
//! ```sh
//! cargo run --release --example custom_collective -- run broadcast -p 4
//! cargo run --release --example custom_collective -- check broadcast -p 4
//! cargo run --release --example custom_collective -- trace broadcast -p 4
//! cargo run --release --example custom_collective -- bench broadcast -p 4 -b 4K -e 1M
//! cargo run --release --example custom_collective -- run broadcast -p 8 --model v5e --timeline bcast.json
//! ```

use std::process::ExitCode;
use std::sync::Arc;
use tpusim::collectives::{Collective, Registry};
use tpusim::kernel::{Ctx, GridSpec, MemorySpace, PallasCall, Ref, Sem};
use tpusim::model::Traffic;
use tpusim::{DType, HostArray, Mesh};

/// Device 0 copies its shard into `o_ref` and pushes it right; every other device
/// waits for it to land and forwards it, until the last device.
fn broadcast_kernel(
    pl: &Ctx,
    x_ref: Ref,
    o_ref: Ref,
    local_sem: Sem,
    send_sem: Sem,
    recv_sem: Sem,
) {
    let n = pl.num_devices();
    let me = pl.axis_index("x");
    let forward = pl.make_async_remote_copy(o_ref, o_ref, send_sem, recv_sem, (me + 1) % n);

    if me == 0 {
        let local = pl.make_async_copy(x_ref, o_ref, local_sem);
        local.start();
        local.wait();
    } else {
        forward.wait_recv(); // what device me-1 pushed into our o_ref
    }
    if me + 1 < n {
        forward.start();
        forward.wait_send();
    }
}

/// The broadcast, described once: kernel, reference and what the tool needs to know.
struct Broadcast;

impl Collective for Broadcast {
    fn name(&self) -> &str {
        "broadcast"
    }

    fn summary(&self) -> &str {
        "chain from device 0 down the ring: P-1 hops of one shard"
    }

    fn call(&self, _mesh: &Mesh, shard: &[usize], dtype: DType) -> tpusim::Result<PallasCall> {
        let spec = GridSpec::new()
            .input("x_ref", MemorySpace::Any, shard, dtype)
            .output("o_ref", MemorySpace::Any, shard, dtype)
            .dma_sem("local_sem")
            .dma_sem("send_sem")
            .dma_sem("recv_sem");
        Ok(PallasCall::new("broadcast", spec, |pl, a| {
            broadcast_kernel(
                pl,
                a.r("x_ref"),
                a.r("o_ref"),
                a.sem("local_sem"),
                a.sem("send_sem"),
                a.sem("recv_sem"),
            )
        }))
    }

    /// Every device ends with device 0's shard.
    fn reference(&self, inputs: &[Vec<HostArray>]) -> tpusim::Result<Vec<Vec<HostArray>>> {
        Ok(inputs.iter().map(|_| vec![inputs[0][0].clone()]).collect())
    }

    fn traffic(&self) -> Traffic {
        Traffic::Broadcast
    }
}

fn main() -> ExitCode {
    let registry = match Registry::builtin().with(Arc::new(Broadcast)) {
        Ok(r) => r,
        Err(e) => return tpusim::cli::fail(&e),
    };
    tpusim::cli::main_with(registry)
}
