//! Compute pipelines for the WGSL shaders in `shaders/`, built once per device.

use crate::array::DType;
use crate::device_sim::program::ReduceOp;
use std::collections::HashMap;
use std::sync::Mutex;

/// WGSL source of the accumulate family (`dst = op(dst, src)`).
pub const ACCUMULATE_WGSL: &str = include_str!("../../../shaders/accumulate.wgsl");
/// WGSL source of the vec4 accumulate family.
pub const ACCUMULATE_VEC4_WGSL: &str = include_str!("../../../shaders/accumulate_vec4.wgsl");
/// WGSL source of the fill shader.
pub const FILL_WGSL: &str = include_str!("../../../shaders/fill.wgsl");
/// Every shader, by file name (for validation).
pub const SHADERS: &[(&str, &str)] = &[
    ("accumulate.wgsl", ACCUMULATE_WGSL),
    ("accumulate_vec4.wgsl", ACCUMULATE_VEC4_WGSL),
    ("fill.wgsl", FILL_WGSL),
];

/// Threads per workgroup in every shader.
pub const WORKGROUP: u32 = 256;

/// The shader parameters (`struct Params` in every shader).
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
    acc_module: wgpu::ShaderModule,
    acc4_module: wgpu::ShaderModule,
    acc_pipeline_layout: wgpu::PipelineLayout,
    pub(crate) fill: wgpu::ComputePipeline,
    acc: Mutex<HashMap<(ReduceOp, DType, bool), wgpu::ComputePipeline>>,
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
        Self {
            acc_module: module("accumulate", ACCUMULATE_WGSL),
            acc4_module: module("accumulate_vec4", ACCUMULATE_VEC4_WGSL),
            acc_pipeline_layout: layout(&acc_layout),
            acc_layout,
            fill_layout,
            fill,
            acc: Mutex::new(HashMap::new()),
        }
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
                let op_c = match op {
                    ReduceOp::Sum => 0.0,
                    ReduceOp::Max => 1.0,
                    ReduceOp::Min => 2.0,
                };
                let dt_c = match dtype {
                    DType::F32 => 0.0,
                    DType::I32 => 1.0,
                };
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
