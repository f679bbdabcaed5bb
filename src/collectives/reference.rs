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
    let words = match dtype {
        DType::F32 | DType::F16 | DType::BF16 => (0..n)
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
