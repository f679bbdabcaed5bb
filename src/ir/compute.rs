//! Compute ops: the lax primitives a kernel applies to values in VMEM, one op per
//! primitive (so a front end lowers one jaxpr equation to one op), with XLA's
//! semantics. An op reads its sources and writes its destination, each a dense
//! row-major [`Operand`] (a view of a VMEM allocation with a shape and a dtype); the
//! shape and dtype rules of every kind are checked here once ([`Compute::new`]), so
//! the kernel API, the Python front end and the executors agree on them.

use super::view::View;
use crate::array::DType;
use std::fmt;
use std::sync::Arc;

/// A value an op reads or writes: `view`'s elements as a dense row-major array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operand {
    /// Where its elements are (contiguous, `numel(shape)` of them).
    pub view: View,
    /// Its shape (empty: a scalar).
    pub shape: Vec<usize>,
    /// Its element type (the allocation's).
    pub dtype: DType,
}

impl Operand {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Elementwise functions of one value (`lax.neg_p`, `lax.exp_p`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unary {
    /// `-x` (integers wrap).
    Neg,
    /// `|x|` (`i32::MIN` stays itself, as XLA's).
    Abs,
    /// -1, 0 or 1 (floats: ±0 keep their sign, NaN stays NaN).
    Sign,
    /// Round toward -inf (floats).
    Floor,
    /// Round toward +inf (floats).
    Ceil,
    /// Round half away from zero (`lax.round` default).
    Round,
    /// Round half to even (`jnp.round`, `lax.round(..., TO_NEAREST_EVEN)`).
    RoundEven,
    /// `e^x`.
    Exp,
    /// `2^x`.
    Exp2,
    /// `e^x - 1`.
    Expm1,
    /// Natural logarithm.
    Log,
    /// `ln(1 + x)`.
    Log1p,
    /// Square root.
    Sqrt,
    /// `1 / sqrt(x)`.
    Rsqrt,
    /// Hyperbolic tangent.
    Tanh,
    /// `1 / (1 + e^-x)`.
    Logistic,
    /// Sine.
    Sin,
    /// Cosine.
    Cos,
    /// The error function.
    Erf,
    /// Logical not of bools, bitwise not of integers.
    Not,
    /// `x^n` for a constant integer `n` (`lax.integer_pow`: `jnp.square`, `x ** 3`).
    IntegerPow(i32),
}

/// Elementwise functions of two values of one dtype (`lax.add_p`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Binary {
    /// `a + b` (integers wrap).
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b` (integers: toward zero; division by zero gives -1, as XLA's).
    Div,
    /// Remainder with the sign of `a` (`lax.rem`, C's `fmod`).
    Rem,
    /// `a^b` (floats).
    Pow,
    /// The larger (floats: NaN if either is).
    Max,
    /// The smaller (floats: NaN if either is).
    Min,
    /// Logical and of bools, bitwise and of integers.
    And,
    /// Or.
    Or,
    /// Exclusive or.
    Xor,
    /// `a << b` (integers; 0 when `b` is outside `0..bits`).
    ShiftLeft,
    /// `a >> b` keeping the sign (integers; all sign bits when `b` is outside `0..bits`).
    ShiftRightArithmetic,
    /// `a >> b` shifting in zeros (integers; 0 when `b` is outside `0..bits`).
    ShiftRightLogical,
    /// `atan2(a, b)` (floats).
    Atan2,
}

/// Comparisons giving bools (`lax.eq_p`, …). Floats compare by IEEE rules (NaN is
/// unequal to everything; `-0 == +0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Comparison {
    /// `==`.
    Eq,
    /// `!=`.
    Ne,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
}

impl Unary {
    /// Every function, `IntegerPow` with exponent 0 standing for all of its kind.
    pub const ALL: [Unary; 21] = [
        Unary::Neg,
        Unary::Abs,
        Unary::Sign,
        Unary::Floor,
        Unary::Ceil,
        Unary::Round,
        Unary::RoundEven,
        Unary::Exp,
        Unary::Exp2,
        Unary::Expm1,
        Unary::Log,
        Unary::Log1p,
        Unary::Sqrt,
        Unary::Rsqrt,
        Unary::Tanh,
        Unary::Logistic,
        Unary::Sin,
        Unary::Cos,
        Unary::Erf,
        Unary::Not,
        Unary::IntegerPow(0),
    ];

    /// Its name, the lax primitive's without `_p` (what sites, step tables and
    /// timelines show): `exp`, `integer_pow`, …
    pub fn name(self) -> &'static str {
        match self {
            Unary::Neg => "neg",
            Unary::Abs => "abs",
            Unary::Sign => "sign",
            Unary::Floor => "floor",
            Unary::Ceil => "ceil",
            Unary::Round => "round",
            Unary::RoundEven => "round_even",
            Unary::Exp => "exp",
            Unary::Exp2 => "exp2",
            Unary::Expm1 => "expm1",
            Unary::Log => "log",
            Unary::Log1p => "log1p",
            Unary::Sqrt => "sqrt",
            Unary::Rsqrt => "rsqrt",
            Unary::Tanh => "tanh",
            Unary::Logistic => "logistic",
            Unary::Sin => "sin",
            Unary::Cos => "cos",
            Unary::Erf => "erf",
            Unary::Not => "not",
            Unary::IntegerPow(_) => "integer_pow",
        }
    }

    /// The function named `name` ([`Unary::name`]), `n` the exponent of `integer_pow`.
    pub fn from_name(name: &str, n: i32) -> Option<Unary> {
        let u = Unary::ALL.into_iter().find(|u| u.name() == name)?;
        Some(match u {
            Unary::IntegerPow(_) => Unary::IntegerPow(n),
            u => u,
        })
    }
}

impl Binary {
    /// Every function.
    pub const ALL: [Binary; 15] = [
        Binary::Add,
        Binary::Sub,
        Binary::Mul,
        Binary::Div,
        Binary::Rem,
        Binary::Pow,
        Binary::Max,
        Binary::Min,
        Binary::And,
        Binary::Or,
        Binary::Xor,
        Binary::ShiftLeft,
        Binary::ShiftRightArithmetic,
        Binary::ShiftRightLogical,
        Binary::Atan2,
    ];

    /// Its name, the lax primitive's without `_p`: `mul`, `max`, …
    pub fn name(self) -> &'static str {
        match self {
            Binary::Add => "add",
            Binary::Sub => "sub",
            Binary::Mul => "mul",
            Binary::Div => "div",
            Binary::Rem => "rem",
            Binary::Pow => "pow",
            Binary::Max => "max",
            Binary::Min => "min",
            Binary::And => "and",
            Binary::Or => "or",
            Binary::Xor => "xor",
            Binary::ShiftLeft => "shift_left",
            Binary::ShiftRightArithmetic => "shift_right_arithmetic",
            Binary::ShiftRightLogical => "shift_right_logical",
            Binary::Atan2 => "atan2",
        }
    }

    /// The function named `name` ([`Binary::name`]).
    pub fn from_name(name: &str) -> Option<Binary> {
        Binary::ALL.into_iter().find(|b| b.name() == name)
    }
}

impl Comparison {
    /// Every comparison.
    pub const ALL: [Comparison; 6] = [
        Comparison::Eq,
        Comparison::Ne,
        Comparison::Lt,
        Comparison::Le,
        Comparison::Gt,
        Comparison::Ge,
    ];

    /// Its name, the lax primitive's without `_p`: `eq`, `lt`, …
    pub fn name(self) -> &'static str {
        match self {
            Comparison::Eq => "eq",
            Comparison::Ne => "ne",
            Comparison::Lt => "lt",
            Comparison::Le => "le",
            Comparison::Gt => "gt",
            Comparison::Ge => "ge",
        }
    }

    /// The comparison named `name` ([`Comparison::name`]).
    pub fn from_name(name: &str) -> Option<Comparison> {
        Comparison::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// The reductions of `lax.reduce_sum/max/min_p` and of argmax/argmin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// Sum (float sums in f32, in an order the executor chooses; integers wrap).
    Sum,
    /// Largest (floats: NaN if any is).
    Max,
    /// Smallest (floats: NaN if any is).
    Min,
}

/// Which dimensions of a `dot_general` contract and which are batch dimensions.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct DotDims {
    /// Contracting dimensions of the left operand.
    pub lhs_contract: Vec<usize>,
    /// Contracting dimensions of the right operand, pairwise with `lhs_contract`.
    pub rhs_contract: Vec<usize>,
    /// Batch dimensions of the left operand.
    pub lhs_batch: Vec<usize>,
    /// Batch dimensions of the right operand, pairwise with `lhs_batch`.
    pub rhs_batch: Vec<usize>,
}

/// What a compute op does. Shapes and dtypes follow the lax primitive of the same name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ComputeKind {
    /// `dst = f(src0)`, elementwise; same shape and dtype.
    Unary(Unary),
    /// `dst = f(src0, src1)`, elementwise; one dtype; the shapes equal, or either source
    /// a scalar (rank 0) broadcast over the other.
    Binary(Binary),
    /// `dst = src0 cmp src1` as bools; the sources as for [`ComputeKind::Binary`].
    Compare(Comparison),
    /// `dst = where(src0, src1, src2)`: `src0` bool, `src1` and `src2` and `dst` one
    /// dtype; shapes equal or scalars broadcast (`lax.select_n` with a bool predicate).
    Select,
    /// `dst = src0` converted to `dst`'s dtype (`lax.convert_element_type`): floats
    /// round to nearest even; float to integer truncates toward zero, saturates at the
    /// integer's range and gives 0 for NaN; integer to integer wraps; to bool is `!= 0`.
    Convert,
    /// `lax.broadcast_in_dim`: source dimension `i` is destination dimension `dims[i]`
    /// (equal sizes, or size 1 broadcast).
    Broadcast {
        /// Destination dimension of each source dimension, increasing.
        dims: Vec<usize>,
    },
    /// `dst = src0` with another shape of the same size (`lax.reshape`, row-major).
    Reshape,
    /// `lax.transpose`: destination dimension `i` is source dimension `perm[i]`.
    Transpose {
        /// A permutation of the source's dimensions.
        perm: Vec<usize>,
    },
    /// `lax.iota` along `dim` (the index on that dimension, in `dst`'s dtype).
    Iota {
        /// The dimension whose index each element holds.
        dim: usize,
    },
    /// `lax.slice` (and `dynamic_slice`, its offsets known when the kernel is traced):
    /// destination element `i` is source element `start + i * strides`.
    Slice {
        /// First source index per dimension.
        start: Vec<usize>,
        /// Step per dimension (at least 1).
        strides: Vec<usize>,
    },
    /// `lax.dynamic_update_slice` (offsets known at trace time): `dst = src0` with
    /// `src1` written at `start`.
    UpdateSlice {
        /// Where `src1`'s first element goes, per dimension.
        start: Vec<usize>,
    },
    /// `lax.concatenate` of every source along `dim` (same dtype; other dims equal).
    Concat {
        /// The dimension joined along.
        dim: usize,
    },
    /// `lax.reduce_sum/max/min` over `axes` (the destination drops them).
    Reduce {
        /// The reduction.
        op: Reduction,
        /// Dimensions reduced, increasing.
        axes: Vec<usize>,
    },
    /// `lax.argmax`/`argmin` along `axis`: the first index of the largest (smallest)
    /// element, in `dst`'s integer dtype; a NaN counts as the largest and smallest.
    ArgReduce {
        /// [`Reduction::Max`] or [`Reduction::Min`].
        op: Reduction,
        /// The dimension searched.
        axis: usize,
    },
    /// `dst` = these elements (a constant array of the kernel: a `jnp.array` literal, a
    /// mask or table computed from iotas), row-major, one word each in
    /// [`DType::bits_of`]'s form; shared by every op that makes the same constant.
    Constant(Arc<[u32]>),
    /// `dst = src0`'s bits as `dst`'s dtype of the same width (`lax.bitcast_convert_type`,
    /// `pltpu.bitcast` between f32 and i32, or f16 and bf16); same shape.
    Bitcast,
    /// `lax.dot_general(src0, src1)`: destination dims are the batch dims, then the
    /// left operand's free dims, then the right's; products summed in `dst`'s dtype
    /// (`preferred_element_type`: f32 for 16-bit floats, i32 for int8), inputs
    /// converted to it first.
    Dot(DotDims),
}

/// One compute op: what it does, what it reads, what it writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compute {
    /// What it does.
    pub kind: ComputeKind,
    /// Sources, in the primitive's order.
    pub srcs: Vec<Operand>,
    /// Destination.
    pub dst: Operand,
    /// The runs of elements it reads (a slice reads its window only).
    reads: Vec<View>,
    /// The runs of elements it writes (an update in place writes its window only).
    writes: Vec<View>,
}

/// Most runs an access is split into before it is taken whole (a strided window of
/// millions of elements would otherwise cost a view each).
const MAX_RUNS: usize = 4096;

/// The runs of `view` (a dense array of `shape`) that a window of `window` elements
/// from `start` by `strides` covers, merged where contiguous; the whole view when
/// there would be more than [`MAX_RUNS`].
fn window_runs(
    view: View,
    shape: &[usize],
    start: &[usize],
    window: &[usize],
    strides: &[usize],
) -> Vec<View> {
    let r = shape.len();
    if r == 0 || window.contains(&0) {
        return if window.contains(&0) {
            vec![]
        } else {
            vec![view]
        };
    }
    let mut st = vec![1usize; r];
    for i in (0..r - 1).rev() {
        st[i] = st[i + 1] * shape[i + 1];
    }
    // The innermost dimension is one run when its stride is 1, else single elements.
    let inner = if strides[r - 1] == 1 {
        window[r - 1]
    } else {
        1
    };
    let outer: usize = window[..r - 1].iter().product::<usize>()
        * if strides[r - 1] == 1 {
            1
        } else {
            window[r - 1]
        };
    if outer > MAX_RUNS {
        return vec![view];
    }
    let mut runs: Vec<View> = Vec::with_capacity(outer);
    let mut idx = vec![0usize; r];
    let last = if strides[r - 1] == 1 { r - 1 } else { r };
    loop {
        let at: usize = (0..r)
            .map(|k| (start[k] + idx[k] * strides[k]) * st[k])
            .sum();
        let off = view.offset() + at;
        match runs.last_mut() {
            Some(v) if v.offset() + v.len() == off => {
                *v = View::new(v.device(), v.alloc(), v.offset(), v.len() + inner);
            }
            _ => runs.push(View::new(view.device(), view.alloc(), off, inner)),
        }
        // Next index over the dims that are not inside a run.
        let mut k = last;
        loop {
            if k == 0 {
                return runs;
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < window[k] {
                break;
            }
            idx[k] = 0;
        }
    }
}

/// Element counts and arithmetic of one op, for the cost model and rooflines.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Work {
    /// Elements read (every source).
    pub read_elems: u64,
    /// Elements written.
    pub write_elems: u64,
    /// Arithmetic operations on the vector unit (one per element of an elementwise
    /// op; transcendentals count a few).
    pub vector_ops: u64,
    /// Multiply-adds of a matrix unit (a dot's batch x free x free x contracted).
    pub macs: u64,
}

fn same_shape(a: &[usize], b: &[usize]) -> bool {
    a == b
}

/// The shape a binary op's operands give: equal shapes, or a scalar broadcast.
fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => Some(b.to_vec()),
        (_, true) => Some(a.to_vec()),
        _ if a == b => Some(a.to_vec()),
        _ => None,
    }
}

impl Compute {
    /// The op, or a message saying which rule it breaks.
    pub fn new(kind: ComputeKind, srcs: Vec<Operand>, dst: Operand) -> Result<Self, String> {
        let mut op = Compute {
            kind,
            srcs,
            dst,
            reads: Vec::new(),
            writes: Vec::new(),
        };
        op.check()?;
        op.reads = op.srcs.iter().map(|o| o.view).collect();
        op.writes = vec![op.dst.view];
        match &op.kind {
            ComputeKind::Slice { start, strides } => {
                let s = &op.srcs[0];
                op.reads = window_runs(s.view, &s.shape, start, &op.dst.shape, strides);
            }
            // In place: the window is written, the rest stays.
            ComputeKind::UpdateSlice { start } if op.srcs[0].view == op.dst.view => {
                let d = &op.dst;
                let ones = vec![1; d.shape.len()];
                op.writes = window_runs(d.view, &d.shape, start, &op.srcs[1].shape, &ones);
                op.reads = vec![op.srcs[1].view];
            }
            _ => {}
        }
        Ok(op)
    }

    /// The runs of elements the op reads.
    pub fn reads(&self) -> &[View] {
        &self.reads
    }

    /// The runs of elements the op writes.
    pub fn writes(&self) -> &[View] {
        &self.writes
    }

    /// The same op on other devices: every view moved by `device`.
    pub fn on_devices(&self, device: impl Fn(usize) -> usize) -> Self {
        self.map_views(|v| v.on_device(device(v.device())))
    }

    /// The same op on the views `f` gives for its own.
    pub fn map_views(&self, f: impl Fn(View) -> View) -> Self {
        let mv = |v: &View| f(*v);
        let operand = |o: &Operand| Operand {
            view: mv(&o.view),
            ..o.clone()
        };
        Compute {
            kind: self.kind.clone(),
            srcs: self.srcs.iter().map(operand).collect(),
            dst: operand(&self.dst),
            reads: self.reads.iter().map(mv).collect(),
            writes: self.writes.iter().map(mv).collect(),
        }
    }

    fn arity(&self) -> Option<usize> {
        Some(match &self.kind {
            ComputeKind::Unary(_)
            | ComputeKind::Convert
            | ComputeKind::Broadcast { .. }
            | ComputeKind::Reshape
            | ComputeKind::Transpose { .. }
            | ComputeKind::Slice { .. }
            | ComputeKind::Reduce { .. }
            | ComputeKind::ArgReduce { .. }
            | ComputeKind::Bitcast => 1,
            ComputeKind::Binary(_)
            | ComputeKind::Compare(_)
            | ComputeKind::UpdateSlice { .. }
            | ComputeKind::Dot(_) => 2,
            ComputeKind::Select => 3,
            ComputeKind::Iota { .. } | ComputeKind::Constant(_) => 0,
            ComputeKind::Concat { .. } => return None,
        })
    }

    /// Checks the kind's shape and dtype rules.
    fn check(&self) -> Result<(), String> {
        let n = self.srcs.len();
        match self.arity() {
            Some(a) if a != n => return Err(format!("{} takes {a} operands, not {n}", self.kind)),
            None if n == 0 => return Err(format!("{} takes at least one operand", self.kind)),
            _ => {}
        }
        for o in self.srcs.iter().chain([&self.dst]) {
            if o.view.len() != o.numel() {
                return Err(format!(
                    "an operand of shape {:?} holds {} elements, not {}",
                    o.shape,
                    o.numel(),
                    o.view.len()
                ));
            }
        }
        let (d, s) = (&self.dst, &self.srcs);
        let want = |ok: bool, what: &dyn Fn() -> String| if ok { Ok(()) } else { Err(what()) };
        match &self.kind {
            ComputeKind::Unary(u) => {
                want(
                    same_shape(&s[0].shape, &d.shape) && s[0].dtype == d.dtype,
                    &|| format!("{u:?} keeps its operand's shape and dtype"),
                )?;
                unary_dtype(*u, d.dtype)
            }
            ComputeKind::Binary(b) => {
                want(
                    s[0].dtype == s[1].dtype && s[0].dtype == d.dtype,
                    &|| format!(
                        "{b:?} takes operands of one dtype (got {} and {})",
                        s[0].dtype, s[1].dtype
                    ),
                )?;
                want(
                    broadcast_shape(&s[0].shape, &s[1].shape).as_deref() == Some(&d.shape),
                    &|| format!(
                        "{b:?} of shapes {:?} and {:?} (equal, or one a scalar) cannot give {:?}",
                        s[0].shape, s[1].shape, d.shape
                    ),
                )?;
                binary_dtype(*b, d.dtype)
            }
            ComputeKind::Compare(_) => {
                want(
                    s[0].dtype == s[1].dtype && d.dtype == DType::Bool,
                    &|| "a comparison takes operands of one dtype and gives bools".into(),
                )?;
                want(
                    broadcast_shape(&s[0].shape, &s[1].shape).as_deref() == Some(&d.shape),
                    &|| format!(
                        "comparing shapes {:?} and {:?} cannot give {:?}",
                        s[0].shape, s[1].shape, d.shape
                    ),
                )
            }
            ComputeKind::Select => {
                want(
                    s[0].dtype == DType::Bool && s[1].dtype == s[2].dtype && s[1].dtype == d.dtype,
                    &|| "select takes a bool predicate and two operands of the result's dtype".into(),
                )?;
                let shape = broadcast_shape(&s[1].shape, &s[2].shape)
                    .and_then(|x| broadcast_shape(&s[0].shape, &x));
                want(
                    shape.as_deref() == Some(&d.shape),
                    &|| format!(
                        "select of shapes {:?}, {:?}, {:?} cannot give {:?}",
                        s[0].shape, s[1].shape, s[2].shape, d.shape
                    ),
                )
            }
            ComputeKind::Convert => want(
                same_shape(&s[0].shape, &d.shape),
                &|| "a conversion keeps the shape".into(),
            ),
            ComputeKind::Broadcast { dims } => {
                let ok = dims.len() == s[0].shape.len()
                    && dims.windows(2).all(|w| w[0] < w[1])
                    && dims.iter().zip(&s[0].shape).all(|(&k, &n)| {
                        d.shape.get(k).is_some_and(|&m| n == m || n == 1)
                    })
                    && s[0].dtype == d.dtype;
                want(
                    ok,
                    &|| format!(
                        "broadcast_in_dim of {:?} with dims {dims:?} cannot give {:?}",
                        s[0].shape, d.shape
                    ),
                )
            }
            ComputeKind::Reshape => want(
                s[0].numel() == d.numel() && s[0].dtype == d.dtype,
                &|| format!("cannot reshape {:?} to {:?}", s[0].shape, d.shape),
            ),
            ComputeKind::Transpose { perm } => {
                let mut seen = perm.clone();
                seen.sort_unstable();
                let ok = seen == (0..s[0].shape.len()).collect::<Vec<_>>()
                    && perm.len() <= 4
                    && perm
                        .iter()
                        .enumerate()
                        .all(|(i, &p)| d.shape.get(i) == Some(&s[0].shape[p]))
                    && s[0].dtype == d.dtype
                    && d.shape.len() == perm.len();
                want(
                    ok,
                    &|| format!(
                        "transpose of {:?} by {perm:?} (a permutation of up to 4 dims) cannot give {:?}",
                        s[0].shape, d.shape
                    ),
                )
            }
            ComputeKind::Iota { dim } => want(
                *dim < d.shape.len() && d.dtype != DType::Bool,
                &|| format!("iota along dim {dim} of shape {:?}", d.shape),
            ),
            ComputeKind::Constant(words) => want(
                words.len() == d.numel(),
                &|| format!(
                    "a constant of {} elements cannot fill {:?}",
                    words.len(),
                    d.shape
                ),
            ),
            ComputeKind::Bitcast => want(
                same_shape(&s[0].shape, &d.shape) && bitcastable(s[0].dtype, d.dtype),
                &|| format!(
                    "a bitcast keeps the shape and goes between f32 and i32 or f16 and bf16, not {} {:?} to {} {:?}",
                    s[0].dtype, s[0].shape, d.dtype, d.shape
                ),
            ),
            ComputeKind::Slice { start, strides } => {
                let r = s[0].shape.len();
                let ok = start.len() == r
                    && strides.len() == r
                    && d.shape.len() == r
                    && s[0].dtype == d.dtype
                    && (0..r).all(|i| {
                        strides[i] >= 1
                            && (d.shape[i] == 0
                                || start[i] + (d.shape[i] - 1) * strides[i] < s[0].shape[i])
                    });
                want(
                    ok,
                    &|| format!(
                        "a slice of {:?} from {start:?} by {strides:?} cannot give {:?}",
                        s[0].shape, d.shape
                    ),
                )
            }
            ComputeKind::UpdateSlice { start } => {
                let r = d.shape.len();
                let ok = same_shape(&s[0].shape, &d.shape)
                    && s[1].shape.len() == r
                    && start.len() == r
                    && s[0].dtype == d.dtype
                    && s[1].dtype == d.dtype
                    && (0..r).all(|i| start[i] + s[1].shape[i] <= d.shape[i]);
                want(
                    ok,
                    &|| format!(
                        "an update of {:?} at {start:?} does not fit in {:?}",
                        s[1].shape, d.shape
                    ),
                )
            }
            ComputeKind::Concat { dim } => {
                let r = d.shape.len();
                let ok = *dim < r
                    && s.iter().all(|o| {
                        o.dtype == d.dtype
                            && o.shape.len() == r
                            && (0..r).all(|i| i == *dim || o.shape[i] == d.shape[i])
                    })
                    && s.iter().map(|o| o.shape[*dim]).sum::<usize>() == d.shape[*dim];
                want(
                    ok,
                    &|| format!("concatenating along dim {dim} cannot give {:?}", d.shape),
                )
            }
            ComputeKind::Reduce { op, axes } => {
                let r = s[0].shape.len();
                let kept: Vec<usize> = (0..r)
                    .filter(|i| !axes.contains(i))
                    .map(|i| s[0].shape[i])
                    .collect();
                let ok = axes.windows(2).all(|w| w[0] < w[1])
                    && axes.iter().all(|&a| a < r)
                    && kept == d.shape
                    && s[0].dtype == d.dtype;
                want(
                    ok,
                    &|| format!(
                        "{op:?} of {:?} over {axes:?} cannot give {:?}",
                        s[0].shape, d.shape
                    ),
                )?;
                match (op, d.dtype) {
                    (Reduction::Sum, DType::Bool) => Err("a sum of bools: convert them first".into()),
                    _ => Ok(()),
                }
            }
            ComputeKind::ArgReduce { op, axis } => {
                let r = s[0].shape.len();
                let mut kept = s[0].shape.clone();
                let ok = *axis < r
                    && *op != Reduction::Sum
                    && {
                        kept.remove(*axis);
                        kept == d.shape
                    }
                    && matches!(d.dtype, DType::I32);
                want(
                    ok,
                    &|| format!(
                        "arg{op:?} of {:?} along {axis} gives i32 of the other dims, not {:?} {}",
                        s[0].shape, d.shape, d.dtype
                    ),
                )
            }
            ComputeKind::Dot(dims) => dot_shape(dims, &s[0], &s[1]).and_then(|shape| {
                want(
                    shape == d.shape,
                    &|| format!(
                        "dot_general of {:?} and {:?} gives {shape:?}, not {:?}",
                        s[0].shape, s[1].shape, d.shape
                    ),
                )?;
                want(
                    s[0].dtype == s[1].dtype && dot_accumulates(s[0].dtype, d.dtype),
                    &|| format!(
                        "dot_general of {} and {} accumulates in f32 (floats) or i32 (integers), not {}",
                        s[0].dtype, s[1].dtype, d.dtype
                    ),
                )
            }),
        }
    }

    /// What the op costs: elements read and written, vector ops, matrix multiply-adds.
    pub fn work(&self) -> Work {
        let read: u64 = self.srcs.iter().map(|o| o.numel() as u64).sum();
        let write = self.dst.numel() as u64;
        let mut w = Work {
            read_elems: read,
            write_elems: write,
            vector_ops: write,
            macs: 0,
        };
        match &self.kind {
            ComputeKind::Unary(u) if u.is_transcendental() => w.vector_ops = 4 * write,
            ComputeKind::Reduce { .. } | ComputeKind::ArgReduce { .. } => w.vector_ops = read,
            ComputeKind::Dot(dims) => {
                let contracted: u64 = dims
                    .lhs_contract
                    .iter()
                    .map(|&k| self.srcs[0].shape[k] as u64)
                    .product();
                w.macs = write * contracted;
                w.vector_ops = 0;
            }
            _ => {}
        }
        w
    }
}

impl Unary {
    /// True for the functions a vector unit evaluates in several steps.
    pub fn is_transcendental(self) -> bool {
        matches!(
            self,
            Unary::Exp
                | Unary::Exp2
                | Unary::Expm1
                | Unary::Log
                | Unary::Log1p
                | Unary::Sqrt
                | Unary::Rsqrt
                | Unary::Tanh
                | Unary::Logistic
                | Unary::Sin
                | Unary::Cos
                | Unary::Erf
        )
    }
}

fn unary_dtype(u: Unary, t: DType) -> Result<(), String> {
    let ok = match u {
        Unary::Neg | Unary::Abs | Unary::Sign | Unary::IntegerPow(_) => t != DType::Bool,
        Unary::Not => !t.is_float(),
        _ => t.is_float(),
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{u:?} does not take {t}"))
    }
}

fn binary_dtype(b: Binary, t: DType) -> Result<(), String> {
    let ok = match b {
        Binary::Add | Binary::Sub | Binary::Mul | Binary::Max | Binary::Min => t != DType::Bool,
        Binary::Div | Binary::Rem => t != DType::Bool,
        Binary::Pow | Binary::Atan2 => t.is_float(),
        Binary::And | Binary::Or | Binary::Xor => !t.is_float(),
        Binary::ShiftLeft | Binary::ShiftRightArithmetic | Binary::ShiftRightLogical => {
            !t.is_float() && t != DType::Bool
        }
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{b:?} does not take {t}"))
    }
}

/// True when [`ComputeKind::Bitcast`] goes from `a` to `b`: the same bits in the
/// executors' words (4-byte f32 and i32, or 16-bit f16 and bf16).
pub fn bitcastable(a: DType, b: DType) -> bool {
    let class = |t: DType| match t {
        DType::F32 | DType::I32 => Some(4),
        DType::F16 | DType::BF16 => Some(2),
        _ => None,
    };
    class(a).is_some() && class(a) == class(b)
}

/// True when a dot of `input` operands may accumulate in `acc`.
fn dot_accumulates(input: DType, acc: DType) -> bool {
    match input {
        DType::F32 | DType::F16 | DType::BF16 => acc == DType::F32 || acc == input,
        DType::I32 | DType::I8 | DType::U8 => acc == DType::I32,
        DType::Bool => false,
    }
}

/// The shape of `dot_general(lhs, rhs)`: batch dims, lhs free dims, rhs free dims.
pub fn dot_shape(dims: &DotDims, lhs: &Operand, rhs: &Operand) -> Result<Vec<usize>, String> {
    let (l, r) = (&lhs.shape, &rhs.shape);
    let bad = || {
        format!(
            "dot_general of {l:?} and {r:?} with contracting {:?}/{:?} and batch {:?}/{:?}",
            dims.lhs_contract, dims.rhs_contract, dims.lhs_batch, dims.rhs_batch
        )
    };
    let pairs_ok = |a: &[usize], b: &[usize]| {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(&i, &j)| i < l.len() && j < r.len() && l[i] == r[j])
    };
    if !pairs_ok(&dims.lhs_contract, &dims.rhs_contract)
        || !pairs_ok(&dims.lhs_batch, &dims.rhs_batch)
    {
        return Err(bad());
    }
    let used_l: Vec<usize> = dims
        .lhs_batch
        .iter()
        .chain(&dims.lhs_contract)
        .copied()
        .collect();
    let used_r: Vec<usize> = dims
        .rhs_batch
        .iter()
        .chain(&dims.rhs_contract)
        .copied()
        .collect();
    let distinct = |v: &[usize]| {
        let mut s = v.to_vec();
        s.sort_unstable();
        s.windows(2).all(|w| w[0] != w[1])
    };
    if !distinct(&used_l) || !distinct(&used_r) {
        return Err(bad());
    }
    let mut out: Vec<usize> = dims.lhs_batch.iter().map(|&i| l[i]).collect();
    out.extend((0..l.len()).filter(|i| !used_l.contains(i)).map(|i| l[i]));
    out.extend((0..r.len()).filter(|i| !used_r.contains(i)).map(|i| r[i]));
    Ok(out)
}

impl fmt::Display for ComputeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ComputeKind::Unary(u) => write!(f, "{u:?}"),
            ComputeKind::Binary(b) => write!(f, "{b:?}"),
            ComputeKind::Compare(c) => write!(f, "compare {c:?}"),
            ComputeKind::Select => write!(f, "select"),
            ComputeKind::Convert => write!(f, "convert_element_type"),
            ComputeKind::Broadcast { .. } => write!(f, "broadcast_in_dim"),
            ComputeKind::Reshape => write!(f, "reshape"),
            ComputeKind::Transpose { .. } => write!(f, "transpose"),
            ComputeKind::Iota { .. } => write!(f, "iota"),
            ComputeKind::Constant(_) => write!(f, "constant"),
            ComputeKind::Bitcast => write!(f, "bitcast_convert_type"),
            ComputeKind::Slice { .. } => write!(f, "slice"),
            ComputeKind::UpdateSlice { .. } => write!(f, "dynamic_update_slice"),
            ComputeKind::Concat { .. } => write!(f, "concatenate"),
            ComputeKind::Reduce { op, .. } => {
                write!(f, "reduce_{}", format!("{op:?}").to_lowercase())
            }
            ComputeKind::ArgReduce { op, .. } => {
                write!(f, "arg{}", format!("{op:?}").to_lowercase())
            }
            ComputeKind::Dot(_) => write!(f, "dot_general"),
        }
    }
}
