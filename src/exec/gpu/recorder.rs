//! Recording: each data op of a schedule becomes GPU commands — a DMA or VMEM copy a
//! `copy_buffer_to_buffer`, a zero fill a `clear_buffer`, other fills and accumulates
//! shader dispatches over binding-sized windows — plus the bind groups and parameter
//! blocks those dispatches need.

use super::pipelines::{Params, Pipelines, WORKGROUP};
use super::windows::{windows, Binding};
use crate::device_sim::program::{DataOp, View};
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
    pub(super) nallocs: usize,
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
        BufId::Alloc(v.device * self.nallocs + v.alloc)
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
                dst.len as u64,
                dst.byte_offset(),
                Some(src.byte_offset()),
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
    /// copy within one buffer and a read and a write binding of one buffer in a dispatch).
    fn source(&mut self, src: &View, dst: &View) -> (BufId, u64) {
        if self.buf(src) != self.buf(dst) {
            return (self.buf(src), src.byte_offset());
        }
        self.scratch_size = self.scratch_size.max(src.bytes());
        self.cmds.push(Cmd::Copy {
            src: self.buf(src),
            src_off: src.byte_offset(),
            dst: BufId::Scratch,
            dst_off: 0,
            size: src.bytes(),
        });
        (BufId::Scratch, 0)
    }

    pub(super) fn record(&mut self, op: &DataOp) {
        match op {
            DataOp::Copy { src, dst } => {
                if src.len == 0 {
                    return;
                }
                let (sb, so) = self.source(src, dst);
                self.cmds.push(Cmd::Copy {
                    src: sb,
                    src_off: so,
                    dst: self.buf(dst),
                    dst_off: dst.byte_offset(),
                    size: dst.bytes(),
                });
            }
            DataOp::Fill { dst, bits } => {
                if dst.len == 0 {
                    return;
                }
                if *bits == 0 {
                    self.cmds.push(Cmd::Clear {
                        dst: self.buf(dst),
                        off: dst.byte_offset(),
                        size: dst.bytes(),
                    });
                    return;
                }
                for w in windows(
                    dst.len as u64,
                    dst.byte_offset(),
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
                if dst.len == 0 {
                    return;
                }
                let (sb, so) = self.source(src, dst);
                // vec4 words when both sides are 16-byte aligned and whole vec4s long.
                let vec4 = dst.len % 4 == 0 && dst.byte_offset() % 16 == 0 && so % 16 == 0;
                let unit = if vec4 { 16 } else { 4 };
                let n = dst.bytes() / unit;
                let pipeline = self.pipes.accumulate(self.device, *op, *dtype, vec4);
                for w in windows(
                    n,
                    dst.byte_offset(),
                    Some(so),
                    self.max_binding,
                    self.align,
                    unit,
                ) {
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
