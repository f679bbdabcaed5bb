//! The numbers the host and the shaders agree on, defined once: reduction operators,
//! element types, op-table kinds, `halves.wgsl` modes, the compute ops' codes
//! (elementwise functions, layout and reduction modes, box ranks, matmul tiles), the
//! workgroup size. The shaders see them as WGSL `const`s from [`wgsl_consts`],
//! prepended to every module.

use crate::array::DType;
use crate::ir::{Binary, Comparison, ReduceOp, Reduction, Unary};
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

// Elementwise ops (`compute_elementwise.wgsl`'s OP): unary functions from 0, binary
// from EW_BINARY, comparisons from EW_COMPARE, then select and convert.

/// `-x`.
pub const EW_NEG: u32 = 0;
/// `|x|`.
pub const EW_ABS: u32 = 1;
/// `sign(x)`.
pub const EW_SIGN: u32 = 2;
/// `floor(x)`.
pub const EW_FLOOR: u32 = 3;
/// `ceil(x)`.
pub const EW_CEIL: u32 = 4;
/// Round half away from zero.
pub const EW_ROUND: u32 = 5;
/// Round half to even.
pub const EW_ROUND_EVEN: u32 = 6;
/// `e^x`.
pub const EW_EXP: u32 = 7;
/// `2^x`.
pub const EW_EXP2: u32 = 8;
/// `e^x - 1`.
pub const EW_EXPM1: u32 = 9;
/// `ln x`.
pub const EW_LOG: u32 = 10;
/// `ln(1 + x)`.
pub const EW_LOG1P: u32 = 11;
/// `sqrt x`.
pub const EW_SQRT: u32 = 12;
/// `1 / sqrt x`.
pub const EW_RSQRT: u32 = 13;
/// `tanh x`.
pub const EW_TANH: u32 = 14;
/// `1 / (1 + e^-x)`.
pub const EW_LOGISTIC: u32 = 15;
/// `sin x`.
pub const EW_SIN: u32 = 16;
/// `cos x`.
pub const EW_COS: u32 = 17;
/// `erf x`.
pub const EW_ERF: u32 = 18;
/// Logical / bitwise not.
pub const EW_NOT: u32 = 19;
/// `x^n`, `n` in the parameter block.
pub const EW_POWI: u32 = 20;
/// The first binary op.
pub const EW_BINARY: u32 = 32;
/// `a + b`.
pub const EW_ADD: u32 = 32;
/// `a - b`.
pub const EW_SUB: u32 = 33;
/// `a * b`.
pub const EW_MUL: u32 = 34;
/// `a / b`.
pub const EW_DIV: u32 = 35;
/// Remainder with the sign of `a`.
pub const EW_REM: u32 = 36;
/// `a^b`.
pub const EW_POW: u32 = 37;
/// The larger.
pub const EW_MAX: u32 = 38;
/// The smaller.
pub const EW_MIN: u32 = 39;
/// And.
pub const EW_AND: u32 = 40;
/// Or.
pub const EW_OR: u32 = 41;
/// Exclusive or.
pub const EW_XOR: u32 = 42;
/// `a << b`.
pub const EW_SHL: u32 = 43;
/// `a >> b`, arithmetic.
pub const EW_SHRA: u32 = 44;
/// `a >> b`, logical.
pub const EW_SHRL: u32 = 45;
/// `atan2(a, b)`.
pub const EW_ATAN2: u32 = 46;
/// The first comparison.
pub const EW_COMPARE: u32 = 64;
/// `==`.
pub const EW_EQ: u32 = 64;
/// `!=`.
pub const EW_NE: u32 = 65;
/// `<`.
pub const EW_LT: u32 = 66;
/// `<=`.
pub const EW_LE: u32 = 67;
/// `>`.
pub const EW_GT: u32 = 68;
/// `>=`.
pub const EW_GE: u32 = 69;
/// `where(src0, src1, src2)`.
pub const EW_SELECT: u32 = 80;
/// `src0` converted to the destination's dtype.
pub const EW_CONVERT: u32 = 81;

/// `compute_layout.wgsl` copies source elements (a gather or a scatter of a box).
pub const LAYOUT_GATHER: u32 = 0;
/// `compute_layout.wgsl` writes each element's source index (iota).
pub const LAYOUT_IOTA: u32 = 1;
/// 16-bit destinations: the box covers its destination densely (one invocation per
/// destination word).
pub const PACK_DENSE: u32 = 0;
/// 16-bit destinations: the box is runs of its innermost dimension, apart from each
/// other (one invocation per word of a run).
pub const PACK_RUNS: u32 = 1;

/// `compute_reduce.wgsl` reduces values.
pub const REDUCE_VALUES: u32 = 0;
/// `compute_reduce.wgsl` finds the index of the largest or smallest (argmax/argmin).
pub const REDUCE_ARG: u32 = 1;

/// Most dimensions of a box a compute shader indexes (the parameter blocks hold two
/// vec4s per stride list); a lowering collapses and splits boxes to fit.
pub const BOX_RANK: u32 = 8;

/// Matmul output tile rows and columns per workgroup.
pub const MM_TILE: u32 = 64;
/// Matmul contraction elements per stage through workgroup memory.
pub const MM_TILE_K: u32 = 16;
/// Matmul threads per workgroup in x and in y (`MM_THREADS` squared is [`WORKGROUP`]).
pub const MM_THREADS: u32 = 16;
/// Matmul outputs per thread in each direction (`MM_TILE / MM_THREADS`).
pub const MM_PER_THREAD: u32 = 4;

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
    ("EW_NEG", EW_NEG),
    ("EW_ABS", EW_ABS),
    ("EW_SIGN", EW_SIGN),
    ("EW_FLOOR", EW_FLOOR),
    ("EW_CEIL", EW_CEIL),
    ("EW_ROUND", EW_ROUND),
    ("EW_ROUND_EVEN", EW_ROUND_EVEN),
    ("EW_EXP", EW_EXP),
    ("EW_EXP2", EW_EXP2),
    ("EW_EXPM1", EW_EXPM1),
    ("EW_LOG", EW_LOG),
    ("EW_LOG1P", EW_LOG1P),
    ("EW_SQRT", EW_SQRT),
    ("EW_RSQRT", EW_RSQRT),
    ("EW_TANH", EW_TANH),
    ("EW_LOGISTIC", EW_LOGISTIC),
    ("EW_SIN", EW_SIN),
    ("EW_COS", EW_COS),
    ("EW_ERF", EW_ERF),
    ("EW_NOT", EW_NOT),
    ("EW_POWI", EW_POWI),
    ("EW_BINARY", EW_BINARY),
    ("EW_ADD", EW_ADD),
    ("EW_SUB", EW_SUB),
    ("EW_MUL", EW_MUL),
    ("EW_DIV", EW_DIV),
    ("EW_REM", EW_REM),
    ("EW_POW", EW_POW),
    ("EW_MAX", EW_MAX),
    ("EW_MIN", EW_MIN),
    ("EW_AND", EW_AND),
    ("EW_OR", EW_OR),
    ("EW_XOR", EW_XOR),
    ("EW_SHL", EW_SHL),
    ("EW_SHRA", EW_SHRA),
    ("EW_SHRL", EW_SHRL),
    ("EW_ATAN2", EW_ATAN2),
    ("EW_COMPARE", EW_COMPARE),
    ("EW_EQ", EW_EQ),
    ("EW_NE", EW_NE),
    ("EW_LT", EW_LT),
    ("EW_LE", EW_LE),
    ("EW_GT", EW_GT),
    ("EW_GE", EW_GE),
    ("EW_SELECT", EW_SELECT),
    ("EW_CONVERT", EW_CONVERT),
    ("LAYOUT_GATHER", LAYOUT_GATHER),
    ("LAYOUT_IOTA", LAYOUT_IOTA),
    ("PACK_DENSE", PACK_DENSE),
    ("PACK_RUNS", PACK_RUNS),
    ("REDUCE_VALUES", REDUCE_VALUES),
    ("REDUCE_ARG", REDUCE_ARG),
    ("BOX_RANK", BOX_RANK),
    ("MM_TILE", MM_TILE),
    ("MM_TILE_K", MM_TILE_K),
    ("MM_THREADS", MM_THREADS),
    ("MM_PER_THREAD", MM_PER_THREAD),
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

/// The code of a unary function (its exponent, for `integer_pow`, goes in the
/// parameter block).
pub fn unary_code(u: Unary) -> u32 {
    match u {
        Unary::Neg => EW_NEG,
        Unary::Abs => EW_ABS,
        Unary::Sign => EW_SIGN,
        Unary::Floor => EW_FLOOR,
        Unary::Ceil => EW_CEIL,
        Unary::Round => EW_ROUND,
        Unary::RoundEven => EW_ROUND_EVEN,
        Unary::Exp => EW_EXP,
        Unary::Exp2 => EW_EXP2,
        Unary::Expm1 => EW_EXPM1,
        Unary::Log => EW_LOG,
        Unary::Log1p => EW_LOG1P,
        Unary::Sqrt => EW_SQRT,
        Unary::Rsqrt => EW_RSQRT,
        Unary::Tanh => EW_TANH,
        Unary::Logistic => EW_LOGISTIC,
        Unary::Sin => EW_SIN,
        Unary::Cos => EW_COS,
        Unary::Erf => EW_ERF,
        Unary::Not => EW_NOT,
        Unary::IntegerPow(_) => EW_POWI,
    }
}

/// True for the elementwise ops `compute_math.wgsl` evaluates (the transcendentals,
/// pow and atan2); the others are `compute_elementwise.wgsl`'s.
pub fn is_math(op: u32) -> bool {
    (EW_EXP..=EW_ERF).contains(&op) || op == EW_POW || op == EW_ATAN2
}

/// The code of a binary function.
pub fn binary_code(b: Binary) -> u32 {
    match b {
        Binary::Add => EW_ADD,
        Binary::Sub => EW_SUB,
        Binary::Mul => EW_MUL,
        Binary::Div => EW_DIV,
        Binary::Rem => EW_REM,
        Binary::Pow => EW_POW,
        Binary::Max => EW_MAX,
        Binary::Min => EW_MIN,
        Binary::And => EW_AND,
        Binary::Or => EW_OR,
        Binary::Xor => EW_XOR,
        Binary::ShiftLeft => EW_SHL,
        Binary::ShiftRightArithmetic => EW_SHRA,
        Binary::ShiftRightLogical => EW_SHRL,
        Binary::Atan2 => EW_ATAN2,
    }
}

/// The code of a comparison.
pub fn compare_code(c: Comparison) -> u32 {
    match c {
        Comparison::Eq => EW_EQ,
        Comparison::Ne => EW_NE,
        Comparison::Lt => EW_LT,
        Comparison::Le => EW_LE,
        Comparison::Gt => EW_GT,
        Comparison::Ge => EW_GE,
    }
}

/// The code of a compute reduction (the accumulate family's codes).
pub fn reduction_code(r: Reduction) -> u32 {
    match r {
        Reduction::Sum => REDUCE_SUM,
        Reduction::Max => REDUCE_MAX,
        Reduction::Min => REDUCE_MIN,
    }
}

/// Every constant as a WGSL `const` declaration, one a line.
pub fn wgsl_consts() -> String {
    let mut s = String::from("// Generated from src/device_sim/gpu/codes.rs.\n");
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
            &[LAYOUT_GATHER, LAYOUT_IOTA],
            &[PACK_DENSE, PACK_RUNS],
            &[REDUCE_VALUES, REDUCE_ARG],
        ] {
            let mut v = family.to_vec();
            v.sort();
            v.dedup();
            assert_eq!(v.len(), family.len());
        }
        let reductions = [REDUCE_SUM, REDUCE_MAX, REDUCE_MIN];
        assert!(reductions.iter().all(|&c| c <= ACC_OP_MASK));
        assert!(wgsl_consts().contains("const DTYPE_BF16: u32 = 3u;"));
        assert_eq!(MM_THREADS * MM_THREADS, WORKGROUP);
        assert_eq!(MM_THREADS * MM_PER_THREAD, MM_TILE);
        // compute_matmul.wgsl holds an invocation's outputs in four vec4s.
        assert_eq!(MM_PER_THREAD, 4);
    }

    #[test]
    fn elementwise_codes_are_distinct_and_in_their_families() {
        use crate::ir::{Binary as B, Comparison as C, Unary as U};
        let unary = [
            U::Neg,
            U::Abs,
            U::Sign,
            U::Floor,
            U::Ceil,
            U::Round,
            U::RoundEven,
            U::Exp,
            U::Exp2,
            U::Expm1,
            U::Log,
            U::Log1p,
            U::Sqrt,
            U::Rsqrt,
            U::Tanh,
            U::Logistic,
            U::Sin,
            U::Cos,
            U::Erf,
            U::Not,
            U::IntegerPow(2),
        ];
        let binary = [
            B::Add,
            B::Sub,
            B::Mul,
            B::Div,
            B::Rem,
            B::Pow,
            B::Max,
            B::Min,
            B::And,
            B::Or,
            B::Xor,
            B::ShiftLeft,
            B::ShiftRightArithmetic,
            B::ShiftRightLogical,
            B::Atan2,
        ];
        let compare = [C::Eq, C::Ne, C::Lt, C::Le, C::Gt, C::Ge];
        let mut all: Vec<u32> = unary.iter().map(|&u| unary_code(u)).collect();
        assert!(all.iter().all(|&c| c < EW_BINARY));
        let b: Vec<u32> = binary.iter().map(|&x| binary_code(x)).collect();
        assert!(b.iter().all(|&c| (EW_BINARY..EW_COMPARE).contains(&c)));
        let c: Vec<u32> = compare.iter().map(|&x| compare_code(x)).collect();
        assert!(c.iter().all(|&c| (EW_COMPARE..EW_SELECT).contains(&c)));
        all.extend(b);
        all.extend(c);
        all.extend([EW_SELECT, EW_CONVERT]);
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
        let consts = wgsl_consts();
        assert!(consts.contains("const EW_ATAN2: u32 = 46u;"));
        assert!(consts.contains("const MM_TILE: u32 = 64u;"));
    }
}
