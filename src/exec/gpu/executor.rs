//! The wgpu executor: allocations become GPU buffers, DMAs become buffer copies,
//! VMEM compute becomes shader dispatches. A schedule is prepared once ([`GpuRun`]:
//! buffers from the pool, bind groups, the command list) and can then run any number of
//! iterations, each encoded from the prepared commands with no host round trip.

use super::arena::ArenaRun;
use super::batch::{self, Step};
use super::context::GpuContext;
use super::pipelines::{Pipelines, PARAMS_BYTES};
use super::pool::BufferPool;
use super::recorder::{BindSpec, BufId, Cmd, Recorder, DUMMIES};
use super::windows::Binding;
use crate::array::HostArray;
use crate::error::{Error, GpuError, GpuErrorKind, Result};
use crate::exec::{check_inputs, Executor, Prepared};
use crate::ir::{Allocation, DataOp};
use crate::ir::{Program, Schedule};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs schedules on a wgpu device.
pub struct GpuExecutor {
    ctx: Arc<GpuContext>,
    pipes: Pipelines,
    pool: BufferPool,
    batching: bool,
    arena: ArenaMode,
}

/// When a schedule runs as a GPU program over one arena ([`ArenaRun`]: one compute
/// dispatch per level of independent ops, whatever P is) rather than per op
/// ([`GpuRun`]: a buffer per allocation, a dispatch per accumulate or batch of four).
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

const STORAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);
const READBACK: wgpu::BufferUsages =
    wgpu::BufferUsages::MAP_READ.union(wgpu::BufferUsages::COPY_DST);

impl GpuExecutor {
    /// An executor on an opened context.
    pub fn new(ctx: Arc<GpuContext>) -> Self {
        let pipes = Pipelines::new(&ctx.device);
        Self {
            ctx,
            pipes,
            pool: BufferPool::default(),
            batching: true,
            arena: ArenaMode::Auto,
        }
    }

    /// Chooses when a schedule runs as one GPU program (default [`ArenaMode::Auto`]).
    pub fn set_arena(&mut self, mode: ArenaMode) {
        self.arena = mode;
    }

    pub(super) fn pipes(&self) -> &Pipelines {
        &self.pipes
    }

    /// Encodes `iters` iterations with `encode` into one submission and waits for it;
    /// returns the wall time from encoding to completion.
    pub(super) fn submit_iterations(
        &self,
        label: &str,
        iters: usize,
        encode: &dyn Fn(&mut wgpu::CommandEncoder),
    ) -> Result<Duration> {
        let dev = &self.ctx.device;
        let validation = dev.push_error_scope(wgpu::ErrorFilter::Validation);
        let t = Instant::now();
        let mut enc =
            dev.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(label) });
        for _ in 0..iters {
            encode(&mut enc);
        }
        self.ctx.queue.submit([enc.finish()]);
        dev.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| {
            Error::from(GpuError::new(
                GpuErrorKind::Lost,
                format!("waiting for the GPU: {e}"),
            ))
        })?;
        let elapsed = t.elapsed();
        if let Some(e) = pollster::block_on(validation.pop()) {
            return Err(GpuError::new(GpuErrorKind::Validation, e.to_string()).into());
        }
        Ok(elapsed)
    }

    /// Turns batching of small accumulates on or off (on by default; off is for
    /// measuring what it saves).
    pub fn set_batching(&mut self, on: bool) {
        self.batching = on;
    }

    /// Opens the default adapter (see [`GpuContext::new`]); `TPUSIM_GPU_PROGRAM`
    /// (`auto`, `on`, `off`) sets the [`ArenaMode`].
    pub fn from_env() -> Result<Self> {
        let mut g = Self::new(Arc::new(GpuContext::new()?));
        if let Ok(m) = std::env::var("TPUSIM_GPU_PROGRAM") {
            g.set_arena(ArenaMode::parse(&m)?);
        }
        Ok(g)
    }

    /// The context in use.
    pub fn context(&self) -> &Arc<GpuContext> {
        &self.ctx
    }

    /// The buffer pool (free buffers are kept for the next run).
    pub fn pool(&self) -> &BufferPool {
        &self.pool
    }

    /// Fails when one of `allocs` is larger than one buffer may be.
    fn check_limits(&self, allocs: &[Allocation]) -> Result<()> {
        let max = self.ctx.limits.max_buffer_size;
        for a in allocs {
            if a.bytes() > max {
                return Err(Error::Limit {
                    what: format!("allocation `{}` ({:?} {})", a.name, a.shape, a.dtype),
                    requested: a.bytes(),
                    limit: max,
                });
            }
        }
        Ok(())
    }

    /// Allocates (from the pool) and records everything `schedule` needs, once.
    pub fn prepare<'a>(&'a self, program: &'a Program, schedule: &Schedule) -> Result<GpuRun<'a>> {
        let ctx = &self.ctx;
        let dev = &ctx.device;
        let limits = &ctx.limits;
        let allocs = &schedule.allocations(program);
        self.check_limits(allocs)?;
        let oom = dev.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = dev.push_error_scope(wgpu::ErrorFilter::Validation);
        let max = limits.max_buffer_size;
        let bufs: Vec<wgpu::Buffer> = (0..program.devices)
            .flat_map(|_| allocs.iter())
            .map(|a| self.pool.take(dev, a.bytes(), STORAGE, max))
            .collect();

        // Batching needs 8 storage buffers in one stage (WebGPU's default limit).
        let max_items = if self.batching && limits.max_storage_buffers_per_shader_stage >= 8 {
            batch::MAX_ITEMS
        } else {
            1
        };
        let mut rec = Recorder {
            device: dev,
            pipes: &self.pipes,
            max_workgroups: limits.max_compute_workgroups_per_dimension,
            allocs,
            max_binding: limits.max_storage_buffer_binding_size,
            align: limits.min_storage_buffer_offset_alignment as u64,
            cmds: Vec::new(),
            binds: Vec::new(),
            params: Vec::new(),
            scratch_size: 0,
        };
        for step in batch::plan(&schedule.ops, max_items) {
            match step {
                Step::Op(i) => rec.record(&schedule.ops[i]),
                Step::Batch(items) => {
                    let ops: Vec<&DataOp> = items.iter().map(|&i| &schedule.ops[i]).collect();
                    rec.record_batch(&ops);
                }
            }
        }
        let scratch = self.pool.take(dev, rec.scratch_size, STORAGE, max);
        let dummies: Vec<wgpu::Buffer> = (0..DUMMIES)
            .map(|_| self.pool.take(dev, 16, STORAGE, max))
            .collect();
        let stride = (limits.min_uniform_buffer_offset_alignment as u64).max(PARAMS_BYTES);
        let params_buf = self.pool.take(
            dev,
            stride * rec.params.len().max(1) as u64,
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            max,
        );
        let mut staged = vec![0u8; (stride * rec.params.len() as u64) as usize];
        for (i, block) in rec.params.iter().enumerate() {
            let o = i * stride as usize;
            staged[o..o + PARAMS_BYTES as usize].copy_from_slice(bytemuck::cast_slice(block));
        }
        if !staged.is_empty() {
            ctx.queue.write_buffer(&params_buf, 0, &staged);
        }
        let get = |b: BufId| match b {
            BufId::Alloc(i) => &bufs[i],
            BufId::Scratch => &scratch,
            BufId::Dummy(k) => &dummies[k],
        };
        let entry = |binding, (b, w): (BufId, Binding)| wgpu::BindGroupEntry {
            binding,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: get(b),
                offset: w.offset,
                size: std::num::NonZeroU64::new(w.size),
            }),
        };
        let params_entry = |binding, slot: usize, size: u64| wgpu::BindGroupEntry {
            binding,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &params_buf,
                offset: slot as u64 * stride,
                size: std::num::NonZeroU64::new(size),
            }),
        };
        let dummy = |k: usize| {
            (
                BufId::Dummy(k),
                Binding {
                    offset: 0,
                    size: 16,
                    elem_off: 0,
                },
            )
        };
        let groups: Vec<wgpu::BindGroup> = rec
            .binds
            .iter()
            .map(|b| match b {
                BindSpec::Single {
                    dst,
                    src: Some(src),
                    params,
                } => dev.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &self.pipes.acc_layout,
                    entries: &[entry(0, *src), entry(1, *dst), params_entry(2, *params, 16)],
                }),
                BindSpec::Single {
                    dst,
                    src: None,
                    params,
                } => dev.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &self.pipes.fill_layout,
                    entries: &[entry(0, *dst), params_entry(1, *params, 16)],
                }),
                BindSpec::Batch { items, params } => {
                    let slot = |k: usize| items.get(k).copied();
                    let entries: Vec<wgpu::BindGroupEntry> = (0..batch::MAX_ITEMS)
                        .map(|k| entry(k as u32, slot(k).map_or(dummy(0), |i| i.0)))
                        .chain((0..batch::MAX_ITEMS).map(|k| {
                            entry(
                                (batch::MAX_ITEMS + k) as u32,
                                slot(k).map_or(dummy(1 + k), |i| i.1),
                            )
                        }))
                        .chain([params_entry(8, *params, PARAMS_BYTES)])
                        .collect();
                    dev.create_bind_group(&wgpu::BindGroupDescriptor {
                        label: None,
                        layout: &self.pipes.batch_layout,
                        entries: &entries,
                    })
                }
            })
            .collect();
        let staging: Vec<wgpu::Buffer> = (0..program.devices)
            .flat_map(|_| program.outputs.iter())
            .map(|&a| self.pool.take(dev, allocs[a].bytes(), READBACK, max))
            .collect();

        // Every allocation starts as zeros, as on the CPU executor (pooled buffers are reused).
        let mut enc = dev.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("clear"),
        });
        for (i, b) in bufs.iter().enumerate() {
            let bytes = allocs[i % allocs.len()].bytes().next_multiple_of(4);
            if bytes > 0 {
                enc.clear_buffer(b, 0, Some(bytes));
            }
        }
        ctx.queue.submit([enc.finish()]);
        if let Some(e) = pollster::block_on(validation.pop()) {
            return Err(GpuError::new(GpuErrorKind::Validation, e.to_string()).into());
        }
        if let Some(e) = pollster::block_on(oom.pop()) {
            return Err(GpuError::new(GpuErrorKind::OutOfMemory, e.to_string()).into());
        }
        Ok(GpuRun {
            exec: self,
            program,
            nallocs: allocs.len(),
            bufs,
            scratch: Some(scratch),
            params: Some(params_buf),
            dummies,
            staging,
            groups,
            cmds: rec.cmds,
        })
    }
}

/// A prepared schedule on the GPU: buffers, bind groups and commands, ready to run.
/// Dropping it returns its buffers to the executor's pool.
pub struct GpuRun<'a> {
    exec: &'a GpuExecutor,
    program: &'a Program,
    /// Allocations per device (the program's and the schedule's staging area).
    nallocs: usize,
    bufs: Vec<wgpu::Buffer>,
    scratch: Option<wgpu::Buffer>,
    params: Option<wgpu::Buffer>,
    dummies: Vec<wgpu::Buffer>,
    staging: Vec<wgpu::Buffer>,
    groups: Vec<wgpu::BindGroup>,
    cmds: Vec<Cmd>,
}

impl GpuRun<'_> {
    /// Compute dispatches per iteration.
    pub fn dispatches(&self) -> usize {
        self.cmds
            .iter()
            .filter(|c| matches!(c, Cmd::Dispatch { .. }))
            .count()
    }

    /// Writes `inputs[device][operand]` into the input buffers.
    pub fn upload(&self, inputs: &[Vec<HostArray>]) -> Result<()> {
        check_inputs(self.program, inputs)?;
        let n = self.nallocs;
        for (d, dev_inputs) in inputs.iter().enumerate() {
            for (a, arr) in self.program.inputs.iter().zip(dev_inputs) {
                self.exec
                    .ctx
                    .queue
                    .write_buffer(&self.bufs[d * n + a], 0, &device_bytes(arr));
            }
        }
        Ok(())
    }

    fn encode(&self, enc: &mut wgpu::CommandEncoder) {
        let get = |b: BufId| match b {
            BufId::Alloc(i) => &self.bufs[i],
            BufId::Scratch => self
                .scratch
                .as_ref()
                .expect("scratch lives as long as the run"),
            BufId::Dummy(k) => &self.dummies[k],
        };
        let mut i = 0;
        while i < self.cmds.len() {
            match &self.cmds[i] {
                Cmd::Copy {
                    src,
                    src_off,
                    dst,
                    dst_off,
                    size,
                } => enc.copy_buffer_to_buffer(get(*src), *src_off, get(*dst), *dst_off, *size),
                Cmd::Clear { dst, off, size } => enc.clear_buffer(get(*dst), *off, Some(*size)),
                Cmd::Dispatch { .. } => {
                    // Consecutive dispatches share one pass; wgpu orders them by their bindings.
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
                    while let Some(Cmd::Dispatch {
                        pipeline,
                        bind_group,
                        workgroups,
                    }) = self.cmds.get(i)
                    {
                        pass.set_pipeline(pipeline);
                        pass.set_bind_group(0, &self.groups[*bind_group], &[]);
                        pass.dispatch_workgroups(workgroups[0], workgroups[1], 1);
                        i += 1;
                    }
                    continue;
                }
            }
            i += 1;
        }
    }

    /// Runs `iters` iterations of the schedule in one submission and waits for them;
    /// returns the wall time from encoding to completion.
    pub fn run(&self, iters: usize) -> Result<Duration> {
        self.exec
            .submit_iterations("schedule", iters, &|enc| self.encode(enc))
    }

    /// Reads every output back: `outputs[device][operand]`.
    pub fn read_outputs(&self) -> Result<Vec<Vec<HostArray>>> {
        let ctx = &self.exec.ctx;
        let allocs = &self.program.layout.allocs;
        let n = self.nallocs;
        let outs = &self.program.outputs;
        let mut enc = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("readback"),
            });
        for d in 0..self.program.devices {
            for (k, &a) in outs.iter().enumerate() {
                let size = allocs[a].bytes().next_multiple_of(4);
                if size > 0 {
                    enc.copy_buffer_to_buffer(
                        &self.bufs[d * n + a],
                        0,
                        &self.staging[d * outs.len() + k],
                        0,
                        size,
                    );
                }
            }
        }
        ctx.queue.submit([enc.finish()]);
        let mapped: Vec<_> = self
            .staging
            .iter()
            .map(|s| {
                let (tx, rx) = futures::channel::oneshot::channel();
                s.map_async(wgpu::MapMode::Read, .., move |r| {
                    let _ = tx.send(r);
                });
                rx
            })
            .collect();
        ctx.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| {
                Error::from(GpuError::new(
                    GpuErrorKind::Lost,
                    format!("waiting for the GPU: {e}"),
                ))
            })?;
        for rx in mapped {
            match pollster::block_on(rx) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    return Err(GpuError::new(
                        GpuErrorKind::Readback,
                        format!("mapping an output for readback: {e}"),
                    )
                    .into())
                }
                Err(_) => {
                    return Err(GpuError::new(
                        GpuErrorKind::Readback,
                        "an output's readback was cancelled",
                    )
                    .into())
                }
            }
        }
        let mut out = Vec::with_capacity(self.program.devices);
        for d in 0..self.program.devices {
            let mut dev_out = Vec::new();
            for (k, &a) in outs.iter().enumerate() {
                let s = &self.staging[d * outs.len() + k];
                let alloc = &allocs[a];
                let words = {
                    let view = s.get_mapped_range(..).map_err(|e| {
                        GpuError::new(
                            GpuErrorKind::Readback,
                            format!("reading back `{}`: {e}", alloc.name),
                        )
                    })?;
                    host_words(alloc.dtype.size(), &view[..alloc.bytes() as usize])
                };
                dev_out.push(HostArray {
                    dtype: alloc.dtype,
                    shape: alloc.shape.clone(),
                    words,
                });
            }
            out.push(dev_out);
        }
        for s in &self.staging {
            s.unmap();
        }
        Ok(out)
    }
}

/// `a`'s elements as the GPU holds them: 32-bit words, or 16-bit elements packed two
/// per word (little end first), padded to whole words.
pub(super) fn device_bytes(a: &HostArray) -> Vec<u8> {
    if a.dtype.size() == 4 {
        return bytemuck::cast_slice(&a.words).to_vec();
    }
    let mut b: Vec<u8> = a.halves().iter().flat_map(|h| h.to_le_bytes()).collect();
    b.resize(b.len().next_multiple_of(4), 0);
    b
}

/// The host's one-word-per-element form of `bytes` holding `elem`-byte elements.
pub(super) fn host_words(elem: usize, bytes: &[u8]) -> Vec<u32> {
    if elem == 4 {
        return bytemuck::pod_collect_to_vec(bytes);
    }
    bytes
        .chunks_exact(2)
        .map(|h| u16::from_le_bytes([h[0], h[1]]) as u32)
        .collect()
}

impl Drop for GpuRun<'_> {
    fn drop(&mut self) {
        let bufs = std::mem::take(&mut self.bufs)
            .into_iter()
            .chain(self.scratch.take())
            .chain(self.params.take())
            .chain(std::mem::take(&mut self.dummies))
            .chain(std::mem::take(&mut self.staging));
        self.exec.pool.give_back(bufs);
    }
}

impl Executor for GpuExecutor {
    fn describe(&self) -> String {
        self.ctx.describe()
    }

    fn check(&self, program: &Program) -> Result<()> {
        self.check_limits(&program.layout.allocs)
    }

    fn prepare<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
    ) -> Result<Box<dyn Prepared + 'a>> {
        let cpu = self.ctx.adapter.get_info().device_type == wgpu::DeviceType::Cpu;
        let limit = match self.arena {
            ArenaMode::Auto if cpu => None,
            ArenaMode::Auto => Some(ArenaMode::AUTO_MAX),
            ArenaMode::UpTo(max) => Some(max),
            ArenaMode::Off => None,
        };
        if let Some(max) = limit {
            let bytes: u64 = schedule
                .allocations(program)
                .iter()
                .map(|a| a.bytes().next_multiple_of(16))
                .sum::<u64>()
                * program.devices as u64;
            if bytes <= max {
                if let Some(run) = ArenaRun::prepare(self, program, schedule)? {
                    return Ok(Box::new(run));
                }
            }
        }
        Ok(Box::new(GpuExecutor::prepare(self, program, schedule)?))
    }

    fn copy_bandwidth(&self, bytes: u64) -> Result<Option<f64>> {
        GpuExecutor::copy_bandwidth(self, bytes, 5).map(Some)
    }

    fn buffers_in_host_memory(&self) -> bool {
        self.ctx.memory_is_host()
    }

    fn is_gpu(&self) -> bool {
        true
    }
}

impl Prepared for GpuRun<'_> {
    fn upload(&mut self, inputs: &[Vec<HostArray>]) -> Result<()> {
        GpuRun::upload(self, inputs)
    }

    fn run(&mut self, iters: usize) -> Result<Duration> {
        GpuRun::run(self, iters)
    }

    fn read_outputs(&mut self) -> Result<Vec<Vec<HostArray>>> {
        GpuRun::read_outputs(self)
    }
}
