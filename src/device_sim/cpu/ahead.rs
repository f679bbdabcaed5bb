//! A chain's next chunk fetched into the cache while its later regions compute this
//! one ([`super::region::chain`]): the first region of a chain (softmax's row max)
//! reads its whole inputs from memory, a chunk at a time, and only then computes; the
//! later regions find that chunk in the cache and compute much more per byte (an exp,
//! a division). Each later region fetches a share of the next chunk of the first's
//! inputs, and of every region's whole outputs (for writing: their stores then find
//! their lines), as its blocks go. Prefetches change no value. Measured on f32 softmax
//! at 2048x2048 (Intel Xeon, AVX-512, 2 cores): the max scan's loads were 23% of the
//! time, 10% with the inputs fetched ahead; a call's CPU time 7.6 ms against 9.6-9.9
//! (bf16 6.6-6.7 against 8.0-8.7), alternating at load 8; no change at 1024x1024.

use std::ops::Range;

/// Where a chain's first region reads its whole inputs and where its regions write
/// their whole outputs: each view's first byte's address, its bytes an element, and
/// whether it is written.
pub(super) struct Ahead {
    views: Vec<(usize, usize, bool)>,
}

/// A range of memory to fetch: its first byte, its length in bytes, and whether it
/// is fetched to be written.
pub(super) type Fetch = (*const u8, usize, bool);

impl Ahead {
    /// The views to fetch ahead: each one's first byte's address, its bytes an
    /// element (2 for 16-bit elements as stored, else 4), and whether it is written.
    pub(super) fn of_views(views: Vec<(usize, usize, bool)>) -> Self {
        Ahead { views }
    }

    /// Into `out`, the memory that later region `j` (from 1, of `later`) fetches of
    /// the chain's elements `next` (the next chunk's; empty: none).
    pub(super) fn share(&self, next: Range<usize>, j: usize, later: usize, out: &mut Vec<Fetch>) {
        out.clear();
        let mine = share_of(next, j, later);
        if mine.is_empty() {
            return;
        }
        for &(p, e, w) in &self.views {
            // Within the view's `n` elements.
            out.push(((p + mine.start * e) as *const u8, mine.len() * e, w));
        }
    }
}

/// Of elements `next`, those that later region `j` (from 1, of `later`) fetches: the
/// `j`-th of `later` nearly equal parts (region 0, the first, fetches none).
fn share_of(next: Range<usize>, j: usize, later: usize) -> Range<usize> {
    if j == 0 || later == 0 {
        return next.start..next.start;
    }
    let per = next.len().div_ceil(later);
    let at = |i: usize| (next.start + i * per).min(next.end);
    at(j - 1)..at(j)
}

/// Fetches into the cache part `b` of `parts` nearly equal parts (whole cache lines)
/// of each range of `fetch`: a run of `parts` blocks fetches one a block.
#[inline(always)]
pub(super) fn fetch(fetch: &[Fetch], b: usize, parts: usize) {
    const LINE: usize = 64;
    for &(p, len, write) in fetch {
        let per = len.div_ceil(parts.max(1)).next_multiple_of(LINE);
        let mut o = b * per;
        while o < len.min((b + 1) * per) {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch reads nothing and faults on no address; this one lies
            // in the range anyway.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0, _MM_HINT_T1};
                let a = p.add(o) as *const i8;
                if write {
                    _mm_prefetch::<_MM_HINT_ET0>(a);
                } else {
                    _mm_prefetch::<_MM_HINT_T1>(a);
                }
            }
            o += LINE;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_later_regions_shares_tile_the_next_chunk() {
        for (next, later) in [(64..96, 2), (0..7, 3), (10..11, 4), (5..5, 2), (0..1000, 1)] {
            assert!(
                share_of(next.clone(), 0, later).is_empty(),
                "the first fetches none"
            );
            let mut at = next.start;
            for j in 1..=later {
                let s = share_of(next.clone(), j, later);
                assert_eq!(s.start, at, "{next:?} {j}/{later}");
                assert!(s.end <= next.end);
                at = s.end;
            }
            assert_eq!(at, next.end, "{next:?} all of it, {later} later");
        }
    }
}
