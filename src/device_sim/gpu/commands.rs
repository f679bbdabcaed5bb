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
    /// A fused region's generated shader ([`super::region_shader`]): binds `bindings`
    /// read-write buffers.
    Region {
        /// The kernel's index ([`super::region_shader::intern`]).
        id: u32,
        /// Its storage bindings.
        bindings: u8,
    },
    /// `compute_elementwise.wgsl`: binds three sources and a destination, every one
    /// read-write (a source may share the destination's buffer).
    Elementwise {
        /// The op's code (`codes::EW_*`).
        op: u32,
        /// The sources' dtypes (F32 for unused slots).
        srcs: [DType; 3],
        /// The destination's dtype.
        dst: DType,
    },
    /// `compute_layout.wgsl`: binds a source and a destination (read-write).
    Layout {
        /// Writes indices (iota) rather than copying source elements.
        iota: bool,
        /// The elements' dtype.
        dtype: DType,
        /// A 16-bit destination written as runs (`codes::PACK_RUNS`), else densely.
        runs: bool,
    },
    /// `compute_reduce.wgsl`: binds a source and a destination (read-write).
    Reduce {
        /// An arg reduction (argmax/argmin) rather than values.
        arg: bool,
        /// `codes::REDUCE_SUM`, `REDUCE_MAX` or `REDUCE_MIN`.
        op: u32,
        /// The source's dtype.
        src: DType,
        /// A workgroup per output (`per_group`) rather than an invocation (`per_thread`).
        per_group: bool,
    },
    /// `compute_matmul.wgsl`: binds the two operands and the product (read-write).
    Matmul {
        /// The operands' dtype.
        input: DType,
    },
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

    /// One recording of `parts` (lowerings of consecutive pieces of one schedule over
    /// one memory, whose first `shared` buffers are that memory's and the same in every
    /// part), and the range of its commands each part became. Scratch buffers and
    /// placeholders ([`Init::Any`]) of one label are one buffer, as large as the largest.
    pub fn join(parts: Vec<Recording>, shared: usize) -> (Recording, Vec<std::ops::Range<usize>>) {
        let mut parts = parts.into_iter();
        let mut joined = parts
            .next()
            .unwrap_or_else(|| Recording::new(Lowering::PerOp));
        let mut ranges = Vec::with_capacity(parts.len() + 1);
        ranges.push(0..joined.commands.len());
        for part in parts {
            debug_assert_eq!(part.buffers[..shared], joined.buffers[..shared]);
            let ids: Vec<BufId> = part
                .buffers
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    if i < shared {
                        return BufId(i);
                    }
                    let same = joined.buffers[shared..].iter().position(|j| {
                        j.init == Init::Any && b.init == Init::Any && j.label == b.label
                    });
                    match same {
                        Some(k) => {
                            let j = &mut joined.buffers[shared + k];
                            j.size = j.size.max(b.size);
                            BufId(shared + k)
                        }
                        None => joined.buffer(b.label.clone(), b.size, b.init.clone()),
                    }
                })
                .collect();
            let params = joined.params.len();
            joined.params.extend(part.params);
            let start = joined.commands.len();
            joined
                .commands
                .extend(part.commands.into_iter().map(|c| match c {
                    Command::Copy {
                        src,
                        src_off,
                        dst,
                        dst_off,
                        size,
                    } => Command::copy(ids[src.0], src_off, ids[dst.0], dst_off, size),
                    Command::Clear { dst, off, size } => Command::Clear {
                        dst: ids[dst.0],
                        off,
                        size,
                    },
                    Command::Dispatch(mut d) => {
                        for b in &mut d.bindings {
                            b.buf = ids[b.buf.0];
                        }
                        d.params += params;
                        Command::Dispatch(d)
                    }
                }));
            ranges.push(start..joined.commands.len());
        }
        (joined, ranges)
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
                ..Layout::default()
            },
            ops: vec![vec![]; devices],
            dmas: vec![],
            prologue: vec![],
            epilogue: vec![],
            inputs: vec![],
            outputs: vec![],
            invocations: vec![crate::ir::Invocation::single("test", &[], Some(0), devices)],
            cores: 1,
        }
    }
}
