//! Executors: run a [`Schedule`] on real memory. The GPU executor is the product;
//! the CPU executor is the oracle the tests compare it with.

pub mod cpu;
pub mod gpu;

use crate::array::HostArray;
use crate::device_sim::{Program, Schedule};
use crate::error::{Error, Result};

/// Runs a schedule on some memory.
pub trait Executor {
    /// Short description: `cpu`, or the GPU adapter's name and backend.
    fn describe(&self) -> String;

    /// Fails when `program` cannot run here (an allocation beyond the adapter's limits),
    /// before any data is made for it.
    fn check(&self, _program: &Program) -> Result<()> {
        Ok(())
    }

    /// True when the memory this executor allocates for a program is host memory (the
    /// CPU executor, or a GPU driver that runs on the CPU, such as lavapipe).
    fn buffers_in_host_memory(&self) -> bool {
        true
    }

    /// Loads `inputs[device][operand]`, runs `schedule`, returns `outputs[device][operand]`.
    fn execute(
        &mut self,
        program: &Program,
        schedule: &Schedule,
        inputs: &[Vec<HostArray>],
    ) -> Result<Vec<Vec<HostArray>>>;
}

/// Checks that `inputs` has one array per device and operand, with the right shape and dtype.
pub fn check_inputs(program: &Program, inputs: &[Vec<HostArray>]) -> Result<()> {
    if inputs.len() != program.devices {
        return Err(Error::bad_input(format!(
            "`{}` runs on {} devices but inputs for {} were given",
            program.name,
            program.devices,
            inputs.len()
        )));
    }
    for (d, dev) in inputs.iter().enumerate() {
        if dev.len() != program.inputs.len() {
            return Err(Error::bad_input(format!(
                "`{}` takes {} inputs but device {d} was given {}",
                program.name,
                program.inputs.len(),
                dev.len()
            )));
        }
        for (a, arr) in program.inputs.iter().zip(dev) {
            let alloc = &program.layout.allocs[*a];
            if arr.shape != alloc.shape || arr.dtype != alloc.dtype {
                return Err(Error::bad_input(format!(
                    "input `{}` on device {d} must be {:?} {} but is {:?} {}",
                    alloc.name, alloc.shape, alloc.dtype, arr.shape, arr.dtype
                )));
            }
        }
    }
    Ok(())
}

/// A zeroed word vector of `len` elements, or a limit error naming `what` when the
/// host cannot allocate it (instead of aborting the process).
pub fn host_words(len: usize, what: &str) -> Result<Vec<u32>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| Error::Limit {
        what: format!("host memory for {what}"),
        requested: len as u64 * 4,
        limit: 0,
    })?;
    v.resize(len, 0);
    Ok(v)
}

/// Which executor to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The wgpu executor on the chosen adapter.
    Gpu,
    /// The host-memory executor.
    Cpu,
}

impl Backend {
    /// Parses `gpu|cpu`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "gpu" => Ok(Backend::Gpu),
            "cpu" => Ok(Backend::Cpu),
            _ => Err(Error::bad_input(format!(
                "unknown backend `{s}` (expected gpu or cpu)"
            ))),
        }
    }
}
