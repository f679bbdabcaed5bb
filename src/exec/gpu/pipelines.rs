//! Compute pipelines for the WGSL shaders in `shaders/`, built once per device.

use crate::array::DType;
use crate::ir::ReduceOp;
use std::collections::HashMap;
use std::sync::Mutex;

/// WGSL source of the accumulate family (`dst = op(dst, src)`).
pub const ACCUMULATE_WGSL: &str = include_str!("../../../shaders/accumulate.wgsl");
/// WGSL source of the vec4 accumulate family.
pub const ACCUMULATE_VEC4_WGSL: &str = include_str!("../../../shaders/accumulate_vec4.wgsl");
/// WGSL source of the batched accumulate family (up to four items per dispatch).
pub const ACCUMULATE_BATCH_WGSL: &str = include_str!("../../../shaders/accumulate_batch.wgsl");
/// WGSL source of the fill shader.
pub const FILL_WGSL: &str = include_str!("../../../shaders/fill.wgsl");
/// WGSL source of the schedule program (arena + op table).
pub const SCHEDULE_WGSL: &str = include_str!("../../../shaders/schedule.wgsl");
/// WGSL source of the 16-bit element ops (copy, fill, accumulate on packed halves).
pub const HALVES_WGSL: &str = include_str!("../../../shaders/halves.wgsl");
/// Every shader, by file name (for validation).
pub const SHADERS: &[(&str, &str)] = &[
    ("accumulate.wgsl", ACCUMULATE_WGSL),
    ("accumulate_vec4.wgsl", ACCUMULATE_VEC4_WGSL),
    ("accumulate_batch.wgsl", ACCUMULATE_BATCH_WGSL),
    ("fill.wgsl", FILL_WGSL),
    ("schedule.wgsl", SCHEDULE_WGSL),
    ("halves.wgsl", HALVES_WGSL),
];

/// Threads per workgroup in every shader.
pub const WORKGROUP: u32 = 256;

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
        let module = |label, src: &str| {
            device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(label),
                source: wgpu::ShaderSource::Wgsl(src.into()),
            })
        };
        let layout = |bgl: &wgpu::BindGroupLayout| {
            device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: None,
                bind_group_layouts: &[Some(bgl)],
                immediate_size: 0,
            })
        };
        let fill_module = module("fill", FILL_WGSL);
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
        let schedule_module = module("schedule", SCHEDULE_WGSL);
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
            batch_module: module("accumulate_batch", ACCUMULATE_BATCH_WGSL),
            batch_pipeline_layout: layout(&batch_layout),
            batch_layout,
            batch: Mutex::new(HashMap::new()),
            acc_module: module("accumulate", ACCUMULATE_WGSL),
            acc4_module: module("accumulate_vec4", ACCUMULATE_VEC4_WGSL),
            acc_pipeline_layout: layout(&acc_layout),
            acc_layout,
            fill_layout,
            fill,
            acc: Mutex::new(HashMap::new()),
            halves_module: module("halves", HALVES_WGSL),
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
                    HalfOp::Copy => &[("MODE", 0.0)],
                    HalfOp::Fill => &[("MODE", 1.0)],
                    HalfOp::Accumulate(r, d) => &[
                        ("MODE", 2.0),
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

/// The shaders' code of a reduction operator (`OP` / the op table's `bits`).
pub(super) fn op_code(op: ReduceOp) -> u32 {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Max => 1,
        ReduceOp::Min => 2,
    }
}

/// The shaders' code of an element type (`DTYPE` / the op table's `bits >> 4`).
pub(super) fn dtype_code(dtype: DType) -> u32 {
    match dtype {
        DType::F32 => 0,
        DType::I32 => 1,
        DType::F16 => 2,
        DType::BF16 => 3,
        DType::I8 => 4,
        DType::U8 => 5,
        DType::Bool => 6,
    }
}

fn op_constant(op: ReduceOp) -> f64 {
    op_code(op) as f64
}

fn dtype_constant(dtype: DType) -> f64 {
    dtype_code(dtype) as f64
}
