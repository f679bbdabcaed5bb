//! Boxes: the index spaces compute shaders walk, split into binding-sized windows.
//!
//! A compute op's work is a box (a shape) over which every operand is addressed by
//! strides: element `idx` of the box is element `start + Σ idx[k]·stride[k]` of each
//! operand (a stride 0 broadcasts, a permuted stride transposes). Adjacent dimensions
//! that every operand walks contiguously are merged ([`collapse`]). An operand is bound
//! as the one byte range its box touches; when that range is larger than one storage
//! binding may be, the box is split ([`split`]) along its outermost dimensions into
//! sub-boxes whose ranges fit, each one dispatch. Splitting along the outermost
//! dimension keeps a sub-box of a row-major destination contiguous. Ops whose
//! operands cannot be split that way (a transpose whose every destination row reads
//! the whole source, a contraction longer than a binding) are refused with the sizes.

/// How one operand walks a box.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Walk {
    /// Bytes per element in the buffer (2 for packed 16-bit elements, else 4); 0 for
    /// an index walk that binds nothing (its [`Bind::elem_off`] is the index of the
    /// sub-box's first element).
    pub width: u64,
    /// Byte offset of the operand's element 0 in its buffer.
    pub origin: u64,
    /// Element index (from element 0) of the box's first element.
    pub start: u64,
    /// Element stride of each box dimension.
    pub strides: Vec<u64>,
    /// Elements past the box's last one the shader also touches (a reduction's group, a
    /// contraction's length), counted as extra span.
    pub extra: u64,
}

/// One binding of one operand: the byte range bound and the element offset of the
/// sub-box's first element inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bind {
    /// Bound byte offset (aligned).
    pub offset: u64,
    /// Bound byte size (whole words).
    pub size: u64,
    /// Element offset of the first element inside the binding.
    pub elem_off: u32,
}

/// One dispatch worth of a box: its shape and each operand's start and binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sub {
    /// The sub-box's shape (the box's rank; split dimensions shortened).
    pub shape: Vec<u64>,
    /// Each operand's binding.
    pub binds: Vec<Bind>,
}

impl Walk {
    /// A dense row-major operand of `shape` from element `start` (its box is `shape`).
    pub fn dense(width: u64, origin: u64, start: u64, shape: &[u64]) -> Self {
        Walk {
            width,
            origin,
            start,
            strides: row_major(shape),
            extra: 0,
        }
    }

    /// Elements from the first to the last the operand touches over `shape`, from `start`.
    fn span(&self, shape: &[u64]) -> u64 {
        if shape.contains(&0) {
            return 0;
        }
        let s: u64 = shape
            .iter()
            .zip(&self.strides)
            .map(|(&n, &st)| (n - 1) * st)
            .sum();
        s + self.extra + 1
    }

    /// The binding covering `shape` from element `start`, with `align`ed offsets.
    fn bind(&self, start: u64, shape: &[u64], align: u64) -> Bind {
        if self.width == 0 {
            return Bind {
                offset: 0,
                size: 0,
                elem_off: start as u32,
            };
        }
        let first = self.origin + start * self.width;
        let offset = first / align * align;
        let end = first + self.span(shape) * self.width;
        Bind {
            offset,
            size: (end - offset).next_multiple_of(4).max(4),
            elem_off: ((first - offset) / self.width) as u32,
        }
    }
}

/// Row-major element strides of `shape`.
pub fn row_major(shape: &[u64]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Drops dimensions of size 1 and merges neighbours every operand walks contiguously
/// (`stride[k] == stride[k + 1] * shape[k + 1]`): the same elements in fewer dims.
/// `keep` dimensions (by index in the input) are never merged with a neighbour.
pub fn collapse(shape: &[u64], walks: &mut [Walk], keep: Option<usize>) -> Vec<u64> {
    let mut out_shape: Vec<u64> = Vec::new();
    let mut out_strides: Vec<Vec<u64>> = vec![Vec::new(); walks.len()];
    let mut last_kept = false;
    for (k, &len) in shape.iter().enumerate() {
        let kept = keep == Some(k);
        if len == 1 && !kept {
            continue;
        }
        let merge = !out_shape.is_empty()
            && !kept
            && !last_kept
            && walks
                .iter()
                .enumerate()
                .all(|(i, w)| *out_strides[i].last().expect("a dim") == w.strides[k] * shape[k]);
        if merge {
            let n = out_shape.len() - 1;
            out_shape[n] *= shape[k];
            for (i, w) in walks.iter().enumerate() {
                out_strides[i][n] = w.strides[k];
            }
        } else {
            out_shape.push(len);
            for (i, w) in walks.iter().enumerate() {
                out_strides[i].push(w.strides[k]);
            }
        }
        last_kept = kept;
    }
    for (w, s) in walks.iter_mut().zip(out_strides) {
        w.strides = s;
    }
    out_shape
}

/// Why a box cannot be split into bindings: the largest binding one element (or the
/// smallest piece) would need, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooLarge {
    /// Bytes the smallest piece needs in one binding.
    pub needs: u64,
}

/// The sub-boxes of `shape` (walked by `walks`) whose every binding is at most
/// `max_binding` bytes at `align`ed offsets and which have at most `max_rank`
/// dimensions longer than 1, at most `max_subs` of them; or how large the smallest
/// piece is when no split fits.
pub fn split(
    shape: &[u64],
    walks: &[Walk],
    max_binding: u64,
    align: u64,
    max_rank: usize,
    max_subs: usize,
) -> Result<Vec<Sub>, TooLarge> {
    let mut out = Vec::new();
    let starts: Vec<u64> = walks.iter().map(|w| w.start).collect();
    let mut worst = 0;
    if !go(
        shape.to_vec(),
        starts,
        walks,
        max_binding,
        align,
        max_rank,
        max_subs,
        &mut out,
        &mut worst,
    ) {
        return Err(TooLarge { needs: worst });
    }
    Ok(out)
}

/// The largest binding of a sub-box.
fn largest(shape: &[u64], starts: &[u64], walks: &[Walk], align: u64) -> u64 {
    walks
        .iter()
        .zip(starts)
        .map(|(w, &s)| w.bind(s, shape, align).size)
        .max()
        .unwrap_or(0)
}

#[allow(clippy::too_many_arguments)]
fn go(
    shape: Vec<u64>,
    starts: Vec<u64>,
    walks: &[Walk],
    max_binding: u64,
    align: u64,
    max_rank: usize,
    max_subs: usize,
    out: &mut Vec<Sub>,
    worst: &mut u64,
) -> bool {
    let rank = shape.iter().filter(|&&n| n > 1).count();
    let size = largest(&shape, &starts, walks, align);
    if size <= max_binding && rank <= max_rank {
        if out.len() == max_subs {
            *worst = (*worst).max(size);
            return false;
        }
        out.push(Sub {
            binds: walks
                .iter()
                .zip(&starts)
                .map(|(w, &s)| w.bind(s, &shape, align))
                .collect(),
            shape,
        });
        return true;
    }
    let Some(d) = shape.iter().position(|&n| n > 1) else {
        // One element that does not fit: its extra span is too long.
        *worst = (*worst).max(size);
        return false;
    };
    let fits = |p: u64| {
        let mut s = shape.clone();
        s[d] = p;
        let r = s.iter().filter(|&&n| n > 1).count();
        largest(&s, &starts, walks, align) <= max_binding && r <= max_rank
    };
    // The longest piece along d that fits (spans grow with the piece).
    let (mut lo, mut hi) = (1u64, shape[d] - 1);
    let piece = if !fits(1) {
        1
    } else {
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    };
    let mut at = 0;
    while at < shape[d] {
        let len = piece.min(shape[d] - at);
        let mut s = shape.clone();
        s[d] = len;
        let st: Vec<u64> = starts
            .iter()
            .zip(walks)
            .map(|(&b, w)| b + at * w.strides[d])
            .collect();
        if !go(
            s,
            st,
            walks,
            max_binding,
            align,
            max_rank,
            max_subs,
            out,
            worst,
        ) {
            return false;
        }
        at += len;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_dims_merge_and_broadcast_dims_stay() {
        // dst [2, 3, 4] dense; src broadcast along dim 0: strides [0, 4, 1].
        let mut w = vec![
            Walk::dense(4, 0, 0, &[2, 3, 4]),
            Walk {
                width: 4,
                origin: 0,
                start: 0,
                strides: vec![0, 4, 1],
                extra: 0,
            },
        ];
        let shape = collapse(&[2, 3, 4], &mut w, None);
        assert_eq!(shape, [2, 12]);
        assert_eq!(w[0].strides, [12, 1]);
        assert_eq!(w[1].strides, [0, 1]);
        // A transpose does not merge; size-1 dims go.
        let mut t = vec![
            Walk::dense(4, 0, 0, &[3, 1, 5]),
            Walk {
                width: 4,
                origin: 0,
                start: 0,
                strides: vec![1, 7, 3],
                extra: 0,
            },
        ];
        assert_eq!(collapse(&[3, 1, 5], &mut t, None), [3, 5]);
        assert_eq!(t[1].strides, [1, 3]);
        // A kept dim stays alone.
        let mut k = vec![Walk::dense(4, 0, 0, &[2, 3, 4])];
        assert_eq!(collapse(&[2, 3, 4], &mut k, Some(1)), [2, 3, 4]);
    }

    #[test]
    fn boxes_split_along_outer_dims_into_fitting_contiguous_pieces() {
        // A [10, 100] f32 box (4000 bytes) in 1 KiB bindings at 256-byte alignment.
        let w = vec![
            Walk::dense(4, 64, 0, &[10, 100]),
            Walk::dense(4, 0, 3, &[10, 100]),
        ];
        let subs = split(&[10, 100], &w, 1024, 256, 8, 100).unwrap();
        let mut rows = 0;
        for s in &subs {
            assert!(s
                .binds
                .iter()
                .all(|b| b.size <= 1024 && b.offset % 256 == 0));
            assert_eq!(s.shape[1], 100);
            // Contiguous: this piece's destination starts where the last one ended.
            let b = s.binds[0];
            assert_eq!(b.offset + b.elem_off as u64 * 4, 64 + rows * 400);
            rows += s.shape[0];
        }
        assert_eq!(rows, 10);
        // One row longer than a binding: rows are split into pieces of one row.
        let long = vec![Walk::dense(4, 0, 0, &[3, 1000])];
        let subs = split(&[3, 1000], &long, 1024, 256, 8, 100).unwrap();
        assert!(subs.len() >= 12);
        assert_eq!(
            subs.iter()
                .map(|s| s.shape.iter().product::<u64>())
                .sum::<u64>(),
            3000
        );
        // Too many pieces, or an element whose extra span cannot fit: refused.
        assert!(split(&[3, 1000], &long, 1024, 256, 8, 4).is_err());
        let wide = vec![Walk {
            extra: 1000,
            ..Walk::dense(4, 0, 0, &[4])
        }];
        assert!(split(&[4], &wide, 1024, 256, 8, 100).unwrap_err().needs > 1024);
    }

    #[test]
    fn a_rank_too_high_splits_outer_dims_to_single_indices() {
        let shape = [2u64, 3, 2, 3];
        let w = vec![Walk {
            width: 4,
            origin: 0,
            start: 0,
            strides: vec![100, 10, 50, 1],
            extra: 0,
        }];
        let subs = split(&shape, &w, 1 << 20, 4, 2, 100).unwrap();
        assert_eq!(subs.len(), 6);
        assert!(subs
            .iter()
            .all(|s| s.shape.iter().filter(|&&n| n > 1).count() <= 2));
    }
}
