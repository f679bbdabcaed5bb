//! The barrier's second round, removed: the hazard the Pallas docs' double barrier is
//! for shows only across kernel invocations (`--repeat`), where the barrier semaphore
//! of a `collective_id` carries over. A device's barrier wait counts one signal per
//! neighbour; a neighbour that can leave the invocation without waiting for anything
//! this device does after its barrier can re-enter, signal again and stand in for a
//! neighbour that has not entered. The shift (`ppermute --variant single-barrier`) has
//! such a neighbour: its left one, which only pushes to it. The shipped kernels that use
//! the double barrier have none: in each, every neighbour waits on this device's data or
//! capacity signal, sent after its barrier, before it can leave, so their one-round
//! variants are clean under any `--repeat` (shipped to show that, and tested).

use super::allreduce_2d::{call_with, Handshakes2d};
use super::psum::{psum_without, Handshakes};
use super::variant::Variant;
use super::{PsumScatter, RingAllReducePush};
use crate::array::DType;
use crate::kernel::{GridSpec, MemorySpace, PallasCall, ReduceOp};
use crate::verify::ProblemKind;

/// Why the one-round variants of the shipped kernels stay clean.
const HARMLESS: &str = "the barrier's second round removed, harmless here: every neighbour waits for this device's data or capacity signal, sent after its barrier, before it can leave the invocation, so no next-invocation signal can stand in";

/// The single-barrier variants.
pub(super) fn variants() -> Vec<Variant> {
    vec![
        Variant {
            collective: "ppermute",
            name: "single-barrier",
            summary: "the right shift with a collective_id and the docs' neighbour barrier in one round: the left neighbour never waits for this device, so it can enter the next invocation and signal the barrier again before the right one has entered (sent before entry; from P = 5: on a shorter ring the left neighbour's own handshake waits on the right one)",
            expect: Some(ProblemKind::SendBeforeEntry),
            repeat: 2,
            devices: 5,
            build: |_, shard, dtype| Ok(barrier_shift(shard, dtype, false)),
        },
        Variant {
            collective: "psum",
            name: "single-barrier",
            summary: HARMLESS,
            expect: None,
            repeat: 2,
            devices: 3,
            build: |mesh, shard, dtype| {
                let h = Handshakes {
                    double_barrier: false,
                    ..Handshakes::SEED
                };
                psum_without(h, mesh, shard, dtype)
            },
        },
        Variant {
            collective: "psum_scatter",
            name: "single-barrier",
            summary: HARMLESS,
            expect: None,
            repeat: 2,
            devices: 3,
            build: |mesh, shard, dtype| PsumScatter.call_with(mesh, shard, dtype, false),
        },
        Variant {
            collective: "ring_allreduce_push",
            name: "single-barrier",
            summary: HARMLESS,
            expect: None,
            repeat: 2,
            devices: 3,
            build: |mesh, shard, dtype| {
                RingAllReducePush { op: ReduceOp::Sum }.call_with(mesh, shard, dtype, false)
            },
        },
        Variant {
            collective: "allreduce_2d",
            name: "single-barrier",
            summary: HARMLESS,
            expect: None,
            repeat: 2,
            devices: 3,
            build: |mesh, shard, dtype| {
                let h = Handshakes2d {
                    double_barrier: false,
                    ..Handshakes2d::RIGHT
                };
                call_with(h, mesh, shard, dtype)
            },
        },
    ]
}

/// The seed's right shift with a `collective_id`: the docs' barrier with both
/// neighbours, in one round or (`double`) two, before the push.
pub fn barrier_shift(shard: &[usize], dtype: DType, double: bool) -> PallasCall {
    let spec = GridSpec::new()
        .input("x_ref", MemorySpace::Any, shard, dtype)
        .output("y_ref", MemorySpace::Any, shard, dtype)
        .dma_sem("send_sem")
        .dma_sem("recv_sem")
        .collective_id(0);
    PallasCall::new("ppermute", spec, move |pl, a| {
        let n = pl.num_devices();
        let me = pl.axis_index("x");
        super::barrier::neighbor_barrier(pl, (me - 1 + n) % n, (me + 1) % n, double);
        super::ppermute::right_shift_kernel(
            pl,
            a.r("x_ref"),
            a.r("y_ref"),
            a.sem("send_sem"),
            a.sem("recv_sem"),
        )
    })
}
