//! Transposes a square tile at a time in AVX-512 registers: 32x32 16-bit elements or
//! 16x16 32-bit words, a tile's row one 64-byte register and one cache line, so every
//! source and destination line is read or written whole by one instruction and the
//! elements cross over in shuffles (interleaves inside 128-bit lanes, then two rounds
//! of lane moves), where [`super::layout`]'s tiles move each element alone. On a CPU
//! without AVX-512 BW, [`available`] is false and the caller keeps that path.

/// Whether this CPU transposes with [`band16`] and [`band32`] (AVX-512 F and BW).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Rows `j0..j0 + o.len() / rows` of the transpose of `x` (`rows` x `cols`, row-major)
/// into `o` (whole rows of `rows` elements), 32x32 tiles at a time, `row_block` source
/// rows for all the band's columns before the next ones (as [`super::layout`]'s tiles).
///
/// Only where [`available`] (it panics elsewhere).
pub fn band16(x: &[u16], rows: usize, cols: usize, j0: usize, o: &mut [u16], row_block: usize) {
    check(x.len(), rows, cols, j0, o.len());
    #[cfg(target_arch = "x86_64")]
    // SAFETY: AVX-512 F and BW are here and every tile lies inside `x` and `o` (`check`;
    // tiles are clipped to the matrix).
    unsafe {
        avx512::band(x, rows, cols, j0, o, row_block, 32, avx512::tile16)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (x, o, row_block);
}

/// [`band16`] of 32-bit words, 16x16 tiles at a time.
pub fn band32(x: &[u32], rows: usize, cols: usize, j0: usize, o: &mut [u32], row_block: usize) {
    check(x.len(), rows, cols, j0, o.len());
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as [`band16`]'s.
    unsafe {
        avx512::band(x, rows, cols, j0, o, row_block, 16, avx512::tile32)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (x, o, row_block);
}

/// Panics unless the registers are here and a band of `o_len` elements of the
/// transpose of a `rows x cols` matrix in `x_len` elements, from row `j0`, fits.
fn check(x_len: usize, rows: usize, cols: usize, j0: usize, o_len: usize) {
    assert!(available(), "AVX-512 F and BW");
    let nj = o_len / rows.max(1);
    assert!(x_len >= rows * cols && j0 + nj <= cols && o_len == nj * rows);
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// A tile's transpose: `(src, stride, ni, nt, dst, to)` as [`tile16`]'s.
    type Tile<T> = unsafe fn(*const T, usize, usize, usize, *mut T, usize);

    /// [`super::band16`]'s loops, with tiles of `side` by `tile`.
    ///
    /// # Safety
    /// AVX-512 F and BW; `x` holds `rows x cols`, `o` rows of `rows` for columns
    /// `j0..j0 + o.len() / rows` of `x`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub unsafe fn band<T>(
        x: &[T],
        rows: usize,
        cols: usize,
        j0: usize,
        o: &mut [T],
        row_block: usize,
        side: usize,
        tile: Tile<T>,
    ) {
        let nj = o.len() / rows;
        let (src, dst) = (x.as_ptr(), o.as_mut_ptr());
        for ib in (0..rows).step_by(row_block) {
            let iend = (ib + row_block).min(rows);
            for jb in (0..nj).step_by(side) {
                let nt = side.min(nj - jb);
                for i0 in (ib..iend).step_by(side) {
                    let ni = side.min(iend - i0);
                    // SAFETY: rows `i0..i0 + ni`, columns `j0 + jb..+ nt` of `x`, and
                    // rows `jb..jb + nt`, columns `i0..i0 + ni` of `o`.
                    unsafe {
                        tile(
                            src.add(i0 * cols + j0 + jb),
                            cols,
                            ni,
                            nt,
                            dst.add(jb * rows + i0),
                            rows,
                        )
                    };
                }
            }
        }
    }

    /// Lane `l` of output register `l` of `y` gets lane `g` of input `g`: the 4x4
    /// transpose of the 128-bit lanes of `x`, two rounds of lane moves.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn lanes4(x: [__m512i; 4]) -> [__m512i; 4] {
        let p0 = _mm512_shuffle_i64x2::<0x88>(x[0], x[1]);
        let p1 = _mm512_shuffle_i64x2::<0xdd>(x[0], x[1]);
        let p2 = _mm512_shuffle_i64x2::<0x88>(x[2], x[3]);
        let p3 = _mm512_shuffle_i64x2::<0xdd>(x[2], x[3]);
        [
            _mm512_shuffle_i64x2::<0x88>(p0, p2),
            _mm512_shuffle_i64x2::<0x88>(p1, p3),
            _mm512_shuffle_i64x2::<0xdd>(p0, p2),
            _mm512_shuffle_i64x2::<0xdd>(p1, p3),
        ]
    }

    /// Row `i` (of `ni`) of the tile at `src`, its first `nt` elements of `BITS` each
    /// (zeros past them and in rows past `ni`).
    ///
    /// # Safety
    /// AVX-512 F and BW; the tile's rows are readable.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn load<const BITS: usize>(src: *const u8, nt: usize) -> __m512i {
        let full = 512 / BITS;
        // SAFETY: the row's first `nt` elements (all of a register's when `nt` is).
        unsafe {
            match (nt == full, BITS) {
                (true, _) => _mm512_loadu_si512(src as *const __m512i),
                (false, 16) => _mm512_maskz_loadu_epi16((1u32 << nt) - 1, src as *const i16),
                _ => _mm512_maskz_loadu_epi32(((1u32 << nt) - 1) as u16, src as *const i32),
            }
        }
    }

    /// Stores `y`'s first `ni` elements of `BITS` each at `dst`.
    ///
    /// # Safety
    /// AVX-512 F and BW; the elements at `dst` are writable.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn store<const BITS: usize>(dst: *mut u8, y: __m512i, ni: usize) {
        let full = 512 / BITS;
        // SAFETY: the row's first `ni` elements (all of a register's when `ni` is).
        unsafe {
            match (ni == full, BITS) {
                (true, _) => _mm512_storeu_si512(dst as *mut __m512i, y),
                (false, 16) => _mm512_mask_storeu_epi16(dst as *mut i16, (1u32 << ni) - 1, y),
                _ => _mm512_mask_storeu_epi32(dst as *mut i32, ((1u32 << ni) - 1) as u16, y),
            }
        }
    }

    /// The `ni x nt` block of 16-bit elements at `src` (rows `stride` apart) transposed
    /// to the `nt x ni` block at `dst` (rows `to` apart); nothing past the block is read
    /// or written.
    ///
    /// # Safety
    /// AVX-512 F and BW; `ni, nt <= 32`; the blocks lie in memory the caller may read
    /// and write, apart.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub unsafe fn tile16(
        src: *const u16,
        stride: usize,
        ni: usize,
        nt: usize,
        dst: *mut u16,
        to: usize,
    ) {
        let mut r = [_mm512_setzero_si512(); 32];
        for (i, r) in r.iter_mut().enumerate().take(ni) {
            // SAFETY: row `i` of the block.
            *r = unsafe { load::<16>(src.add(i * stride) as *const u8, nt) };
        }
        // Per 8 rows, three rounds inside each 128-bit lane: `v[8g + c]`'s lane `l` is
        // column `8l + c` of rows `8g..8g + 8`.
        let mut v = [_mm512_setzero_si512(); 32];
        for g in 0..4 {
            let a = &r[8 * g..8 * g + 8];
            let mut t = [_mm512_setzero_si512(); 8];
            for h in 0..4 {
                t[2 * h] = _mm512_unpacklo_epi16(a[2 * h], a[2 * h + 1]);
                t[2 * h + 1] = _mm512_unpackhi_epi16(a[2 * h], a[2 * h + 1]);
            }
            let u = [
                _mm512_unpacklo_epi32(t[0], t[2]),
                _mm512_unpackhi_epi32(t[0], t[2]),
                _mm512_unpacklo_epi32(t[1], t[3]),
                _mm512_unpackhi_epi32(t[1], t[3]),
                _mm512_unpacklo_epi32(t[4], t[6]),
                _mm512_unpackhi_epi32(t[4], t[6]),
                _mm512_unpacklo_epi32(t[5], t[7]),
                _mm512_unpackhi_epi32(t[5], t[7]),
            ];
            for h in 0..4 {
                v[8 * g + 2 * h] = _mm512_unpacklo_epi64(u[h], u[h + 4]);
                v[8 * g + 2 * h + 1] = _mm512_unpackhi_epi64(u[h], u[h + 4]);
            }
        }
        // Output row `8l + c` is lane `l` of `v[c], v[8 + c], v[16 + c], v[24 + c]`.
        for c in 0..8 {
            let y = lanes4([v[c], v[8 + c], v[16 + c], v[24 + c]]);
            for (l, y) in y.into_iter().enumerate() {
                let j = 8 * l + c;
                if j < nt {
                    // SAFETY: row `j` of the destination block.
                    unsafe { store::<16>(dst.add(j * to) as *mut u8, y, ni) };
                }
            }
        }
    }

    /// [`tile16`] of 32-bit words, `ni, nt <= 16`.
    ///
    /// # Safety
    /// As [`tile16`]'s.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub unsafe fn tile32(
        src: *const u32,
        stride: usize,
        ni: usize,
        nt: usize,
        dst: *mut u32,
        to: usize,
    ) {
        let mut r = [_mm512_setzero_si512(); 16];
        for (i, r) in r.iter_mut().enumerate().take(ni) {
            // SAFETY: row `i` of the block.
            *r = unsafe { load::<32>(src.add(i * stride) as *const u8, nt) };
        }
        // Per 4 rows, two rounds inside each 128-bit lane: `v[4g + c]`'s lane `l` is
        // column `4l + c` of rows `4g..4g + 4`.
        let mut v = [_mm512_setzero_si512(); 16];
        for g in 0..4 {
            let a = &r[4 * g..4 * g + 4];
            let t = [
                _mm512_unpacklo_epi32(a[0], a[1]),
                _mm512_unpackhi_epi32(a[0], a[1]),
                _mm512_unpacklo_epi32(a[2], a[3]),
                _mm512_unpackhi_epi32(a[2], a[3]),
            ];
            v[4 * g] = _mm512_unpacklo_epi64(t[0], t[2]);
            v[4 * g + 1] = _mm512_unpackhi_epi64(t[0], t[2]);
            v[4 * g + 2] = _mm512_unpacklo_epi64(t[1], t[3]);
            v[4 * g + 3] = _mm512_unpackhi_epi64(t[1], t[3]);
        }
        // Output row `4l + c` is lane `l` of `v[c], v[4 + c], v[8 + c], v[12 + c]`.
        for c in 0..4 {
            let y = lanes4([v[c], v[4 + c], v[8 + c], v[12 + c]]);
            for (l, y) in y.into_iter().enumerate() {
                let j = 4 * l + c;
                if j < nt {
                    // SAFETY: row `j` of the destination block.
                    unsafe { store::<32>(dst.add(j * to) as *mut u8, y, ni) };
                }
            }
        }
    }
}
