//! Moving bytes between the host and GPU buffers: zeroing memory before a first run,
//! and reading regions back (copied into mapped staging buffers, then out).

use super::{BufferPool, GpuContext, Pooled};
use crate::error::{GpuError, GpuErrorKind, Result};

/// Staging buffers are filled up to this many bytes (or one region, if larger); at
/// 64 MiB lavapipe peaked 130 MB higher than at 32 reading P = 8 psum at 16 MiB back.
const STAGING_BYTES: u64 = 32 << 20;

const READBACK: wgpu::BufferUsages =
    wgpu::BufferUsages::MAP_READ.union(wgpu::BufferUsages::COPY_DST);

/// Zeroes the first `bytes` of each buffer, in one submission (not waited for).
pub fn zero(ctx: &GpuContext, bufs: &[(&wgpu::Buffer, u64)]) {
    let mut enc = ctx
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("zero memory"),
        });
    for &(b, bytes) in bufs {
        let bytes = bytes.next_multiple_of(4);
        if bytes > 0 {
            enc.clear_buffer(b, 0, Some(bytes));
        }
    }
    ctx.queue.submit([enc.finish()]);
}

/// Reads each region `(buffer, byte offset, bytes)` (multiples of 4) back and hands
/// region `k`'s bytes to `each(k, bytes)`, in order.
pub fn read_back(
    ctx: &GpuContext,
    pool: &BufferPool,
    regions: &[(&wgpu::Buffer, u64, u64)],
    each: &mut dyn FnMut(usize, &[u8]),
) -> Result<()> {
    // Pack regions into staging buffers: (staging index, offset) per region.
    let mut at = Vec::with_capacity(regions.len());
    let mut sizes: Vec<u64> = Vec::new();
    for &(_, _, size) in regions {
        let n = sizes.len();
        match sizes.last_mut() {
            Some(s) if *s + size <= STAGING_BYTES => {
                at.push((n - 1, *s));
                *s += size;
            }
            _ => {
                at.push((n, 0));
                sizes.push(size);
            }
        }
    }
    let max = ctx.limits.max_buffer_size;
    let staging: Vec<_> = sizes
        .iter()
        .map(|&s| pool.take(&ctx.device, "readback", s, READBACK, max))
        .collect();
    let result = read_through(ctx, regions, &at, &staging, each);
    pool.give_back(staging);
    result
}

fn read_through(
    ctx: &GpuContext,
    regions: &[(&wgpu::Buffer, u64, u64)],
    at: &[(usize, u64)],
    staging: &[Pooled],
    each: &mut dyn FnMut(usize, &[u8]),
) -> Result<()> {
    let what = "reading the outputs back";
    ctx.submit(what, |enc| {
        for (&(src, off, size), &(s, to)) in regions.iter().zip(at) {
            if size > 0 {
                enc.copy_buffer_to_buffer(src, off, &staging[s].buffer, to, size);
            }
        }
    })?;
    let failed = |m: String| GpuError::new(GpuErrorKind::Readback, format!("{what}: {m}"));
    let mapped: Vec<_> = staging
        .iter()
        .map(|s| {
            let (tx, rx) = futures::channel::oneshot::channel();
            s.buffer.map_async(wgpu::MapMode::Read, .., move |r| {
                let _ = tx.send(r);
            });
            rx
        })
        .collect();
    ctx.wait(what)?;
    let mut result = Ok(());
    for rx in mapped {
        match pollster::block_on(rx) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => result = Err(failed(format!("mapping a staging buffer: {e}"))),
            Err(_) => result = Err(failed("the mapping was cancelled".into())),
        }
    }
    if result.is_ok() {
        result = copy_out(staging, regions, at, each).map_err(failed);
    }
    for s in staging {
        s.buffer.unmap();
    }
    Ok(result?)
}

fn copy_out(
    staging: &[Pooled],
    regions: &[(&wgpu::Buffer, u64, u64)],
    at: &[(usize, u64)],
    each: &mut dyn FnMut(usize, &[u8]),
) -> std::result::Result<(), String> {
    let views = staging
        .iter()
        .map(|s| s.buffer.get_mapped_range(..).map_err(|e| e.to_string()))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    for (k, (&(_, _, size), &(s, to))) in regions.iter().zip(at).enumerate() {
        each(k, &views[s][to as usize..(to + size) as usize]);
    }
    Ok(())
}
