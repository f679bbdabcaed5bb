//! Compute pipelines for the shaders, by [`PipelineKey`]: modules and layouts made once
//! per device, each pipeline compiled on first use and then kept.

use super::codes::{
    dtype_code, is_math, reduce_code, HALVES_ACCUMULATE, HALVES_COPY, HALVES_FILL, LAYOUT_GATHER,
    LAYOUT_IOTA, PACK_DENSE, PACK_RUNS, REDUCE_ARG, REDUCE_VALUES,
};
use super::commands::{HalfOp, PipelineKey};
use super::shaders::assembled;
use std::collections::HashMap;
use std::sync::Mutex;

/// The bind group shapes: storage bindings (read-only or not), then one uniform.
#[derive(Clone, Copy)]
enum Shape {
    /// A destination (`fill.wgsl`).
    Dst,
    /// A source and a destination (accumulates, `halves.wgsl`).
    SrcDst,
    /// Four sources, four destinations (`accumulate_batch.wgsl`).
    Batch,
    /// The arena, the op table, the chunks (`schedule.wgsl`).
    Schedule,
    /// Two read-write operands (`compute_layout.wgsl`, `compute_reduce.wgsl`).
    Rw2,
    /// Three read-write operands (`compute_matmul.wgsl`).
    Rw3,
    /// Four read-write operands (`compute_elementwise.wgsl`).
    Rw4,
    /// One, five, six, seven or eight read-write operands (fused regions' shaders).
    Rw1,
    Rw5,
    Rw6,
    Rw7,
    Rw8,
}

impl Shape {
    const ALL: [Shape; 12] = [
        Shape::Dst,
        Shape::SrcDst,
        Shape::Batch,
        Shape::Schedule,
        Shape::Rw2,
        Shape::Rw3,
        Shape::Rw4,
        Shape::Rw1,
        Shape::Rw5,
        Shape::Rw6,
        Shape::Rw7,
        Shape::Rw8,
    ];

    /// `n` read-write operands (1 to 8).
    fn rw(n: u8) -> Shape {
        match n {
            1 => Shape::Rw1,
            2 => Shape::Rw2,
            3 => Shape::Rw3,
            4 => Shape::Rw4,
            5 => Shape::Rw5,
            6 => Shape::Rw6,
            7 => Shape::Rw7,
            _ => Shape::Rw8,
        }
    }

    /// `read_only` for each storage binding, in order.
    fn storage(self) -> &'static [bool] {
        match self {
            Shape::Dst => &[false],
            Shape::SrcDst => &[true, false],
            Shape::Batch => &[true, true, true, true, false, false, false, false],
            Shape::Schedule => &[false, true, true],
            // Compute ops bind every operand read-write: a source may live in the
            // destination's buffer (values of one dtype share an allocation), and
            // WebGPU refuses a read-only and a writable binding of one buffer in one
            // dispatch. The ranges a dispatch reads and writes never overlap.
            Shape::Rw2 => &[false, false],
            Shape::Rw3 => &[false, false, false],
            Shape::Rw4 => &[false, false, false, false],
            Shape::Rw1 => &[false],
            Shape::Rw5 => &[false; 5],
            Shape::Rw6 => &[false; 6],
            Shape::Rw7 => &[false; 7],
            Shape::Rw8 => &[false; 8],
        }
    }
}

/// A compute pipeline and the layout of its bind group.
#[derive(Clone)]
pub struct Pipeline {
    /// The pipeline.
    pub pipeline: wgpu::ComputePipeline,
    /// Its bind group's layout.
    pub layout: wgpu::BindGroupLayout,
}

/// Layouts and modules; pipelines compiled on first use, then kept.
pub struct Pipelines {
    layouts: Vec<(wgpu::BindGroupLayout, wgpu::PipelineLayout)>,
    modules: HashMap<&'static str, wgpu::ShaderModule>,
    built: Mutex<HashMap<PipelineKey, Pipeline>>,
}

fn entry(binding: u32, ty: wgpu::BufferBindingType) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}

impl Pipelines {
    /// Builds the layouts and the shader modules.
    pub fn new(device: &wgpu::Device) -> Self {
        let layouts = Shape::ALL
            .iter()
            .map(|s| {
                let storage = s.storage();
                let entries: Vec<_> = storage
                    .iter()
                    .enumerate()
                    .map(|(i, &read_only)| {
                        entry(i as u32, wgpu::BufferBindingType::Storage { read_only })
                    })
                    .chain([entry(
                        storage.len() as u32,
                        wgpu::BufferBindingType::Uniform,
                    )])
                    .collect();
                let bgl = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                    label: None,
                    entries: &entries,
                });
                let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                    label: None,
                    bind_group_layouts: &[Some(&bgl)],
                    immediate_size: 0,
                });
                (bgl, pl)
            })
            .collect();
        let modules = super::shaders::SHADERS
            .iter()
            .map(|(name, _)| {
                let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(name),
                    source: wgpu::ShaderSource::Wgsl(assembled(name).into()),
                });
                (*name, module)
            })
            .collect();
        Self {
            layouts,
            modules,
            built: Mutex::new(HashMap::new()),
        }
    }

    /// The pipeline of `key` (compiled on first use).
    pub fn get(&self, device: &wgpu::Device, key: PipelineKey) -> Pipeline {
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        built
            .entry(key)
            .or_insert_with(|| self.build(device, key))
            .clone()
    }

    fn build(&self, device: &wgpu::Device, key: PipelineKey) -> Pipeline {
        if let PipelineKey::Region { id, bindings } = key {
            // A generated kernel: a module of its own.
            let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some("fused region"),
                source: wgpu::ShaderSource::Wgsl(super::region_shader::module(id).into()),
            });
            return self.pipeline(device, Shape::rw(bindings), &module, "main", &[]);
        }
        let code = |c: u32| c as f64;
        let ops = |op, dtype| {
            vec![
                ("OP", code(reduce_code(op))),
                ("DTYPE", code(dtype_code(dtype))),
            ]
        };
        let (shape, file, entry_point, constants) = match key {
            PipelineKey::Fill => (Shape::Dst, "fill.wgsl", "main", vec![]),
            PipelineKey::Accumulate { op, dtype, vec4 } => {
                let file = if vec4 {
                    "accumulate_vec4.wgsl"
                } else {
                    "accumulate.wgsl"
                };
                (Shape::SrcDst, file, "main", ops(op, dtype))
            }
            PipelineKey::AccumulateBatch { op, dtype } => (
                Shape::Batch,
                "accumulate_batch.wgsl",
                "main",
                ops(op, dtype),
            ),
            PipelineKey::Halves(h) => {
                let constants = match h {
                    HalfOp::Copy => vec![("MODE", code(HALVES_COPY))],
                    HalfOp::Fill => vec![("MODE", code(HALVES_FILL))],
                    HalfOp::Accumulate(op, dtype) => {
                        let mut c = ops(op, dtype);
                        c.push(("MODE", code(HALVES_ACCUMULATE)));
                        c
                    }
                };
                (Shape::SrcDst, "halves.wgsl", "main", constants)
            }
            PipelineKey::Schedule => (Shape::Schedule, "schedule.wgsl", "wave", vec![]),
            PipelineKey::Elementwise { op, srcs, dst } => (
                Shape::Rw4,
                if is_math(op) {
                    "compute_math.wgsl"
                } else {
                    "compute_elementwise.wgsl"
                },
                if is_math(op) { "math" } else { "main" },
                vec![
                    ("OP", code(op)),
                    ("D0", code(dtype_code(srcs[0]))),
                    ("D1", code(dtype_code(srcs[1]))),
                    ("D2", code(dtype_code(srcs[2]))),
                    ("DD", code(dtype_code(dst))),
                ],
            ),
            PipelineKey::Layout { iota, dtype, runs } => (
                Shape::Rw2,
                "compute_layout.wgsl",
                "main",
                vec![
                    ("MODE", code(if iota { LAYOUT_IOTA } else { LAYOUT_GATHER })),
                    ("DTYPE", code(dtype_code(dtype))),
                    ("PACK", code(if runs { PACK_RUNS } else { PACK_DENSE })),
                ],
            ),
            PipelineKey::Reduce {
                arg,
                op,
                src,
                per_group,
            } => (
                Shape::Rw2,
                "compute_reduce.wgsl",
                if per_group { "per_group" } else { "per_thread" },
                vec![
                    ("MODE", code(if arg { REDUCE_ARG } else { REDUCE_VALUES })),
                    ("OP", code(op)),
                    ("DS", code(dtype_code(src))),
                ],
            ),
            PipelineKey::Region { .. } => unreachable!("built above"),
            PipelineKey::Matmul { input } => (
                Shape::Rw3,
                "compute_matmul.wgsl",
                "main",
                vec![("IN", code(dtype_code(input)))],
            ),
        };
        let module = &self.modules[file];
        self.pipeline(device, shape, module, entry_point, &constants)
    }

    fn pipeline(
        &self,
        device: &wgpu::Device,
        shape: Shape,
        module: &wgpu::ShaderModule,
        entry_point: &str,
        constants: &[(&str, f64)],
    ) -> Pipeline {
        let (layout, pipeline_layout) = &self.layouts[shape as usize];
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(entry_point),
            layout: Some(pipeline_layout),
            module,
            entry_point: Some(entry_point),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants,
                zero_initialize_workgroup_memory: false,
            },
            cache: None,
        });
        Pipeline {
            pipeline,
            layout: layout.clone(),
        }
    }
}
