//! Scale limits: what a command will need, estimated from P, the shape and the
//! collective before anything is planned, and refused with the numbers when it cannot
//! fit ([`ensure_fits`]).
//!
//! [`Census`] counts the kernel's allocations and semaphores from its spec and its ops
//! per device from a few traced samples; [`need`] turns the counts into named parts
//! (program, schedule, data, GPU recording, checker clocks, step tables) for each
//! command; [`available`] reads the host memory the process may use; [`time`] estimates
//! how long the command takes, held to [`time_limit`] (10 minutes, `TPUSIM_TIME_LIMIT`).
//! A front end that records a kernel by running its code per device and grid point asks
//! [`ensure_recording_fits`] and [`ensure_loop_fits`] at what it counted (not timed), and
//! [`ensure_host_devices_fit`] before it starts JAX's CPU devices.

mod census;
mod fit;
mod host_devices;
mod memory;
mod need;
mod time;

pub use census::{Census, Traced};
pub use fit::{
    ensure_fits, ensure_fits_in, ensure_fits_within, ranks_needed, Request, Share,
    MAX_CHECKED_ELEMENTS, MAX_DEVICES, MAX_OPS_PER_DEVICE,
};
pub use host_devices::ensure_host_devices_fit;
pub use memory::{available, meminfo_available, Available, LIMIT_VAR};
pub use need::{
    chunk_words, need, need_on, Buffers, Need, Part, Scales, Work, ENCODE_BYTES_PER_DATA_OP,
    GPU_BYTES_PER_DATA_OP, MODEL_BYTES_PER_OP, TIMELINE_BYTES_PER_OP,
};
pub use time::{
    ensure_loop_fits, ensure_recording_fits, time, time_limit, Recorded, RecordedLoop, Term, Time,
    TimeLimit, CHECK_SECONDS_PER_CLOCK_ENTRY, CHECK_SECONDS_PER_OP, COMPARE_SECONDS_PER_ELEMENT,
    CPU_SECONDS_PER_DATA_OP, CPU_SECONDS_PER_WORD, DEFAULT_TIME_LIMIT, GPU_SECONDS_PER_DATA_OP,
    GPU_SECONDS_PER_SUBMISSION, MODEL_SECONDS_PER_OP, PLAN_SECONDS_PER_OP, RECORD_BYTES_PER_POINT,
    RECORD_SECONDS_PER_EQN, RECORD_SECONDS_PER_ITERATION, RECORD_SECONDS_PER_POINT, TIME_LIMIT_VAR,
};
