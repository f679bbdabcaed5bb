//! The wgpu executor: lowers a schedule into a [`Recording`] (per op, or as one arena
//! program: the choice is [`GpuExecutor::record`]'s alone) and has the engine realize it.

use super::bandwidth;
use super::commands::Recording;
use super::device::{BufferPool, GpuContext};
use super::engine::{Engine, GpuRun};
use super::{lower_arena, lower_ops};
use crate::device_sim::fuse::{fuse, Fused, Keep};
use crate::device_sim::{Executor, Prepared};
use crate::error::{Error, Result};
use crate::ir::{Allocation, Memory, Program, Schedule};
use std::sync::Arc;

/// Runs schedules on a wgpu device.
pub struct GpuExecutor {
    engine: Engine,
    batching: bool,
    arena: ArenaMode,
    binding_limit: Option<u64>,
    workgroup_limit: Option<u32>,
    fusion: bool,
}

/// When a schedule runs as a GPU program over one arena (one compute dispatch per
/// level of independent ops, whatever P is) rather than per op (a buffer per
/// allocation, a dispatch per accumulate or batch of four).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArenaMode {
    /// The program on a GPU, the per-op path on a CPU adapter (lavapipe), where shader
    /// work rather than dispatches dominates and the per-op path measured as fast or
    /// faster (benches/README.md); the program only while every device's memory
    /// together is at most [`ArenaMode::AUTO_MAX`] bytes (it copies through a scratch
    /// buffer, twice the traffic of a direct copy).
    Auto,
    /// The program whenever the memory is at most this many bytes and fits one binding.
    UpTo(u64),
    /// Never.
    Off,
}

impl ArenaMode {
    /// The largest simulated memory [`ArenaMode::Auto`] runs as a program.
    pub const AUTO_MAX: u64 = 32 << 20;

    /// `auto`, `on` or `off` (as `TPUSIM_GPU_PROGRAM` takes it).
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(ArenaMode::Auto),
            "on" => Ok(ArenaMode::UpTo(u64::MAX)),
            "off" => Ok(ArenaMode::Off),
            _ => Err(Error::bad_input(format!(
                "TPUSIM_GPU_PROGRAM is `{s}` (expected auto, on or off)"
            ))),
        }
    }
}

impl GpuExecutor {
    /// An executor on an opened context.
    pub fn new(ctx: Arc<GpuContext>) -> Self {
        Self {
            engine: Engine::new(ctx),
            batching: true,
            arena: ArenaMode::Auto,
            binding_limit: None,
            workgroup_limit: None,
            fusion: true,
        }
    }

    /// Opens the default adapter (see [`GpuContext::new`]); `TPUSIM_GPU_PROGRAM`
    /// (`auto`, `on`, `off`) sets the [`ArenaMode`].
    pub fn from_env() -> Result<Self> {
        Self::from_env_for_rank(None)
    }

    /// [`GpuExecutor::from_env`] on the adapter of the `local_rank`-th rank of this host
    /// ([`GpuContext::for_local_rank`]).
    pub fn from_env_for_rank(local_rank: Option<usize>) -> Result<Self> {
        let mut g = Self::new(Arc::new(GpuContext::for_local_rank(local_rank)?));
        if let Ok(m) = std::env::var("TPUSIM_GPU_PROGRAM") {
            g.set_arena(ArenaMode::parse(&m)?);
        }
        Ok(g)
    }

    /// Chooses when a schedule runs as one GPU program (default [`ArenaMode::Auto`]).
    pub fn set_arena(&mut self, mode: ArenaMode) {
        self.arena = mode;
    }

    /// Lowers as if one storage binding held at most `max_binding` bytes (at least
    /// the adapter's offset alignment) and a dispatch at most `max_workgroups`
    /// workgroups per dimension (`None`: the adapter's own limits), so that tests and
    /// experiments reach the windowed and grid-strided paths at small sizes.
    pub fn limit_lowering(&mut self, max_binding: Option<u64>, max_workgroups: Option<u32>) {
        self.binding_limit = max_binding;
        self.workgroup_limit = max_workgroups;
    }

    /// Turns fusion off or on (on by default: each fused region of elementwise ops
    /// one dispatch, [`crate::device_sim::fuse`]); off runs every op as the schedule lists it.
    pub fn set_fusion(&mut self, on: bool) {
        self.fusion = on;
    }

    /// Turns batching of small accumulates on or off (on by default; off is for
    /// measuring what it saves).
    pub fn set_batching(&mut self, on: bool) {
        self.batching = on;
    }

    /// The context in use.
    pub fn context(&self) -> &Arc<GpuContext> {
        &self.engine.ctx
    }

    /// The buffer pool (free buffers are kept for the next run).
    pub fn pool(&self) -> &BufferPool {
        &self.engine.pool
    }

    /// Bytes per second of `copy_buffer_to_buffer` between two buffers of `bytes` bytes,
    /// timed over `iters` copies in one submission after one warm-up copy.
    pub fn copy_bandwidth(&self, bytes: u64, iters: u32) -> Result<f64> {
        bandwidth::copy_bandwidth(&self.engine.ctx, &self.engine.pool, bytes, iters)
    }

    /// Fails when one of `allocs` is larger than one buffer may be.
    fn check_limits(&self, allocs: &[Allocation]) -> Result<()> {
        let max = self.engine.ctx.limits.max_buffer_size;
        for a in allocs {
            if a.storage_bytes() > max {
                return Err(Error::Limit {
                    what: format!("allocation `{}` ({:?} {})", a.name, a.shape, a.dtype),
                    requested: a.storage_bytes(),
                    limit: max,
                });
            }
        }
        Ok(())
    }

    /// True when [`ArenaMode`] asks for `memory` as one arena program.
    fn wants_arena(&self, memory: &Memory) -> bool {
        let limit = match self.arena {
            ArenaMode::Auto if self.engine.ctx.memory_is_host() => None,
            ArenaMode::Auto => Some(ArenaMode::AUTO_MAX),
            ArenaMode::UpTo(max) => Some(max),
            ArenaMode::Off => None,
        };
        let bytes = || {
            memory
                .allocs
                .iter()
                .map(|a| a.storage_bytes().next_multiple_of(16))
                .sum::<u64>()
                * memory.devices as u64
        };
        limit.is_some_and(|max| bytes() <= max)
    }

    /// Lowers `schedule` for this adapter: as one arena program when the [`ArenaMode`]
    /// asks for it and the schedule can be one, else per op with its elementwise chains
    /// fused. The one place that chooses.
    pub fn record(&self, program: &Program, schedule: &Schedule) -> Result<Recording> {
        self.lower(program, schedule, true)
    }

    /// The adapter's lowering limits, as [`GpuExecutor::limit_lowering`] narrows them.
    fn limits(&self) -> super::limits::Limits {
        let mut limits = self.engine.ctx.lowering_limits();
        if let Some(b) = self.binding_limit {
            let b = b.max(limits.offset_align).max(16) / 4 * 4;
            limits.max_binding = limits.max_binding.min(b);
        }
        if let Some(w) = self.workgroup_limit {
            limits.max_workgroups = limits.max_workgroups.min(w.max(1));
        }
        limits
    }

    /// `schedule` fused as it runs here (read through its outputs only when `outputs`).
    fn fused(
        &self,
        program: &Program,
        schedule: &Schedule,
        cuts: &[usize],
        outputs: bool,
    ) -> Fused {
        let keep = if outputs { Keep::Outputs } else { Keep::All };
        match self.fusion {
            true => fuse(program, schedule, cuts, keep),
            false => Fused::unfused(schedule.ops.len(), cuts),
        }
    }

    /// Lowers the whole schedule; fused when `fusing`.
    fn lower(&self, program: &Program, schedule: &Schedule, fusing: bool) -> Result<Recording> {
        let memory = schedule.memory(program);
        self.check_limits(&memory.allocs)?;
        let limits = self.limits();
        if self.wants_arena(&memory) {
            if let Ok(rec) = lower_arena::lower(&memory, &schedule.ops, &limits) {
                return Ok(rec);
            }
        }
        let fused = match fusing {
            true => self.fused(program, schedule, &[], true),
            false => Fused::unfused(schedule.ops.len(), &[]),
        };
        lower_ops::lower_steps(&memory, &schedule.ops, &fused.steps, &limits, self.batching)
    }

    /// What [`Executor::prepare_pieces`] does, as the concrete run: every piece lowered
    /// per op with its chains fused (the arena program is one piece), joined into one
    /// recording.
    pub fn prepare_pieces_run<'a>(
        &'a self,
        program: &'a Program,
        schedule: &Schedule,
        cuts: &[usize],
    ) -> Result<GpuRun<'a>> {
        let memory = schedule.memory(program);
        self.check_limits(&memory.allocs)?;
        let limits = self.limits();
        // Memory is read and written between the pieces: every write kept.
        let fused = self.fused(program, schedule, cuts, false);
        let mut start = 0;
        let parts = fused
            .piece_ends
            .iter()
            .map(|&end| {
                let steps = &fused.steps[start..end];
                start = end;
                lower_ops::lower_steps(&memory, &schedule.ops, steps, &limits, self.batching)
            })
            .collect::<Result<Vec<_>>>()?;
        let (rec, pieces) = Recording::join(parts, memory.len());
        let mut run = self.engine.load(program, memory, rec)?;
        run.set_pieces(pieces);
        Ok(run)
    }

    /// What [`Executor::prepare`] does, as the concrete run (its dispatch count and
    /// lowering can be read).
    pub fn prepare_run<'a>(
        &'a self,
        program: &'a Program,
        schedule: &Schedule,
    ) -> Result<GpuRun<'a>> {
        let rec = self.lower(program, schedule, true)?;
        self.engine.load(program, schedule.memory(program), rec)
    }

    /// [`GpuExecutor::prepare_run`] with every op as the schedule lists it.
    pub fn prepare_literal_run<'a>(
        &'a self,
        program: &'a Program,
        schedule: &Schedule,
    ) -> Result<GpuRun<'a>> {
        let rec = self.lower(program, schedule, false)?;
        self.engine.load(program, schedule.memory(program), rec)
    }
}

impl Executor for GpuExecutor {
    fn describe(&self) -> String {
        self.engine.ctx.describe()
    }

    fn check(&self, program: &Program) -> Result<()> {
        self.check_limits(&program.layout.allocs)
    }

    fn prepare<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
    ) -> Result<Box<dyn Prepared + 'a>> {
        Ok(Box::new(self.prepare_run(program, schedule)?))
    }

    fn prepare_literal<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
    ) -> Result<Box<dyn Prepared + 'a>> {
        Ok(Box::new(self.prepare_literal_run(program, schedule)?))
    }

    fn prepare_pieces<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
        cuts: &[usize],
    ) -> Result<Box<dyn Prepared + 'a>> {
        Ok(Box::new(self.prepare_pieces_run(program, schedule, cuts)?))
    }

    fn copy_bandwidth(&self, bytes: u64) -> Result<Option<f64>> {
        GpuExecutor::copy_bandwidth(self, bytes, 5).map(Some)
    }

    fn buffers_in_host_memory(&self) -> bool {
        self.engine.ctx.memory_is_host()
    }

    fn is_gpu(&self) -> bool {
        true
    }
}
