//! Element types and host-side arrays (the data users hand in and get back).

use crate::error::{Error, Result};
use std::fmt;

/// Elements per part when a conversion between element bytes and words is spread over
/// the cores (smaller arrays convert on one).
const CONVERT_PART: usize = 1 << 18;

/// Element type of a ref or array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 32-bit signed integer.
    I32,
    /// 16-bit IEEE float (numpy `float16`).
    F16,
    /// bfloat16: f32's exponent with an 8-bit significand (`jnp.bfloat16`).
    BF16,
    /// 8-bit signed integer.
    I8,
    /// 8-bit unsigned integer.
    U8,
    /// Boolean (`jnp.bool_`): 0 or 1.
    Bool,
}

/// Float words of `got` that differ from `want` beyond `rel_tol` (relative to the
/// wanted value, at least 1), as [`DType::count_mismatched_words`] compares them:
/// `value` converts a word.
#[inline(always)]
fn count_floats(got: &[u32], want: &[u32], rel_tol: f32, value: impl Fn(u32) -> f64) -> usize {
    // Without branches, so that the compiler vectorizes it (a run's results are rarely
    // equal in bits to the reference's f64 sums rounded, so most pairs are compared).
    let differ = |(&a, &b): (&u32, &u32)| {
        let (x, y) = (value(a), value(b));
        let (nx, ny) = (x.is_nan(), y.is_nan());
        let tol = rel_tol as f64 * y.abs().max(1.0);
        // Equal infinities match (their difference is NaN, not a mismatch).
        let far = x != y && (x - y).abs() > tol;
        (a != b) & (((nx | ny) & (nx != ny)) | (!(nx | ny) & far))
    };
    got.iter().zip(want).map(|p| usize::from(differ(p))).sum()
}

impl DType {
    /// Every dtype, in the order `--dtype` lists them.
    pub const ALL: [DType; 7] = [
        DType::F32,
        DType::I32,
        DType::F16,
        DType::BF16,
        DType::I8,
        DType::U8,
        DType::Bool,
    ];

    /// The dtypes the shipped collectives run in (`--dtype`).
    pub const COLLECTIVE: [DType; 4] = [DType::F32, DType::I32, DType::F16, DType::BF16];

    /// Bytes per element, as a TPU holds it (what a DMA moves and its semaphore counts).
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    /// Bytes per element in the executors' memory: 32-bit and 16-bit dtypes as they
    /// are (16-bit ones packed two per word on the GPU); 8-bit ones and bools one per
    /// 32-bit word, so that every op addresses whole words or halves.
    pub fn storage(self) -> usize {
        match self {
            DType::F16 | DType::BF16 => 2,
            _ => 4,
        }
    }

    /// True for the floating-point dtypes.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// True for the integer dtypes (bool is neither float nor integer).
    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I8 | DType::U8)
    }

    /// Bit pattern of `value` in this dtype, as a 32-bit word holds it: floats rounded
    /// to nearest even (16-bit ones in the low half), integers truncated toward zero and
    /// wrapped to their width (8-bit ones sign- or zero-extended), bools 1 for nonzero.
    pub fn bits_of(self, value: f64) -> u32 {
        match self {
            DType::F32 => (value as f32).to_bits(),
            DType::I32 => (value as i64 as i32) as u32,
            DType::F16 => half::f16::from_f64(value).to_bits() as u32,
            DType::BF16 => half::bf16::from_f64(value).to_bits() as u32,
            DType::I8 => (value as i64 as i8) as i32 as u32,
            DType::U8 => (value as i64 as u8) as u32,
            DType::Bool => u32::from(value != 0.0),
        }
    }

    /// The value of bit pattern `bits` (as [`DType::bits_of`] stores it), exactly.
    pub fn value_of(self, bits: u32) -> f64 {
        match self {
            DType::F32 => f32::from_bits(bits) as f64,
            DType::I32 => bits as i32 as f64,
            DType::F16 => half::f16::from_bits(bits as u16).to_f64(),
            DType::BF16 => half::bf16::from_bits(bits as u16).to_f64(),
            DType::I8 => bits as u8 as i8 as f64,
            DType::U8 => (bits & 0xff) as f64,
            DType::Bool => f64::from(bits & 1),
        }
    }

    /// [`HostArray::count_mismatches`]' rule on words of this dtype: elements of `got`
    /// that differ from `want` (pairwise). Equal bits always match (a NaN matches a
    /// NaN); only other pairs are compared as values. Large slices are counted a chunk
    /// per core.
    pub fn count_mismatched_words(self, got: &[u32], want: &[u32], rel_tol: f32) -> usize {
        // The dtype's conversion picked once per chunk, not per element.
        let count = move |a: &[u32], b: &[u32]| match self {
            DType::F32 => count_floats(a, b, rel_tol, |w| f32::from_bits(w) as f64),
            DType::F16 => count_floats(a, b, rel_tol, |w| half::f16::from_bits(w as u16).to_f64()),
            DType::BF16 => {
                count_floats(a, b, rel_tol, |w| half::bf16::from_bits(w as u16).to_f64())
            }
            _ => a.iter().zip(b).filter(|(x, y)| x != y).count(),
        };
        const CHUNK: usize = 1 << 16;
        if got.len() < 4 * CHUNK {
            return count(got, want);
        }
        use rayon::prelude::*;
        got.par_chunks(CHUNK)
            .zip(want.par_chunks(CHUNK))
            .map(|(a, b)| count(a, b))
            .sum()
    }

    /// Unit roundoff of a float dtype (half an ulp of 1: the largest relative error of
    /// one rounding); 0 for integers and bools.
    pub fn unit_roundoff(self) -> f64 {
        match self {
            DType::F32 => f32::EPSILON as f64 / 2.0,
            DType::F16 => half::f16::EPSILON.to_f64() / 2.0,
            DType::BF16 => half::bf16::EPSILON.to_f64() / 2.0,
            _ => 0.0,
        }
    }

    /// Elements as numpy and XLA hold them (`size()` bytes each, little-endian) into
    /// words as [`DType::bits_of`] stores them; `words.len()` elements.
    pub fn words_from_bytes(self, bytes: &[u8], words: &mut [u32]) {
        use rayon::prelude::*;
        let size = self.size();
        if words.len() >= 2 * CONVERT_PART && rayon::current_num_threads() > 1 {
            words
                .par_chunks_mut(CONVERT_PART)
                .zip(bytes.par_chunks(CONVERT_PART * size))
                .for_each(|(w, b)| self.words_from_bytes_here(b, w));
        } else {
            self.words_from_bytes_here(bytes, words);
        }
    }

    /// [`DType::words_from_bytes`] on this thread (loops the compiler vectorizes).
    fn words_from_bytes_here(self, bytes: &[u8], words: &mut [u32]) {
        match self.size() {
            4 => {
                for (w, b) in words.iter_mut().zip(bytes.chunks_exact(4)) {
                    *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
            // Aligned on a little-endian host: widened as halves under the widest
            // vector unit (the byte loop took a quarter of a bf16 op's time).
            2 if halves_in_place(bytes) => {
                let halves: &[u16] = bytemuck::cast_slice(bytes);
                pulp::Arch::new().dispatch(Halves(halves, words));
            }
            2 => {
                for (w, b) in words.iter_mut().zip(bytes.chunks_exact(2)) {
                    *w = u16::from_le_bytes([b[0], b[1]]) as u32;
                }
            }
            _ => {
                for (w, &b) in words.iter_mut().zip(bytes) {
                    *w = match self {
                        DType::I8 => b as i8 as i32 as u32,
                        DType::Bool => u32::from(b != 0),
                        _ => u32::from(b),
                    };
                }
            }
        }
    }

    /// [`DType::words_from_bytes`] backwards: words into `size()`-byte elements.
    pub fn bytes_from_words(self, words: &[u32], bytes: &mut [u8]) {
        use rayon::prelude::*;
        let size = self.size();
        if words.len() >= 2 * CONVERT_PART && rayon::current_num_threads() > 1 {
            bytes
                .par_chunks_mut(CONVERT_PART * size)
                .zip(words.par_chunks(CONVERT_PART))
                .for_each(|(b, w)| self.bytes_from_words_here(w, b));
        } else {
            self.bytes_from_words_here(words, bytes);
        }
    }

    /// [`DType::bytes_from_words`] on this thread.
    fn bytes_from_words_here(self, words: &[u32], bytes: &mut [u8]) {
        match self.size() {
            4 => {
                for (b, w) in bytes.chunks_exact_mut(4).zip(words) {
                    b.copy_from_slice(&w.to_le_bytes());
                }
            }
            2 if halves_in_place(bytes) => {
                let halves: &mut [u16] = bytemuck::cast_slice_mut(bytes);
                pulp::Arch::new().dispatch(Words(words, halves));
            }
            2 => {
                for (b, w) in bytes.chunks_exact_mut(2).zip(words) {
                    b.copy_from_slice(&(*w as u16).to_le_bytes());
                }
            }
            _ => {
                for (b, w) in bytes.iter_mut().zip(words) {
                    *b = *w as u8;
                }
            }
        }
    }

    /// Parses `f32`, `i32`, `f16`, `bf16`, `i8`, `u8`, `bool` (or numpy's names).
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "f32" | "float32" => Ok(DType::F32),
            "i32" | "int32" => Ok(DType::I32),
            "f16" | "float16" => Ok(DType::F16),
            "bf16" | "bfloat16" => Ok(DType::BF16),
            "i8" | "int8" => Ok(DType::I8),
            "u8" | "uint8" => Ok(DType::U8),
            "bool" | "bool_" => Ok(DType::Bool),
            _ => Err(Error::bad_input(format!(
                "unknown dtype `{s}` (expected f32, i32, f16, bf16, i8, u8 or bool)"
            ))),
        }
    }

    /// `dtype` as a collective takes it: f32, i32, f16 or bf16.
    pub fn parse_collective(s: &str) -> Result<Self> {
        let d = Self::parse(s)?;
        if Self::COLLECTIVE.contains(&d) {
            Ok(d)
        } else {
            Err(Error::bad_input(format!(
                "the collectives run in f32, i32, f16 or bf16 (got `{s}`)"
            )))
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::Bool => "bool",
        })
    }
}

/// A dense row-major array on the host. Each element is kept in a 32-bit word (a 16-bit
/// dtype in the low half) so one buffer type serves every dtype; [`HostArray::as_f32`] /
/// [`HostArray::as_i32`] view 32-bit ones, [`HostArray::values`] reads any. (On the GPU,
/// 16-bit elements are packed two per word.)
#[derive(Clone, Debug, PartialEq)]
pub struct HostArray {
    /// Element type.
    pub dtype: DType,
    /// Shape, row-major.
    pub shape: Vec<usize>,
    /// Raw element words.
    pub words: Vec<u32>,
}

impl HostArray {
    /// An array of `f32` values.
    pub fn from_f32(shape: &[usize], data: Vec<f32>) -> Result<Self> {
        check_len(shape, data.len())?;
        Ok(Self {
            dtype: DType::F32,
            shape: shape.to_vec(),
            words: data.into_iter().map(f32::to_bits).collect(),
        })
    }

    /// An array of `i32` values.
    pub fn from_i32(shape: &[usize], data: Vec<i32>) -> Result<Self> {
        check_len(shape, data.len())?;
        Ok(Self {
            dtype: DType::I32,
            shape: shape.to_vec(),
            words: data.into_iter().map(|v| v as u32).collect(),
        })
    }

    /// An array of `f16` values.
    pub fn from_f16(shape: &[usize], data: Vec<half::f16>) -> Result<Self> {
        check_len(shape, data.len())?;
        Ok(Self {
            dtype: DType::F16,
            shape: shape.to_vec(),
            words: data.into_iter().map(|v| v.to_bits() as u32).collect(),
        })
    }

    /// An array of `bf16` values.
    pub fn from_bf16(shape: &[usize], data: Vec<half::bf16>) -> Result<Self> {
        check_len(shape, data.len())?;
        Ok(Self {
            dtype: DType::BF16,
            shape: shape.to_vec(),
            words: data.into_iter().map(|v| v.to_bits() as u32).collect(),
        })
    }

    /// An array of `dtype` from words as [`DType::bits_of`] stores elements.
    pub fn from_words(dtype: DType, shape: &[usize], words: Vec<u32>) -> Result<Self> {
        check_len(shape, words.len())?;
        Ok(Self {
            dtype,
            shape: shape.to_vec(),
            words,
        })
    }

    /// An array of `dtype` holding `data` rounded to it (nearest even).
    pub fn from_values(dtype: DType, shape: &[usize], data: &[f64]) -> Result<Self> {
        check_len(shape, data.len())?;
        Ok(Self {
            dtype,
            shape: shape.to_vec(),
            words: data.iter().map(|&v| dtype.bits_of(v)).collect(),
        })
    }

    /// Every element's exact value.
    pub fn values(&self) -> Vec<f64> {
        self.words.iter().map(|&w| self.dtype.value_of(w)).collect()
    }

    /// The elements as 16-bit patterns (meaningful when `dtype` is F16 or BF16).
    pub fn halves(&self) -> Vec<u16> {
        self.words.iter().map(|&w| w as u16).collect()
    }

    /// An array of zeros.
    pub fn zeros(dtype: DType, shape: &[usize]) -> Self {
        Self {
            dtype,
            shape: shape.to_vec(),
            words: vec![0; shape.iter().product()],
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// True when the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The elements as `f32` (meaningful when `dtype` is F32).
    pub fn as_f32(&self) -> &[f32] {
        bytemuck::cast_slice(&self.words)
    }

    /// The elements as `i32` (meaningful when `dtype` is I32).
    pub fn as_i32(&self) -> &[i32] {
        bytemuck::cast_slice(&self.words)
    }

    /// Rows `[start, start+len)` of the leading dimension, as a new array.
    pub fn rows(&self, start: usize, len: usize) -> HostArray {
        let row: usize = self.shape[1..].iter().product();
        let mut shape = self.shape.clone();
        shape[0] = len;
        HostArray {
            dtype: self.dtype,
            shape,
            words: self.words[start * row..(start + len) * row].to_vec(),
        }
    }

    /// Counts elements that differ from `expected`: the one comparison rule of runs,
    /// benches, `apply` and Python. Integers must match exactly; floats must agree within
    /// `rel_tol` relative (and `rel_tol` absolute near zero); a NaN matches a NaN (any
    /// payload) and nothing else, and equal infinities match.
    pub fn count_mismatches(&self, expected: &HostArray, rel_tol: f32) -> usize {
        if self.shape != expected.shape || self.dtype != expected.dtype {
            return expected.len().max(self.len());
        }
        self.dtype
            .count_mismatched_words(&self.words, &expected.words, rel_tol)
    }
}

/// Elements of an array of `shape`, or `None` when the count overflows.
pub fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

fn check_len(shape: &[usize], len: usize) -> Result<()> {
    match numel(shape) {
        Some(n) if n == len => Ok(()),
        Some(n) => Err(Error::bad_input(format!(
            "shape {shape:?} holds {n} elements but {len} were given"
        ))),
        None => Err(Error::bad_input(format!(
            "shape {shape:?} has more elements than any memory holds"
        ))),
    }
}

/// Parses a shape written as `8x128` (or `8,128`); every dimension must be positive.
pub fn parse_shape(s: &str) -> Result<Vec<usize>> {
    let dims: std::result::Result<Vec<usize>, _> = s
        .split(['x', 'X', ','])
        .map(|d| d.trim().parse::<usize>())
        .collect();
    match dims {
        Ok(d) if !d.is_empty() && d.iter().all(|&v| v > 0) => {
            let fits = d
                .iter()
                .try_fold(4usize, |acc, &v| acc.checked_mul(v))
                .is_some_and(|bytes| bytes <= isize::MAX as usize);
            if fits {
                Ok(d)
            } else {
                Err(Error::bad_input(format!(
                    "shape `{s}` is too large to allocate"
                )))
            }
        }
        Ok(_) => Err(Error::bad_input(format!(
            "shape `{s}` has a zero dimension (every dimension must be at least 1)"
        ))),
        Err(_) => Err(Error::bad_input(format!(
            "malformed shape `{s}` (expected dimensions like 8x128)"
        ))),
    }
}

/// True when `bytes` are 16-bit little-endian elements the host reads as `u16`s.
fn halves_in_place(bytes: &[u8]) -> bool {
    cfg!(target_endian = "little")
        && (bytes.as_ptr() as usize).is_multiple_of(2)
        && bytes.len().is_multiple_of(2)
}

/// 16-bit elements (in the host's order, little-endian) widened into words.
struct Halves<'a>(&'a [u16], &'a mut [u32]);

impl pulp::WithSimd for Halves<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        for (w, &h) in self.1.iter_mut().zip(self.0) {
            *w = u32::from(h);
        }
    }
}

/// Words narrowed into 16-bit elements (their low halves).
struct Words<'a>(&'a [u32], &'a mut [u16]);

impl pulp::WithSimd for Words<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        for (h, &w) in self.1.iter_mut().zip(self.0) {
            *h = w as u16;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_words_round_trip_in_every_dtype() {
        for d in DType::ALL {
            let values = [0.0, 1.0, -2.0, 100.0, 0.5];
            let words: Vec<u32> = values.iter().map(|&v| d.bits_of(v)).collect();
            let mut bytes = vec![0u8; words.len() * d.size()];
            d.bytes_from_words(&words, &mut bytes);
            let mut back = vec![7u32; words.len()];
            d.words_from_bytes(&bytes, &mut back);
            assert_eq!(back, words, "{d}");
        }
        // numpy's bytes: -2 as int8 is 0xfe, 1.0 as f16 is 0x3c00.
        let mut w = [0u32];
        DType::I8.words_from_bytes(&[0xfe], &mut w);
        assert_eq!(DType::I8.value_of(w[0]), -2.0);
        DType::F16.words_from_bytes(&[0x00, 0x3c], &mut w);
        assert_eq!(DType::F16.value_of(w[0]), 1.0);
    }

    #[test]
    fn large_arrays_convert_in_parts_as_each_element_alone() {
        // Past two parts, with a ragged last one: the parallel path.
        let n = 2 * CONVERT_PART + 1234;
        for d in DType::ALL {
            let words: Vec<u32> = (0..n).map(|i| d.bits_of((i % 97) as f64 - 48.0)).collect();
            let mut bytes = vec![0u8; n * d.size()];
            d.bytes_from_words(&words, &mut bytes);
            for i in [0, 1, CONVERT_PART - 1, CONVERT_PART, n - 1] {
                let mut one = vec![0u8; d.size()];
                d.bytes_from_words(&words[i..i + 1], &mut one);
                assert_eq!(
                    &bytes[i * d.size()..(i + 1) * d.size()],
                    &one[..],
                    "{d} at {i}"
                );
            }
            let mut back = vec![7u32; n];
            d.words_from_bytes(&bytes, &mut back);
            assert_eq!(back, words, "{d}");
        }
    }

    #[test]
    fn sixteen_bit_elements_convert_alike_aligned_or_not() {
        // The aligned path reads halves as the host's u16s; an odd offset goes by bytes.
        for d in [DType::BF16, DType::F16] {
            let words: Vec<u32> = (0..1001)
                .map(|i| d.bits_of(i as f64 * 0.37 - 150.0))
                .collect();
            let mut buf = vec![0u8; 2 * words.len() + 1];
            for off in [0, 1] {
                let bytes = &mut buf[off..off + 2 * words.len()];
                d.bytes_from_words(&words, bytes);
                for (i, w) in words.iter().enumerate() {
                    assert_eq!(
                        bytes[2 * i..2 * i + 2],
                        (*w as u16).to_le_bytes(),
                        "{d} {off}"
                    );
                }
                let mut back = vec![0u32; words.len()];
                d.words_from_bytes(bytes, &mut back);
                assert_eq!(back, words, "{d} at offset {off}");
            }
        }
    }

    #[test]
    fn shapes_parse_and_reject() {
        assert_eq!(parse_shape("8x128").unwrap(), vec![8, 128]);
        assert_eq!(parse_shape("4,2,3").unwrap(), vec![4, 2, 3]);
        assert!(parse_shape("8x0").is_err());
        assert!(parse_shape("8xq").is_err());
        assert!(parse_shape("").is_err());
        assert!(parse_shape("99999999999x99999999999").is_err());
    }

    #[test]
    fn mismatches_count_exact_ints_and_tolerant_floats() {
        let a = HostArray::from_i32(&[3], vec![1, 2, 3]).unwrap();
        let b = HostArray::from_i32(&[3], vec![1, 5, 3]).unwrap();
        assert_eq!(a.count_mismatches(&b, 0.0), 1);
        let x = HostArray::from_f32(&[2], vec![1.0, 2.0]).unwrap();
        let y = HostArray::from_f32(&[2], vec![1.0 + 1e-7, 2.5]).unwrap();
        assert_eq!(x.count_mismatches(&y, 1e-5), 1);
        // NaN where the reference has NaN matches; a NaN elsewhere, or a number where
        // the reference has NaN, does not.
        let nan = f32::NAN;
        let got = HostArray::from_f32(&[4], vec![nan, nan, 1.0, f32::INFINITY]).unwrap();
        let want = HostArray::from_f32(&[4], vec![-nan, 3.0, nan, f32::INFINITY]).unwrap();
        assert_eq!(got.count_mismatches(&want, 0.0), 2);
        assert_eq!(got.count_mismatches(&got, 0.0), 0);
    }

    /// The comparison without branches decides every pair of corner values as the rule
    /// reads (equal bits match; a NaN matches a NaN only; equal infinities match; else
    /// a difference beyond the tolerance times the wanted magnitude, at least 1),
    /// in every float dtype, one pair at a time and over a slice that runs in parallel.
    #[test]
    fn the_float_comparison_decides_every_corner_pair_as_the_rule() {
        let vals = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            1.0 + 1e-6,
            1.0 + 1e-2,
            1e-30,
            3.0,
            2.5,
            1e6,
            1e6 + 50.0,
            -1e6,
            65504.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -f64::NAN,
        ];
        let rule = |a: u32, b: u32, x: f64, y: f64, tol: f64| {
            if a == b {
                false
            } else if x.is_nan() || y.is_nan() {
                x.is_nan() != y.is_nan()
            } else {
                x != y && (x - y).abs() > tol * y.abs().max(1.0)
            }
        };
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for tol in [0.0f32, 1e-5, 1e-2] {
                let (mut got, mut want, mut expected) = (Vec::new(), Vec::new(), 0);
                for &x in &vals {
                    for &y in &vals {
                        let (a, b) = (dtype.bits_of(x), dtype.bits_of(y));
                        let (vx, vy) = (dtype.value_of(a), dtype.value_of(b));
                        let differ = rule(a, b, vx, vy, f64::from(tol));
                        let one = dtype.count_mismatched_words(&[a], &[b], tol);
                        assert_eq!(one, usize::from(differ), "{dtype} {x} vs {y} at {tol}");
                        got.push(a);
                        want.push(b);
                        expected += usize::from(differ);
                    }
                }
                let reps = (1 << 19) / got.len() + 1;
                let (g, w) = (got.repeat(reps), want.repeat(reps));
                let many = dtype.count_mismatched_words(&g, &w, tol);
                assert_eq!(many, expected * reps, "{dtype} at {tol}");
            }
        }
    }
}
