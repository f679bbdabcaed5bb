//! Error scopes: what wgpu reports while tpusim records or runs, as a typed [`GpuError`].

use super::GpuContext;
use crate::error::{GpuError, GpuErrorKind};

/// Validation and out-of-memory scopes pushed together, popped together.
pub struct ErrorScope {
    // Dropped (popped) in declaration order: the inner scope first.
    validation: wgpu::ErrorScopeGuard,
    oom: wgpu::ErrorScopeGuard,
}

impl ErrorScope {
    /// Pushes the scopes on `device` (on this thread).
    pub fn open(device: &wgpu::Device) -> Self {
        let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
        Self { validation, oom }
    }

    /// Pops the scopes: the first error they caught while doing `what`, a lost device first.
    pub fn close(self, ctx: &GpuContext, what: &str) -> Result<(), GpuError> {
        let validation = pollster::block_on(self.validation.pop());
        let oom = pollster::block_on(self.oom.pop());
        ctx.check_lost(what)?;
        let error = |kind, e: wgpu::Error| Err(GpuError::new(kind, format!("{what}: {e}")));
        if let Some(e) = oom {
            return error(GpuErrorKind::OutOfMemory, e);
        }
        if let Some(e) = validation {
            return error(GpuErrorKind::Validation, e);
        }
        Ok(())
    }
}
