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
    let n = first.len();
    let dtype = first.dtype;
    // Element by element, a share of them per core.
    use rayon::prelude::*;
    let words = match dtype {
        DType::F32 | DType::F16 | DType::BF16 => (0..n)
            .into_par_iter()
            .with_min_len(1 << 16)
            .map(|i| {
                let vals = inputs.iter().map(|d| dtype.value_of(d[0].words[i]));
                // XLA's max and min propagate NaN (f64::max and min would drop it).
                let nan_or = |f: fn(f64, f64) -> f64| {
                    move |a: f64, b: f64| {
                        if a.is_nan() || b.is_nan() {
                            f64::NAN
                        } else {
                            f(a, b)
                        }
                    }
                };
                let r = match op {
                    ReduceOp::Sum => vals.sum::<f64>(),
                    ReduceOp::Max => vals.fold(f64::NEG_INFINITY, nan_or(f64::max)),
                    ReduceOp::Min => vals.fold(f64::INFINITY, nan_or(f64::min)),
                };
                dtype.bits_of(r)
            })
            .collect(),
        _ => (0..n)
            .into_par_iter()
            .with_min_len(1 << 16)
            .map(|i| {
                let vals = inputs.iter().map(|d| dtype.value_of(d[0].words[i]) as i64);
                let r = match op {
                    ReduceOp::Sum => vals.fold(0i64, i64::wrapping_add),
                    ReduceOp::Max => vals.max().unwrap_or(i64::MIN),
                    ReduceOp::Min => vals.min().unwrap_or(i64::MAX),
                };
                dtype.bits_of(r as f64)
            })
            .collect(),
    };
    HostArray {
        dtype: first.dtype,
        shape: first.shape.clone(),
        words,
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
