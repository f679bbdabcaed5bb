//! XLA-semantics references, computed directly on host arrays (independent of the
//! kernel machinery). `inputs[device][operand]` in, `outputs[device][operand]` out.

use crate::array::HostArray;

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
