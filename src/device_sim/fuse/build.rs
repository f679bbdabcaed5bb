//! Building one region from the ops of one device that join it.

use super::later::Later;
use super::region::{Input, Instr, Output, Pattern, Reg, Region};
use super::Joins;
use crate::array::DType;
use crate::ir::{Allocation, Binary, ComputeKind, DataOp, ReduceOp, View};

/// A source of an elementwise op: a view holding `numel` elements of `dtype`, or a
/// scalar (rank 0) spread over the op's elements.
#[derive(Clone, Debug)]
pub(super) struct Src {
    view: View,
    dtype: DType,
    /// Rank 0: element 0 for every element of the op.
    scalar: bool,
}

/// What an elementwise op computes from its sources.
#[derive(Clone, Debug)]
enum Kind {
    /// An instruction on the sources' values (the operands' registers filled in).
    Instr(Instr),
    /// The source itself, under another name or shape (reshape, copy, a broadcast that
    /// adds unit dimensions, a load).
    Alias,
    /// `broadcast_in_dim` of the source into `into`.
    Broadcast {
        shape: Vec<usize>,
        dims: Vec<usize>,
        into: Vec<usize>,
    },
    /// A constant.
    Const { bits: u32 },
}

/// A data op a region can take: elementwise, on one device.
#[derive(Clone, Debug)]
pub(super) struct Elem {
    pub(super) device: usize,
    kind: Kind,
    srcs: Vec<Src>,
    dst: View,
    dst_dtype: DType,
}

/// Sums of fewer elements stay as they are: in the cache, a region's bookkeeping costs
/// more than the pass over memory it saves (psum at 4 KiB per device: 7 -> 11 us).
const SUM_JOINS_FROM: usize = 1 << 13;

/// True for the dtypes whose copies and sums join regions.
fn moves(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::I32 | DType::BF16)
}

/// True for a copy, a fill or an accumulate (what an executor runs best as it is,
/// alone).
pub(super) fn is_plain(op: &DataOp) -> bool {
    matches!(
        op,
        DataOp::Copy { .. } | DataOp::Fill { .. } | DataOp::Accumulate { .. }
    )
}

impl Elem {
    /// `op` as a region's op, or `None` when it is not elementwise on one device (or
    /// moves bits between allocations of different dtypes, as the staging area does).
    /// Sums join only when `sums` ([`super::Joins`]).
    pub(super) fn of(
        op: &DataOp,
        allocs: &[Allocation],
        staging: usize,
        sums: bool,
    ) -> Option<Elem> {
        match op {
            DataOp::Copy { src, dst } => {
                let dtype = allocs[dst.alloc()].dtype;
                let same = allocs[src.alloc()].dtype == dtype;
                (same && moves(dtype) && src.device() == dst.device() && src.alloc() != staging)
                    .then(|| Elem {
                        device: dst.device(),
                        kind: Kind::Alias,
                        srcs: vec![Src {
                            view: *src,
                            dtype,
                            scalar: false,
                        }],
                        dst: *dst,
                        dst_dtype: dtype,
                    })
            }
            DataOp::Fill { dst, bits } => (dst.alloc() != staging).then(|| Elem {
                device: dst.device(),
                kind: Kind::Const { bits: *bits },
                srcs: vec![],
                dst: *dst,
                dst_dtype: allocs[dst.alloc()].dtype,
            }),
            // A sum is an add of the destination and the source (the same function of
            // the same two values in the same order as the executor's accumulate), so a
            // copy into the source and the sum that reads it fuse (the copy's write then
            // often dropped as unread). Max and min stay as they are: their ties and
            // NaNs are the accumulate's own rules.
            DataOp::Accumulate {
                dst,
                src,
                op: ReduceOp::Sum,
                dtype,
            } if sums && dst.len() >= SUM_JOINS_FROM => {
                let same = [dst, src].iter().all(|v| allocs[v.alloc()].dtype == *dtype);
                let apart = ![dst, src].iter().any(|v| v.alloc() == staging);
                (same && moves(*dtype) && apart && src.len() == dst.len()).then(|| {
                    let operand = |view: &View| Src {
                        view: *view,
                        dtype: *dtype,
                        scalar: false,
                    };
                    Elem {
                        device: dst.device(),
                        kind: Kind::Instr(Instr::Binary(Binary::Add, *dtype, 0, 1)),
                        srcs: vec![operand(dst), operand(src)],
                        dst: *dst,
                        dst_dtype: *dtype,
                    }
                })
            }
            DataOp::Accumulate { .. } => None,
            DataOp::Compute(c) => {
                let srcs: Vec<Src> = c
                    .srcs
                    .iter()
                    .map(|o| Src {
                        view: o.view,
                        dtype: o.dtype,
                        scalar: o.shape.is_empty(),
                    })
                    .collect();
                let t = c.dst.dtype;
                let kind = match &c.kind {
                    ComputeKind::Unary(u) => Kind::Instr(Instr::Unary(*u, t, 0)),
                    ComputeKind::Binary(b) => Kind::Instr(Instr::Binary(*b, t, 0, 1)),
                    ComputeKind::Compare(op) => {
                        Kind::Instr(Instr::Compare(*op, c.srcs[0].dtype, 0, 1))
                    }
                    ComputeKind::Select => Kind::Instr(Instr::Select(0, 1, 2)),
                    // To its own dtype: the source as it is (a copy that may forward).
                    ComputeKind::Convert if c.srcs[0].dtype == t => Kind::Alias,
                    ComputeKind::Convert => Kind::Instr(Instr::Convert(c.srcs[0].dtype, t, 0)),
                    ComputeKind::Reshape => Kind::Alias,
                    ComputeKind::Broadcast { dims } => {
                        let s = &c.srcs[0];
                        if s.numel() == c.dst.numel() {
                            Kind::Alias
                        } else {
                            Kind::Broadcast {
                                shape: s.shape.clone(),
                                dims: dims.clone(),
                                into: c.dst.shape.clone(),
                            }
                        }
                    }
                    _ => return None,
                };
                // Only ops whose sources and destination are the views they read and
                // write whole.
                let whole = c.reads().len() == c.srcs.len()
                    && c.reads().iter().zip(&c.srcs).all(|(r, s)| *r == s.view)
                    && c.writes() == [c.dst.view];
                whole.then(|| Elem {
                    device: c.dst.view.device(),
                    kind,
                    srcs,
                    dst: c.dst.view,
                    dst_dtype: t,
                })
            }
        }
        .filter(|e| e.srcs.iter().all(|s| s.view.device() == e.device))
    }
}

/// A region being built: its program so far and which views its registers hold.
#[derive(Debug)]
pub(super) struct Builder {
    pub(super) device: usize,
    /// What may join it beyond elementwise ops ([`super::Joins::overwrites`] is read here).
    joins: Joins,
    /// Elements of its non-uniform registers (`None` while every register is uniform).
    n: Option<usize>,
    inputs: Vec<Input>,
    instrs: Vec<Instr>,
    regs: Vec<Reg>,
    /// Views whose elements are (exactly) a register's: loaded inputs and outputs.
    bound: Vec<(View, usize)>,
    /// The widened register of each raw one that has been widened.
    widened: Vec<(usize, usize)>,
    outputs: Vec<Output>,
    ops: Vec<usize>,
    /// The ops added, as added (to build the region again without its last).
    added: Vec<(usize, Elem)>,
}

/// How an op's source is had: a register of the region, or a new input.
enum Got {
    Reg(usize),
    New(Input),
}

impl Builder {
    pub(super) fn new(device: usize, joins: Joins) -> Self {
        Builder {
            device,
            joins,
            n: None,
            inputs: Vec::new(),
            instrs: Vec::new(),
            regs: Vec::new(),
            bound: Vec::new(),
            widened: Vec::new(),
            outputs: Vec::new(),
            ops: Vec::new(),
            added: Vec::new(),
        }
    }

    /// This region without its last op when that op is a copy that `op` (a schedule op
    /// that closes the region) neither reads, writes nor overwrites the source of, with
    /// that copy (index and op) to run after `op` instead: a copy into a buffer that
    /// the next region reads then joins that region, and its write can drop as unread
    /// (the ring's local copy before its accumulate). Otherwise this region as it is.
    pub(super) fn defer_last_copy(
        self,
        ops: &[DataOp],
        op: &DataOp,
        later: &Later,
    ) -> (Builder, Option<(usize, Elem)>) {
        let reads: Vec<View> = op.reads().chain(accumulated(op)).collect();
        let writes: Vec<View> = op.writes().collect();
        self.defer_last_copy_past(ops, &reads, &writes, later)
    }

    /// [`Builder::defer_last_copy`] past what reads `reads` and writes `writes` (an op,
    /// or the messages between two pieces of a partitioned run).
    pub(super) fn defer_last_copy_past(
        self,
        ops: &[DataOp],
        reads: &[View],
        writes: &[View],
        later: &Later,
    ) -> (Builder, Option<(usize, Elem)>) {
        let Some((last, _)) = self.added.last() else {
            return (self, None);
        };
        let copy = &ops[*last];
        if self.added.len() < 2
            || !matches!(copy, DataOp::Copy { .. })
            || touch(copy, reads, writes)
        {
            return (self, None);
        }
        let mut added = self.added;
        let deferred = added.pop();
        let mut b = Builder::new(self.device, self.joins);
        for (i, e) in &added {
            let joined = b.try_add(*i, e, later);
            debug_assert!(joined, "the ops joined this region in this order before");
        }
        (b, deferred)
    }

    /// Instructions so far.
    pub(super) fn len(&self) -> usize {
        self.instrs.len()
    }

    /// True when `op` touches an element this region reads or writes, one of them
    /// writing (it cannot run before the region, nor the region's later ops before it).
    pub(super) fn conflicts(&self, op: &DataOp) -> bool {
        self.conflicts_views(op.reads(), op.writes().chain(accumulated(op)))
    }

    /// [`Builder::conflicts`] for a reader of `reads` and writer of `writes`.
    pub(super) fn conflicts_views(
        &self,
        mut reads: impl Iterator<Item = View>,
        mut writes: impl Iterator<Item = View>,
    ) -> bool {
        let outs = || self.outputs.iter().map(|o| o.view);
        let reads_ours = reads.any(|r| outs().any(|w| w.overlaps(&r)));
        let writes_ours = writes.any(|w| {
            outs().any(|o| o.overlaps(&w)) || self.inputs.iter().any(|i| i.view.overlaps(&w))
        });
        reads_ours || writes_ours
    }

    /// How source `s` of an op with `numel` elements is read, or `None` when it cannot
    /// be (a view that overlaps one the region holds other than exactly, or a dtype
    /// other than the register's).
    fn source(&self, s: &Src, numel: usize) -> Option<Got> {
        if let Some(&(_, r)) = self.bound.iter().rev().find(|(v, _)| *v == s.view) {
            return (self.regs[r].dtype == s.dtype).then_some(Got::Reg(r));
        }
        if self.outputs.iter().any(|o| o.view.overlaps(&s.view)) {
            return None;
        }
        let pattern = if s.scalar && s.view.len() == 1 {
            Pattern::Scalar
        } else if s.view.len() == numel {
            Pattern::Full
        } else {
            return None;
        };
        Some(Got::New(Input {
            view: s.view,
            dtype: s.dtype,
            pattern,
        }))
    }

    /// Adds `op` (schedule index `index`); false, and nothing changed, when it cannot
    /// join this region.
    pub(super) fn try_add(&mut self, index: usize, e: &Elem, later: &Later) -> bool {
        if e.device != self.device {
            return false;
        }
        let numel = e.dst.len();
        // Sources first, all or nothing.
        let mut got = Vec::with_capacity(e.srcs.len());
        for s in &e.srcs {
            let g = match &e.kind {
                Kind::Broadcast { shape, dims, into } => match self.source(s, s.view.len()) {
                    Some(Got::Reg(r)) if self.regs[r].uniform => Some(Got::Reg(r)),
                    Some(Got::Reg(_)) => None,
                    Some(Got::New(_)) if s.view.len() == 1 => Some(Got::New(Input {
                        view: s.view,
                        dtype: s.dtype,
                        pattern: Pattern::Scalar,
                    })),
                    Some(Got::New(i)) => Some(Got::New(Input {
                        pattern: Pattern::Broadcast {
                            shape: shape.clone(),
                            dims: dims.clone(),
                            into: into.clone(),
                        },
                        ..i
                    })),
                    None => None,
                },
                _ => self.source(s, numel),
            };
            match g {
                Some(g) => got.push(g),
                None => return false,
            }
        }
        let uniform = got.iter().all(|g| match g {
            Got::Reg(r) => self.regs[*r].uniform,
            Got::New(i) => i.pattern == Pattern::Scalar,
        });
        // The region's element count: the op's, unless it makes one uniform element.
        let n = match (self.n, uniform) {
            (Some(n), false) if n != numel => return false,
            (Some(n), true) if numel != 1 && numel != n => return false,
            (None, _) if numel != 1 || !uniform => Some(numel),
            (n, _) => n,
        };
        // The destination: no view the region holds may overlap it other than exactly,
        // and no input read in a pattern other than element for element. Where
        // `overwrites` allows, an output may overlap it: one it covers, or one whose
        // other elements nothing reads later, is dropped; one wider than a uniform
        // element it is stays, and the element is stored after its blocks (`Joins`).
        let dst = e.dst;
        let single = uniform && dst.len() == 1 && n.is_some_and(|n| n > 1);
        let mut dropped = Vec::new();
        let mut clash = false;
        for v in self
            .bound
            .iter()
            .map(|(v, _)| v)
            .chain(self.outputs.iter().map(|o| &o.view))
        {
            if *v == dst || !v.overlaps(&dst) {
                continue;
            }
            if !self.joins.overwrites || !self.is_output(v) {
                clash = true;
                break;
            }
            if within(v, &dst) || later.unread_after(v, index, &dst) {
                dropped.push(*v);
            } else if !single {
                clash = true;
                break;
            }
        }
        let clash = clash
            || self
                .inputs
                .iter()
                .any(|i| i.view.overlaps(&dst) && (i.view != dst || i.pattern != Pattern::Full))
            || got.iter().any(|g| match g {
                Got::New(i) => {
                    i.view.overlaps(&dst) && (i.view != dst || i.pattern != Pattern::Full)
                }
                Got::Reg(_) => false,
            });
        if clash {
            return false;
        }
        // Committed: new inputs loaded, then the op's register.
        self.n = n;
        let args: Vec<usize> = got
            .into_iter()
            .map(|g| match g {
                Got::Reg(r) => r,
                Got::New(i) => self.load(i),
            })
            .collect();
        let reg = match &e.kind {
            Kind::Alias | Kind::Broadcast { .. } => args[0],
            Kind::Const { bits } => self.push(
                Instr::Const {
                    bits: *bits,
                    dtype: e.dst_dtype,
                },
                Reg {
                    dtype: e.dst_dtype,
                    raw: e.dst_dtype.storage() == 2,
                    uniform: true,
                },
            ),
            Kind::Instr(i) => {
                let vals: Vec<usize> = args.iter().map(|&a| self.value(a)).collect();
                let instr = with_args(i, &vals);
                let uniform = vals.iter().all(|&a| self.regs[a].uniform);
                self.push(
                    instr,
                    Reg {
                        dtype: e.dst_dtype,
                        raw: false,
                        uniform,
                    },
                )
            }
        };
        // The destination now holds the register (and no view it overlaps its own);
        // the outputs it covers are its.
        self.bound.retain(|(v, _)| !v.overlaps(&dst));
        self.bound.push((dst, reg));
        self.outputs
            .retain(|o| o.view != dst && !dropped.contains(&o.view));
        self.outputs.push(Output { reg, view: dst });
        self.ops.push(index);
        self.added.push((index, e.clone()));
        true
    }

    /// True when `v` is the view of one of the region's outputs.
    fn is_output(&self, v: &View) -> bool {
        self.outputs.iter().any(|o| o.view == *v)
    }

    fn push(&mut self, i: Instr, r: Reg) -> usize {
        self.instrs.push(i);
        self.regs.push(r);
        self.regs.len() - 1
    }

    /// Loads input `i` (into a register, bound to its view).
    fn load(&mut self, i: Input) -> usize {
        let reg = Reg {
            dtype: i.dtype,
            raw: i.dtype.storage() == 2,
            uniform: i.pattern == Pattern::Scalar,
        };
        let view = i.view;
        self.inputs.push(i);
        let r = self.push(Instr::Load(self.inputs.len() - 1), reg);
        if !matches!(
            self.inputs.last().map(|i| &i.pattern),
            Some(Pattern::Broadcast { .. })
        ) {
            self.bound.push((view, r));
        }
        r
    }

    /// Register `r` as values (16-bit floats widened, once).
    fn value(&mut self, r: usize) -> usize {
        if !self.regs[r].raw {
            return r;
        }
        if let Some(&(_, w)) = self.widened.iter().find(|(raw, _)| *raw == r) {
            return w;
        }
        let reg = Reg {
            raw: false,
            ..self.regs[r]
        };
        let w = self.push(Instr::Widen(r), reg);
        self.widened.push((r, w));
        w
    }

    /// The region, or `None` when no op joined it.
    pub(super) fn finish(self) -> Option<Region> {
        if self.ops.is_empty() {
            return None;
        }
        let n = self.n.unwrap_or(1);
        let nregs = self.regs.len();
        Some(Region {
            n,
            device: self.device,
            inputs: self.inputs,
            instrs: self.instrs,
            regs: self.regs,
            slots: (0..nregs).collect(),
            nslots: nregs,
            outputs: self.outputs,
            reduces: Vec::new(),
            ops: self.ops,
        })
    }
}

/// True when `a` and a reader of `rb` and writer of `wb` touch a common element, one of
/// them writing it.
fn touch(a: &DataOp, rb: &[View], wb: &[View]) -> bool {
    let ra: Vec<View> = a.reads().chain(accumulated(a)).collect();
    let wa: Vec<View> = a.writes().collect();
    let any = |x: &[View], y: &[View]| x.iter().any(|v| y.iter().any(|w| v.overlaps(w)));
    any(&wa, rb) || any(&wa, wb) || any(&ra, wb)
}

/// True when every element of `v` is one of `w`'s.
fn within(v: &View, w: &View) -> bool {
    v.overlaps(w) && v.offset() >= w.offset() && v.offset() + v.len() <= w.offset() + w.len()
}

/// An accumulate's destination, which it reads as well as writes.
fn accumulated(op: &DataOp) -> Option<View> {
    match op {
        DataOp::Accumulate { dst, .. } => Some(*dst),
        _ => None,
    }
}

/// `i` with its argument registers (0, 1, 2 in an [`Elem`]) replaced by `args`.
fn with_args(i: &Instr, args: &[usize]) -> Instr {
    match i.clone() {
        Instr::Unary(u, t, _) => Instr::Unary(u, t, args[0]),
        Instr::Binary(b, t, _, _) => Instr::Binary(b, t, args[0], args[1]),
        Instr::Compare(c, t, _, _) => Instr::Compare(c, t, args[0], args[1]),
        Instr::Select(..) => Instr::Select(args[0], args[1], args[2]),
        Instr::Convert(f, t, _) => Instr::Convert(f, t, args[0]),
        other => other,
    }
}
