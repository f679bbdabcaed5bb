//! The CPU twin of every compute op: source elements in, destination elements out, as
//! 32-bit words ([`DType::bits_of`]'s form). Floats compute in f32 (16-bit ones widened
//! and rounded once to nearest even, as XLA does on a CPU), integers in i32 wrapping to
//! their width; matrix products through the `gemm` crate.

use crate::array::DType;
use crate::ir::{Binary, Comparison, Compute, ComputeKind, DotDims, Operand, Reduction, Unary};
use std::borrow::Cow;

/// The destination's words of `c`, from its sources' words (`srcs[i]` holds the
/// elements of `c.srcs[i]`, row-major).
pub fn compute(c: &Compute, srcs: &[&[u32]]) -> Vec<u32> {
    let d = &c.dst;
    match &c.kind {
        ComputeKind::Unary(u) => unary(*u, d.dtype, srcs[0]),
        ComputeKind::Binary(b) => {
            let (x, y) = (&c.srcs[0], &c.srcs[1]);
            let n = d.numel();
            binary(*b, d.dtype, &spread(srcs[0], x, n), &spread(srcs[1], y, n))
        }
        ComputeKind::Compare(op) => {
            let (x, y) = (&c.srcs[0], &c.srcs[1]);
            let n = d.numel();
            compare(*op, x.dtype, &spread(srcs[0], x, n), &spread(srcs[1], y, n))
        }
        ComputeKind::Select => {
            let n = d.numel();
            let p = spread(srcs[0], &c.srcs[0], n);
            let t = spread(srcs[1], &c.srcs[1], n);
            let f = spread(srcs[2], &c.srcs[2], n);
            (0..n)
                .map(|i| if p[i] & 1 != 0 { t[i] } else { f[i] })
                .collect()
        }
        ComputeKind::Convert => srcs[0]
            .iter()
            .map(|&w| convert(c.srcs[0].dtype, d.dtype, w))
            .collect(),
        ComputeKind::Broadcast { dims } => broadcast(srcs[0], &c.srcs[0].shape, dims, &d.shape),
        ComputeKind::Reshape | ComputeKind::Bitcast => srcs[0].to_vec(),
        ComputeKind::Constant(words) => words.to_vec(),
        ComputeKind::Transpose { perm } => transpose(srcs[0], &c.srcs[0].shape, perm),
        ComputeKind::Iota { dim } => {
            let strides = strides(&d.shape);
            (0..d.numel())
                .map(|i| {
                    d.dtype
                        .bits_of(((i / strides[*dim]) % d.shape[*dim]) as f64)
                })
                .collect()
        }
        ComputeKind::Slice {
            start,
            strides: step,
        } => {
            let from = strides(&c.srcs[0].shape);
            index_map(&d.shape, |idx| {
                let at: usize = (0..idx.len())
                    .map(|k| (start[k] + idx[k] * step[k]) * from[k])
                    .sum();
                srcs[0][at]
            })
        }
        ComputeKind::UpdateSlice { start } => {
            let mut out = srcs[0].to_vec();
            let into = strides(&d.shape);
            let upd = &c.srcs[1];
            let mut i = 0;
            for_each_index(&upd.shape, |idx| {
                let at: usize = (0..idx.len()).map(|k| (start[k] + idx[k]) * into[k]).sum();
                out[at] = srcs[1][i];
                i += 1;
            });
            out
        }
        ComputeKind::Concat { dim } => {
            let outer: usize = d.shape[..*dim].iter().product();
            let mut out = Vec::with_capacity(d.numel());
            for o in 0..outer {
                for (k, s) in c.srcs.iter().enumerate() {
                    let block: usize = s.shape[*dim..].iter().product();
                    out.extend_from_slice(&srcs[k][o * block..(o + 1) * block]);
                }
            }
            out
        }
        ComputeKind::Reduce { op, axes } => reduce(*op, &c.srcs[0], axes, srcs[0]),
        ComputeKind::ArgReduce { op, axis } => arg_reduce(*op, &c.srcs[0], *axis, srcs[0]),
        ComputeKind::Dot(dims) => dot(dims, &c.srcs[0], &c.srcs[1], srcs[0], srcs[1], d),
    }
}

/// `words` of `o` over `n` elements: as they are, or a scalar repeated.
fn spread<'a>(words: &'a [u32], o: &Operand, n: usize) -> std::borrow::Cow<'a, [u32]> {
    if o.shape.is_empty() && n != 1 {
        std::borrow::Cow::Owned(vec![words[0]; n])
    } else {
        std::borrow::Cow::Borrowed(words)
    }
}

/// A float element as f32 (16-bit floats widened exactly).
#[inline]
fn to_f32(t: DType, w: u32) -> f32 {
    match t {
        DType::F16 => half::f16::from_bits(w as u16).to_f32(),
        DType::BF16 => half::bf16::from_bits(w as u16).to_f32(),
        _ => f32::from_bits(w),
    }
}

/// An f32 result in float dtype `t`, rounded once to nearest even.
#[inline]
fn from_f32(t: DType, x: f32) -> u32 {
    match t {
        DType::F16 => half::f16::from_f32(x).to_bits() as u32,
        DType::BF16 => half::bf16::from_f32(x).to_bits() as u32,
        _ => x.to_bits(),
    }
}

/// An integer or bool element as i32 (8-bit ones sign- or zero-extended).
#[inline]
fn to_i32(w: u32) -> i32 {
    w as i32
}

/// An i32 result wrapped to integer (or bool) dtype `t`.
#[inline]
fn from_i32(t: DType, x: i32) -> u32 {
    match t {
        DType::I8 => x as i8 as i32 as u32,
        DType::U8 => x as u8 as u32,
        DType::Bool => (x & 1) as u32,
        _ => x as u32,
    }
}

/// Bits of an integer dtype (32 for i32).
fn int_bits(t: DType) -> u32 {
    match t {
        DType::I8 | DType::U8 => 8,
        DType::Bool => 1,
        _ => 32,
    }
}

/// Floats' max as XLA's: NaN if either is; +0 above -0.
#[inline]
fn fmax(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if a == b {
        // Equal: the same value, or zeros of either sign (+0 wins).
        f32::from_bits(a.to_bits() & b.to_bits())
    } else if b > a {
        b
    } else {
        a
    }
}

/// Floats' min as XLA's: NaN if either is; -0 below +0.
#[inline]
fn fmin(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if a == b {
        f32::from_bits(a.to_bits() | b.to_bits())
    } else if b < a {
        b
    } else {
        a
    }
}

/// `x^n` by repeated squaring in f32, as XLA expands `integer_pow`.
fn powi_f32(x: f32, n: i32) -> f32 {
    let mut acc = 1.0f32;
    let mut base = x;
    let mut e = n.unsigned_abs();
    while e > 0 {
        if e & 1 == 1 {
            acc *= base;
        }
        e >>= 1;
        if e > 0 {
            base *= base;
        }
    }
    if n < 0 {
        1.0 / acc
    } else {
        acc
    }
}

fn powi_i32(x: i32, n: i32) -> i32 {
    let mut acc = 1i32;
    let mut base = x;
    let mut e = n.max(0) as u32;
    while e > 0 {
        if e & 1 == 1 {
            acc = acc.wrapping_mul(base);
        }
        e >>= 1;
        if e > 0 {
            base = base.wrapping_mul(base);
        }
    }
    acc
}

fn unary(u: Unary, t: DType, src: &[u32]) -> Vec<u32> {
    if t.is_float() {
        let f: fn(f32) -> f32 = match u {
            Unary::Neg => |x| -x,
            Unary::Abs => f32::abs,
            Unary::Sign => |x| {
                if x.is_nan() || x == 0.0 {
                    x
                } else {
                    1.0f32.copysign(x)
                }
            },
            Unary::Floor => f32::floor,
            Unary::Ceil => f32::ceil,
            Unary::Round => f32::round,
            Unary::RoundEven => f32::round_ties_even,
            Unary::Exp => f32::exp,
            Unary::Exp2 => f32::exp2,
            Unary::Expm1 => f32::exp_m1,
            Unary::Log => f32::ln,
            Unary::Log1p => f32::ln_1p,
            Unary::Sqrt => f32::sqrt,
            Unary::Rsqrt => |x| 1.0 / x.sqrt(),
            Unary::Tanh => f32::tanh,
            Unary::Logistic => |x| 1.0 / (1.0 + (-x).exp()),
            Unary::Sin => f32::sin,
            Unary::Cos => f32::cos,
            Unary::Erf => libm::erff,
            Unary::IntegerPow(n) => {
                return src
                    .iter()
                    .map(|&w| from_f32(t, powi_f32(to_f32(t, w), n)))
                    .collect()
            }
            Unary::Not => unreachable!("checked: not takes integers and bools"),
        };
        return src.iter().map(|&w| from_f32(t, f(to_f32(t, w)))).collect();
    }
    let unsigned = matches!(t, DType::U8 | DType::Bool);
    src.iter()
        .map(|&w| {
            let x = to_i32(w);
            let r = match u {
                Unary::Neg => x.wrapping_neg(),
                Unary::Abs if unsigned => x,
                Unary::Abs => x.wrapping_abs(),
                Unary::Sign => x.signum(),
                Unary::Not => !x,
                Unary::IntegerPow(n) => powi_i32(x, n),
                _ => unreachable!("checked: {u:?} takes floats"),
            };
            from_i32(t, r)
        })
        .collect()
}

fn binary(b: Binary, t: DType, x: &[u32], y: &[u32]) -> Vec<u32> {
    if t.is_float() {
        let f: fn(f32, f32) -> f32 = match b {
            Binary::Add => |a, b| a + b,
            Binary::Sub => |a, b| a - b,
            Binary::Mul => |a, b| a * b,
            Binary::Div => |a, b| a / b,
            Binary::Rem => |a, b| a % b,
            Binary::Pow => f32::powf,
            Binary::Max => fmax,
            Binary::Min => fmin,
            Binary::Atan2 => f32::atan2,
            _ => unreachable!("checked: {b:?} takes integers"),
        };
        return x
            .iter()
            .zip(y)
            .map(|(&a, &c)| from_f32(t, f(to_f32(t, a), to_f32(t, c))))
            .collect();
    }
    let bits = int_bits(t);
    x.iter()
        .zip(y)
        .map(|(&a, &c)| {
            let (a, c) = (to_i32(a), to_i32(c));
            let r = match b {
                Binary::Add => a.wrapping_add(c),
                Binary::Sub => a.wrapping_sub(c),
                Binary::Mul => a.wrapping_mul(c),
                // XLA: division by zero gives all ones (-1); MIN / -1 wraps to MIN.
                Binary::Div if c == 0 => -1,
                Binary::Div => a.wrapping_div(c),
                Binary::Rem if c == 0 => a,
                Binary::Rem => a.wrapping_rem(c),
                Binary::Max => a.max(c),
                Binary::Min => a.min(c),
                Binary::And => a & c,
                Binary::Or => a | c,
                Binary::Xor => a ^ c,
                Binary::ShiftLeft => {
                    if (c as u32) < bits {
                        a.wrapping_shl(c as u32)
                    } else {
                        0
                    }
                }
                Binary::ShiftRightLogical => {
                    let ua = (a as u32) & (u32::MAX >> (32 - bits));
                    if (c as u32) < bits {
                        (ua >> c as u32) as i32
                    } else {
                        0
                    }
                }
                Binary::ShiftRightArithmetic => {
                    // The sign bit of the width fills in, signed or not (XLA's rule).
                    let signed = (a << (32 - bits)) >> (32 - bits);
                    signed >> (c as u32).min(bits - 1).min(31)
                }
                Binary::Pow | Binary::Atan2 => unreachable!("checked: {b:?} takes floats"),
            };
            from_i32(t, r)
        })
        .collect()
}

fn compare(op: Comparison, t: DType, x: &[u32], y: &[u32]) -> Vec<u32> {
    let cmp = |o: Option<std::cmp::Ordering>| {
        use std::cmp::Ordering::*;
        let r = match op {
            Comparison::Eq => o == Some(Equal),
            // Unordered (a NaN) counts as not equal.
            Comparison::Ne => o != Some(Equal),
            Comparison::Lt => o == Some(Less),
            Comparison::Le => matches!(o, Some(Less | Equal)),
            Comparison::Gt => o == Some(Greater),
            Comparison::Ge => matches!(o, Some(Greater | Equal)),
        };
        u32::from(r)
    };
    x.iter()
        .zip(y)
        .map(|(&a, &b)| {
            if t.is_float() {
                cmp(to_f32(t, a).partial_cmp(&to_f32(t, b)))
            } else {
                cmp(Some(to_i32(a).cmp(&to_i32(b))))
            }
        })
        .collect()
}

/// Element `w` of dtype `from` as dtype `to` (`lax.convert_element_type`).
pub fn convert(from: DType, to: DType, w: u32) -> u32 {
    if from == to {
        return w;
    }
    if to == DType::Bool {
        let nonzero = if from.is_float() {
            to_f32(from, w) != 0.0
        } else {
            w != 0
        };
        return u32::from(nonzero);
    }
    if from.is_float() {
        let x = to_f32(from, w);
        if to.is_float() {
            return from_f32(to, x);
        }
        // Toward zero, saturating at the integer's range; NaN is 0.
        let (lo, hi) = match to {
            DType::I8 => (i8::MIN as f64, i8::MAX as f64),
            DType::U8 => (0.0, u8::MAX as f64),
            _ => (i32::MIN as f64, i32::MAX as f64),
        };
        let v = if x.is_nan() {
            0.0
        } else {
            (x as f64).trunc().clamp(lo, hi)
        };
        return from_i32(to, v as i64 as i32);
    }
    let v = to_i32(w);
    if to.is_float() {
        // i32 to f32 rounds to nearest even, once (f64 holds every i32).
        return from_f32(to, v as f32);
    }
    from_i32(to, v)
}

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Calls `f` with every index of `shape`, row-major.
fn for_each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let mut idx = vec![0; shape.len()];
    loop {
        f(&idx);
        let mut k = shape.len();
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < shape[k] {
                break;
            }
            idx[k] = 0;
        }
    }
}

/// `f` of every index of `shape`, row-major.
fn index_map(shape: &[usize], mut f: impl FnMut(&[usize]) -> u32) -> Vec<u32> {
    let mut out = Vec::with_capacity(shape.iter().product());
    for_each_index(shape, |i| out.push(f(i)));
    out
}

fn broadcast(src: &[u32], from: &[usize], dims: &[usize], to: &[usize]) -> Vec<u32> {
    let s = strides(from);
    index_map(to, |idx| {
        let at: usize = dims
            .iter()
            .enumerate()
            .map(|(i, &k)| if from[i] == 1 { 0 } else { idx[k] * s[i] })
            .sum();
        src[at]
    })
}

fn transpose(src: &[u32], from: &[usize], perm: &[usize]) -> Vec<u32> {
    let s = strides(from);
    let to: Vec<usize> = perm.iter().map(|&p| from[p]).collect();
    index_map(&to, |idx| {
        let at: usize = perm.iter().enumerate().map(|(i, &p)| idx[i] * s[p]).sum();
        src[at]
    })
}

/// The source index of every element of the reduced operand: for each kept index
/// (row-major over the kept dims), the flat indices of the reduced dims in order.
fn groups(shape: &[usize], axes: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let s = strides(shape);
    let kept: Vec<usize> = (0..shape.len()).filter(|i| !axes.contains(i)).collect();
    let kept_shape: Vec<usize> = kept.iter().map(|&i| shape[i]).collect();
    let red_shape: Vec<usize> = axes.iter().map(|&i| shape[i]).collect();
    let mut bases = Vec::new();
    for_each_index(&kept_shape, |idx| {
        bases.push(kept.iter().zip(idx).map(|(&k, &i)| i * s[k]).sum());
    });
    let mut offsets = Vec::new();
    for_each_index(&red_shape, |idx| {
        offsets.push(axes.iter().zip(idx).map(|(&k, &i)| i * s[k]).sum());
    });
    (bases, offsets)
}

fn reduce(op: Reduction, o: &Operand, axes: &[usize], src: &[u32]) -> Vec<u32> {
    let t = o.dtype;
    let (bases, offsets) = groups(&o.shape, axes);
    bases
        .iter()
        .map(|&b| {
            let elems = offsets.iter().map(|&k| src[b + k]);
            if t.is_float() {
                let vals = elems.map(|w| to_f32(t, w));
                let r = match op {
                    Reduction::Sum => vals.fold(0.0f32, |a, x| a + x),
                    Reduction::Max => vals.fold(f32::NEG_INFINITY, fmax),
                    Reduction::Min => vals.fold(f32::INFINITY, fmin),
                };
                from_f32(t, r)
            } else {
                let vals = elems.map(to_i32);
                let r = match op {
                    Reduction::Sum => vals.fold(0i32, i32::wrapping_add),
                    Reduction::Max => vals.max().unwrap_or(i32::MIN),
                    Reduction::Min => vals.min().unwrap_or(i32::MAX),
                };
                from_i32(t, r)
            }
        })
        .collect()
}

fn arg_reduce(op: Reduction, o: &Operand, axis: usize, src: &[u32]) -> Vec<u32> {
    let t = o.dtype;
    let (bases, offsets) = groups(&o.shape, &[axis]);
    bases
        .iter()
        .map(|&b| {
            let mut best = 0usize;
            for (i, &k) in offsets.iter().enumerate().skip(1) {
                let (cur, new) = (src[b + offsets[best]], src[b + k]);
                let better = if t.is_float() {
                    let (c, n) = (to_f32(t, cur), to_f32(t, new));
                    // The first NaN wins and stays.
                    !c.is_nan() && (n.is_nan() || if op == Reduction::Max { n > c } else { n < c })
                } else {
                    let (c, n) = (to_i32(cur), to_i32(new));
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
            best as u32
        })
        .collect()
}

/// `x` permuted so that the dims `first` come first (in order), then the others; `x`
/// itself when that is its order already.
fn move_front<'a>(words: &'a [u32], shape: &[usize], first: &[usize]) -> Cow<'a, [u32]> {
    let mut perm: Vec<usize> = first.to_vec();
    perm.extend((0..shape.len()).filter(|i| !first.contains(i)));
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Cow::Borrowed(words);
    }
    Cow::Owned(transpose(words, shape, &perm))
}

/// The f32 values of float `words` of dtype `t`: the words themselves for f32.
fn f32s(t: DType, words: &[u32]) -> Cow<'_, [f32]> {
    if t == DType::F32 {
        Cow::Borrowed(bytemuck::cast_slice(words))
    } else {
        Cow::Owned(words.iter().map(|&w| to_f32(t, w)).collect())
    }
}

fn dot(dims: &DotDims, l: &Operand, r: &Operand, lw: &[u32], rw: &[u32], d: &Operand) -> Vec<u32> {
    let size = |shape: &[usize], ks: &[usize]| ks.iter().map(|&k| shape[k]).product::<usize>();
    let batch = size(&l.shape, &dims.lhs_batch);
    let k = size(&l.shape, &dims.lhs_contract);
    let m = l.numel() / (batch * k).max(1);
    let n = r.numel() / (batch * k).max(1);
    // Left as [batch, m, k], right as [batch, k, n].
    let mut lf: Vec<usize> = dims.lhs_batch.clone();
    lf.extend(
        (0..l.shape.len())
            .filter(|i| !dims.lhs_batch.contains(i) && !dims.lhs_contract.contains(i)),
    );
    lf.extend(&dims.lhs_contract);
    let lt = move_front(lw, &l.shape, &lf);
    let mut rf: Vec<usize> = dims.rhs_batch.clone();
    rf.extend(&dims.rhs_contract);
    rf.extend(
        (0..r.shape.len())
            .filter(|i| !dims.rhs_batch.contains(i) && !dims.rhs_contract.contains(i)),
    );
    let rt = move_front(rw, &r.shape, &rf);
    let t = d.dtype;
    let mut out = Vec::with_capacity(batch * m * n);
    if t.is_float() {
        let (lv, rv) = (f32s(l.dtype, &lt), f32s(r.dtype, &rt));
        let mut acc = vec![0.0f32; batch * m * n];
        for b in 0..batch {
            matmul_f32(
                &lv[b * m * k..(b + 1) * m * k],
                &rv[b * k * n..(b + 1) * k * n],
                &mut acc[b * m * n..(b + 1) * m * n],
                m,
                k,
                n,
            );
        }
        out.extend(acc.into_iter().map(|x| from_f32(t, x)));
    } else {
        for b in 0..batch {
            for i in 0..m {
                for j in 0..n {
                    let mut s = 0i32;
                    for p in 0..k {
                        let a = to_i32(lt[(b * m + i) * k + p]);
                        let c = to_i32(rt[(b * k + p) * n + j]);
                        s = s.wrapping_add(a.wrapping_mul(c));
                    }
                    out.push(from_i32(t, s));
                }
            }
        }
    }
    out
}

/// `c = a @ b` for row-major `a` (m x k) and `b` (k x n), in f32, on every core.
pub fn matmul_f32(a: &[f32], b: &[f32], c: &mut [f32], m: usize, k: usize, n: usize) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c.fill(0.0);
        return;
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let par = if threads > 1 && m * n * k >= 1 << 18 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: the slices hold m x k, k x n and m x n elements at the strides given
    // (row-major: column stride 1, row stride the row length), as asserted.
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            1,
            n as isize,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            par,
        );
    }
}
