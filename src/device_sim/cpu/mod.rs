//! Pipeline step device_sim, on the CPU: the GPU executor's twin, a schedule on host memory.
//!
//! The CPU executor: every allocation is a host vector; the oracle for tests. It runs a
//! schedule as [`fuse`](crate::device_sim::fuse) leaves it: elementwise chains as fused
//! regions ([`region`], over the typed block loops of [`lanes`] and [`vmath`]), the
//! other compute ops in [`compute`], copies, fills and accumulates on whole views,
//! large ones spread over the cores.

mod ahead;
pub mod amx;
mod blocked;
mod chain;
pub mod compute;
mod dead_fills;
pub mod device_lanes;
mod extrema;
mod float_mode;
mod halves;
pub mod lanes;
pub mod layout;
mod operand;
mod patterns;
mod prefault;
mod region;
mod rows;
mod spare;
mod spread;
mod tile_swap;
mod twins;
mod untouched;
pub mod vmath;
pub mod words;

use super::fuse::{
    fuse_apart, fuse_reading, fuse_with, unread_in_region, Between, Fused, Joins, Keep, Region,
    Step,
};
use super::lend::{Coverage, Lent};
use super::{check_inputs, BlockedStretch, Executor, Prepared};
use crate::array::{DType, HostArray};
use crate::error::{Error, Result};
use crate::ir::{self, Compute, ComputeKind, DataOp, Program, ReduceOp, Schedule, View};
use std::borrow::Cow;
use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};
use words::Words;

/// What the CPU executor works out once per schedule: what the schedule does to the
/// program's memory (which memory a caller may lend, which must start zeroed), the
/// schedule as it runs here, fused, its VMEM buffers that may share a lent operand's
/// memory, and the buffers of its last run, kept for the next.
#[derive(Clone, Debug)]
pub struct CpuPlan {
    /// The schedule's coverage of the program's memory.
    pub coverage: Coverage,
    fused: Fused,
    twins: Vec<twins::Twin>,
    /// The 16-bit operands that may be lent as halves ([`halves::in_place`]).
    halves: Vec<(usize, ir::AllocId)>,
    /// The run's own 16-bit buffers held at two bytes an element ([`halves::own`]).
    own_halves: Vec<(usize, ir::AllocId)>,
    spare: spare::Spare,
}

impl CpuPlan {
    /// The plan of `schedule` on `program`.
    pub fn of(program: &Program, schedule: &Schedule) -> Self {
        let mut lap = crate::device_sim::Laps::new();
        let memory = schedule.memory(program);
        // A whole input copied into VMEM that the region it would join does not read
        // stays a step of its own, so that it may be a twin (skipped, the two sharing
        // memory) once fused, not one output of a region of other copies (ring
        // attention's prologue copies q, k and v in). (A copy out to an output is left
        // to the fusion, which forwards a chain of copies into one write of it.)
        let unfused = Fused::unfused(schedule.ops.len(), &[]);
        let copies: Vec<usize> = twins::twins(program, &memory, &unfused, &schedule.ops)
            .iter()
            .filter(|t| t.input)
            .map(|t| t.step)
            .collect();
        let apart = unread_in_region(program, schedule, &copies, CPU_JOINS);
        lap.note("memory and copies apart");
        // The coverage reads the schedule alone: worked out beside the fusion.
        let (fused, coverage) = rayon::join(
            || {
                let fused = fuse_apart(program, schedule, &[], Keep::Outputs, CPU_JOINS, &apart);
                dead_fills::trim(fused, &schedule.ops)
            },
            || Coverage::of(program, schedule),
        );
        lap.note("fuse and coverage");
        let ops = fused.ops.as_deref().unwrap_or(&schedule.ops);
        let twins = twins::twins(program, &memory, &fused, ops);
        lap.note("twins");
        let (halves, own_halves) = rayon::join(
            || halves::in_place(program, &memory, &fused, ops, &twins),
            || halves::own(program, &memory, &fused, ops, &twins),
        );
        lap.note("halves");
        lap.report(&format!(
            "CpuPlan of `{}` ({} data ops)",
            program.name,
            schedule.ops.len()
        ));
        CpuPlan {
            coverage,
            fused,
            twins,
            halves,
            own_halves,
            spare: spare::Spare::default(),
        }
    }

    /// The regions of its fused steps that run together a chunk of rows at a time
    /// ([`chain`]): each chain's first step and its number of regions.
    pub fn chains(&self) -> Vec<(usize, usize)> {
        let steps = &self.fused.steps;
        let mut out = Vec::new();
        let mut k = 0;
        while k < steps.len() {
            let (len, _) = chain::chain(steps, k, |_| false);
            if len > 1 {
                out.push((k, len));
            }
            k += len;
        }
        out
    }

    /// How many chains of instructions of its regions a kernel computes in one loop
    /// (JAX's tanh form of gelu, say), not an instruction at a time.
    pub fn kernels(&self) -> usize {
        let regions = self.fused.steps.iter().filter_map(|s| match s {
            Step::Region(r) => Some(r),
            Step::Op(_) => None,
        });
        regions.map(|r| region::kernels(r)).sum()
    }

    /// How many VMEM buffers may share a lent operand's memory (over every device): a
    /// whole operand copied into VMEM that neither is written, or a VMEM buffer copied
    /// whole into an output that nothing else writes or reads.
    pub fn shared_operands(&self) -> usize {
        self.twins.len()
    }

    /// True when VMEM buffer `vmem` of `device` may share an operand's memory (one of
    /// [`CpuPlan::shared_operands`]).
    pub fn shares_operand(&self, device: usize, vmem: ir::AllocId) -> bool {
        self.twins
            .iter()
            .any(|t| (t.device, t.vmem) == (device, vmem))
    }

    /// True when 16-bit input or output `alloc` of `device` may be lent as its two
    /// bytes an element ([`Lent::InputHalves`], [`Lent::OutputHalves`]): only fused
    /// regions read it, loading it element for element, or write it, whole.
    pub fn halves(&self, device: usize, alloc: ir::AllocId) -> bool {
        self.halves.contains(&(device, alloc))
    }

    /// True when a run prepared with this plan ([`CpuExecutor::prepare_lent`]) holds
    /// 16-bit allocation `alloc` of `device`, its own (neither an input nor an output),
    /// at two bytes an element: only fused regions' whole loads and stores, 16-bit
    /// transposes and dots touch it.
    pub fn own_halves(&self, device: usize, alloc: ir::AllocId) -> bool {
        self.own_halves.contains(&(device, alloc))
    }

    /// How many stretches of its steps a run of `schedule` runs a block of elements at
    /// a time ([`blocked`]; memory lent as 16-bit halves may leave some unblocked).
    pub fn blocked_stretches(&self, schedule: &Schedule) -> usize {
        let ops = self.fused.ops.as_deref().unwrap_or(&schedule.ops);
        blocked::stretches(&self.fused.steps, ops, |_| false).len()
    }

    /// Bytes of buffers kept from the last run for the next.
    pub fn kept_bytes(&self) -> u64 {
        self.spare.bytes()
    }

    /// The schedule as it runs here.
    pub fn fused(&self) -> &Fused {
        &self.fused
    }

    /// Words the run's fills write (every device): fewer than the schedule's where
    /// copies overwrite part of a fill before anything reads it.
    pub fn fill_words(&self, schedule: &Schedule) -> u64 {
        let ops = self.fused.ops.as_deref().unwrap_or(&schedule.ops);
        self.fused
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Op(i) => match &ops[*i] {
                    DataOp::Fill { dst, .. } => Some(dst.len() as u64),
                    _ => None,
                },
                Step::Region(_) => None,
            })
            .sum()
    }
}

/// What joins the CPU executor's regions: sums too (a ring's copy and the sum that
/// reads it touch each element once), and constants written over dead values' memory.
const CPU_JOINS: Joins = Joins {
    sums: true,
    overwrites: true,
    forward: true,
    reduces: true,
};

/// The environment variable that, set (to anything but `0`), makes the CPU executor
/// write every view of its blocked stretches to memory, dead after the stretch or not
/// ([`CpuExecutor::materialized`]): for looking at a run's scratch memory in a debugger.
pub const MATERIALIZE_ENV: &str = "TPUSIM_MATERIALIZE";

/// Runs schedules in host memory.
#[derive(Debug)]
pub struct CpuExecutor {
    fused: bool,
    /// Every view of a blocked stretch written to memory ([`MATERIALIZE_ENV`]).
    materialize: bool,
    /// Lanes of devices side by side ([`CpuExecutor::device_lanes`]).
    lanes: Option<bool>,
}

impl Default for CpuExecutor {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuExecutor {
    /// A new CPU executor; materialized ([`CpuExecutor::materialized`]) where
    /// [`MATERIALIZE_ENV`] is set.
    pub fn new() -> Self {
        let env = std::env::var_os(MATERIALIZE_ENV);
        CpuExecutor {
            fused: true,
            materialize: env.is_some_and(|v| v != "0"),
            lanes: None,
        }
    }

    /// This executor, but with every view of its blocked stretches written to its
    /// memory when `on`: also those whose values are dead outside the stretch, which a
    /// run otherwise keeps in the cores' own blocks ([`blocked::dead_inside`]). The
    /// results are the same bits either way; only the scratch memory differs.
    pub fn materialized(self, on: bool) -> Self {
        CpuExecutor {
            materialize: on,
            ..self
        }
    }

    /// This executor, but running devices' steps side by side on the cores
    /// ([`device_lanes`]) as `on` says: `Some(true)` wherever the devices make two lanes
    /// or more, however small the run; `Some(false)` never (one step after another, in
    /// the schedule's order); `None` (the default) where the run is worth a second core,
    /// unless [`device_lanes::DEVICE_LANES_ENV`] is `0`. The results are the same bits
    /// either way.
    pub fn device_lanes(self, on: Option<bool>) -> Self {
        CpuExecutor { lanes: on, ..self }
    }

    /// A CPU executor that runs every data op as the schedule lists it, one at a
    /// time, nothing fused or dropped: what the fused runs are held to in the tests,
    /// and the "before" of fusion's benchmarks.
    pub fn unfused() -> Self {
        CpuExecutor {
            fused: false,
            materialize: true,
            lanes: Some(false),
        }
    }

    /// Prepares `schedule` with the allocations of `lent` in the caller's memory: an
    /// input is read where it is (copied where an op writes it, so the caller's data
    /// stays as it was), an output is the run's memory for it (zeroed first only where
    /// `plan`'s coverage says the run needs it). The others are the run's own: the
    /// buffers of `plan`'s last run where it kept them, zeroed again only where the run
    /// reads them before writing, else fresh (zeroed); an input not lent is written with
    /// [`Prepared::input_words`] or [`Prepared::upload`]. A VMEM buffer copied whole
    /// from a lent input, or whole into a lent output ([`CpuPlan::shared_operands`]),
    /// is that operand's memory, and the copy is skipped. `plan` is [`CpuPlan::of`]
    /// this schedule; the run gives its buffers back to it when dropped.
    pub fn prepare_lent<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
        plan: &'a CpuPlan,
        lent: Vec<Lent<'a>>,
    ) -> Result<Box<dyn Prepared + 'a>> {
        let coverage = &plan.coverage;
        let table = schedule.memory(program);
        // A buffer kept from the last run, and whether it is fresh (zero).
        let own = |i: usize, len: usize, what: &str| match plan.spare.take(i, len) {
            Some(b) => Ok::<_, Error>((b, false)),
            None => Ok((own_words(len, what)?, true)),
        };
        let mut bufs: Vec<Option<Buf<'a>>> = (0..table.len()).map(|_| None).collect();
        for l in lent {
            let (d, a) = l.place();
            let halves_refused = matches!(l, Lent::InputHalves { .. } | Lent::OutputHalves { .. })
                && !plan.halves(d, a);
            let why = lent_mismatch(program, &l).or_else(|| {
                halves_refused.then_some("16-bit memory that not only fused regions touch")
            });
            let i = table.index_of(d, a);
            if let Some(why) = why.or_else(|| bufs[i].is_some().then_some("lent twice")) {
                return Err(Error::bad_input(format!(
                    "`{}`: memory lent for allocation {a} of device {d}: {why}",
                    program.name
                )));
            }
            bufs[i] = Some(match l {
                Lent::Input { words, .. } if coverage.input_written(d, a) => {
                    let (mut b, _) = own(i, words.len(), &program.layout.allocs[a].name)?;
                    b.copy_from_slice(words);
                    Buf::Own(b)
                }
                Lent::Input { words, .. } => Buf::Read(words),
                Lent::Output { words, .. } => {
                    if coverage.needs_zero(d, a) {
                        fill(words, 0);
                    }
                    Buf::Lent(words)
                }
                Lent::InputHalves { halves, .. } => Buf::HalvesIn(halves),
                Lent::OutputHalves { halves, .. } => {
                    if coverage.needs_zero(d, a) {
                        halves.fill(0);
                    }
                    Buf::HalvesOut(halves)
                }
            });
        }
        let (mut skip, mut moved) = (Vec::new(), Vec::new());
        for t in &plan.twins {
            let (o, v) = (
                table.index_of(t.device, t.operand),
                table.index_of(t.device, t.vmem),
            );
            match (t.input, bufs[o].take()) {
                (true, Some(Buf::Read(w))) => {
                    bufs[o] = Some(Buf::Read(w));
                    bufs[v] = Some(Buf::Read(w));
                }
                // As stored: the twin is only loaded ([`halves::in_place`]).
                (true, Some(Buf::HalvesIn(h))) => {
                    bufs[o] = Some(Buf::HalvesIn(h));
                    bufs[v] = Some(Buf::HalvesIn(h));
                }
                // The output's memory is the VMEM buffer's: the output itself is
                // touched by the skipped copy alone.
                (false, Some(Buf::Lent(w))) => {
                    if coverage.needs_zero(t.device, t.vmem) {
                        fill(w, 0);
                    }
                    bufs[v] = Some(Buf::Lent(w));
                    bufs[o] = Some(Buf::Own(Words::default()));
                    moved.push((o, v));
                }
                // As stored: the twin is only regions' ([`halves::in_place`]).
                (false, Some(Buf::HalvesOut(h))) => {
                    if coverage.needs_zero(t.device, t.vmem) {
                        h.fill(0);
                    }
                    bufs[v] = Some(Buf::HalvesOut(h));
                    bufs[o] = Some(Buf::Own(Words::default()));
                    moved.push((o, v));
                }
                // The run's own operand (not lent) lives in its twin's buffer: inputs
                // are written there (`input_words`), outputs read from there.
                (_, None) if t.alone => {
                    bufs[o] = Some(Buf::Own(Words::default()));
                    moved.push((o, v));
                }
                (_, b) => {
                    bufs[o] = b;
                    continue;
                }
            }
            skip.push(t.step);
        }
        skip.sort_unstable();
        let mut fresh = Vec::new();
        let bufs: Vec<Buf<'a>> = bufs
            .into_iter()
            .enumerate()
            .map(|(i, b)| match b {
                Some(b) => Ok(b),
                None => {
                    let (d, a) = table.place(i);
                    let alloc = &table.allocs[a];
                    let n = alloc.numel();
                    let halves = plan.own_halves(d, a);
                    // Two halves a word.
                    let words = if halves { n.div_ceil(2) } else { n };
                    let (mut b, new) = own(i, words, &alloc.name)?;
                    // Fresh buffers are zero already (untouched pages, when large).
                    if !new && coverage.needs_zero(d, a) {
                        fill(&mut b, 0);
                    }
                    if new {
                        fresh.push(i);
                    }
                    Ok(match halves {
                        true => Buf::OwnHalves(b),
                        false => Buf::Own(b),
                    })
                }
            })
            .collect::<Result<_>>()?;
        let mut run = CpuRun {
            program,
            schedule,
            table,
            bufs,
            work: Vec::new(),
            fused: Cow::Borrowed(&plan.fused),
            spare: Some(&plan.spare),
            reading: None,
            skip,
            moved,
            stretches: Vec::new(),
            lanes: None,
            fresh,
        };
        run.block(self.materialize, self.lanes);
        Ok(Box::new(run))
    }
}

/// Prints device 0's buffers of a run that has ended, and every device's own bytes
/// (resident, of all), to stderr (`TPUSIM_DEBUG_MEMORY` set): where a call's resident
/// memory goes.
fn report_memory(name: &str, table: &ir::Memory, bufs: &[Buf<'_>]) {
    let (mut own, mut resident) = (0usize, 0usize);
    for (i, b) in bufs.iter().enumerate() {
        let (d, a) = table.place(i);
        let (kind, touched) = match b {
            Buf::Own(w) => ("own", w.resident_bytes()),
            Buf::Read(w) => ("read in place", w.len() * 4),
            Buf::Lent(w) => ("lent", w.len() * 4),
            Buf::HalvesIn(h) => ("lent at 16 bits", h.len() * 2),
            Buf::HalvesOut(h) => ("lent at 16 bits", h.len() * 2),
            Buf::OwnHalves(w) => ("own at 16 bits", w.resident_bytes()),
        };
        if let Buf::Own(w) | Buf::OwnHalves(w) = b {
            own += w.len() * 4;
            resident += touched;
        }
        if d == 0 {
            let alloc = &table.allocs[a];
            eprintln!(
                "tpusim memory `{name}` device 0 alloc {a} `{}` {:?} {:?} {:?}: {} words, {kind}, {} KiB resident",
                alloc.name,
                alloc.space,
                alloc.dtype,
                alloc.shape,
                b.len(),
                touched >> 10
            );
        }
    }
    eprintln!(
        "tpusim memory `{name}`: own buffers {resident} bytes resident of {own}, every device"
    );
}

/// Why `l` cannot be the memory of its allocation: a device or allocation the program
/// lacks, an input lent as an output or the other way, the wrong size or element width.
fn lent_mismatch(program: &Program, l: &Lent) -> Option<&'static str> {
    let (d, a) = l.place();
    let alloc = program.layout.allocs.get(a).filter(|_| d < program.devices);
    let Some(alloc) = alloc else {
        return Some("no such device or allocation");
    };
    let (role, size) = match l {
        Lent::Input { .. } => (&program.inputs, 4),
        Lent::Output { .. } => (&program.outputs, 4),
        Lent::InputHalves { .. } => (&program.inputs, 2),
        Lent::OutputHalves { .. } => (&program.outputs, 2),
    };
    if !role.contains(&a) {
        return Some("not an input lent as one, or an output lent as one");
    }
    if alloc.dtype.size() != size {
        return Some("elements of another width than those lent");
    }
    (alloc.numel() != l.len()).then_some("not its number of elements")
}

/// `len` zeroed words of the run's own for allocation `what`; a limit error when the
/// host cannot give them.
fn own_words(len: usize, what: &str) -> Result<Words> {
    Words::zeroed(len).ok_or_else(|| Error::Limit {
        what: format!("host memory for `{what}`"),
        requested: len as u64 * 4,
        limit: 0,
    })
}

/// The words of one allocation: the run's own, or the caller's ([`Lent`]).
enum Buf<'a> {
    Own(Words),
    /// An input read in place: no op writes it ([`Coverage::input_written`]).
    Read(&'a [u32]),
    Lent(&'a mut [u32]),
    /// A 16-bit input lent as stored, that only regions load ([`halves`]).
    HalvesIn(&'a [u16]),
    /// A 16-bit output lent as stored, that only regions store ([`halves`]).
    HalvesOut(&'a mut [u16]),
    /// A 16-bit buffer of the run's own held as stored ([`halves::own`]): its
    /// elements, two a word.
    OwnHalves(Words),
}

impl Buf<'_> {
    /// The 16-bit memory lent as stored: its first element, and whether it is an output.
    fn halves(&mut self) -> Option<(*mut u16, bool)> {
        match self {
            Buf::HalvesIn(h) => Some((h.as_ptr() as *mut u16, false)),
            Buf::HalvesOut(h) => Some((h.as_mut_ptr(), true)),
            Buf::OwnHalves(w) => Some((w.as_mut_ptr() as *mut u16, true)),
            _ => None,
        }
    }
}

impl Deref for Buf<'_> {
    type Target = [u32];
    /// The words; none for 16-bit memory lent as stored, which only regions touch (so
    /// that a use the plan did not foresee is a bounds panic, not a wrong read).
    fn deref(&self) -> &[u32] {
        match self {
            Buf::Own(v) => v,
            Buf::Read(w) => w,
            Buf::Lent(w) => w,
            Buf::HalvesIn(_) | Buf::HalvesOut(_) | Buf::OwnHalves(..) => &[],
        }
    }
}

impl DerefMut for Buf<'_> {
    fn deref_mut(&mut self) -> &mut [u32] {
        match self {
            Buf::Own(v) => v,
            Buf::Lent(w) => w,
            Buf::HalvesIn(_) | Buf::HalvesOut(_) | Buf::OwnHalves(..) => &mut [],
            Buf::Read(_) => unreachable!("an input lent for reading is never written (Coverage)"),
        }
    }
}

/// Where one memory slot's elements lie while steps run: raw places, so that threads
/// running the steps of different devices side by side ([`device_lanes`]) each make
/// slices of the views they touch only, never of a whole buffer another may be using.
#[derive(Clone, Copy, Debug)]
struct Place {
    /// The first word (of memory held as words).
    at: *mut u32,
    /// Words; none for 16-bit memory held as stored, which only regions touch (so that a
    /// use the plan did not foresee is a bounds panic, not a wrong read).
    len: usize,
    /// 16-bit memory held as stored: its first element, and whether it is written.
    halves: Option<(*mut u16, bool)>,
    /// An input lent for reading: never written ([`Coverage::input_written`]).
    read_only: bool,
}

// SAFETY: a place is an address into a run's buffers, which outlive every thread that
// runs its steps; threads running at once touch no element one of them writes
// ([`device_lanes`] orders any two steps that do).
unsafe impl Send for Place {}
unsafe impl Sync for Place {}

/// The places of `bufs`' elements, in order.
fn places_of(bufs: &mut [Buf<'_>]) -> Vec<Place> {
    bufs.iter_mut()
        .map(|b| {
            let halves = b.halves();
            let read_only = matches!(b, Buf::Read(_));
            let (at, len) = match b {
                Buf::Own(w) => (w.as_mut_ptr(), w.len()),
                Buf::Lent(w) => (w.as_mut_ptr(), w.len()),
                Buf::Read(w) => (w.as_ptr() as *mut u32, w.len()),
                Buf::HalvesIn(_) | Buf::HalvesOut(_) | Buf::OwnHalves(_) => {
                    (std::ptr::NonNull::dangling().as_ptr(), 0)
                }
            };
            Place {
                at,
                len,
                halves,
                read_only,
            }
        })
        .collect()
}

/// What a thread running steps works in, kept from one run to the next.
#[derive(Default)]
struct Scratch {
    /// What a fused region's run works in.
    region: region::Scratch,
    /// What each region of a chain ([`chain`]) works in.
    chained: Vec<region::Scratch>,
}

/// Host memory as steps see it: one buffer per (device, allocation), in the order of
/// [`ir::Memory::index`], at its place, and the running thread's scratch.
struct Memory<'m> {
    table: &'m ir::Memory,
    places: &'m [Place],
    work: &'m mut Scratch,
}

/// Nanoseconds a word of a copy, fill or accumulate costs one core, for
/// [`spread::worth`] (from about 1 Mi words, 4 MiB, they are spread over the cores).
const COPY_NS: f64 = 0.2;

impl Memory<'_> {
    fn index(&self, v: &View) -> usize {
        self.table.index(v)
    }

    /// The place of `v`'s first word, checked to lie with the view within its buffer.
    fn at(&self, v: &View) -> *mut u32 {
        let p = &self.places[self.index(v)];
        assert!(
            v.offset() + v.len() <= p.len,
            "a view within its allocation"
        );
        // SAFETY: the offset is within the buffer, as asserted.
        unsafe { p.at.add(v.offset()) }
    }

    fn words(&self, v: &View) -> &[u32] {
        // SAFETY: the view lies within its live buffer (`at`); a step's views are
        // written by no thread running beside it ([`device_lanes`]).
        unsafe { std::slice::from_raw_parts(self.at(v), v.len()) }
    }

    fn words_mut(&mut self, v: &View) -> &mut [u32] {
        assert!(
            !self.places[self.index(v)].read_only,
            "an input lent for reading is never written (Coverage)"
        );
        // SAFETY: as for `words`; touched by no thread running beside it.
        unsafe { std::slice::from_raw_parts_mut(self.at(v), v.len()) }
    }

    /// The address of `v`'s first element (checked to lie within its buffer).
    fn place(&mut self, v: &View) -> *mut u32 {
        if self.places[self.index(v)].halves.is_some() {
            unreachable!("halves are regions' alone")
        }
        // Never written where read-only: no op writes an input lent for reading.
        self.at(v)
    }

    /// Runs stretch `s` of `steps` (of `ops`) a block at a time, but the steps `skip`
    /// lists (indices in `steps`), the views `kept` lists in the cores' own blocks, never
    /// written to memory ([`blocked::dead_inside`]), those `staged` lists there too,
    /// streamed to memory at each block's end ([`blocked::staged`]); stops between blocks
    /// when asked to ([`blocked::run`]).
    fn blocked(
        &mut self,
        s: &blocked::Stretch,
        steps: &[Step],
        ops: &[DataOp],
        skip: &[usize],
        [kept, staged]: [&[View]; 2],
    ) -> Result<()> {
        use blocked::{At, Placed};
        let streamed: Vec<(usize, *mut u32)> = staged
            .iter()
            .enumerate()
            .map(|(j, v)| (kept.len() + j, self.place(v)))
            .collect();
        let mut at = |v: &View| match kept.iter().chain(staged).position(|k| k == v) {
            Some(k) => At::Kept(k),
            None => At::Memory(self.place(v)),
        };
        let (mut placed, mut regions) = (Vec::with_capacity(s.steps.len()), Vec::new());
        for k in s.steps.clone() {
            if skip.binary_search(&k).is_ok() {
                continue;
            }
            let i = match &steps[k] {
                Step::Op(i) => i,
                Step::Region(r) => {
                    if let Some((dst, src, op, dtype)) = blocked::accumulate_of(r) {
                        placed.push(Placed::Accumulate {
                            dst: at(&dst),
                            src: at(&src),
                            op,
                            dtype,
                        });
                        continue;
                    }
                    let inputs = r.inputs.iter().map(|i| at(&i.view)).collect();
                    let outputs = r.outputs.iter().map(|o| at(&o.view)).collect();
                    regions.push(blocked::PlacedRegion::new(r, s, inputs, outputs));
                    placed.push(Placed::Region(regions.len() - 1));
                    continue;
                }
            };
            placed.push(match &ops[*i] {
                DataOp::Copy { src, dst } => Placed::Copy {
                    dst: at(dst),
                    src: at(src),
                },
                DataOp::Fill { dst, bits } => Placed::Fill {
                    dst: at(dst),
                    bits: *bits,
                },
                DataOp::Accumulate {
                    dst,
                    src,
                    op,
                    dtype,
                } => Placed::Accumulate {
                    dst: at(dst),
                    src: at(src),
                    op: *op,
                    dtype: *dtype,
                },
                DataOp::Compute(_) => unreachable!("a stretch holds no compute op"),
            });
        }
        // SAFETY: each place is its view's first element, within its live buffer
        // (`place`), and `blocked::stretches` checked the views' lengths and overlaps;
        // each kept view is written before it is read (`blocked::dead_inside`).
        let placement = blocked::Placement {
            ops: placed,
            regions,
            kept: kept.len() + staged.len(),
            staged: streamed,
        };
        unsafe { blocked::run(&placement, s.n, s.block) }
    }

    /// Sets `scratch`'s places to those of `r`'s views.
    fn places(&mut self, r: &Region, scratch: &mut region::Scratch) {
        let places = scratch.places();
        for i in &r.inputs {
            let k = self.index(&i.view);
            let at = self.places[k].halves;
            places.input_halves.push(at.is_some());
            places.inputs.push(match at {
                // SAFETY: the view lies within the lent memory (its allocation's).
                Some((h, _)) => unsafe { h.add(i.view.offset()) as *const u32 },
                None => self.place(&i.view) as *const u32,
            });
        }
        for o in &r.outputs {
            let k = self.index(&o.view);
            let at = self.places[k].halves;
            places.output_halves.push(at.is_some());
            places.outputs.push(match at {
                // SAFETY: as for the inputs.
                Some((h, _)) => unsafe { h.add(o.view.offset()) as *mut u32 },
                None => self.place(&o.view),
            });
        }
        for q in &r.reduces {
            places.reduces.push(self.place(&q.dst));
        }
        debug_assert!(r
            .outputs
            .iter()
            .all(|o| !self.places[self.index(&o.view)].read_only));
    }

    /// Runs fused region `r`.
    fn region(&mut self, r: &Region) {
        let mut scratch = std::mem::take(&mut self.work.region);
        self.places(r, &mut scratch);
        // SAFETY: each place is its view's first element in a live buffer, and the
        // fusion pass built `r` (outputs apart from inputs but in place).
        unsafe { region::run(r, &mut scratch) };
        self.work.region = scratch;
    }

    /// Runs fused regions `rs` together, a chunk of groups of `k` elements at a time
    /// ([`chain::chain`] lets them).
    fn chain(&mut self, rs: &[&Region], k: usize) {
        let mut scratches = std::mem::take(&mut self.work.chained);
        scratches.resize_with(rs.len().max(scratches.len()), Default::default);
        for (r, s) in rs.iter().zip(scratches.iter_mut()) {
            self.places(r, s);
        }
        // SAFETY: as for `region`, each region's; and `chain::chain` checked that each
        // chunk of each touches only its own elements of what another writes.
        unsafe { region::chain(rs, &mut scratches[..rs.len()], k) };
        self.work.chained = scratches;
    }

    /// Runs compute op `c`: its sources are read whole before its destination is
    /// written (they may share a buffer with it).
    fn compute(&mut self, c: &Compute) {
        if halves::transposed(c) {
            return self.transpose_halves(c);
        }
        if halves::dot(c) && c.srcs.iter().any(|s| self.halves_of(&s.view).is_some()) {
            return self.dot_halves(c);
        }
        let d = c.dst.view;
        // An update of a slice in place starts from the destination as it is.
        let in_place = matches!(c.kind, ComputeKind::UpdateSlice { .. }) && c.srcs[0].view == d;
        let apart = c
            .srcs
            .iter()
            .enumerate()
            .all(|(k, s)| (in_place && k == 0) || !s.view.overlaps(&d));
        if !apart {
            let out = {
                let srcs: Vec<&[u32]> = c.srcs.iter().map(|o| self.words(&o.view)).collect();
                compute::compute(c, &srcs)
            };
            self.words_mut(&d).copy_from_slice(&out);
            return;
        }
        let dst = self.place(&d);
        let srcs: Vec<&[u32]> = c
            .srcs
            .iter()
            .enumerate()
            .map(|(k, o)| {
                if in_place && k == 0 {
                    return &[][..];
                }
                let p = self.place(&o.view);
                // SAFETY: the view lies within its buffer (`place`), which outlives this
                // call, and does not overlap the destination (checked above).
                unsafe { std::slice::from_raw_parts(p as *const u32, o.view.len()) }
            })
            .collect();
        // SAFETY: as above; the destination is written only here.
        let out = unsafe { std::slice::from_raw_parts_mut(dst, d.len()) };
        compute::compute_into(c, &srcs, out);
    }

    /// The 16-bit elements of view `v` where its memory holds them as stored.
    fn halves_of(&mut self, v: &View) -> Option<&[u16]> {
        let (h, _) = self.places[self.index(v)].halves?;
        // SAFETY: the view lies within the memory held as halves (its allocation's).
        Some(unsafe { std::slice::from_raw_parts(h.add(v.offset()), v.len()) })
    }

    /// Runs [`halves::dot`] `c`, some operand held as halves: each read where it is.
    fn dot_halves(&mut self, c: &Compute) {
        let d = c.dst.view;
        // A source in words that shares the destination's memory is read from a copy.
        let copies: Vec<Option<Vec<u32>>> = c
            .srcs
            .iter()
            .map(|o| o.view.overlaps(&d).then(|| self.words(&o.view).to_vec()))
            .collect();
        let srcs: Vec<compute::Src<'_>> = c
            .srcs
            .iter()
            .zip(&copies)
            .map(|(o, copy)| {
                if let Some(w) = copy {
                    return compute::Src::Words(w);
                }
                if let Some(h) = self.halves_of(&o.view) {
                    // SAFETY: as in `halves_of`; the destination is another buffer (a
                    // dot never writes memory held as halves).
                    return compute::Src::Halves(unsafe {
                        std::slice::from_raw_parts(h.as_ptr(), h.len())
                    });
                }
                let p = self.place(&o.view);
                // SAFETY: the view lies within its buffer (`place`), apart from the
                // destination (else copied above).
                compute::Src::Words(unsafe {
                    std::slice::from_raw_parts(p as *const u32, o.view.len())
                })
            })
            .collect();
        let dst = self.place(&d);
        // SAFETY: as above; the destination is written only here.
        let out = unsafe { std::slice::from_raw_parts_mut(dst, d.len()) };
        compute::dot_into(c, srcs[0], srcs[1], out);
    }

    /// Runs [`halves::transposed`] op `c`, each operand where it is: 16-bit elements
    /// as stored where lent so, else one a word (moved, widened or narrowed on the way,
    /// never converted whole).
    fn transpose_halves(&mut self, c: &Compute) {
        let (s, d) = (&c.srcs[0], &c.dst);
        let ComputeKind::Transpose { perm } = &c.kind else {
            unreachable!("a transpose")
        };
        let (si, di) = (self.index(&s.view), self.index(&d.view));
        let src = match self.places[si].halves {
            // SAFETY: the view lies within the lent memory; nothing writes it here.
            Some((h, _)) => Err(unsafe {
                std::slice::from_raw_parts(h.add(s.view.offset()) as *const u16, s.view.len())
            }),
            None => {
                let p = self.place(&s.view);
                // SAFETY: the view lies within its buffer (`place`).
                Ok(unsafe { std::slice::from_raw_parts(p as *const u32, s.view.len()) })
            }
        };
        // SAFETY: as for the source; the destination is apart from it (`transposed`)
        // and written only here.
        let dst = match self.places[di].halves {
            Some((h, _)) => {
                Err(unsafe { std::slice::from_raw_parts_mut(h.add(d.view.offset()), d.view.len()) })
            }
            None => {
                Ok(unsafe { std::slice::from_raw_parts_mut(self.place(&d.view), d.view.len()) })
            }
        };
        let (from, done) = (
            &s.shape,
            match (src, dst) {
                (Ok(x), Ok(o)) => layout::transpose_swap_words(x, &s.shape, perm, o),
                (Err(x), Err(o)) => layout::transpose_swap_halves(x, &s.shape, perm, o),
                (Err(x), Ok(o)) => layout::transpose_swap(x, &s.shape, perm, o, u32::from),
                // A 16-bit element's word holds its bits in the low half.
                (Ok(x), Err(o)) => layout::transpose_swap(x, &s.shape, perm, o, |w| w as u16),
            },
        );
        debug_assert!(
            done,
            "{from:?} by {perm:?}: a swap of the last two dimensions"
        );
    }

    /// Mutable destination and shared source, which may be the same buffer.
    fn with_pair(&mut self, dst: &View, src: &View, f: impl FnOnce(&mut [u32], &[u32])) {
        if self.index(dst) == self.index(src) && dst.overlaps(src) {
            let tmp = self.words(src).to_vec();
            return f(self.words_mut(dst), &tmp);
        }
        let s = self.words(src) as *const [u32];
        // SAFETY: the two views do not overlap (other buffers, or apart in one), so the
        // source stays valid and unaliased while the destination is written.
        f(self.words_mut(dst), unsafe { &*s })
    }

    /// Runs a copy of 16-bit elements ([`halves::in_place`]), either side held as
    /// halves: moved as stored (a word holds an element's bits in its low half).
    fn copy_halves(&mut self, dst: &View, src: &View) {
        let n = src.len();
        let (si, di) = (self.index(src), self.index(dst));
        if let (Some((s, _)), Some((d, _))) = (self.places[si].halves, self.places[di].halves) {
            // SAFETY: both views lie within their memory; `copy` allows overlap.
            unsafe { std::ptr::copy(s.add(src.offset()), d.add(dst.offset()), n) };
            return;
        }
        // One side in words, the other in halves: two buffers.
        let from = match self.places[si].halves {
            // SAFETY: the view lies within the memory held as halves.
            Some((h, _)) => Err(unsafe { std::slice::from_raw_parts(h.add(src.offset()), n) }),
            // SAFETY: the view lies within its buffer (`place`).
            None => Ok(unsafe { std::slice::from_raw_parts(self.place(src) as *const u32, n) }),
        };
        match (from, self.places[di].halves) {
            (Ok(s), Some((h, _))) => {
                // SAFETY: as for the source; another buffer, written only here.
                let d = unsafe { std::slice::from_raw_parts_mut(h.add(dst.offset()), n) };
                over_cores(d, s, |d, s| lanes::narrow_halves(s, d));
            }
            (Err(s), None) => {
                // SAFETY: as above.
                let d = unsafe { std::slice::from_raw_parts_mut(self.place(dst), n) };
                over_cores(d, s, |d, s| lanes::widen_halves(s, d));
            }
            _ => unreachable!("one side held as halves"),
        }
    }

    /// Runs one data op of the schedule.
    fn op(&mut self, op: &DataOp) {
        match op {
            DataOp::Copy { src, dst } => {
                let (si, di) = (self.index(src), self.index(dst));
                match self.places[si].halves.is_some() || self.places[di].halves.is_some() {
                    true => self.copy_halves(dst, src),
                    false => self.with_pair(dst, src, copy),
                }
            }
            DataOp::Fill { dst, bits } => fill(self.words_mut(dst), *bits),
            DataOp::Accumulate {
                dst,
                src,
                op,
                dtype,
            } => self.with_pair(dst, src, |d, s| {
                over_cores(d, s, |d, s| accumulate_words(d, s, *op, *dtype))
            }),
            DataOp::Compute(c) => self.compute(c),
        }
    }

    /// Runs `steps` of `ops`' fused form in order, but those whose index (the first
    /// being `first`) `skip` lists.
    fn run(&mut self, steps: &[Step], ops: &[DataOp], first: usize, skip: &[usize]) {
        let skipped = |k: usize| !skip.is_empty() && skip.binary_search(&(first + k)).is_ok();
        let mut k = 0;
        while k < steps.len() {
            if skipped(k) {
                k += 1;
                continue;
            }
            match &steps[k] {
                Step::Op(i) => self.op(&ops[*i]),
                Step::Region(r) => match chain::chain(steps, k, skipped) {
                    (len, g) if len > 1 => {
                        let rs: Vec<&Region> = steps[k..k + len]
                            .iter()
                            .map(|s| match s {
                                Step::Region(r) => &**r,
                                Step::Op(_) => unreachable!("a chain of regions"),
                            })
                            .collect();
                        self.chain(&rs, g);
                        k += len;
                        continue;
                    }
                    _ => self.region(r),
                },
            }
            k += 1;
        }
    }
}

/// `dst = src`, large copies spread over the cores.
fn copy(dst: &mut [u32], src: &[u32]) {
    over_cores(dst, src, |d, s| d.copy_from_slice(s));
}

/// `dst = bits` everywhere; a zero fill leaves the pages no one has touched yet alone
/// ([`untouched`]): they read as zero, and writing them would fault each in.
fn fill(dst: &mut [u32], bits: u32) {
    let zero = match bits {
        0 => untouched::zero_pages(dst),
        _ => Vec::new(),
    };
    if zero.is_empty() {
        return fill_words(dst, bits);
    }
    let mut at = 0;
    for r in zero
        .into_iter()
        .chain(std::iter::once(dst.len()..dst.len()))
    {
        fill_words(&mut dst[at..r.start], bits);
        at = r.end;
    }
}

/// `dst = bits` everywhere, large fills spread over the cores as copies are (a fill of
/// fresh memory also takes the kernel's zeroing of its pages onto each core) and
/// streamed past the caches ([`stream_fill`]), which they would leave anyway.
fn fill_words(dst: &mut [u32], bits: u32) {
    let threads = rayon::current_num_threads();
    if !spread::worth(dst.len() as f64 * COPY_NS) {
        fill_part(dst, bits);
    } else {
        let per = dst.len().div_ceil(threads * 4);
        spread::spread_chunks(dst, per, threads - 1, &|_, d| stream_fill(d, bits));
    }
}

/// `dst = bits` with stores that bypass the caches where the target has them (x86-64's
/// non-temporal stores): no line is read for ownership first (`memset`'s string stores
/// read them here: about half the rate on this project's EPYC machines). Fenced before
/// it returns, so the thread that joins it sees the stores.
fn stream_fill(dst: &mut [u32], bits: u32) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_set1_epi32, _mm_sfence, _mm_stream_si128};
        let head = (dst.as_ptr() as usize).wrapping_neg() % 16 / 4;
        let (head, rest) = dst.split_at_mut(head.min(dst.len()));
        let body = rest.len() / 4 * 4;
        let (body, tail) = rest.split_at_mut(body);
        head.fill(bits);
        tail.fill(bits);
        // SAFETY: SSE2 is part of x86-64; `body` starts 16-byte aligned (after `head`)
        // and holds whole 16-byte groups, each stored once, within the slice.
        unsafe {
            let v = _mm_set1_epi32(bits as i32);
            for group in body.chunks_exact_mut(4) {
                _mm_stream_si128(group.as_mut_ptr() as *mut __m128i, v);
            }
            _mm_sfence();
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    fill_part(dst, bits);
}

/// `dst = bits`, through the caches (fills not worth spreading, and blocks
/// that stay in the caches): zero as `memset`.
fn fill_part(dst: &mut [u32], bits: u32) {
    match bits {
        0 => dst.fill(0),
        _ => dst.fill(bits),
    }
}

/// `f` on `dst` and `src` (as long), in parts spread over the cores from
/// about 1 Mi words ([`COPY_NS`]; memory bandwidth on one core is a fraction of the
/// machine's).
fn over_cores<D: Send, S: Sync>(dst: &mut [D], src: &[S], f: impl Fn(&mut [D], &[S]) + Sync) {
    if spread::worth(dst.len() as f64 * COPY_NS) {
        let threads = rayon::current_num_threads();
        let per = dst.len().div_ceil(threads * 4);
        spread::spread_chunks(dst, per, threads - 1, &|c, d| {
            f(d, &src[c * per..][..d.len()])
        });
    } else {
        f(dst, src);
    }
}

/// Applies one accumulate element-wise on 32-bit words.
pub fn accumulate_words(dst: &mut [u32], src: &[u32], op: ReduceOp, dtype: DType) {
    struct Acc<'a>(&'a mut [u32], &'a [u32], ReduceOp, DType);
    impl pulp::WithSimd for Acc<'_> {
        type Output = ();
        #[inline(always)]
        fn with_simd<S: pulp::Simd>(self, _: S) {
            accumulate_lanes(self.0, self.1, self.2, self.3);
        }
    }
    pulp::Arch::new().dispatch(Acc(dst, src, op, dtype));
}

#[inline(always)]
fn accumulate_lanes(dst: &mut [u32], src: &[u32], op: ReduceOp, dtype: DType) {
    macro_rules! each {
        ($f:expr) => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = $f(*d, *s);
            }
        };
    }
    match (dtype, op) {
        (DType::F32, ReduceOp::Sum) => {
            each!(|d: u32, s: u32| (f32::from_bits(d) + f32::from_bits(s)).to_bits())
        }
        // XLA's max and min propagate NaN: the first operand that is one.
        (DType::F32, ReduceOp::Max) => each!(|d: u32, s: u32| {
            let (a, b) = (f32::from_bits(d), f32::from_bits(s));
            let m = a.max(b).to_bits();
            if a.is_nan() {
                d
            } else if b.is_nan() {
                s
            } else {
                m
            }
        }),
        (DType::F32, ReduceOp::Min) => each!(|d: u32, s: u32| {
            let (a, b) = (f32::from_bits(d), f32::from_bits(s));
            let m = a.min(b).to_bits();
            if a.is_nan() {
                d
            } else if b.is_nan() {
                s
            } else {
                m
            }
        }),
        (DType::I32, ReduceOp::Sum) => {
            each!(|d: u32, s: u32| (d as i32).wrapping_add(s as i32) as u32)
        }
        (DType::I32, ReduceOp::Max) => each!(|d: u32, s: u32| (d as i32).max(s as i32) as u32),
        (DType::I32, ReduceOp::Min) => each!(|d: u32, s: u32| (d as i32).min(s as i32) as u32),
        (DType::F16, _) => accumulate_halves(dst, src, op, is_nan_f16, |a, b| {
            let (a, b) = (lanes::f16_value(a as u32), lanes::f16_value(b as u32));
            lanes::f16_bits(a + b) as u16
        }),
        (DType::BF16, _) => accumulate_halves(dst, src, op, is_nan_bf16, |a, b| {
            let (a, b) = (
                f32::from_bits((a as u32) << 16),
                f32::from_bits((b as u32) << 16),
            );
            (lanes::round_bf16(a + b).to_bits() >> 16) as u16
        }),
        // Accumulates are traced for the collectives' dtypes only.
        (DType::I8 | DType::U8 | DType::Bool, _) => {
            unreachable!("an accumulate in {dtype}: the kernel API refuses it")
        }
    }
}

/// A 16-bit float accumulate: `sum` adds in f32 and rounds to nearest even (correctly
/// rounded for both formats: f32 carries more than twice their significand plus two bits,
/// so rounding twice equals rounding once); max and min by [`order16`], a NaN (`is_nan`)
/// in either operand propagated as XLA's max and min do.
#[inline(always)]
fn accumulate_halves(
    dst: &mut [u32],
    src: &[u32],
    op: ReduceOp,
    is_nan: fn(u16) -> bool,
    sum: impl Fn(u16, u16) -> u16,
) {
    macro_rules! each {
        ($f:expr) => {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = $f(*d as u16, *s as u16) as u32;
            }
        };
    }
    match op {
        ReduceOp::Sum => each!(&sum),
        ReduceOp::Max => each!(|a, b| {
            let m = if order16(b) > order16(a) { b } else { a };
            if is_nan(a) {
                a
            } else if is_nan(b) {
                b
            } else {
                m
            }
        }),
        ReduceOp::Min => each!(|a, b| {
            let m = if order16(b) < order16(a) { b } else { a };
            if is_nan(a) {
                a
            } else if is_nan(b) {
                b
            } else {
                m
            }
        }),
    }
}

/// True when f16 `bits` is a NaN (exponent all ones, fraction not zero).
#[inline(always)]
pub fn is_nan_f16(bits: u16) -> bool {
    bits & 0x7fff > 0x7c00
}

/// True when bf16 `bits` is a NaN (exponent all ones, fraction not zero).
#[inline(always)]
pub fn is_nan_bf16(bits: u16) -> bool {
    bits & 0x7fff > 0x7f80
}

/// The order max and min use for 16-bit floats (the shaders use the same): the value's
/// order for numbers and infinities, -0 equal to +0 (the destination is kept on ties),
/// NaNs above +inf (or below -inf when negative) by their bits.
#[inline(always)]
pub fn order16(bits: u16) -> i32 {
    let magnitude = (bits & 0x7fff) as i32;
    if bits & 0x8000 != 0 {
        -magnitude
    } else {
        magnitude
    }
}

/// Data ops run between two looks at whether a watched caller asked to stop.
const INTERRUPT_EVERY_OPS: usize = 256;

/// A schedule prepared in host memory.
struct CpuRun<'a> {
    program: &'a Program,
    schedule: &'a Schedule,
    /// Its memory slots ([`ir::Memory::index`]) and their buffers.
    table: ir::Memory,
    bufs: Vec<Buf<'a>>,
    /// What each thread running its steps works in.
    work: Vec<Scratch>,
    /// The schedule as it runs here, in pieces ([`Executor::prepare_pieces`]; one
    /// piece: all of it).
    fused: Cow<'a, Fused>,
    /// Where its own buffers go when it ends.
    spare: Option<&'a spare::Spare>,
    /// The outputs read after the run ([`Executor::prepare_reading`]); `None`: all.
    reading: Option<Vec<usize>>,
    /// Steps not run (increasing): copies between memory shared ([`twins`]).
    skip: Vec<usize>,
    /// Operands (memory slots) held in another slot: `(operand, where)`.
    moved: Vec<(usize, usize)>,
    /// Stretches of its steps run a block at a time ([`blocked`]; none in a literal run),
    /// each with its views kept out of memory ([`blocked::dead_inside`]) and those it
    /// stages in the cores' blocks ([`blocked::staged`]).
    stretches: Vec<(blocked::Stretch, Vec<View>, Vec<View>)>,
    /// Its steps as lanes of devices run side by side ([`device_lanes`]); none: in
    /// order on the calling thread.
    lanes: Option<device_lanes::Lanes>,
    /// Its fresh buffers (memory slots), faulted in beside (or before) its first run
    /// where it writes them ([`prefault`]).
    fresh: Vec<usize>,
}

impl Drop for CpuRun<'_> {
    fn drop(&mut self) {
        if std::env::var_os("TPUSIM_DEBUG_MEMORY").is_some() {
            report_memory(&self.program.name, &self.table, &self.bufs);
        }
        let Some(spare) = self.spare else { return };
        for (i, b) in self.bufs.iter_mut().enumerate() {
            if let Buf::Own(w) | Buf::OwnHalves(w) = b {
                spare.give(i, std::mem::take(w));
            }
        }
    }
}

impl Executor for CpuExecutor {
    fn describe(&self) -> String {
        "cpu".into()
    }

    fn prepare<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
    ) -> Result<Box<dyn Prepared + 'a>> {
        own_memory(
            program,
            schedule,
            self.fused(program, schedule, &[], Keep::Outputs),
            self.fused.then_some((self.materialize, self.lanes)),
        )
    }

    fn prepare_literal<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
    ) -> Result<Box<dyn Prepared + 'a>> {
        own_memory(
            program,
            schedule,
            Fused::unfused(schedule.ops.len(), &[]),
            None,
        )
    }

    fn prepare_reading<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
        outputs: &[usize],
    ) -> Result<Box<dyn Prepared + 'a>> {
        if !self.fused {
            return self.prepare(program, schedule);
        }
        let fused = fuse_reading(program, schedule, outputs, CPU_JOINS);
        let mut run = own_run(program, schedule, fused, true)?;
        run.reading = Some(outputs.to_vec());
        run.block(self.materialize, self.lanes);
        Ok(Box::new(run))
    }

    fn blocked_stretches(&self, program: &Program, schedule: &Schedule) -> Vec<BlockedStretch> {
        if !self.fused {
            return Vec::new();
        }
        // As `prepare` plans it: fused, its own memory (no 16-bit halves, nothing lent;
        // the copies of operands that live in their twins' buffers skipped), blocked.
        let fused = self.fused(program, schedule, &[], Keep::Outputs);
        let table = schedule.memory(program);
        let (skip, moved) = shared_twins(program, schedule, &table, &fused);
        let ops = fused.ops.as_deref().unwrap_or(&schedule.ops);
        let stretches = blocked::stretches(&fused.steps, ops, |_| false);
        let live = |v: &View| {
            let i = table.index(v);
            operand(program, v) || moved.iter().any(|&(_, at)| at == i)
        };
        let described = stretches.iter().map(|s| {
            let kept = kept(s, &fused, ops, &skip, self.materialize, live);
            blocked::described(s, &fused.steps, ops, schedule.ops.len(), &skip, &kept)
        });
        described.collect()
    }

    fn side_by_side(&self, program: &Program, schedule: &Schedule) -> usize {
        if !self.fused {
            return 1;
        }
        // As `prepare` plans it (see `blocked_stretches`).
        let fused = self.fused(program, schedule, &[], Keep::Outputs);
        let table = schedule.memory(program);
        let (_, moved) = shared_twins(program, schedule, &table, &fused);
        let ops = fused.ops.as_deref().unwrap_or(&schedule.ops);
        let stretches: Vec<_> = blocked::stretches(&fused.steps, ops, |_| false)
            .into_iter()
            .map(|s| s.steps)
            .collect();
        let slot = |v: &View| {
            let i = table.index(v);
            moved.iter().find(|(o, _)| *o == i).map_or(i, |&(_, at)| at)
        };
        let n = rayon::current_num_threads().min(program.devices);
        let lanes = device_lanes::plan(
            &fused.steps,
            ops,
            &stretches,
            table.len(),
            slot,
            n,
            self.lanes,
        );
        lanes.map_or(1, |l| l.lanes.len())
    }

    fn skipped_ops(&self, program: &Program, schedule: &Schedule) -> Vec<usize> {
        if !self.fused {
            return Vec::new();
        }
        let fused = self.fused(program, schedule, &[], Keep::Outputs);
        let (skip, _) = shared_twins(program, schedule, &schedule.memory(program), &fused);
        // A twin's copy is one of the schedule's own ops (not a fill cut by the run).
        let op = |k: usize| match fused.steps[k] {
            Step::Op(i) if i < schedule.ops.len() => Some(i),
            _ => None,
        };
        skip.into_iter().filter_map(op).collect()
    }

    fn prepare_pieces<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
        cuts: &[usize],
    ) -> Result<Box<dyn Prepared + 'a>> {
        // Views are read and written between pieces, and after the last.
        own_memory(
            program,
            schedule,
            self.fused(program, schedule, cuts, Keep::All),
            None,
        )
    }

    fn prepare_pieces_between<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
        cuts: &[usize],
        between: Between<'_>,
    ) -> Result<Box<dyn Prepared + 'a>> {
        own_memory(
            program,
            schedule,
            self.fused(program, schedule, cuts, Keep::Between(between)),
            None,
        )
    }
}

impl CpuExecutor {
    /// `schedule` as this executor runs it.
    fn fused(
        &self,
        program: &Program,
        schedule: &Schedule,
        cuts: &[usize],
        keep: Keep<'_>,
    ) -> Fused {
        match self.fused {
            true if cuts.is_empty() && keep == Keep::Outputs => dead_fills::trim(
                fuse_with(program, schedule, cuts, keep, CPU_JOINS),
                &schedule.ops,
            ),
            true => fuse_with(program, schedule, cuts, keep, CPU_JOINS),
            false => Fused::unfused(schedule.ops.len(), cuts),
        }
    }
}

/// A run of `fused` in memory of its own, zeroed; `block`: `Some(materialize)`: its
/// stretches of copies, fills and accumulates run a block at a time ([`blocked`], every
/// view written to memory where `materialize`), `None`: each op whole.
fn own_memory<'a>(
    program: &'a Program,
    schedule: &'a Schedule,
    fused: Fused,
    block: Option<(bool, Option<bool>)>,
) -> Result<Box<dyn Prepared + 'a>> {
    let mut run = own_run(program, schedule, fused, block.is_some())?;
    if let Some((materialize, lanes)) = block {
        run.block(materialize, lanes);
    }
    Ok(Box::new(run))
}

/// True when view `v` is of an input or output of `program`: memory read after the run
/// (or before it, by the caller).
fn operand(program: &Program, v: &View) -> bool {
    program.inputs.contains(&v.alloc()) || program.outputs.contains(&v.alloc())
}

/// The views of stretch `s` of `fused` (over `ops`) that a run keeps out of memory
/// ([`blocked::dead_inside`], the steps `skip` lists not run, `live` true of memory read
/// outside the run's steps): none when `materialize`, or when memory is read between
/// the run's pieces.
fn kept(
    s: &blocked::Stretch,
    fused: &Fused,
    ops: &[DataOp],
    skip: &[usize],
    materialize: bool,
    live: impl Fn(&View) -> bool,
) -> Vec<View> {
    if materialize || fused.piece_ends.len() > 1 {
        return Vec::new();
    }
    blocked::dead_inside(s, &fused.steps, ops, skip, live)
}

/// What a run in its own memory shares with its operands ([`own_run`] with `share`):
/// each operand that only its whole copy from or to a VMEM buffer touches
/// ([`twins::Twin::alone`]) lives in that buffer. The copies' steps (sorted; the run
/// skips them) and the moved `(operand, buffer)` slots of `table`; none for a run in
/// pieces (read between them).
fn shared_twins(
    program: &Program,
    schedule: &Schedule,
    table: &ir::Memory,
    fused: &Fused,
) -> (Vec<usize>, Vec<(usize, usize)>) {
    let (mut skip, mut moved) = (Vec::new(), Vec::new());
    if fused.piece_ends.len() > 1 {
        return (skip, moved);
    }
    let ops = fused.ops.as_deref().unwrap_or(&schedule.ops);
    for t in twins::twins(program, table, fused, ops) {
        if t.alone {
            let at = |a| table.index_of(t.device, a);
            moved.push((at(t.operand), at(t.vmem)));
            skip.push(t.step);
        }
    }
    skip.sort_unstable();
    (skip, moved)
}

/// [`own_memory`]'s run; `share`: an operand that only its whole copy from or to a VMEM
/// buffer touches ([`twins::Twin::alone`]) lives in that buffer, and the copy is
/// skipped (as [`CpuExecutor::prepare_lent`] does for an operand not lent): for a run
/// read through its operands after it ends, never between pieces.
fn own_run<'a>(
    program: &'a Program,
    schedule: &'a Schedule,
    fused: Fused,
    share: bool,
) -> Result<CpuRun<'a>> {
    let table = schedule.memory(program);
    let n = table.len();
    let (skip, moved) = match share {
        true => shared_twins(program, schedule, &table, &fused),
        false => Default::default(),
    };
    let bufs = table
        .iter()
        .enumerate()
        .map(|(i, (_, a))| match moved.iter().any(|&(o, _)| o == i) {
            true => Ok(Buf::Own(Words::default())),
            false => Ok(Buf::Own(own_words(a.numel(), &a.name)?)),
        })
        .collect::<Result<_>>()?;
    let run = CpuRun {
        program,
        schedule,
        table,
        bufs,
        work: Vec::new(),
        fused: Cow::Owned(fused),
        spare: None,
        reading: None,
        skip,
        moved,
        stretches: Vec::new(),
        lanes: None,
        fresh: (0..n).collect(),
    };
    Ok(run)
}

impl CpuRun<'_> {
    /// Finds the stretches of its steps to run a block at a time ([`blocked`]), the
    /// views each keeps out of memory (none when `materialize`), and its lanes of devices
    /// as `lanes` has them ([`CpuExecutor::device_lanes`]).
    fn block(&mut self, materialize: bool, lanes: Option<bool>) {
        let ops = self.fused.ops.as_deref().unwrap_or(&self.schedule.ops);
        let halves = |v: &View| {
            let b = &self.bufs[self.table.index(v)];
            matches!(b, Buf::HalvesIn(_) | Buf::HalvesOut(_) | Buf::OwnHalves(_))
        };
        let stretches = blocked::stretches(&self.fused.steps, ops, halves);
        // Memory read outside the steps: an operand's, or memory not the run's own
        // (lent, or holding an operand: `moved`).
        let live = |v: &View| {
            let i = self.table.index(v);
            operand(self.program, v)
                || !matches!(self.bufs[i], Buf::Own(_))
                || self.moved.iter().any(|&(_, at)| at == i)
        };
        let stretches = stretches.into_iter().map(|s| {
            let kept = kept(&s, &self.fused, ops, &self.skip, materialize, live);
            // Staged as seldom as views are kept: not materialized, not in pieces.
            let staged = match materialize || self.fused.piece_ends.len() > 1 {
                true => Vec::new(),
                false => {
                    let table = &self.table;
                    let aliases = |a: &View, b: &View| {
                        table.index(a) == table.index(b)
                            && a.offset() < b.offset() + b.len()
                            && b.offset() < a.offset() + a.len()
                    };
                    blocked::staged(&s, &self.fused.steps, ops, &self.skip, &kept, aliases)
                }
            };
            (s, kept, staged)
        });
        self.stretches = stretches.collect();
        let ranges: Vec<_> = self
            .stretches
            .iter()
            .map(|(s, ..)| s.steps.clone())
            .collect();
        let slot = |v: &View| self.slot(v.device(), v.alloc());
        let n = rayon::current_num_threads().min(self.program.devices);
        let steps = &self.fused.steps;
        self.lanes = device_lanes::plan(steps, ops, &ranges, self.bufs.len(), slot, n, lanes);
    }

    /// An error when memory of view `v` is kept out of memory by a stretch
    /// ([`CpuRun::block`]): it does not hold what the schedule wrote there.
    fn materialized(&self, v: &View) -> Result<()> {
        let kept = self.stretches.iter().flat_map(|(_, k, _)| k);
        match kept.into_iter().find(|k| k.overlaps(v)) {
            None => Ok(()),
            Some(k) => Err(crate::Error::bad_input(format!(
                "`{}`: view {k:?} is scratch the run keeps out of memory (dead after its \
                 stretch); set {MATERIALIZE_ENV}=1 to have it written",
                self.program.name
            ))),
        }
    }

    /// Runs its steps `iters` times.
    fn iterate(&mut self, iters: usize) -> Result<()> {
        let ops = self.fused.ops.as_deref().unwrap_or(&self.schedule.ops);
        let steps = &self.fused.steps;
        let places = places_of(&mut self.bufs);
        let threads = self
            .lanes
            .as_ref()
            .map_or(1, |l| rayon::current_num_threads().clamp(1, l.lanes.len()));
        if self.work.len() < threads {
            self.work.resize_with(threads, Default::default);
        }
        let (table, skip, stretches) = (&self.table, &self.skip[..], &self.stretches);
        let Some(lanes) = &self.lanes else {
            let mut mem = Memory {
                table,
                places: &places,
                work: &mut self.work[0],
            };
            return (0..iters).try_for_each(|_| in_order(&mut mem, steps, ops, skip, stretches));
        };
        let work: Vec<std::sync::Mutex<&mut Scratch>> =
            self.work.iter_mut().map(std::sync::Mutex::new).collect();
        let unit = |thread: usize, u: &device_lanes::Unit| {
            let mut w = work[thread].lock().unwrap_or_else(|e| e.into_inner());
            let mut mem = Memory {
                table,
                places: &places,
                work: &mut w,
            };
            match u.stretch {
                Some(j) => {
                    let (s, kept, staged) = &stretches[j];
                    mem.blocked(s, steps, ops, skip, [kept, staged])
                }
                None => {
                    mem.run(&steps[u.steps.clone()], ops, u.steps.start, skip);
                    Ok(())
                }
            }
        };
        (0..iters).try_for_each(|_| device_lanes::run(lanes, threads, &unit))
    }

    /// Its fresh buffers where steps write them in memory (not only in a core's blocks,
    /// [`blocked::dead_inside`]), in the order they first do, to fault in beside its
    /// first run (before it, where lanes of devices keep every core busy); none after
    /// that.
    fn prefault(&mut self) -> prefault::Prefault {
        let mut out = prefault::Prefault::default();
        let mut fresh = std::mem::take(&mut self.fresh);
        fresh.retain(|&i| self.bufs[i].len() * 4 >= words::LAZY_FROM);
        if fresh.is_empty() {
            return out;
        }
        let mut is_fresh = vec![false; self.bufs.len()];
        fresh.into_iter().for_each(|i| is_fresh[i] = true);
        let ops = self.fused.ops.as_deref().unwrap_or(&self.schedule.ops);
        let mut stretches = self.stretches.iter().peekable();
        for (k, step) in self.fused.steps.iter().enumerate() {
            while stretches.next_if(|(s, ..)| s.steps.end <= k).is_some() {}
            let dead = stretches
                .peek()
                .filter(|(s, ..)| s.steps.contains(&k))
                .map_or(&[][..], |(_, dead, _)| &dead[..]);
            for v in blocked::touches(step, ops).1 {
                let i = self.slot(v.device(), v.alloc());
                if !is_fresh[i] || dead.contains(&v) {
                    continue;
                }
                let b = &self.bufs[i];
                let (start, end) = (v.offset(), v.offset() + v.len());
                match b {
                    // Two elements a word.
                    Buf::OwnHalves(_) => out.add(b, start / 2..end.div_ceil(2)),
                    _ => out.add(b, start..end),
                }
            }
        }
        out
    }

    /// True when some step of the run writes allocation `alloc` of `device`.
    fn writes(&self, device: usize, alloc: ir::AllocId) -> bool {
        let ops = self.fused.ops.as_deref().unwrap_or(&self.schedule.ops);
        let hit = |v: &View| v.device() == device && v.alloc() == alloc;
        self.fused.steps.iter().any(|s| match s {
            Step::Op(i) => ops[*i].writes().any(|v| hit(&v)),
            Step::Region(r) => r.writes().any(|v| hit(&v)),
        })
    }

    /// The steps of piece `k`, and the index of its first.
    fn piece(&self, k: usize) -> Option<(&[Step], usize)> {
        let ends = &self.fused.piece_ends;
        let end = *ends.get(k)?;
        let start = if k == 0 { 0 } else { ends[k - 1] };
        Some((&self.fused.steps[start..end], start))
    }

    /// The memory slot holding allocation `alloc` of `device` ([`CpuRun::moved`]).
    fn slot(&self, device: usize, alloc: ir::AllocId) -> usize {
        let i = self.table.index_of(device, alloc);
        self.moved
            .iter()
            .find(|(o, _)| *o == i)
            .map_or(i, |&(_, at)| at)
    }

    /// The words of view `v`, where its allocation is held ([`CpuRun::slot`]).
    fn view_words(&mut self, v: &View) -> &mut [u32] {
        let i = self.slot(v.device(), v.alloc());
        &mut self.bufs[i][v.offset()..v.offset() + v.len()]
    }
}

/// Runs `steps` (of `ops`) once in order on this thread, but those `skip` lists, the
/// `stretches` a block at a time; in slices, so that a watched caller may stop a long
/// run between them ([`crate::interrupt`]).
fn in_order(
    mem: &mut Memory<'_>,
    steps: &[Step],
    ops: &[DataOp],
    skip: &[usize],
    stretches: &[(blocked::Stretch, Vec<View>, Vec<View>)],
) -> Result<()> {
    let (mut k, mut next) = (0, stretches.iter().peekable());
    while k < steps.len() {
        crate::interrupt::check()?;
        if let Some((s, kept, staged)) = next.next_if(|(s, ..)| s.steps.start == k) {
            mem.blocked(s, steps, ops, skip, [kept, staged])?;
            k = s.steps.end;
            continue;
        }
        let end = next
            .peek()
            .map_or(steps.len(), |(s, ..)| s.steps.start)
            .min(k + INTERRUPT_EVERY_OPS);
        mem.run(&steps[k..end], ops, k, skip);
        k = end;
    }
    Ok(())
}

/// An error unless `bytes` is the size of view `v` of `elem`-byte elements.
fn view_bytes(v: &View, elem: usize, bytes: usize) -> Result<()> {
    if bytes != v.len() * elem {
        return Err(crate::Error::bad_input(format!(
            "{bytes} bytes for a view of {} elements of {elem} bytes",
            v.len()
        )));
    }
    Ok(())
}

impl Prepared for CpuRun<'_> {
    fn upload(&mut self, inputs: &[Vec<HostArray>]) -> Result<()> {
        check_inputs(self.program, inputs)?;
        for (d, dev) in inputs.iter().enumerate() {
            for (&a, arr) in self.program.inputs.iter().zip(dev) {
                let i = self.slot(d, a);
                self.bufs[i].copy_from_slice(&arr.words);
            }
        }
        Ok(())
    }

    fn run(&mut self, iters: usize) -> Result<Duration> {
        let t = Instant::now();
        match self.lanes {
            // Every core runs a lane: the fresh pages first, on every core.
            Some(_) => {
                self.prefault().now();
                self.iterate(iters)?;
            }
            None => self.prefault().during(|| self.iterate(iters))?,
        }
        Ok(t.elapsed())
    }

    fn input_words(&mut self, device: usize, operand: usize) -> Option<&mut [u32]> {
        let a = *self.program.inputs.get(operand)?;
        (device < self.program.devices).then(|| {
            let i = self.slot(device, a);
            &mut self.bufs[i][..]
        })
    }

    fn output_words(&self, device: usize, operand: usize) -> Option<&[u32]> {
        // An output the run was not prepared to be read through holds anything.
        if self.reading.as_ref().is_some_and(|r| !r.contains(&operand)) {
            return None;
        }
        let a = *self.program.outputs.get(operand)?;
        if device >= self.program.devices {
            return None;
        }
        match &self.bufs[self.slot(device, a)] {
            Buf::HalvesOut(_) => None,
            b => Some(&b[..]),
        }
    }

    fn input_kept(&self, device: usize, operand: usize) -> Option<&[u32]> {
        let a = *self.program.inputs.get(operand)?;
        if device >= self.program.devices || self.writes(device, a) {
            return None;
        }
        match &self.bufs[self.slot(device, a)] {
            Buf::HalvesIn(_) => None,
            b => Some(&b[..]),
        }
    }

    fn run_piece(&mut self, k: usize) -> Result<()> {
        let n = self.fused.piece_ends.len();
        let (steps, first) = self
            .piece(k)
            .ok_or_else(|| crate::Error::bad_input(format!("no piece {k} of {n}")))?;
        let steps = steps.to_vec();
        let ops = self.fused.ops.as_deref().unwrap_or(&self.schedule.ops);
        let places = places_of(&mut self.bufs);
        if self.work.is_empty() {
            self.work.push(Scratch::default());
        }
        let mut mem = Memory {
            table: &self.table,
            places: &places,
            work: &mut self.work[0],
        };
        mem.run(&steps, ops, first, &self.skip);
        Ok(())
    }

    fn read_view(&mut self, v: View, elem: usize) -> Result<Vec<u8>> {
        self.materialized(&v)?;
        let words = self.view_words(&v);
        Ok(match elem {
            4 => bytemuck::cast_slice(words).to_vec(),
            _ => words
                .iter()
                .flat_map(|w| (*w as u16).to_le_bytes())
                .collect(),
        })
    }

    fn read_view_into(&mut self, v: View, elem: usize, out: &mut [u8]) -> Result<()> {
        view_bytes(&v, elem, out.len())?;
        self.materialized(&v)?;
        let words = self.view_words(&v);
        match elem {
            4 => out.copy_from_slice(bytemuck::cast_slice(words)),
            _ => {
                for (o, w) in out.chunks_exact_mut(2).zip(words) {
                    o.copy_from_slice(&(*w as u16).to_le_bytes());
                }
            }
        }
        Ok(())
    }

    fn write_view(&mut self, v: View, elem: usize, bytes: &[u8]) -> Result<()> {
        view_bytes(&v, elem, bytes.len())?;
        let dst = self.view_words(&v);
        match elem {
            // Words are little-endian bytes in memory (as `read_view` gives them).
            4 => bytemuck::cast_slice_mut(dst).copy_from_slice(bytes),
            _ => {
                for (d, b) in dst.iter_mut().zip(bytes.chunks_exact(2)) {
                    *d = u16::from_le_bytes([b[0], b[1]]) as u32;
                }
            }
        }
        Ok(())
    }

    fn read_outputs(&mut self) -> Result<Vec<Vec<HostArray>>> {
        let allocs = &self.program.layout.allocs;
        Ok((0..self.program.devices)
            .map(|d| {
                self.program
                    .outputs
                    .iter()
                    .map(|&a| HostArray {
                        dtype: allocs[a].dtype,
                        shape: allocs[a].shape.clone(),
                        words: match &self.bufs[self.slot(d, a)] {
                            Buf::HalvesOut(h) => h.iter().map(|&x| u32::from(x)).collect(),
                            b => b.to_vec(),
                        },
                    })
                    .collect()
            })
            .collect())
    }
}

#[cfg(test)]
mod fill_tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn a_zero_fill_zeroes_written_pages_and_leaves_untouched_ones_unmapped() {
        let words = untouched::tests::fresh(8 << 20);
        let page = untouched::tests::page_words();
        let n = words.len() / page;
        let written = [0, 1, 7, n / 3, n / 2, n - 1];
        for p in written {
            words[p * page + 3] = 0x3f80_0000;
        }
        // A fill from the middle of page 1 to the middle of the last page.
        let (lo, hi) = (page + 10, words.len() - page / 2);
        words[lo - 1] = 5;
        words[hi] = 6;
        let untouched_before = untouched::zero_pages(words);
        fill(&mut words[lo..hi], 0);
        // Looked up before the words are read (a read maps the zero page).
        let untouched_after = untouched::zero_pages(words);
        assert!(words[lo..hi].iter().all(|&w| w == 0));
        assert_eq!((words[lo - 1], words[hi], words[3]), (5, 6, 0x3f80_0000));
        if untouched_before.is_empty() {
            return; // a kernel that cannot say: every page was written
        }
        // The pages the fill skipped are still untouched: no fault, no memory.
        assert_eq!(untouched_after, untouched_before);
        assert_eq!(
            untouched_before
                .iter()
                .map(|r| r.len() / page)
                .sum::<usize>(),
            n - written.len()
        );
    }

    #[test]
    fn a_streamed_fill_writes_every_word_and_no_other_at_any_alignment() {
        for len in (0..40).chain([1 << 10, (1 << 20) + 3]) {
            for start in 0..4 {
                for bits in [0, 0x3f80_0000, u32::MAX] {
                    let mut words = vec![7u32; len + start + 5];
                    stream_fill(&mut words[start..start + len], bits);
                    let want = |i: usize| {
                        if (start..start + len).contains(&i) {
                            bits
                        } else {
                            7
                        }
                    };
                    assert!(
                        words.iter().enumerate().all(|(i, &w)| w == want(i)),
                        "len {len}, start {start}, bits {bits:#x}"
                    );
                }
            }
        }
    }
}
