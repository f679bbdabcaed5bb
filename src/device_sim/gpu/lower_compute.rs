//! The per-op lowering of compute ops ([`crate::ir::Compute`]): each kind as dispatches
//! of the compute shaders over boxes ([`super::boxes`]) split into binding-sized
//! windows.
//!
//! | kind | shader | dispatches per window |
//! | --- | --- | --- |
//! | unary, binary, compare, select, convert | `compute_elementwise.wgsl`, or `compute_math.wgsl` for the transcendentals, pow and atan2 | 1 |
//! | broadcast_in_dim, transpose, slice, iota | `compute_layout.wgsl` (gather, iota) | 1 |
//! | reshape | a buffer copy (or `halves.wgsl` for 16-bit elements that start mid-word) | — |
//! | dynamic_update_slice | a copy of the operand (none in place), then a layout scatter | 1 (+ copy) |
//! | concatenate | a layout scatter per non-empty source | one per source |
//! | reduce_sum/max/min, argmax/argmin | `compute_reduce.wgsl` (a thread or a workgroup per output) | 1 (+1 convert for 16-bit results) |
//! | dot_general | `compute_matmul.wgsl` (tiled) | 1 (+1 transpose per operand whose dims do not collapse, +1 convert for 16-bit results) |
//!
//! Sources are bound read-write beside the destination (see `pipelines.rs`); a source
//! that overlaps the destination's elements is first copied into scratch, since the
//! CPU twin reads every source before it writes. Results that need a 32-bit step (a
//! 16-bit reduction or product, computed in f32 and rounded once) and operands that
//! need a transpose go through scratch regions of one op. A box whose operands do not
//! fit one binding is split along its outer dimensions; one that cannot be split that
//! way (a transpose or a product whose operand is larger than a binding and read in
//! full by every piece, a reduction group longer than a binding) is a
//! [`crate::Error::Limit`] naming the op and the sizes.

use super::boxes::{collapse, row_major, split, Bind, Sub, Walk};
use super::codes::{
    binary_code, compare_code, reduction_code, unary_code, BOX_RANK, EW_CONVERT, EW_SELECT,
    MM_TILE, WORKGROUP,
};
use super::commands::{Bound, BufId, Command, PipelineKey};
use super::lower_ops::PerOp;
use crate::array::DType;
use crate::error::{Error, Result};
use crate::ir::{Compute, ComputeKind, DataOp, Operand, Unary};

/// Most dispatches (windows) one compute op's box may be split into.
const MAX_WINDOWS: usize = 4096;

/// Groups at least this long are reduced by a workgroup per output.
const PER_GROUP: u64 = 128;

/// Where an operand's elements are: a buffer, the byte offset of its element 0 there,
/// its dtype.
#[derive(Clone, Copy, Debug)]
struct Loc {
    buf: BufId,
    origin: u64,
    dtype: DType,
}

impl Loc {
    fn width(&self) -> u64 {
        self.dtype.storage() as u64
    }

    /// How a dense row-major operand of `shape` walks its own box.
    fn dense(&self, shape: &[u64]) -> Walk {
        Walk::dense(self.width(), self.origin, 0, shape)
    }

    /// A walk with explicit strides from element `start`.
    fn walk(&self, start: u64, strides: Vec<u64>, extra: u64) -> Walk {
        Walk {
            width: self.width(),
            origin: self.origin,
            start,
            strides,
            extra,
        }
    }
}

fn shape64(s: &[usize]) -> Vec<u64> {
    s.iter().map(|&n| n as u64).collect()
}

/// Two vec4s of a parameter block from up to [`BOX_RANK`] numbers.
fn vec8(v: &[u64]) -> [u32; 8] {
    let mut out = [0u32; 8];
    for (o, &x) in out.iter_mut().zip(v) {
        *o = x as u32;
    }
    out
}

/// `shape` and each walk's strides without the dims of size 1.
fn squeeze(shape: &[u64], strides: &[&[u64]]) -> (Vec<u64>, Vec<Vec<u64>>) {
    let keep: Vec<usize> = (0..shape.len()).filter(|&k| shape[k] != 1).collect();
    (
        keep.iter().map(|&k| shape[k]).collect(),
        strides
            .iter()
            .map(|s| keep.iter().map(|&k| s[k]).collect())
            .collect(),
    )
}

impl PerOp<'_> {
    /// Where `o`'s elements are.
    fn loc(&self, o: &Operand) -> Loc {
        Loc {
            buf: self.buf(&o.view),
            origin: self.off(&o.view),
            dtype: o.dtype,
        }
    }

    /// `o` copied (the whole words holding it) into a scratch region of this op.
    fn stage(&mut self, o: &Operand) -> Loc {
        let w = o.dtype.storage() as u64;
        let so = self.off(&o.view);
        let start = so / 4 * 4;
        let size = (so + o.view.len() as u64 * w).next_multiple_of(4) - start;
        let (scratch, at) = self.scratch_region(size);
        let copy = Command::copy(self.buf(&o.view), start, scratch, at, size);
        self.rec.commands.push(copy);
        Loc {
            buf: scratch,
            origin: at + (so - start),
            dtype: o.dtype,
        }
    }

    /// Where constant `words` of `dtype` are: a buffer of them in the GPU's storage form
    /// (16-bit elements two to a word), made once per distinct constant.
    fn constant(&mut self, words: &std::sync::Arc<[u32]>, dtype: DType) -> Loc {
        let known = self
            .constants
            .iter()
            .find(|(w, t, _)| *t == dtype && std::sync::Arc::ptr_eq(w, words));
        let buf = match known {
            Some(&(_, _, b)) => b,
            None => {
                let bytes: Vec<u8> = match dtype.storage() {
                    2 => words
                        .iter()
                        .flat_map(|&w| (w as u16).to_le_bytes())
                        .collect(),
                    _ => words.iter().flat_map(|&w| w.to_le_bytes()).collect(),
                };
                let mut bytes = bytes;
                bytes.resize(bytes.len().next_multiple_of(4).max(4), 0);
                let b = self.rec.buffer(
                    "constant",
                    bytes.len() as u64,
                    super::commands::Init::Data(bytes),
                );
                self.constants.push((words.clone(), dtype, b));
                b
            }
        };
        Loc {
            buf,
            origin: 0,
            dtype,
        }
    }

    /// A scratch region for `n` elements of `dtype` (dense), this op's alone.
    fn scratch_loc(&mut self, n: u64, dtype: DType) -> Loc {
        let bytes = (n * dtype.storage() as u64).next_multiple_of(4).max(4);
        let (buf, origin) = self.scratch_region(bytes);
        Loc { buf, origin, dtype }
    }

    /// The sub-boxes of `shape` under `walks`, or the limit error naming `what`.
    fn windows_of(
        &self,
        what: impl FnOnce() -> String,
        shape: &[u64],
        walks: &[Walk],
        max_rank: usize,
    ) -> Result<Vec<Sub>> {
        let max = self.limits.max_binding.min(self.limits.max_buffer);
        split(
            shape,
            walks,
            max,
            self.limits.offset_align,
            max_rank,
            MAX_WINDOWS,
        )
        .map_err(|e| Error::Limit {
            what: format!(
                "{} (an operand of its smallest piece, in at most {MAX_WINDOWS} windows of one storage binding)",
                what()
            ),
            requested: e.needs,
            limit: max,
        })
    }

    fn bind_at(buf: BufId, b: Bind) -> Bound {
        Bound {
            buf,
            offset: b.offset,
            size: b.size,
        }
    }

    /// Runs compute op `c`.
    pub(super) fn compute(&mut self, c: &Compute) -> Result<()> {
        let d = &c.dst;
        if d.numel() == 0 {
            return Ok(());
        }
        let in_place =
            matches!(c.kind, ComputeKind::UpdateSlice { .. }) && c.srcs[0].view == d.view;
        let srcs: Vec<Loc> = c
            .srcs
            .iter()
            .enumerate()
            .map(|(i, o)| {
                if !(in_place && i == 0) && o.numel() > 0 && o.view.overlaps(&d.view) {
                    self.stage(o)
                } else {
                    self.loc(o)
                }
            })
            .collect();
        let dst = self.loc(d);
        let n = d.numel() as u64;
        match &c.kind {
            ComputeKind::Unary(u) => {
                let powi = match u {
                    Unary::IntegerPow(k) => *k,
                    _ => 0,
                };
                self.elementwise(unary_code(*u), powi, &[(srcs[0], false)], dst, n)
            }
            ComputeKind::Binary(b) => {
                let s = self.scalars(c, &srcs);
                self.elementwise(binary_code(*b), 0, &s, dst, n)
            }
            ComputeKind::Compare(k) => {
                let s = self.scalars(c, &srcs);
                self.elementwise(compare_code(*k), 0, &s, dst, n)
            }
            ComputeKind::Select => {
                let s = self.scalars(c, &srcs);
                self.elementwise(EW_SELECT, 0, &s, dst, n)
            }
            ComputeKind::Convert => self.elementwise(EW_CONVERT, 0, &[(srcs[0], false)], dst, n),
            ComputeKind::Reshape | ComputeKind::Bitcast => {
                self.op(&DataOp::Copy {
                    src: c.srcs[0].view,
                    dst: d.view,
                })?;
                Ok(())
            }
            ComputeKind::Broadcast { dims } => {
                let s = &c.srcs[0];
                let st = row_major(&shape64(&s.shape));
                let mut strides = vec![0u64; d.shape.len()];
                for (i, &k) in dims.iter().enumerate() {
                    if s.shape[i] != 1 {
                        strides[k] = st[i];
                    }
                }
                let shape = shape64(&d.shape);
                let src = srcs[0].walk(0, strides, 0);
                self.gather(c, &shape, dst, (src, srcs[0]), false)
            }
            ComputeKind::Transpose { perm } => {
                let st = row_major(&shape64(&c.srcs[0].shape));
                let strides = perm.iter().map(|&p| st[p]).collect();
                let shape = shape64(&d.shape);
                let src = srcs[0].walk(0, strides, 0);
                self.gather(c, &shape, dst, (src, srcs[0]), false)
            }
            ComputeKind::Slice { start, strides } => {
                let st = row_major(&shape64(&c.srcs[0].shape));
                let from: u64 = start.iter().zip(&st).map(|(&a, &s)| a as u64 * s).sum();
                let steps = strides
                    .iter()
                    .zip(&st)
                    .map(|(&k, &s)| k as u64 * s)
                    .collect();
                let shape = shape64(&d.shape);
                let src = srcs[0].walk(from, steps, 0);
                self.gather(c, &shape, dst, (src, srcs[0]), false)
            }
            ComputeKind::Constant(words) => {
                let shape = shape64(&d.shape);
                let src = self.constant(words, d.dtype);
                self.gather(c, &shape, dst, (src.dense(&shape), src), false)
            }
            ComputeKind::Iota { dim } => {
                let shape = shape64(&d.shape);
                let mut idx = vec![0u64; shape.len()];
                idx[*dim] = 1;
                let index = Walk {
                    width: 0,
                    origin: 0,
                    start: 0,
                    strides: idx,
                    extra: 0,
                };
                self.gather(c, &shape, dst, (index, dst), true)
            }
            ComputeKind::UpdateSlice { start } => {
                if !in_place {
                    self.op(&DataOp::Copy {
                        src: c.srcs[0].view,
                        dst: d.view,
                    })?;
                }
                let u = &c.srcs[1];
                if u.numel() == 0 {
                    return Ok(());
                }
                let ds = row_major(&shape64(&d.shape));
                let at: u64 = start.iter().zip(&ds).map(|(&a, &s)| a as u64 * s).sum();
                let shape = shape64(&u.shape);
                let into = dst.walk(at, ds, 0);
                let src = srcs[1].dense(&shape);
                self.scatter(c, &shape, into, dst, (src, srcs[1]))
            }
            ComputeKind::Concat { dim } => {
                let ds = row_major(&shape64(&d.shape));
                let mut at = 0u64;
                for (k, s) in c.srcs.iter().enumerate() {
                    let len = s.shape[*dim] as u64;
                    if s.numel() > 0 {
                        let shape = shape64(&s.shape);
                        let into = dst.walk(at * ds[*dim], ds.clone(), 0);
                        let src = srcs[k].dense(&shape);
                        self.scatter(c, &shape, into, dst, (src, srcs[k]))?;
                    }
                    at += len;
                }
                Ok(())
            }
            ComputeKind::Reduce { op, axes } => {
                self.reduce(c, srcs[0], dst, axes, Some(reduction_code(*op)))
            }
            ComputeKind::ArgReduce { axis, .. } => self.reduce(c, srcs[0], dst, &[*axis], None),
            ComputeKind::Dot(_) => self.dot(c, srcs[0], srcs[1], dst),
        }
    }

    /// The sources of an elementwise op with their scalar flags.
    fn scalars(&self, c: &Compute, srcs: &[Loc]) -> Vec<(Loc, bool)> {
        c.srcs
            .iter()
            .zip(srcs)
            .map(|(o, &l)| (l, o.shape.is_empty() && c.dst.numel() != 1))
            .collect()
    }

    /// `dst[i] = f(srcs[..][i])` for `i < n` (`compute_elementwise.wgsl`).
    fn elementwise(
        &mut self,
        op: u32,
        powi: i32,
        srcs: &[(Loc, bool)],
        dst: Loc,
        n: u64,
    ) -> Result<()> {
        let mut walks = vec![dst.walk(0, vec![1], 0)];
        walks.extend(
            srcs.iter()
                .map(|(l, scalar)| l.walk(0, vec![u64::from(!*scalar)], 0)),
        );
        let what = || format!("an elementwise op over {n} elements");
        let subs = self.windows_of(what, &[n], &walks, 1)?;
        let mut dtypes = [DType::F32; 3];
        for (k, (l, _)) in srcs.iter().enumerate() {
            dtypes[k] = l.dtype;
        }
        let key = PipelineKey::Elementwise {
            op,
            srcs: dtypes,
            dst: dst.dtype,
        };
        for sub in subs {
            let count = sub.shape[0];
            let db = sub.binds[0];
            let mut bindings = Vec::with_capacity(4);
            let mut offs = [0u32; 4];
            let mut steps = [0u32; 4];
            for k in 0..3 {
                match srcs.get(k) {
                    Some((l, scalar)) => {
                        let b = sub.binds[1 + k];
                        bindings.push(Self::bind_at(l.buf, b));
                        offs[k] = b.elem_off;
                        steps[k] = u32::from(!*scalar);
                    }
                    None => {
                        let dummy = self.dummy(1 + k);
                        bindings.push(dummy);
                    }
                }
            }
            bindings.push(Self::bind_at(dst.buf, db));
            let mut block = vec![count as u32, db.elem_off, powi as u32, 0];
            block.extend(offs);
            block.extend(steps);
            let items = if dst.dtype.storage() == 2 {
                let lo = db.elem_off as u64;
                (lo + count).div_ceil(2) - lo / 2
            } else {
                count
            };
            self.dispatch_1d(key, bindings, block, items);
        }
        Ok(())
    }

    /// A layout gather over `shape` into the dense `dst`: `src` (a source, or for iota
    /// the unbound index walk) by its strides (`compute_layout.wgsl`).
    fn gather(
        &mut self,
        c: &Compute,
        shape: &[u64],
        dst: Loc,
        src: (Walk, Loc),
        iota: bool,
    ) -> Result<()> {
        self.layout(c, shape, dst.dense(shape), dst, src.0, src.1, iota, false)
    }

    /// A layout scatter of the dense `src` over `shape` into `into`'s window of `dst`.
    fn scatter(
        &mut self,
        c: &Compute,
        shape: &[u64],
        into: Walk,
        dst: Loc,
        src: (Walk, Loc),
    ) -> Result<()> {
        self.layout(c, shape, into, dst, src.0, src.1, false, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn layout(
        &mut self,
        c: &Compute,
        shape: &[u64],
        dwalk: Walk,
        dst: Loc,
        swalk: Walk,
        sloc: Loc,
        iota: bool,
        scatter: bool,
    ) -> Result<()> {
        let mut walks = vec![dwalk, swalk];
        let shape = collapse(shape, &mut walks, None);
        let what = || {
            format!(
                "{} of {:?} to {:?} {}",
                c.kind,
                c.srcs.first().map_or(&c.dst.shape, |s| &s.shape),
                c.dst.shape,
                c.dst.dtype
            )
        };
        let subs = self.windows_of(what, &shape, &walks, BOX_RANK as usize)?;
        let packed = dst.dtype.storage() == 2;
        let runs = packed && scatter;
        let key = PipelineKey::Layout {
            iota,
            dtype: dst.dtype,
            runs,
        };
        for sub in subs {
            let (mut sh, st) = squeeze(&sub.shape, &[&walks[0].strides, &walks[1].strides]);
            let (mut ds, mut ss) = (st[0].clone(), st[1].clone());
            if runs && ds.last() != Some(&1) {
                // Runs of one element (the innermost dims were 1 or strided).
                sh.push(1);
                ds.push(1);
                ss.push(0);
            }
            if sh.is_empty() {
                sh.push(1);
                ds.push(0);
                ss.push(0);
            }
            let count: u64 = sh.iter().product();
            let (db, sb) = (sub.binds[0], sub.binds[1]);
            let (items, run_words) = if !packed {
                (count, 0)
            } else if runs {
                let len = *sh.last().expect("a dim");
                let words = len / 2 + 1;
                (count / len * words, words)
            } else {
                let lo = db.elem_off as u64;
                ((lo + count).div_ceil(2) - lo / 2, 0)
            };
            let src_binding = if iota {
                self.dummy(1)
            } else {
                Self::bind_at(sloc.buf, sb)
            };
            let bindings = vec![src_binding, Self::bind_at(dst.buf, db)];
            let mut block = vec![
                items as u32,
                sh.len() as u32,
                db.elem_off,
                sb.elem_off,
                count as u32,
                run_words as u32,
                0,
                0,
            ];
            block.extend(vec8(&sh));
            block.extend(vec8(&ds));
            block.extend(vec8(&ss));
            self.dispatch_1d(key, bindings, block, items);
        }
        Ok(())
    }

    /// A dense copy of `src` (shape `shape`) with its dims permuted by `perm` into a
    /// scratch region of this op.
    fn transposed(&mut self, c: &Compute, src: Loc, shape: &[u64], perm: &[usize]) -> Result<Loc> {
        let st = row_major(shape);
        let to: Vec<u64> = perm.iter().map(|&p| shape[p]).collect();
        let out = self.scratch_loc(to.iter().product(), src.dtype);
        let swalk = src.walk(0, perm.iter().map(|&p| st[p]).collect(), 0);
        self.layout(c, &to, out.dense(&to), out, swalk, src, false, false)?;
        Ok(out)
    }

    /// A reduction (`op` Some: its code) or an arg reduction (its op read from `c`)
    /// over `axes` (`compute_reduce.wgsl`); 16-bit results through an f32 scratch and a
    /// convert.
    fn reduce(
        &mut self,
        c: &Compute,
        src: Loc,
        dst: Loc,
        axes: &[usize],
        op: Option<u32>,
    ) -> Result<()> {
        let s = &c.srcs[0];
        let mut shape = shape64(&s.shape);
        let mut src = src;
        let mut axes = axes.to_vec();
        let arg_op = match &c.kind {
            ComputeKind::ArgReduce { op, .. } => reduction_code(*op),
            _ => 0,
        };
        let mut st = row_major(&shape);
        let mut kept_dims: Vec<usize> = (0..shape.len()).filter(|i| !axes.contains(i)).collect();
        let group_walk = |shape: &[u64], st: &[u64], axes: &[usize]| {
            let gs: Vec<u64> = axes.iter().map(|&a| shape[a]).collect();
            let mut w = vec![Walk {
                width: 4,
                origin: 0,
                start: 0,
                strides: axes.iter().map(|&a| st[a]).collect(),
                extra: 0,
            }];
            let g = collapse(&gs, &mut w, None);
            (g, w.remove(0).strides)
        };
        let (mut gshape, mut gstride) = group_walk(&shape, &st, &axes);
        if gshape.len() > BOX_RANK as usize {
            // Too many separate runs of reduced axes: move them innermost first.
            let mut perm = kept_dims.clone();
            perm.extend(&axes);
            src = self.transposed(c, src, &shape, &perm)?;
            shape = perm.iter().map(|&p| shape[p]).collect();
            let r = kept_dims.len();
            axes = (r..shape.len()).collect();
            kept_dims = (0..r).collect();
            st = row_major(&shape);
            (gshape, gstride) = group_walk(&shape, &st, &axes);
        }
        let group: u64 = gshape.iter().product();
        let extra: u64 = if group == 0 {
            0
        } else {
            gshape
                .iter()
                .zip(&gstride)
                .map(|(&n, &s)| (n - 1) * s)
                .sum()
        };
        let out_shape: Vec<u64> = kept_dims.iter().map(|&k| shape[k]).collect();
        let n: u64 = out_shape.iter().product();
        let out = if dst.dtype.storage() == 2 {
            self.scratch_loc(n, DType::F32)
        } else {
            dst
        };
        let mut walks = vec![
            out.dense(&out_shape),
            src.walk(0, kept_dims.iter().map(|&k| st[k]).collect(), extra),
        ];
        let box_shape = collapse(&out_shape, &mut walks, None);
        let what = || format!("{} of {:?} {} over {:?}", c.kind, s.shape, s.dtype, axes);
        let subs = self.windows_of(what, &box_shape, &walks, BOX_RANK as usize)?;
        let per_group = group >= PER_GROUP;
        let key = PipelineKey::Reduce {
            arg: op.is_none(),
            op: op.unwrap_or(arg_op),
            src: src.dtype,
            per_group,
        };
        for sub in subs {
            let (sh, st2) = squeeze(&sub.shape, &[&walks[1].strides]);
            let count: u64 = sub.shape.iter().product();
            let (db, sb) = (sub.binds[0], sub.binds[1]);
            let bindings = vec![Self::bind_at(src.buf, sb), Self::bind_at(out.buf, db)];
            let mut block = vec![
                count as u32,
                sh.len() as u32,
                gshape.len() as u32,
                group as u32,
                db.elem_off,
                sb.elem_off,
                0,
                0,
            ];
            block.extend(vec8(&sh));
            block.extend(vec8(&st2[0]));
            block.extend(vec8(&gshape));
            block.extend(vec8(&gstride));
            if per_group {
                let x = count.min(self.limits.max_workgroups as u64);
                let y = count.div_ceil(x).min(self.limits.max_workgroups as u64);
                self.dispatch_3d(key, bindings, block, [x as u32, y as u32, 1]);
            } else {
                self.dispatch_1d(key, bindings, block, count);
            }
        }
        if out.buf != dst.buf || out.origin != dst.origin {
            self.elementwise(EW_CONVERT, 0, &[(out, false)], dst, n)?;
        }
        Ok(())
    }

    /// `dot_general` as batched matrix products (`compute_matmul.wgsl`).
    fn dot(&mut self, c: &Compute, lhs: Loc, rhs: Loc, dst: Loc) -> Result<()> {
        let ComputeKind::Dot(dims) = &c.kind else {
            unreachable!("a dot")
        };
        let (l, r) = (&c.srcs[0], &c.srcs[1]);
        let (ls, rs) = (shape64(&l.shape), shape64(&r.shape));
        let size = |s: &[u64], ks: &[usize]| ks.iter().map(|&k| s[k]).product::<u64>();
        let nb = size(&ls, &dims.lhs_batch);
        let k = size(&ls, &dims.lhs_contract);
        let free = |n: usize, batch: &[usize], contract: &[usize]| {
            (0..n)
                .filter(|i| !batch.contains(i) && !contract.contains(i))
                .collect::<Vec<_>>()
        };
        let lf = free(ls.len(), &dims.lhs_batch, &dims.lhs_contract);
        let rf = free(rs.len(), &dims.rhs_batch, &dims.rhs_contract);
        let m = size(&ls, &lf);
        let n = size(&rs, &rf);
        if k == 0 {
            self.op(&DataOp::Fill {
                dst: c.dst.view,
                bits: 0,
            })?;
            return Ok(());
        }
        // Each operand as [batch, rows, cols] strides, or transposed into that order.
        let groups = |shape: &[u64], order: [&[usize]; 3]| -> Option<[u64; 3]> {
            let st = row_major(shape);
            let mut out = [0u64; 3];
            for (g, dims) in order.iter().enumerate() {
                let live: Vec<usize> = dims.iter().copied().filter(|&d| shape[d] != 1).collect();
                for w in live.windows(2) {
                    if st[w[0]] != st[w[1]] * shape[w[1]] {
                        return None;
                    }
                }
                out[g] = live.last().map_or(0, |&d| st[d]);
            }
            Some(out)
        };
        let lorder = [&dims.lhs_batch[..], &lf[..], &dims.lhs_contract[..]];
        let rorder = [&dims.rhs_batch[..], &dims.rhs_contract[..], &rf[..]];
        let (a, sa) = match groups(&ls, lorder) {
            Some(s) => (lhs, s),
            None => {
                let perm: Vec<usize> = lorder.concat();
                (self.transposed(c, lhs, &ls, &perm)?, [m * k, k, 1])
            }
        };
        let (b, sb) = match groups(&rs, rorder) {
            Some(s) => (rhs, s),
            None => {
                let perm: Vec<usize> = rorder.concat();
                (self.transposed(c, rhs, &rs, &perm)?, [k * n, n, 1])
            }
        };
        let total = nb * m * n;
        let out = if dst.dtype.storage() == 2 {
            self.scratch_loc(total, DType::F32)
        } else {
            dst
        };
        let sc = [m * n, n, 1];
        let walks = vec![
            a.walk(0, vec![sa[0], sa[1], 0], (k - 1) * sa[2]),
            b.walk(0, vec![sb[0], 0, sb[2]], (k - 1) * sb[1]),
            out.walk(0, sc.to_vec(), 0),
        ];
        let what = || format!("dot_general of {:?} and {:?} {}", l.shape, r.shape, l.dtype);
        let subs = self.windows_of(what, &[nb, m, n], &walks, 3)?;
        let key = PipelineKey::Matmul { input: l.dtype };
        let max = self.limits.max_workgroups as u64;
        for sub in subs {
            let [sbz, sm, sn] = [sub.shape[0], sub.shape[1], sub.shape[2]];
            let (ab, bb, cb) = (sub.binds[0], sub.binds[1], sub.binds[2]);
            let bindings = vec![
                Self::bind_at(a.buf, ab),
                Self::bind_at(b.buf, bb),
                Self::bind_at(out.buf, cb),
            ];
            let mut block = vec![
                sbz as u32,
                sm as u32,
                sn as u32,
                k as u32,
                ab.elem_off,
                bb.elem_off,
                cb.elem_off,
                0,
            ];
            block.extend([sa[0], sa[1], sa[2], 0].map(|x| x as u32));
            block.extend([sb[0], sb[1], sb[2], 0].map(|x| x as u32));
            block.extend([sc[0], sc[1], sc[2], 0].map(|x| x as u32));
            let tiles = |x: u64| x.div_ceil(MM_TILE as u64).clamp(1, max) as u32;
            let groups = [tiles(sn), tiles(sm), sbz.clamp(1, max) as u32];
            self.dispatch_3d(key, bindings, block, groups);
        }
        if out.buf != dst.buf || out.origin != dst.origin {
            self.elementwise(EW_CONVERT, 0, &[(out, false)], dst, total)?;
        }
        Ok(())
    }

    /// A dispatch of `items` work items, one per invocation, grid-strided past the
    /// workgroup limit.
    pub(super) fn dispatch_1d(
        &mut self,
        key: PipelineKey,
        bindings: Vec<Bound>,
        block: Vec<u32>,
        items: u64,
    ) {
        let wg = items
            .div_ceil(WORKGROUP as u64)
            .clamp(1, self.limits.max_workgroups as u64);
        self.dispatch_3d(key, bindings, block, [wg as u32, 1, 1]);
    }
}

#[cfg(test)]
mod tests {
    use super::super::commands::tests::memory;
    use super::super::commands::{Command, PipelineKey, Recording};
    use super::super::limits::Limits;
    use super::super::lower_ops::lower;
    use crate::array::DType;
    use crate::ir::{
        Binary, Compute, ComputeKind, DataOp, DotDims, Memory, Operand, Reduction, View,
    };
    use std::sync::Arc;

    /// Fake limits: 1 KiB bindings, 256-byte alignment.
    const LIMITS: Limits = Limits {
        max_buffer: 1 << 20,
        max_binding: 1024,
        offset_align: 256,
        max_workgroups: 65535,
        storage_per_stage: 8,
    };

    fn operand(alloc: usize, offset: usize, shape: &[usize], dtype: DType) -> Operand {
        Operand {
            view: View::new(0, alloc, offset, shape.iter().product()),
            shape: shape.to_vec(),
            dtype,
        }
    }

    fn record(m: &Memory, kind: ComputeKind, srcs: Vec<Operand>, dst: Operand) -> Recording {
        let c = Compute::new(kind, srcs, dst).unwrap();
        lower(m, &[DataOp::Compute(Arc::new(c))], &LIMITS, true).unwrap()
    }

    fn pipelines(rec: &Recording) -> Vec<PipelineKey> {
        rec.commands
            .iter()
            .filter_map(|c| match c {
                Command::Dispatch(d) => Some(d.pipeline),
                _ => None,
            })
            .collect()
    }

    fn copies(rec: &Recording) -> usize {
        rec.commands
            .iter()
            .filter(|c| matches!(c, Command::Copy { .. }))
            .count()
    }

    #[test]
    fn elementwise_ops_run_in_aligned_windows_and_stage_only_overlapping_sources() {
        let m = memory(1, &[("values", DType::F32, 4096)]);
        let add = ComputeKind::Binary(Binary::Add);
        let (a, b) = (
            operand(0, 0, &[1000], DType::F32),
            operand(0, 1024, &[1000], DType::F32),
        );
        // Sources in the destination's buffer but apart from it: bound as they are.
        let rec = record(
            &m,
            add.clone(),
            vec![a.clone(), b.clone()],
            operand(0, 2048, &[1000], DType::F32),
        );
        assert_eq!(copies(&rec), 0);
        assert!(rec.dispatches() >= 4, "{} dispatches", rec.dispatches());
        for c in &rec.commands {
            let Command::Dispatch(d) = c else {
                panic!("{c:?}")
            };
            assert!(d
                .bindings
                .iter()
                .all(|b| b.size <= 1024 && b.offset % 256 == 0));
        }
        // A source that is the destination: copied to scratch first.
        let rec = record(&m, add, vec![a.clone(), b], a);
        assert_eq!(copies(&rec), 1);
        assert!(matches!(rec.commands[0], Command::Copy { .. }));
    }

    #[test]
    fn dots_transpose_operands_whose_dims_do_not_collapse_and_round_16_bit_results_once() {
        let m = memory(
            1,
            &[
                ("lhs", DType::BF16, 120),
                ("rhs", DType::BF16, 72),
                ("out", DType::BF16, 8),
            ],
        );
        let dims = DotDims {
            lhs_contract: vec![0, 2],
            rhs_contract: vec![2, 0],
            ..DotDims::default()
        };
        let rec = record(
            &m,
            ComputeKind::Dot(dims),
            vec![
                operand(0, 0, &[4, 5, 6], DType::BF16),
                operand(1, 0, &[6, 3, 4], DType::BF16),
            ],
            operand(2, 0, &[5, 3], DType::BF16),
        );
        let keys = pipelines(&rec);
        assert!(matches!(keys[0], PipelineKey::Layout { iota: false, .. }));
        assert!(matches!(keys[1], PipelineKey::Layout { iota: false, .. }));
        assert_eq!(keys[2], PipelineKey::Matmul { input: DType::BF16 });
        assert!(matches!(
            keys[3],
            PipelineKey::Elementwise {
                dst: DType::BF16,
                ..
            }
        ));
        assert_eq!(keys.len(), 4);
    }

    #[test]
    fn reshapes_are_copies_and_updates_in_place_write_only_their_window() {
        let m = memory(1, &[("ref", DType::F32, 64), ("values", DType::F32, 256)]);
        let rec = record(
            &m,
            ComputeKind::Reshape,
            vec![operand(1, 0, &[3, 5], DType::F32)],
            operand(1, 64, &[15], DType::F32),
        );
        // Within one buffer: through scratch, two buffer copies, no dispatch.
        assert_eq!((copies(&rec), rec.dispatches()), (2, 0));
        let whole = operand(0, 0, &[8, 8], DType::F32);
        let rec = record(
            &m,
            ComputeKind::UpdateSlice { start: vec![2, 3] },
            vec![whole.clone(), operand(1, 0, &[2, 4], DType::F32)],
            whole,
        );
        assert_eq!((copies(&rec), rec.dispatches()), (0, 1));
    }

    #[test]
    fn long_groups_take_a_workgroup_per_output_and_16_bit_sums_round_once() {
        let m = memory(1, &[("x", DType::F16, 2 * 200), ("y", DType::F16, 2)]);
        let rec = record(
            &m,
            ComputeKind::Reduce {
                op: Reduction::Sum,
                axes: vec![1],
            },
            vec![operand(0, 0, &[2, 200], DType::F16)],
            operand(1, 0, &[2], DType::F16),
        );
        let keys = pipelines(&rec);
        assert_eq!(
            keys[0],
            PipelineKey::Reduce {
                arg: false,
                op: super::super::codes::REDUCE_SUM,
                src: DType::F16,
                per_group: true
            }
        );
        assert!(matches!(
            keys[1],
            PipelineKey::Elementwise {
                dst: DType::F16,
                ..
            }
        ));
        let Command::Dispatch(d) = &rec.commands[0] else {
            panic!()
        };
        assert_eq!(d.workgroups, [2, 1, 1]);
    }
}
