//! The adapter's own plain buffer-copy bandwidth: the yardstick for collective throughput.

use super::executor::GpuExecutor;
use crate::error::{Error, GpuError, GpuErrorKind, Result};
use std::time::Instant;

impl GpuExecutor {
    /// Bytes per second of `copy_buffer_to_buffer` between two buffers of `bytes` bytes
    /// (taken from the pool), timed over `iters` copies in one submission after one
    /// warm-up copy.
    pub fn copy_bandwidth(&self, bytes: u64, iters: u32) -> Result<f64> {
        let ctx = self.context();
        let bytes = bytes.max(4).next_multiple_of(4);
        let max = ctx.limits.max_buffer_size;
        if bytes > max {
            return Err(Error::Limit {
                what: "copy bandwidth probe buffer".into(),
                requested: bytes,
                limit: max,
            });
        }
        let usage = wgpu::BufferUsages::COPY_SRC
            | wgpu::BufferUsages::COPY_DST
            | wgpu::BufferUsages::STORAGE;
        let a = self.pool().take(&ctx.device, bytes, usage, max);
        let b = self.pool().take(&ctx.device, bytes, usage, max);
        let run = |n: u32| -> Result<()> {
            let mut enc = ctx.device.create_command_encoder(&Default::default());
            for _ in 0..n {
                enc.copy_buffer_to_buffer(&a, 0, &b, 0, bytes);
            }
            ctx.queue.submit([enc.finish()]);
            ctx.device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(|e| {
                    Error::from(GpuError::new(
                        GpuErrorKind::Lost,
                        format!("waiting for the GPU: {e}"),
                    ))
                })?;
            Ok(())
        };
        let result = run(1).and_then(|_| {
            let t = Instant::now();
            run(iters.max(1))?;
            Ok(bytes as f64 * iters.max(1) as f64 / t.elapsed().as_secs_f64())
        });
        self.pool().give_back([a, b]);
        result
    }
}
