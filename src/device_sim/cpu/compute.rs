//! The CPU twin of every compute op: source elements in, destination elements out, as
//! 32-bit words ([`DType::bits_of`]'s form). Floats compute in f32 (16-bit ones widened
//! and rounded once to nearest even, as XLA does on a CPU), integers in i32 wrapping to
//! their width; matrix products through the `gemm` crate on every core. Elementwise
//! ops run block by block through [`super::lanes`] (as a fused region's do); the others
//! write their destination directly, with index patterns from [`super::layout`].

use super::amx;
use super::extrema::Extreme;
use super::lanes::{self, BLOCK};
use super::layout::{gather, scatter, strides, transpose};
pub use super::operand::Src;
use crate::array::DType;
use crate::ir::{Compute, ComputeKind, DotDims, Operand, Reduction};
use pulp::{Simd, WithSimd};
use std::borrow::Cow;

/// The destination's words of `c`, from its sources' words (`srcs[i]` holds the
/// elements of `c.srcs[i]`, row-major).
pub fn compute(c: &Compute, srcs: &[&[u32]]) -> Vec<u32> {
    let mut out = vec![0u32; c.dst.numel()];
    compute_into(c, srcs, &mut out);
    out
}

/// [`compute`] into `out` (the destination's `numel` words; for an update of a slice,
/// the words it starts from are `srcs[0]`, copied in first unless `out` already holds
/// them, which the caller says by passing `srcs[0]` empty).
pub fn compute_into(c: &Compute, srcs: &[&[u32]], out: &mut [u32]) {
    let d = &c.dst;
    match &c.kind {
        ComputeKind::Unary(_)
        | ComputeKind::Binary(_)
        | ComputeKind::Compare(_)
        | ComputeKind::Select
        | ComputeKind::Convert => pulp::Arch::new().dispatch(Elementwise { c, srcs, out }),
        ComputeKind::Broadcast { dims } => {
            let s = &c.srcs[0];
            let st = crate::device_sim::fuse::Pattern::strides(&s.shape, dims, &d.shape);
            gather(srcs[0], &st, &d.shape, 0, out);
        }
        ComputeKind::Reshape | ComputeKind::Bitcast => out.copy_from_slice(srcs[0]),
        ComputeKind::Constant(words) => out.copy_from_slice(words),
        ComputeKind::Transpose { perm } => transpose(srcs[0], &c.srcs[0].shape, perm, out),
        ComputeKind::Iota { dim } => {
            let st = strides(&d.shape);
            let (inner, size) = (st[*dim], d.shape[*dim]);
            for (i, o) in out.iter_mut().enumerate() {
                *o = d.dtype.bits_of(((i / inner) % size) as f64);
            }
        }
        ComputeKind::Slice {
            start,
            strides: step,
        } => {
            let from = strides(&c.srcs[0].shape);
            let base: usize = start.iter().zip(&from).map(|(a, s)| a * s).sum();
            let by: Vec<usize> = step.iter().zip(&from).map(|(k, s)| k * s).collect();
            gather(&srcs[0][base..], &by, &d.shape, 0, out);
        }
        ComputeKind::UpdateSlice { start } => {
            if !srcs[0].is_empty() {
                out.copy_from_slice(srcs[0]);
            }
            let into = strides(&d.shape);
            let base: usize = start.iter().zip(&into).map(|(a, s)| a * s).sum();
            scatter(srcs[1], &c.srcs[1].shape, &into, &mut out[base..]);
        }
        ComputeKind::Concat { dim } => {
            let outer: usize = d.shape[..*dim].iter().product();
            let mut at = 0;
            for o in 0..outer {
                for (k, s) in c.srcs.iter().enumerate() {
                    let block: usize = s.shape[*dim..].iter().product();
                    out[at..at + block].copy_from_slice(&srcs[k][o * block..(o + 1) * block]);
                    at += block;
                }
            }
        }
        ComputeKind::Reduce { op, axes } => reduce(*op, &c.srcs[0], axes, srcs[0], d.dtype, out),
        ComputeKind::ArgReduce { op, axis } => arg_reduce(*op, &c.srcs[0], *axis, srcs[0], out),
        ComputeKind::Dot(_) => dot_into(c, Src::Words(srcs[0]), Src::Words(srcs[1]), out),
    }
}

/// Dot `c` into `out` (the destination's words) from operands `l` and `r`.
pub fn dot_into(c: &Compute, l: Src<'_>, r: Src<'_>, out: &mut [u32]) {
    let ComputeKind::Dot(dims) = &c.kind else {
        unreachable!("a dot")
    };
    dot(dims, &c.srcs[0], &c.srcs[1], l, r, &c.dst, out);
}

/// An elementwise op a block at a time: sources widened to values (a scalar spread over
/// the block), the op, the result narrowed to its stored form.
struct Elementwise<'a> {
    c: &'a Compute,
    srcs: &'a [&'a [u32]],
    out: &'a mut [u32],
}

impl WithSimd for Elementwise<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: Simd>(self, _: S) {
        elementwise(self.c, self.srcs, self.out);
    }
}

#[inline(always)]
fn elementwise(c: &Compute, srcs: &[&[u32]], out: &mut [u32]) {
    let n = c.dst.numel();
    let mut vals = vec![[0u32; BLOCK]; c.srcs.len()];
    let mut res = [0u32; BLOCK];
    let mut start = 0;
    while start < n {
        let m = BLOCK.min(n - start);
        for (k, (o, w)) in c.srcs.iter().zip(srcs).enumerate() {
            let v = &mut vals[k][..m];
            if o.shape.is_empty() && n != 1 {
                let mut one = [0u32; 1];
                lanes::widen(o.dtype, &w[..1], &mut one);
                v.fill(one[0]);
            } else {
                lanes::widen(o.dtype, &w[start..start + m], v);
            }
        }
        let r = &mut res[..m];
        let a = |k: usize| &vals[k][..m];
        match &c.kind {
            ComputeKind::Unary(u) => lanes::unary(*u, c.dst.dtype, a(0), r),
            ComputeKind::Binary(b) => lanes::binary(*b, c.dst.dtype, a(0), a(1), r),
            ComputeKind::Compare(op) => lanes::compare(*op, c.srcs[0].dtype, a(0), a(1), r),
            ComputeKind::Select => lanes::select(a(0), a(1), a(2), r),
            ComputeKind::Convert => lanes::convert(c.srcs[0].dtype, c.dst.dtype, a(0), r),
            _ => unreachable!("elementwise kinds only"),
        }
        lanes::narrow(c.dst.dtype, r, &mut out[start..start + m]);
        start += m;
    }
}

/// The f32 values of float `words` of dtype `t`: the words themselves for f32.
fn f32s(t: DType, words: &[u32]) -> Cow<'_, [f32]> {
    src_f32s(t, Src::Words(words))
}

/// [`f32s`] of a dot's operand.
fn src_f32s(t: DType, src: Src<'_>) -> Cow<'_, [f32]> {
    if let (DType::F32, Src::Words(words)) = (t, src) {
        return Cow::Borrowed(bytemuck::cast_slice(words));
    }
    let mut v = vec![0u32; src.len()];
    src.widen(t, 0, src.len(), &mut v);
    Cow::Owned(bytemuck::cast_vec(v))
}

/// Integer or bool words as i32 values (they are stored widened already).
fn i32s(words: &[u32]) -> &[i32] {
    bytemuck::cast_slice(words)
}

/// For each kept index (row-major over the kept dims) the offset of its first reduced
/// element, and the offsets of the reduced elements from there, in index order.
fn groups(shape: &[usize], axes: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let s = strides(shape);
    let kept: Vec<usize> = (0..shape.len()).filter(|i| !axes.contains(i)).collect();
    let offsets = |dims: &[usize]| -> Vec<usize> {
        let mut out = vec![0usize];
        for &d in dims {
            let (size, step) = (shape[d], s[d]);
            out = out
                .iter()
                .flat_map(|&o| (0..size).map(move |i| o + i * step))
                .collect();
        }
        out
    };
    (offsets(&kept), offsets(axes))
}

/// Calls `$body` with `$w` bound to the widening of float dtype `$t`'s words to f32
/// values (the lanes' widening, one word at a time), a closure of its own per dtype
/// so that the loops that widen inline it.
macro_rules! widening {
    ($t:expr, |$w:ident| $body:expr) => {
        match $t {
            DType::BF16 => {
                let $w = |x: u32| f32::from_bits(x << 16);
                $body
            }
            DType::F16 => {
                let $w = |x: u32| lanes::f16_value(x & 0xffff);
                $body
            }
            _ => {
                let $w = f32::from_bits;
                $body
            }
        }
    };
}
pub(super) use widening;

/// A float reduction of the groups of words `x` (of a dtype widened by `w`) into
/// `out`'s values: sums in f32 (sixteen running partial sums per group, added at the
/// end; the order of a sum is XLA's to choose too), max and min as XLA's (NaN if any
/// is). The words are widened as they are read (no widened copy of the operand).
fn reduce_f32<W: Fn(u32) -> f32 + Copy + Sync + Send>(
    op: Reduction,
    x: &[u32],
    w: W,
    shape: &[usize],
    axes: &[usize],
    out: &mut [f32],
) {
    match op {
        Reduction::Sum => fold(x, w, shape, axes, out, 0.0, |a, b| a + b, None),
        Reduction::Max => fold(
            x,
            w,
            shape,
            axes,
            out,
            f32::NEG_INFINITY,
            lanes::fmax,
            Some(true),
        ),
        Reduction::Min => fold(
            x,
            w,
            shape,
            axes,
            out,
            f32::INFINITY,
            lanes::fmin,
            Some(false),
        ),
    }
}

/// [`reduce_f32`] of one operator `f` with identity `init`; `extreme` says when it is
/// max (`Some(true)`) or min, which groups of adjacent words fold as [`Extreme`]s.
#[allow(clippy::too_many_arguments)]
fn fold<W: Fn(u32) -> f32 + Copy + Sync + Send, F: Fn(f32, f32) -> f32 + Copy + Sync + Send>(
    x: &[u32],
    w: W,
    shape: &[usize],
    axes: &[usize],
    out: &mut [f32],
    init: f32,
    f: F,
    extreme: Option<bool>,
) {
    let r = shape.len();
    let n = axes.len();
    let trailing = n > 0 && axes.iter().enumerate().all(|(i, &a)| a == r - n + i);
    let leading = n > 0 && axes.iter().enumerate().all(|(i, &a)| a == i);
    let k: usize = axes.iter().map(|&a| shape[a]).product();
    if trailing || leading {
        // Each group is `k` adjacent elements, or element `j` of each of `k` rows:
        // over the cores in runs of whole groups (or of columns) when large.
        let rows = (leading && !trailing).then_some(out.len());
        let arch = pulp::Arch::new();
        let run = |x: &[u32], out: &mut [f32], at: usize| {
            arch.dispatch(Fold {
                x,
                w,
                out,
                init,
                f,
                k,
                rows: rows.map(|inner| (inner, at)),
                extreme,
            })
        };
        if !super::spread::worth(x.len() as f64 * REDUCE_NS) || out.len() < 2 {
            run(x, out, 0);
            return;
        }
        let threads = rayon::current_num_threads();
        let per = out.len().div_ceil(threads * 4);
        let mode = super::float_mode::FloatMode::current();
        super::spread::spread_chunks(out, per, threads - 1, &|c, o| {
            mode.run(|| match rows {
                // Columns `at..`: every row's run of them.
                Some(_) => run(x, o, c * per),
                None => run(&x[c * per * k..][..o.len() * k], o, 0),
            })
        });
        return;
    }
    let (bases, offsets) = groups(shape, axes);
    for (o, &b) in out.iter_mut().zip(&bases) {
        *o = offsets.iter().fold(init, |a, &j| f(a, w(x[b + j])));
    }
}

/// Partial results a row's fold keeps (element `j` of a row goes to partial `j % FOLD_LANES`
/// until the last whole run of them; the partials are then folded in order, and the
/// rest of the row after them).
pub(super) const FOLD_LANES: usize = 16;

/// A float reduction of adjacent runs of `k` words (`rows: None`: one per output)
/// or of `k` rows (`rows: Some((inner, at))`, rows of `inner` elements: output `j`
/// folds element `at + j` of each), each word widened by `w`.
struct Fold<'a, W, F> {
    x: &'a [u32],
    w: W,
    out: &'a mut [f32],
    init: f32,
    f: F,
    k: usize,
    rows: Option<(usize, usize)>,
    /// Max (`Some(true)`) or min: groups of adjacent words scanned as [`Extreme`]s.
    extreme: Option<bool>,
}

impl<W: Fn(u32) -> f32 + Copy, F: Fn(f32, f32) -> f32 + Copy> WithSimd for Fold<'_, W, F> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: Simd>(self, _: S) {
        let Fold {
            x,
            w,
            out,
            init,
            f,
            k,
            rows,
            extreme,
        } = self;
        if let Some((inner, at)) = rows {
            out.fill(init);
            for row in x.chunks_exact(inner.max(1)).take(k) {
                for (o, &v) in out.iter_mut().zip(&row[at..]) {
                    *o = f(*o, w(v));
                }
            }
            return;
        }
        if k == 0 {
            out.fill(init);
            return;
        }
        if let Some(max) = extreme {
            for (o, g) in out.iter_mut().zip(x.chunks_exact(k)) {
                let mut e = Extreme::new(max);
                e.scan(g, w);
                *o = e.value();
            }
            return;
        }
        for (o, g) in out.iter_mut().zip(x.chunks_exact(k)) {
            let mut acc = [init; FOLD_LANES];
            let mut it = g.chunks_exact(FOLD_LANES);
            for c in &mut it {
                for j in 0..FOLD_LANES {
                    acc[j] = f(acc[j], w(c[j]));
                }
            }
            let mut total = acc.into_iter().fold(init, f);
            for &v in it.remainder() {
                total = f(total, w(v));
            }
            *o = total;
        }
    }
}

/// Nanoseconds one core takes per multiply-add of an f32 `gemm`, for
/// [`super::spread::worth`] (`bench/ops.py` on this project's Xeon: a 1024 x 1024 x 1024
/// product in about 5 ms on two cores).
const GEMM_NS: f64 = 0.01;

/// Nanoseconds one core takes per element of a reduction, for [`super::spread::worth`]
/// (`bench/ops.py`, f32 row sums of 2048 x 2048 in about 1 ms on two cores).
const REDUCE_NS: f64 = 0.5;

fn reduce(op: Reduction, o: &Operand, axes: &[usize], src: &[u32], dt: DType, out: &mut [u32]) {
    let t = o.dtype;
    if t.is_float() {
        let mut acc = vec![0f32; out.len()];
        widening!(t, |w| reduce_f32(op, src, w, &o.shape, axes, &mut acc));
        let acc: &[u32] = bytemuck::cast_slice(&acc);
        // Rounded once to a 16-bit dtype.
        let mut vals = vec![0u32; out.len()];
        lanes::convert(DType::F32, dt, acc, &mut vals);
        lanes::narrow(dt, &vals, out);
        return;
    }
    let x = i32s(src);
    let (bases, offsets) = groups(&o.shape, axes);
    for (w, &b) in out.iter_mut().zip(&bases) {
        let vals = offsets.iter().map(|&k| x[b + k]);
        let r = match op {
            Reduction::Sum => vals.fold(0i32, i32::wrapping_add),
            Reduction::Max => vals.max().unwrap_or(i32::MIN),
            Reduction::Min => vals.min().unwrap_or(i32::MAX),
        };
        let mut one = [r as u32];
        lanes::wrap(dt, &mut one);
        *w = one[0];
    }
}

fn arg_reduce(op: Reduction, o: &Operand, axis: usize, src: &[u32], out: &mut [u32]) {
    let t = o.dtype;
    let (bases, offsets) = groups(&o.shape, &[axis]);
    let vals = f32s(if t.is_float() { t } else { DType::F32 }, src);
    for (w, &b) in out.iter_mut().zip(&bases) {
        let mut best = 0usize;
        for (i, &k) in offsets.iter().enumerate().skip(1) {
            let better = if t.is_float() {
                let (c, n) = (vals[b + offsets[best]], vals[b + k]);
                // The first NaN wins and stays.
                !c.is_nan() && (n.is_nan() || if op == Reduction::Max { n > c } else { n < c })
            } else {
                let (c, n) = (src[b + offsets[best]] as i32, src[b + k] as i32);
                if op == Reduction::Max {
                    n > c
                } else {
                    n < c
                }
            };
            if better {
                best = i;
            }
        }
        *w = best as u32;
    }
}

/// `x` permuted so that the dims `first` come first (in order), then the others; `x`
/// itself when that is its order already.
fn move_front<'a>(words: &'a [u32], shape: &[usize], first: &[usize]) -> Cow<'a, [u32]> {
    let mut perm: Vec<usize> = first.to_vec();
    perm.extend((0..shape.len()).filter(|i| !first.contains(i)));
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Cow::Borrowed(words);
    }
    let mut out = vec![0u32; words.len()];
    transpose(words, shape, &perm, &mut out);
    Cow::Owned(out)
}

/// How an operand of a dot is laid out as `batch` matrices: the strides of its batch,
/// row and column indices, when each of those is one run of adjacent dimensions in the
/// operand's order (else it is transposed first).
fn matrix_strides(
    shape: &[usize],
    batch: &[usize],
    rows: &[usize],
    cols: &[usize],
) -> Option<[usize; 3]> {
    let s = strides(shape);
    let group = |dims: &[usize]| -> Option<usize> {
        if dims.is_empty() {
            return Some(0);
        }
        let adjacent = dims.windows(2).all(|w| w[1] == w[0] + 1);
        adjacent.then(|| s[*dims.last().expect("not empty")])
    };
    Some([group(batch)?, group(rows)?, group(cols)?])
}

#[allow(clippy::too_many_arguments)]
fn dot(
    dims: &DotDims,
    l: &Operand,
    r: &Operand,
    lw: Src<'_>,
    rw: Src<'_>,
    d: &Operand,
    out: &mut [u32],
) {
    let size = |shape: &[usize], ks: &[usize]| ks.iter().map(|&k| shape[k]).product::<usize>();
    let batch = size(&l.shape, &dims.lhs_batch);
    let k = size(&l.shape, &dims.lhs_contract);
    let m = l.numel() / (batch * k).max(1);
    let n = r.numel() / (batch * k).max(1);
    let free = |shape: &[usize], b: &[usize], c: &[usize]| -> Vec<usize> {
        (0..shape.len())
            .filter(|i| !b.contains(i) && !c.contains(i))
            .collect()
    };
    let lfree = free(&l.shape, &dims.lhs_batch, &dims.lhs_contract);
    let rfree = free(&r.shape, &dims.rhs_batch, &dims.rhs_contract);
    let t = d.dtype;
    if !t.is_float() {
        let (Src::Words(lw), Src::Words(rw)) = (lw, rw) else {
            unreachable!("a dot of integers reads words ([`super::halves::dot_reads`])")
        };
        // Left as [batch, m, k], right as [batch, k, n]: each output row is a sum of
        // right rows scaled by the left row's elements.
        let mut lf = dims.lhs_batch.clone();
        lf.extend(&lfree);
        lf.extend(&dims.lhs_contract);
        let mut rf = dims.rhs_batch.clone();
        rf.extend(&dims.rhs_contract);
        rf.extend(&rfree);
        let (lt, rt) = (move_front(lw, &l.shape, &lf), move_front(rw, &r.shape, &rf));
        let (li, ri) = (i32s(&lt), i32s(&rt));
        let mut acc = vec![0i32; n];
        for b in 0..batch {
            for i in 0..m {
                acc.fill(0);
                for p in 0..k {
                    let a = li[(b * m + i) * k + p];
                    let row = &ri[(b * k + p) * n..(b * k + p + 1) * n];
                    for (x, &y) in acc.iter_mut().zip(row) {
                        *x = x.wrapping_add(a.wrapping_mul(y));
                    }
                }
                let dst = &mut out[(b * m + i) * n..(b * m + i + 1) * n];
                dst.copy_from_slice(bytemuck::cast_slice(&acc));
                lanes::wrap(t, dst);
            }
        }
        return;
    }
    // Floats: f32 values (16-bit ones widened once), multiplied in place of their
    // layout where it is a strided matrix, else after a transpose.
    let ls = matrix_strides(&l.shape, &dims.lhs_batch, &lfree, &dims.lhs_contract);
    let rs = matrix_strides(&r.shape, &dims.rhs_batch, &dims.rhs_contract, &rfree);
    let batch_ordered = dims.lhs_batch.windows(2).all(|w| w[0] < w[1])
        && dims.rhs_batch.windows(2).all(|w| w[0] < w[1]);
    if let (Some(ls), Some(rs)) = (ls, rs) {
        let tiles = l.dtype == DType::BF16
            && r.dtype == DType::BF16
            && matches!(t, DType::F32 | DType::BF16)
            && batch_ordered
            && amx::usable(m, k, n);
        if tiles {
            let matrix = |src, s: [usize; 3], b: usize| amx::Bf16Matrix {
                src,
                off: b * s[0],
                row: s[1],
                col: s[2],
            };
            into_dst(t, out, batch * m * n, |acc| {
                for (b, c) in acc.chunks_exact_mut(m * n).enumerate() {
                    amx::matmul(matrix(lw, ls, b), matrix(rw, rs, b), c, m, k, n);
                }
            });
            return;
        }
    }
    let rows_apart = ls.is_some_and(|s| s[1] == k && s[2] == 1 && (batch == 1 || s[0] == m * k));
    if t == DType::F32
        && l.dtype != DType::F32
        && batch_ordered
        && rows_apart
        && batch * m * k > WIDEN_BLOCK
    {
        if let Some(rs) = rs {
            let rv = src_f32s(r.dtype, rw);
            dot_widening_rows(
                lw,
                l.dtype,
                &rv,
                rs,
                bytemuck::cast_slice_mut(out),
                [batch, m, k, n],
            );
            return;
        }
    }
    let (lv, rv) = (src_f32s(l.dtype, lw), src_f32s(r.dtype, rw));
    let (lv, ls) = match ls.filter(|_| batch_ordered) {
        Some(s) => (lv, s),
        None => {
            let mut lf = dims.lhs_batch.clone();
            lf.extend(&lfree);
            lf.extend(&dims.lhs_contract);
            let words: &[u32] = bytemuck::cast_slice(&lv);
            let t = move_front(words, &l.shape, &lf).into_owned();
            (Cow::Owned(bytemuck::cast_vec(t)), [m * k, k, 1])
        }
    };
    let (rv, rs) = match rs.filter(|_| batch_ordered) {
        Some(s) => (rv, s),
        None => {
            let mut rf = dims.rhs_batch.clone();
            rf.extend(&dims.rhs_contract);
            rf.extend(&rfree);
            let words: &[u32] = bytemuck::cast_slice(&rv);
            let t = move_front(words, &r.shape, &rf).into_owned();
            (Cow::Owned(bytemuck::cast_vec(t)), [k * n, n, 1])
        }
    };
    into_dst(t, out, batch * m * n, |acc| {
        for b in 0..batch {
            let a = Strided {
                data: &lv[b * ls[0]..],
                row: ls[1],
                col: ls[2],
            };
            let c = Strided {
                data: &rv[b * rs[0]..],
                row: rs[1],
                col: rs[2],
            };
            matmul_strided(a, c, &mut acc[b * m * n..(b + 1) * m * n], m, k, n);
        }
    });
}

/// Runs `f` on `len` f32 values that become `out`'s words of float dtype `t`: `out`
/// itself for f32, else a buffer rounded once into `out` after.
fn into_dst(t: DType, out: &mut [u32], len: usize, f: impl FnOnce(&mut [f32])) {
    if t == DType::F32 {
        return f(bytemuck::cast_slice_mut(&mut out[..len]));
    }
    let mut acc = vec![0f32; len];
    f(&mut acc);
    let words: &[u32] = bytemuck::cast_slice(&acc);
    let mut vals = vec![0u32; words.len()];
    lanes::convert(DType::F32, t, words, &mut vals);
    lanes::narrow(t, &vals, out);
}

/// Words of a 16-bit left operand widened at a time by [`dot_widening_rows`] (4 MiB of
/// f32: a whole operand widened at once was a fresh whole-array copy per dot, 32 MiB
/// and 8,000 page faults for a (16384, 512) bf16 one).
const WIDEN_BLOCK: usize = 1 << 20;

/// `c = a @ b` over `batch` matrices, `a` 16-bit (dtype `t`) with rows of `k` adjacent
/// words, `b` f32 with strides `rs`, `c` row-major f32: `a` widened a block of rows at a
/// time into one buffer (each element of `c` is the same sum as from `a` widened whole).
fn dot_widening_rows(
    a: Src<'_>,
    t: DType,
    b: &[f32],
    rs: [usize; 3],
    c: &mut [f32],
    [batch, m, k, n]: [usize; 4],
) {
    let rows = (WIDEN_BLOCK / k.max(1)).clamp(1, m.max(1));
    let mut block = vec![0u32; rows * k];
    for bi in 0..batch {
        for i0 in (0..m).step_by(rows) {
            let r = rows.min(m - i0);
            let (from, to) = ((bi * m + i0) * k, (bi * m + i0 + r) * k);
            let wide = &mut block[..r * k];
            a.widen(t, from, to, wide);
            let lhs = Strided {
                data: bytemuck::cast_slice(wide),
                row: k,
                col: 1,
            };
            let rhs = Strided {
                data: &b[bi * rs[0]..],
                row: rs[1],
                col: rs[2],
            };
            matmul_strided(
                lhs,
                rhs,
                &mut c[(bi * m + i0) * n..(bi * m + i0 + r) * n],
                r,
                k,
                n,
            );
        }
    }
}

/// A matrix in a slice: element `(i, j)` at `data[i * row + j * col]`.
#[derive(Clone, Copy)]
struct Strided<'a> {
    data: &'a [f32],
    row: usize,
    col: usize,
}

/// `c = a @ b` (m x k by k x n, `c` row-major), in f32, on every core.
fn matmul_strided(a: Strided, b: Strided, c: &mut [f32], m: usize, k: usize, n: usize) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c.fill(0.0);
        return;
    }
    let last = |s: Strided, r: usize, q: usize| (r - 1) * s.row + (q - 1) * s.col;
    assert!(a.data.len() > last(a, m, k) && b.data.len() > last(b, k, n) && c.len() >= m * n);
    let threads = rayon::current_num_threads();
    let par = if super::spread::worth((m * n * k) as f64 * GEMM_NS) {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    let spread = matches!(par, gemm::Parallelism::Rayon(_));
    let (a_ptr, b_ptr, c_ptr) = (
        a.data.as_ptr() as usize,
        b.data.as_ptr() as usize,
        c.as_mut_ptr() as usize,
    );
    // gemm's parts run on rayon's workers: in the caller's subnormal mode, as the
    // executor's own parts do.
    let mode = super::float_mode::FloatMode::current();
    let go = move || {
        let (a_ptr, b_ptr, c_ptr) = (a_ptr as *const f32, b_ptr as *const f32, c_ptr as *mut f32);
        // SAFETY: every element the strides reach is inside its slice, as asserted.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                c_ptr,
                1,
                n as isize,
                false,
                a_ptr,
                a.col as isize,
                a.row as isize,
                b_ptr,
                b.col as isize,
                b.row as isize,
                0.0f32,
                1.0f32,
                false,
                false,
                false,
                par,
            );
        }
    };
    if spread {
        mode.install(go);
    } else {
        go();
    }
}

/// `c = a @ b` for row-major `a` (m x k) and `b` (k x n), in f32, on every core.
pub fn matmul_f32(a: &[f32], b: &[f32], c: &mut [f32], m: usize, k: usize, n: usize) {
    let a = Strided {
        data: a,
        row: k,
        col: 1,
    };
    let b = Strided {
        data: b,
        row: n,
        col: 1,
    };
    matmul_strided(a, b, c, m, k, n);
}
