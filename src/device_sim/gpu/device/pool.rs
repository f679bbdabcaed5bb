//! A buffer pool: a sweep of sizes (or repeated runs) reuses GPU buffers instead of
//! allocating per run. A request takes the smallest free buffer of its label and usage
//! that is large enough; new buffers are rounded up to a power of two so that growing
//! sizes reuse them. wgpu fixes a label at creation, so a free buffer of another label
//! that would fit is dropped instead of reused: every buffer keeps its true name and the
//! pool holds no more than reuse regardless of labels would.

use std::sync::{Arc, Mutex};

/// A buffer and the label it was made with.
pub struct Pooled {
    /// Its label.
    pub label: String,
    /// The buffer.
    pub buffer: wgpu::Buffer,
}

/// Shared free list of buffers, by label and usage.
#[derive(Clone, Default)]
pub struct BufferPool {
    free: Arc<Mutex<Vec<Pooled>>>,
}

impl BufferPool {
    /// A buffer labelled `label` of at least `size` bytes (at most `max` when rounding
    /// up) with exactly `usage`.
    pub fn take(
        &self,
        device: &wgpu::Device,
        label: &str,
        size: u64,
        usage: wgpu::BufferUsages,
        max: u64,
    ) -> Pooled {
        let size = size.max(4).next_multiple_of(4);
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let fits = |b: &Pooled| b.buffer.usage() == usage && b.buffer.size() >= size;
        let best = |named: bool, free: &[Pooled]| {
            free.iter()
                .enumerate()
                .filter(|(_, b)| fits(b) && (!named || b.label == label))
                .min_by_key(|(_, b)| b.buffer.size())
                .map(|(i, _)| i)
        };
        if let Some(i) = best(true, &free) {
            return free.swap_remove(i);
        }
        if let Some(i) = best(false, &free) {
            // Freed now rather than when wgpu next cleans up, so memory does not peak.
            free.swap_remove(i).buffer.destroy();
        }
        drop(free);
        let rounded = size.next_power_of_two().min(max).max(size);
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: rounded,
            usage,
            mapped_at_creation: false,
        });
        Pooled {
            label: label.to_owned(),
            buffer,
        }
    }

    /// Returns buffers for reuse.
    pub fn give_back(&self, bufs: impl IntoIterator<Item = Pooled>) {
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
            .map(|b| b.buffer.size())
            .sum()
    }

    /// Frees every pooled buffer.
    pub fn clear(&self) {
        self.free.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::super::GpuContext;
    use super::*;

    #[test]
    fn buffers_are_reused_under_their_own_label_only() {
        let ctx = GpuContext::new().expect("a GPU adapter");
        let (dev, usage) = (&ctx.device, wgpu::BufferUsages::STORAGE);
        let pool = BufferPool::default();
        let a = pool.take(dev, "device 0 x", 100, usage, u64::MAX);
        assert_eq!(a.buffer.size(), 128);
        pool.give_back([a]);
        let b = pool.take(dev, "device 0 x", 64, usage, u64::MAX);
        assert_eq!((b.label.as_str(), b.buffer.size()), ("device 0 x", 128));
        pool.give_back([b]);
        // Another name: a new buffer, and the one it would have reused is let go.
        let c = pool.take(dev, "device 1 y", 64, usage, u64::MAX);
        assert_eq!((c.label.as_str(), c.buffer.size()), ("device 1 y", 64));
        assert_eq!(pool.free_bytes(), 0);
    }
}
