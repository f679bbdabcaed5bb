//! Traced ops: what one step of a device's program does.

use super::data::DataOp;
use super::site::OpSite;
use super::view::{SemRef, View};

/// Why a device blocks on a semaphore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitKind {
    /// `copy.wait()` of a local DMA.
    DmaWait,
    /// `wait_send()` of a remote DMA.
    WaitSend,
    /// `wait_recv()` of a remote DMA.
    WaitRecv,
    /// `semaphore_wait`.
    Semaphore,
    /// Seed-003 `wait` on a signal cell (does not decrement).
    Signal,
}

impl WaitKind {
    /// True when passing the wait subtracts its amount from the semaphore: every wait but
    /// a seed-003 signal wait, which only reads its cell.
    #[inline]
    pub fn decrements(self) -> bool {
        self != WaitKind::Signal
    }
}

/// How a wait compares the semaphore with its amount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    /// `value >= amount`.
    Ge,
    /// `value == amount`.
    Eq,
}

/// What one traced op does.
#[derive(Clone, Debug)]
pub enum OpKind {
    /// Put DMA `Program::dmas[id]` in flight.
    DmaStart(usize),
    /// Block until `sem` compares true with `amount`; then subtract `amount`
    /// unless the wait is a seed-003 signal wait.
    Wait {
        /// Semaphore (always on the waiting device).
        sem: SemRef,
        /// Amount.
        amount: u64,
        /// Which API call.
        why: WaitKind,
        /// Comparison.
        cmp: Cmp,
    },
    /// Add `inc` to `sem` (possibly on another device), or set it to `inc`.
    Signal {
        /// Semaphore.
        sem: SemRef,
        /// Increment (or the value, with `set`).
        inc: u64,
        /// Seed-003 `NotifyOp::Set`.
        set: bool,
    },
    /// VMEM compute (boxed: the other kinds are under half its size, and a program at
    /// large P holds millions of ops).
    Compute(Box<DataOp>),
    /// A step boundary for step tables in kernels that loop inside one grid point
    /// (`Ctx::trace_step`); no effect on execution.
    Mark(std::sync::Arc<str>),
    /// `pl.semaphore_read`: writes `sem`'s value when the op runs (the schedule decides
    /// it) into the one 32-bit integer element `dst`, as a fill ([`OpKind::fill_of_read`]).
    SemRead {
        /// Semaphore (on the reading device).
        sem: SemRef,
        /// Where the value goes (VMEM, one i32 element).
        dst: View,
    },
    /// A scalar the kernel reads to decide what it does next (an SMEM element a DMA or a
    /// store wrote, a reduced vector, a semaphore's value read into VMEM): a read of
    /// `src` when the op runs. A front end that traces while the program runs
    /// ([`crate::steer`]) stops there: what `fetch` (`src`, or more of its
    /// allocation) holds at that point of the schedule is what its tracing goes on with.
    Read {
        /// What the kernel reads (an access, for the verifier).
        src: View,
        /// What the tracer is given (not an access of its own).
        fetch: View,
    },
}

/// One traced op.
#[derive(Clone, Debug)]
pub struct Op {
    /// What it does.
    pub kind: OpKind,
    /// Where it came from.
    pub site: OpSite,
}

/// How a program's ids move when its ops are placed in a larger program (groups of a
/// mesh, invocations of a sequence): DMA ids, semaphores and views.
pub struct Remap<'a> {
    /// A DMA id.
    pub dma: &'a dyn Fn(usize) -> usize,
    /// A semaphore.
    pub sem: &'a dyn Fn(SemRef) -> SemRef,
    /// A view.
    pub view: &'a dyn Fn(View) -> View,
}

impl OpKind {
    /// The same op with its ids moved by `m`.
    pub fn remap(&self, m: &Remap) -> OpKind {
        match self {
            OpKind::DmaStart(k) => OpKind::DmaStart((m.dma)(*k)),
            OpKind::Wait {
                sem,
                amount,
                why,
                cmp,
            } => OpKind::Wait {
                sem: (m.sem)(*sem),
                amount: *amount,
                why: *why,
                cmp: *cmp,
            },
            OpKind::Signal { sem, inc, set } => OpKind::Signal {
                sem: (m.sem)(*sem),
                inc: *inc,
                set: *set,
            },
            OpKind::Compute(c) => OpKind::Compute(Box::new(c.map_views(m.view))),
            OpKind::Mark(label) => OpKind::Mark(label.clone()),
            OpKind::SemRead { sem, dst } => OpKind::SemRead {
                sem: (m.sem)(*sem),
                dst: (m.view)(*dst),
            },
            OpKind::Read { src, fetch } => OpKind::Read {
                src: (m.view)(*src),
                fetch: (m.view)(*fetch),
            },
        }
    }

    /// The data op a semaphore read is when the semaphore holds `value`: the one
    /// definition of what `SemRead` writes (a value past `i32::MAX` saturates).
    pub fn fill_of_read(dst: View, value: u64) -> DataOp {
        DataOp::Fill {
            dst,
            bits: value.min(i32::MAX as u64) as u32,
        }
    }
}
