//! The one engine: turns a [`Recording`] into GPU work (buffers from the pool, the
//! parameter blocks in one uniform buffer, a bind group per dispatch, all made once),
//! then uploads inputs, runs any number of iterations in one submission, reads back.

use super::commands::{BufId, BufferDesc, Command, Dispatch, Init, Lowering, Place, Recording};
use super::device::{read_back, zero, BufferPool, ErrorScope, GpuContext, Pooled};
use super::pipelines::Pipelines;
use crate::array::HostArray;
use crate::device_sim::{check_inputs, Prepared};
use crate::error::{Error, Result};
use crate::ir::{Memory, Program};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

const STORAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);
const UNIFORM: wgpu::BufferUsages = wgpu::BufferUsages::UNIFORM.union(wgpu::BufferUsages::COPY_DST);

/// What realizing a recording needs: the device, its pipelines, the buffer pool.
pub struct Engine {
    /// The opened device.
    pub ctx: Arc<GpuContext>,
    /// Its pipelines.
    pub pipes: Pipelines,
    /// Free buffers kept for the next run.
    pub pool: BufferPool,
}

/// A command with its GPU objects, ready to encode.
enum Step {
    /// A copy or a clear, as recorded.
    Buffer(Command),
    Dispatch {
        pipeline: wgpu::ComputePipeline,
        group: wgpu::BindGroup,
        workgroups: [u32; 3],
    },
}

/// A schedule prepared on the GPU, ready to run. Dropping it returns its buffers to
/// the pool.
pub struct GpuRun<'a> {
    engine: &'a Engine,
    program: &'a Program,
    memory: Memory,
    lowering: Lowering,
    places: Vec<Place>,
    bufs: Vec<Pooled>,
    steps: Vec<Step>,
    dispatches: usize,
    /// The steps of each piece of a schedule prepared in pieces (empty: one piece).
    pieces: Vec<std::ops::Range<usize>>,
    /// What each buffer of the recording starts as, and its bytes ([`GpuRun::restart`]).
    inits: Vec<(Init, u64)>,
}

impl Engine {
    /// An engine on an opened context.
    pub fn new(ctx: Arc<GpuContext>) -> Self {
        let pipes = Pipelines::new(&ctx.device);
        Self {
            ctx,
            pipes,
            pool: BufferPool::default(),
        }
    }

    /// Allocates (from the pool, zeroed or filled as the recording says) and records
    /// everything `rec` needs, once.
    pub fn load<'a>(
        &'a self,
        program: &'a Program,
        memory: Memory,
        rec: Recording,
    ) -> Result<GpuRun<'a>> {
        let ctx = &self.ctx;
        let max = ctx.limits.max_buffer_size;
        if let Some(b) = rec.buffers.iter().find(|b| b.size > max) {
            return Err(Error::Limit {
                what: format!("buffer `{}`", b.label),
                requested: b.size,
                limit: max,
            });
        }
        let scope = ErrorScope::open(&ctx.device);
        let mut bufs = self.buffers(&rec.buffers);
        let (params, stride) = self.params(&rec.params);
        let dispatches = rec.dispatches();
        let inits = rec.buffers.into_iter().map(|b| (b.init, b.size)).collect();
        let steps = rec
            .commands
            .into_iter()
            .map(|c| match c {
                Command::Dispatch(d) => {
                    let uniform = (&params.buffer, d.params as u64 * stride);
                    self.dispatch(&d, &bufs, uniform, &rec.params[d.params])
                }
                c => Step::Buffer(c),
            })
            .collect();
        bufs.push(params);
        let run = GpuRun {
            engine: self,
            program,
            memory,
            lowering: rec.lowering,
            places: rec.places,
            bufs,
            steps,
            dispatches,
            pieces: Vec::new(),
            inits,
        };
        scope.close(ctx, "preparing the schedule")?;
        Ok(run)
    }

    /// The buffers of `descs`, with their contents written and their zeros cleared.
    fn buffers(&self, descs: &[BufferDesc]) -> Vec<Pooled> {
        let (ctx, max) = (&self.ctx, self.ctx.limits.max_buffer_size);
        let bufs: Vec<Pooled> = descs
            .iter()
            .map(|b| self.pool.take(&ctx.device, &b.label, b.size, STORAGE, max))
            .collect();
        let inits: Vec<(&Init, u64)> = descs.iter().map(|d| (&d.init, d.size)).collect();
        self.init(&bufs, &inits);
        bufs
    }

    /// Writes each of `bufs` as `inits` says (its contents, or zeros over its bytes).
    fn init(&self, bufs: &[Pooled], inits: &[(&Init, u64)]) {
        let ctx = &self.ctx;
        let mut zeroed = Vec::new();
        for (b, &(init, size)) in bufs.iter().zip(inits) {
            match init {
                Init::Data(bytes) => ctx.queue.write_buffer(&b.buffer, 0, bytes),
                // Pooled buffers are reused: memory starts as zeros, as on the CPU executor.
                Init::Zeros => zeroed.push((&b.buffer, size)),
                Init::Any => {}
            }
        }
        zero(ctx, &zeroed);
    }

    /// One uniform buffer holding every parameter block, and the stride between them.
    fn params(&self, blocks: &[Vec<u32>]) -> (Pooled, u64) {
        let ctx = &self.ctx;
        let align = ctx.limits.min_uniform_buffer_offset_alignment as u64;
        let largest = blocks.iter().map(|p| p.len() as u64 * 4).max();
        // Every block starts at a multiple of the uniform offset alignment.
        let stride = largest.unwrap_or(16).next_multiple_of(align.max(16));
        let bytes = stride * blocks.len() as u64;
        let max = ctx.limits.max_buffer_size;
        let buf = self.pool.take(&ctx.device, "params", bytes, UNIFORM, max);
        let mut staged = vec![0u8; bytes as usize];
        for (i, block) in blocks.iter().enumerate() {
            let o = i * stride as usize;
            staged[o..o + block.len() * 4].copy_from_slice(bytemuck::cast_slice(block));
        }
        if !staged.is_empty() {
            ctx.queue.write_buffer(&buf.buffer, 0, &staged);
        }
        (buf, stride)
    }

    /// `d` with its pipeline and bind group: its storage bindings, then its parameter
    /// `block` at `uniform` (buffer, offset).
    fn dispatch(
        &self,
        d: &Dispatch,
        bufs: &[Pooled],
        uniform: (&wgpu::Buffer, u64),
        block: &[u32],
    ) -> Step {
        let p = self.pipes.get(&self.ctx.device, d.pipeline);
        let binding = |i: usize, buffer, offset, size| wgpu::BindGroupEntry {
            binding: i as u32,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer,
                offset,
                size: std::num::NonZeroU64::new(size),
            }),
        };
        let entries: Vec<_> = d
            .bindings
            .iter()
            .enumerate()
            .map(|(i, b)| binding(i, &bufs[b.buf.0].buffer, b.offset, b.size))
            .chain([binding(
                d.bindings.len(),
                uniform.0,
                uniform.1,
                block.len() as u64 * 4,
            )])
            .collect();
        let group = self
            .ctx
            .device
            .create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &p.layout,
                entries: &entries,
            });
        Step::Dispatch {
            pipeline: p.pipeline,
            group,
            workgroups: d.workgroups,
        }
    }
}

impl GpuRun<'_> {
    /// Compute dispatches per iteration.
    pub fn dispatches(&self) -> usize {
        self.dispatches
    }

    /// Which lowering the executor chose.
    pub fn lowering(&self) -> Lowering {
        self.lowering
    }

    /// Puts every buffer back as [`Engine::load`] left it (zeros, tables), so that the
    /// run, its lowering and GPU objects kept, can run again on new inputs as a run
    /// loaded anew would.
    pub fn restart(&self) -> Result<()> {
        let ctx = &self.engine.ctx;
        let scope = ErrorScope::open(&ctx.device);
        let inits: Vec<(&Init, u64)> = self.inits.iter().map(|(i, n)| (i, *n)).collect();
        self.engine.init(&self.bufs, &inits);
        Ok(scope.close(ctx, "restarting the schedule")?)
    }

    fn place(&self, device: usize, alloc: usize) -> (&wgpu::Buffer, &Place) {
        let p = &self.places[self.memory.index_of(device, alloc)];
        (&self.bufs[p.buf.0].buffer, p)
    }

    /// Writes `inputs[device][operand]` into the input buffers.
    pub fn upload(&self, inputs: &[Vec<HostArray>]) -> Result<()> {
        check_inputs(self.program, inputs)?;
        let ctx = &self.engine.ctx;
        let scope = ErrorScope::open(&ctx.device);
        for (d, dev_inputs) in inputs.iter().enumerate() {
            for (&a, arr) in self.program.inputs.iter().zip(dev_inputs) {
                let (buf, p) = self.place(d, a);
                ctx.queue.write_buffer(buf, p.offset, &device_bytes(arr));
            }
        }
        Ok(scope.close(ctx, "uploading the inputs")?)
    }

    /// Writes input `operand` of `device` from `bytes` at its dtype's width
    /// ([`Prepared::write_input_bytes`]): 32- and 16-bit elements as they are (the GPU's
    /// own form), 8-bit ones widened to words a slice at a time.
    pub fn write_input_bytes(&self, device: usize, operand: usize, bytes: &[u8]) -> Result<()> {
        let a = *self.program.inputs.get(operand).ok_or_else(|| {
            Error::bad_input(format!(
                "no input {operand} of {}",
                self.program.inputs.len()
            ))
        })?;
        if device >= self.program.devices {
            return Err(Error::bad_input(format!(
                "no device {device} of {}",
                self.program.devices
            )));
        }
        let alloc = &self.program.layout.allocs[a];
        let (dtype, numel) = (alloc.dtype, alloc.numel());
        if bytes.len() != numel * dtype.size() {
            return Err(Error::bad_input(format!(
                "input `{}`: {} bytes for {numel} elements of {dtype}",
                alloc.name,
                bytes.len()
            )));
        }
        let ctx = &self.engine.ctx;
        let (buf, p) = self.place(device, a);
        let scope = ErrorScope::open(&ctx.device);
        if dtype.size() == dtype.storage() {
            // Whole words as they are; a 16-bit operand's odd last element padded.
            let whole = bytes.len() / 4 * 4;
            if whole > 0 {
                ctx.queue.write_buffer(buf, p.offset, &bytes[..whole]);
            }
            if whole < bytes.len() {
                let mut last = [0u8; 4];
                last[..bytes.len() - whole].copy_from_slice(&bytes[whole..]);
                ctx.queue.write_buffer(buf, p.offset + whole as u64, &last);
            }
        } else {
            let mut words = vec![0u32; numel.min(WIDEN_PART)];
            for (k, part) in bytes.chunks(WIDEN_PART).enumerate() {
                let w = &mut words[..part.len()];
                dtype.words_from_bytes(part, w);
                let at = p.offset + (k * WIDEN_PART * 4) as u64;
                ctx.queue.write_buffer(buf, at, bytemuck::cast_slice(w));
            }
        }
        Ok(scope.close(ctx, "uploading an input")?)
    }

    /// Reads outputs into host bytes at their dtype's width ([`Prepared::read_outputs_bytes`]),
    /// in one submission through the pooled staging buffers.
    pub fn read_outputs_bytes(&self, outputs: &mut [(usize, usize, &mut [u8])]) -> Result<()> {
        let allocs = &self.program.layout.allocs;
        let mut regions = Vec::with_capacity(outputs.len());
        for (d, o, dst) in outputs.iter() {
            let a = *self.program.outputs.get(*o).ok_or_else(|| {
                Error::bad_input(format!("no output {o} of {}", self.program.outputs.len()))
            })?;
            if *d >= self.program.devices {
                return Err(Error::bad_input(format!(
                    "no device {d} of {}",
                    self.program.devices
                )));
            }
            let want = allocs[a].numel() * allocs[a].dtype.size();
            if dst.len() != want {
                return Err(Error::bad_input(format!(
                    "output `{}`: {} bytes for {want}",
                    allocs[a].name,
                    dst.len()
                )));
            }
            let (buf, p) = self.place(*d, a);
            regions.push((buf, p.offset, p.size));
        }
        let engine = self.engine;
        read_back(&engine.ctx, &engine.pool, &regions, &mut |k, bytes| {
            let (_, o, dst) = &mut outputs[k];
            let dtype = allocs[self.program.outputs[*o]].dtype;
            if dtype.size() == dtype.storage() {
                dst.copy_from_slice(&bytes[..dst.len()]);
            } else {
                // One element per word: the low byte of each.
                for (b, w) in dst.iter_mut().zip(bytes.chunks_exact(4)) {
                    *b = w[0];
                }
            }
        })
    }

    /// Runs as pieces: the steps of piece k are `pieces[k]` (commands map 1:1 to steps).
    pub(super) fn set_pieces(&mut self, pieces: Vec<std::ops::Range<usize>>) {
        self.pieces = pieces;
    }

    /// Runs piece `k` of a schedule prepared in pieces once, and waits for it.
    pub fn run_piece(&self, k: usize) -> Result<()> {
        let r =
            self.pieces.get(k).cloned().ok_or_else(|| {
                Error::bad_input(format!("no piece {k} of {}", self.pieces.len()))
            })?;
        if r.is_empty() {
            return Ok(());
        }
        self.engine
            .ctx
            .submit("running a piece of the schedule", |enc| {
                self.encode_steps(enc, r)
            })?;
        Ok(())
    }

    /// The aligned byte range holding `v`'s `elem`-byte elements, and where `v` starts in it.
    fn view_region(&self, v: &crate::ir::View, elem: usize) -> (&wgpu::Buffer, u64, u64, usize) {
        let (buf, p) = self.place(v.device(), v.alloc());
        let start = p.offset + v.byte_offset(self.memory.allocs[v.alloc()].dtype.storage());
        let end = start + v.bytes(elem);
        let lo = start / 4 * 4;
        (buf, lo, end.next_multiple_of(4) - lo, (start - lo) as usize)
    }

    /// The bytes of view `v` ([`Prepared::read_view`]).
    pub fn read_view(&self, v: crate::ir::View, elem: usize) -> Result<Vec<u8>> {
        let (buf, lo, size, skip) = self.view_region(&v, elem);
        let mut out = Vec::new();
        let engine = self.engine;
        read_back(
            &engine.ctx,
            &engine.pool,
            &[(buf, lo, size)],
            &mut |_, b| {
                out = b[skip..skip + v.len() * elem].to_vec();
            },
        )?;
        Ok(out)
    }

    /// Writes `bytes` into view `v` ([`Prepared::write_view`]): whole words as they are,
    /// the neighbouring halves of a 16-bit view that starts or ends mid-word kept.
    pub fn write_view(&self, v: crate::ir::View, elem: usize, bytes: &[u8]) -> Result<()> {
        if bytes.len() != v.len() * elem {
            return Err(Error::bad_input(format!(
                "{} bytes for a view of {} elements of {elem} bytes",
                bytes.len(),
                v.len()
            )));
        }
        let (buf, lo, size, skip) = self.view_region(&v, elem);
        let ctx = &self.engine.ctx;
        if skip == 0 && size as usize == bytes.len() {
            ctx.queue.write_buffer(buf, lo, bytes);
        } else {
            let mut words = Vec::new();
            read_back(ctx, &self.engine.pool, &[(buf, lo, size)], &mut |_, b| {
                words = b.to_vec();
            })?;
            words[skip..skip + bytes.len()].copy_from_slice(bytes);
            ctx.queue.write_buffer(buf, lo, &words);
        }
        Ok(())
    }

    fn encode(&self, enc: &mut wgpu::CommandEncoder) {
        self.encode_steps(enc, 0..self.steps.len())
    }

    fn encode_steps(&self, enc: &mut wgpu::CommandEncoder, steps: std::ops::Range<usize>) {
        let buf = |b: BufId| &self.bufs[b.0].buffer;
        let mut i = steps.start;
        while i < steps.end {
            match &self.steps[i] {
                Step::Buffer(Command::Copy {
                    src,
                    src_off,
                    dst,
                    dst_off,
                    size,
                }) => enc.copy_buffer_to_buffer(buf(*src), *src_off, buf(*dst), *dst_off, *size),
                Step::Buffer(Command::Clear { dst, off, size }) => {
                    enc.clear_buffer(buf(*dst), *off, Some(*size))
                }
                Step::Buffer(Command::Dispatch(_)) => unreachable!("dispatches are realized"),
                Step::Dispatch { .. } => {
                    // Consecutive dispatches share one pass; wgpu orders them by their bindings.
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
                    while let Some(Step::Dispatch {
                        pipeline,
                        group,
                        workgroups: [x, y, z],
                    }) = self.steps[..steps.end].get(i)
                    {
                        pass.set_pipeline(pipeline);
                        pass.set_bind_group(0, group, &[]);
                        pass.dispatch_workgroups(*x, *y, *z);
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
        let elapsed = self.engine.ctx.submit("running the schedule", |enc| {
            for _ in 0..iters {
                self.encode(enc);
            }
        })?;
        Ok(elapsed)
    }

    /// Reads every output back: `outputs[device][operand]`.
    pub fn read_outputs(&self) -> Result<Vec<Vec<HostArray>>> {
        let outs = &self.program.outputs;
        let allocs = &self.program.layout.allocs;
        let mut regions = Vec::new();
        for d in 0..self.program.devices {
            for &a in outs {
                let (buf, p) = self.place(d, a);
                regions.push((buf, p.offset, p.size));
            }
        }
        let mut arrays = Vec::with_capacity(regions.len());
        let engine = self.engine;
        read_back(&engine.ctx, &engine.pool, &regions, &mut |k, bytes| {
            let alloc = &allocs[outs[k % outs.len()]];
            arrays.push(HostArray {
                dtype: alloc.dtype,
                shape: alloc.shape.clone(),
                words: host_words(
                    alloc.dtype.storage(),
                    &bytes[..alloc.storage_bytes() as usize],
                ),
            });
        })?;
        let mut arrays = arrays.into_iter();
        Ok((0..self.program.devices)
            .map(|_| arrays.by_ref().take(outs.len()).collect())
            .collect())
    }
}

/// Elements of an 8-bit operand widened to words per write (a bounded staging vector).
const WIDEN_PART: usize = 1 << 20;

/// `a`'s elements as the GPU holds them: 32-bit words, or 16-bit elements packed two
/// per word (little end first), padded to whole words.
fn device_bytes(a: &HostArray) -> Cow<'_, [u8]> {
    if a.dtype.storage() == 4 {
        return Cow::Borrowed(bytemuck::cast_slice(&a.words));
    }
    let mut b: Vec<u8> = a.halves().iter().flat_map(|h| h.to_le_bytes()).collect();
    b.resize(b.len().next_multiple_of(4), 0);
    Cow::Owned(b)
}

/// The host's one-word-per-element form of `bytes` holding `elem`-byte elements.
fn host_words(elem: usize, bytes: &[u8]) -> Vec<u32> {
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
        self.engine.pool.give_back(std::mem::take(&mut self.bufs));
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

    fn run_piece(&mut self, k: usize) -> Result<()> {
        GpuRun::run_piece(self, k)
    }

    fn restart(&mut self) -> Result<bool> {
        GpuRun::restart(self).map(|()| true)
    }

    fn write_input_bytes(&mut self, device: usize, operand: usize, bytes: &[u8]) -> Result<bool> {
        GpuRun::write_input_bytes(self, device, operand, bytes).map(|()| true)
    }

    fn read_outputs_bytes(&mut self, outputs: &mut [(usize, usize, &mut [u8])]) -> Result<bool> {
        GpuRun::read_outputs_bytes(self, outputs).map(|()| true)
    }

    fn read_view(&mut self, v: crate::ir::View, elem: usize) -> Result<Vec<u8>> {
        GpuRun::read_view(self, v, elem)
    }

    fn write_view(&mut self, v: crate::ir::View, elem: usize, bytes: &[u8]) -> Result<()> {
        GpuRun::write_view(self, v, elem, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::super::commands::tests::program;
    use super::*;
    use crate::array::DType;
    use crate::error::GpuErrorKind;
    use crate::ir::Schedule;

    #[test]
    fn a_refused_command_is_a_validation_error_naming_the_buffer() {
        let engine = Engine::new(Arc::new(GpuContext::new().expect("a GPU adapter")));
        let p = program(1, &[("a", DType::F32, 4)]);
        let memory = Schedule {
            ops: vec![],
            policy: String::new(),
            steps: 0,
            staging: 0,
        }
        .memory(&p);
        let mut rec = Recording::new(Lowering::PerOp);
        let a = rec.buffer("device 0 a", 16, Init::Zeros);
        let params = rec.param(vec![0, 0, 4, 7]);
        // A binding past the end of its buffer.
        rec.commands.push(Command::Dispatch(Dispatch {
            pipeline: super::super::commands::PipelineKey::Fill,
            bindings: vec![super::super::commands::Bound {
                buf: a,
                offset: 0,
                size: 1 << 20,
            }],
            params,
            workgroups: [1, 1, 1],
        }));
        match engine.load(&p, memory, rec) {
            Err(Error::Gpu(e)) => {
                assert_eq!(e.kind, GpuErrorKind::Validation, "{e}");
                assert!(e.message.contains("'device 0 a'"), "{e}");
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a binding past its buffer's end was accepted"),
        };
    }
}
