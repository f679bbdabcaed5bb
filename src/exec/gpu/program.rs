//! The schedule as a GPU program, planned on the host (no wgpu types): every device's
//! allocations packed into one arena of u32 words, the schedule's data ops grouped into
//! levels of independent ops, and each level turned into commands: copies as buffer
//! copies (through a scratch buffer, since a copy may not stay inside one buffer),
//! zero fills as buffer clears, and every other op of the level (accumulates, fills)
//! in ONE dispatch of `shaders/schedule.wgsl` over an op table, whatever P is.
//! Measured on lavapipe, shader copies cost far more than buffer copies and a dispatch
//! about 0.1 ms, so this keeps dispatches to one per level of compute.

use super::codes::{dtype_code, reduce_code, ACC_DTYPE_SHIFT, OP_ACCUMULATE, OP_COPY, OP_FILL};
use crate::ir::{Allocation, DataOp, View};
use std::collections::BTreeMap;

/// Elements in one wave chunk (one workgroup's share of one op).
pub const CHUNK: u32 = 4096;

/// One op of the table, as `struct Op` in `schedule.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct OpRec {
    /// [`OP_COPY`], [`OP_FILL`] or [`OP_ACCUMULATE`].
    pub kind: u32,
    /// Destination word offset in the arena.
    pub dst: u32,
    /// Source word offset (copy, accumulate).
    pub src: u32,
    /// Elements.
    pub len: u32,
    /// Fill bits, or `op | dtype << ACC_DTYPE_SHIFT` for an accumulate.
    pub bits: u32,
    pad: [u32; 3],
}

/// One command of the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segment {
    /// Copy `words` words from arena word `src` to arena word `dst`.
    Copy {
        /// Source word.
        src: u64,
        /// Destination word.
        dst: u64,
        /// Words.
        words: u64,
    },
    /// Zero `words` words from arena word `at`.
    Clear {
        /// First word.
        at: u64,
        /// Words.
        words: u64,
    },
    /// Every workgroup runs one chunk `[op, first element, elements, 0]` of `count` from `first`.
    Wave {
        /// First chunk.
        first: u32,
        /// Chunks (= workgroups).
        count: u32,
    },
}

/// A schedule planned as a GPU program.
#[derive(Clone, Debug)]
pub struct GpuProgram {
    /// Words of the arena.
    pub words: u64,
    /// Word offset of allocation `a` of device `d`, at `d * allocs + a`.
    pub offsets: Vec<u64>,
    /// Allocations per device.
    pub allocs: usize,
    /// The op table (the ops that run in the shader).
    pub ops: Vec<OpRec>,
    /// Chunks of the op table, as `items` in the shader.
    pub items: Vec<[u32; 4]>,
    /// Commands in order.
    pub segments: Vec<Segment>,
    /// Words of the largest copy (the scratch buffer copies go through).
    pub scratch_words: u64,
}

impl GpuProgram {
    /// Plans `ops` over `devices` devices with `allocs` each, or says why it cannot:
    /// an arena past `max_words`, or an op whose source and destination overlap.
    pub fn plan(
        devices: usize,
        allocs: &[Allocation],
        ops: &[DataOp],
        max_words: u64,
    ) -> Result<Self, String> {
        if allocs.iter().any(|a| a.dtype.size() != 4) {
            return Err("16-bit elements run per op (packed two per word)".into());
        }
        let mut offsets = Vec::with_capacity(devices * allocs.len());
        let mut words = 0u64;
        for _ in 0..devices {
            for a in allocs {
                offsets.push(words);
                words += (a.numel() as u64).next_multiple_of(4);
            }
        }
        if words > max_words || words > u32::MAX as u64 {
            return Err(format!(
                "the arena needs {} bytes, more than one binding holds ({} bytes)",
                words * 4,
                max_words.min(u32::MAX as u64) * 4
            ));
        }
        let at =
            |v: &View| (offsets[v.device() * allocs.len() + v.alloc()] + v.offset() as u64) as u32;
        let mut recs = Vec::with_capacity(ops.len());
        for op in ops {
            let rec = match *op {
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
            };
            if rec.len > 0 {
                recs.push(rec);
            }
        }
        let levels = levels(&recs);
        let mut order: Vec<usize> = (0..recs.len()).collect();
        order.sort_by_key(|&i| levels[i]);
        let mut table = Vec::new();
        let mut items = Vec::new();
        let mut segments = Vec::new();
        let mut scratch_words = 0;
        let mut i = 0;
        while i < order.len() {
            let lvl = levels[order[i]];
            let first = items.len() as u32;
            while i < order.len() && levels[order[i]] == lvl {
                let o = recs[order[i]];
                match o.kind {
                    OP_COPY => {
                        scratch_words = scratch_words.max(o.len as u64);
                        segments.push(Segment::Copy {
                            src: o.src as u64,
                            dst: o.dst as u64,
                            words: o.len as u64,
                        });
                    }
                    OP_FILL if o.bits == 0 => segments.push(Segment::Clear {
                        at: o.dst as u64,
                        words: o.len as u64,
                    }),
                    _ => {
                        let k = table.len() as u32;
                        table.push(o);
                        let mut e = 0;
                        while e < o.len {
                            let n = CHUNK.min(o.len - e);
                            items.push([k, e, n, 0]);
                            e += n;
                        }
                    }
                }
                i += 1;
            }
            if items.len() as u32 > first {
                segments.push(Segment::Wave {
                    first,
                    count: items.len() as u32 - first,
                });
            }
        }
        Ok(Self {
            words,
            offsets,
            allocs: allocs.len(),
            ops: table,
            items,
            segments,
            scratch_words,
        })
    }

    /// Word offset of allocation `alloc` of device `device`.
    pub fn offset(&self, device: usize, alloc: usize) -> u64 {
        self.offsets[device * self.allocs + alloc]
    }
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

    /// The arena words it reads (besides its destination) and writes.
    fn ranges(&self) -> (Option<(u32, u32)>, (u32, u32)) {
        let w = (self.dst, self.dst + self.len);
        let r = (self.kind != OP_FILL).then_some((self.src, self.src + self.len));
        (r, w)
    }
}

/// What happened last to a run of words: the level that last wrote it and the highest
/// level that read it since.
#[derive(Clone, Copy, Debug)]
struct Touch {
    end: u32,
    write: Option<usize>,
    read: Option<usize>,
}

/// The level of every op: one more than the highest earlier op it conflicts with (reads
/// what it wrote, writes what it read or wrote), so ops of one level are independent.
fn levels(ops: &[OpRec]) -> Vec<usize> {
    let mut mem: BTreeMap<u32, Touch> = BTreeMap::new();
    let split = |mem: &mut BTreeMap<u32, Touch>, at: u32| {
        let prev = mem.range(..at).next_back().map(|(&s, &t)| (s, t));
        if let Some((s, t)) = prev {
            if t.end > at {
                mem.insert(s, Touch { end: at, ..t });
                mem.insert(at, t);
            }
        }
    };
    ops.iter()
        .map(|o| {
            let (r, w) = o.ranges();
            let mut level = 0;
            let mut look = |lo: u32, hi: u32, write: bool| {
                for (_, t) in mem.range(..hi).rev().take_while(|(_, t)| t.end > lo) {
                    if let Some(l) = t.write {
                        level = level.max(l + 1);
                    }
                    if let (true, Some(l)) = (write, t.read) {
                        level = level.max(l + 1);
                    }
                }
            };
            if let Some((lo, hi)) = r {
                look(lo, hi, false);
            }
            look(w.0, w.1, true);
            let mut mark = |lo: u32, hi: u32, write: bool| {
                split(&mut mem, lo);
                split(&mut mem, hi);
                let keys: Vec<u32> = mem.range(lo..hi).map(|(&k, _)| k).collect();
                // Fill the gaps with fresh runs, then mark every run in [lo, hi).
                let mut cur = lo;
                for k in keys.iter().copied().chain([hi]) {
                    if k > cur {
                        mem.insert(
                            cur,
                            Touch {
                                end: k,
                                write: None,
                                read: None,
                            },
                        );
                    }
                    cur = mem.get(&k).map_or(k, |t| t.end);
                }
                for (_, t) in mem.range_mut(lo..hi) {
                    if write {
                        t.write = Some(level);
                        t.read = None;
                    } else {
                        t.read = Some(t.read.map_or(level, |l| l.max(level)));
                    }
                }
            };
            if let Some((lo, hi)) = r {
                mark(lo, hi, false);
            }
            mark(w.0, w.1, true);
            level
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::ReduceOp;
    use crate::DType;

    fn rec(kind: u32, dst: u32, src: u32, len: u32) -> OpRec {
        OpRec::new(kind, dst, src, len as usize, 0)
    }

    #[test]
    fn levels_separate_exactly_the_conflicting_ops() {
        let ops = [
            rec(0, 100, 0, 10), // copy 0..10 -> 100..110
            rec(0, 200, 50, 10),
            rec(2, 300, 105, 10), // reads 105..115: after op 0
            rec(1, 0, 0, 4),      // fills 0..4, read by op 0: after it
            rec(0, 108, 400, 4),  // writes 108..112, read by op 2: after it
        ];
        assert_eq!(levels(&ops), vec![0, 0, 1, 1, 2]);
    }

    #[test]
    fn copies_and_zero_fills_are_commands_and_compute_one_dispatch_per_level() {
        let alloc = |n: usize| Allocation {
            name: "a".into(),
            space: crate::ir::MemorySpace::Any,
            dtype: DType::F32,
            shape: vec![n],
        };
        let v = |device, alloc, len| View::new(device, alloc, 0, len);
        let n = CHUNK as usize + 1;
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
        let allocs = [alloc(n), alloc(n)];
        let p = GpuProgram::plan(2, &allocs, &ops, 1 << 20).unwrap();
        let w = (n as u64).next_multiple_of(4);
        assert_eq!(p.offset(1, 1), 3 * w);
        // Level 0: the clear and the copy; level 1: both accumulates (device 0's reads
        // what the copy wrote, device 1's overwrites what it read), in one dispatch.
        assert_eq!(
            p.segments,
            vec![
                Segment::Clear {
                    at: 0,
                    words: n as u64
                },
                Segment::Copy {
                    src: 2 * w,
                    dst: w,
                    words: n as u64
                },
                Segment::Wave { first: 0, count: 4 },
            ]
        );
        assert_eq!(p.items[1], [0, CHUNK, 1, 0]);
        assert_eq!(p.scratch_words, n as u64);
        assert!(GpuProgram::plan(2, &allocs, &ops, 16).is_err());
    }
}
