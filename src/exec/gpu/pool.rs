//! A buffer pool: a sweep of sizes (or repeated runs) reuses GPU buffers instead of
//! allocating per run. A request takes the smallest free buffer that is large enough;
//! new buffers are rounded up to a power of two so that growing sizes reuse them.

use std::sync::{Arc, Mutex};

/// Shared free list of buffers, by usage.
#[derive(Clone, Default)]
pub struct BufferPool {
    free: Arc<Mutex<Vec<wgpu::Buffer>>>,
}

impl BufferPool {
    /// A buffer of at least `size` bytes with exactly `usage`.
    pub fn take(
        &self,
        device: &wgpu::Device,
        size: u64,
        usage: wgpu::BufferUsages,
        max: u64,
    ) -> wgpu::Buffer {
        let size = size.max(4).next_multiple_of(4);
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let best = free
            .iter()
            .enumerate()
            .filter(|(_, b)| b.usage() == usage && b.size() >= size)
            .min_by_key(|(_, b)| b.size())
            .map(|(i, _)| i);
        if let Some(i) = best {
            return free.swap_remove(i);
        }
        drop(free);
        let rounded = size.next_power_of_two().min(max).max(size);
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tpusim pool"),
            size: rounded,
            usage,
            mapped_at_creation: false,
        })
    }

    /// Returns buffers for reuse.
    pub fn give_back(&self, bufs: impl IntoIterator<Item = wgpu::Buffer>) {
        self.free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(bufs);
    }

    /// Bytes held by free buffers.
    pub fn free_bytes(&self) -> u64 {
        self.free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|b| b.size())
            .sum()
    }

    /// Frees every pooled buffer.
    pub fn clear(&self) {
        self.free.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}
