//! Stretches of copies, fills and accumulates run a block of elements at a time.
//!
//! A ring collective's steps each stream whole buffers (copy a piece to the neighbour,
//! copy it to VMEM, add it to the result): once the devices' buffers outgrow the caches,
//! every step reads and writes memory again. When every op of a stretch of steps moves
//! element `i` of its views to element `i` (the same length, and any two views of one
//! allocation the same elements or none in common), each element's history depends only
//! on the elements of the same index: the stretch may run a block of indices at a time,
//! every op of the stretch on the block before the next block, and the blocks in any order
//! or on any core. Each memory element sees the same ops in the same order as in the
//! schedule's order, so results are bit-identical; a block's views stay in the core's
//! cache from one op to the next.
//!
//! A view whose values are dead outside its stretch ([`dead_inside`]: written whole before
//! any read in the stretch, touched by no other step, no operand of the kernel) need not
//! reach memory at all: its blocks stay in a buffer of the core's own ([`At::Kept`]),
//! so that memory sees neither its reads for ownership nor its write-backs.

use super::region::{self, Scratch};
use super::{accumulate_words, fill_part};
use crate::device_sim::fuse::{Instr, Pattern, Region, Step};
use crate::device_sim::BlockedStretch;
use crate::ir::{Binary, DataOp, ReduceOp, View};
use crate::DType;
use std::collections::HashMap;
use std::ops::{Range, RangeInclusive};
use std::time::{Duration, Instant};

/// Overrides [`block_bytes`] (a size such as `256K`), for measuring other block sizes.
pub const BLOCK_BYTES_ENV: &str = "TPUSIM_BLOCK_BYTES";

/// Overrides [`least_blocked_bytes`] (a size such as `4M`; `1` blocks every stretch of
/// two blocks or more, `1024G` none).
pub const BLOCKED_FROM_ENV: &str = "TPUSIM_BLOCKED_FROM";

/// The size environment variable `name` holds when it is one within `range` (bytes),
/// else `default()`; a value that is not is reported and ignored.
fn size_from_env(name: &str, range: RangeInclusive<u64>, default: impl FnOnce() -> usize) -> usize {
    let Some(v) = std::env::var_os(name) else {
        return default();
    };
    let v = v.to_string_lossy();
    match crate::units::parse_size(&v) {
        Ok(b) if range.contains(&b) => b as usize,
        _ => {
            let default = default();
            eprintln!(
                "tpusim: ignoring {name}={v:?} (a size from {} to {}); {default} bytes",
                crate::units::human(*range.start()),
                crate::units::human(*range.end()),
            );
            default
        }
    }
}

/// The bytes of all a block's views together: half a core's L2 cache (read from Linux's
/// sysfs; 1 MiB where unknown), so that a block's views stay there from the stretch's
/// first op to its last. A block as large as the L2 (512 KiB on a 512 KiB L2) cycles
/// through more than it holds, and every op then finds its views in the L3.
pub fn block_bytes() -> usize {
    static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        size_from_env(BLOCK_BYTES_ENV, 16 << 10..=64 << 20, || {
            let l2 = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index2/size")
                .ok()
                .and_then(|s| crate::units::parse_size(s.trim()).ok())
                .map_or(1 << 20, |b| b as usize);
            (l2 / 2).clamp(64 << 10, 4 << 20)
        })
    })
}

/// The fewest elements of a block (each op's fixed cost is shared by as many).
const LEAST_BLOCK: usize = 2048;

/// The line where no calibration says otherwise: beyond the last-level cache (32 MiB
/// on the AMD EPYC measured), every whole op goes to memory. Below, the views may stay
/// in the caches between whole ops, and blocks then only add each op's cost per block
/// (measured there at 1.5 MiB: 1.4-2.2x slower blocked).
pub const LEAST_BLOCKED_BYTES: usize = 32 << 20;

/// The fewest bytes of views a stretch runs blocked over, this machine's: the least of
/// the sizes [`calibrate`] times from which blocks were faster than whole ops at every
/// size up, [`LEAST_BLOCKED_BYTES`] where they were not at the largest;
/// [`BLOCKED_FROM_ENV`] overrides it. Measured once per process (tens of ms, the first
/// time a plan has a stretch that could run blocked below [`LEAST_BLOCKED_BYTES`]): the
/// line moves with the machine's caches, its cores, and what else runs on them, and a
/// VM's reported cache sizes need not be its own (an Intel Xeon VM reports a 480 MiB L3,
/// and blocks paid there from 4 MiB).
pub fn least_blocked_bytes() -> usize {
    static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        size_from_env(BLOCKED_FROM_ENV, 1..=1 << 40, || {
            // A thread of its own: a caller watched for stopping (`crate::interrupt`)
            // would stop the timed blocked runs.
            std::thread::scope(|s| s.spawn(calibrate).join()).unwrap_or(LEAST_BLOCKED_BYTES)
        })
    })
}

/// The sizes (bytes of a stretch's views together) [`calibrate`] times, increasing.
const CALIBRATED: [usize; 5] = [1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20];

/// Runs of each kind at each size [`calibrate`] keeps the fastest of.
const CALIBRATION_RUNS: usize = 3;

/// The least size of [`CALIBRATED`] from which a stretch like a ring step's (copy `x`
/// to `y` and to `z`, add `z` into `w`, fill `z`: four views of `bytes / 16` elements)
/// ran faster a block at a time than op by op whole (as a run does outside stretches:
/// large ops spread over the cores) at that size and every one above, the fastest of
/// [`CALIBRATION_RUNS`] each, alternating; [`LEAST_BLOCKED_BYTES`] where whole ops won at
/// the largest. A size too small for two blocks is not timed (nothing that small runs
/// blocked).
pub fn calibrate() -> usize {
    let most = CALIBRATED[CALIBRATED.len() - 1] / 16;
    // Values that stay finite as f32 sums; fresh pages faulted in here, not timed.
    let mut bufs: Vec<Vec<u32>> = (0..4).map(|k| vec![(k as f32).to_bits(); most]).collect();
    let mut line = LEAST_BLOCKED_BYTES;
    for &bytes in CALIBRATED.iter().rev() {
        let n = bytes / 16;
        let (block, blocks) = blocking(n, 4);
        if blocks < 2 {
            break;
        }
        let [x, y, z, w] = &mut bufs[..] else {
            unreachable!("four buffers")
        };
        let (x, y, z, w) = (&x[..n], &mut y[..n], &mut z[..n], &mut w[..n]);
        let whole = |y: &mut [u32], z: &mut [u32], w: &mut [u32]| {
            let t = Instant::now();
            super::copy(y, x);
            super::copy(z, x);
            super::over_cores(w, z, |d, s| {
                accumulate_words(d, s, ReduceOp::Sum, DType::F32)
            });
            super::fill_words(z, 0);
            t.elapsed()
        };
        let blocked = |y: &mut [u32], z: &mut [u32], w: &mut [u32]| {
            let (x, z) = (
                At::Memory(x.as_ptr() as *mut u32),
                At::Memory(z.as_mut_ptr()),
            );
            let placement = Placement {
                ops: vec![
                    Placed::Copy {
                        dst: At::Memory(y.as_mut_ptr()),
                        src: x,
                    },
                    Placed::Copy { dst: z, src: x },
                    Placed::Accumulate {
                        dst: At::Memory(w.as_mut_ptr()),
                        src: z,
                        op: ReduceOp::Sum,
                        dtype: DType::F32,
                    },
                    Placed::Fill { dst: z, bits: 0 },
                ],
                regions: Vec::new(),
                kept: 0,
                staged: Vec::new(),
            };
            let t = Instant::now();
            // SAFETY: each place is the first of `n` words of a live buffer, the four
            // buffers apart; nothing is kept. No watch is on this thread: it runs whole.
            let done = unsafe { run(&placement, n, block) };
            done.map_or(Duration::MAX, |()| t.elapsed())
        };
        let (mut best_whole, mut best_blocked) = (Duration::MAX, Duration::MAX);
        for _ in 0..CALIBRATION_RUNS {
            best_whole = best_whole.min(whole(y, z, w));
            best_blocked = best_blocked.min(blocked(y, z, w));
        }
        if best_blocked >= best_whole {
            break;
        }
        line = bytes;
    }
    line
}

/// Elements of a block of a stretch over `distinct` views of `n` elements, so that a
/// block's views take [`block_bytes`] together (at least [`LEAST_BLOCK`] elements, whole
/// cache lines of 32-bit words, blocks of about even lengths), and how many blocks.
fn blocking(n: usize, distinct: usize) -> (usize, usize) {
    let per = (block_bytes() / (4 * distinct.max(1))).max(LEAST_BLOCK);
    let blocks = n.div_ceil(per);
    (n.div_ceil(blocks).next_multiple_of(16), blocks)
}

/// Steps `steps` (indices in a run's steps) whose ops each touch `n` elements of each of
/// their views, run `block` elements at a time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stretch {
    /// The steps.
    pub steps: Range<usize>,
    /// Elements of each view.
    pub n: usize,
    /// Elements of a block.
    pub block: usize,
}

/// A stretch being gathered: its first step, the length of its views, the distinct views
/// of each (device, allocation), and how many ops it holds.
struct Open {
    start: usize,
    n: usize,
    views: HashMap<(usize, usize), Vec<View>>,
    distinct: usize,
    /// True once an op touched a view an earlier op of the stretch touched.
    reused: bool,
    ops: usize,
}

impl Open {
    fn new(start: usize, n: usize) -> Self {
        Open {
            start,
            n,
            views: HashMap::new(),
            distinct: 0,
            reused: false,
            ops: 0,
        }
    }

    /// True when `v` is, in its allocation, each view seen so far or apart from it.
    fn fits(&self, v: &View) -> bool {
        self.views
            .get(&(v.device(), v.alloc()))
            .is_none_or(|seen| seen.iter().all(|s| s == v || !s.overlaps(v)))
    }

    fn add(&mut self, v: View) {
        let seen = self.views.entry((v.device(), v.alloc())).or_default();
        if !seen.contains(&v) {
            seen.push(v);
            self.distinct += 1;
        }
    }

    /// The stretch ending before step `end`, when blocks are worth it: two ops or more,
    /// one of which touches a view an earlier one touched, over views past this
    /// machine's line ([`least_blocked_bytes`]), in two blocks or more ([`blocking`]).
    fn close(self, end: usize) -> Option<Stretch> {
        let (block, blocks) = blocking(self.n, self.distinct);
        let bytes = 4 * self.n * self.distinct;
        // The line last: measured the first time it decides.
        let worth = self.ops >= 2 && self.reused && blocks >= 2;
        (worth && bytes >= least_blocked_bytes()).then_some(Stretch {
            steps: self.start..end,
            n: self.n,
            block,
        })
    }
}

/// The views of `step` (of `ops`) when it moves element `i` of each to element `i`: a
/// copy, fill or accumulate whose source (if any) has the destination's length and no
/// element in common with it, or a region that reads every input element for element
/// and writes every output whole and folds no reduction; with their length.
fn element_wise(step: &Step, ops: &[DataOp]) -> Option<(usize, Vec<View>)> {
    let (n, views) = match step {
        Step::Op(i) => match &ops[*i] {
            DataOp::Copy { src, dst } | DataOp::Accumulate { dst, src, .. } => {
                (dst.len(), vec![*dst, *src])
            }
            DataOp::Fill { dst, .. } => (dst.len(), vec![*dst]),
            DataOp::Compute(_) => return None,
        },
        Step::Region(r) => {
            let full = r.inputs.iter().all(|i| i.pattern == Pattern::Full);
            if !full || !r.reduces.is_empty() {
                return None;
            }
            (r.n, r.reads().chain(r.writes()).collect())
        }
    };
    // A data op's source apart from its destination; a region's outputs may be its
    // inputs, exactly (in place).
    let apart = match step {
        Step::Op(_) => views.len() < 2 || !views[0].overlaps(&views[1]),
        Step::Region(_) => views
            .iter()
            .enumerate()
            .all(|(k, v)| views[..k].iter().all(|w| w == v || !w.overlaps(v))),
    };
    (apart && views.iter().all(|v| v.len() == n)).then_some((n, views))
}

/// The stretches of `steps` (of `ops`) that may run a block at a time, in order and
/// apart; `halves` is true of a view whose memory holds 16-bit elements as stored (run
/// by the unblocked path alone).
pub fn stretches(steps: &[Step], ops: &[DataOp], halves: impl Fn(&View) -> bool) -> Vec<Stretch> {
    let mut out = Vec::new();
    let mut open: Option<Open> = None;
    for (k, step) in steps.iter().enumerate() {
        let views = element_wise(step, ops).filter(|(_, vs)| !vs.iter().any(&halves));
        let Some((n, views)) = views else {
            out.extend(open.take().and_then(|o| o.close(k)));
            continue;
        };
        let joins = open
            .as_ref()
            .is_some_and(|o| o.n == n && views.iter().all(|v| o.fits(v)));
        if !joins {
            out.extend(open.take().and_then(|o| o.close(k)));
        }
        let o = open.get_or_insert_with(|| Open::new(k, n));
        // A view an earlier op of the stretch touched: a block of it stays in the cache
        // from one op to the next. Without any (the same op on each device's own views,
        // one after another) blocks save no pass over memory, and a staged output
        // leaves the caches just before the next step reads it.
        o.reused |= views.iter().any(|v| {
            o.views
                .get(&(v.device(), v.alloc()))
                .is_some_and(|s| s.contains(v))
        });
        for v in views {
            o.add(v);
        }
        o.ops += 1;
    }
    out.extend(open.and_then(|o| o.close(steps.len())));
    out
}

/// The views `step` (of `ops`) reads (an accumulate its destination too) and those it
/// writes.
pub(super) fn touches(step: &Step, ops: &[DataOp]) -> (Vec<View>, Vec<View>) {
    match step {
        Step::Op(i) => {
            let op = &ops[*i];
            let mut reads: Vec<View> = op.reads().collect();
            if let DataOp::Accumulate { dst, .. } = op {
                reads.push(*dst);
            }
            (reads, op.writes().collect())
        }
        Step::Region(r) => (r.reads().collect(), r.writes().collect()),
    }
}

/// The views of stretch `s` of `steps` (over `ops`) whose values are dead outside it, so
/// that their blocks may stay in a core's own buffer and never be written to memory:
/// the first of the stretch's steps to touch each writes it whole and does not read it
/// (so every block is written before it is read), no step outside the stretch touches
/// its memory (nothing reads what it held after the stretch, in this iteration or the
/// next), no step `skip` lists touches it, and `live` (the kernel's operands, memory
/// shared with them) is false of it. The same argument as [`super::dead_fills`]: for a
/// run read through its outputs after it ends, never between its steps.
pub fn dead_inside(
    s: &Stretch,
    steps: &[Step],
    ops: &[DataOp],
    skip: &[usize],
    live: impl Fn(&View) -> bool,
) -> Vec<View> {
    let (mut dead, touched_by_skipped) = written_first(s, steps, ops, skip);
    dead.retain(|v| !live(v));
    dead.retain(|v| !touched_by_skipped.iter().any(|w| w.overlaps(v)));
    if dead.is_empty() {
        return dead;
    }
    let mut by_alloc: HashMap<(usize, usize), Vec<View>> = HashMap::new();
    for v in &dead {
        by_alloc
            .entry((v.device(), v.alloc()))
            .or_default()
            .push(*v);
    }
    let outside = steps[..s.steps.start].iter().chain(&steps[s.steps.end..]);
    for step in outside {
        let (reads, writes) = touches(step, ops);
        for w in reads.iter().chain(&writes) {
            if let Some(vs) = by_alloc.get_mut(&(w.device(), w.alloc())) {
                vs.retain(|v| !v.overlaps(w));
            }
        }
    }
    dead.retain(|v| by_alloc[&(v.device(), v.alloc())].contains(v));
    dead
}

/// The views of stretch `s` of `steps` (over `ops`) whose first touch among the steps
/// it runs (not those `skip` lists) writes them whole and does not read them (an
/// accumulate's destination counts as read), in order of that touch; and the views the
/// skipped steps touch. Views of a stretch's allocation are identical or apart
/// ([`stretches`]): a view's first touch is that of the same view.
fn written_first(
    s: &Stretch,
    steps: &[Step],
    ops: &[DataOp],
    skip: &[usize],
) -> (Vec<View>, Vec<View>) {
    let (mut seen, mut first) = (Vec::<View>::new(), Vec::<View>::new());
    let mut touched_by_skipped = Vec::new();
    for k in s.steps.clone() {
        let (reads, writes) = touches(&steps[k], ops);
        if skip.binary_search(&k).is_ok() {
            touched_by_skipped.extend(reads.into_iter().chain(writes));
            continue;
        }
        for v in writes.iter().chain(&reads) {
            if !seen.contains(v) {
                seen.push(*v);
                if writes.contains(v) && !reads.contains(v) {
                    first.push(*v);
                }
            }
        }
    }
    (first, touched_by_skipped)
}

/// The views of stretch `s` (of `steps` over `ops`, the steps of `skip` not run) whose
/// blocks a run stages in a core's own buffer and streams to memory once, at the end of
/// each block ([`Placement::staged`]): written whole before any read in the stretch, not
/// `kept` (those never reach memory), and no other view the stretch's run steps touch
/// shares memory with them (`aliases`: a view of an operand held in its twin's buffer).
/// Memory then sees each such block once, as stores that do not read it first, instead of
/// a read for ownership and a write-back; every step outside the stretch finds the same
/// values there, as the stretch's blocks all end before the step after it.
pub fn staged(
    s: &Stretch,
    steps: &[Step],
    ops: &[DataOp],
    skip: &[usize],
    kept: &[View],
    aliases: impl Fn(&View, &View) -> bool,
) -> Vec<View> {
    let (mut first, _) = written_first(s, steps, ops, skip);
    first.retain(|v| !kept.contains(v));
    let run = s.steps.clone().filter(|k| skip.binary_search(k).is_err());
    let mut touched = Vec::<View>::new();
    for k in run {
        let (reads, writes) = touches(&steps[k], ops);
        for v in reads.into_iter().chain(writes) {
            if !touched.contains(&v) {
                touched.push(v);
            }
        }
    }
    first.retain(|v| !touched.iter().any(|w| w != v && aliases(v, w)));
    first
}

/// What a roof counts of stretch `s` of `steps` (over `ops`, whose first `scheduled` are
/// the schedule's): the schedule's ops it runs (not the steps of `skip`, sorted), the
/// distinct views it writes to memory (not those of `kept`, which stay in the cores'
/// blocks: [`dead_inside`]), and the cores [`run`] spreads its blocks over.
pub fn described(
    s: &Stretch,
    steps: &[Step],
    ops: &[DataOp],
    scheduled: usize,
    skip: &[usize],
    kept: &[View],
) -> BlockedStretch {
    let (mut run, mut written) = (Vec::new(), Vec::new());
    let mut seen = std::collections::HashSet::new();
    for (k, step) in steps
        .iter()
        .enumerate()
        .take(s.steps.end)
        .skip(s.steps.start)
    {
        if skip.binary_search(&k).is_ok() {
            continue;
        }
        let writes: Vec<View> = match step {
            Step::Op(i) => {
                // A fill cut to what nothing overwrites (`dead_fills`) is an op of the
                // run's own; the schedule's fill it came from is counted on its own.
                if *i < scheduled {
                    run.push(*i);
                }
                ops[*i].writes().collect()
            }
            Step::Region(r) => {
                run.extend_from_slice(&r.ops);
                r.writes().collect()
            }
        };
        let key = |v: &View| (v.device(), v.alloc(), v.offset(), v.len());
        let to_memory = writes.into_iter().filter(|v| !kept.contains(v));
        written.extend(to_memory.filter(|v| seen.insert(key(v))));
    }
    BlockedStretch {
        ops: run,
        written,
        cores: rayon::current_num_threads(),
    }
}

/// Region `r` as the accumulate it computes, when it is one: `dst = dst + src` of f32 or
/// i32 elements (its inputs read element for element, its one output the first
/// operand's input, the other input apart from it), as `(dst, src, op, dtype)`. A
/// stretch runs it as [`Placed::Accumulate`]: in place, where the region's block would
/// compute the sum into a register and copy it out. Each element gets the same bits:
/// `d + s` in that order, as the region's add (f32 in the thread's float mode, i32
/// wrapping).
pub fn accumulate_of(r: &Region) -> Option<(View, View, ReduceOp, DType)> {
    let [Instr::Load(kd), Instr::Load(ks), Instr::Binary(Binary::Add, t, d, s)] =
        *r.instrs.as_slice()
    else {
        return None;
    };
    let (kd, ks) = match (d, s) {
        (0, 1) => (kd, ks),
        (1, 0) => (ks, kd),
        _ => return None,
    };
    let plain = r.regs.iter().all(|g| g.dtype == t && !g.raw && !g.uniform);
    let wide = matches!(t, DType::F32 | DType::I32) && r.inputs.iter().all(|i| i.dtype == t);
    let full = r
        .inputs
        .iter()
        .all(|i| i.pattern == Pattern::Full && i.view.len() == r.n);
    let [out] = r.outputs.as_slice() else {
        return None;
    };
    let (dst, src) = (r.inputs.get(kd)?.view, r.inputs.get(ks)?.view);
    let in_place = out.reg == 2 && out.view == dst && !src.overlaps(&dst);
    (kd != ks && r.inputs.len() == 2 && r.reduces.is_empty() && plain && wide && full && in_place)
        .then_some((dst, src, ReduceOp::Sum, t))
}

/// Where an op of a stretch finds a view's block.
#[derive(Clone, Copy, Debug)]
pub enum At {
    /// In memory: the view's first element (a block's are `from` on).
    Memory(*mut u32),
    /// Slot `k` of the running core's own buffer of blocks ([`Placement::kept`]): a view
    /// dead outside its stretch ([`dead_inside`]), never written to memory.
    Kept(usize),
}

/// Where one block's elements lie: `from` on in memory, or in slot `k` of `kept` (a
/// page), slots `stride` words apart, each at the same place in its page as element
/// `from` of a buffer (buffers start on a page: [`super::words`]), so that a copy or sum
/// between a kept block and memory never has its loads wait on stores 4 KiB apart.
struct Block {
    from: usize,
    kept: *mut u32,
    stride: usize,
}

impl Block {
    /// The block's first element of the view at `at`.
    ///
    /// # Safety
    /// A memory view holds the block's elements; a kept slot lies within `kept`.
    unsafe fn of(&self, at: At) -> *mut u32 {
        // SAFETY: as the function's contract.
        unsafe {
            match at {
                At::Memory(p) => p.add(self.from),
                At::Kept(k) => self.kept.add(k * self.stride + self.from % PAGE_WORDS),
            }
        }
    }
}

/// 32-bit words in a 4 KiB page.
const PAGE_WORDS: usize = super::words::PAGE / 4;

/// Words between two slots of a core's kept blocks: whole pages, with room for a block
/// to start anywhere in its first ([`Block`]).
fn stride(block: usize) -> usize {
    block.next_multiple_of(PAGE_WORDS) + PAGE_WORDS
}

/// One op of a stretch, at its views' places.
#[derive(Clone, Copy)]
pub enum Placed {
    /// `dst = src`.
    Copy { dst: At, src: At },
    /// `dst = bits`.
    Fill { dst: At, bits: u32 },
    /// `dst = op(dst, src)`.
    Accumulate {
        dst: At,
        src: At,
        op: ReduceOp,
        dtype: DType,
    },
    /// Region `k` of the placement's.
    Region(usize),
}

/// A stretch's ops, placed: its regions are run by index into `regions`
/// ([`Placed::Region`]).
pub struct Placement {
    /// The ops, in order.
    pub ops: Vec<Placed>,
    /// The regions.
    pub regions: Vec<PlacedRegion>,
    /// The slots of kept blocks ([`At::Kept`]) each core holds.
    pub kept: usize,
    /// Views staged in kept slots ([`staged`]): `(slot, first element in memory)`; each
    /// block of them is streamed to memory when the block's ops are done.
    pub staged: Vec<(usize, *mut u32)>,
}

// SAFETY: the blocks a `Placement` runs on different threads touch different elements
// of memory ([`run`]) and each its own kept blocks; the buffers outlive the run.
unsafe impl Sync for Placement {}

/// A region of a stretch: itself over a block's elements and over the last block's,
/// and its views' places.
pub struct PlacedRegion {
    block: Region,
    last: Region,
    inputs: Vec<At>,
    outputs: Vec<At>,
}

impl PlacedRegion {
    /// `r` of stretch `s`, its inputs and outputs at `inputs` and `outputs`.
    pub fn new(r: &Region, s: &Stretch, inputs: Vec<At>, outputs: Vec<At>) -> Self {
        // The same views (offsets kept, so that which are the same stays as it was) of
        // `len` elements.
        let of = |len: usize| {
            let mut b = r.clone();
            b.n = len;
            let cut = |v: &mut View| *v = View::new(v.device(), v.alloc(), v.offset(), len);
            b.inputs.iter_mut().for_each(|i| cut(&mut i.view));
            b.outputs.iter_mut().for_each(|o| cut(&mut o.view));
            b
        };
        let tail = s.n - (s.n.div_ceil(s.block) - 1) * s.block;
        PlacedRegion {
            block: of(s.block),
            last: of(tail),
            inputs,
            outputs,
        }
    }

    /// Runs the region on the `len` elements of block `at` (a whole block, or the last).
    ///
    /// # Safety
    /// As [`run_op`]'s.
    unsafe fn run(&self, own: &mut Planned, at: &Block, len: usize) {
        let r = if len == self.block.n {
            &self.block
        } else {
            &self.last
        };
        let scratch = &mut own.scratch;
        let places = scratch.places();
        // SAFETY: the elements lie within each view (the caller's contract).
        unsafe {
            places
                .inputs
                .extend(self.inputs.iter().map(|&p| at.of(p) as *const u32));
            places
                .outputs
                .extend(self.outputs.iter().map(|&p| at.of(p)));
        }
        places.input_halves.resize(self.inputs.len(), false);
        places.output_halves.resize(self.outputs.len(), false);
        // SAFETY: as the caller's; outputs overlap inputs only exactly (`stretches`).
        // Planned once per block length: the blocks differ in their places alone.
        unsafe {
            if own.planned == Some(len) {
                region::run_planned(r, scratch)
            } else {
                region::run(r, scratch);
                own.planned = Some(len);
            }
        }
    }
}

/// A thread's scratch for one region of a stretch, and the block length it was last
/// planned for.
#[derive(Default)]
struct Planned {
    scratch: Scratch,
    planned: Option<usize>,
}

/// Blocks a stretch runs between two looks at whether its caller was asked to stop
/// ([`crate::interrupt`]): 128 MiB of views or so (tens of ms beyond the caches), where
/// a whole stretch of psum at 256 MiB per device took ~1 s. Each round ends with its
/// cores waiting for the last block: rounds of 32 blocks made psum at 16 MiB per device
/// 15-20% slower on a loaded machine.
const BLOCKS_PER_CHECK: usize = 256;

thread_local! {
    /// The running core's kept blocks ([`At::Kept`]), kept from one stretch to the next
    /// (fresh pages would be faulted in again).
    static KEPT: std::cell::Cell<Vec<u32>> = const { std::cell::Cell::new(Vec::new()) };
    /// The running core's scratch for each region of a stretch's run, and which run of
    /// [`run`] it was planned for ([`RUNS`]): planned once per core and run, not per block.
    static PLANNED: std::cell::Cell<(u64, Vec<Planned>)> =
        const { std::cell::Cell::new((0, Vec::new())) };
}

/// Runs of [`run`] so far: each a number of its own (from 1), so that a core's planned
/// scratches ([`PLANNED`]) are never taken for another run's regions.
static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// `f` on the running core's scratches for the `regions` regions of run `id`: those
/// it planned in that run's blocks before, else fresh (their memory kept).
fn with_planned(id: u64, regions: usize, f: impl FnOnce(&mut [Planned])) {
    let (owner, mut planned) = PLANNED.take();
    if owner != id {
        planned.iter_mut().for_each(|p| p.planned = None);
    }
    if planned.len() < regions {
        planned.resize_with(regions, Planned::default);
    }
    f(&mut planned[..regions]);
    PLANNED.set((id, planned));
}

/// Runs `ops` (a [`Stretch`]'s, placed, in order) on `n` elements, `block` at a time, the
/// blocks spread over the cores, the calling thread working too ([`spread`]); fails with
/// [`crate::Error::Interrupted`] between blocks once the calling thread's watched work is
/// asked to stop (the blocks run so far keep what they wrote).
///
/// A stretch is often short (a few blocks, well under a millisecond: each of a ring
/// attention's 256 query blocks a step holds one), so the caller claims blocks as the
/// cores it wakes do, and waits only for a block one of them claimed: a parallel
/// iterator started outside rayon's pool sleeps until a worker has run every block, and
/// on a busy machine a worker may first wait for a core for milliseconds.
///
/// # Safety
/// Each op's memory places address `n` elements of a live buffer; views of one
/// allocation are identical or apart, and an op's source and destination apart
/// ([`stretches`]); kept slots are below `ops.kept`, and each is written before it is
/// read in every block ([`dead_inside`]).
///
/// [`spread`]: super::spread::spread
pub unsafe fn run(ops: &Placement, n: usize, block: usize) -> crate::Result<()> {
    let stride = stride(block);
    let one = |scratches: &mut [Planned], b: usize| {
        let (from, len) = (b * block, block.min(n - b * block));
        let mut kept = match ops.kept {
            0 => Vec::new(),
            _ => KEPT.take(),
        };
        // From a page on (its first, at most).
        if kept.len() < ops.kept * stride + PAGE_WORDS {
            kept = vec![0; ops.kept * stride + PAGE_WORDS];
        }
        let addr = kept.as_ptr() as usize;
        let page = (addr.next_multiple_of(super::words::PAGE) - addr) / 4;
        let at = Block {
            from,
            // SAFETY: `page` < PAGE_WORDS words, within `kept`.
            kept: unsafe { kept.as_mut_ptr().add(page) },
            stride,
        };
        for op in &ops.ops {
            // SAFETY: elements `from..from + len` of each view lie within it (`n`),
            // and no other block touches them (views identical or apart); the kept
            // slots lie within `kept`, this thread's alone.
            unsafe {
                match *op {
                    Placed::Region(k) => ops.regions[k].run(&mut scratches[k], &at, len),
                    _ => run_op(*op, &at, len),
                }
            }
        }
        for &(k, p) in &ops.staged {
            // SAFETY: the slot lies within `kept`, and the block's elements within the
            // view at `p`, touched by no other block.
            unsafe { stream(at.of(At::Kept(k)), p.add(from), len) };
        }
        if !ops.staged.is_empty() {
            store_fence();
        }
        if ops.kept > 0 {
            KEPT.set(kept);
        }
    };
    let blocks = n.div_ceil(block);
    let mode = super::float_mode::FloatMode::current();
    let helpers = rayon::current_num_threads().saturating_sub(1);
    let id = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let regions = ops.regions.len();
    // In rounds, the watch being this thread's: rayon's threads have none.
    for first in (0..blocks).step_by(BLOCKS_PER_CHECK) {
        crate::interrupt::check()?;
        let round = (first + BLOCKS_PER_CHECK).min(blocks) - first;
        super::spread::spread(round, helpers, &|c| {
            mode.run(|| with_planned(id, regions, |s| one(s, first + c)))
        });
    }
    Ok(())
}

/// Copies `len` words from `src` to `dst` with stores that bypass the caches where the
/// target has them (x86-64's non-temporal stores): `dst` is written, not read for
/// ownership first, and leaves no lines behind to write back. Ordered before other
/// threads' reads by [`store_fence`].
///
/// # Safety
/// `src` and `dst` hold `len` words each and do not overlap.
unsafe fn stream(src: *const u32, dst: *mut u32, len: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as the function's contract; SSE2 is part of x86-64, and the streamed
    // stores are to 16-byte aligned addresses within `dst`.
    unsafe {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let head = ((16 - dst as usize % 16) % 16 / 4).min(len);
        std::ptr::copy_nonoverlapping(src, dst, head);
        let body = head + (len - head) / 4 * 4;
        let mut i = head;
        while i < body {
            let v = _mm_loadu_si128(src.add(i) as *const __m128i);
            _mm_stream_si128(dst.add(i) as *mut __m128i, v);
            i += 4;
        }
        std::ptr::copy_nonoverlapping(src.add(body), dst.add(body), len - body);
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as the function's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, len)
    }
}

/// Orders the [`stream`]s before it before every store after it (so before the thread
/// that joins the block's sees them).
fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of x86-64.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// `op` on the `len` elements of block `at` of its views.
///
/// # Safety
/// As for [`run`]: those elements lie within each view, and source and destination apart.
unsafe fn run_op(op: Placed, at: &Block, len: usize) {
    use std::slice::{from_raw_parts, from_raw_parts_mut};
    // SAFETY: as the function's contract.
    unsafe {
        match op {
            Placed::Copy { dst, src } => {
                std::ptr::copy_nonoverlapping(at.of(src), at.of(dst), len);
            }
            Placed::Fill { dst, bits } => fill_part(from_raw_parts_mut(at.of(dst), len), bits),
            Placed::Accumulate {
                dst,
                src,
                op,
                dtype,
            } => accumulate_words(
                from_raw_parts_mut(at.of(dst), len),
                from_raw_parts(at.of(src), len),
                op,
                dtype,
            ),
            Placed::Region(_) => unreachable!("run by the placement"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(device: usize, alloc: usize, offset: usize, len: usize) -> View {
        View::new(device, alloc, offset, len)
    }

    fn copy(src: View, dst: View) -> DataOp {
        DataOp::Copy { src, dst }
    }

    /// Elements of views large enough to run blocked ([`LEAST_BLOCKED_BYTES`]).
    const N: usize = 4 << 20;

    #[test]
    fn a_ring_step_is_one_stretch() {
        let ops = vec![
            copy(v(0, 4, 0, N), v(1, 4, N, N)),
            copy(v(0, 4, 0, N), v(0, 5, 0, N)),
            DataOp::Accumulate {
                dst: v(0, 3, 0, N),
                src: v(0, 5, 0, N),
                op: ReduceOp::Sum,
                dtype: DType::F32,
            },
            DataOp::Fill {
                dst: v(0, 5, 0, N),
                bits: 0,
            },
        ];
        let steps: Vec<Step> = (0..ops.len()).map(Step::Op).collect();
        let s = stretches(&steps, &ops, |_| false);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].steps, 0..4);
        assert_eq!(s[0].n, N);
        // Four distinct views share the block's bytes.
        assert_eq!(s[0].block, block_bytes() / 16);
    }

    /// The same element-wise op on each device's own views, one after another (ring
    /// attention's `exp` of each device's scores at 16 MiB, P = 4: 4 MiB of views), runs
    /// whole: no op touches a view an earlier one did, so blocks save no pass over
    /// memory (they ran it 1.4-8x slower). A view read again makes it a stretch.
    #[test]
    fn ops_that_share_no_view_run_whole() {
        let apart: Vec<DataOp> = (0..4).map(|d| copy(v(d, 1, 0, N), v(d, 2, 0, N))).collect();
        let steps: Vec<Step> = (0..4).map(Step::Op).collect();
        assert!(stretches(&steps, &apart, |_| false).is_empty());
        let mut again = apart.clone();
        again[3] = copy(v(2, 2, 0, N), v(3, 2, 0, N));
        let s = stretches(&steps, &again, |_| false);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].steps, 0..4);
    }

    #[test]
    fn views_that_overlap_at_another_offset_end_a_stretch() {
        let ops = vec![
            copy(v(0, 1, 0, N), v(0, 2, 0, N)),
            copy(v(0, 2, 0, N), v(0, 3, 0, N)),
            // Elements of allocation 2 moved by 16: not index to index.
            copy(v(0, 2, 16, N), v(0, 4, 0, N)),
            copy(v(0, 4, 0, N), v(0, 5, 0, N)),
        ];
        let steps: Vec<Step> = (0..ops.len()).map(Step::Op).collect();
        let s = stretches(&steps, &ops, |_| false);
        let ranges: Vec<_> = s.iter().map(|s| s.steps.clone()).collect();
        assert_eq!(ranges, vec![0..2, 2..4]);
    }

    /// A stretch of a copy and a fill over 300 blocks (rounds of [`BLOCKS_PER_CHECK`])
    /// runs whole unwatched; watched and asked to stop, it stops before its next block
    /// and writes nothing more.
    #[test]
    fn a_stretch_stops_between_blocks_when_asked() {
        let (n, block) = (300 * 64, 64);
        let src: Vec<u32> = (0..n as u32).collect();
        let (mut dst, mut filled) = (vec![0u32; n], vec![0u32; n]);
        let placement = Placement {
            ops: vec![
                Placed::Copy {
                    dst: At::Memory(dst.as_mut_ptr()),
                    src: At::Memory(src.as_ptr() as *mut u32),
                },
                Placed::Fill {
                    dst: At::Memory(filled.as_mut_ptr()),
                    bits: 7,
                },
            ],
            regions: Vec::new(),
            kept: 0,
            staged: Vec::new(),
        };
        // SAFETY: every pointer addresses `n` words of a live vector, and they are apart.
        unsafe { run(&placement, n, block) }.unwrap();
        assert_eq!(dst, src);
        assert!(filled.iter().all(|&w| w == 7));
        // SAFETY: as above; the placement's pointers stay those of the same vectors.
        unsafe {
            std::ptr::write_bytes(dst.as_mut_ptr(), 0, n);
            std::ptr::write_bytes(filled.as_mut_ptr(), 0, n);
        }
        fn stop() -> bool {
            true
        }
        let _watch = crate::interrupt::watch(Some(stop));
        // The watch asks its poll once `POLL_EVERY` has passed.
        std::thread::sleep(crate::interrupt::POLL_EVERY + std::time::Duration::from_millis(5));
        // SAFETY: as above.
        let stopped = unsafe { run(&placement, n, block) };
        assert!(
            matches!(stopped, Err(crate::Error::Interrupted)),
            "{stopped:?}"
        );
        assert!(dst.iter().chain(&filled).all(|&w| w == 0));
    }

    /// A staged view ([`Placement::staged`]) ends up in memory as the plain run leaves
    /// it, at any alignment and block length (a last block shorter than the others):
    /// `dst = src; dst += src` staged, `other = dst` read from its kept slot.
    #[test]
    fn a_staged_view_reaches_memory_whole_at_any_alignment() {
        for (offset, n, block) in [(0, 4096, 1024), (1, 999, 64), (3, 1000, 96), (2, 37, 16)] {
            let src: Vec<u32> = (0..n as u32).map(|i| i * 7 + 1).collect();
            let mut dst = vec![u32::MAX; n + offset];
            let mut other = vec![0u32; n];
            let d = At::Kept(0);
            let placement = Placement {
                ops: vec![
                    Placed::Copy {
                        dst: d,
                        src: At::Memory(src.as_ptr() as *mut u32),
                    },
                    Placed::Accumulate {
                        dst: d,
                        src: At::Memory(src.as_ptr() as *mut u32),
                        op: ReduceOp::Sum,
                        dtype: DType::I32,
                    },
                    Placed::Copy {
                        dst: At::Memory(other.as_mut_ptr()),
                        src: d,
                    },
                ],
                regions: Vec::new(),
                kept: 1,
                // SAFETY: `offset` words within `dst`.
                staged: vec![(0, unsafe { dst.as_mut_ptr().add(offset) })],
            };
            // SAFETY: every pointer addresses `n` words of a live vector, and they are
            // apart; the kept slot is written before it is read in every block.
            unsafe { run(&placement, n, block) }.unwrap();
            let want: Vec<u32> = src.iter().map(|&w| w.wrapping_mul(2)).collect();
            assert_eq!(&dst[offset..], &want[..], "{offset} {n} {block}");
            assert!(dst[..offset].iter().all(|&w| w == u32::MAX));
            assert_eq!(other, want);
        }
    }

    /// `out = a + b` of dtype `t` over `n` elements: `a` loaded from `inputs[0]` when
    /// `a_first`, else from `inputs[1]`.
    fn add(t: DType, inputs: [View; 2], a_first: bool, out: View) -> Region {
        use crate::device_sim::fuse::{Input, Output, Reg};
        let reg = Reg {
            dtype: t,
            raw: false,
            uniform: false,
        };
        let (a, b) = if a_first { (0, 1) } else { (1, 0) };
        Region {
            n: out.len(),
            device: 0,
            inputs: inputs
                .iter()
                .map(|&view| Input {
                    view,
                    dtype: t,
                    pattern: Pattern::Full,
                })
                .collect(),
            instrs: vec![
                Instr::Load(0),
                Instr::Load(1),
                Instr::Binary(Binary::Add, t, a, b),
            ],
            regs: vec![reg; 3],
            slots: vec![0, 1, 2],
            nslots: 3,
            outputs: vec![Output { reg: 2, view: out }],
            reduces: Vec::new(),
            ops: Vec::new(),
        }
    }

    /// `out = (a + b) * a` in f32 over `n` elements: five instructions, where [`add`]'s
    /// region has three.
    fn add_times(inputs: [View; 2], out: View) -> Region {
        let mut r = add(DType::F32, inputs, true, out);
        r.instrs.push(Instr::Binary(Binary::Mul, DType::F32, 2, 0));
        r.regs.push(r.regs[0]);
        r.slots.push(3);
        r.nslots = 4;
        r.outputs[0].reg = 3;
        r
    }

    /// Stretches run one after another on the same cores, each of one region at the same
    /// block length but not the same region: each core plans a run's region once, and
    /// never runs one with a plan of another run's (`with_planned`): every block of
    /// every run gets its own region's values, over many blocks (every core takes some).
    #[test]
    fn each_run_plans_its_own_regions_once_per_core() {
        let (n, block) = (64 * 1024 + 48, 1024);
        let s = Stretch {
            steps: 0..1,
            n,
            block,
        };
        let a: Vec<u32> = (0..n).map(|i| (i as f32 * 0.5).to_bits()).collect();
        let b: Vec<u32> = (0..n).map(|i| (3.0 - i as f32).to_bits()).collect();
        let (va, vb, vo) = (v(0, 1, 0, n), v(0, 2, 0, n), v(0, 3, 0, n));
        let mut out = vec![0u32; n];
        let place = |p: &[u32]| At::Memory(p.as_ptr() as *mut u32);
        for (round, with_mul) in [false, true, false, true, true].into_iter().enumerate() {
            let r = match with_mul {
                false => add(DType::F32, [va, vb], true, vo),
                true => add_times([va, vb], vo),
            };
            let region = PlacedRegion::new(
                &r,
                &s,
                vec![place(&a), place(&b)],
                vec![At::Memory(out.as_mut_ptr())],
            );
            let placement = Placement {
                ops: vec![Placed::Region(0)],
                regions: vec![region],
                kept: 0,
                staged: Vec::new(),
            };
            // SAFETY: each place is the first of `n` words of a live vector, the output
            // apart from the inputs.
            unsafe { run(&placement, n, block) }.unwrap();
            for i in 0..n {
                let (x, y) = (f32::from_bits(a[i]), f32::from_bits(b[i]));
                let want = if with_mul { (x + y) * x } else { x + y };
                assert_eq!(out[i], want.to_bits(), "round {round} element {i}");
            }
        }
    }

    /// psum's fused step `dst = dst + src` (f32, i32) runs as an accumulate; an add
    /// into a third view, of the operands the other way round, or of 16-bit floats
    /// stays a region.
    #[test]
    fn an_add_in_place_runs_as_an_accumulate() {
        let (src, dst) = (v(0, 1, 0, N), v(0, 3, 0, N));
        for t in [DType::F32, DType::I32] {
            let r = add(t, [src, dst], false, dst);
            assert_eq!(accumulate_of(&r), Some((dst, src, ReduceOp::Sum, t)));
            let r = add(t, [dst, src], true, dst);
            assert_eq!(accumulate_of(&r), Some((dst, src, ReduceOp::Sum, t)));
            assert_eq!(accumulate_of(&add(t, [src, dst], true, dst)), None);
            assert_eq!(
                accumulate_of(&add(t, [src, dst], false, v(0, 2, 0, N))),
                None
            );
        }
        assert_eq!(
            accumulate_of(&add(DType::BF16, [src, dst], false, dst)),
            None
        );
    }

    /// The calibration picks one of the sizes it times, or the default line past them.
    #[test]
    fn the_calibrated_line_is_a_timed_size_or_the_default() {
        let t = Instant::now();
        let line = calibrate();
        eprintln!("calibrated line {line} bytes in {:?}", t.elapsed());
        assert!(
            CALIBRATED.contains(&line) || line == LEAST_BLOCKED_BYTES,
            "{line}"
        );
    }

    #[test]
    fn small_lengths_halves_and_overlapping_ops_run_unblocked() {
        // Views that stay in the caches.
        let small = vec![copy(v(0, 1, 0, 1 << 16), v(0, 2, 0, 1 << 16)); 3];
        let steps: Vec<Step> = (0..3).map(Step::Op).collect();
        assert!(stretches(&steps, &small, |_| false).is_empty());
        let big = vec![copy(v(0, 1, 0, N), v(0, 2, 0, N)); 3];
        assert!(stretches(&steps, &big, |w| w.alloc() == 2).is_empty());
        let lengths = vec![
            copy(v(0, 1, 0, N), v(0, 2, 0, N)),
            copy(v(0, 1, 0, N / 2), v(0, 3, 0, N / 2)),
        ];
        assert!(stretches(&steps[..2], &lengths, |_| false).is_empty());
        let onto_itself = vec![copy(v(0, 1, 0, N), v(0, 1, 8, N)); 3];
        assert!(stretches(&steps, &onto_itself, |_| false).is_empty());
    }
}
