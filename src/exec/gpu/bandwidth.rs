//! The adapter's own plain buffer-copy bandwidth: the yardstick for collective throughput.

use super::context::GpuContext;
use crate::error::{Error, Result};
use std::time::Instant;

/// Bytes per second of `copy_buffer_to_buffer` between two buffers of `bytes` bytes,
/// timed over `iters` copies after one warm-up copy (every page touched first).
pub fn copy_bandwidth(ctx: &GpuContext, bytes: u64, iters: u32) -> Result<f64> {
    let bytes = bytes.max(4).next_multiple_of(4);
    if bytes > ctx.limits.max_buffer_size {
        return Err(Error::Limit {
            what: "copy bandwidth probe buffer".into(),
            requested: bytes,
            limit: ctx.limits.max_buffer_size,
        });
    }
    let make = || {
        ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("bandwidth"),
            size: bytes,
            usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    };
    let (a, b) = (make(), make());
    let run = |n: u32| -> Result<()> {
        let mut enc = ctx.device.create_command_encoder(&Default::default());
        for _ in 0..n {
            enc.copy_buffer_to_buffer(&a, 0, &b, 0, bytes);
        }
        ctx.queue.submit([enc.finish()]);
        ctx.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Gpu(format!("waiting for the GPU: {e}")))?;
        Ok(())
    };
    run(1)?;
    let t = Instant::now();
    run(iters.max(1))?;
    Ok(bytes as f64 * iters.max(1) as f64 / t.elapsed().as_secs_f64())
}
