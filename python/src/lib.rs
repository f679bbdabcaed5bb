//! `tpusim._native`: the Rust core of tpusim for Python, one module per concern, in
//! three layers, each using only those below it (`tests/layers.rs` checks there is no
//! circle):
//! - at the bottom, values and their errors: [`errors`] (exceptions), [`args`] (counts,
//!   seeds and schedules checked by the core's rules), [`arrays`] (numpy in and out),
//!   [`mesh`], [`interrupts`] (Ctrl-C in long calls), [`outputs`] (files written whole,
//!   or streams in place), [`progress`], [`budget`] (what the front end asks the
//!   budget), [`executors`], [`kept_runs`] (GPU runs kept across calls), [`heap`],
//!   [`huge`] (results in huge pages), [`replay`] (a recorded jaxpr as the core's ops),
//!   [`records`] (the recording read from Python's objects), [`steer`], [`xla_ffi`]
//!   (XLA's typed FFI), [`buffers`] (a round's XLA buffers and their wiring) and [`jobs`]
//!   (what every job does: check, model);
//! - the kernel call and its wiring: [`kernel`] (a Pallas kernel written in Python, its
//!   jaxpr recorded by `tpusim._jaxpr`) and [`xla_call`] (the custom call a
//!   `pallas_call` lowers to, whose rounds run a kernel call on their buffers);
//! - the module's functions on top: [`collectives`] (the shipped ones) and this file.
//!
//! Every step is a job of the core's pipeline (`tpusim::run::Job`), as on the command
//! line; structured results cross as Python data (dicts and lists, through `pythonize`)
//! in the core's formats.

mod args;
mod arrays;
mod budget;
mod buffers;
mod collectives;
mod errors;
mod executors;
mod heap;
mod huge;
mod interrupts;
mod jobs;
mod kept_runs;
mod kernel;
mod mesh;
mod outputs;
mod progress;
mod records;
mod replay;
mod steer;
mod xla_call;
mod xla_ffi;

use mesh::PyMesh;
use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    heap::keep_freed_memory();
    interrupts::install(m.py())?;
    m.add_function(wrap_pyfunction!(interrupts::check_interrupt, m)?)?;
    m.add_function(wrap_pyfunction!(args::count, m)?)?;
    m.add_function(wrap_pyfunction!(args::schedule, m)?)?;
    m.add_function(wrap_pyfunction!(args::backend, m)?)?;
    m.add_function(wrap_pyfunction!(budget::ensure_loop_fits, m)?)?;
    m.add_function(wrap_pyfunction!(budget::ensure_host_devices_fit, m)?)?;
    m.add_class::<outputs::PyOutput>()?;
    m.add_function(wrap_pyfunction!(outputs::write_output, m)?)?;
    m.add_function(wrap_pyfunction!(outputs::check_output, m)?)?;
    m.add_function(wrap_pyfunction!(outputs::check_output_dir, m)?)?;
    m.add_class::<progress::Progress>()?;
    m.add_class::<PyMesh>()?;
    m.add_class::<kernel::KernelCall>()?;
    m.add_function(wrap_pyfunction!(records::_read_recording_both, m)?)?;
    m.add_function(wrap_pyfunction!(kernel::check_sequence, m)?)?;
    m.add_function(wrap_pyfunction!(budget::ensure_recording_fits, m)?)?;
    m.add_function(wrap_pyfunction!(kernel::iteration_text, m)?)?;
    m.add_function(wrap_pyfunction!(executors::resolve_backend, m)?)?;
    m.add_class::<buffers::CallBuffers>()?;
    m.add_function(wrap_pyfunction!(xla_call::meeting_register, m)?)?;
    m.add_function(wrap_pyfunction!(xla_call::meeting_save_run, m)?)?;
    m.add_function(wrap_pyfunction!(xla_call::settings_epoch, m)?)?;
    m.add_function(wrap_pyfunction!(xla_call::forget_saved_runs, m)?)?;
    m.add_function(wrap_pyfunction!(xla_call::saved_rounds, m)?)?;
    m.add_function(wrap_pyfunction!(xla_call::ffi_handler_address, m)?)?;
    use collectives as c;
    m.add_function(wrap_pyfunction!(c::collectives, m)?)?;
    m.add_function(wrap_pyfunction!(c::variants, m)?)?;
    m.add_function(wrap_pyfunction!(c::presets, m)?)?;
    m.add_function(wrap_pyfunction!(c::check_preset, m)?)?;
    m.add_function(wrap_pyfunction!(c::adapters, m)?)?;
    m.add_function(wrap_pyfunction!(c::collective_run, m)?)?;
    m.add_function(wrap_pyfunction!(c::collective_shard_map, m)?)?;
    m.add_function(wrap_pyfunction!(c::collective_check, m)?)?;
    m.add_function(wrap_pyfunction!(c::collective_trace, m)?)?;
    m.add_function(wrap_pyfunction!(c::collective_model, m)?)?;
    m.add_function(wrap_pyfunction!(c::collective_bench, m)?)?;
    m.add_function(wrap_pyfunction!(c::bus_factor, m)?)?;
    m.add_function(wrap_pyfunction!(c::bench_context, m)?)?;
    m.add_function(wrap_pyfunction!(c::collective_inputs, m)?)?;
    m.add_function(wrap_pyfunction!(c::parse_perm, m)?)?;
    m.add_function(wrap_pyfunction!(c::plot, m)?)?;
    errors::register(m)
}
