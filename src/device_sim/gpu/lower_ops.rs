//! The per-op lowering: a buffer per (device, allocation), and each data op of a
//! schedule as commands — a DMA or VMEM copy a buffer copy, a zero fill a clear, other
//! fills and accumulates dispatches over binding-sized windows, small accumulates of a
//! phase batched four to a dispatch ([`super::batch`]), compute ops as the dispatches
//! of [`super::lower_compute`].

use super::batch::{self, Step};
use super::codes::WORKGROUP;
use super::commands::{
    Bound, BufId, Command, Dispatch, HalfOp, Init, Lowering, PipelineKey, Place, Recording,
};
use super::limits::Limits;
use super::windows::{windows, Binding, Window};
use crate::device_sim::fuse;
use crate::error::Result;
use crate::ir::{DataOp, Memory, View};

/// Placeholders for unused batch slots: one read-only, four writable (distinct).
const DUMMIES: usize = 1 + batch::MAX_ITEMS;

/// Bytes of a placeholder binding.
const DUMMY_BYTES: u64 = 16;

/// Lowers `ops` over `memory` per op, none fused (what the lowering's tests read); batches small accumulates when `batching` (and
/// the adapter binds the 8 storage buffers a batch needs, WebGPU's default limit).
/// Fails when a compute op cannot be split into bindings the adapter allows.
#[cfg(test)]
pub fn lower(
    memory: &Memory,
    ops: &[DataOp],
    limits: &Limits,
    batching: bool,
) -> Result<Recording> {
    let steps: Vec<fuse::Step> = (0..ops.len()).map(fuse::Step::Op).collect();
    lower_steps(memory, ops, &steps, limits, batching)
}

/// As [`lower`], `ops` in their fused form `steps` (a region as one dispatch of its
/// generated shader where it can be: [`super::lower_region`]).
pub fn lower_steps(
    memory: &Memory,
    ops: &[DataOp],
    steps: &[fuse::Step],
    limits: &Limits,
    batching: bool,
) -> Result<Recording> {
    let mut rec = Recording::new(Lowering::PerOp);
    for (d, a) in memory.iter() {
        let buf = rec.buffer(
            format!("device {d} {}", a.name),
            a.storage_bytes(),
            Init::Zeros,
        );
        rec.places.push(Place {
            buf,
            offset: 0,
            size: a.storage_bytes().next_multiple_of(4),
        });
    }
    let max_items = if batching && limits.storage_per_stage >= 8 {
        batch::MAX_ITEMS
    } else {
        1
    };
    let mut low = PerOp {
        memory,
        limits,
        rec,
        scratch: None,
        scratch_used: 0,
        dummies: None,
        constants: Vec::new(),
    };
    let mut k = 0;
    while k < steps.len() {
        if let fuse::Step::Region(r) = &steps[k] {
            if !r.copies_only() {
                low.scratch_used = 0;
                low.region(r, ops)?;
                k += 1;
                continue;
            }
        }
        // A run of plain ops (a region that only copies counts as its ops: buffer
        // copies beat a dispatch), batched among themselves.
        let mut run = Vec::new();
        while let Some(step) = steps.get(k) {
            match step {
                fuse::Step::Op(i) => run.push(*i),
                fuse::Step::Region(r) if r.copies_only() => run.extend(&r.ops),
                fuse::Step::Region(_) => break,
            }
            k += 1;
        }
        // In the schedule's order, as batching reads it: the fusion pass moved only ops
        // that touch nothing in common, so any two that do keep their order.
        run.sort_unstable();
        let plain: Vec<DataOp> = run.iter().map(|&i| ops[i].clone()).collect();
        for step in batch::plan(&plain, max_items) {
            // Scratch regions live for one op (or batch): the next may reuse them.
            low.scratch_used = 0;
            match step {
                Step::Op(i) => low.op(&plain[i])?,
                Step::Batch(items) => {
                    let batch: Vec<&DataOp> = items.iter().map(|&i| &plain[i]).collect();
                    low.batch(&batch);
                }
            }
        }
    }
    Ok(low.rec)
}

/// The per-op lowering's state while it records.
pub(super) struct PerOp<'a> {
    pub(super) memory: &'a Memory,
    pub(super) limits: &'a Limits,
    pub(super) rec: Recording,
    /// Staging for same-buffer sources and compute temporaries, sized to the most one
    /// op uses.
    scratch: Option<BufId>,
    /// Bytes of scratch the current op has taken.
    pub(super) scratch_used: u64,
    /// The first of [`DUMMIES`] placeholders, made on first use.
    dummies: Option<BufId>,
    /// A buffer per distinct constant of compute ops (`ComputeKind::Constant`, shared
    /// by every op that makes it) and dtype.
    pub(super) constants: Vec<(std::sync::Arc<[u32]>, crate::array::DType, BufId)>,
}

impl PerOp<'_> {
    pub(super) fn buf(&self, v: &View) -> BufId {
        self.rec.places[self.memory.index(v)].buf
    }

    /// Byte offset of `v` in its buffer.
    pub(super) fn off(&self, v: &View) -> u64 {
        v.byte_offset(self.memory.allocs[v.alloc()].dtype.storage())
    }

    /// A region of `size` bytes of the scratch buffer for the current op (at an
    /// aligned offset, after what the op already took): the buffer and the offset.
    pub(super) fn scratch_region(&mut self, size: u64) -> (BufId, u64) {
        let scratch = *self
            .scratch
            .get_or_insert_with(|| self.rec.buffer("scratch", 0, Init::Any));
        let at = self
            .scratch_used
            .next_multiple_of(self.limits.offset_align.max(16));
        self.scratch_used = at + size;
        let desc = &mut self.rec.buffers[scratch.0];
        desc.size = desc.size.max(self.scratch_used);
        (scratch, at)
    }

    /// Records a dispatch of `pipeline` over `workgroups` with its storage `bindings`
    /// and parameter `block`.
    pub(super) fn dispatch_3d(
        &mut self,
        pipeline: PipelineKey,
        bindings: Vec<Bound>,
        block: Vec<u32>,
        workgroups: [u32; 3],
    ) {
        let params = self.rec.param(block);
        self.rec.commands.push(Command::Dispatch(Dispatch {
            pipeline,
            bindings,
            params,
            workgroups,
        }));
    }

    fn bound(buf: BufId, b: Binding) -> Bound {
        Bound {
            buf,
            offset: b.offset,
            size: b.size,
        }
    }

    /// Placeholder `k` bound whole.
    pub(super) fn dummy(&mut self, k: usize) -> Bound {
        let first = *self.dummies.get_or_insert_with(|| {
            let first = BufId(self.rec.buffers.len());
            for k in 0..DUMMIES {
                self.rec
                    .buffer(format!("unused binding {k}"), DUMMY_BYTES, Init::Any);
            }
            first
        });
        Bound {
            buf: BufId(first.0 + k),
            offset: 0,
            size: DUMMY_BYTES,
        }
    }

    /// `n` items of work over `items` workgroup rows.
    fn dispatch(
        &mut self,
        pipeline: PipelineKey,
        bindings: Vec<Bound>,
        block: Vec<u32>,
        n: u32,
        items: u32,
    ) {
        let wg = n.div_ceil(WORKGROUP).clamp(1, self.limits.max_workgroups);
        let params = self.rec.param(block);
        self.rec.commands.push(Command::Dispatch(Dispatch {
            pipeline,
            bindings,
            params,
            workgroups: [wg, items, 1],
        }));
    }

    fn windows(&self, n: u64, dst: u64, src: Option<u64>, unit: u64) -> Vec<Window> {
        windows(
            n,
            dst,
            src,
            self.limits.max_binding,
            self.limits.offset_align,
            unit,
        )
    }

    /// Small accumulates with the same operator and dtype, on distinct buffers, as one
    /// dispatch (see [`batch`]): sources bind at 0..4, destinations at 4..8.
    fn batch(&mut self, ops: &[&DataOp]) {
        let mut srcs = Vec::new();
        let mut dsts = Vec::new();
        let mut block = vec![0u32; 4 * batch::MAX_ITEMS];
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
            let w = self.windows(dst.len() as u64, self.off(dst), Some(self.off(src)), 4);
            let [w] = w.as_slice() else {
                unreachable!("batched accumulates fit one binding")
            };
            let s = w.src.expect("accumulate windows have a source");
            block[4 * k..4 * k + 3].copy_from_slice(&[s.elem_off, w.dst.elem_off, w.n]);
            most = most.max(w.n);
            srcs.push(Self::bound(self.buf(src), s));
            dsts.push(Self::bound(self.buf(dst), w.dst));
        }
        let (op, dtype) = kind.expect("a batch is not empty");
        for k in ops.len()..batch::MAX_ITEMS {
            let src = self.dummy(0);
            let dst = self.dummy(1 + k);
            srcs.push(src);
            dsts.push(dst);
        }
        srcs.extend(dsts);
        let key = PipelineKey::AccumulateBatch { op, dtype };
        self.dispatch(key, srcs, block, most, ops.len() as u32);
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
        let (scratch, at) = self.scratch_region(size);
        let copy = Command::copy(self.buf(src), start, scratch, at, size);
        self.rec.commands.push(copy);
        (scratch, at + so - start)
    }

    /// 16-bit elements, packed two per word: whole-word copies and zero fills as buffer
    /// commands, everything else `halves.wgsl` (one invocation per destination word).
    fn halves(&mut self, op: &DataOp) {
        let (src, dst) = (op.reads().next(), op.dst());
        if dst.is_empty() {
            return;
        }
        let (d_off, size) = (self.off(&dst), dst.bytes(2));
        let whole = |o: u64| o.is_multiple_of(4) && size.is_multiple_of(4);
        let (kind, value) = match op.clone() {
            DataOp::Copy { src, dst } => {
                if self.buf(&src) != self.buf(&dst) && whole(d_off) && whole(self.off(&src)) {
                    let copy =
                        Command::copy(self.buf(&src), self.off(&src), self.buf(&dst), d_off, size);
                    self.rec.commands.push(copy);
                    return;
                }
                (HalfOp::Copy, 0)
            }
            DataOp::Fill { bits, .. } => {
                if bits == 0 && whole(d_off) {
                    self.rec.commands.push(Command::Clear {
                        dst: self.buf(&dst),
                        off: d_off,
                        size,
                    });
                    return;
                }
                (HalfOp::Fill, bits)
            }
            DataOp::Accumulate { op, dtype, .. } => (HalfOp::Accumulate(op, dtype), 0),
            DataOp::Compute(_) => unreachable!("compute ops lower in lower_compute.rs"),
        };
        let source = src.map(|s| self.source(&s, &dst, 2));
        for w in self.windows(dst.len() as u64, d_off, source.map(|s| s.1), 2) {
            let block = vec![w.src.map_or(0, |s| s.elem_off), w.dst.elem_off, w.n, value];
            let src = match (source, w.src) {
                (Some((b, _)), Some(s)) => Self::bound(b, s),
                _ => self.dummy(0),
            };
            let bindings = vec![src, Self::bound(self.buf(&dst), w.dst)];
            let words = (w.dst.elem_off % 2 + w.n).div_ceil(2);
            self.dispatch(PipelineKey::Halves(kind), bindings, block, words, 1);
        }
    }

    /// Records `op` (a compute op may fail: see [`super::lower_compute`]).
    pub(super) fn op(&mut self, op: &DataOp) -> Result<()> {
        if let DataOp::Compute(c) = op {
            return self.compute(c);
        }
        if op.elem_bytes(&self.memory.allocs) == 2 {
            self.halves(op);
            return Ok(());
        }
        match op {
            DataOp::Copy { src, dst } => {
                if src.is_empty() {
                    return Ok(());
                }
                let (sb, so) = self.source(src, dst, 4);
                let copy = Command::copy(sb, so, self.buf(dst), self.off(dst), dst.bytes(4));
                self.rec.commands.push(copy);
            }
            DataOp::Fill { dst, bits } => {
                if dst.is_empty() {
                    return Ok(());
                }
                if *bits == 0 {
                    self.rec.commands.push(Command::Clear {
                        dst: self.buf(dst),
                        off: self.off(dst),
                        size: dst.bytes(4),
                    });
                    return Ok(());
                }
                for w in self.windows(dst.len() as u64, self.off(dst), None, 4) {
                    let block = vec![0, w.dst.elem_off, w.n, *bits];
                    let bindings = vec![Self::bound(self.buf(dst), w.dst)];
                    self.dispatch(PipelineKey::Fill, bindings, block, w.n, 1);
                }
            }
            DataOp::Accumulate {
                dst,
                src,
                op,
                dtype,
            } => {
                if dst.is_empty() {
                    return Ok(());
                }
                let (sb, so) = self.source(src, dst, 4);
                let d_off = self.off(dst);
                // vec4 words when both sides are 16-byte aligned and whole vec4s long.
                let vec4 = dst.len().is_multiple_of(4)
                    && d_off.is_multiple_of(16)
                    && so.is_multiple_of(16);
                let unit = if vec4 { 16 } else { 4 };
                let key = PipelineKey::Accumulate {
                    op: *op,
                    dtype: *dtype,
                    vec4,
                };
                for w in self.windows(dst.bytes(4) / unit, d_off, Some(so), unit) {
                    let s = w.src.expect("accumulate windows have a source");
                    let block = vec![s.elem_off, w.dst.elem_off, w.n, 0];
                    let bindings = vec![Self::bound(sb, s), Self::bound(self.buf(dst), w.dst)];
                    self.dispatch(key, bindings, block, w.n, 1);
                }
            }
            DataOp::Compute(_) => unreachable!("handled above"),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::commands::tests::memory;
    use super::*;
    use crate::array::DType;
    use crate::ir::ReduceOp;

    /// Fake limits: 1 KiB bindings, 256-byte alignment.
    const LIMITS: Limits = Limits {
        max_buffer: 1 << 20,
        max_binding: 1024,
        offset_align: 256,
        max_workgroups: 65535,
        storage_per_stage: 8,
    };

    #[test]
    fn buffers_are_named_and_large_accumulates_run_in_windows() {
        let m = memory(2, &[("x", DType::F32, 1000), ("recv", DType::F32, 1000)]);
        let acc = DataOp::Accumulate {
            dst: View::new(1, 0, 0, 1000),
            src: View::new(1, 1, 0, 1000),
            op: ReduceOp::Sum,
            dtype: DType::F32,
        };
        let rec = lower(&m, &[acc], &LIMITS, true).unwrap();
        let labels: Vec<&str> = rec.buffers.iter().map(|b| b.label.as_str()).collect();
        assert_eq!(
            labels,
            ["device 0 x", "device 0 recv", "device 1 x", "device 1 recv"]
        );
        assert_eq!(rec.places[m.index_of(1, 1)].buf, BufId(3));
        // 4000 bytes in bindings of at most 1 KiB: several dispatches, none too large.
        assert!(rec.dispatches() >= 4);
        for c in &rec.commands {
            let Command::Dispatch(d) = c else { panic!() };
            assert!(d
                .bindings
                .iter()
                .all(|b| b.size <= 1024 && b.offset % 256 == 0));
        }
    }
}
