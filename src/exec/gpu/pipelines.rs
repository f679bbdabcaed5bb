//! Compute pipelines for the WGSL shaders in `shaders/`, built once per device.

use super::codes::{dtype_code, reduce_code, HALVES_ACCUMULATE, HALVES_COPY, HALVES_FILL};
use super::shaders::assembled;
use crate::array::DType;
use crate::ir::ReduceOp;
use std::collections::HashMap;
use std::sync::Mutex;

pub use super::codes::WORKGROUP;

/// Bytes of one parameter block (the batch shader's four items; others use the first).
pub const PARAMS_BYTES: u64 = 64;

/// The shader parameters (`struct Params` in the single-op shaders, `Item` in the batch one).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Params {
    /// Element offset in the source binding.
    pub src_off: u32,
    /// Element offset in the destination binding.
    pub dst_off: u32,
    /// Elements to process.
    pub n: u32,
    /// Fill value bits.
    pub value: u32,
}

/// Layouts and pipelines; accumulate variants are compiled on first use, then kept.
pub struct Pipelines {
    pub(crate) acc_layout: wgpu::BindGroupLayout,
    pub(crate) fill_layout: wgpu::BindGroupLayout,
    pub(crate) batch_layout: wgpu::BindGroupLayout,
    batch_module: wgpu::ShaderModule,
    batch_pipeline_layout: wgpu::PipelineLayout,
    batch: Mutex<HashMap<(ReduceOp, DType), wgpu::ComputePipeline>>,
    acc_module: wgpu::ShaderModule,
    acc4_module: wgpu::ShaderModule,
    acc_pipeline_layout: wgpu::PipelineLayout,
    pub(crate) fill: wgpu::ComputePipeline,
    acc: Mutex<HashMap<(ReduceOp, DType, bool), wgpu::ComputePipeline>>,
    pub(crate) schedule_layout: wgpu::BindGroupLayout,
    pub(crate) schedule_wave: wgpu::ComputePipeline,
    halves_module: wgpu::ShaderModule,
    halves: Mutex<HashMap<HalfOp, wgpu::ComputePipeline>>,
}

/// What a `halves.wgsl` dispatch does to its 16-bit destination elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HalfOp {
    /// Copies the source.
    Copy,
    /// Writes the parameter block's value.
    Fill,
    /// Combines with the source in this 16-bit float dtype.
    Accumulate(ReduceOp, DType),
}

fn storage(binding: u32, read_only: bool) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only },
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}

fn uniform(binding: u32) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}

impl Pipelines {
    /// Builds the layouts and the fill pipeline.
    pub fn new(device: &wgpu::Device) -> Self {
        let acc_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("accumulate"),
            entries: &[storage(0, true), storage(1, false), uniform(2)],
        });
        let fill_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("fill"),
            entries: &[storage(0, false), uniform(1)],
        });
        let batch_entries: Vec<wgpu::BindGroupLayoutEntry> = (0..4)
            .map(|k| storage(k, true))
            .chain((4..8).map(|k| storage(k, false)))
            .chain([uniform(8)])
            .collect();
        let batch_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("accumulate_batch"),
            entries: &batch_entries,
        });
        let module = |name: &str| {
            device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(name),
                source: wgpu::ShaderSource::Wgsl(assembled(name).into()),
            })
        };
        let layout = |bgl: &wgpu::BindGroupLayout| {
            device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: None,
                bind_group_layouts: &[Some(bgl)],
                immediate_size: 0,
            })
        };
        let fill_module = module("fill.wgsl");
        let fill = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("fill"),
            layout: Some(&layout(&fill_layout)),
            module: &fill_module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let schedule_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("schedule"),
            entries: &[
                storage(0, false),
                storage(1, true),
                storage(2, true),
                uniform(3),
            ],
        });
        let schedule_module = module("schedule.wgsl");
        let schedule_pipeline_layout = layout(&schedule_layout);
        let schedule_wave = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("schedule wave"),
            layout: Some(&schedule_pipeline_layout),
            module: &schedule_module,
            entry_point: Some("wave"),
            compilation_options: Default::default(),
            cache: None,
        });
        Self {
            schedule_layout,
            schedule_wave,
            batch_module: module("accumulate_batch.wgsl"),
            batch_pipeline_layout: layout(&batch_layout),
            batch_layout,
            batch: Mutex::new(HashMap::new()),
            acc_module: module("accumulate.wgsl"),
            acc4_module: module("accumulate_vec4.wgsl"),
            acc_pipeline_layout: layout(&acc_layout),
            acc_layout,
            fill_layout,
            fill,
            acc: Mutex::new(HashMap::new()),
            halves_module: module("halves.wgsl"),
            halves: Mutex::new(HashMap::new()),
        }
    }

    /// The `halves.wgsl` pipeline doing `op` on 16-bit elements (it binds like an
    /// accumulate: source, destination, parameters). Copies and fills are the same for
    /// both 16-bit dtypes.
    pub fn halves(&self, device: &wgpu::Device, op: HalfOp) -> wgpu::ComputePipeline {
        let mut map = self.halves.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(op)
            .or_insert_with(|| {
                let constants: &[(&str, f64)] = match op {
                    HalfOp::Copy => &[("MODE", HALVES_COPY as f64)],
                    HalfOp::Fill => &[("MODE", HALVES_FILL as f64)],
                    HalfOp::Accumulate(r, d) => &[
                        ("MODE", HALVES_ACCUMULATE as f64),
                        ("OP", op_constant(r)),
                        ("DTYPE", dtype_constant(d)),
                    ],
                };
                device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some("halves"),
                    layout: Some(&self.acc_pipeline_layout),
                    module: &self.halves_module,
                    entry_point: Some("main"),
                    compilation_options: wgpu::PipelineCompilationOptions {
                        constants,
                        zero_initialize_workgroup_memory: false,
                    },
                    cache: None,
                })
            })
            .clone()
    }

    /// The batched accumulate pipeline for `op` and `dtype`.
    pub fn accumulate_batch(
        &self,
        device: &wgpu::Device,
        op: ReduceOp,
        dtype: DType,
    ) -> wgpu::ComputePipeline {
        let mut map = self.batch.lock().unwrap_or_else(|p| p.into_inner());
        map.entry((op, dtype))
            .or_insert_with(|| {
                device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some("accumulate_batch"),
                    layout: Some(&self.batch_pipeline_layout),
                    module: &self.batch_module,
                    entry_point: Some("main"),
                    compilation_options: wgpu::PipelineCompilationOptions {
                        constants: &[("OP", op_constant(op)), ("DTYPE", dtype_constant(dtype))],
                        zero_initialize_workgroup_memory: false,
                    },
                    cache: None,
                })
            })
            .clone()
    }

    /// The accumulate pipeline for `op` and `dtype`, on vec4 words when `vec4`.
    pub fn accumulate(
        &self,
        device: &wgpu::Device,
        op: ReduceOp,
        dtype: DType,
        vec4: bool,
    ) -> wgpu::ComputePipeline {
        let mut map = self.acc.lock().unwrap_or_else(|p| p.into_inner());
        map.entry((op, dtype, vec4))
            .or_insert_with(|| {
                let (op_c, dt_c) = (op_constant(op), dtype_constant(dtype));
                device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some("accumulate"),
                    layout: Some(&self.acc_pipeline_layout),
                    module: if vec4 {
                        &self.acc4_module
                    } else {
                        &self.acc_module
                    },
                    entry_point: Some("main"),
                    compilation_options: wgpu::PipelineCompilationOptions {
                        constants: &[("OP", op_c), ("DTYPE", dt_c)],
                        zero_initialize_workgroup_memory: false,
                    },
                    cache: None,
                })
            })
            .clone()
    }
}

fn op_constant(op: ReduceOp) -> f64 {
    reduce_code(op) as f64
}

fn dtype_constant(dtype: DType) -> f64 {
    dtype_code(dtype) as f64
}
