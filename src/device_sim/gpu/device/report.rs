//! `tpusim info`: the adapters wgpu sees and the chosen one's limits.

use super::super::select;
use super::GpuContext;
use crate::error::Result;
use std::fmt::Write;

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
