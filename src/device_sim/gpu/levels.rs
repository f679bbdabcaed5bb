//! Levels of independent ops: each op's level is one more than the highest earlier op
//! it conflicts with (reads what that op wrote, writes what it read or wrote), so the
//! ops of one level can run together in any order.

use std::collections::BTreeMap;

/// The word ranges `[lo, hi)` an op reads (besides its destination) and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// What it reads, if anything besides its destination.
    pub read: Option<(u32, u32)>,
    /// What it writes.
    pub write: (u32, u32),
}

/// What happened last to a run of words: the level that last wrote it and the highest
/// level that read it since.
#[derive(Clone, Copy, Debug)]
struct Touch {
    end: u32,
    write: Option<usize>,
    read: Option<usize>,
}

/// The level of every op, in order.
pub fn levels(ops: &[Access]) -> Vec<usize> {
    let mut mem: BTreeMap<u32, Touch> = BTreeMap::new();
    let split = |mem: &mut BTreeMap<u32, Touch>, at: u32| {
        let prev = mem.range(..at).next_back().map(|(&s, &t)| (s, t));
        if let Some((s, t)) = prev {
            if t.end > at {
                mem.insert(s, Touch { end: at, ..t });
                mem.insert(at, t);
            }
        }
    };
    ops.iter()
        .map(|o| {
            let (r, w) = (o.read, o.write);
            let mut level = 0;
            let mut look = |lo: u32, hi: u32, write: bool| {
                for (_, t) in mem.range(..hi).rev().take_while(|(_, t)| t.end > lo) {
                    if let Some(l) = t.write {
                        level = level.max(l + 1);
                    }
                    if let (true, Some(l)) = (write, t.read) {
                        level = level.max(l + 1);
                    }
                }
            };
            if let Some((lo, hi)) = r {
                look(lo, hi, false);
            }
            look(w.0, w.1, true);
            let mut mark = |lo: u32, hi: u32, write: bool| {
                split(&mut mem, lo);
                split(&mut mem, hi);
                let keys: Vec<u32> = mem.range(lo..hi).map(|(&k, _)| k).collect();
                // Fill the gaps with fresh runs, then mark every run in [lo, hi).
                let mut cur = lo;
                for k in keys.iter().copied().chain([hi]) {
                    if k > cur {
                        mem.insert(
                            cur,
                            Touch {
                                end: k,
                                write: None,
                                read: None,
                            },
                        );
                    }
                    cur = mem.get(&k).map_or(k, |t| t.end);
                }
                for (_, t) in mem.range_mut(lo..hi) {
                    if write {
                        t.write = Some(level);
                        t.read = None;
                    } else {
                        t.read = Some(t.read.map_or(level, |l| l.max(level)));
                    }
                }
            };
            if let Some((lo, hi)) = r {
                mark(lo, hi, false);
            }
            mark(w.0, w.1, true);
            level
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(dst: u32, src: Option<u32>, len: u32) -> Access {
        Access {
            read: src.map(|s| (s, s + len)),
            write: (dst, dst + len),
        }
    }

    #[test]
    fn levels_separate_exactly_the_conflicting_ops() {
        let ops = [
            op(100, Some(0), 10), // copy 0..10 -> 100..110
            op(200, Some(50), 10),
            op(300, Some(105), 10), // reads 105..115: after op 0
            op(0, None, 4),         // fills 0..4, read by op 0: after it
            op(108, Some(400), 4),  // writes 108..112, read by op 2: after it
        ];
        assert_eq!(levels(&ops), vec![0, 0, 1, 1, 2]);
    }
}
