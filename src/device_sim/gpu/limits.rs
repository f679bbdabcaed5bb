//! The adapter limits a lowering obeys, captured once as plain numbers (so lowerings
//! are tested with fake ones).

/// What one buffer, binding and dispatch may be on the adapter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of one buffer (`max_buffer_size`).
    pub max_buffer: u64,
    /// Bytes of one storage binding (`max_storage_buffer_binding_size`).
    pub max_binding: u64,
    /// Alignment of a storage binding's offset (`min_storage_buffer_offset_alignment`).
    pub offset_align: u64,
    /// Workgroups per dispatch dimension (`max_compute_workgroups_per_dimension`).
    pub max_workgroups: u32,
    /// Storage buffers one shader stage binds (`max_storage_buffers_per_shader_stage`).
    pub storage_per_stage: u32,
}

impl From<&wgpu::Limits> for Limits {
    fn from(l: &wgpu::Limits) -> Self {
        Self {
            max_buffer: l.max_buffer_size,
            max_binding: l.max_storage_buffer_binding_size,
            offset_align: l.min_storage_buffer_offset_alignment as u64,
            max_workgroups: l.max_compute_workgroups_per_dimension,
            storage_per_stage: l.max_storage_buffers_per_shader_stage,
        }
    }
}
