//! Evaluating a fused [`Region`] in host memory: uniform registers once, the others a
//! block of [`BLOCK`] lanes at a time (every register's block stays in the cache from
//! the op that makes it to the ones that use it), the blocks spread over the machine's
//! cores when there are enough of them, under the widest vector unit the CPU has.
//!
//! An input read element for element is read where it is (no copy into a
//! register), and an instruction whose register only one 32-bit output takes writes
//! that output's memory directly, when neither view overlaps any other of the region:
//! a chain from a ref to a ref touches each element of memory once.

use super::ahead::{self, Ahead, Fetch};
use super::lanes::{self, BLOCK};
use super::layout::gather;
use super::patterns::{self, Kernel};
use super::rows::RowFold;
use crate::device_sim::fuse::{Instr, Pattern, Region};
use crate::ir::Binary;
use pulp::{Simd, WithSimd};
use std::ops::Range;

/// Nanoseconds an element of a region costs one core, for [`super::spread::worth`]:
/// regions spread from about 256 Ki elements. Under that each of two cores gets less
/// work than the hand-offs and wake-ups cost on a machine whose cores are busy:
/// measured with psum at 256 KiB per device (sums of 64 Ki elements), alternating, load
/// 6-7 on 2 cores, serial was faster in 6 of 6 pairs (1.3-2.3 ms against 1.75-3.1 ms);
/// at 256 Ki elements it was a draw.
const REGION_NS: f64 = 0.8;

/// Where a region's views are in memory: every input's first element (read only) and
/// every output's (written), the views' own lengths as the region says.
#[derive(Default)]
pub(super) struct Places {
    pub(super) inputs: Vec<*const u32>,
    pub(super) outputs: Vec<*mut u32>,
    /// Every reduction's destination ([`Region::reduces`]).
    pub(super) reduces: Vec<*mut u32>,
    /// Per input: its place holds 16-bit elements as stored (`*const u16`), widened to
    /// words as a block loads them (a full load: [`super::halves`]).
    pub(super) input_halves: Vec<bool>,
    /// Per output: its place holds 16-bit elements (`*mut u16`), narrowed as a block
    /// stores them (an output of every element of the region).
    pub(super) output_halves: Vec<bool>,
}

/// The memory a region's run works in, kept from one region to the next so that a
/// small region allocates nothing (a few small regions are all of a small collective's
/// iteration, and allocating per region cost more than their arithmetic).
#[derive(Default)]
pub(super) struct Scratch {
    places: Places,
    regs: Vec<u32>,
    in_place: Vec<bool>,
    direct: Vec<Option<usize>>,
    uses: Vec<usize>,
    /// Per input read in a broadcast, the strides of its pattern.
    strides: Vec<Vec<usize>>,
    /// Per input read in a broadcast, its runs of one value ([`Plan::same`]).
    same: Vec<usize>,
    splat_ok: Vec<bool>,
    halves_widen: Vec<bool>,
    at: Vec<*const u32>,
    /// Per register, its one value when it has one over the block ([`lanes::Arg`]).
    splat: Vec<Option<u32>>,
    /// The one-element outputs' bits, stored last.
    singles: Vec<(usize, u32)>,
    /// Per register: the kernel that computes it with the chain before it.
    kernels: Vec<Option<Kernel>>,
    /// Per register: computed by a later register's kernel, not alone.
    inside: Vec<bool>,
    /// Per register: the lent 16-bit output its kernel stores straight into.
    halves_direct: Vec<Option<usize>>,
}

// SAFETY: the pointers kept are those of the last region's run, never read again: every
// run sets them before it reads them.
unsafe impl Send for Scratch {}

impl Scratch {
    /// Where `r`'s views are, set by the caller for the next [`run`].
    pub(super) fn places(&mut self) -> &mut Places {
        self.places.inputs.clear();
        self.places.outputs.clear();
        self.places.reduces.clear();
        self.places.input_halves.clear();
        self.places.output_halves.clear();
        &mut self.places
    }
}

/// How each register of a region is had in a block, decided once per run.
struct Plan<'a> {
    r: &'a Region,
    places: &'a Places,
    /// Per register: read where its input is (a full load that no output overlaps).
    in_place: &'a [bool],
    /// Per register: the output it is computed straight into (its only use).
    direct: &'a [Option<usize>],
    /// Per input: the strides of its broadcast (empty for other patterns).
    strides: &'a [Vec<usize>],
    /// Per input: the elements of each run of one value of its broadcast (the trailing
    /// dimensions it is broadcast along; 0 when there are none).
    same: &'a [usize],
    /// Per register: may hold one value over a block ([`spread`]): a broadcast load
    /// taken as one value (never filled) in a block that lies in one run of it, and
    /// ops of such registers computed once.
    splat_ok: &'a [bool],
    /// Per register: a load of 16-bit memory lent as stored that only widens and row
    /// reductions read, left where it is (they read the halves).
    halves_widen: &'a [bool],
    /// Per register: the kernel that computes it with the chain before it
    /// ([`patterns`]).
    kernels: &'a [Option<Kernel>],
    /// Per register: computed by a later register's kernel, not alone.
    inside: &'a [bool],
    /// Per register: the lent 16-bit output its kernel stores straight into (the
    /// register's only use; the output apart from every input), not stored after.
    halves_direct: &'a [Option<usize>],
}

// SAFETY: the threads that share a plan read the inputs and write disjoint element
// ranges of the outputs (one block each); the fusion pass keeps every output apart from
// every input except an input read element for element in place (each block reads its
// elements before it writes them; such an input is read in place only when no output
// stores its load's register).
unsafe impl Send for Plan<'_> {}
unsafe impl Sync for Plan<'_> {}

/// Decides, into `in_place` and `direct`, how each register of `r` is had.
#[allow(clippy::too_many_arguments)]
fn decide(
    r: &Region,
    in_place: &mut Vec<bool>,
    direct: &mut Vec<Option<usize>>,
    uses: &mut Vec<usize>,
    strides: &mut Vec<Vec<usize>>,
    same: &mut Vec<usize>,
    splat_ok: &mut Vec<bool>,
) {
    strides.clear();
    strides.extend(r.inputs.iter().map(|i| match &i.pattern {
        Pattern::Broadcast { shape, dims, into } => Pattern::strides(shape, dims, into),
        _ => Vec::new(),
    }));
    same.clear();
    same.extend(r.inputs.iter().zip(strides.iter()).map(|(i, st)| {
        match &i.pattern {
            Pattern::Broadcast { into, .. } => {
                into.iter()
                    .zip(st)
                    .rev()
                    .take_while(|(_, &s)| s == 0)
                    .map(|(&d, _)| d)
                    .product::<usize>()
                    * usize::from(st.last() == Some(&0))
            }
            _ => 0,
        }
    }));
    let n = r.instrs.len();
    let wide = |reg: usize| r.regs[reg].dtype.storage() == 4;
    let overlaps_any_output = |v: &crate::ir::View| r.outputs.iter().any(|o| o.view.overlaps(v));
    in_place.clear();
    in_place.extend((0..n).map(|i| match r.instrs[i] {
        Instr::Load(k) => {
            let input = &r.inputs[k];
            // Every dtype's elements are words in memory, as a load's lanes hold them
            // (a 16-bit one's raw, widened by a later instruction). An input that an
            // output overwrites in place (`o += x`) is read there too: a block's
            // outputs are stored after its last instruction, so only an output that
            // stores this very register could see the block's new values.
            let exact = |v: &crate::ir::View| *v == input.view && v.len() == r.n;
            input.pattern == Pattern::Full
                && (!overlaps_any_output(&input.view)
                    || r.outputs
                        .iter()
                        .all(|o| o.reg != i && (exact(&o.view) || !o.view.overlaps(&input.view))))
        }
        _ => false,
    }));
    uses.clear();
    uses.resize(n, 0);
    for instr in &r.instrs {
        for a in instr.args() {
            uses[a] += 1;
        }
    }
    for o in &r.outputs {
        uses[o.reg] += 1;
    }
    splat_ok.clear();
    splat_ok.resize(n, false);
    direct.clear();
    direct.extend((0..n).map(|i| {
        // Computed, or a broadcast gathered (a row reduction spread back): made in
        // the output's memory, not copied there after.
        let computed = match r.instrs[i] {
            Instr::Load(k) => matches!(r.inputs[k].pattern, Pattern::Broadcast { .. }),
            Instr::Const { .. } => false,
            _ => true,
        };
        let k = r.outputs.iter().position(|o| o.reg == i)?;
        let o = &r.outputs[k];
        let apart = !r.inputs.iter().any(|inp| inp.view.overlaps(&o.view));
        let whole = o.view.len() == r.n;
        (computed && uses[i] == 1 && wide(i) && !r.regs[i].uniform && apart && whole).then_some(k)
    }));
    spread(r, same, direct, splat_ok);
}

/// How many chains of `r` a kernel computes in one loop ([`patterns`]).
pub(super) fn kernels(r: &Region) -> usize {
    let mut s = Scratch::default();
    decide(
        r,
        &mut s.in_place,
        &mut s.direct,
        &mut s.uses,
        &mut s.strides,
        &mut s.same,
        &mut s.splat_ok,
    );
    patterns::find(r, &s.uses, &s.splat_ok, &mut s.kernels, &mut s.inside);
    s.kernels.iter().filter(|k| k.is_some()).count()
}

/// Marks in `ok` the registers that may hold one value over a block: a broadcast load
/// whose block lies in one run of a value, and a widen, unary, convert or binary op of
/// such registers (and uniform ones), computed once (a row reduction spread back
/// costs a fill per block, not a gather and its ops per element). Each is read only
/// by binary ops (which take one value as it is), by ops marked too, or by outputs
/// (filled); never a reduction's or a direct output's.
fn spread(r: &Region, same: &[usize], direct: &[Option<usize>], ok: &mut [bool]) {
    let n = r.instrs.len();
    let uniform = |i: usize| r.regs[i].uniform;
    let folded = |i: usize| r.reduces.iter().any(|q| q.reg == i);
    for i in 0..n {
        ok[i] = !uniform(i)
            && direct[i].is_none()
            && !folded(i)
            && match r.instrs[i] {
                Instr::Load(k) => same[k] > 0,
                Instr::Widen(_) | Instr::Unary(..) | Instr::Convert(..) | Instr::Binary(..) => true,
                _ => false,
            };
    }
    loop {
        let mut changed = false;
        for i in 0..n {
            if !ok[i] {
                continue;
            }
            let args = r.instrs[i].args();
            let of_ones = matches!(r.instrs[i], Instr::Load(_))
                || (args.iter().all(|&a| ok[a] || uniform(a)) && args.iter().any(|&a| ok[a]));
            // Every reader takes one value: a binary op, or an op marked.
            let read_so = r.instrs.iter().enumerate().all(|(j, ins)| {
                !ins.args().contains(&i) || matches!(ins, Instr::Binary(..)) || ok[j]
            });
            if !(of_ones && read_so) {
                ok[i] = false;
                changed = true;
            }
        }
        if !changed {
            return;
        }
    }
}

/// True when every argument of `instr` (not a load) has one value over the block.
#[inline(always)]
fn all_splat(instr: &Instr, splat: &[Option<u32>]) -> bool {
    match *instr {
        Instr::Widen(a) | Instr::Unary(_, _, a) | Instr::Convert(_, _, a) => splat[a].is_some(),
        Instr::Binary(_, _, a, b) | Instr::Compare(_, _, a, b) => {
            splat[a].is_some() && splat[b].is_some()
        }
        Instr::Select(p, a, b) => splat[p].is_some() && splat[a].is_some() && splat[b].is_some(),
        Instr::Load(_) | Instr::Const { .. } => false,
    }
}

/// Decides how `r` runs on the memory at `scratch`'s places and computes its uniform
/// registers into `scratch`'s register file: what [`blocks`] then runs on.
///
/// # Safety
/// As [`run`]'s.
unsafe fn prepare(r: &Region, scratch: &mut Scratch) {
    plan(r, scratch);
    // SAFETY: as the function's.
    unsafe { prologue(r, scratch) };
}

/// Decides how `r` runs on memory whose 16-bit places are as `scratch`'s say: which
/// registers are read in place, made in an output, computed by a kernel.
fn plan(r: &Region, scratch: &mut Scratch) {
    let Scratch {
        places,
        in_place,
        direct,
        uses,
        strides,
        same,
        splat_ok,
        halves_widen,
        kernels,
        inside,
        halves_direct,
        ..
    } = scratch;
    decide(r, in_place, direct, uses, strides, same, splat_ok);
    patterns::find(r, uses, splat_ok, kernels, inside);
    halves_direct.clear();
    halves_direct.extend((0..r.instrs.len()).map(|i| {
        kernels[i].as_ref().filter(|k| patterns::stores_halves(k))?;
        let k = r.outputs.iter().position(|o| o.reg == i)?;
        let o = &r.outputs[k];
        let apart = !r.inputs.iter().any(|inp| inp.view.overlaps(&o.view));
        let whole = o.view.len() == r.n;
        (places.output_halves[k] && uses[i] == 1 && apart && whole).then_some(k)
    }));
    // 16-bit memory is loaded and stored through a block of words of the region's own.
    for (i, instr) in r.instrs.iter().enumerate() {
        if let Instr::Load(k) = *instr {
            in_place[i] &= !places.input_halves[k];
        }
        if direct[i].is_some_and(|k| places.output_halves[k]) {
            direct[i] = None;
        }
    }
    halves_widen.clear();
    halves_widen.extend(r.instrs.iter().enumerate().map(|(i, instr)| match *instr {
        Instr::Load(k) => {
            let widens = r
                .instrs
                .iter()
                .filter(|j| matches!(j, Instr::Widen(a) if *a == i))
                .count();
            let folded = r.reduces.iter().any(|q| q.reg == i);
            places.input_halves[k]
                && r.inputs[k].pattern == Pattern::Full
                && (uses[i] > 0 || folded)
                && uses[i] == widens
        }
        _ => false,
    }));
}

/// Computes the uniform registers of [`plan`]ned `r` into `scratch`'s register file, at
/// `scratch`'s places (a block's register reuse may have overwritten them since).
///
/// # Safety
/// As [`run`]'s.
unsafe fn prologue(r: &Region, scratch: &mut Scratch) {
    let Scratch {
        regs: template,
        at,
        splat,
        ..
    } = scratch;
    // Every register's lanes are written before they are read: no zeroing.
    if template.len() < r.nslots * BLOCK {
        template.resize(r.nslots * BLOCK, 0);
    }
    at.clear();
    at.resize(r.instrs.len(), std::ptr::null());
    splat.clear();
    splat.resize(r.instrs.len(), None);
    let (plan, template, at, splat) = split(r, scratch);
    // Uniform registers: once, into the register file every block starts from.
    pulp::Arch::new().dispatch(Prologue {
        plan: &plan,
        regs: template,
        at,
        splat,
    });
}

/// [`prepare`]d `scratch` as the plan of `r`, its register file, and where each
/// register's lanes are and which have one value.
#[allow(clippy::type_complexity)]
fn split<'a>(
    r: &'a Region,
    scratch: &'a mut Scratch,
) -> (
    Plan<'a>,
    &'a mut [u32],
    &'a mut [*const u32],
    &'a mut [Option<u32>],
) {
    let plan = Plan {
        r,
        places: &scratch.places,
        in_place: &scratch.in_place,
        direct: &scratch.direct,
        strides: &scratch.strides,
        same: &scratch.same,
        splat_ok: &scratch.splat_ok,
        halves_widen: &scratch.halves_widen,
        kernels: &scratch.kernels,
        inside: &scratch.inside,
        halves_direct: &scratch.halves_direct,
    };
    (
        plan,
        &mut scratch.regs[..r.nslots * BLOCK],
        &mut scratch.at,
        &mut scratch.splat,
    )
}

/// Runs `r` on the memory at `scratch`'s places, in `scratch`'s memory.
///
/// # Safety
/// The places hold, for each input and output of `r`, a pointer to its view's elements
/// (`view.len()` of them) that stays valid for the call; no output overlaps an input
/// other than exactly, and then only an input read element for element
/// ([`Pattern::Full`]), as the fusion pass builds regions.
pub(super) unsafe fn run(r: &Region, scratch: &mut Scratch) {
    plan(r, scratch);
    // SAFETY: as the function's.
    unsafe { run_planned(r, scratch) };
}

/// [`run`], `scratch` already planned for `r` by an earlier [`run`] or [`run_planned`]
/// of it with the same 16-bit places: a region run again at other places (a blocked
/// stretch's next block) skips its planning.
///
/// # Safety
/// As [`run`]'s.
pub(super) unsafe fn run_planned(r: &Region, scratch: &mut Scratch) {
    // SAFETY: as the function's.
    unsafe { prologue(r, scratch) };
    let mut singles = std::mem::take(&mut scratch.singles);
    let (plan, template, at, splat) = split(r, scratch);
    let arch = pulp::Arch::new();
    // Uniform registers into one-element views: their bits now (the blocks may reuse
    // the slots), stored after the blocks, since such an element may lie in a wider
    // output that the schedule wrote before it ([`crate::device_sim::fuse::Joins`]).
    singles.clear();
    for (k, o) in r.outputs.iter().enumerate() {
        if r.n > 1 && o.view.len() == 1 {
            let lane = &template[r.slots[o.reg] * BLOCK..][..1];
            let mut bits = [0u32; 1];
            store(r, o.reg, lane, &mut bits);
            singles.push((k, bits[0]));
        }
    }
    let blocks = r.n.div_ceil(BLOCK);
    let threads = rayon::current_num_threads();
    if super::spread::worth(r.n as f64 * REGION_NS) {
        // Runs of whole blocks, or of whole groups where the region folds reductions
        // (a group's fold is one core's, in order).
        let mut span = blocks.div_ceil(threads * 4).max(8) * BLOCK;
        if let Some(q) = r.reduces.first() {
            span = (span / q.k).max(1) * q.k;
        }
        let (plan, template) = (&plan, &*template);
        let mode = super::float_mode::FloatMode::current();
        super::spread::spread(r.n.div_ceil(span), threads - 1, &|c| {
            mode.run(|| {
                let mut regs = template.to_vec();
                let mut at = vec![std::ptr::null::<u32>(); r.instrs.len()];
                let mut splat = vec![None; r.instrs.len()];
                arch.dispatch(Blocks {
                    plan,
                    regs: &mut regs,
                    at: &mut at,
                    splat: &mut splat,
                    elems: c * span..((c + 1) * span).min(r.n),
                    ahead: &[],
                });
            })
        });
    } else {
        arch.dispatch(Blocks {
            plan: &plan,
            regs: template,
            at,
            splat,
            elems: 0..r.n,
            ahead: &[],
        });
    }
    for &(k, bits) in &singles {
        // SAFETY: the output's place holds its one element.
        unsafe { plan.places.outputs[k].write(bits) };
    }
    scratch.singles = singles;
}

/// A thread's register file for one region: its lanes, where each register's lanes
/// are, and which hold one value.
type File = (Vec<u32>, Vec<*const u32>, Vec<Option<u32>>);

/// Regions of a [`chain`] are run a chunk of about this many elements (whole groups)
/// at a time through all of them: a chunk of each array they pass on stays in the
/// cache (128 KiB of f32 per array) from the region that writes it to the next, with
/// the next chunk's first inputs fetched meanwhile ([`ahead`]): 2 MiB of L2 holds both.
const CHAIN_ELEMS: usize = 1 << 15;

/// Whether the later regions of chain `rs` compute enough per element (a transcendental
/// function or a division) for the next chunk's fetches to hide behind ([`ahead`]'s
/// premise). Without: a row's sum or maximum broadcast back (a plain write), where
/// fetching ahead only added to the loads: bf16 at 2048x2048, 0.61-0.70 ms a call
/// without against 0.72-0.85 ms with (`bench/ops.py`, alternating runs).
fn computes_per_element(rs: &[&Region]) -> bool {
    rs[1..].iter().flat_map(|r| &r.instrs).any(|i| match i {
        Instr::Unary(u, ..) => u.is_transcendental(),
        Instr::Binary(b, ..) => *b == Binary::Div,
        _ => false,
    })
}

/// What a chain fetches ahead ([`Ahead`]): the whole inputs (read element for element,
/// `n` of them) of first region `rs[0]` and the whole outputs (`n` elements) of each
/// region of `rs`, at `places`.
fn ahead_of(rs: &[&Region], places: &[&Places], n: usize) -> Ahead {
    let bytes = |halves: bool| if halves { 2 } else { 4 };
    let (r, p) = (rs[0], places[0]);
    let inputs = r
        .inputs
        .iter()
        .zip(p.inputs.iter().zip(&p.input_halves))
        .filter(|(i, _)| i.pattern == Pattern::Full && i.view.len() == n)
        .map(|(_, (&at, &h))| (at as usize, bytes(h), false));
    let outputs = rs.iter().zip(places).flat_map(|(r, p)| {
        r.outputs
            .iter()
            .zip(p.outputs.iter().zip(&p.output_halves))
            .filter(move |(o, _)| r.n == n && o.view.len() == n)
            .map(move |(_, (&at, &h))| (at as usize, bytes(h), true))
    });
    Ahead::of_views(inputs.chain(outputs).collect())
}

/// Runs regions `rs` (each on the places of its scratch of `scratches`), which
/// [`super::chain`] lets run together, a chunk of whole groups of `k` elements at a
/// time through all of them in order (a region of `n / k` elements, where the first
/// has `n`, the chunk's groups).
///
/// # Safety
/// As [`run`]'s for each region; and [`super::chain::chains`] holds for them: each
/// chunk of each touches only its own elements (or groups) of memory that another
/// writes.
pub(super) unsafe fn chain(rs: &[&Region], scratches: &mut [Scratch], k: usize) {
    for (r, s) in rs.iter().zip(scratches.iter_mut()) {
        // SAFETY: as the function's.
        unsafe { prepare(r, s) };
    }
    let n = rs[0].n;
    // A region of one element a group runs the chunk's groups.
    let own = |r: &Region, e: &Range<usize>| match r.n == n {
        true => e.clone(),
        false => e.start / k..e.end / k,
    };
    let chunk = (CHAIN_ELEMS / k).max(1) * k;
    let chunks = n.div_ceil(chunk);
    let mut parts: Vec<_> = rs
        .iter()
        .zip(scratches.iter_mut())
        .map(|(r, s)| split(r, s))
        .collect();
    let arch = pulp::Arch::new();
    let threads = rayon::current_num_threads();
    let places: Vec<&Places> = parts.iter().map(|p| p.0.places).collect();
    let first = match computes_per_element(rs) {
        true => ahead_of(rs, &places, n),
        false => Ahead::of_views(Vec::new()),
    };
    // Later region `j`'s share of the chunk after `c` (none after `last`).
    let later = rs.len() - 1;
    let ahead = |c: usize, last: usize, j: usize, out: &mut Vec<Fetch>| {
        let next = match c + 1 < last {
            true => (c + 1) * chunk..((c + 2) * chunk).min(n),
            false => n..n,
        };
        first.share(next, j, later, out);
    };
    if super::spread::worth(n as f64 * REGION_NS) && chunks > 1 {
        let per = chunks.div_ceil(threads * 4).max(1);
        let shared: Vec<(&Plan, &[u32])> = parts.iter().map(|(p, t, _, _)| (p, &**t)).collect();
        let shared = &shared;
        let mode = super::float_mode::FloatMode::current();
        super::spread::spread(chunks.div_ceil(per), threads - 1, &|t| {
            mode.run(|| {
                let mut files: Vec<File> = shared
                    .iter()
                    .map(|(p, tmpl)| {
                        let m = p.r.instrs.len();
                        (tmpl.to_vec(), vec![std::ptr::null(); m], vec![None; m])
                    })
                    .collect();
                let mut pre = Vec::new();
                let last = ((t + 1) * per).min(chunks);
                for c in t * per..last {
                    let elems = c * chunk..((c + 1) * chunk).min(n);
                    for (j, ((plan, _), (regs, at, splat))) in
                        shared.iter().zip(files.iter_mut()).enumerate()
                    {
                        ahead(c, last, j, &mut pre);
                        arch.dispatch(Blocks {
                            plan,
                            regs,
                            at,
                            splat,
                            elems: own(plan.r, &elems),
                            ahead: &pre,
                        });
                    }
                }
            })
        });
    } else {
        let mut pre = Vec::new();
        for c in 0..chunks {
            let elems = c * chunk..((c + 1) * chunk).min(n);
            for (j, (plan, regs, at, splat)) in parts.iter_mut().enumerate() {
                ahead(c, chunks, j, &mut pre);
                arch.dispatch(Blocks {
                    plan,
                    regs,
                    at,
                    splat,
                    elems: own(plan.r, &elems),
                    ahead: &pre,
                });
            }
        }
    }
}

/// The uniform registers of a region computed into `regs` (compiled for the vector
/// unit [`pulp`] dispatches to: every function below it is inlined into it).
struct Prologue<'a> {
    plan: &'a Plan<'a>,
    regs: &'a mut [u32],
    at: &'a mut [*const u32],
    /// All `None`: every argument's lanes are filled here.
    splat: &'a [Option<u32>],
}

impl WithSimd for Prologue<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: Simd>(self, _: S) {
        let (r, regs, at, splat) = (self.plan.r, self.regs, self.at, self.splat);
        for (i, instr) in r.instrs.iter().enumerate() {
            if !r.regs[i].uniform {
                continue;
            }
            let s = r.slots[i];
            match instr {
                Instr::Load(k) => {
                    // SAFETY: a uniform load is of a scalar input: one element there.
                    let v = unsafe { *self.plan.places.inputs[*k] };
                    regs[s * BLOCK..(s + 1) * BLOCK].fill(v);
                }
                Instr::Const { bits, .. } => regs[s * BLOCK..(s + 1) * BLOCK].fill(*bits),
                _ => {
                    let out = regs[s * BLOCK..].as_mut_ptr();
                    // SAFETY: the slots of a uniform register and of its arguments are
                    // distinct buffers of the register file.
                    unsafe { compute(r, instr, at, splat, self.plan.halves_widen, out, BLOCK) };
                }
            }
            at[i] = regs[s * BLOCK..].as_ptr();
        }
    }
}

/// A range of a region's elements (starting a group of its reductions), run a block at
/// a time in turn on one register file.
struct Blocks<'a> {
    plan: &'a Plan<'a>,
    regs: &'a mut [u32],
    at: &'a mut [*const u32],
    splat: &'a mut [Option<u32>],
    elems: Range<usize>,
    /// Memory a later run reads (the next chunk of a chain's first inputs), fetched
    /// into the cache a part a block while this run computes.
    ahead: &'a [Fetch],
}

impl WithSimd for Blocks<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: Simd>(self, _: S) {
        let r = self.plan.r;
        let mut folds: Vec<RowFold> = r
            .reduces
            .iter()
            .map(|q| RowFold::new(q, self.elems.start))
            .collect();
        let mut start = self.elems.start;
        let nblocks = self.elems.len().div_ceil(BLOCK).max(1);
        let mut b = 0;
        while start < self.elems.end {
            let m = BLOCK.min(self.elems.end - start);
            ahead::fetch(self.ahead, b, nblocks);
            b += 1;
            // SAFETY: `run`'s caller vouches for the places (the only way here).
            unsafe { block(self.plan, self.regs, self.at, self.splat, start, m) };
            for (j, (f, q)) in folds.iter_mut().zip(&r.reduces).enumerate() {
                // SAFETY: the register's `m` lanes are at `at` after the block; the
                // destination holds a result per group, and this range's groups are
                // its own.
                unsafe {
                    let (at, dst) = (self.at[q.reg], self.plan.places.reduces[j]);
                    if self.plan.halves_widen[q.reg] {
                        // The lent halves themselves, folded as stored.
                        let x = std::slice::from_raw_parts(at as *const u16, m);
                        f.fold(q, r.regs[q.reg], x, dst);
                    } else {
                        let x = std::slice::from_raw_parts(at, m);
                        f.fold(q, r.regs[q.reg], x, dst);
                    }
                }
            }
            start += m;
        }
    }
}

/// Register `reg`'s lanes as the stored bits of its dtype, into `dst`.
#[inline(always)]
fn store(r: &Region, reg: usize, lanes: &[u32], dst: &mut [u32]) {
    if r.regs[reg].raw {
        dst.copy_from_slice(lanes);
    } else {
        lanes::narrow(r.regs[reg].dtype, lanes, dst);
    }
}

/// Register `reg`'s lanes as the stored 16-bit elements of its dtype, into `dst`.
#[inline(always)]
fn store_halves(r: &Region, reg: usize, lanes: &[u32], dst: &mut [u16]) {
    let g = r.regs[reg];
    if g.raw {
        return lanes::narrow_halves(lanes, dst);
    }
    if matches!(
        g.dtype,
        crate::array::DType::BF16 | crate::array::DType::F16
    ) {
        return lanes::narrow_to_halves(g.dtype, lanes, dst);
    }
    let mut bits = [0u32; BLOCK];
    let bits = &mut bits[..lanes.len()];
    store(r, reg, lanes, bits);
    lanes::narrow_halves(bits, dst);
}

/// Output `k` (register `reg`, one value over the block, in lane 0 at `lane`) over
/// the block of `m` elements from `start`: the value stored once, then filled.
///
/// # Safety
/// As the block's other stores: the output's place holds its `n` elements (16-bit
/// where lent so), and this block writes its own.
#[inline(always)]
unsafe fn store_one(
    plan: &Plan,
    r: &Region,
    k: usize,
    reg: usize,
    lane: *const u32,
    start: usize,
    m: usize,
) {
    // SAFETY: lane 0 holds the value.
    let one = unsafe { std::slice::from_raw_parts(lane, 1) };
    let place = plan.places.outputs[k];
    if plan.places.output_halves[k] {
        let mut h = [0u16; 1];
        store_halves(r, reg, one, &mut h);
        // SAFETY: as the function's.
        unsafe { std::slice::from_raw_parts_mut((place as *mut u16).add(start), m) }.fill(h[0]);
    } else {
        let mut w = [0u32; 1];
        store(r, reg, one, &mut w);
        // SAFETY: as the function's.
        unsafe { std::slice::from_raw_parts_mut(place.add(start), m) }.fill(w[0]);
    }
}

/// Computes `instr` (not a load) over `m` lanes into `out`, its arguments at `at`, or,
/// a binary op's, `splat` where it has one value.
///
/// # Safety
/// `at[a]` holds `m` lanes of every argument `a` that `splat` has no value of, and
/// `out` room for `m` lanes that none of them shares.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn compute(
    r: &Region,
    instr: &Instr,
    at: &[*const u32],
    splat: &[Option<u32>],
    halves: &[bool],
    out: *mut u32,
    m: usize,
) {
    // SAFETY: as the function's.
    let arg = |a: usize| unsafe { std::slice::from_raw_parts(at[a], m) };
    let either = |a: usize| match splat[a] {
        Some(v) => lanes::Arg::Splat(v),
        None => lanes::Arg::Lanes(arg(a)),
    };
    let out = unsafe { std::slice::from_raw_parts_mut(out, m) };
    match *instr {
        Instr::Load(_) | Instr::Const { .. } => unreachable!("loads are not computed"),
        Instr::Widen(a) if halves[a] => {
            // SAFETY: `at[a]` is where the lent halves of the block are.
            let h = unsafe { std::slice::from_raw_parts(at[a] as *const u16, m) };
            lanes::widen_from_halves(r.regs[a].dtype, h, out)
        }
        Instr::Widen(a) => lanes::widen(r.regs[a].dtype, arg(a), out),
        Instr::Unary(u, t, a) => lanes::unary(u, t, arg(a), out),
        Instr::Binary(b, t, a, c) => lanes::binary_args(b, t, either(a), either(c), out),
        Instr::Compare(op, t, a, c) => lanes::compare(op, t, arg(a), arg(c), out),
        Instr::Select(p, a, c) => lanes::select(arg(p), arg(a), arg(c), out),
        Instr::Convert(f, t, a) => lanes::convert(f, t, arg(a), out),
    }
}

/// Runs the block of `m` elements from `start` of a region: its loads, its non-uniform
/// instructions, its outputs; `at` is then where each register's lanes are.
///
/// # Safety
/// As [`run`]'s.
#[inline(always)]
unsafe fn block(
    plan: &Plan,
    regs: &mut [u32],
    at: &mut [*const u32],
    splat: &mut [Option<u32>],
    start: usize,
    m: usize,
) {
    let r = plan.r;
    let base = regs.as_mut_ptr();
    for (i, instr) in r.instrs.iter().enumerate() {
        // SAFETY: every slot is within the register file.
        let own = unsafe { base.add(r.slots[i] * BLOCK) };
        if r.regs[i].uniform {
            at[i] = own;
            // SAFETY: a uniform register's lanes are filled before any block, all one
            // value.
            splat[i] = Some(unsafe { *own });
            continue;
        }
        splat[i] = None;
        if plan.inside[i] {
            continue;
        }
        match instr {
            Instr::Load(k) => {
                let input = &r.inputs[*k];
                // SAFETY: a full input has `n` elements at its place; a broadcast reads
                // within its view's.
                let src = plan.places.inputs[*k];
                if plan.halves_widen[i] {
                    // SAFETY: the place holds the input's `n` 16-bit elements.
                    at[i] = unsafe { (src as *const u16).add(start) as *const u32 };
                    continue;
                }
                if plan.in_place[i] {
                    at[i] = unsafe { src.add(start) };
                    continue;
                }
                let own = match plan.direct[i] {
                    // SAFETY: as for a computed register's direct output below.
                    Some(o) => unsafe { plan.places.outputs[o].add(start) },
                    None => own,
                };
                let out = unsafe { std::slice::from_raw_parts_mut(own, m) };
                match &input.pattern {
                    Pattern::Full if plan.places.input_halves[*k] => {
                        // SAFETY: the place holds the input's `n` 16-bit elements.
                        let h = unsafe {
                            std::slice::from_raw_parts((src as *const u16).add(start), m)
                        };
                        lanes::widen_halves(h, out);
                    }
                    Pattern::Full => out
                        .copy_from_slice(unsafe { std::slice::from_raw_parts(src.add(start), m) }),
                    Pattern::Scalar => unreachable!("scalar loads are uniform"),
                    Pattern::Broadcast { into, .. } => {
                        let src = unsafe { std::slice::from_raw_parts(src, input.view.len()) };
                        let run = plan.same[*k];
                        if plan.splat_ok[i] && start % run + m <= run {
                            // One value over the block: binary ops take it as it is.
                            let mut one = [0u32];
                            gather(src, &plan.strides[*k], into, start, &mut one);
                            splat[i] = Some(one[0]);
                            // Its lane 0 too, for an op of ones computed once.
                            out[0] = one[0];
                            at[i] = own;
                            continue;
                        }
                        gather(src, &plan.strides[*k], into, start, out);
                    }
                }
                at[i] = own;
            }
            _ if plan.splat_ok[i] && all_splat(instr, splat) => {
                // One value over the block: computed once, in lane 0.
                // SAFETY: as below; each argument's lane 0 holds its value.
                unsafe { compute(r, instr, at, splat, plan.halves_widen, own, 1) };
                // SAFETY: just written.
                splat[i] = Some(unsafe { *own });
                at[i] = own;
            }
            _ if plan.halves_direct[i].is_some() => {
                let (Some(k), Some(kern)) = (plan.halves_direct[i], &plan.kernels[i]) else {
                    unreachable!("a kernel's halves")
                };
                // SAFETY: the output holds its `n` 16-bit elements at its place, apart
                // from every input; this block writes its own.
                unsafe {
                    let dst = (plan.places.outputs[k] as *mut u16).add(start);
                    patterns::run_halves(kern, at, splat, dst, m);
                }
                // Read by nothing after (the output was its only use).
                at[i] = own;
            }
            _ => {
                let out = match plan.direct[i] {
                    // SAFETY: the output has `n` elements at its place; this block
                    // writes its own, which no input of the region overlaps.
                    Some(k) => unsafe { plan.places.outputs[k].add(start) },
                    None => own,
                };
                // SAFETY: the slot assignment gives an instruction's register a slot
                // none of its arguments holds; a direct output overlaps no input.
                match &plan.kernels[i] {
                    Some(k) => unsafe { patterns::run(k, at, splat, plan.halves_widen, out, m) },
                    None => unsafe { compute(r, instr, at, splat, plan.halves_widen, out, m) },
                }
                at[i] = out;
            }
        }
    }
    for (k, o) in r.outputs.iter().enumerate() {
        if o.view.len() != r.n
            || plan.direct[o.reg] == Some(k)
            || plan.halves_direct[o.reg] == Some(k)
        {
            continue;
        }
        if plan.splat_ok[o.reg] && splat[o.reg].is_some() {
            // SAFETY: as for the stores below.
            unsafe { store_one(plan, r, k, o.reg, at[o.reg], start, m) };
            continue;
        }
        let src = unsafe { std::slice::from_raw_parts(at[o.reg], m) };
        if plan.places.output_halves[k] {
            // SAFETY: the place holds the output's `n` 16-bit elements; this block
            // writes its own.
            let dst = unsafe {
                std::slice::from_raw_parts_mut((plan.places.outputs[k] as *mut u16).add(start), m)
            };
            store_halves(r, o.reg, src, dst);
            continue;
        }
        // SAFETY: the output has `n` elements at its place; this block writes its own.
        let dst = unsafe { std::slice::from_raw_parts_mut(plan.places.outputs[k].add(start), m) };
        store(r, o.reg, src, dst);
    }
}
