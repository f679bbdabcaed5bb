//! tpusim simulates TPU (Pallas) distributed kernels over P simulated devices on one
//! GPU through wgpu, or on the CPU as an oracle.
//!
//! A kernel is written against a Pallas-like API ([`kernel`]), traced per device and
//! grid point into the ops of the IR ([`ir`]), ordered by a host scheduler ([`sched`])
//! from semaphore state, and the resulting linear schedule of copies, fills and
//! accumulates is run by an executor ([`device_sim`]): GPU buffers and WGSL shaders, or host
//! memory. The verifier ([`verify`]), the step tables ([`trace`]) and the cost model
//! ([`model`]) listen to the scheduler. One pipeline ([`run::Job`]) strings the steps
//! together for the command line, the Python package and library users alike.
//!
//! ```
//! use tpusim::kernel::{GridSpec, MemorySpace, PallasCall};
//! use tpusim::run::Job;
//! use tpusim::{device_sim::cpu::CpuExecutor, DType, HostArray, Mesh};
//!
//! // A left shift: every device pushes its shard to its left neighbour.
//! let mesh = Mesh::new(4, "x").unwrap();
//! let spec = GridSpec::new()
//!     .input("x_ref", MemorySpace::Any, &[2], DType::I32)
//!     .output("y_ref", MemorySpace::Any, &[2], DType::I32)
//!     .dma_sem("send_sem")
//!     .dma_sem("recv_sem");
//! let call = PallasCall::new("left_shift", spec, |pl, a| {
//!     let n = pl.num_devices();
//!     let left = (pl.axis_index("x") - 1 + n) % n;
//!     let (x, y) = (a.r("x_ref"), a.r("y_ref"));
//!     let dma = pl.make_async_remote_copy(x, y, a.sem("send_sem"), a.sem("recv_sem"), left);
//!     dma.start();
//!     dma.wait();
//! });
//! let inputs: Vec<_> = (0..4)
//!     .map(|d| vec![HostArray::from_i32(&[2], vec![d, 10 * d]).unwrap()])
//!     .collect();
//! let out = Job::call(call, mesh).execute(&mut CpuExecutor::new(), &inputs).unwrap();
//! assert_eq!(out[0][0].as_i32(), &[1, 10]);
//! assert_eq!(out[3][0].as_i32(), &[0, 0]);
//! ```
//!
//! # Words a newcomer meets
//!
//! - **Program**: a kernel traced on every device and grid point: each device's list of
//!   ops (DMA starts, waits, signals, data ops) over one memory layout ([`ir::Program`]).
//! - **Schedule**: one order of every device's data ops that the semaphores allow,
//!   chosen by a **policy** (eager, lazy, lockstep, run-ahead, random); a race-free
//!   kernel gives the same result under every schedule ([`ir::Schedule`]).
//! - **Completion**: a remote DMA has two, in either order: the *send* completion (its
//!   source has been read) and the *receive* completion (its destination written).
//! - **Staging**: when a DMA's send completion comes before its receive completion, the
//!   schedule copies its source into the sender's staging allocation at the send and
//!   from there into the destination at the receive (the source may be reused between).
//! - **Credit**: a semaphore's gain, from a DMA completion (its bytes) or a signal; a
//!   wait consumes credits first in, first out ([`sched::Credit`]).
//! - **Arena**: on a GPU, every device's memory in one buffer, so one dispatch can run
//!   ops of every device at once.
//! - **Level** (or **wave**): a set of a schedule's data ops that touch disjoint bytes,
//!   run as one GPU dispatch over an op table.
//! - **Pull model**: seed 003's simulator, whose kernels may read a peer's memory
//!   (`remote_load`) and wait on signal cells without consuming them; TPU kernels are
//!   push-only.
//! - **Placement**: where a collective runs on a mesh: one kernel over every device, or
//!   one ring per group of devices along an axis ([`mesh::Placement`]).
//! - **Job**: a kernel, its placement, shard shape, dtype and schedule: what every
//!   pipeline step (budget, plan, run, model, check, trace, bench) takes ([`run::Job`]).
//! - **Invocation** and **sequence**: one `pallas_call` every device runs once; a
//!   sequence runs several back to back as one program (`--repeat K`, [`run::Job::then`]),
//!   each device entering invocation k+1 when it leaves k. The barrier semaphore of a
//!   `collective_id` carries over; everything else belongs to one invocation
//!   ([`ir::sequence()`]).

#![warn(missing_docs)]

// The command line lives in the library (so a user crate can run it over its own
// registry) and names the crate as a user would.
extern crate self as tpusim;

pub mod args;
pub mod array;
pub mod bench;
pub mod budget;
pub mod cli;
pub mod collectives;
pub mod device_sim;
pub mod error;
pub mod files;
pub mod interrupt;
pub mod ir;
pub mod kernel;
pub mod mesh;
pub mod model;
pub mod npy;
pub mod plot;
pub mod progress;
pub mod run;
pub mod sched;
pub mod source;
pub mod steer;
pub mod trace;
pub mod units;
pub mod verify;

pub use array::{DType, HostArray};
pub use error::{Error, Result};
pub use mesh::{DeviceId, Mesh, SignalTarget};
