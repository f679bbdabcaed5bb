//! One error type for the whole crate; every message names what went wrong and where.

use crate::source::Iteration;
use serde::{Serialize, Serializer};
use std::fmt;

/// Crate-wide result alias.
pub type Result<T> = std::result::Result<T, Error>;

/// How reports name a simulated device: a chip (`device 3`), or one TensorCore of a chip
/// when a kernel runs on the cores of chips that have several (`pl.core_map`, whose
/// cores are consecutive devices of the simulated mesh: its device 7 is `device 3 core 1`
/// on chips of 2 cores).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DeviceName {
    /// The chip (JAX's device).
    pub device: usize,
    /// The TensorCore of the chip, on chips of several.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub core: Option<u16>,
}

impl DeviceName {
    /// The name of device `agent` of a mesh whose chips have `cores` cores each.
    pub fn of(agent: usize, cores: usize) -> Self {
        match cores {
            0 | 1 => DeviceName {
                device: agent,
                core: None,
            },
            c => DeviceName {
                device: agent / c,
                core: Some(u16::try_from(agent % c).expect("fewer than 2^16 cores a chip")),
            },
        }
    }
}

impl fmt::Display for DeviceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device {}", self.device)?;
        match self.core {
            Some(c) => write!(f, " core {c}"),
            None => Ok(()),
        }
    }
}

/// Where in a kernel something happened: device, grid point, op and kernel source line
/// (and, in a sequence of kernel invocations, which one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Site {
    /// Device id: the linear one in the mesh, or the chip when chips have several cores.
    pub device: usize,
    /// The TensorCore, on chips of several (see [`DeviceName`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub core: Option<u16>,
    /// The kernel invocation, in a sequence of them (`None` for a single one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invocation: Option<u32>,
    /// Grid point (one index per grid axis); empty before the grid or for an empty grid.
    pub grid: Vec<usize>,
    /// The loop iteration(s) of the call (printed and serialized as `iteration 2 of
    /// the loop at kernel.py:40`); [`Iteration::NONE`] outside every loop.
    #[serde(skip_serializing_if = "Iteration::is_none")]
    pub iteration: Iteration,
    /// The API call, e.g. `make_async_remote_copy`.
    pub op: &'static str,
    /// `file:line` of the kernel source that made the call.
    pub location: String,
}

impl Site {
    /// The device as [`DeviceName`] names it.
    pub fn device_name(&self) -> DeviceName {
        DeviceName {
            device: self.device,
            core: self.core,
        }
    }
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.device_name())?;
        if let Some(k) = self.invocation {
            write!(f, " in invocation {k}")?;
        }
        write!(f, " at grid point {:?}", self.grid)?;
        if !self.iteration.is_none() {
            write!(f, " in {}", self.iteration)?;
        }
        write!(f, ", `{}` ({})", self.op, self.location)
    }
}

/// What kind of mistake a kernel made while it was traced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KernelErrorKind {
    /// A device id outside the mesh.
    DeviceIdOutOfRange,
    /// An index or slice outside a ref or semaphore array.
    OutOfBounds,
    /// Two refs of one op whose shapes or dtypes differ.
    ShapeMismatch,
    /// Compute that reads or writes HBM (only DMAs may touch HBM).
    HbmInCompute,
    /// A ref or semaphore used in a way its kind does not allow.
    Misuse,
    /// A TPU-model kernel that reads a peer's memory (TPU remote DMAs are push-only).
    PeerRead,
}

impl KernelErrorKind {
    /// How messages name the kind: `device id out of range`, `out of bounds`, ….
    pub fn name(self) -> &'static str {
        match self {
            KernelErrorKind::DeviceIdOutOfRange => "device id out of range",
            KernelErrorKind::OutOfBounds => "out of bounds",
            KernelErrorKind::ShapeMismatch => "shape mismatch",
            KernelErrorKind::HbmInCompute => "HBM used in compute",
            KernelErrorKind::Misuse => "misuse",
            KernelErrorKind::PeerRead => "peer read in the TPU model",
        }
    }
}

impl Serialize for KernelErrorKind {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// A mistake found while tracing a kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KernelError {
    /// The kind of mistake.
    pub kind: KernelErrorKind,
    /// Where it happened.
    pub site: Site,
    /// The one fact needed to fix it.
    pub detail: String,
}

/// A device that cannot make progress when the run deadlocks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Blocked {
    /// Where the device waits.
    pub site: Site,
    /// The semaphore it waits on.
    pub semaphore: String,
    /// Its current value.
    pub value: u64,
    /// The value the wait needs.
    pub awaited: u64,
    /// True when the wait needs exactly `awaited` (a seed-003 `Eq` wait).
    pub exact: bool,
}

/// Something left over when every device finished the kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind")]
#[non_exhaustive]
pub enum ExitProblem {
    /// A semaphore is not back at zero.
    #[serde(rename = "semaphore not zero")]
    SemaphoreNotZero {
        /// Device holding it.
        #[serde(flatten)]
        device: DeviceName,
        /// Semaphore name (with array index).
        semaphore: String,
        /// Its value at exit.
        value: u64,
        /// The last signal it received, if any.
        last_signal: Option<Site>,
    },
    /// A DMA completed but nobody waited for it.
    #[serde(rename = "DMA never waited")]
    DmaNotWaited {
        /// Where it was started.
        site: Site,
        /// The semaphore that still holds its bytes.
        semaphore: String,
        /// Its byte count.
        bytes: u64,
    },
}

/// What kind of GPU failure an [`Error::Gpu`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GpuErrorKind {
    /// wgpu refused a command or a resource (a bug in tpusim's GPU recording).
    Validation,
    /// The adapter could not allocate the memory asked for.
    OutOfMemory,
    /// Mapping or reading a result buffer back to the host failed.
    Readback,
    /// The device was lost (driver reset, removal) or stopped answering.
    Lost,
}

/// A failed GPU operation: its kind and wgpu's own message, with what was being done.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GpuError {
    /// The kind of failure.
    pub kind: GpuErrorKind,
    /// What was being done and what wgpu said.
    pub message: String,
}

impl GpuError {
    /// An error of `kind` with `message`.
    pub fn new(kind: GpuErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.message;
        match self.kind {
            GpuErrorKind::Validation => write!(f, "wgpu rejected a command (a tpusim bug): {m}"),
            GpuErrorKind::OutOfMemory => write!(f, "the GPU ran out of memory: {m}"),
            GpuErrorKind::Readback => write!(f, "reading results back from the GPU failed: {m}"),
            GpuErrorKind::Lost => write!(f, "the GPU device was lost: {m}"),
        }
    }
}

impl std::error::Error for GpuError {}

impl From<GpuError> for Error {
    fn from(e: GpuError) -> Self {
        Error::Gpu(e)
    }
}

/// Every error tpusim reports.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Bad user input: shape, P, dtype, collective name, permutation.
    BadInput(String),
    /// No GPU adapter could be found or opened.
    NoAdapter(String),
    /// A GPU operation failed.
    Gpu(GpuError),
    /// A request larger than the adapter, a cost model or the host allows.
    Limit {
        /// What was requested.
        what: String,
        /// Requested amount.
        requested: u64,
        /// The limit (0: the host could not allocate it).
        limit: u64,
    },
    /// A kernel mistake found while tracing.
    Kernel(KernelError),
    /// No device can make progress, no DMA is in flight, and work is left.
    Deadlock(Vec<Blocked>),
    /// Leftovers at kernel exit.
    Exit(Vec<ExitProblem>),
    /// A command that cannot fit in this machine's memory or the planner's limits,
    /// with the numbers and what would fit.
    TooLarge(String),
    /// A file the user named could not be read or written.
    File {
        /// What was being done, e.g. `write timeline to` or `read input`.
        action: String,
        /// The path as the user gave it.
        path: std::path::PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// An I/O failure.
    Io(std::io::Error),
    /// Another rank of a partitioned run failed ([`crate::device_sim::ranks`]): its error,
    /// and the exit status it gives.
    Rank {
        /// The rank that failed first.
        rank: usize,
        /// Its exit status (2 bad input, 1 otherwise).
        status: u8,
        /// Its message.
        message: String,
    },
    /// The work was asked to stop (Ctrl-C while a caller watched it:
    /// [`crate::interrupt`]); it stopped cleanly, with nothing half-written.
    Interrupted,
}

impl Error {
    /// Shorthand for [`Error::BadInput`].
    pub fn bad_input(msg: impl Into<String>) -> Self {
        Error::BadInput(msg.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::BadInput(m) => write!(f, "bad input: {m}"),
            Error::NoAdapter(m) => write!(f, "no GPU adapter: {m}"),
            Error::Gpu(e) => write!(f, "GPU error: {e}"),
            Error::Limit {
                what,
                requested,
                limit: 0,
            } => write!(
                f,
                "{what} needs {requested} bytes, more than this machine could allocate"
            ),
            Error::Limit {
                what,
                requested,
                limit,
            } => write!(
                f,
                "{what} needs {requested} bytes but the limit is {limit} bytes"
            ),
            Error::Kernel(e) => write!(f, "{}: {} in {}", e.kind.name(), e.detail, e.site),
            Error::Deadlock(blocked) => {
                writeln!(
                    f,
                    "deadlock: no device can make progress and no DMA is in flight"
                )?;
                for b in blocked {
                    writeln!(
                        f,
                        "  {} waits on `{}`: value {}, needs {}{}",
                        b.site,
                        b.semaphore,
                        b.value,
                        if b.exact { "exactly " } else { "" },
                        b.awaited
                    )?;
                }
                Ok(())
            }
            Error::Exit(problems) => {
                writeln!(f, "kernel exit check failed:")?;
                for p in problems {
                    match p {
                        ExitProblem::SemaphoreNotZero {
                            device,
                            semaphore,
                            value,
                            last_signal,
                        } => {
                            write!(
                                f,
                                "  semaphore not zero at exit: {device} `{semaphore}` = {value}"
                            )?;
                            match last_signal {
                                Some(s) => writeln!(
                                    f,
                                    " (last signalled by {s}): every signal needs a matching wait"
                                )?,
                                None => writeln!(f)?,
                            }
                        }
                        ExitProblem::DmaNotWaited {
                            site,
                            semaphore,
                            bytes,
                        } => writeln!(
                            f,
                            "  DMA never waited: {site} ({bytes} bytes still on `{semaphore}`)"
                        )?,
                    }
                }
                Ok(())
            }
            Error::TooLarge(m) => write!(f, "{m}"),
            Error::File {
                action,
                path,
                source,
            } => write!(f, "cannot {action} {}: {source}", path.display()),
            Error::Io(e) => write!(f, "I/O error: {e}"),
            Error::Rank { rank, message, .. } => write!(f, "rank {rank}: {message}"),
            Error::Interrupted => write!(f, "interrupted: the work was stopped before it ended"),
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}
