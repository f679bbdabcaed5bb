//! Moving elements by index: a strided gather (broadcasts, slices and transposes are
//! each one, with a stride per destination dimension) and its scatter, run by run along
//! the last dimension, so that a run that repeats one element is a fill and a run of
//! adjacent ones a copy.

use super::spread::spread;
use super::tile_swap;

/// Row-major strides of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// The multi-index of flat element `at` of `shape` into `idx`, and its offset under
/// `strides`.
fn position(shape: &[usize], strides: &[usize], at: usize, idx: &mut [usize]) -> usize {
    let mut rem = at;
    for d in (0..shape.len()).rev() {
        idx[d] = rem % shape[d];
        rem /= shape[d];
    }
    idx.iter().zip(strides).map(|(i, s)| i * s).sum()
}

/// Ranks whose multi-index [`runs`] keeps on the stack (a fused region's broadcast
/// gathers every block: an allocation each cost as much as a row's fill).
const STACK_RANK: usize = 8;

/// Calls `f(o, at, k)` for each run of `k` destination elements from `o` (of the
/// elements `start..start + count` of an array of `shape`, row-major), whose first
/// element is at offset `at` under `strides` (the run goes on by the last stride).
#[inline(always)]
fn runs(
    shape: &[usize],
    strides: &[usize],
    start: usize,
    count: usize,
    mut f: impl FnMut(usize, usize, usize),
) {
    let rank = shape.len();
    if rank == 0 {
        if count > 0 {
            f(0, 0, 1);
        }
        return;
    }
    let mut stack = [0usize; STACK_RANK];
    let mut heap = Vec::new();
    let idx: &mut [usize] = if rank <= STACK_RANK {
        &mut stack[..rank]
    } else {
        heap.resize(rank, 0);
        &mut heap
    };
    let mut at = position(shape, strides, start, idx);
    let (inner, step) = (shape[rank - 1], strides[rank - 1]);
    let mut o = 0;
    while o < count {
        let k = (inner - idx[rank - 1]).min(count - o);
        f(o, at, k);
        o += k;
        idx[rank - 1] += k;
        at += k * step;
        if idx[rank - 1] == inner {
            at -= inner * step;
            idx[rank - 1] = 0;
            for d in (0..rank - 1).rev() {
                idx[d] += 1;
                at += strides[d];
                if idx[d] < shape[d] {
                    break;
                }
                at -= shape[d] * strides[d];
                idx[d] = 0;
            }
        }
    }
}

/// Elements `start..start + out.len()` (row-major) of the array of shape `into` whose
/// element `idx` is `src[sum(idx[d] * strides[d])]`.
#[inline(always)]
pub fn gather(src: &[u32], strides: &[usize], into: &[usize], start: usize, out: &mut [u32]) {
    let step = strides.last().copied().unwrap_or(0);
    runs(into, strides, start, out.len(), |o, at, k| {
        let run = &mut out[o..o + k];
        match step {
            0 => run.fill(src[at]),
            1 => run.copy_from_slice(&src[at..at + k]),
            _ => run
                .iter_mut()
                .enumerate()
                .for_each(|(j, x)| *x = src[at + j * step]),
        }
    });
}

/// Writes `src` (an array of shape `shape`, row-major) into `dst`, its element `idx`
/// at `dst[sum(idx[d] * strides[d])]`.
pub fn scatter(src: &[u32], shape: &[usize], strides: &[usize], dst: &mut [u32]) {
    let step = strides.last().copied().unwrap_or(0);
    runs(shape, strides, 0, src.len(), |o, at, k| {
        let run = &src[o..o + k];
        if step == 1 {
            dst[at..at + k].copy_from_slice(run);
        } else {
            run.iter()
                .enumerate()
                .for_each(|(j, &x)| dst[at + j * step] = x);
        }
    });
}

/// The side of a square tile a transpose moves through a buffer on the stack: a cache
/// line of 4-byte words, so that every line is read whole and written whole once (rows
/// a power of two apart share cache sets, and a tile's column walked in place would
/// evict its own lines).
const TILE: usize = 16;

/// Nanoseconds an element of a transpose costs one core, for [`super::spread::worth`]
/// (matrices from about 256 Ki elements are transposed over the cores).
const TRANSPOSE_NS: f64 = 0.8;

/// Output rows one task of a transpose writes: it reads a run of that many source
/// columns (four cache lines) of every row, whole lines in a row.
const GROUP: usize = 4 * TILE;

/// Source rows a task goes through for all its columns before the next ones: their
/// lines and pages stay in the cache and the TLB meanwhile (a source row a power of
/// two apart from the next, walked down for one tile's column at a time, found neither:
/// 2048 x 2048 f32 ran at 6 ns an element).
const ROW_BLOCK: usize = 256;

/// Rows `j0..` of the transpose of `x` (`rows` x `cols`) into `o` (whole rows of
/// `rows` elements), tile by tile, a block of source rows at a time, each element
/// passed through `f` (the identity, or a 16-bit element to or from a word).
#[inline(always)]
fn swap_band<S, D, F>(x: &[S], rows: usize, cols: usize, j0: usize, o: &mut [D], f: F)
where
    S: Copy + Default,
    D: Copy,
    F: Fn(S) -> D + Copy,
{
    let nj = o.len() / rows;
    let mut tile = [[S::default(); TILE]; TILE];
    for ib in (0..rows).step_by(ROW_BLOCK) {
        let iend = (ib + ROW_BLOCK).min(rows);
        for jb in (0..nj).step_by(TILE) {
            let nt = TILE.min(nj - jb);
            for i0 in (ib..iend).step_by(TILE) {
                let ni = TILE.min(iend - i0);
                // Whole tiles move by fixed lengths (no call to `memcpy` per row).
                for (i, t) in tile.iter_mut().enumerate().take(ni) {
                    let src = &x[(i0 + i) * cols + j0 + jb..];
                    match nt {
                        TILE => *t = src[..TILE].try_into().expect("a tile's row"),
                        _ => t[..nt].copy_from_slice(&src[..nt]),
                    }
                }
                for j in 0..nt {
                    let dst = &mut o[(jb + j) * rows + i0..];
                    match ni {
                        TILE => {
                            let d: &mut [D; TILE] =
                                (&mut dst[..TILE]).try_into().expect("a tile's column");
                            for (i, d) in d.iter_mut().enumerate() {
                                *d = f(tile[i][j]);
                            }
                        }
                        _ => {
                            for (i, d) in dst[..ni].iter_mut().enumerate() {
                                *d = f(tile[i][j]);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `src` (shape `from`) transposed by `perm` into `out`: destination dimension `i` is
/// source dimension `perm[i]`. A swap of the last two dimensions goes tile by tile.
pub fn transpose(src: &[u32], from: &[usize], perm: &[usize], out: &mut [u32]) {
    if !transpose_swap_words(src, from, perm, out) {
        let s = strides(from);
        let to: Vec<usize> = perm.iter().map(|&p| from[p]).collect();
        let by: Vec<usize> = perm.iter().map(|&p| s[p]).collect();
        gather(src, &by, &to, 0, out);
    }
}

/// [`transpose`] where it swaps the last two dimensions, with each element passed
/// through `f` (16-bit elements moved as stored, or widened or narrowed on the way);
/// false (and `out` untouched) for any other `perm`.
pub fn transpose_swap<S, D, F>(
    src: &[S],
    from: &[usize],
    perm: &[usize],
    out: &mut [D],
    f: F,
) -> bool
where
    S: Copy + Default + Sync,
    D: Copy + Send,
    F: Fn(S) -> D + Copy + Sync,
{
    swap_bands(src, from, perm, out, |x, rows, cols, j0, o| {
        swap_band(x, rows, cols, j0, o, f)
    })
}

/// [`transpose_swap`] of 16-bit elements moved as stored: 32x32 tiles in AVX-512
/// registers where the CPU has them ([`tile_swap`]), else element by element.
pub fn transpose_swap_halves(src: &[u16], from: &[usize], perm: &[usize], out: &mut [u16]) -> bool {
    if !tile_swap::available() {
        return transpose_swap(src, from, perm, out, |h| h);
    }
    swap_bands(src, from, perm, out, |x, rows, cols, j0, o| {
        tile_swap::band16(x, rows, cols, j0, o, ROW_BLOCK)
    })
}

/// [`transpose_swap_halves`] of words: 16x16 tiles in registers where the CPU has them.
pub fn transpose_swap_words(src: &[u32], from: &[usize], perm: &[usize], out: &mut [u32]) -> bool {
    if !tile_swap::available() {
        return transpose_swap(src, from, perm, out, |w| w);
    }
    swap_bands(src, from, perm, out, |x, rows, cols, j0, o| {
        tile_swap::band32(x, rows, cols, j0, o, ROW_BLOCK)
    })
}

/// A swap of the last two dimensions of `src` (shape `from`) into `out`, band by band
/// of [`GROUP`] output rows (`band(x, rows, cols, j0, o)` writes rows `j0..` of one
/// matrix's transpose), over the cores when the matrix is large; false for any other
/// `perm`.
fn swap_bands<S, D>(
    src: &[S],
    from: &[usize],
    perm: &[usize],
    out: &mut [D],
    band: impl Fn(&[S], usize, usize, usize, &mut [D]) + Sync,
) -> bool
where
    S: Sync,
    D: Send,
{
    let r = from.len();
    let swaps_last_two =
        r >= 2 && perm[r - 2] == r - 1 && perm[r - 1] == r - 2 && (0..r - 2).all(|i| perm[i] == i);
    if !swaps_last_two {
        return false;
    }
    let (rows, cols) = (from[r - 2], from[r - 1]);
    if rows * cols == 0 {
        return true;
    }
    let threads = rayon::current_num_threads();
    for (o, x) in out.chunks_mut(rows * cols).zip(src.chunks(rows * cols)) {
        // Output rows in groups, over the cores when the matrix is large (the caller
        // working too: [`spread`]).
        if super::spread::worth((rows * cols) as f64 * TRANSPOSE_NS) {
            let (at, len) = (o.as_mut_ptr() as usize, o.len());
            spread(cols.div_ceil(GROUP), threads - 1, &|b| {
                let start = b * GROUP * rows;
                // SAFETY: band `b`'s rows of `o`, written by this part alone.
                let o = unsafe {
                    std::slice::from_raw_parts_mut(
                        (at as *mut D).add(start),
                        (GROUP * rows).min(len - start),
                    )
                };
                band(x, rows, cols, b * GROUP, o)
            });
        } else {
            for (b, o) in o.chunks_mut(GROUP * rows).enumerate() {
                band(x, rows, cols, b * GROUP, o);
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Element `idx` of the array of shape `into` by the definition, one at a time.
    fn naive(src: &[u32], strides: &[usize], into: &[usize]) -> Vec<u32> {
        let n: usize = into.iter().product();
        (0..n)
            .map(|i| {
                let mut idx = vec![0; into.len()];
                src[position(into, strides, i, &mut idx)]
            })
            .collect()
    }

    #[test]
    fn gathers_equal_the_definition_from_any_start() {
        let src: Vec<u32> = (0..1000).collect();
        let cases: [(&[usize], &[usize]); 5] = [
            (&[4, 1, 0], &[3, 5, 7]),
            (&[0, 1], &[6, 9]),
            (&[1, 0], &[6, 9]),
            (&[20, 2, 5], &[3, 4, 2]),
            (&[0], &[17]),
        ];
        for (st, into) in cases {
            let want = naive(&src, st, into);
            for start in [0, 1, 5, want.len() / 2] {
                let mut out = vec![0; want.len() - start];
                gather(&src, st, into, start, &mut out);
                assert_eq!(out, want[start..], "{st:?} {into:?} from {start}");
            }
        }
    }

    #[test]
    fn transposes_equal_the_definition() {
        for (from, perm) in [
            (vec![37, 45], vec![1, 0]),
            (vec![3, 40, 33], vec![0, 2, 1]),
            (vec![2, 3, 4], vec![2, 0, 1]),
            (vec![16, 16], vec![1, 0]),
            (vec![1, 7], vec![1, 0]),
            // Over the cores: bands of whole tiles and a short last one.
            (vec![515, 1027], vec![1, 0]),
            (vec![2, 300, 1000], vec![0, 2, 1]),
        ] {
            let n: usize = from.iter().product();
            let src: Vec<u32> = (0..n as u32).collect();
            let s = strides(&from);
            let to: Vec<usize> = perm.iter().map(|&p| from[p]).collect();
            let by: Vec<usize> = perm.iter().map(|&p| s[p]).collect();
            let mut out = vec![0; n];
            transpose(&src, &from, &perm, &mut out);
            assert_eq!(out, naive(&src, &by, &to), "{from:?} {perm:?}");
        }
    }

    /// 16-bit elements by the element-by-element tiles, and 16-bit elements and words
    /// by the tiles in registers (where the CPU has them), at shapes with every kind of
    /// edge: all the definition.
    #[test]
    fn halves_transposes_equal_the_definition_on_either_path() {
        for from in [
            vec![1, 1],
            vec![1, 7],
            vec![7, 1],
            vec![32, 32],
            vec![31, 33],
            vec![33, 95],
            vec![64, 300],
            vec![3, 40, 33],
            // Over the cores, edges in both dimensions and past a block of source rows.
            vec![515, 1027],
            vec![2, 300, 1000],
        ] {
            let r = from.len();
            let mut perm: Vec<usize> = (0..r).collect();
            perm.swap(r - 2, r - 1);
            let n: usize = from.iter().product();
            let words: Vec<u32> = (0..n as u32)
                .map(|i| i.wrapping_mul(2_654_435_761) >> 16)
                .collect();
            let s = strides(&from);
            let to: Vec<usize> = perm.iter().map(|&p| from[p]).collect();
            let by: Vec<usize> = perm.iter().map(|&p| s[p]).collect();
            let want: Vec<u16> = naive(&words, &by, &to).iter().map(|&w| w as u16).collect();
            let src: Vec<u16> = words.iter().map(|&w| w as u16).collect();
            let mut out = vec![0u16; n];
            assert!(transpose_swap(&src, &from, &perm, &mut out, |h| h));
            assert_eq!(out, want, "{from:?} element by element");
            if tile_swap::available() {
                let mut out = vec![0u16; n];
                assert!(transpose_swap_halves(&src, &from, &perm, &mut out));
                assert_eq!(out, want, "{from:?} in registers");
                let mut out = vec![0u32; n];
                let w: Vec<u32> = words.iter().map(|&w| w.wrapping_mul(0x0001_0001)).collect();
                assert!(transpose_swap_words(&w, &from, &perm, &mut out));
                let want: Vec<u32> = want.iter().map(|&h| u32::from(h) * 0x0001_0001).collect();
                assert_eq!(out, want, "{from:?} words in registers");
            } else {
                eprintln!("no AVX-512 BW here: the tiles in registers are not checked");
            }
        }
    }

    #[test]
    fn scatter_inverts_gather() {
        let shape = [3, 4];
        let st = [10, 2];
        let src: Vec<u32> = (1..=12).collect();
        let mut dst = vec![0u32; 40];
        scatter(&src, &shape, &st, &mut dst);
        let mut back = vec![0; 12];
        gather(&dst, &st, &shape, 0, &mut back);
        assert_eq!(back, src);
    }
}
