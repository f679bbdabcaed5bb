//! The adapter's own plain buffer-copy bandwidth: the yardstick for collective throughput.

use super::device::{BufferPool, GpuContext};
use crate::error::{Error, Result};

/// Bytes per second of `copy_buffer_to_buffer` between two buffers of `bytes` bytes
/// (taken from `pool`), timed over `iters` copies in one submission after one warm-up.
pub fn copy_bandwidth(ctx: &GpuContext, pool: &BufferPool, bytes: u64, iters: u32) -> Result<f64> {
    let bytes = bytes.max(4).next_multiple_of(4);
    let max = ctx.limits.max_buffer_size;
    if bytes > max {
        return Err(Error::Limit {
            what: "copy bandwidth probe buffer".into(),
            requested: bytes,
            limit: max,
        });
    }
    let usage =
        wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::STORAGE;
    let a = pool.take(&ctx.device, "bandwidth probe source", bytes, usage, max);
    let b = pool.take(
        &ctx.device,
        "bandwidth probe destination",
        bytes,
        usage,
        max,
    );
    let run = |n: u32| {
        ctx.submit("timing plain copies", |enc| {
            for _ in 0..n {
                enc.copy_buffer_to_buffer(&a.buffer, 0, &b.buffer, 0, bytes);
            }
        })
    };
    let iters = iters.max(1);
    let result = run(1).and_then(|_| run(iters));
    pool.give_back([a, b]);
    Ok(bytes as f64 * iters as f64 / result?.as_secs_f64())
}
