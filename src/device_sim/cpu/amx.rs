//! bf16 x bf16 matrix products on Intel's AMX tiles (`tdpbf16ps`: a 16x16 f32 tile
//! += a 16x32 bf16 tile times a 16x32 bf16 tile of column pairs), at about eight times
//! the rate of the widened f32 `gemm` path on the cores that have them (Sapphire
//! Rapids and later). Both operands are packed once into tiles (zero-padded to whole
//! tiles: any shape, any strides), then each 32x32 block of the product is four tiles
//! accumulated over the whole of `k` and stored once.
//!
//! Semantics: the tiles treat subnormal inputs as zero and flush subnormal results
//! (and round to nearest even), whatever MXCSR says, so they are used only where the
//! caller's [`FloatMode`] flushes too (XLA's threads, every call through JAX); the
//! products of two bf16 are exact in f32, so a result differs from the `gemm` path's
//! only by the order of its f32 sums. Elsewhere (another CPU, a kernel that refuses
//! the tiles, the command line's threads, [`AMX_ENV`] set to `0`) the caller keeps its
//! widened `gemm` path.

use super::float_mode::FloatMode;
use super::operand::Src;
use super::spread::{spread, spread_chunks};

/// The environment variable that, set to `0`, keeps every bf16 product on the widened
/// `gemm` path (for comparing the two; read once per process).
pub const AMX_ENV: &str = "TPUSIM_AMX";

/// Rows (and columns) of a tile of the product; a block is 2x2 tiles.
const TILE: usize = 16;
/// The bf16 elements of `k` one tile step covers (64 bytes a tile row).
const STEP: usize = 32;
/// Elements of one packed 32x32 block of an operand (two tiles).
const BLOCK: usize = 2 * TILE * STEP;
/// The packed bytes of the right operand's columns one task multiplies by (most of a
/// core's L2, with the left operand's rows streaming past it).
const RIGHT_BYTES: usize = 1 << 20;
/// Products of fewer multiply-adds stay on the `gemm` path (the tiles' padding and
/// packing cost more than they save there).
const MIN_WORK: usize = 1 << 16;

/// Nanoseconds one core takes per multiply-add on the tiles, packing included, for
/// [`super::spread::worth`] (`bench/ops.py`: a 1024 x 1024 x 1024 bf16 product in about
/// 1.5 ms on two cores).
const MAC_NS: f64 = 0.003;
/// Elements of the largest packing buffer kept for the next product (8 MiB: a 2048 x
/// 2048 operand).
const KEEP_MAX: usize = 1 << 22;
/// Packing buffers kept at most (both operands of two products at a time).
const KEEP_COUNT: usize = 4;

/// Packing buffers of earlier products, kept for the next: a fresh one cost its page
/// faults and the kernel's zeroing on every call (`clear_page_erms` in a profile of a
/// 1024 x 1024 product: 2 MiB an operand).
static KEPT: std::sync::Mutex<Vec<Vec<u16>>> = std::sync::Mutex::new(Vec::new());

/// A packing buffer of at least `len` elements, kept or fresh; what it holds is
/// arbitrary (packing writes every element it reads).
fn packing(len: usize) -> Vec<u16> {
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    match kept.iter().position(|b| b.len() >= len) {
        Some(i) => kept.swap_remove(i),
        None => {
            drop(kept);
            vec![0; len]
        }
    }
}

/// Keeps `buf` for a later product (the larger ones, up to [`KEEP_COUNT`]).
fn keep(buf: Vec<u16>) {
    if buf.len() > KEEP_MAX {
        return;
    }
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    if kept.len() < KEEP_COUNT {
        kept.push(buf);
    } else if let Some(small) = kept.iter_mut().min_by_key(|b| b.len()) {
        if small.len() < buf.len() {
            *small = buf;
        }
    }
}

/// A bf16 matrix in a dot's operand: element `(i, j)` at `src[off + i * row + j * col]`.
#[derive(Clone, Copy)]
pub struct Bf16Matrix<'a> {
    /// The operand's elements (bf16).
    pub src: Src<'a>,
    /// Where element `(0, 0)` is.
    pub off: usize,
    /// The step between rows.
    pub row: usize,
    /// The step between columns.
    pub col: usize,
}

impl Bf16Matrix<'_> {
    /// Elements `(i, j..j + len)` into `dst[..len]` (bf16 bits), zeros after them.
    #[inline(always)]
    fn row_into(&self, i: usize, j: usize, len: usize, dst: &mut [u16]) {
        let start = self.off + i * self.row + j * self.col;
        let (step, d) = (self.col, &mut dst[..len]);
        match self.src {
            Src::Halves(h) if step == 1 => d.copy_from_slice(&h[start..start + len]),
            Src::Words(w) if step == 1 => {
                for (d, &s) in d.iter_mut().zip(&w[start..start + len]) {
                    *d = s as u16;
                }
            }
            Src::Halves(h) => {
                for (q, d) in d.iter_mut().enumerate() {
                    *d = h[start + q * step];
                }
            }
            Src::Words(w) => {
                for (q, d) in d.iter_mut().enumerate() {
                    *d = w[start + q * step] as u16;
                }
            }
        }
        dst[len..].fill(0);
    }
}

/// Whether an `m x k` by `k x n` bf16 product runs on the tiles here: the CPU has them,
/// the kernel lets this process use them, [`AMX_ENV`] is not `0`, the calling thread
/// flushes subnormals (the tiles' semantics) and the product is large enough.
pub fn usable(m: usize, k: usize, n: usize) -> bool {
    m >= TILE && n >= TILE && m * k * n >= MIN_WORK && FloatMode::current().flushes() && available()
}

/// Whether this process may run AMX bf16 tiles (asked once: CPU, kernel, [`AMX_ENV`]).
pub fn available() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(|| std::env::var_os(AMX_ENV).is_none_or(|v| v != "0") && tiles::permit())
}

/// `c = a @ b` (`a` m x k, `b` k x n, both bf16; `c` row-major f32) on the tiles, on
/// every core. Only where [`available`] (else the instructions fault).
pub fn matmul(a: Bf16Matrix, b: Bf16Matrix, c: &mut [f32], m: usize, k: usize, n: usize) {
    assert!(available() && c.len() >= m * n);
    if m == 0 || n == 0 {
        return;
    }
    let (mb, kb, nb) = (m.div_ceil(2 * TILE), k.div_ceil(STEP), n.div_ceil(2 * TILE));
    let par = super::spread::worth((m * k * n) as f64 * MAC_NS);
    let helpers = rayon::current_num_threads() - 1;
    // Left: per 32-row block, per 32-element step of k, 32 rows of 32 (two tiles of 16).
    // Every element of both is written (zeros past the edges): kept buffers hold junk.
    let (mut left_buf, mut right_buf) = (packing(mb * kb * BLOCK), packing(nb * kb * BLOCK));
    let left = &mut left_buf[..mb * kb * BLOCK];
    let pack_left = |(bi, dst): (usize, &mut [u16])| {
        for r in 0..2 * TILE {
            let i = bi * 2 * TILE + r;
            for s in 0..kb {
                let d = &mut dst[s * BLOCK + r * STEP..][..STEP];
                if i < m {
                    a.row_into(i, s * STEP, STEP.min(k - s * STEP), d);
                } else {
                    d.fill(0);
                }
            }
        }
    };
    // Right: per 32-column block, per step of k, two tiles of 16 column pairs: row `q`
    // of tile `t` holds (b[2q, j], b[2q + 1, j]) for its 16 columns `j`.
    let right = &mut right_buf[..nb * kb * BLOCK];
    let pack_right = |(bj, dst): (usize, &mut [u16])| {
        let (mut even, mut odd) = ([0u16; 2 * TILE], [0u16; 2 * TILE]);
        let j0 = bj * 2 * TILE;
        let cols = (2 * TILE).min(n - j0);
        for p in (0..kb * STEP).step_by(2) {
            if p < k {
                b.row_into(p, j0, cols, &mut even);
            } else {
                even.fill(0);
            }
            if p + 1 < k {
                b.row_into(p + 1, j0, cols, &mut odd);
            } else {
                odd.fill(0);
            }
            let (s, q) = (p / STEP, (p % STEP) / 2);
            for t in 0..2 {
                let d = &mut dst[s * BLOCK + t * TILE * STEP + q * STEP..][..STEP];
                for c in 0..TILE {
                    d[2 * c] = even[t * TILE + c];
                    d[2 * c + 1] = odd[t * TILE + c];
                }
            }
        }
    };
    if par {
        spread_chunks(left, kb * BLOCK, helpers, &|c, d| pack_left((c, d)));
        spread_chunks(right, kb * BLOCK, helpers, &|c, d| pack_right((c, d)));
    } else {
        left.chunks_mut(kb * BLOCK).enumerate().for_each(pack_left);
        right
            .chunks_mut(kb * BLOCK)
            .enumerate()
            .for_each(pack_right);
    }
    // Tasks: a run of right blocks that fits a core's L2, by a run of left blocks.
    let per = (RIGHT_BYTES / (kb * BLOCK * 2)).clamp(1, nb);
    let chunks = nb.div_ceil(per);
    let wanted = if par {
        8 * rayon::current_num_threads()
    } else {
        1
    };
    let rows_per = mb.div_ceil((wanted / chunks).clamp(1, mb));
    let tasks: Vec<(usize, usize)> = (0..chunks)
        .flat_map(|ch| (0..mb.div_ceil(rows_per)).map(move |rg| (ch, rg)))
        .collect();
    let (left, right) = (&*left, &*right);
    let out = c.as_mut_ptr() as usize;
    let task = |&(ch, rg): &(usize, usize)| {
        let c = out as *mut f32;
        tiles::run(|| {
            for bi in rg * rows_per..((rg + 1) * rows_per).min(mb) {
                for bj in ch * per..((ch + 1) * per).min(nb) {
                    let l = &left[bi * kb * BLOCK..][..kb * BLOCK];
                    let r = &right[bj * kb * BLOCK..][..kb * BLOCK];
                    // SAFETY: `l` and `r` hold `kb` blocks; the block of `c` it writes
                    // is inside `m x n` and no other task's.
                    unsafe { tiles::block(l, r, c, n, bi * 2 * TILE, bj * 2 * TILE, m) };
                }
            }
        });
    };
    if par {
        spread(tasks.len(), helpers, &|t| task(&tasks[t]));
    } else {
        tasks.iter().for_each(task);
    }
    keep(left_buf);
    keep(right_buf);
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod tiles {
    use super::{BLOCK, STEP, TILE};
    use std::arch::asm;

    /// Whether the CPU has AMX bf16 tiles and Linux lets this process use them (asked
    /// for: `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, for every thread).
    pub fn permit() -> bool {
        // CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE.
        let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
        if edx & (1 << 22) == 0 || edx & (1 << 24) == 0 {
            return false;
        }
        const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
        const XFEATURE_XTILEDATA: i64 = 18;
        let r: i64;
        // SAFETY: the arch_prctl system call (158), which only changes what the
        // process may use.
        unsafe {
            asm!("syscall", inlateout("rax") 158i64 => r, in("rdi") ARCH_REQ_XCOMP_PERM,
                in("rsi") XFEATURE_XTILEDATA, lateout("rcx") _, lateout("r11") _,
                options(nostack));
        }
        r == 0
    }

    /// Runs `f` with every tile configured as 16 rows of 64 bytes, then releases them.
    pub fn run(f: impl FnOnce()) {
        let mut cfg = [0u8; 64];
        cfg[0] = 1; // palette 1
        for t in 0..8 {
            cfg[16 + 2 * t] = 64; // bytes a row
            cfg[48 + t] = TILE as u8; // rows
        }
        // SAFETY: a valid palette-1 configuration ([`permit`] said the tiles work).
        unsafe { asm!("ldtilecfg [{}]", in(reg) cfg.as_ptr(), options(nostack, readonly)) };
        f();
        // SAFETY: releases the tiles configured above.
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }

    /// The 32x32 block of `c` (row-major, `n` columns, `m` rows) at `(i, j)`: the
    /// packed left blocks `l` times the packed right blocks `r`, four tiles at a time.
    ///
    /// # Safety
    /// Inside [`run`]; `l` and `r` hold as many blocks each; `c` holds `m x n`.
    #[inline(always)]
    pub unsafe fn block(l: &[u16], r: &[u16], c: *mut f32, n: usize, i: usize, j: usize, m: usize) {
        let s = 64usize;
        let half = TILE * STEP;
        unsafe {
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nostack, nomem)
            );
            for (a, b) in l.chunks_exact(BLOCK).zip(r.chunks_exact(BLOCK)) {
                asm!(
                    "tileloadd tmm4, [{a0} + {s}*1]",
                    "tileloadd tmm6, [{b0} + {s}*1]",
                    "tileloadd tmm7, [{b1} + {s}*1]",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tileloadd tmm5, [{a1} + {s}*1]",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    a0 = in(reg) a.as_ptr(),
                    a1 = in(reg) a.as_ptr().add(half),
                    b0 = in(reg) b.as_ptr(),
                    b1 = in(reg) b.as_ptr().add(half),
                    s = in(reg) s,
                    options(nostack, readonly)
                );
            }
            let whole = i + 2 * TILE <= m && j + 2 * TILE <= n;
            let mut edge = [0f32; 4 * TILE * TILE];
            let (dst, stride) = if whole {
                (c.add(i * n + j), n * 4)
            } else {
                (edge.as_mut_ptr(), 2 * TILE * 4)
            };
            asm!(
                "tilestored [{c0} + {s}*1], tmm0",
                "tilestored [{c1} + {s}*1], tmm1",
                "tilestored [{c2} + {s}*1], tmm2",
                "tilestored [{c3} + {s}*1], tmm3",
                c0 = in(reg) dst,
                c1 = in(reg) dst.add(TILE),
                c2 = in(reg) dst.byte_add(TILE * stride),
                c3 = in(reg) dst.byte_add(TILE * stride).add(TILE),
                s = in(reg) stride,
                options(nostack)
            );
            if !whole {
                for (r, row) in edge.chunks_exact(2 * TILE).enumerate().take(m - i) {
                    let w = (2 * TILE).min(n - j);
                    std::ptr::copy_nonoverlapping(row.as_ptr(), c.add((i + r) * n + j), w);
                }
            }
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod tiles {
    /// No tiles off x86-64 Linux.
    pub fn permit() -> bool {
        false
    }

    pub fn run(_: impl FnOnce()) {
        unreachable!("no tiles here")
    }

    pub unsafe fn block(_: &[u16], _: &[u16], _: *mut f32, _: usize, _: usize, _: usize, _: usize) {
        unreachable!("no tiles here")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values: small integers (exact sums), or spread over [-2, 2).
    fn values(len: usize, salt: u64, integers: bool) -> Vec<f32> {
        let mut x = salt.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if integers {
                    (x % 9) as f32 - 4.0
                } else {
                    ((x >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0) as f32
                }
            })
            .collect()
    }

    /// An operand of `rows x cols` bf16 values, stored row-major or transposed (and
    /// as halves or as words), with the matrix that reads it.
    struct Stored {
        vals: Vec<f32>,
        halves: Vec<u16>,
        words: Vec<u32>,
        transposed: bool,
        cols: usize,
        rows: usize,
    }

    impl Stored {
        fn new(rows: usize, cols: usize, salt: u64, integers: bool, transposed: bool) -> Self {
            let vals: Vec<f32> = values(rows * cols, salt, integers)
                .into_iter()
                .map(|v| half::bf16::from_f32(v).to_f32())
                .collect();
            let at = |i: usize, j: usize| vals[i * cols + j];
            let order: Vec<f32> = if transposed {
                (0..cols)
                    .flat_map(|j| (0..rows).map(move |i| at(i, j)))
                    .collect()
            } else {
                vals.clone()
            };
            let halves: Vec<u16> = order
                .iter()
                .map(|&v| half::bf16::from_f32(v).to_bits())
                .collect();
            // Words as the executor holds them: the bits in the low half, and junk
            // above them that the tiles must not read.
            let words = halves.iter().map(|&h| u32::from(h) | 0xdead_0000).collect();
            Stored {
                vals,
                halves,
                words,
                transposed,
                cols,
                rows,
            }
        }

        fn matrix(&self, words: bool) -> Bf16Matrix<'_> {
            let (row, col) = if self.transposed {
                (1, self.rows)
            } else {
                (self.cols, 1)
            };
            let src = if words {
                Src::Words(&self.words)
            } else {
                Src::Halves(&self.halves)
            };
            Bf16Matrix {
                src,
                off: 0,
                row,
                col,
            }
        }
    }

    /// The exact sums of small integers, on packing buffers kept from a product of
    /// infinities (junk that a padding left unwritten would turn into NaNs: inf * 0).
    #[test]
    fn products_on_buffers_kept_from_infinities_are_exact() {
        if !available() {
            eprintln!("no AMX tiles here: nothing to check");
            return;
        }
        let inf = vec![0x7f80u16; 96 * 96];
        let big = Bf16Matrix {
            src: Src::Halves(&inf),
            off: 0,
            row: 96,
            col: 1,
        };
        for (s, &(m, k, n)) in [(17, 33, 15), (40, 7, 50), (33, 65, 31)].iter().enumerate() {
            let mut c = vec![0f32; 96 * 96];
            matmul(big, big, &mut c, 96, 96, 96);
            assert!(c.iter().all(|&v| v == f32::INFINITY));
            let a = Stored::new(m, k, 2 * s as u64 + 1, true, false);
            let b = Stored::new(k, n, 2 * s as u64 + 2, true, false);
            let mut c = vec![f32::NAN; m * n];
            matmul(a.matrix(false), b.matrix(false), &mut c, m, k, n);
            for i in 0..m {
                for j in 0..n {
                    let want: f32 = (0..k).map(|p| a.vals[i * k + p] * b.vals[p * n + j]).sum();
                    assert_eq!(c[i * n + j], want, "{m}x{k}x{n} ({i}, {j})");
                }
            }
        }
    }

    /// Products on the tiles against f64 sums of the same bf16 values: within the
    /// bound of a k-term f32 sum (k * 2^-24 * the sum of the products' magnitudes),
    /// and equal where every sum is exact in f32 (small integers).
    #[test]
    fn tile_products_are_the_f64_sums_within_the_k_term_bound_and_exact_for_integers() {
        if !available() {
            eprintln!("no AMX tiles here: nothing to check");
            return;
        }
        let shapes = [
            (1, 1, 1),
            (17, 33, 15),
            (64, 64, 64),
            (100, 70, 45),
            (33, 1000, 65),
        ];
        for (s, &(m, k, n)) in shapes.iter().enumerate() {
            for integers in [true, false] {
                for layout in 0..4 {
                    let (ta, tb, words) = (layout & 1 == 1, layout & 2 == 2, layout == 1);
                    let a = Stored::new(m, k, 2 * s as u64 + 1, integers, ta);
                    let b = Stored::new(k, n, 2 * s as u64 + 2, integers, tb);
                    let mut c = vec![f32::NAN; m * n];
                    matmul(a.matrix(words), b.matrix(!words), &mut c, m, k, n);
                    for i in 0..m {
                        for j in 0..n {
                            let terms = (0..k).map(|p| {
                                f64::from(a.vals[i * k + p]) * f64::from(b.vals[p * n + j])
                            });
                            let want: f64 = terms.clone().sum();
                            let size: f64 = terms.map(f64::abs).sum();
                            let got = f64::from(c[i * n + j]);
                            let at = format!("{m}x{k}x{n} layout {layout} ({i}, {j})");
                            if integers {
                                assert_eq!(got, want, "{at}");
                            } else {
                                let bound = k as f64 * 2f64.powi(-24) * size;
                                assert!((got - want).abs() <= bound, "{at}: {got} {want}");
                            }
                        }
                    }
                }
            }
        }
    }
}
