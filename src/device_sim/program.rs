//! A traced kernel: the memory layout every device shares and each device's op list.
//! This is what the kernel API produces and what the scheduler consumes.

use crate::array::DType;
use crate::error::Site;
use std::collections::HashSet;
use std::fmt;
use std::panic::Location;
use std::sync::Mutex;

/// Index of an allocation in [`Layout::allocs`].
pub type AllocId = usize;
/// Index of a semaphore slot in [`Layout::sems`].
pub type SemId = usize;

/// Where an allocation lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemorySpace {
    /// HBM (`pl.ANY`): only DMAs may touch it.
    Any,
    /// VMEM: where compute runs.
    Vmem,
}

/// One allocation, present on every device.
#[derive(Clone, Debug)]
pub struct Allocation {
    /// The kernel's name for it (`x_ref`, `hbm_buf`, …).
    pub name: String,
    /// Memory space.
    pub space: MemorySpace,
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<usize>,
}

impl Allocation {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        (self.numel() * self.dtype.size()) as u64
    }
}

/// Kind of a semaphore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SemKind {
    /// Counts bytes of completed DMAs.
    Dma,
    /// Counts signals.
    Regular,
    /// The kernel's barrier semaphore (`get_barrier_semaphore`).
    Barrier,
    /// A cell of a seed-003 signal matrix: written by `notify`, read by a
    /// non-decrementing `wait`; counters are monotonic, so no exit check.
    Signal,
}

/// One semaphore slot, present on every device (arrays are flattened to `name[i]`).
#[derive(Clone, Debug)]
pub struct SemInfo {
    /// Display name, e.g. `recv_sems[2]`.
    pub name: String,
    /// Kind.
    pub kind: SemKind,
}

/// The per-device memory layout: allocations and semaphore slots.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    /// Allocations (the same on every device).
    pub allocs: Vec<Allocation>,
    /// Semaphore slots (the same on every device).
    pub sems: Vec<SemInfo>,
}

/// A contiguous run of elements of one allocation on one device. The fields are 32 bits
/// (a program at large P holds millions of views); the accessors give them as `usize`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View {
    device: u32,
    alloc: u32,
    offset: u32,
    len: u32,
}

/// `x` in 32 bits: device counts, allocation ids, semaphore slots and element counts of
/// one allocation all fit (a simulated allocation is far below 2^32 elements).
fn narrow(x: usize, what: &str) -> u32 {
    u32::try_from(x).unwrap_or_else(|_| panic!("{what} {x} does not fit in 32 bits"))
}

impl View {
    /// `len` elements from `offset` of allocation `alloc` on `device`.
    pub fn new(device: usize, alloc: AllocId, offset: usize, len: usize) -> Self {
        View {
            device: narrow(device, "device"),
            alloc: narrow(alloc, "allocation"),
            offset: narrow(offset, "offset"),
            len: narrow(len, "length"),
        }
    }
    /// Device holding the allocation.
    #[inline]
    pub fn device(&self) -> usize {
        self.device as usize
    }
    /// Allocation.
    #[inline]
    pub fn alloc(&self) -> AllocId {
        self.alloc as usize
    }
    /// First element.
    #[inline]
    pub fn offset(&self) -> usize {
        self.offset as usize
    }
    /// Number of elements.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// True when the view has no element.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The same view on device `device`.
    pub fn on_device(self, device: usize) -> Self {
        View {
            device: narrow(device, "device"),
            ..self
        }
    }
    /// Byte offset in the allocation, whose elements are `elem` bytes wide.
    pub fn byte_offset(&self, elem: usize) -> u64 {
        self.offset as u64 * elem as u64
    }
    /// Size in bytes of `len` elements of `elem` bytes.
    pub fn bytes(&self, elem: usize) -> u64 {
        self.len as u64 * elem as u64
    }
    /// True when the two views share a byte on the same allocation and device.
    pub fn overlaps(&self, other: &View) -> bool {
        self.device == other.device
            && self.alloc == other.alloc
            && self.offset() < other.offset() + other.len()
            && other.offset() < self.offset() + self.len()
    }
}

/// A semaphore slot on a device (32-bit fields, as [`View`]'s).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SemRef {
    device: u32,
    sem: u32,
}

impl SemRef {
    /// Slot `sem` on `device`.
    pub fn new(device: usize, sem: SemId) -> Self {
        SemRef {
            device: narrow(device, "device"),
            sem: narrow(sem, "semaphore slot"),
        }
    }
    /// Device holding it.
    #[inline]
    pub fn device(&self) -> usize {
        self.device as usize
    }
    /// Slot.
    #[inline]
    pub fn sem(&self) -> SemId {
        self.sem as usize
    }
}

/// Reduction operator of an accumulate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// `dst += src`
    Sum,
    /// `dst = max(dst, src)`
    Max,
    /// `dst = min(dst, src)`
    Min,
}

impl ReduceOp {
    /// Parses `sum|max|min`.
    pub fn parse(s: &str) -> crate::Result<Self> {
        match s {
            "sum" => Ok(ReduceOp::Sum),
            "max" => Ok(ReduceOp::Max),
            "min" => Ok(ReduceOp::Min),
            _ => Err(crate::Error::bad_input(format!(
                "unknown reduction `{s}` (expected sum, max or min)"
            ))),
        }
    }
}

/// One unit of data work. The scheduler emits these in a valid order; executors run them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DataOp {
    /// Copy `src` into `dst` (a DMA, or a VMEM assignment). Same length.
    Copy {
        /// Source.
        src: View,
        /// Destination.
        dst: View,
    },
    /// Set every element of `dst` to the 32-bit pattern `bits`.
    Fill {
        /// Destination.
        dst: View,
        /// Element bit pattern.
        bits: u32,
    },
    /// `dst = op(dst, src)` element-wise.
    Accumulate {
        /// Destination (read and written).
        dst: View,
        /// Source.
        src: View,
        /// Operator.
        op: ReduceOp,
        /// Element type.
        dtype: DType,
    },
}

impl DataOp {
    /// Width in bytes of the elements the op moves: its destination's dtype, or the
    /// narrower side of a copy (the staging area holds any dtype in 4-byte slots).
    /// `allocs` is [`crate::device_sim::Schedule::allocations`].
    pub fn elem_bytes(&self, allocs: &[Allocation]) -> usize {
        let width = |v: &View| allocs[v.alloc()].dtype.size();
        match self {
            DataOp::Copy { src, dst } => width(src).min(width(dst)),
            DataOp::Fill { dst, .. } | DataOp::Accumulate { dst, .. } => width(dst),
        }
    }

    /// Bytes the op writes (see [`DataOp::elem_bytes`]).
    pub fn bytes(&self, allocs: &[Allocation]) -> u64 {
        let (_, dst) = self.reads_writes();
        dst.bytes(self.elem_bytes(allocs))
    }

    /// What the op reads (besides its destination) and what it writes: the one
    /// definition of a data op's accesses.
    pub fn reads_writes(&self) -> (Option<View>, View) {
        match *self {
            DataOp::Copy { src, dst } | DataOp::Accumulate { src, dst, .. } => (Some(src), dst),
            DataOp::Fill { dst, .. } => (None, dst),
        }
    }
}

/// A DMA as started by a kernel. A remote DMA (one with a `send_sem`) completes in two
/// separate events, in either order: [`Completion::Send`] (its source has been read) and
/// [`Completion::Recv`] (its destination has been written). A local DMA completes once.
#[derive(Clone, Debug)]
pub struct Dma {
    /// Source view (on the issuing device).
    pub src: View,
    /// Destination view (on the target device).
    pub dst: View,
    /// Semaphore credited on the issuer at send completion (remote DMAs only).
    pub send_sem: Option<SemRef>,
    /// Semaphore credited on the receiver at receive completion (the only one for local DMAs).
    pub recv_sem: SemRef,
    /// Bytes moved.
    pub bytes: u64,
    /// Where it was started.
    pub origin: OpSite,
}

/// One completion event of a DMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Completion {
    /// A remote DMA's source has been read: `send_sem` on the sender gains the bytes.
    Send,
    /// A remote DMA's destination has been written: `recv_sem` on the receiver gains the bytes.
    Recv,
    /// A local DMA is done: it read its source, wrote its destination, credited its semaphore.
    Local,
}

impl Dma {
    /// True for `make_async_remote_copy` (two completions), false for a local copy.
    pub fn is_remote(&self) -> bool {
        self.send_sem.is_some()
    }

    /// The completion events this DMA has, in the order eager policies take them.
    pub fn completions(&self) -> &'static [Completion] {
        if self.is_remote() {
            &[Completion::Recv, Completion::Send]
        } else {
            &[Completion::Local]
        }
    }

    /// The semaphore that `c` credits with [`Dma::bytes`].
    pub fn credits(&self, c: Completion) -> Option<SemRef> {
        match c {
            Completion::Send => self.send_sem,
            Completion::Recv | Completion::Local => Some(self.recv_sem),
        }
    }

    /// The view this DMA is still reading until completion `c`: its source, until the
    /// send completion (or a local DMA's only one).
    pub fn reads_until(&self, c: Completion) -> Option<View> {
        (c != Completion::Recv).then_some(self.src)
    }

    /// The view this DMA may still be writing until completion `c`: its destination,
    /// until the receive completion (or a local DMA's only one).
    pub fn writes_until(&self, c: Completion) -> Option<View> {
        (c != Completion::Send).then_some(self.dst)
    }
}

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
}

/// A line of kernel source: a file name and a line number. A Rust kernel's come from
/// `#[track_caller]` ([`SourceLoc::caller`]); a front end for kernels written in another
/// language (the Python package) makes its own with [`SourceLoc::intern`] and hands
/// them to `Ctx::set_source`, so every report names the line the kernel author wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SourceLoc {
    /// The file name's number (`source_files`).
    file: u32,
    line: u32,
}

impl SourceLoc {
    /// The location of the nearest caller that is not `#[track_caller]`.
    #[track_caller]
    pub fn caller() -> Self {
        Location::caller().into()
    }

    /// `file:line` for a file name known only at run time. Each distinct file name is
    /// copied once into memory that lives as long as the process (a kernel has few source
    /// files), so sites stay `Copy`.
    pub fn intern(file: &str, line: u32) -> Self {
        static FILES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
        let mut files = FILES.lock().unwrap_or_else(|e| e.into_inner());
        let files = files.get_or_insert_with(HashSet::new);
        let file = match files.get(file) {
            Some(f) => *f,
            None => {
                let f: &'static str = Box::leak(file.to_owned().into_boxed_str());
                files.insert(f);
                f
            }
        };
        SourceLoc {
            file: super::source_files::number(file),
            line,
        }
    }

    /// The file name.
    pub fn file(&self) -> &'static str {
        super::source_files::name(self.file)
    }

    /// The line number (1-based).
    pub fn line(&self) -> u32 {
        self.line
    }
}

impl From<&'static Location<'static>> for SourceLoc {
    fn from(l: &'static Location<'static>) -> Self {
        SourceLoc {
            file: super::source_files::number(l.file()),
            line: l.line(),
        }
    }
}

impl fmt::Display for SourceLoc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file(), self.line)
    }
}

/// Where an op was recorded: grid point (linear), API call and kernel source line. 20
/// bytes: a program at large P has millions of sites.
#[derive(Clone, Copy, Debug)]
pub struct OpSite {
    /// Device that recorded the op (32 bits, as the planner's limit on P).
    pub device: u32,
    /// Row-major index of the grid point.
    pub grid_linear: u32,
    /// The API call's name, by number ([`OpSite::op`]).
    op: u32,
    /// Kernel source location.
    pub location: SourceLoc,
}

impl OpSite {
    /// The site of API call `op` of `device` at grid point `grid_linear`, from `location`.
    pub fn new(device: u32, grid_linear: u32, op: &'static str, location: SourceLoc) -> Self {
        OpSite {
            device,
            grid_linear,
            op: super::source_files::number(op),
            location,
        }
    }

    /// The API call's name.
    pub fn op(&self) -> &'static str {
        super::source_files::name(self.op)
    }
}

/// One traced op.
#[derive(Clone, Debug)]
pub struct Op {
    /// What it does.
    pub kind: OpKind,
    /// Where it came from.
    pub site: OpSite,
}

/// A kernel traced over every device and grid point.
#[derive(Clone, Debug)]
pub struct Program {
    /// Kernel name.
    pub name: String,
    /// Number of devices.
    pub devices: usize,
    /// Grid dimensions.
    pub grid: Vec<usize>,
    /// Memory layout shared by every device.
    pub layout: Layout,
    /// Each device's ops in program order.
    pub ops: Vec<Vec<Op>>,
    /// Every DMA started, indexed by [`OpKind::DmaStart`].
    pub dmas: Vec<Dma>,
    /// Data ops run before the grid (VMEM operands copied in).
    pub prologue: Vec<DataOp>,
    /// Data ops run after the grid (VMEM outputs copied out).
    pub epilogue: Vec<DataOp>,
    /// The HBM allocation that holds each input operand.
    pub inputs: Vec<AllocId>,
    /// The HBM allocation that holds each output operand.
    pub outputs: Vec<AllocId>,
    /// True when the kernel has no barrier semaphore (no `collective_id`): Pallas then
    /// inserts a barrier at kernel entry, so no device runs an op before every device
    /// has entered. With one, the kernel must make sure itself that a device has entered
    /// before it sends to it.
    pub entry_barrier: bool,
}

impl Program {
    /// Grid coordinates of a row-major grid index.
    pub fn grid_point(&self, linear: usize) -> Vec<usize> {
        grid_coords(&self.grid, linear)
    }

    /// A printable [`Site`] for an op site.
    pub fn site(&self, s: &OpSite) -> Site {
        Site {
            device: s.device as usize,
            grid: self.grid_point(s.grid_linear as usize),
            op: s.op(),
            location: s.location.to_string(),
        }
    }

    /// Display name of a semaphore slot.
    pub fn sem_name(&self, s: SemRef) -> String {
        self.layout.sems[s.sem()].name.clone()
    }

    /// Total number of traced ops over all devices.
    pub fn op_count(&self) -> usize {
        self.ops.iter().map(Vec::len).sum()
    }
}

/// Row-major coordinates of `linear` in a grid of dimensions `grid`.
pub fn grid_coords(grid: &[usize], linear: usize) -> Vec<usize> {
    let mut rest = linear;
    let mut out = vec![0; grid.len()];
    for (i, n) in grid.iter().enumerate().rev() {
        out[i] = rest % n.max(&1);
        rest /= n.max(&1);
    }
    out
}
