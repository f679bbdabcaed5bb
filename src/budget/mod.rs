//! Scale limits: what a command will need, estimated from P, the shape and the
//! collective before anything is planned, and refused with the numbers when it cannot
//! fit ([`ensure_fits`]).
//!
//! [`Census`] counts the kernel's allocations and semaphores from its spec and its ops
//! per device from a few traced samples; [`need`] turns the counts into named parts
//! (program, schedule, data, GPU recording, checker clocks, step tables) for each
//! command; [`available`] reads the host memory the process may use.

mod census;
mod fit;
mod memory;
mod need;

pub use census::{Census, Traced};
pub use fit::{
    ensure_fits, ensure_fits_in, ranks_needed, Request, Share, MAX_DEVICES, MAX_OPS_PER_DEVICE,
};
pub use memory::{available, meminfo_available, Available, LIMIT_VAR};
pub use need::{
    need, need_on, Buffers, Need, Part, Scales, Work, ENCODE_BYTES_PER_DATA_OP,
    GPU_BYTES_PER_DATA_OP, MODEL_BYTES_PER_OP, TIMELINE_BYTES_PER_OP,
};
