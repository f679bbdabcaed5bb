//! The numbers the host and the shaders agree on, defined once: reduction operators,
//! element types, op-table kinds, `halves.wgsl` modes, the workgroup size. The shaders
//! see them as WGSL `const`s from [`wgsl_consts`], prepended to every module.

use crate::array::DType;
use crate::ir::ReduceOp;
use std::fmt::Write;

/// Threads per workgroup in every shader.
pub const WORKGROUP: u32 = 256;

/// `dst += src`.
pub const REDUCE_SUM: u32 = 0;
/// `dst = max(dst, src)`.
pub const REDUCE_MAX: u32 = 1;
/// `dst = min(dst, src)`.
pub const REDUCE_MIN: u32 = 2;

/// 32-bit float elements.
pub const DTYPE_F32: u32 = 0;
/// 32-bit integer elements.
pub const DTYPE_I32: u32 = 1;
/// IEEE half elements, two per word.
pub const DTYPE_F16: u32 = 2;
/// bfloat16 elements, two per word.
pub const DTYPE_BF16: u32 = 3;
/// 8-bit signed integers, one per word (sign-extended).
pub const DTYPE_I8: u32 = 4;
/// 8-bit unsigned integers, one per word.
pub const DTYPE_U8: u32 = 5;
/// Bools, one per word (0 or 1).
pub const DTYPE_BOOL: u32 = 6;

/// An op-table entry that copies `src` to `dst`.
pub const OP_COPY: u32 = 0;
/// An op-table entry that fills `dst` with its bits.
pub const OP_FILL: u32 = 1;
/// An op-table entry that combines `src` into `dst`.
pub const OP_ACCUMULATE: u32 = 2;
/// An accumulate entry's bits: the reduction in the low bits, the dtype from this bit.
pub const ACC_DTYPE_SHIFT: u32 = 4;
/// The mask of the reduction in an accumulate entry's bits.
pub const ACC_OP_MASK: u32 = (1 << ACC_DTYPE_SHIFT) - 1;

/// `halves.wgsl` copies its source.
pub const HALVES_COPY: u32 = 0;
/// `halves.wgsl` writes the parameter block's value.
pub const HALVES_FILL: u32 = 1;
/// `halves.wgsl` combines with its source.
pub const HALVES_ACCUMULATE: u32 = 2;

/// Every constant the shaders see, by its WGSL name.
const TABLE: &[(&str, u32)] = &[
    ("WORKGROUP", WORKGROUP),
    ("REDUCE_SUM", REDUCE_SUM),
    ("REDUCE_MAX", REDUCE_MAX),
    ("REDUCE_MIN", REDUCE_MIN),
    ("DTYPE_F32", DTYPE_F32),
    ("DTYPE_I32", DTYPE_I32),
    ("DTYPE_F16", DTYPE_F16),
    ("DTYPE_BF16", DTYPE_BF16),
    ("DTYPE_I8", DTYPE_I8),
    ("DTYPE_U8", DTYPE_U8),
    ("DTYPE_BOOL", DTYPE_BOOL),
    ("OP_COPY", OP_COPY),
    ("OP_FILL", OP_FILL),
    ("OP_ACCUMULATE", OP_ACCUMULATE),
    ("ACC_DTYPE_SHIFT", ACC_DTYPE_SHIFT),
    ("ACC_OP_MASK", ACC_OP_MASK),
    ("HALVES_COPY", HALVES_COPY),
    ("HALVES_FILL", HALVES_FILL),
    ("HALVES_ACCUMULATE", HALVES_ACCUMULATE),
];

/// The code of a reduction operator.
pub fn reduce_code(op: ReduceOp) -> u32 {
    match op {
        ReduceOp::Sum => REDUCE_SUM,
        ReduceOp::Max => REDUCE_MAX,
        ReduceOp::Min => REDUCE_MIN,
    }
}

/// The code of an element type.
pub fn dtype_code(dtype: DType) -> u32 {
    match dtype {
        DType::F32 => DTYPE_F32,
        DType::I32 => DTYPE_I32,
        DType::F16 => DTYPE_F16,
        DType::BF16 => DTYPE_BF16,
        DType::I8 => DTYPE_I8,
        DType::U8 => DTYPE_U8,
        DType::Bool => DTYPE_BOOL,
    }
}

/// Every constant as a WGSL `const` declaration, one a line.
pub fn wgsl_consts() -> String {
    let mut s = String::from("// Generated from src/exec/gpu/codes.rs.\n");
    for (name, v) in TABLE {
        writeln!(s, "const {name}: u32 = {v}u;").ok();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_within_each_family() {
        for family in [
            &[REDUCE_SUM, REDUCE_MAX, REDUCE_MIN][..],
            &[DTYPE_F32, DTYPE_I32, DTYPE_F16, DTYPE_BF16],
            &[OP_COPY, OP_FILL, OP_ACCUMULATE],
            &[HALVES_COPY, HALVES_FILL, HALVES_ACCUMULATE],
        ] {
            let mut v = family.to_vec();
            v.sort();
            v.dedup();
            assert_eq!(v.len(), family.len());
        }
        let reductions = [REDUCE_SUM, REDUCE_MAX, REDUCE_MIN];
        assert!(reductions.iter().all(|&c| c <= ACC_OP_MASK));
        assert!(wgsl_consts().contains("const DTYPE_BF16: u32 = 3u;"));
    }
}
