//! Fused regions run together a chunk of rows at a time ([`super::region::chain`]): a
//! softmax's three regions (max; exp and sum; divide) pass whole arrays from one to the
//! next, which then come from memory; run a few rows at a time through all three, each
//! chunk of them is still in the cache when the next region reads it.
//!
//! Running region B's chunk `c` before region A's chunk `c + 1` reorders them. That is
//! done only where each touches, of memory that one of them writes, only its own
//! chunk's elements: both take the view as the same elements of the chunk (element
//! `i` of the region, or group `i / k` of a row reduction), so every element sees the
//! regions in their order.

use crate::device_sim::fuse::{by_group, Pattern, Region, Step};
use crate::ir::View;

/// Most regions run together.
const MAX_CHAIN: usize = 8;

/// Which elements of a view a region touches when it runs element `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Index {
    /// Element `i` (a whole input or output).
    Elem,
    /// Element `i / k` (a row reduction's result, or a row's value spread back).
    Group,
    /// Others (a scalar, another broadcast, one element).
    Other,
}

/// A view a region reads or writes, and how.
struct Use {
    view: View,
    index: Index,
    write: bool,
}

/// How `r` touches memory when run in a chain of `n` elements in groups of `k`: a
/// region of `n` elements, or one of `n / k` (one element a group, a row's value).
fn uses(r: &Region, n: usize, k: usize) -> Vec<Use> {
    let whole = |len: usize| match r.n == n {
        true if len == n => Index::Elem,
        false if len == r.n => Index::Group,
        _ => Index::Other,
    };
    let input = r.inputs.iter().map(|i| Use {
        view: i.view,
        index: match &i.pattern {
            Pattern::Full => whole(i.view.len()),
            p if r.n == n && i.view.len() == n / k && by_group(p, k, n) => Index::Group,
            _ => Index::Other,
        },
        write: false,
    });
    let output = r.outputs.iter().map(|o| Use {
        view: o.view,
        index: whole(o.view.len()),
        write: true,
    });
    let reduce = r.reduces.iter().map(|q| Use {
        view: q.dst,
        index: if q.k == k { Index::Group } else { Index::Other },
        write: true,
    });
    input.chain(output).chain(reduce).collect()
}

/// True when `b`, run after `a`, may run chunk by chunk with it: what either writes
/// and the other touches, both touch as the same elements of a chunk.
fn apart(a: &[Use], b: &[Use]) -> bool {
    a.iter().all(|u| {
        b.iter().all(|w| {
            !(u.write || w.write)
                || !u.view.overlaps(&w.view)
                || (u.view == w.view && u.index == w.index && u.index != Index::Other)
        })
    })
}

/// The regions that run together from step `start` of `steps` (those whose index
/// `skipped` says are skipped end a chain): how many (one: the region alone), and the
/// length of the groups they run in. A chain starts at a region that folds row
/// reductions; every region of it has the same elements, writes each of them (no
/// single element), and folds groups of the same length, if any; or has one element a
/// group, and folds none (a row's values copied, say).
pub(super) fn chain(
    steps: &[Step],
    start: usize,
    skipped: impl Fn(usize) -> bool,
) -> (usize, usize) {
    let Some(Step::Region(first)) = steps.get(start) else {
        return (1, 0);
    };
    let Some(k) = first.reduces.first().map(|q| q.k) else {
        return (1, 0);
    };
    let n = first.n;
    let fits = |r: &Region| {
        let rows = r.n * k == n && r.reduces.is_empty();
        let elems = r.n == n && r.reduces.iter().all(|q| q.k == k);
        n > k && (rows || elems) && r.outputs.iter().all(|o| o.view.len() == r.n)
    };
    if !fits(first) {
        return (1, 0);
    }
    let mut seen = vec![uses(first, n, k)];
    let mut end = start + 1;
    while end < steps.len() && end - start < MAX_CHAIN && !skipped(end) {
        let Step::Region(r) = &steps[end] else {
            break;
        };
        if !fits(r) {
            break;
        }
        let u = uses(r, n, k);
        if !seen.iter().all(|a| apart(a, &u)) {
            break;
        }
        seen.push(u);
        end += 1;
    }
    (end - start, k)
}
