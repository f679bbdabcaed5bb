//! XLA-semantics references, computed directly on host arrays (independent of the
//! kernel machinery). `inputs[device][operand]` in, `outputs[device][operand]` out.

use crate::array::{DType, HostArray};
use crate::ir::ReduceOp;

/// `lax.ppermute(x, perm)`: `out[dst] = x[src]` for each pair; others get zeros.
pub fn ppermute(inputs: &[Vec<HostArray>], perm: &[(usize, usize)]) -> Vec<Vec<HostArray>> {
    let mut out: Vec<Vec<HostArray>> = inputs
        .iter()
        .map(|d| vec![HostArray::zeros(d[0].dtype, &d[0].shape)])
        .collect();
    for &(s, d) in perm {
        out[d][0] = inputs[s][0].clone();
    }
    out
}

/// `lax.all_gather(x, axis_name)` (axis 0, untiled): every device gets `stack(x_0..x_{P-1})`.
pub fn all_gather(inputs: &[Vec<HostArray>]) -> Vec<Vec<HostArray>> {
    let first = &inputs[0][0];
    let mut shape = vec![inputs.len()];
    shape.extend_from_slice(&first.shape);
    let words: Vec<u32> = inputs
        .iter()
        .flat_map(|d| d[0].words.iter().copied())
        .collect();
    let gathered = HostArray {
        dtype: first.dtype,
        shape,
        words,
    };
    vec![vec![gathered]; inputs.len()]
}

/// `lax.all_to_all(x, split_axis=0, concat_axis=0, tiled=True)` on inputs of shape
/// `[P, ...block]`: device i's block j becomes device j's block i.
pub fn all_to_all(inputs: &[Vec<HostArray>]) -> Vec<Vec<HostArray>> {
    let p = inputs.len();
    (0..p)
        .map(|i| {
            let first = &inputs[i][0];
            let block = first.len() / p;
            let words = (0..p)
                .flat_map(|j| {
                    inputs[j][0].words[i * block..(i + 1) * block]
                        .iter()
                        .copied()
                })
                .collect();
            vec![HostArray {
                dtype: first.dtype,
                shape: first.shape.clone(),
                words,
            }]
        })
        .collect()
}

/// `lax.psum` / `pmax` / `pmin` of operand 0 over every device (float sums in f64,
/// rounded once to the dtype).
pub fn all_reduce(inputs: &[Vec<HostArray>], op: ReduceOp) -> HostArray {
    let first = &inputs[0][0];
    let srcs: Vec<&[u32]> = inputs.iter().map(|d| &d[0].words[..]).collect();
    let mut words = vec![0; first.len()];
    all_reduce_words(&srcs, first.dtype, op, &mut words);
    HostArray {
        dtype: first.dtype,
        shape: first.shape.clone(),
        words,
    }
}

/// Elements of one block: a few pages per operand, the dtype's conversions picked once.
const BLOCK: usize = 4096;

/// [`all_reduce`] on words: `out[i]` the reduction of `srcs[k][i]` over `k` (as long
/// as `out`) in `dtype`, a block of elements per core at a time.
pub fn all_reduce_words(srcs: &[&[u32]], dtype: DType, op: ReduceOp, out: &mut [u32]) {
    use rayon::prelude::*;
    let block = |(k, out): (usize, &mut [u32])| {
        let at = k * BLOCK;
        let mine: Vec<&[u32]> = srcs.iter().map(|s| &s[at..at + out.len()]).collect();
        reduce_block(&mine, dtype, op, out);
    };
    if out.len() >= 16 * BLOCK {
        out.par_chunks_mut(BLOCK).enumerate().for_each(block);
    } else {
        out.chunks_mut(BLOCK).enumerate().for_each(block);
    }
}

/// One block of [`all_reduce_words`].
fn reduce_block(srcs: &[&[u32]], dtype: DType, op: ReduceOp, out: &mut [u32]) {
    match dtype {
        DType::F32 => reduce_floats(
            srcs,
            op,
            out,
            |w| f32::from_bits(w) as f64,
            |v| (v as f32).to_bits(),
        ),
        DType::F16 => reduce_floats(
            srcs,
            op,
            out,
            |w| half::f16::from_bits(w as u16).to_f64(),
            |v| half::f16::from_f64(v).to_bits() as u32,
        ),
        DType::BF16 => reduce_floats(
            srcs,
            op,
            out,
            |w| half::bf16::from_bits(w as u16).to_f64(),
            |v| half::bf16::from_f64(v).to_bits() as u32,
        ),
        _ => {
            for (i, o) in out.iter_mut().enumerate() {
                let vals = srcs.iter().map(|s| dtype.value_of(s[i]) as i64);
                let r = match op {
                    ReduceOp::Sum => vals.fold(0i64, i64::wrapping_add),
                    ReduceOp::Max => vals.max().unwrap_or(i64::MIN),
                    ReduceOp::Min => vals.min().unwrap_or(i64::MAX),
                };
                *o = dtype.bits_of(r as f64);
            }
        }
    }
}

/// A block of floats reduced in f64: `value` of each word in, `bits` of each result
/// out. XLA's max and min propagate NaN (f64::max and min would drop it).
#[inline(always)]
fn reduce_floats(
    srcs: &[&[u32]],
    op: ReduceOp,
    out: &mut [u32],
    value: impl Fn(u32) -> f64,
    bits: impl Fn(f64) -> u32,
) {
    let mut acc: Vec<f64> = srcs[0][..out.len()].iter().map(|&w| value(w)).collect();
    for s in &srcs[1..] {
        let s = &s[..out.len()];
        match op {
            ReduceOp::Sum => acc.iter_mut().zip(s).for_each(|(a, &w)| *a += value(w)),
            ReduceOp::Max => acc.iter_mut().zip(s).for_each(|(a, &w)| {
                let v = value(w);
                *a = if a.is_nan() || v.is_nan() {
                    f64::NAN
                } else {
                    a.max(v)
                };
            }),
            ReduceOp::Min => acc.iter_mut().zip(s).for_each(|(a, &w)| {
                let v = value(w);
                *a = if a.is_nan() || v.is_nan() {
                    f64::NAN
                } else {
                    a.min(v)
                };
            }),
        }
    }
    for (o, a) in out.iter_mut().zip(&acc) {
        *o = bits(*a);
    }
}

/// The all-reduce of operand 0 as every device's only output.
pub fn all_reduce_everywhere(inputs: &[Vec<HostArray>], op: ReduceOp) -> Vec<Vec<HostArray>> {
    vec![vec![all_reduce(inputs, op)]; inputs.len()]
}

/// `lax.psum_scatter(x, axis_name)` over the leading dimension: each device's input
/// is `(P, R, C)` and device `d` gets `sum_k x_k[d]`, of shape `(R, C)`.
pub fn psum_scatter(inputs: &[Vec<HostArray>]) -> Vec<Vec<HostArray>> {
    let p = inputs.len();
    (0..p)
        .map(|d| {
            let blocks: Vec<Vec<HostArray>> = inputs
                .iter()
                .map(|dev| {
                    let x = &dev[0];
                    let mut b = x.rows(d, 1);
                    b.shape.remove(0);
                    vec![b]
                })
                .collect();
            vec![all_reduce(&blocks, ReduceOp::Sum)]
        })
        .collect()
}

/// `x @ w` for row-major `x` (`[m, k]` words of `x.dtype`) and `w` (`[k, n]`): the exact
/// products summed in f64 (integers in i64), one value per element of the result.
fn matmul_values(x: &HostArray, w: &HostArray, m: usize, k: usize, n: usize) -> Vec<f64> {
    let t = x.dtype;
    let xv: Vec<f64> = x.words.iter().map(|&b| t.value_of(b)).collect();
    let wv: Vec<f64> = w.words.iter().map(|&b| t.value_of(b)).collect();
    let mut out = vec![0.0f64; m * n];
    if t.is_float() {
        for i in 0..m {
            for p in 0..k {
                let a = xv[i * k + p];
                let row = &wv[p * n..(p + 1) * n];
                for (o, &b) in out[i * n..(i + 1) * n].iter_mut().zip(row) {
                    *o += a * b;
                }
            }
        }
    } else {
        let mut acc = vec![0i64; m * n];
        for i in 0..m {
            for p in 0..k {
                let a = xv[i * k + p] as i64;
                for j in 0..n {
                    acc[i * n + j] = acc[i * n + j].wrapping_add(a * wv[p * n + j] as i64);
                }
            }
        }
        for (o, a) in out.iter_mut().zip(acc) {
            *o = a as f64;
        }
    }
    out
}

/// Values rounded once to `dtype` (integers wrap to i32, as an i32 accumulator does).
fn rounded(dtype: DType, shape: &[usize], values: &[f64]) -> HostArray {
    HostArray {
        dtype,
        shape: shape.to_vec(),
        words: values
            .iter()
            .map(|&v| {
                if dtype.is_float() {
                    dtype.bits_of(v)
                } else {
                    (v as i64 as i32) as u32
                }
            })
            .collect(),
    }
}

/// `all_gather(x, tiled) @ w` per device, for `inputs[device] = [x [m, k], w [k, n]]`:
/// device i gets the gathered x (every device's rows, in device order) times its own
/// w, as `[P, m, n]` (block j: x_j @ w_i), each element the exact sum rounded once.
pub fn all_gather_matmul(inputs: &[Vec<HostArray>]) -> Vec<Vec<HostArray>> {
    let p = inputs.len();
    inputs
        .iter()
        .map(|dev| {
            let w = &dev[1];
            let (k, n) = (w.shape[0], w.shape[1]);
            let mut values = Vec::new();
            for src in inputs {
                let x = &src[0];
                values.extend(matmul_values(x, w, x.shape[0], k, n));
            }
            let m = inputs[0][0].shape[0];
            vec![rounded(w.dtype, &[p, m, n], &values)]
        })
        .collect()
}

/// `psum_scatter(x @ w)` over the leading dimension, for `inputs[device] = [x [m, k],
/// w [k, n]]` with `m` a multiple of P: device d gets rows `d·m/P ..` of `Σ_j x_j @ w_j`
/// (`[m/P, n]`), the exact sum over every device and term rounded once.
pub fn matmul_reduce_scatter(inputs: &[Vec<HostArray>]) -> Vec<Vec<HostArray>> {
    let p = inputs.len();
    let (m, k) = (inputs[0][0].shape[0], inputs[0][0].shape[1]);
    let n = inputs[0][1].shape[1];
    let mut total = vec![0.0f64; m * n];
    let integer = !inputs[0][0].dtype.is_float();
    for dev in inputs {
        for (t, v) in total
            .iter_mut()
            .zip(matmul_values(&dev[0], &dev[1], m, k, n))
        {
            // Integer partial sums wrap as the kernel's i32 adds do.
            *t = if integer {
                ((*t as i64).wrapping_add(v as i64) as i32) as f64
            } else {
                *t + v
            };
        }
    }
    let rows = m / p.max(1);
    (0..p)
        .map(|d| {
            let block = &total[d * rows * n..(d + 1) * rows * n];
            vec![rounded(inputs[0][0].dtype, &[rows, n], block)]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Per element, as the reference was before it went by blocks: f64 values folded.
    fn one_by_one(srcs: &[Vec<u32>], dtype: DType, op: ReduceOp, i: usize) -> u32 {
        let vals = srcs.iter().map(|s| dtype.value_of(s[i]));
        if !dtype.is_float() {
            let vals = vals.map(|v| v as i64);
            let r = match op {
                ReduceOp::Sum => vals.fold(0i64, i64::wrapping_add),
                ReduceOp::Max => vals.max().unwrap(),
                ReduceOp::Min => vals.min().unwrap(),
            };
            return dtype.bits_of(r as f64);
        }
        let vals: Vec<f64> = vals.collect();
        if vals.iter().any(|v| v.is_nan()) && op != ReduceOp::Sum {
            return dtype.bits_of(f64::NAN);
        }
        dtype.bits_of(match op {
            ReduceOp::Sum => vals.iter().sum(),
            ReduceOp::Max => vals.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            ReduceOp::Min => vals.iter().copied().fold(f64::INFINITY, f64::min),
        })
    }

    #[test]
    fn the_reference_by_blocks_is_the_reduction_element_by_element() {
        // Past several blocks and the parallel threshold, with a ragged end.
        let n = 16 * BLOCK + 1234;
        for dtype in DType::ALL {
            for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
                let srcs: Vec<Vec<u32>> = (0..5)
                    .map(|d| {
                        let mut w: Vec<u32> = (0..n)
                            .map(|i| {
                                let h = ((i * 5 + d) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                                dtype.bits_of(((h >> 40) % 200) as f64 * 0.37)
                            })
                            .collect();
                        // Negative values, and NaNs and infinities in floats.
                        for (i, x) in w.iter_mut().enumerate() {
                            if i % 7 == d {
                                *x = dtype.bits_of(-dtype.value_of(*x) - 1.0);
                            }
                            if dtype.is_float() && i % 997 == d {
                                *x = dtype.bits_of(if d % 2 == 0 {
                                    f64::NAN
                                } else {
                                    f64::INFINITY
                                });
                            }
                        }
                        w
                    })
                    .collect();
                let refs: Vec<&[u32]> = srcs.iter().map(|s| &s[..]).collect();
                let mut out = vec![0; n];
                all_reduce_words(&refs, dtype, op, &mut out);
                for (i, &o) in out.iter().enumerate() {
                    let want = one_by_one(&srcs, dtype, op, i);
                    let nan = |w| dtype.is_float() && dtype.value_of(w).is_nan();
                    assert!(o == want || (nan(o) && nan(want)), "{dtype} {op:?} at {i}");
                }
            }
        }
    }
}
