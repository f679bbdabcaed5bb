//! Adapter and device setup, kept apart from the executor so tests can share one device.

use super::select;
use crate::error::{Error, Result};
use std::fmt::Write;

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
}

impl GpuContext {
    /// Opens the adapter chosen by `WGPU_BACKEND` / `WGPU_ADAPTER_NAME`, or the default one.
    pub fn new() -> Result<Self> {
        let adapter = select::choose(&select::instance()?)?;
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("tpusim"),
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| Error::NoAdapter(format!("could not open the adapter: {e}")))?;
        Ok(Self {
            adapter,
            device,
            queue,
            limits,
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
}

/// A report of every adapter wgpu sees and the chosen adapter's limits (`tpusim info`).
pub fn adapters_report() -> Result<String> {
    let instance = select::instance()?;
    let all = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
    let mut s = String::new();
    writeln!(s, "adapters wgpu sees ({}):", all.len()).ok();
    for a in &all {
        let i = a.get_info();
        writeln!(
            s,
            "  {} ({:?}, {:?}, driver {} {})",
            i.name, i.backend, i.device_type, i.driver, i.driver_info
        )
        .ok();
    }
    let ctx = GpuContext::new()?;
    let l = &ctx.limits;
    writeln!(s, "chosen: {}", ctx.describe()).ok();
    writeln!(s, "  max_buffer_size: {}", l.max_buffer_size).ok();
    writeln!(
        s,
        "  max_storage_buffer_binding_size: {}",
        l.max_storage_buffer_binding_size
    )
    .ok();
    writeln!(
        s,
        "  min_storage_buffer_offset_alignment: {}",
        l.min_storage_buffer_offset_alignment
    )
    .ok();
    writeln!(
        s,
        "  max_compute_workgroups_per_dimension: {}",
        l.max_compute_workgroups_per_dimension
    )
    .ok();
    writeln!(
        s,
        "  max_compute_invocations_per_workgroup: {}",
        l.max_compute_invocations_per_workgroup
    )
    .ok();
    Ok(s)
}
