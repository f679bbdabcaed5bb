//! The plumbing every GPU path shares: the opened device and what it allows
//! ([`GpuContext`]), error scopes that pop into a typed [`GpuError`], the labelled
//! buffer pool, and moving bytes (zeroing, reading back).

mod errors;
mod pool;
mod report;
mod transfer;

pub use errors::ErrorScope;
pub use pool::{BufferPool, Pooled};
pub use report::adapters_report;
pub use transfer::{read_back, zero};

use super::limits::Limits;
use super::select;
use crate::error::{Error, GpuError, GpuErrorKind, Result};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An opened wgpu device and what it allows.
pub struct GpuContext {
    /// The adapter used.
    pub adapter: wgpu::Adapter,
    /// The logical device.
    pub device: wgpu::Device,
    /// Its queue.
    pub queue: wgpu::Queue,
    /// The limits the device was opened with (the adapter's own).
    pub limits: wgpu::Limits,
    /// Why the device was lost, once wgpu says it was.
    lost: Arc<Mutex<Option<String>>>,
}

impl GpuContext {
    /// Opens the adapter chosen by `WGPU_BACKEND` / `WGPU_ADAPTER_NAME`, or the default one.
    pub fn new() -> Result<Self> {
        Self::for_local_rank(None)
    }

    /// Opens the adapter of the `local_rank`-th rank on this host (see
    /// [`select::choose_for`]; `None`: as [`GpuContext::new`]).
    pub fn for_local_rank(local_rank: Option<usize>) -> Result<Self> {
        let adapter = select::choose_for(&select::instance()?, local_rank)?;
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("tpusim"),
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| Error::NoAdapter(format!("could not open the adapter: {e}")))?;
        let lost = Arc::new(Mutex::new(None));
        let flag = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            *flag.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(format!("{reason:?}: {message}"));
        });
        Ok(Self {
            adapter,
            device,
            queue,
            limits,
            lost,
        })
    }

    /// `name (backend, device type)` of the adapter.
    pub fn describe(&self) -> String {
        select::label(&self.adapter)
    }

    /// True when the adapter's memory is host memory (a CPU driver such as lavapipe).
    pub fn memory_is_host(&self) -> bool {
        self.adapter.get_info().device_type == wgpu::DeviceType::Cpu
    }

    /// The limits the lowerings obey.
    pub fn lowering_limits(&self) -> Limits {
        Limits::from(&self.limits)
    }

    /// Fails when the device was lost, saying while doing `what`.
    pub fn check_lost(&self, what: &str) -> std::result::Result<(), GpuError> {
        match &*self.lost.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(why) => Err(GpuError::new(GpuErrorKind::Lost, format!("{what}: {why}"))),
            None => Ok(()),
        }
    }

    /// Waits until the queue is idle; a failed wait means the device is gone.
    pub fn wait(&self, what: &str) -> std::result::Result<(), GpuError> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| GpuError::new(GpuErrorKind::Lost, format!("{what}: {e}")))?;
        self.check_lost(what)
    }

    /// Encodes with `encode` into one submission and waits for it, under an error scope;
    /// returns the wall time from encoding to completion.
    pub fn submit(
        &self,
        what: &str,
        encode: impl FnOnce(&mut wgpu::CommandEncoder),
    ) -> std::result::Result<Duration, GpuError> {
        let scope = ErrorScope::open(&self.device);
        let t = Instant::now();
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(what) });
        encode(&mut enc);
        self.queue.submit([enc.finish()]);
        let waited = self.wait(what);
        let elapsed = t.elapsed();
        scope.close(self, what)?;
        waited.map(|_| elapsed)
    }
}
