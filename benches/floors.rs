//! The adapter's floors, measured with plain wgpu (no tpusim scheduling): what one
//! compute dispatch, one accumulated element and one small buffer copy cost, and the
//! lower bound they put under a schedule's per-op recording (its dispatches, the
//! elements its accumulates touch, its copies and fills). Run with
//! `cargo bench --bench floors`; the targets of issue 12 are compared with these bounds.

use std::time::Instant;
use tpusim::collectives::Registry;
use tpusim::device_sim::gpu::{ArenaMode, GpuContext, GpuExecutor};
use tpusim::ir::DataOp;
use tpusim::sched::{schedule, Eager};
use tpusim::{DType, Mesh};

const ACCUMULATE: &str = r#"
struct Params { n: u32, a: u32, b: u32, c: u32 }
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<uniform> params: Params;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < params.n) {
        dst[gid.x] = bitcast<u32>(bitcast<f32>(dst[gid.x]) + bitcast<f32>(src[gid.x]));
    }
}
"#;

/// Seconds per dispatch of an `n`-element accumulate, `reps` back to back in one
/// submission.
fn dispatch_seconds(ctx: &GpuContext, n: u32, reps: u32) -> f64 {
    let dev = &ctx.device;
    let module = dev.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: None,
        source: wgpu::ShaderSource::Wgsl(ACCUMULATE.into()),
    });
    let pipe = dev.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: None,
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let buf = |size, usage| {
        dev.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage,
            mapped_at_creation: false,
        })
    };
    let storage = wgpu::BufferUsages::STORAGE;
    let (s, d) = (buf(n as u64 * 4, storage), buf(n as u64 * 4, storage));
    let u = buf(
        16,
        wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
    );
    ctx.queue
        .write_buffer(&u, 0, bytemuck::cast_slice(&[n, 0, 0, 0]));
    let bg = dev.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipe.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: s.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: d.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 2,
                resource: u.as_entire_binding(),
            },
        ],
    });
    let run = |reps: u32| {
        let t = Instant::now();
        let mut enc = dev.create_command_encoder(&Default::default());
        for _ in 0..reps {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipe);
            pass.set_bind_group(0, &bg, &[]);
            pass.dispatch_workgroups(n.div_ceil(256), 1, 1);
        }
        ctx.queue.submit([enc.finish()]);
        dev.poll(wgpu::PollType::wait_indefinitely())
            .expect("the GPU finishes");
        t.elapsed().as_secs_f64()
    };
    run(3);
    run(reps) / reps as f64
}

/// Seconds per 4 KiB buffer copy, alternating directions so that every copy waits
/// for the previous one (as a schedule's dependent copies do).
fn copy_seconds(ctx: &GpuContext, reps: u32) -> f64 {
    let dev = &ctx.device;
    let usage = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let buf = || {
        dev.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: 4096,
            usage,
            mapped_at_creation: false,
        })
    };
    let (a, b) = (buf(), buf());
    let t = Instant::now();
    let mut enc = dev.create_command_encoder(&Default::default());
    for i in 0..reps {
        let (s, d) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        enc.copy_buffer_to_buffer(s, 0, d, 0, 4096);
    }
    ctx.queue.submit([enc.finish()]);
    dev.poll(wgpu::PollType::wait_indefinitely())
        .expect("the GPU finishes");
    t.elapsed().as_secs_f64() / reps as f64
}

fn main() {
    let mut gpu = GpuExecutor::from_env().expect("a GPU adapter");
    // The floors are of the per-op recording.
    gpu.set_arena(ArenaMode::Off);
    let ctx = gpu.context().clone();
    println!("# adapter: {}", ctx.describe());
    let small = dispatch_seconds(&ctx, 1024, 400);
    let big_n = 1u32 << 22;
    let big = dispatch_seconds(&ctx, big_n, 5);
    let per_elem = big / big_n as f64;
    let fixed = (small - 1024.0 * per_elem).max(0.0);
    let copy = copy_seconds(&ctx, 400);
    println!(
        "one dispatch: {:.1} us fixed; one accumulated f32 element: {:.2} ns; one dependent 4 KiB copy: {:.2} us",
        fixed * 1e6,
        per_elem * 1e9,
        copy * 1e6
    );
    println!(
        "\n{:<10} {:>5} {:>7} {:>11} {:>12} {:>13} {:>15} {:>12}",
        "collective",
        "P",
        "shard",
        "dispatches",
        "acc. elems",
        "copies+fills",
        "floor ms/iter",
        "measured"
    );
    let reg = Registry::builtin();
    for (name, p) in [("psum", 4usize), ("psum", 8), ("psum", 256)] {
        let mesh = Mesh::new(p, "x").expect("mesh");
        let program = reg
            .by_name(name)
            .and_then(|c| c.call(&mesh, &[8, 128], DType::F32))
            .and_then(|k| k.lower(&mesh))
            .expect("lower");
        let sched = schedule(&program, &mut Eager::default()).expect("schedule");
        let run = gpu.prepare_run(&program, &sched).expect("prepare");
        let elems: usize = sched
            .ops
            .iter()
            .map(|o| match o {
                DataOp::Accumulate { dst, .. } => dst.len(),
                _ => 0,
            })
            .sum();
        let others = sched.ops.len()
            - sched
                .ops
                .iter()
                .filter(|o| matches!(o, DataOp::Accumulate { .. }))
                .count();
        let floor =
            run.dispatches() as f64 * fixed + elems as f64 * per_elem + others as f64 * copy;
        let iters = if p > 64 { 1 } else { 20 };
        run.run(1).expect("warm up");
        let measured = run.run(iters).expect("run").as_secs_f64() / iters as f64;
        println!(
            "{:<10} {:>5} {:>7} {:>11} {:>12} {:>13} {:>15.3} {:>12.3}",
            name,
            p,
            "8x128",
            run.dispatches(),
            elems,
            others,
            floor * 1e3,
            measured * 1e3
        );
    }
}
