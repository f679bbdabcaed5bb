//! Runs a [`GpuProgram`]: one arena buffer for every device's memory, the op table and
//! items in storage buffers, one bind group per dispatch, all recorded once.

use super::executor::GpuExecutor;
use super::program::{GpuProgram, Segment};
use crate::array::HostArray;
use crate::error::{Error, GpuError, GpuErrorKind, Result};
use crate::exec::{check_inputs, Prepared};
use crate::ir::{Program, Schedule};
use std::time::Duration;

const ARENA: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);
const TABLE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_DST);
const READBACK: wgpu::BufferUsages =
    wgpu::BufferUsages::MAP_READ.union(wgpu::BufferUsages::COPY_DST);

/// A schedule prepared as one GPU program.
pub struct ArenaRun<'a> {
    exec: &'a GpuExecutor,
    program: &'a Program,
    plan: GpuProgram,
    bufs: Vec<wgpu::Buffer>,
    groups: Vec<wgpu::BindGroup>,
    readback: wgpu::Buffer,
}

impl<'a> ArenaRun<'a> {
    /// Plans `schedule` as a program and records it; `Ok(None)` when it cannot be one
    /// (the arena would not fit one binding, or an op overlaps itself).
    pub fn prepare(
        exec: &'a GpuExecutor,
        program: &'a Program,
        schedule: &Schedule,
    ) -> Result<Option<Self>> {
        let ctx = exec.context();
        let dev = &ctx.device;
        let limits = &ctx.limits;
        let max_binding = limits
            .max_storage_buffer_binding_size
            .min(limits.max_buffer_size);
        let allocs = schedule.allocations(program);
        let Ok(plan) = GpuProgram::plan(program.devices, &allocs, &schedule.ops, max_binding / 4)
        else {
            return Ok(None);
        };
        let table_bytes = std::mem::size_of_val(plan.ops.as_slice()) as u64;
        let items_bytes = (plan.items.len() * 16) as u64;
        if table_bytes.max(items_bytes) > max_binding {
            return Ok(None);
        }
        let pool = exec.pool();
        let max = limits.max_buffer_size;
        let oom = dev.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = dev.push_error_scope(wgpu::ErrorFilter::Validation);
        let arena = pool.take(dev, plan.words * 4, ARENA, max);
        let ops = pool.take(dev, table_bytes.max(32), TABLE, max);
        let items = pool.take(dev, items_bytes.max(16), TABLE, max);
        let stride = (limits.min_uniform_buffer_offset_alignment as u64).max(16);
        let waves: Vec<(u32, u32)> = plan
            .segments
            .iter()
            .filter_map(|s| match *s {
                Segment::Wave { first, count } => Some((first, count)),
                _ => None,
            })
            .collect();
        let segs = waves.len().max(1) as u64;
        let scratch = pool.take(dev, plan.scratch_words.max(1) * 4, ARENA, max);
        let uniforms = pool.take(
            dev,
            stride * segs,
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            max,
        );
        let out_words: u64 = (0..program.devices)
            .flat_map(|_| program.outputs.iter())
            .map(|&a| allocs[a].numel() as u64)
            .sum();
        let readback = pool.take(dev, out_words.max(1) * 4, READBACK, max);
        let queue = &ctx.queue;
        if !plan.ops.is_empty() {
            queue.write_buffer(&ops, 0, bytemuck::cast_slice(&plan.ops));
        }
        if !plan.items.is_empty() {
            queue.write_buffer(&items, 0, bytemuck::cast_slice(&plan.items));
        }
        let mut params = vec![0u8; (stride * segs) as usize];
        for (i, &(first, count)) in waves.iter().enumerate() {
            let o = i * stride as usize;
            params[o..o + 8].copy_from_slice(bytemuck::cast_slice(&[first, count]));
        }
        queue.write_buffer(&uniforms, 0, &params);
        let layout = &exec.pipes().schedule_layout;
        let groups = (0..waves.len())
            .map(|i| {
                dev.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("schedule segment"),
                    layout,
                    entries: &[
                        entry(0, &arena, plan.words * 4),
                        entry(1, &ops, table_bytes.max(32)),
                        entry(2, &items, items_bytes.max(16)),
                        wgpu::BindGroupEntry {
                            binding: 3,
                            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                                buffer: &uniforms,
                                offset: i as u64 * stride,
                                size: std::num::NonZeroU64::new(16),
                            }),
                        },
                    ],
                })
            })
            .collect();
        // Every allocation starts as zeros, as on the CPU executor.
        let mut enc = dev.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("clear arena"),
        });
        enc.clear_buffer(&arena, 0, Some(plan.words * 4));
        queue.submit([enc.finish()]);
        if let Some(e) = pollster::block_on(validation.pop()) {
            return Err(GpuError::new(GpuErrorKind::Validation, e.to_string()).into());
        }
        if let Some(e) = pollster::block_on(oom.pop()) {
            return Err(GpuError::new(GpuErrorKind::OutOfMemory, e.to_string()).into());
        }
        Ok(Some(Self {
            exec,
            program,
            plan,
            bufs: vec![arena, ops, items, uniforms, scratch],
            groups,
            readback,
        }))
    }

    /// Compute dispatches per iteration.
    pub fn dispatches(&self) -> usize {
        self.groups.len()
    }

    fn encode(&self, enc: &mut wgpu::CommandEncoder) {
        let pipes = self.exec.pipes();
        let max_x = self
            .exec
            .context()
            .limits
            .max_compute_workgroups_per_dimension;
        let (arena, scratch) = (&self.bufs[0], &self.bufs[4]);
        let mut groups = self.groups.iter();
        for seg in &self.plan.segments {
            match *seg {
                Segment::Copy { src, dst, words } => {
                    enc.copy_buffer_to_buffer(arena, src * 4, scratch, 0, words * 4);
                    enc.copy_buffer_to_buffer(scratch, 0, arena, dst * 4, words * 4);
                }
                Segment::Clear { at, words } => enc.clear_buffer(arena, at * 4, Some(words * 4)),
                Segment::Wave { count, .. } => {
                    let group = groups.next().expect("one bind group per dispatch");
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
                    pass.set_pipeline(&pipes.schedule_wave);
                    pass.set_bind_group(0, group, &[]);
                    let x = count.min(max_x);
                    pass.dispatch_workgroups(x, count.div_ceil(x), 1);
                }
            }
        }
    }
}

impl Prepared for ArenaRun<'_> {
    fn upload(&mut self, inputs: &[Vec<HostArray>]) -> Result<()> {
        check_inputs(self.program, inputs)?;
        for (d, dev_inputs) in inputs.iter().enumerate() {
            for (&a, arr) in self.program.inputs.iter().zip(dev_inputs) {
                self.exec.context().queue.write_buffer(
                    &self.bufs[0],
                    self.plan.offset(d, a) * 4,
                    bytemuck::cast_slice(&arr.words),
                );
            }
        }
        Ok(())
    }

    fn run(&mut self, iters: usize) -> Result<Duration> {
        self.exec
            .submit_iterations("schedule program", iters, &|enc| self.encode(enc))
    }

    fn read_outputs(&mut self) -> Result<Vec<Vec<HostArray>>> {
        let ctx = self.exec.context();
        let allocs = &self.program.layout.allocs;
        let outs = &self.program.outputs;
        let mut enc = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("readback"),
            });
        let mut at = 0u64;
        let mut places = Vec::new();
        for d in 0..self.program.devices {
            for &a in outs {
                let bytes = allocs[a].numel() as u64 * 4;
                if bytes > 0 {
                    enc.copy_buffer_to_buffer(
                        &self.bufs[0],
                        self.plan.offset(d, a) * 4,
                        &self.readback,
                        at,
                        bytes,
                    );
                }
                places.push((a, at));
                at += bytes;
            }
        }
        ctx.queue.submit([enc.finish()]);
        let (tx, rx) = futures::channel::oneshot::channel();
        self.readback.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        ctx.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| {
                Error::from(GpuError::new(
                    GpuErrorKind::Lost,
                    format!("waiting for the GPU: {e}"),
                ))
            })?;
        match pollster::block_on(rx) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                return Err(GpuError::new(
                    GpuErrorKind::Readback,
                    format!("mapping the outputs for readback: {e}"),
                )
                .into())
            }
            Err(_) => {
                return Err(GpuError::new(
                    GpuErrorKind::Readback,
                    "the outputs' readback was cancelled",
                )
                .into())
            }
        }
        let out = {
            let view = self.readback.get_mapped_range(..).map_err(|e| {
                GpuError::new(
                    GpuErrorKind::Readback,
                    format!("reading back the outputs: {e}"),
                )
            })?;
            let words: &[u32] = bytemuck::cast_slice(&view[..at as usize]);
            let mut it = places.into_iter();
            (0..self.program.devices)
                .map(|_| {
                    outs.iter()
                        .map(|_| {
                            let (a, off) = it.next().expect("one place per output");
                            let o = (off / 4) as usize;
                            HostArray {
                                dtype: allocs[a].dtype,
                                shape: allocs[a].shape.clone(),
                                words: words[o..o + allocs[a].numel()].to_vec(),
                            }
                        })
                        .collect()
                })
                .collect()
        };
        self.readback.unmap();
        Ok(out)
    }
}

impl Drop for ArenaRun<'_> {
    fn drop(&mut self) {
        let mut bufs = std::mem::take(&mut self.bufs);
        bufs.push(self.readback.clone());
        self.exec.pool().give_back(bufs);
    }
}

/// The first `size` bytes of `buffer` (pooled buffers can be larger than asked for).
fn entry(binding: u32, buffer: &wgpu::Buffer, size: u64) -> wgpu::BindGroupEntry<'_> {
    wgpu::BindGroupEntry {
        binding,
        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer,
            offset: 0,
            size: std::num::NonZeroU64::new(size),
        }),
    }
}
