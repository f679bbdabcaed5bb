//! A schedule lowered for the GPU, as plain data: the buffers it needs, the commands of
//! one iteration naming those buffers by id, the parameter blocks its dispatches read,
//! and where every (device, allocation) lives. No wgpu types: the lowerings build it,
//! one engine (`engine.rs`) turns it into GPU work.

use crate::array::DType;
use crate::ir::ReduceOp;

/// A buffer of a recording: an index into [`Recording::buffers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BufId(pub usize);

/// What a buffer holds before the first iteration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Init {
    /// Zeros (simulated memory starts zeroed, as on the CPU executor).
    Zeros,
    /// These bytes (an op table).
    Data(Vec<u8>),
    /// Anything (scratch space, placeholders): every iteration writes before it reads.
    Any,
}

/// A storage buffer to allocate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BufferDesc {
    /// Its name in wgpu's messages: `device 3 recv_scratch`, `arena`, `op table`.
    pub label: String,
    /// Bytes (the engine allocates at least 4).
    pub size: u64,
    /// Its contents before the first iteration.
    pub init: Init,
}

/// A byte range of a buffer bound to one storage binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    /// The buffer.
    pub buf: BufId,
    /// First byte (aligned to the storage offset alignment).
    pub offset: u64,
    /// Bytes.
    pub size: u64,
}

/// What a `halves.wgsl` dispatch does to its 16-bit destination elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HalfOp {
    /// Copies the source.
    Copy,
    /// Writes the parameter block's value.
    Fill,
    /// Combines with the source in this 16-bit float dtype.
    Accumulate(ReduceOp, DType),
}

/// Which compute pipeline a dispatch runs (the engine builds each once).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PipelineKey {
    /// `fill.wgsl`: binds a destination.
    Fill,
    /// `accumulate.wgsl`, or `accumulate_vec4.wgsl` when `vec4`: binds source, destination.
    Accumulate {
        /// The reduction.
        op: ReduceOp,
        /// The 32-bit dtype.
        dtype: DType,
        /// On vec4 words.
        vec4: bool,
    },
    /// `accumulate_batch.wgsl`: binds four sources, then four destinations.
    AccumulateBatch {
        /// The reduction.
        op: ReduceOp,
        /// The 32-bit dtype.
        dtype: DType,
    },
    /// `halves.wgsl`: binds source, destination.
    Halves(HalfOp),
    /// `schedule.wgsl`'s wave: binds the arena, the op table, the chunks.
    Schedule,
}

/// One compute dispatch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dispatch {
    /// The pipeline.
    pub pipeline: PipelineKey,
    /// Its storage bindings, in binding order; the parameter block binds after them.
    pub bindings: Vec<Bound>,
    /// Index into [`Recording::params`].
    pub params: usize,
    /// Workgroups in x, y, z.
    pub workgroups: [u32; 3],
}

/// One command of an iteration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// A buffer-to-buffer copy (distinct buffers, 4-byte aligned).
    Copy {
        /// Source buffer.
        src: BufId,
        /// Source byte offset.
        src_off: u64,
        /// Destination buffer.
        dst: BufId,
        /// Destination byte offset.
        dst_off: u64,
        /// Bytes.
        size: u64,
    },
    /// Zeroes `size` bytes of `dst` from `off`.
    Clear {
        /// The buffer.
        dst: BufId,
        /// First byte.
        off: u64,
        /// Bytes.
        size: u64,
    },
    /// A compute dispatch.
    Dispatch(Dispatch),
}

impl Command {
    /// A copy of `size` bytes from `src` at `src_off` to `dst` at `dst_off`.
    pub fn copy(src: BufId, src_off: u64, dst: BufId, dst_off: u64, size: u64) -> Self {
        Command::Copy {
            src,
            src_off,
            dst,
            dst_off,
            size,
        }
    }
}

/// Where one (device, allocation) lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// Its buffer.
    pub buf: BufId,
    /// Its first byte there.
    pub offset: u64,
    /// Its bytes on the GPU (16-bit elements packed two per word, padded to a word).
    pub size: u64,
}

/// Which lowering made a recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lowering {
    /// A buffer per allocation, commands per op (`lower_ops.rs`).
    PerOp,
    /// One arena, a dispatch per level of compute (`lower_arena.rs`).
    Arena,
}

/// A schedule lowered for the GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recording {
    /// Which lowering made it.
    pub lowering: Lowering,
    /// Every buffer, by [`BufId`].
    pub buffers: Vec<BufferDesc>,
    /// One iteration, in order.
    pub commands: Vec<Command>,
    /// Parameter blocks (u32 words, a multiple of 4), bound as uniforms by dispatches.
    pub params: Vec<Vec<u32>>,
    /// Where each (device, allocation) lives, at its [`crate::ir::Memory::index`].
    pub places: Vec<Place>,
}

impl Recording {
    /// An empty recording made by `lowering`.
    pub fn new(lowering: Lowering) -> Self {
        Self {
            lowering,
            buffers: Vec::new(),
            commands: Vec::new(),
            params: Vec::new(),
            places: Vec::new(),
        }
    }

    /// Adds a buffer; returns its id.
    pub fn buffer(&mut self, label: impl Into<String>, size: u64, init: Init) -> BufId {
        self.buffers.push(BufferDesc {
            label: label.into(),
            size,
            init,
        });
        BufId(self.buffers.len() - 1)
    }

    /// Adds a parameter block; returns its index.
    pub fn param(&mut self, block: Vec<u32>) -> usize {
        self.params.push(block);
        self.params.len() - 1
    }

    /// Compute dispatches per iteration.
    pub fn dispatches(&self) -> usize {
        self.commands
            .iter()
            .filter(|c| matches!(c, Command::Dispatch(_)))
            .count()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use crate::array::DType;
    use crate::ir::{Allocation, Layout, Memory, MemorySpace, Program, Schedule};

    /// The memory of `devices` devices with `allocs` (name, dtype, elements) each.
    pub fn memory(devices: usize, allocs: &[(&str, DType, usize)]) -> Memory {
        let schedule = Schedule {
            ops: vec![],
            policy: String::new(),
            steps: 0,
            staging: 0,
        };
        schedule.memory(&program(devices, allocs))
    }

    /// A program of no ops over `devices` devices with `allocs` each.
    pub fn program(devices: usize, allocs: &[(&str, DType, usize)]) -> Program {
        let allocs = allocs
            .iter()
            .map(|&(name, dtype, n)| Allocation {
                name: name.into(),
                space: MemorySpace::Any,
                dtype,
                shape: vec![n],
            })
            .collect();
        Program {
            name: "test".into(),
            devices,
            layout: Layout {
                allocs,
                sems: vec![],
            },
            ops: vec![vec![]; devices],
            dmas: vec![],
            prologue: vec![],
            epilogue: vec![],
            inputs: vec![],
            outputs: vec![],
            invocations: vec![crate::ir::Invocation::single("test", &[], Some(0), devices)],
        }
    }
}
