//! The precision suite's kernels: correct kernels that stress the verifier's credit
//! rules, each with a broken twin one handshake off. Shared by `tests/precision.rs`
//! (P = 2..8 under the verifier, values against a reference) and `tests/model_check.rs`
//! (the verifier against the exhaustive model at small P).
#![allow(dead_code)]

use tpusim::kernel::{GridSpec, MemorySpace, PallasCall};
use tpusim::verify::ProblemKind;
use tpusim::DType;

/// One kernel of the suite: how to build it (correct or its broken twin) on P devices,
/// the invocations back to back it is checked with, and what its twin is reported as.
pub struct Case {
    /// Name in messages.
    pub name: &'static str,
    /// The kernel on P devices; `broken`: its twin.
    pub build: fn(p: usize, broken: bool) -> PallasCall,
    /// Invocations back to back.
    pub repeat: usize,
    /// What the twin is reported as.
    pub twin: ProblemKind,
    /// The smallest P the twin's mistake shows on (below, the twin is clean too).
    pub from: usize,
}

/// Every case of the suite.
pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "several signals for one wait",
            build: several_signals,
            repeat: 1,
            twin: ProblemKind::Race,
            from: 2,
        },
        Case {
            name: "a counting semaphore credited by every device",
            build: counted_broadcast,
            repeat: 1,
            twin: ProblemKind::Race,
            from: 2,
        },
        Case {
            name: "a capacity semaphore reused every step (ring reduce-scatter)",
            build: ring_reduce_scatter,
            repeat: 1,
            twin: ProblemKind::Race,
            from: 4,
        },
        Case {
            name: "two barrier rounds across calls",
            build: barrier_shift,
            repeat: 2,
            twin: ProblemKind::SendBeforeEntry,
            from: 5,
        },
    ]
}

/// Device 1 fills `buf`, then signals device 0's `ready` three times; device 0 waits
/// for one signal, pushes into `buf`, then takes the other two. Whichever signal the
/// first wait takes was sent after the fill. Device 1 copies `buf` into `y` (0 on the
/// others). Twin: the first signal goes before the fill, so the wait can take it and
/// the push overwrite `buf` while it is filled.
pub fn several_signals(_p: usize, broken: bool) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Any, &[8], DType::I32)
        .output("y", MemorySpace::Vmem, &[8], DType::I32)
        .vmem("buf", &[8], DType::I32)
        .dma_sem("send")
        .dma_sem("recv")
        .regular_sem("ready");
    PallasCall::new("several_signals", spec, move |pl, a| {
        let (buf, ready) = (a.r("buf"), a.sem("ready"));
        let c = pl.make_async_remote_copy(a.r("x"), buf, a.sem("send"), a.sem("recv"), 1);
        pl.fill(a.r("y"), 0.0);
        match pl.axis_index("x") {
            0 => {
                pl.semaphore_wait(ready, 1);
                c.start();
                c.wait_send();
                pl.semaphore_wait(ready, 2);
            }
            1 => {
                if broken {
                    pl.semaphore_signal(ready, 1, 0);
                }
                pl.fill(buf, 1.0);
                pl.semaphore_signal(ready, if broken { 2 } else { 1 }, 0);
                if !broken {
                    pl.semaphore_signal(ready, 2, 0);
                }
                c.wait_recv();
                pl.copy(a.r("y"), buf);
            }
            _ => {}
        }
    })
}

/// Device 0 pushes its `x` into every other device's `copy`; each of them, once it has
/// it, adds it into `y` and signals device 0's `done` by its own index. Device 0 waits
/// for the sum of every index (one wait for all the senders' credits), then pushes a
/// second round into every `copy`, and each device adds that too. Twin: device 0 waits
/// for all but the last sender's index before the second round (the rest after it):
/// the others' credits can make that up without any one sender's, so the second round
/// can overwrite a `copy` still being read.
pub fn counted_broadcast(p: usize, broken: bool) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[8], DType::I32)
        .output("y", MemorySpace::Vmem, &[8], DType::I32)
        .vmem("copy", &[8], DType::I32)
        .dma_sem("send")
        .dma_sem("recv")
        .regular_sem("done");
    let all = (p * (p - 1) / 2) as i64;
    let first = if broken { all - (p as i64 - 1) } else { all };
    PallasCall::new("counted_broadcast", spec, move |pl, a| {
        let (x, y, copy, done) = (a.r("x"), a.r("y"), a.r("copy"), a.sem("done"));
        let push =
            |to: usize| pl.make_async_remote_copy(x, copy, a.sem("send"), a.sem("recv"), to as i64);
        let me = pl.axis_index("x") as usize;
        pl.fill(y, 0.0);
        if me == 0 {
            for round in 0..2 {
                for to in 1..p {
                    push(to).start();
                }
                for to in 1..p {
                    push(to).wait_send();
                }
                if round == 0 {
                    pl.semaphore_wait(done, first);
                }
            }
            if all > first {
                pl.semaphore_wait(done, all - first);
            }
        } else {
            for round in 0..2 {
                push(0).wait_recv();
                pl.add_assign(y, copy);
                if round == 0 {
                    pl.semaphore_signal(done, me as i64, 0);
                }
            }
        }
    })
}

/// The tensor-parallel ring reduce-scatter: device d holds P chunks of 8; at each of
/// the P - 1 steps it pushes its partial sum into its right neighbour's receive slot
/// (two, used in turn) and adds its own chunk to what its left neighbour pushed. One
/// `capacity` semaphore says a slot is free: each device credits its left neighbour
/// with 2 at the start (both slots) and once more every time it has read a slot, and
/// waits for 1 before each push and for the last 2 at the end. Twin: the capacity
/// signal goes before the slot is read, so the left neighbour can refill it meanwhile
/// (from P = 4: a slot is refilled only from the third step on).
pub fn ring_reduce_scatter(p: usize, broken: bool) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[p, 8], DType::I32)
        .output("y", MemorySpace::Vmem, &[8], DType::I32)
        .vmem("slots", &[2, 8], DType::I32)
        .vmem("acc", &[8], DType::I32)
        .dma_sem("send")
        .dma_sems("recv", 2)
        .regular_sem("capacity");
    PallasCall::new("ring_reduce_scatter", spec, move |pl, a| {
        let (x, y, slots, acc, capacity) = (
            a.r("x"),
            a.r("y"),
            a.r("slots"),
            a.r("acc"),
            a.sem("capacity"),
        );
        let n = p as i64;
        let me = pl.axis_index("x");
        let (left, right) = ((me + n - 1) % n, (me + 1) % n);
        let chunk = |c: i64| x.at((c % n + n) % n);
        pl.semaphore_signal(capacity, 2, left);
        pl.copy(acc, chunk(me - 1));
        for s in 0..n - 1 {
            let slot = s % 2;
            let push = pl.make_async_remote_copy(
                acc,
                slots.at(slot),
                a.sem("send"),
                a.sem("recv").at(slot),
                right,
            );
            pl.in_iteration(s as usize, || {
                pl.semaphore_wait(capacity, 1);
                push.start();
                push.wait_send();
                push.wait_recv();
                if broken {
                    pl.semaphore_signal(capacity, 1, left);
                }
                pl.copy(acc, chunk(me - 2 - s));
                pl.add_assign(acc, slots.at(slot));
                if !broken {
                    pl.semaphore_signal(capacity, 1, left);
                }
            });
        }
        pl.semaphore_wait(capacity, 2);
        pl.copy(y, acc);
    })
}

/// The right shift with a `collective_id`, after the Pallas docs' double barrier with
/// both neighbours (a round on the barrier semaphore, a second on a scoped REGULAR
/// one), called twice in a row: the barrier semaphore carries over between the calls.
/// Twin: one round only; a left neighbour that left the first call can re-enter and
/// signal again, standing in for a right neighbour that has not entered (from P = 5:
/// on a shorter ring the left neighbour's own handshake waits on the right one).
pub fn barrier_shift(_p: usize, broken: bool) -> PallasCall {
    shift_after_rounds(if broken { 1 } else { 2 }, true)
}

/// The right shift after `rounds` barrier rounds with both neighbours: the first on the
/// barrier semaphore, the second on a scoped REGULAR semaphore (`scoped`) or on the
/// barrier semaphore again.
pub fn shift_after_rounds(rounds: usize, scoped: bool) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Any, &[8], DType::I32)
        .output("y", MemorySpace::Any, &[8], DType::I32)
        .dma_sem("send")
        .dma_sem("recv")
        .collective_id(0);
    PallasCall::new("barrier_shift", spec, move |pl, a| {
        let n = pl.num_devices();
        let me = pl.axis_index("x");
        let (left, right) = ((me + n - 1) % n, (me + 1) % n);
        let round = |sem| {
            pl.semaphore_signal(sem, 1, left);
            pl.semaphore_signal(sem, 1, right);
            pl.semaphore_wait(sem, 2);
        };
        let barrier = pl.get_barrier_semaphore();
        round(barrier);
        if rounds == 2 {
            if scoped {
                pl.run_scoped(round);
            } else {
                round(barrier);
            }
        }
        let c = pl.make_async_remote_copy(a.r("x"), a.r("y"), a.sem("send"), a.sem("recv"), right);
        c.start();
        c.wait();
    })
}
