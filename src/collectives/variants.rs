//! Deliberately broken kernels, shipped so that the verifier's reports can be seen
//! and tested: `tpusim check COLLECTIVE --variant NAME`. Each is a seed kernel with
//! one mistake a person could make, and the kind of problem it must be reported as
//! (some only under `--repeat`, kernel invocations back to back; a few are reported
//! clean, because the kernel's other handshakes make the mistake harmless).

use super::allreduce_2d::{call_with, Handshakes2d};
use super::psum::{psum_without, Handshakes};
pub use super::variant::Variant;
use super::{all_gather, all_gather_matmul as agm, matmul_reduce_scatter as mrs, ring_allreduce};
use crate::array::DType;
use crate::error::Result;
use crate::kernel::{Ctx, GridSpec, MemorySpace, PallasCall, ReduceOp, Ref, Sem};
use crate::verify::ProblemKind;

/// Every broken variant.
pub fn variants() -> Vec<Variant> {
    let mut v = within_one();
    v.extend(super::second_round::variants());
    v
}

/// The variants whose mistake shows in one invocation.
fn within_one() -> Vec<Variant> {
    vec![
        Variant {
            collective: "psum",
            name: "no-capacity-sem",
            summary: "the capacity-semaphore handshake removed: a fast device overwrites its neighbour's buffer while it is read (race)",
            expect: Some(ProblemKind::Race),
            repeat: 1,
            devices: 3,
            build: |mesh, shard, dtype| {
                psum_without(
                    Handshakes {
                        capacity: false,
                        ..Handshakes::SEED
                    },
                    mesh,
                    shard,
                    dtype,
                )
            },
        },
        Variant {
            collective: "psum",
            name: "no-init",
            summary: "the output never filled with the reduction's identity: the first accumulate adds to whatever the memory held (read of uninitialized memory)",
            expect: Some(ProblemKind::UninitializedRead),
            repeat: 1,
            devices: 3,
            build: |mesh, shard, dtype| {
                psum_without(
                    Handshakes {
                        fill_output: false,
                        ..Handshakes::SEED
                    },
                    mesh,
                    shard,
                    dtype,
                )
            },
        },
        Variant {
            collective: "psum",
            name: "no-barrier",
            summary: "the neighbour barrier at entry removed: the first signal and DMA can reach a neighbour that has not entered the kernel (sent before entry)",
            expect: Some(ProblemKind::SendBeforeEntry),
            repeat: 1,
            devices: 3,
            build: |mesh, shard, dtype| {
                psum_without(
                    Handshakes {
                        barrier: false,
                        ..Handshakes::SEED
                    },
                    mesh,
                    shard,
                    dtype,
                )
            },
        },
        Variant {
            collective: "all_gather",
            name: "shared-recv-sem",
            summary: "one receive semaphore for every step instead of one per step: a wait can be satisfied by the next step's bytes before this step's have landed (race)",
            expect: Some(ProblemKind::Race),
            repeat: 1,
            devices: 3,
            build: |mesh, shard, dtype| {
                let spec = all_gather::spec(mesh.size(), shard, dtype, false);
                Ok(PallasCall::new("all_gather", spec, |pl, a| {
                    all_gather::all_gather_kernel_with(
                        pl,
                        false,
                        a.r("x_ref"),
                        a.r("out_ref"),
                        a.sem("local_sem"),
                        a.sem("send_sem"),
                        a.sem("recv_sem"),
                    )
                }))
            },
        },
        Variant {
            collective: "allreduce_2d",
            name: "no-barrier-y",
            summary: "the entry barrier waits for the x neighbours only: the y phase signals and pushes to a neighbour not known to have entered (sent before entry; run it on a 2-D --mesh)",
            expect: Some(ProblemKind::SendBeforeEntry),
            repeat: 1,
            devices: 3,
            build: |mesh, shard, dtype| {
                let h = Handshakes2d {
                    barrier_every_axis: false,
                    ..Handshakes2d::RIGHT
                };
                call_with(h, mesh, shard, dtype)
            },
        },
        Variant {
            collective: "allreduce_2d",
            name: "shared-capacity",
            summary: "one capacity semaphore for the x and y rings: a y neighbour's signal lets a device push along x before its x neighbour is ready (race; run it on a 2-D --mesh)",
            expect: Some(ProblemKind::Race),
            repeat: 1,
            devices: 3,
            build: |mesh, shard, dtype| {
                let h = Handshakes2d {
                    capacity_per_axis: false,
                    ..Handshakes2d::RIGHT
                };
                call_with(h, mesh, shard, dtype)
            },
        },
        Variant {
            collective: "all_gather_matmul",
            name: "compute-before-wait",
            summary: "the matmul of each arrived block runs before the wait for its arrival: the MXU reads the receive buffer while the left neighbour's DMA may still write it (race)",
            expect: Some(ProblemKind::Race),
            repeat: 1,
            devices: 3,
            build: |mesh, shard, dtype| {
                let o = agm::Order {
                    wait_first: false,
                    ..agm::Order::RIGHT
                };
                agm::call_with(o, mesh, shard, dtype)
            },
        },
        Variant {
            collective: "all_gather_matmul",
            name: "no-capacity-sem",
            summary: "the capacity handshake removed: a device forwards into its right neighbour's buffer while the neighbour's matmul still reads it (race)",
            expect: Some(ProblemKind::Race),
            repeat: 1,
            devices: 3,
            build: |mesh, shard, dtype| {
                let o = agm::Order {
                    capacity: false,
                    ..agm::Order::RIGHT
                };
                agm::call_with(o, mesh, shard, dtype)
            },
        },
        Variant {
            collective: "matmul_reduce_scatter",
            name: "add-before-wait",
            summary: "the left neighbour's partial sum is added before the wait for its arrival: the add reads the receive buffer while the DMA may still write it (race)",
            expect: Some(ProblemKind::Race),
            repeat: 1,
            devices: 3,
            build: |mesh, shard, dtype| {
                let o = mrs::Order {
                    wait_first: false,
                    ..mrs::Order::RIGHT
                };
                mrs::call_with(o, mesh, shard, dtype)
            },
        },
        Variant {
            collective: "matmul_reduce_scatter",
            name: "no-capacity-sem",
            summary: "the capacity handshake removed: a device pushes a partial sum into a receive slot its right neighbour has not read yet (race)",
            expect: Some(ProblemKind::Race),
            repeat: 1,
            devices: 3,
            build: |mesh, shard, dtype| {
                let o = mrs::Order {
                    capacity: false,
                    ..mrs::Order::RIGHT
                };
                mrs::call_with(o, mesh, shard, dtype)
            },
        },
        Variant {
            collective: "ppermute",
            name: "missing-signal",
            summary: "the receiver waits for a `done` signal the sender never sends (deadlock)",
            expect: Some(ProblemKind::Deadlock),
            repeat: 1,
            devices: 3,
            build: |_, shard, dtype| Ok(handshake_call(shard, dtype, 0)),
        },
        Variant {
            collective: "ppermute",
            name: "extra-signal",
            summary: "the sender signals `done` twice and the receiver waits once (semaphore not zero at exit)",
            expect: Some(ProblemKind::SemaphoreNotZero),
            repeat: 1,
            devices: 3,
            build: |_, shard, dtype| Ok(handshake_call(shard, dtype, 2)),
        },
        Variant {
            collective: "ring_allreduce",
            name: "negative-left",
            summary: "the seed-003 trap `(my_rank - 1) % nranks`, -1 at rank 0 (device id out of range)",
            expect: Some(ProblemKind::DeviceIdOutOfRange),
            repeat: 1,
            devices: 3,
            build: |mesh, shard, dtype| {
                let spec = ring_allreduce::pull_spec(mesh.size(), shard, dtype)?;
                Ok(PallasCall::new("ring_allreduce", spec, |pl, a| {
                    ring_allreduce::ring_allreduce_kernel_with(
                        pl,
                        ReduceOp::Sum,
                        true,
                        a.r("x_ref"),
                        a.r("scratch"),
                        a.sem("signal"),
                        a.r("recv"),
                        a.r("acc"),
                    )
                }))
            },
        },
        Variant {
            collective: "ppermute",
            name: "peer-read",
            summary: "a TPU kernel that pulls its left neighbour's shard instead of being pushed it (peer read)",
            expect: Some(ProblemKind::PeerRead),
            repeat: 1,
            devices: 3,
            build: |_, shard, dtype| {
                let spec = GridSpec::new()
                    .input("x_ref", MemorySpace::Any, shard, dtype)
                    .output("y_ref", MemorySpace::Vmem, shard, dtype);
                Ok(PallasCall::new("ppermute", spec, |pl, a| peer_read_kernel(pl, a.r("x_ref"), a.r("y_ref"))))
            },
        },
    ]
}

/// The variant `name` of `collective`, or an error listing the ones that exist.
pub fn variant(collective: &str, name: &str) -> Result<Variant> {
    variants()
        .into_iter()
        .find(|v| v.collective == collective && v.name == name)
        .ok_or_else(|| {
            let known: Vec<String> = variants()
                .iter()
                .map(|v| format!("{} --variant {}", v.collective, v.name))
                .collect();
            crate::Error::bad_input(format!(
                "no variant `{name}` of `{collective}` (known: {})",
                known.join("; ")
            ))
        })
}

/// Right shift with a completion handshake: after its push lands, the sender signals
/// `done` on the receiver `signals` times; the receiver waits for one. Correct with 1.
#[allow(clippy::too_many_arguments)]
pub fn handshake_kernel(
    pl: &Ctx,
    signals: usize,
    x_ref: Ref,
    y_ref: Ref,
    send_sem: Sem,
    recv_sem: Sem,
    done: Sem,
) {
    let num_devices = pl.num_devices();
    let my_id = pl.axis_index("x");
    let right = (my_id + 1) % num_devices;

    let dma = pl.make_async_remote_copy(x_ref, y_ref, send_sem, recv_sem, right);
    dma.start();
    dma.wait_send();
    for _ in 0..signals {
        pl.semaphore_signal(done, 1, right);
    }
    pl.semaphore_wait(done, 1);
    dma.wait_recv();
}

fn handshake_call(shard: &[usize], dtype: DType, signals: usize) -> PallasCall {
    let spec = GridSpec::new()
        .input("x_ref", MemorySpace::Any, shard, dtype)
        .output("y_ref", MemorySpace::Any, shard, dtype)
        .dma_sem("send_sem")
        .dma_sem("recv_sem")
        .regular_sem("done");
    PallasCall::new("ppermute", spec, move |pl, a| {
        handshake_kernel(
            pl,
            signals,
            a.r("x_ref"),
            a.r("y_ref"),
            a.sem("send_sem"),
            a.sem("recv_sem"),
            a.sem("done"),
        )
    })
}

/// Pulls the left neighbour's shard: fine in seed 003's model, impossible on a TPU.
pub fn peer_read_kernel(pl: &Ctx, x_ref: Ref, y_ref: Ref) {
    let n = pl.num_devices();
    let left = (pl.axis_index("x") - 1 + n) % n;
    pl.remote_load(y_ref, x_ref, left);
}

/// A correct handshake right shift (one signal), for tests that the handshake itself is sound.
pub fn handshake_ppermute(shard: &[usize], dtype: DType) -> PallasCall {
    handshake_call(shard, dtype, 1)
}
