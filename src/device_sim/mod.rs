//! The simulated TPU device, last step of the pipeline (kernel -> ir -> sched -> device_sim):
//! each device's memories (HBM, VMEM, SMEM, semaphores) as buffers and the executors that
//! run the [`Schedule`] sched ordered on them.
//!
//! The GPU executor is the product; the CPU executor is the oracle the tests compare it
//! with; `fuse` prepares a schedule for either; `ranks` splits the devices over processes.

pub mod cpu;
pub mod fuse;
pub mod gpu;
mod lend;
pub mod ranks;

use crate::array::HostArray;
use crate::error::{Error, Result};
use crate::ir::{Program, Schedule, View};
use std::time::Duration;

pub use lend::{Coverage, Lent};

/// A stretch of a schedule's ops that an executor runs a block of elements at a time
/// (every op of the stretch on one block before the next, the blocks over the cores), so
/// that its views cross memory once for the whole stretch, not once per op: what a roof
/// counts for it ([`crate::bench::Rates::roofline_blocked`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockedStretch {
    /// The schedule's ops it runs (indices into [`Schedule::ops`]).
    pub ops: Vec<usize>,
    /// The distinct views it writes to memory (identical or apart): each leaves for
    /// memory once. Views whose values are dead outside the stretch, which the blocks
    /// keep in the cores' own buffers, are not among them.
    pub written: Vec<View>,
    /// The cores its blocks are spread over.
    pub cores: usize,
}

/// Runs a schedule on some memory. The lifecycle: [`Executor::prepare`] a schedule once
/// (memory, and on the GPU the recorded commands), then [`Prepared::upload`] inputs,
/// [`Prepared::run`] it any number of times and [`Prepared::read_outputs`].
pub trait Executor {
    /// Short description: `cpu`, or the GPU adapter's name and backend.
    fn describe(&self) -> String;

    /// Fails when `program` cannot run here (an allocation beyond the adapter's limits),
    /// before any data is made for it.
    fn check(&self, _program: &Program) -> Result<()> {
        Ok(())
    }

    /// Allocates (zeroed) memory for `schedule` and records what it runs, once.
    fn prepare<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
    ) -> Result<Box<dyn Prepared + 'a>>;

    /// As [`Executor::prepare`], for a caller that reads only `outputs` (indices into
    /// the program's outputs) after the runs: the others may hold anything, and an
    /// executor may leave out the work only they need. By default the same as `prepare`.
    fn prepare_reading<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
        _outputs: &[usize],
    ) -> Result<Box<dyn Prepared + 'a>> {
        self.prepare(program, schedule)
    }

    /// As [`Executor::prepare`], every op run as the schedule lists it: none fused with
    /// another or dropped as unread (what an executor's rates are measured on, kernels
    /// whose results nothing reads). By default the same as `prepare`.
    fn prepare_literal<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
    ) -> Result<Box<dyn Prepared + 'a>> {
        self.prepare(program, schedule)
    }

    /// The plain copy bandwidth of this executor for buffers of `bytes` bytes, in bytes
    /// per second (the yardstick `bench` compares with), if it has a meaningful one.
    fn copy_bandwidth(&self, _bytes: u64) -> Result<Option<f64>> {
        Ok(None)
    }

    /// True for an executor on a GPU adapter (its recorded commands cost host memory).
    fn is_gpu(&self) -> bool {
        false
    }

    /// True when the memory this executor allocates for a program is host memory (the
    /// CPU executor, or a GPU driver that runs on the CPU, such as lavapipe).
    fn buffers_in_host_memory(&self) -> bool {
        true
    }

    /// Prepares `schedule` cut before each op index of `cuts` (increasing, each within
    /// `1..ops.len()`): one memory, whose pieces run one at a time
    /// ([`Prepared::run_piece`]) with views read and written between them
    /// ([`Prepared::read_view`], [`Prepared::write_view`]), as a partitioned run
    /// ([`ranks`]) sends and receives the bytes of DMAs between ranks.
    fn prepare_pieces<'a>(
        &'a self,
        _program: &'a Program,
        _schedule: &'a Schedule,
        _cuts: &[usize],
    ) -> Result<Box<dyn Prepared + 'a>> {
        Err(Error::bad_input(format!(
            "the executor on {} cannot run a schedule in pieces",
            self.describe()
        )))
    }

    /// As [`Executor::prepare_pieces`], where between pieces only what `between` says
    /// is read and written (and the outputs after the run): writes nothing reads may be
    /// dropped, and ops fused across a cut ([`fuse::Keep::Between`]). By default every
    /// write is kept.
    fn prepare_pieces_between<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
        cuts: &[usize],
        _between: fuse::Between<'_>,
    ) -> Result<Box<dyn Prepared + 'a>> {
        self.prepare_pieces(program, schedule, cuts)
    }

    /// The ranks this executor spreads the devices over, when it is a partitioned
    /// executor ([`ranks::RankExecutor`]): its devices' memory only is held here.
    fn ranks(&self) -> Option<&ranks::Ranks> {
        None
    }

    /// The executor that runs this one's data ops on this process, when it wraps one
    /// (what a bench measures this machine's own rates on).
    fn inner(&self) -> Option<&dyn Executor> {
        None
    }

    /// The stretches of `schedule`'s ops that a run [`Executor::prepare`]s runs a block of
    /// elements at a time (none by default: every op over its whole views).
    fn blocked_stretches(&self, _program: &Program, _schedule: &Schedule) -> Vec<BlockedStretch> {
        Vec::new()
    }

    /// The schedule's ops (indices into [`Schedule::ops`]) that a run this executor
    /// [`Executor::prepare`]s does not run at all (a copy whose operand lives in its
    /// VMEM twin's buffer): a roof charges them nothing.
    fn skipped_ops(&self, _program: &Program, _schedule: &Schedule) -> Vec<usize> {
        Vec::new()
    }

    /// How many devices' steps a run this executor [`Executor::prepare`]s runs at once,
    /// at most (the CPU executor's lanes of devices, a core each): a roof divides the
    /// work among them. One by default: a step at a time.
    fn side_by_side(&self, _program: &Program, _schedule: &Schedule) -> usize {
        1
    }

    /// Loads `inputs[device][operand]`, runs `schedule` once, returns `outputs[device][operand]`.
    fn execute(
        &mut self,
        program: &Program,
        schedule: &Schedule,
        inputs: &[Vec<HostArray>],
    ) -> Result<Vec<Vec<HostArray>>> {
        check_inputs(program, inputs)?;
        let mut run = self.prepare(program, schedule)?;
        run.upload(inputs)?;
        run.run(1)?;
        run.read_outputs()
    }
}

/// A schedule prepared on an executor, ready to run many times.
pub trait Prepared {
    /// Writes `inputs[device][operand]` into the input buffers.
    fn upload(&mut self, inputs: &[Vec<HostArray>]) -> Result<()>;
    /// Runs the schedule `iters` times on the same memory; returns the wall time.
    fn run(&mut self, iters: usize) -> Result<Duration>;
    /// Reads every output: `outputs[device][operand]`.
    fn read_outputs(&mut self) -> Result<Vec<Vec<HostArray>>>;

    /// The outputs of the devices this run holds, `outputs[device][operand]` with no
    /// operand for the others (a partitioned run's own devices; every device elsewhere).
    fn read_held_outputs(&mut self) -> Result<Vec<Vec<HostArray>>> {
        self.read_outputs()
    }

    /// Input `operand` of `device` in host memory, written in place of an
    /// [`Prepared::upload`] (one copy from the caller's buffer); `None` where this run's
    /// memory is not host vectors.
    fn input_words(&mut self, _device: usize, _operand: usize) -> Option<&mut [u32]> {
        None
    }

    /// Output `operand` of `device` in host memory after a run, read in place of
    /// [`Prepared::read_outputs`]; `None` where this run's memory is not host vectors.
    fn output_words(&self, _device: usize, _operand: usize) -> Option<&[u32]> {
        None
    }

    /// Input `operand` of `device` in host memory as it was written before the runs,
    /// where no step of the run writes it (a run's check reads its inputs there: no
    /// second copy, nor the inputs made again); `None` where it is written, or where
    /// this run's memory is not host vectors.
    fn input_kept(&self, _device: usize, _operand: usize) -> Option<&[u32]> {
        None
    }

    /// Writes input `operand` of `device` from `bytes`, its elements at their dtype's
    /// own width ([`crate::DType::size`], as numpy and XLA hold them), one operand at a
    /// time: no [`HostArray`] of every input staged. False where this run cannot (the
    /// caller stages them for [`Prepared::upload`]).
    fn write_input_bytes(
        &mut self,
        _device: usize,
        _operand: usize,
        _bytes: &[u8],
    ) -> Result<bool> {
        Ok(false)
    }

    /// Reads each `(device, output operand, destination)` of `outputs` into its
    /// destination at its dtype's own width, straight from the run's memory. False
    /// where this run cannot (the caller reads [`Prepared::read_outputs`]).
    fn read_outputs_bytes(&mut self, _outputs: &mut [(usize, usize, &mut [u8])]) -> Result<bool> {
        Ok(false)
    }

    /// Puts the run's memory back as [`Executor::prepare`] left it (zeros, its tables),
    /// so that it runs again on new inputs as a run prepared anew would, what was
    /// prepared kept: true where done, false where this run cannot (prepare another).
    fn restart(&mut self) -> Result<bool> {
        Ok(false)
    }

    /// Runs piece `k` of a schedule prepared in pieces ([`Executor::prepare_pieces`]) once.
    fn run_piece(&mut self, _k: usize) -> Result<()> {
        Err(Error::bad_input("this run was not prepared in pieces"))
    }

    /// The bytes of view `v` (a device of this memory), as `v.len()` elements of `elem`
    /// bytes each (the width a copy moves, [`crate::ir::DataOp::elem_bytes`]),
    /// little-endian.
    fn read_view(&mut self, _v: View, _elem: usize) -> Result<Vec<u8>> {
        Err(Error::bad_input("this run cannot read a view"))
    }

    /// [`Prepared::read_view`] into `out` (of `v.len() * elem` bytes), allocating nothing
    /// where the executor can.
    fn read_view_into(&mut self, v: View, elem: usize, out: &mut [u8]) -> Result<()> {
        let bytes = self.read_view(v, elem)?;
        if bytes.len() != out.len() {
            return Err(Error::bad_input(format!(
                "{} bytes for a view of {} bytes",
                out.len(),
                bytes.len()
            )));
        }
        out.copy_from_slice(&bytes);
        Ok(())
    }

    /// Writes `bytes` ([`Prepared::read_view`]'s form) into view `v`.
    fn write_view(&mut self, _v: View, _elem: usize, _bytes: &[u8]) -> Result<()> {
        Err(Error::bad_input("this run cannot write a view"))
    }
}

/// Elements of `got` that differ from `want` (within `tolerance` for floats), over
/// every device and output: the one mismatch count of runs, benches and `apply`.
pub fn count_wrong(got: &[Vec<HostArray>], want: &[Vec<HostArray>], tolerance: f32) -> usize {
    got.iter()
        .zip(want)
        .map(|(g, w)| {
            g.iter()
                .zip(w)
                .map(|(ga, wa)| ga.count_mismatches(wa, tolerance))
                .sum::<usize>()
        })
        .sum()
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
/// host cannot allocate it (instead of aborting the process). The memory comes zeroed
/// from the allocator (`calloc`: fresh pages from the system are zero already), not
/// written with zeros here.
pub fn host_words(len: usize, what: &str) -> Result<Vec<u32>> {
    let fail = || Error::Limit {
        what: format!("host memory for {what}"),
        requested: len as u64 * 4,
        limit: 0,
    };
    if len == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u32>(len).map_err(|_| fail())?;
    // SAFETY: the layout is non-zero and valid for `len` u32s; a null pointer is the
    // allocator's refusal. A non-null one holds `len` zeroed (valid) u32s, allocated
    // by the global allocator with the layout a Vec<u32> of capacity `len` has.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout) as *mut u32;
        if p.is_null() {
            return Err(fail());
        }
        Ok(Vec::from_raw_parts(p, len, len))
    }
}

/// Which executor to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The wgpu executor on the chosen adapter (a software one, such as lavapipe, too).
    Gpu,
    /// The host-memory executor.
    Cpu,
    /// The GPU executor when the adapter wgpu would choose is hardware, else (only
    /// software adapters such as llvmpipe/lavapipe, SwiftShader or WARP, whose device
    /// type is `Cpu`, or none at all) the CPU executor, which is faster there: the
    /// default of the command line and of Python. [`Backend::resolve`] decides.
    Auto,
}

impl Backend {
    /// Parses `auto|gpu|cpu`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "gpu" => Ok(Backend::Gpu),
            "cpu" => Ok(Backend::Cpu),
            "auto" => Ok(Backend::Auto),
            _ => Err(Error::bad_input(format!(
                "unknown backend `{s}` (expected auto, gpu or cpu)"
            ))),
        }
    }

    /// The executor this backend stands for here: `Gpu` and `Cpu` as they are; `Auto`
    /// looks at the adapter `--backend gpu` would open (`WGPU_BACKEND`,
    /// `WGPU_ADAPTER_NAME`, wgpu's preference for hardware adapters) without opening it.
    /// A `WGPU_ADAPTER_NAME` that matches nothing, or a `WGPU_BACKEND` wgpu does not
    /// know, is an error as under `Gpu`; no adapter at all picks the CPU executor.
    pub fn resolve(self) -> Result<Chosen> {
        let (backend, why) = match self {
            Backend::Gpu | Backend::Cpu => (self, None),
            Backend::Auto => match gpu::select::software_or_hardware()? {
                gpu::select::Found::Hardware(label) => (
                    Backend::Gpu,
                    Some(format!("auto: {label} is a hardware adapter")),
                ),
                gpu::select::Found::Software(label) => (
                    Backend::Cpu,
                    Some(format!(
                        "auto: the only adapter is a software one, {label}; --backend gpu runs on it"
                    )),
                ),
                gpu::select::Found::None => (
                    Backend::Cpu,
                    Some("auto: wgpu finds no adapter".to_string()),
                ),
            },
        };
        Ok(Chosen { backend, why })
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Gpu => "gpu",
            Backend::Cpu => "cpu",
            Backend::Auto => "auto",
        })
    }
}

/// A [`Backend`] resolved to an executor: `Gpu` or `Cpu`, and why, when `auto` chose it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chosen {
    /// [`Backend::Gpu`] or [`Backend::Cpu`].
    pub backend: Backend,
    /// Why `auto` chose it (`None`: asked for by name).
    pub why: Option<String>,
}

impl Chosen {
    /// True for the GPU executor.
    pub fn is_gpu(&self) -> bool {
        self.backend == Backend::Gpu
    }

    /// `inner` (an executor's own description) with the reason for the choice, if any:
    /// `cpu (auto: the only adapter is a software one, …)`.
    pub fn describe(&self, inner: &str) -> String {
        match &self.why {
            Some(why) => format!("{inner} ({why})"),
            None => inner.to_string(),
        }
    }

    /// Opens the executor (the GPU one on the adapter `--backend gpu` opens); its
    /// [`Executor::describe`] says why `auto` chose it.
    pub fn open(&self) -> Result<Box<dyn Executor>> {
        Ok(self.noted(self.open_plain(None)?))
    }

    /// The executor alone, its description not noted; on the GPU of the
    /// `local_rank`-th rank of this host when given ([`gpu::GpuExecutor::from_env_for_rank`]).
    pub fn open_plain(&self, local_rank: Option<usize>) -> Result<Box<dyn Executor>> {
        Ok(match self.backend {
            Backend::Gpu => Box::new(gpu::GpuExecutor::from_env_for_rank(local_rank)?),
            _ => Box::new(cpu::CpuExecutor::new()),
        })
    }

    /// `exec` (this choice's executor, perhaps wrapped) whose description says why
    /// `auto` chose it.
    pub fn noted(&self, exec: Box<dyn Executor>) -> Box<dyn Executor> {
        match &self.why {
            None => exec,
            Some(_) => Box::new(Noted {
                inner: exec,
                chosen: self.clone(),
            }),
        }
    }
}

/// An executor whose description says why `auto` chose it.
struct Noted {
    inner: Box<dyn Executor>,
    chosen: Chosen,
}

impl Executor for Noted {
    fn describe(&self) -> String {
        self.chosen.describe(&self.inner.describe())
    }
    fn check(&self, program: &Program) -> Result<()> {
        self.inner.check(program)
    }
    fn prepare<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
    ) -> Result<Box<dyn Prepared + 'a>> {
        self.inner.prepare(program, schedule)
    }
    fn prepare_literal<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
    ) -> Result<Box<dyn Prepared + 'a>> {
        self.inner.prepare_literal(program, schedule)
    }
    fn prepare_reading<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
        outputs: &[usize],
    ) -> Result<Box<dyn Prepared + 'a>> {
        self.inner.prepare_reading(program, schedule, outputs)
    }
    fn copy_bandwidth(&self, bytes: u64) -> Result<Option<f64>> {
        self.inner.copy_bandwidth(bytes)
    }
    fn is_gpu(&self) -> bool {
        self.inner.is_gpu()
    }
    fn buffers_in_host_memory(&self) -> bool {
        self.inner.buffers_in_host_memory()
    }
    fn prepare_pieces<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
        cuts: &[usize],
    ) -> Result<Box<dyn Prepared + 'a>> {
        self.inner.prepare_pieces(program, schedule, cuts)
    }
    fn prepare_pieces_between<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
        cuts: &[usize],
        between: fuse::Between<'_>,
    ) -> Result<Box<dyn Prepared + 'a>> {
        self.inner
            .prepare_pieces_between(program, schedule, cuts, between)
    }
    fn ranks(&self) -> Option<&ranks::Ranks> {
        self.inner.ranks()
    }
    fn inner(&self) -> Option<&dyn Executor> {
        Some(self.inner.inner().unwrap_or(self.inner.as_ref()))
    }
    fn blocked_stretches(&self, program: &Program, schedule: &Schedule) -> Vec<BlockedStretch> {
        self.inner.blocked_stretches(program, schedule)
    }
    fn skipped_ops(&self, program: &Program, schedule: &Schedule) -> Vec<usize> {
        self.inner.skipped_ops(program, schedule)
    }
}

/// Times of a plan's steps, printed to stderr when `TPUSIM_DEBUG_PLAN` is set (where a
/// first call's planning goes).
pub struct Laps {
    on: bool,
    last: std::time::Instant,
    laps: Vec<(&'static str, std::time::Duration)>,
}

impl Laps {
    /// Starts timing (nothing is kept unless `TPUSIM_DEBUG_PLAN` is set).
    pub fn new() -> Self {
        Laps {
            on: std::env::var_os("TPUSIM_DEBUG_PLAN").is_some(),
            last: std::time::Instant::now(),
            laps: Vec::new(),
        }
    }

    /// The time since the last step, as step `what`.
    pub fn note(&mut self, what: &'static str) {
        if self.on {
            let now = std::time::Instant::now();
            self.laps.push((what, now - self.last));
            self.last = now;
        }
    }

    /// Prints the steps' times after `title`.
    pub fn report(&self, title: &str) {
        if self.on {
            let laps: Vec<String> = self
                .laps
                .iter()
                .map(|(w, d)| format!("{w} {:.3} s", d.as_secs_f64()))
                .collect();
            eprintln!("tpusim: {title}: {}", laps.join(", "));
        }
    }
}

impl Default for Laps {
    fn default() -> Self {
        Self::new()
    }
}
