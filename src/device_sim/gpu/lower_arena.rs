//! The arena lowering: every device's allocations packed into one arena of u32 words,
//! the schedule's data ops grouped into levels of independent ops ([`super::levels`]),
//! and each level as commands: copies as buffer copies (through a scratch buffer, since
//! a copy may not stay inside one buffer), zero fills as clears, and every other op of
//! the level (accumulates, fills) in ONE dispatch of `shaders/schedule.wgsl` over an op
//! table, whatever P is. Measured on lavapipe, shader copies cost far more than buffer
//! copies and a dispatch about 0.1 ms, so this keeps dispatches to one per level.

use super::codes::{dtype_code, reduce_code, ACC_DTYPE_SHIFT, OP_ACCUMULATE, OP_COPY, OP_FILL};
use super::commands::{Bound, Command, Dispatch, Init, Lowering, PipelineKey, Place, Recording};
use super::levels::{levels, Access};
use super::limits::Limits;
use crate::ir::{DataOp, Memory, View};

/// Elements in one wave chunk (one workgroup's share of one op).
pub const CHUNK: u32 = 4096;

/// One op of the table, as `struct Op` in `schedule.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
struct OpRec {
    /// [`OP_COPY`], [`OP_FILL`] or [`OP_ACCUMULATE`].
    kind: u32,
    /// Destination word offset in the arena.
    dst: u32,
    /// Source word offset (copy, accumulate).
    src: u32,
    /// Elements.
    len: u32,
    /// Fill bits, or `op | dtype << ACC_DTYPE_SHIFT` for an accumulate.
    bits: u32,
    pad: [u32; 3],
}

impl OpRec {
    fn new(kind: u32, dst: u32, src: u32, len: usize, bits: u32) -> Self {
        Self {
            kind,
            dst,
            src,
            len: len as u32,
            bits,
            pad: [0; 3],
        }
    }

    fn access(&self) -> Access {
        Access {
            read: (self.kind != OP_FILL).then_some((self.src, self.src + self.len)),
            write: (self.dst, self.dst + self.len),
        }
    }
}

/// Lowers `ops` over `memory` as one arena, or says why it cannot be: 16-bit elements,
/// an arena or table past one binding, an op whose source and destination overlap.
pub fn lower(memory: &Memory, ops: &[DataOp], limits: &Limits) -> Result<Recording, String> {
    if memory.allocs.iter().any(|a| a.dtype.storage() != 4) {
        return Err("16-bit elements run per op (packed two per word)".into());
    }
    let max_binding = limits.max_binding.min(limits.max_buffer);
    let (offsets, words) = layout(memory, max_binding)?;
    let recs = records(memory, ops, &offsets)?;

    let mut rec = Recording::new(Lowering::Arena);
    let arena = rec.buffer("arena", words * 4, Init::Zeros);
    let scratch = rec.buffer("copy scratch", 0, Init::Any);
    for (i, (_, a)) in memory.iter().enumerate() {
        rec.places.push(Place {
            buf: arena,
            offset: offsets[i] * 4,
            size: a.numel() as u64 * 4,
        });
    }
    let levels = levels(&recs.iter().map(OpRec::access).collect::<Vec<_>>());
    let mut order: Vec<usize> = (0..recs.len()).collect();
    order.sort_by_key(|&i| levels[i]);
    let mut table: Vec<OpRec> = Vec::new();
    let mut chunks: Vec<[u32; 4]> = Vec::new();
    for level in order.chunk_by(|&a, &b| levels[a] == levels[b]) {
        let first = chunks.len() as u32;
        for o in level.iter().map(|&i| recs[i]) {
            let bytes = o.len as u64 * 4;
            let (src, dst) = (o.src as u64 * 4, o.dst as u64 * 4);
            match o.kind {
                OP_COPY => {
                    let desc = &mut rec.buffers[scratch.0];
                    desc.size = desc.size.max(bytes);
                    rec.commands
                        .push(Command::copy(arena, src, scratch, 0, bytes));
                    rec.commands
                        .push(Command::copy(scratch, 0, arena, dst, bytes));
                }
                OP_FILL if o.bits == 0 => rec.commands.push(Command::Clear {
                    dst: arena,
                    off: dst,
                    size: bytes,
                }),
                _ => {
                    let k = table.len() as u32;
                    table.push(o);
                    for e in (0..o.len).step_by(CHUNK as usize) {
                        chunks.push([k, e, CHUNK.min(o.len - e), 0]);
                    }
                }
            }
        }
        let count = chunks.len() as u32 - first;
        if count > 0 {
            let params = rec.param(vec![first, count, 0, 0]);
            let x = count.min(limits.max_workgroups);
            rec.commands.push(Command::Dispatch(Dispatch {
                pipeline: PipelineKey::Schedule,
                // Bound below, once the table's size is known.
                bindings: vec![],
                params,
                workgroups: [x, count.div_ceil(x), 1],
            }));
        }
    }

    let table = rec.buffer("op table", 0, table_data(&table, 32));
    let chunks = rec.buffer("op chunks", 0, table_data(&chunks, 16));
    let mut bindings = vec![Bound {
        buf: arena,
        offset: 0,
        size: words * 4,
    }];
    for b in [table, chunks] {
        let desc = &mut rec.buffers[b.0];
        let Init::Data(data) = &desc.init else {
            unreachable!("tables hold data")
        };
        desc.size = data.len() as u64;
        if desc.size > max_binding {
            return Err("the op table is larger than one binding holds".into());
        }
        bindings.push(Bound {
            buf: b,
            offset: 0,
            size: desc.size,
        });
    }
    for c in &mut rec.commands {
        if let Command::Dispatch(d) = c {
            d.bindings = bindings.clone();
        }
    }
    Ok(rec)
}

/// Every allocation's first word in the arena, and the arena's words, or why it is
/// larger than one binding of at most `max_binding` bytes.
fn layout(memory: &Memory, max_binding: u64) -> Result<(Vec<u64>, u64), String> {
    let max_words = (max_binding / 4).min(u32::MAX as u64);
    let mut offsets = Vec::with_capacity(memory.len());
    let mut words = 0u64;
    for (_, a) in memory.iter() {
        offsets.push(words);
        words += (a.numel() as u64).next_multiple_of(4);
    }
    if words > max_words {
        return Err(format!(
            "the arena needs {} bytes, more than one binding holds ({} bytes)",
            words * 4,
            max_words * 4
        ));
    }
    Ok((offsets, words))
}

/// The op table entries of the non-empty `ops`, at arena word `offsets`.
fn records(memory: &Memory, ops: &[DataOp], offsets: &[u64]) -> Result<Vec<OpRec>, String> {
    let at = |v: &View| (offsets[memory.index(v)] + v.offset() as u64) as u32;
    let mut recs = Vec::with_capacity(ops.len());
    for op in ops {
        let rec = match op.clone() {
            DataOp::Copy { src, dst } => {
                if src.overlaps(&dst) {
                    return Err("a copy whose source and destination overlap".into());
                }
                OpRec::new(OP_COPY, at(&dst), at(&src), dst.len(), 0)
            }
            DataOp::Fill { dst, bits } => OpRec::new(OP_FILL, at(&dst), 0, dst.len(), bits),
            DataOp::Accumulate {
                dst,
                src,
                op,
                dtype,
            } => {
                if src.overlaps(&dst) {
                    return Err("an accumulate whose source and destination overlap".into());
                }
                let bits = reduce_code(op) | dtype_code(dtype) << ACC_DTYPE_SHIFT;
                OpRec::new(OP_ACCUMULATE, at(&dst), at(&src), dst.len(), bits)
            }
            DataOp::Compute(_) => return Err("compute ops run per op".into()),
        };
        if rec.len > 0 {
            recs.push(rec);
        }
    }
    Ok(recs)
}

/// `rows` as bytes, at least `min` of them (an empty table still binds).
fn table_data<T: bytemuck::Pod>(rows: &[T], min: usize) -> Init {
    let mut data = bytemuck::cast_slice(rows).to_vec();
    data.resize(data.len().max(min), 0);
    Init::Data(data)
}

#[cfg(test)]
mod tests {
    use super::super::commands::tests::memory;
    use super::super::commands::BufId;
    use super::*;
    use crate::ir::ReduceOp;
    use crate::DType;

    const LIMITS: Limits = Limits {
        max_buffer: 1 << 30,
        max_binding: 4 << 20,
        offset_align: 256,
        max_workgroups: 65535,
        storage_per_stage: 8,
    };

    #[test]
    fn copies_and_zero_fills_are_commands_and_compute_one_dispatch_per_level() {
        let n = CHUNK as usize + 1;
        let m = memory(2, &[("a", DType::F32, n), ("b", DType::F32, n)]);
        let v = |device, alloc, len| View::new(device, alloc, 0, len);
        let acc = |device| DataOp::Accumulate {
            dst: v(device, 0, n),
            src: v(device, 1, n),
            op: ReduceOp::Sum,
            dtype: DType::F32,
        };
        let ops = [
            DataOp::Fill {
                dst: v(0, 0, n),
                bits: 0,
            },
            DataOp::Copy {
                src: v(1, 0, n),
                dst: v(0, 1, n),
            },
            acc(0),
            acc(1),
        ];
        let rec = lower(&m, &ops, &LIMITS).unwrap();
        let w = (n as u64).next_multiple_of(4) * 4;
        let (arena, scratch) = (BufId(0), BufId(1));
        assert_eq!(rec.places[m.index_of(1, 1)].offset, 3 * w);
        // Level 0: the clear and the copy; level 1: both accumulates (device 0's reads
        // what the copy wrote, device 1's overwrites what it read), in one dispatch.
        let bytes = n as u64 * 4;
        assert_eq!(
            rec.commands[..3],
            [
                Command::Clear {
                    dst: arena,
                    off: 0,
                    size: bytes
                },
                Command::copy(arena, 2 * w, scratch, 0, bytes),
                Command::copy(scratch, 0, arena, w, bytes),
            ]
        );
        let Command::Dispatch(d) = &rec.commands[3] else {
            panic!("{:?}", rec.commands[3])
        };
        assert_eq!(
            (d.workgroups, rec.params[d.params].as_slice()),
            ([4, 1, 1], &[0, 4, 0, 0][..])
        );
        assert_eq!(rec.commands.len(), 4);
        let Init::Data(chunks) = &rec.buffers[3].init else {
            panic!()
        };
        let chunks: &[[u32; 4]] = bytemuck::cast_slice(chunks);
        assert_eq!(chunks[1], [0, CHUNK, 1, 0]);
        assert_eq!(rec.buffers[scratch.0].size, bytes);
        let tiny = Limits {
            max_binding: 64,
            ..LIMITS
        };
        assert!(lower(&m, &ops, &tiny).is_err());
    }
}
