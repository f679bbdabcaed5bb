//! Values: what a kernel computes on. `pl.load(ref)` copies a VMEM ref into a value (a
//! temporary of the device's VMEM), each op on values records one compute op into a
//! fresh temporary, and `pl.store(ref, &v)` writes a value back; so the verifier, the
//! step tables and the timelines see every read and write like any VMEM access. A
//! value's storage is returned when it is dropped (values live inside one grid point).

use super::ctx::Ctx;
use super::refs::Ref;
use crate::array::DType;
use crate::error::KernelErrorKind;
use crate::ir::{
    dot_shape, Binary, Comparison, Compute, ComputeKind, DataOp, DotDims, OpKind, OpSite, Operand,
    Reduction, Unary, View,
};
use std::sync::Arc;

/// A value in VMEM (an array of a shape and dtype) that a kernel computes on.
pub struct Value<'c> {
    ctx: &'c Ctx<'c>,
    /// `None` when it could not be made (the mistake is reported): every use is skipped.
    op: Option<Operand>,
}

impl std::fmt::Debug for Value<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.op {
            Some(o) => write!(f, "Value({:?} {})", o.shape, o.dtype),
            None => write!(f, "Value(invalid)"),
        }
    }
}

impl Drop for Value<'_> {
    fn drop(&mut self) {
        if let Some(o) = &self.op {
            self.ctx
                .temps
                .borrow_mut()
                .give_back(o.view.alloc(), o.view.offset());
        }
    }
}

impl<'c> Value<'c> {
    /// Its shape (`None` for a value that could not be made).
    pub fn shape(&self) -> &[usize] {
        self.op.as_ref().map_or(&[], |o| &o.shape)
    }

    /// Its element type.
    pub fn dtype(&self) -> DType {
        self.op.as_ref().map_or(DType::F32, |o| o.dtype)
    }

    /// `x.astype(dtype)` (`lax.convert_element_type`).
    #[track_caller]
    pub fn astype(&self, dtype: DType) -> Value<'c> {
        self.ctx
            .compute(ComputeKind::Convert, &[self], self.shape(), dtype)
    }

    /// `x.reshape(shape)`.
    #[track_caller]
    pub fn reshape(&self, shape: &[usize]) -> Value<'c> {
        self.ctx
            .compute(ComputeKind::Reshape, &[self], shape, self.dtype())
    }

    /// `x.transpose(perm)` (`jnp.transpose`; `.T` is the reversed dims).
    #[track_caller]
    pub fn transpose(&self, perm: &[usize]) -> Value<'c> {
        let shape: Vec<usize> = perm
            .iter()
            .map(|&p| self.shape().get(p).copied().unwrap_or(0))
            .collect();
        self.ctx.compute(
            ComputeKind::Transpose {
                perm: perm.to_vec(),
            },
            &[self],
            &shape,
            self.dtype(),
        )
    }

    /// `lax.broadcast_in_dim(x, shape, dims)`.
    #[track_caller]
    pub fn broadcast_in_dim(&self, shape: &[usize], dims: &[usize]) -> Value<'c> {
        self.ctx.compute(
            ComputeKind::Broadcast {
                dims: dims.to_vec(),
            },
            &[self],
            shape,
            self.dtype(),
        )
    }

    /// `jnp.broadcast_to(x, shape)`: trailing dimensions line up (numpy's rule).
    #[track_caller]
    pub fn broadcast_to(&self, shape: &[usize]) -> Value<'c> {
        let r = self.shape().len();
        let dims: Vec<usize> = (shape.len().saturating_sub(r)..shape.len()).collect();
        self.broadcast_in_dim(shape, &dims)
    }

    /// `lax.slice(x, start, start + shape * strides, strides)`.
    #[track_caller]
    pub fn slice(&self, start: &[usize], shape: &[usize], strides: &[usize]) -> Value<'c> {
        self.ctx.compute(
            ComputeKind::Slice {
                start: start.to_vec(),
                strides: strides.to_vec(),
            },
            &[self],
            shape,
            self.dtype(),
        )
    }

    fn reduce(&self, op: Reduction, axes: &[usize]) -> Value<'c> {
        let mut axes = axes.to_vec();
        axes.sort_unstable();
        let shape: Vec<usize> = (0..self.shape().len())
            .filter(|i| !axes.contains(i))
            .map(|i| self.shape()[i])
            .collect();
        self.ctx.compute(
            ComputeKind::Reduce { op, axes },
            &[self],
            &shape,
            self.dtype(),
        )
    }

    /// `x.sum(axes)`.
    #[track_caller]
    pub fn sum(&self, axes: &[usize]) -> Value<'c> {
        self.reduce(Reduction::Sum, axes)
    }

    /// `x.max(axes)`.
    #[track_caller]
    pub fn max(&self, axes: &[usize]) -> Value<'c> {
        self.reduce(Reduction::Max, axes)
    }

    /// `x.min(axes)`.
    #[track_caller]
    pub fn min(&self, axes: &[usize]) -> Value<'c> {
        self.reduce(Reduction::Min, axes)
    }

    fn arg(&self, op: Reduction, axis: usize) -> Value<'c> {
        let mut shape = self.shape().to_vec();
        if axis < shape.len() {
            shape.remove(axis);
        }
        self.ctx.compute(
            ComputeKind::ArgReduce { op, axis },
            &[self],
            &shape,
            DType::I32,
        )
    }

    /// `jnp.argmax(x, axis)` (i32 indices).
    #[track_caller]
    pub fn argmax(&self, axis: usize) -> Value<'c> {
        self.arg(Reduction::Max, axis)
    }

    /// `jnp.argmin(x, axis)`.
    #[track_caller]
    pub fn argmin(&self, axis: usize) -> Value<'c> {
        self.arg(Reduction::Min, axis)
    }

    fn cmp(&self, op: Comparison, other: &Value<'c>) -> Value<'c> {
        let shape = if self.shape().is_empty() {
            other.shape()
        } else {
            self.shape()
        };
        self.ctx
            .compute(ComputeKind::Compare(op), &[self, other], shape, DType::Bool)
    }

    /// `x == y` (bools).
    #[track_caller]
    pub fn eq(&self, other: &Value<'c>) -> Value<'c> {
        self.cmp(Comparison::Eq, other)
    }

    /// `x != y`.
    #[track_caller]
    pub fn ne(&self, other: &Value<'c>) -> Value<'c> {
        self.cmp(Comparison::Ne, other)
    }

    /// `x < y`.
    #[track_caller]
    pub fn lt(&self, other: &Value<'c>) -> Value<'c> {
        self.cmp(Comparison::Lt, other)
    }

    /// `x <= y`.
    #[track_caller]
    pub fn le(&self, other: &Value<'c>) -> Value<'c> {
        self.cmp(Comparison::Le, other)
    }

    /// `x > y`.
    #[track_caller]
    pub fn gt(&self, other: &Value<'c>) -> Value<'c> {
        self.cmp(Comparison::Gt, other)
    }

    /// `x >= y`.
    #[track_caller]
    pub fn ge(&self, other: &Value<'c>) -> Value<'c> {
        self.cmp(Comparison::Ge, other)
    }

    /// `x ** n` for a constant integer `n` (`lax.integer_pow`).
    #[track_caller]
    pub fn powi(&self, n: i32) -> Value<'c> {
        self.ctx.unary(Unary::IntegerPow(n), self)
    }

    /// This value's elementwise binary op with `other` (either may be a scalar).
    #[track_caller]
    pub fn binary(&self, op: Binary, other: &Value<'c>) -> Value<'c> {
        self.ctx.binary(op, self, other)
    }

    /// A scalar of this value's dtype.
    #[track_caller]
    pub fn scalar(&self, value: f64) -> Value<'c> {
        self.ctx.full(&[], value, self.dtype())
    }
}

macro_rules! binary_ops {
    ($($trait:ident $method:ident $op:ident),*) => {$(
        impl<'c> std::ops::$trait<&Value<'c>> for &Value<'c> {
            type Output = Value<'c>;
            #[track_caller]
            fn $method(self, rhs: &Value<'c>) -> Value<'c> {
                self.ctx.binary(Binary::$op, self, rhs)
            }
        }
        impl<'c> std::ops::$trait<f64> for &Value<'c> {
            type Output = Value<'c>;
            #[track_caller]
            fn $method(self, rhs: f64) -> Value<'c> {
                let k = self.scalar(rhs);
                self.ctx.binary(Binary::$op, self, &k)
            }
        }
    )*};
}

binary_ops!(Add add Add, Sub sub Sub, Mul mul Mul, Div div Div, Rem rem Rem,
            BitAnd bitand And, BitOr bitor Or, BitXor bitxor Xor);

impl<'c> std::ops::Neg for &Value<'c> {
    type Output = Value<'c>;
    #[track_caller]
    fn neg(self) -> Value<'c> {
        self.ctx.unary(Unary::Neg, self)
    }
}

impl<'c> std::ops::Not for &Value<'c> {
    type Output = Value<'c>;
    #[track_caller]
    fn not(self) -> Value<'c> {
        self.ctx.unary(Unary::Not, self)
    }
}

macro_rules! unary_fns {
    ($($name:ident $op:ident $doc:literal),*) => {$(
        #[doc = $doc]
        #[track_caller]
        pub fn $name<'c>(&'c self, x: &Value<'c>) -> Value<'c> {
            self.unary(Unary::$op, x)
        }
    )*};
}

impl<'a> Ctx<'a> {
    /// Storage for a fresh value of `shape` and `dtype`.
    fn fresh(&self, shape: &[usize], dtype: DType) -> Operand {
        self.fresh_as(shape, dtype, false)
    }

    /// Storage for a fresh value; `loaded`: a value loaded from a ref (see [`Temps`]).
    ///
    /// [`Temps`]: super::temps::Temps
    fn fresh_as(&self, shape: &[usize], dtype: DType, loaded: bool) -> Operand {
        let len: usize = shape.iter().product();
        let (alloc, offset) = self.temps.borrow_mut().take(dtype, len, loaded);
        Operand {
            view: View::new(self.device, alloc, offset, len),
            shape: shape.to_vec(),
            dtype,
        }
    }

    fn value<'c>(&'c self, op: Option<Operand>) -> Value<'c>
    where
        'a: 'c,
    {
        Value { ctx: self, op }
    }

    /// Records `kind` on `srcs` into a fresh value of `shape` and `dtype`: the one way a
    /// compute op is made (the front ends' too), its rules checked by [`Compute::new`].
    #[track_caller]
    pub fn compute<'c>(
        &'c self,
        kind: ComputeKind,
        srcs: &[&Value<'c>],
        shape: &[usize],
        dtype: DType,
    ) -> Value<'c>
    where
        'a: 'c,
    {
        let site = self.site(kind_op(&kind));
        self.compute_at(kind, srcs, shape, dtype, site, false)
    }

    /// [`Ctx::compute`] at `site`; `loaded`: the result is a value loaded from a ref.
    fn compute_at<'c>(
        &'c self,
        kind: ComputeKind,
        srcs: &[&Value<'c>],
        shape: &[usize],
        dtype: DType,
        site: OpSite,
        loaded: bool,
    ) -> Value<'c>
    where
        'a: 'c,
    {
        let Some(ops) = srcs
            .iter()
            .map(|v| v.op.clone())
            .collect::<Option<Vec<_>>>()
        else {
            return self.value(None);
        };
        let dst = self.fresh_as(shape, dtype, loaded);
        match Compute::new(kind, ops, dst.clone()) {
            Ok(c) => {
                self.push(
                    OpKind::Compute(Box::new(DataOp::Compute(Arc::new(c)))),
                    site,
                );
                self.value(Some(dst))
            }
            Err(why) => {
                self.temps
                    .borrow_mut()
                    .give_back(dst.view.alloc(), dst.view.offset());
                self.fail(site, KernelErrorKind::ShapeMismatch, why);
                self.value(None)
            }
        }
    }

    #[track_caller]
    fn unary<'c>(&'c self, op: Unary, x: &Value<'c>) -> Value<'c>
    where
        'a: 'c,
    {
        let site = self.site(kind_op(&ComputeKind::Unary(op)));
        self.compute_at(
            ComputeKind::Unary(op),
            &[x],
            x.shape(),
            x.dtype(),
            site,
            false,
        )
    }

    #[track_caller]
    fn binary<'c>(&'c self, op: Binary, x: &Value<'c>, y: &Value<'c>) -> Value<'c>
    where
        'a: 'c,
    {
        let site = self.site(kind_op(&ComputeKind::Binary(op)));
        let shape = if x.shape().is_empty() {
            y.shape()
        } else {
            x.shape()
        };
        self.compute_at(
            ComputeKind::Binary(op),
            &[x, y],
            shape,
            x.dtype(),
            site,
            false,
        )
    }

    /// `x_ref[...]`: the VMEM ref `r` as a value (a copy: later writes to `r` do not
    /// change it; the VMEM check counts no bytes for it, see [`Temps`]). A ref in HBM
    /// is an error, as on a TPU.
    ///
    /// [`Temps`]: super::temps::Temps
    #[track_caller]
    pub fn load<'c>(&'c self, r: Ref) -> Value<'c>
    where
        'a: 'c,
    {
        let site = self.site("load");
        let Some(src) = self.vmem_view(&r, site) else {
            return self.value(None);
        };
        let dst = self.fresh_as(r.shape(), r.dtype, true);
        self.push(
            OpKind::Compute(Box::new(DataOp::Copy { src, dst: dst.view })),
            site,
        );
        self.value(Some(dst))
    }

    /// `x_ref[...]` read in place: the VMEM ref `r` as the operand of the ops that use
    /// it, without the copy [`Ctx::load`] makes (what Mosaic does when a load feeds a
    /// matmul: the MXU streams its operands from VMEM). Each op that uses the value
    /// reads the ref as it is then, so the verifier sees the ref read by that op; a
    /// store to `r` between two uses is seen by the second (use `load` for a snapshot).
    /// A ref in HBM is an error.
    #[track_caller]
    pub fn read<'c>(&'c self, r: Ref) -> Value<'c>
    where
        'a: 'c,
    {
        let site = self.site("read");
        let Some(view) = self.vmem_view(&r, site) else {
            return self.value(None);
        };
        // Not a temporary: dropping it gives nothing back (no pool holds `r`'s allocation).
        self.value(Some(Operand {
            view,
            shape: r.shape().to_vec(),
            dtype: r.dtype,
        }))
    }

    /// `x_ref[start : start + shape]` of a VMEM ref (a window on any dims).
    #[track_caller]
    pub fn load_window<'c>(&'c self, r: Ref, start: &[usize], shape: &[usize]) -> Value<'c>
    where
        'a: 'c,
    {
        let ones = vec![1; shape.len()];
        self.load_strided(r, start, shape, &ones)
    }

    /// A window of a VMEM ref with a step per dimension (`x_ref[::2, 1:5]`): element `i`
    /// of the value is element `start + i * strides` of the ref.
    #[track_caller]
    pub fn load_strided<'c>(
        &'c self,
        r: Ref,
        start: &[usize],
        shape: &[usize],
        strides: &[usize],
    ) -> Value<'c>
    where
        'a: 'c,
    {
        let site = self.site("load");
        let Some(view) = self.vmem_view(&r, site) else {
            return self.value(None);
        };
        let whole = self.value(Some(Operand {
            view,
            shape: r.shape().to_vec(),
            dtype: r.dtype,
        }));
        let v = self.compute_at(
            ComputeKind::Slice {
                start: start.to_vec(),
                strides: strides.to_vec(),
            },
            &[&whole],
            shape,
            r.dtype,
            site,
            true,
        );
        // The ref's view is not a temporary: nothing to give back.
        std::mem::forget(whole);
        v
    }

    /// `x_ref[...] = v`: writes the value into the VMEM ref `r` (same shape and dtype).
    #[track_caller]
    pub fn store(&self, r: Ref, v: &Value<'_>) {
        let site = self.site("store");
        let (Some(dst), Some(src)) = (self.vmem_view(&r, site), v.op.as_ref()) else {
            return;
        };
        if r.shape() != src.shape.as_slice() || r.dtype != src.dtype {
            self.fail(
                site,
                KernelErrorKind::ShapeMismatch,
                format!(
                    "`{}` is {:?} {} but the value stored is {:?} {}",
                    self.name(&r),
                    r.shape(),
                    r.dtype,
                    src.shape,
                    src.dtype
                ),
            );
            return;
        }
        self.push(
            OpKind::Compute(Box::new(DataOp::Copy { src: src.view, dst })),
            site,
        );
    }

    /// `x_ref[start : start + v.shape] = v`: writes the value into a window of `r`.
    #[track_caller]
    pub fn store_window(&self, r: Ref, start: &[usize], v: &Value<'_>) {
        let site = self.site("store");
        let (Some(view), Some(src)) = (self.vmem_view(&r, site), v.op.clone()) else {
            return;
        };
        let whole = Operand {
            view,
            shape: r.shape().to_vec(),
            dtype: r.dtype,
        };
        let kind = ComputeKind::UpdateSlice {
            start: start.to_vec(),
        };
        match Compute::new(kind, vec![whole.clone(), src], whole) {
            Ok(c) => self.push(
                OpKind::Compute(Box::new(DataOp::Compute(Arc::new(c)))),
                site,
            ),
            Err(why) => self.fail(site, KernelErrorKind::ShapeMismatch, why),
        }
    }

    /// `jnp.full(shape, value, dtype)` (a scalar with `shape` empty).
    #[track_caller]
    pub fn full<'c>(&'c self, shape: &[usize], value: f64, dtype: DType) -> Value<'c>
    where
        'a: 'c,
    {
        let site = self.site("full");
        let dst = self.fresh(shape, dtype);
        self.push(
            OpKind::Compute(Box::new(DataOp::Fill {
                dst: dst.view,
                bits: dtype.bits_of(value),
            })),
            site,
        );
        self.value(Some(dst))
    }

    /// A read of value `v` the kernel decides by ([`OpKind::Read`]): where a front end
    /// that traces while the program runs ([`crate::steer`]) learns its data.
    #[track_caller]
    pub fn scalar_read_value(&self, v: &Value<'_>) {
        let site = self.site("read");
        if let Some(o) = &v.op {
            self.push(
                OpKind::Read {
                    src: o.view,
                    fetch: o.view,
                },
                site,
            );
        }
    }

    /// A read of `src` the kernel decides by ([`OpKind::Read`]; VMEM), whose tracer is
    /// given `fetch` (`src`, or more of its allocation).
    #[track_caller]
    pub fn scalar_read(&self, src: Ref, fetch: Ref) {
        let site = self.site("read");
        if let (Some(s), Some(f)) = (self.vmem_view(&src, site), self.vmem_view(&fetch, site)) {
            self.push(OpKind::Read { src: s, fetch: f }, site);
        }
    }

    /// `lax.iota(dtype, n)` along `dim` of `shape` (`lax.broadcasted_iota`).
    #[track_caller]
    pub fn iota<'c>(&'c self, shape: &[usize], dim: usize, dtype: DType) -> Value<'c>
    where
        'a: 'c,
    {
        self.compute(ComputeKind::Iota { dim }, &[], shape, dtype)
    }

    /// `jnp.where(c, x, y)`.
    #[track_caller]
    pub fn where_<'c>(&'c self, c: &Value<'c>, x: &Value<'c>, y: &Value<'c>) -> Value<'c>
    where
        'a: 'c,
    {
        let shape = [c.shape(), x.shape(), y.shape()]
            .into_iter()
            .find(|s| !s.is_empty())
            .unwrap_or(&[])
            .to_vec();
        self.compute(ComputeKind::Select, &[c, x, y], &shape, x.dtype())
    }

    /// `jnp.concatenate(values, dim)`.
    #[track_caller]
    pub fn concatenate<'c>(&'c self, values: &[&Value<'c>], dim: usize) -> Value<'c>
    where
        'a: 'c,
    {
        let mut shape = values.first().map_or(vec![], |v| v.shape().to_vec());
        if let Some(d) = shape.get_mut(dim) {
            *d = values
                .iter()
                .map(|v| v.shape().get(dim).copied().unwrap_or(0))
                .sum();
        }
        let dtype = values.first().map_or(DType::F32, |v| v.dtype());
        self.compute(ComputeKind::Concat { dim }, values, &shape, dtype)
    }

    /// `lax.dot_general(a, b, dims, preferred_element_type=dtype)`.
    #[track_caller]
    pub fn dot_general<'c>(
        &'c self,
        a: &Value<'c>,
        b: &Value<'c>,
        dims: DotDims,
        dtype: DType,
    ) -> Value<'c>
    where
        'a: 'c,
    {
        let site = self.site("dot_general");
        let shape = match (&a.op, &b.op) {
            (Some(x), Some(y)) => match dot_shape(&dims, x, y) {
                Ok(s) => s,
                Err(why) => {
                    self.fail(site, KernelErrorKind::ShapeMismatch, why);
                    return self.value(None);
                }
            },
            _ => return self.value(None),
        };
        self.compute_at(ComputeKind::Dot(dims), &[a, b], &shape, dtype, site, false)
    }

    /// `a @ b` / `jnp.dot(a, b)` for 2-D `a` and `b` (and a leading batch dimension on
    /// both: `einsum('bij,bjk->bik')`), accumulated in f32 for floats and i32 for
    /// integers (`preferred_element_type`).
    #[track_caller]
    pub fn dot<'c>(&'c self, a: &Value<'c>, b: &Value<'c>) -> Value<'c>
    where
        'a: 'c,
    {
        let r = a.shape().len();
        let dims = if r == 3 {
            DotDims {
                lhs_contract: vec![2],
                rhs_contract: vec![1],
                lhs_batch: vec![0],
                rhs_batch: vec![0],
            }
        } else {
            DotDims {
                lhs_contract: vec![r.saturating_sub(1)],
                rhs_contract: vec![0],
                ..DotDims::default()
            }
        };
        let acc = if a.dtype().is_float() {
            DType::F32
        } else {
            DType::I32
        };
        self.dot_general(a, b, dims, acc)
    }

    unary_fns!(
        exp Exp "`jnp.exp`.", exp2 Exp2 "`jnp.exp2`.", expm1 Expm1 "`jnp.expm1`.",
        log Log "`jnp.log`.", log1p Log1p "`jnp.log1p`.", sqrt Sqrt "`jnp.sqrt`.",
        rsqrt Rsqrt "`lax.rsqrt`.", tanh Tanh "`jnp.tanh`.", logistic Logistic "`jax.nn.sigmoid`.",
        sin Sin "`jnp.sin`.", cos Cos "`jnp.cos`.", erf Erf "`jax.scipy.special.erf`.",
        abs Abs "`jnp.abs`.", sign Sign "`jnp.sign`.", floor Floor "`jnp.floor`.",
        ceil Ceil "`jnp.ceil`.", round Round "`lax.round` (half away from zero).",
        round_even RoundEven "`jnp.round` (half to even)."
    );

    /// `jnp.maximum(x, y)`.
    #[track_caller]
    pub fn maximum<'c>(&'c self, x: &Value<'c>, y: &Value<'c>) -> Value<'c>
    where
        'a: 'c,
    {
        self.binary(Binary::Max, x, y)
    }

    /// `jnp.minimum(x, y)`.
    #[track_caller]
    pub fn minimum<'c>(&'c self, x: &Value<'c>, y: &Value<'c>) -> Value<'c>
    where
        'a: 'c,
    {
        self.binary(Binary::Min, x, y)
    }

    /// `x ** y` for floats (`lax.pow`).
    #[track_caller]
    pub fn pow<'c>(&'c self, x: &Value<'c>, y: &Value<'c>) -> Value<'c>
    where
        'a: 'c,
    {
        self.binary(Binary::Pow, x, y)
    }
}

/// The name a compute op's site carries (what step tables and timelines show): the
/// primitive's (`exp`, `mul`, `lt`, `select`, `dot_general`), not its family's.
fn kind_op(kind: &ComputeKind) -> &'static str {
    match kind {
        ComputeKind::Unary(u) => u.name(),
        ComputeKind::Binary(b) => b.name(),
        ComputeKind::Compare(c) => c.name(),
        ComputeKind::Select => "select",
        ComputeKind::Convert => "astype",
        ComputeKind::Broadcast { .. } => "broadcast_in_dim",
        ComputeKind::Reshape => "reshape",
        ComputeKind::Transpose { .. } => "transpose",
        ComputeKind::Iota { .. } => "iota",
        ComputeKind::Constant(_) => "constant",
        ComputeKind::Bitcast => "bitcast",
        ComputeKind::Slice { .. } => "slice",
        ComputeKind::UpdateSlice { .. } => "dynamic_update_slice",
        ComputeKind::Concat { .. } => "concatenate",
        ComputeKind::Reduce { .. } => "reduce",
        ComputeKind::ArgReduce { .. } => "argreduce",
        ComputeKind::Dot(_) => "dot_general",
    }
}
