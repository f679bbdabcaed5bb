//! Recording: each data op of a schedule becomes GPU commands — a DMA or VMEM copy a
//! `copy_buffer_to_buffer`, a zero fill a `clear_buffer`, other fills and accumulates
//! shader dispatches over binding-sized windows — plus the bind groups and parameter
//! blocks those dispatches need.

use super::pipelines::{HalfOp, Params, Pipelines, WORKGROUP};
use super::windows::{windows, Binding};
use crate::ir::{Allocation, DataOp, View};
use bytemuck::Zeroable;

/// A recorded GPU command, before encoding.
pub(super) enum Cmd {
    Copy {
        src: BufId,
        src_off: u64,
        dst: BufId,
        dst_off: u64,
        size: u64,
    },
    Clear {
        dst: BufId,
        off: u64,
        size: u64,
    },
    Dispatch {
        pipeline: wgpu::ComputePipeline,
        bind_group: usize,
        /// Workgroups in x, and items (y) for batched dispatches.
        workgroups: [u32; 2],
    },
}

/// A buffer: an allocation of a device, the scratch buffer, or a placeholder bound to
/// an unused slot of a batched dispatch.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum BufId {
    Alloc(usize),
    Scratch,
    Dummy(usize),
}

/// A bind group to create: buffers with their windows, and a params block.
pub(super) enum BindSpec {
    /// Accumulate (with a source) or fill (without).
    Single {
        dst: (BufId, Binding),
        src: Option<(BufId, Binding)>,
        params: usize,
    },
    /// Up to four accumulates: (source, destination) per item.
    Batch {
        items: Vec<((BufId, Binding), (BufId, Binding))>,
        params: usize,
    },
}

/// Placeholders for unused batch slots: one read-only, four writable (distinct).
pub(super) const DUMMIES: usize = 5;

/// Turns data ops into GPU commands and the bind groups and parameters they need.
pub(super) struct Recorder<'a> {
    /// Every allocation of a device ([`crate::ir::Schedule::allocations`]).
    pub(super) allocs: &'a [Allocation],
    pub(super) max_binding: u64,
    pub(super) align: u64,
    pub(super) cmds: Vec<Cmd>,
    pub(super) binds: Vec<BindSpec>,
    pub(super) params: Vec<[Params; 4]>,
    pub(super) scratch_size: u64,
    pub(super) device: &'a wgpu::Device,
    pub(super) pipes: &'a Pipelines,
    pub(super) max_workgroups: u32,
}

impl Recorder<'_> {
    fn buf(&self, v: &View) -> BufId {
        BufId::Alloc(v.device() * self.allocs.len() + v.alloc())
    }

    /// Byte offset of `v` in its buffer.
    fn off(&self, v: &View) -> u64 {
        v.byte_offset(self.allocs[v.alloc()].dtype.storage())
    }

    fn dispatch(&mut self, pipeline: wgpu::ComputePipeline, spec: BindSpec, n: u32, items: u32) {
        let wg = n.div_ceil(WORKGROUP).clamp(1, self.max_workgroups);
        self.binds.push(spec);
        self.cmds.push(Cmd::Dispatch {
            pipeline,
            bind_group: self.binds.len() - 1,
            workgroups: [wg, items],
        });
    }

    fn param(&mut self, p: Params) -> usize {
        let mut block = [Params::zeroed(); 4];
        block[0] = p;
        self.params.push(block);
        self.params.len() - 1
    }

    /// Small accumulates with the same operator and dtype, on distinct buffers, as one
    /// dispatch (see [`batch`]).
    pub(super) fn record_batch(&mut self, ops: &[&DataOp]) {
        let mut items = Vec::new();
        let mut block = [Params::zeroed(); 4];
        let mut most = 0;
        let mut kind = None;
        for (k, op) in ops.iter().enumerate() {
            let DataOp::Accumulate {
                dst,
                src,
                op,
                dtype,
            } = op
            else {
                unreachable!("batches hold accumulates only")
            };
            kind = Some((*op, *dtype));
            let w = windows(
                dst.len() as u64,
                self.off(dst),
                Some(self.off(src)),
                self.max_binding,
                self.align,
                4,
            );
            let [w] = w.as_slice() else {
                unreachable!("batched accumulates fit one binding")
            };
            let s = w.src.expect("accumulate windows have a source");
            block[k] = Params {
                src_off: s.elem_off,
                dst_off: w.dst.elem_off,
                n: w.n,
                value: 0,
            };
            most = most.max(w.n);
            items.push(((self.buf(src), s), (self.buf(dst), w.dst)));
        }
        let (op, dtype) = kind.expect("a batch is not empty");
        self.params.push(block);
        let params = self.params.len() - 1;
        let pipeline = self.pipes.accumulate_batch(self.device, op, dtype);
        let n_items = items.len() as u32;
        self.dispatch(pipeline, BindSpec::Batch { items, params }, most, n_items);
    }

    /// Same-buffer sources are staged through the scratch buffer first (wgpu refuses a
    /// copy within one buffer and a read and a write binding of one buffer in a dispatch):
    /// the whole words holding `src`'s `elem`-byte elements. Returns the buffer and the
    /// byte offset of the source's first element in it.
    fn source(&mut self, src: &View, dst: &View, elem: usize) -> (BufId, u64) {
        let so = self.off(src);
        if self.buf(src) != self.buf(dst) {
            return (self.buf(src), so);
        }
        let start = so / 4 * 4;
        let size = (so + src.bytes(elem)).next_multiple_of(4) - start;
        self.scratch_size = self.scratch_size.max(size);
        self.cmds.push(Cmd::Copy {
            src: self.buf(src),
            src_off: start,
            dst: BufId::Scratch,
            dst_off: 0,
            size,
        });
        (BufId::Scratch, so - start)
    }

    /// 16-bit elements, packed two per word: whole-word copies and zero fills as buffer
    /// commands, everything else `halves.wgsl` (one invocation per destination word).
    fn record_halves(&mut self, op: &DataOp) {
        let (src, dst) = op.reads_writes();
        if dst.is_empty() {
            return;
        }
        let (d_off, size) = (self.off(&dst), dst.bytes(2));
        let whole = |o: u64| o.is_multiple_of(4) && size.is_multiple_of(4);
        let (kind, value) = match *op {
            DataOp::Copy { src, dst } => {
                if self.buf(&src) != self.buf(&dst) && whole(d_off) && whole(self.off(&src)) {
                    self.cmds.push(Cmd::Copy {
                        src: self.buf(&src),
                        src_off: self.off(&src),
                        dst: self.buf(&dst),
                        dst_off: d_off,
                        size,
                    });
                    return;
                }
                (HalfOp::Copy, 0)
            }
            DataOp::Fill { bits, .. } => {
                if bits == 0 && whole(d_off) {
                    self.cmds.push(Cmd::Clear {
                        dst: self.buf(&dst),
                        off: d_off,
                        size,
                    });
                    return;
                }
                (HalfOp::Fill, bits)
            }
            DataOp::Accumulate { op, dtype, .. } => (HalfOp::Accumulate(op, dtype), 0),
        };
        let source = src.map(|s| self.source(&s, &dst, 2));
        let pipeline = self.pipes.halves(self.device, kind);
        let dummy = Binding {
            offset: 0,
            size: 16,
            elem_off: 0,
        };
        for w in windows(
            dst.len() as u64,
            d_off,
            source.map(|s| s.1),
            self.max_binding,
            self.align,
            2,
        ) {
            let params = self.param(Params {
                src_off: w.src.map_or(0, |s| s.elem_off),
                dst_off: w.dst.elem_off,
                n: w.n,
                value,
            });
            let src = match (source, w.src) {
                (Some((b, _)), Some(s)) => (b, s),
                _ => (BufId::Dummy(0), dummy),
            };
            let spec = BindSpec::Single {
                dst: (self.buf(&dst), w.dst),
                src: Some(src),
                params,
            };
            let words = (w.dst.elem_off % 2 + w.n).div_ceil(2);
            self.dispatch(pipeline.clone(), spec, words, 1);
        }
    }

    pub(super) fn record(&mut self, op: &DataOp) {
        if op.elem_bytes(self.allocs) == 2 {
            return self.record_halves(op);
        }
        match op {
            DataOp::Copy { src, dst } => {
                if src.is_empty() {
                    return;
                }
                let (sb, so) = self.source(src, dst, 4);
                self.cmds.push(Cmd::Copy {
                    src: sb,
                    src_off: so,
                    dst: self.buf(dst),
                    dst_off: self.off(dst),
                    size: dst.bytes(4),
                });
            }
            DataOp::Fill { dst, bits } => {
                if dst.is_empty() {
                    return;
                }
                if *bits == 0 {
                    self.cmds.push(Cmd::Clear {
                        dst: self.buf(dst),
                        off: self.off(dst),
                        size: dst.bytes(4),
                    });
                    return;
                }
                for w in windows(
                    dst.len() as u64,
                    self.off(dst),
                    None,
                    self.max_binding,
                    self.align,
                    4,
                ) {
                    let params = self.param(Params {
                        src_off: 0,
                        dst_off: w.dst.elem_off,
                        n: w.n,
                        value: *bits,
                    });
                    let spec = BindSpec::Single {
                        dst: (self.buf(dst), w.dst),
                        src: None,
                        params,
                    };
                    self.dispatch(self.pipes.fill.clone(), spec, w.n, 1);
                }
            }
            DataOp::Accumulate {
                dst,
                src,
                op,
                dtype,
            } => {
                if dst.is_empty() {
                    return;
                }
                let (sb, so) = self.source(src, dst, 4);
                let d_off = self.off(dst);
                // vec4 words when both sides are 16-byte aligned and whole vec4s long.
                let vec4 = dst.len().is_multiple_of(4)
                    && d_off.is_multiple_of(16)
                    && so.is_multiple_of(16);
                let unit = if vec4 { 16 } else { 4 };
                let n = dst.bytes(4) / unit;
                let pipeline = self.pipes.accumulate(self.device, *op, *dtype, vec4);
                for w in windows(n, d_off, Some(so), self.max_binding, self.align, unit) {
                    let s = w.src.expect("accumulate windows have a source");
                    let params = self.param(Params {
                        src_off: s.elem_off,
                        dst_off: w.dst.elem_off,
                        n: w.n,
                        value: 0,
                    });
                    let spec = BindSpec::Single {
                        dst: (self.buf(dst), w.dst),
                        src: Some((sb, s)),
                        params,
                    };
                    self.dispatch(pipeline.clone(), spec, w.n, 1);
                }
            }
        }
    }
}
