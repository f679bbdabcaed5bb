//! Devices' steps run side by side, one lane of devices a core. A run's steps are one
//! order (the schedule's, fused); steps of different devices touch different memory,
//! but for a copy from one device to another. Each device belongs to a lane
//! (`device % lanes`), each step to the lane of the device it reads (a copy: its
//! sender's), and a lane's steps run in the run's order, in units (consecutive steps of
//! the lane, or a blocked stretch). A unit waits for the units of other lanes that come
//! before it in the run's order and touch an element it touches, one of the two writing
//! it: so any two steps that touch one element, one writing it, run in the run's order,
//! and the results are the bits one thread gets. Kernels whose steps are small (ring
//! attention's blocks of scores, thousands a call) gain a core that spreading each step
//! over the cores (`spread`) loses to its wake-ups.
//!
//! Each thread taking part runs whichever lane it holds until its next unit must wait,
//! then looks for another lane nobody holds: one thread alone runs them all, so a worker
//! that starts late (or never) costs nothing but its part.

use crate::device_sim::fuse::Step;
use crate::error::{Error, Result};
use crate::ir::{DataOp, View};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The environment variable that, set to `0`, runs every step on one lane (devices one
/// after another, as the run's order lists them): for comparing.
pub const DEVICE_LANES_ENV: &str = "TPUSIM_DEVICE_LANES";

/// Steps at most in a unit: a watched caller may stop a run between units.
const MOST_STEPS: usize = 256;

/// Nanoseconds an element a step touches costs one core, roughly: a step (or blocked
/// stretch) of more than [`super::spread::worth`]'s least work is spread over the cores
/// itself, and a run whose smaller steps touch less, or less than its larger ones, runs
/// on one lane.
const ELEMENT_NS: f64 = 0.2;

/// Nanoseconds a multiply-add of a product costs one core, roughly (the AMX tiles'
/// rate, `amx.rs`): products are spread over the cores by their multiply-adds.
const MAC_NS: f64 = 0.003;

/// Nanoseconds a unit costs beyond its steps, roughly (looking at the lanes, holding
/// one, the other core's caches): for judging whether lanes gain.
const UNIT_NS: f64 = 1000.0;

/// Consecutive steps of one lane, run by one thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Unit {
    /// The steps (indices into the run's steps).
    pub steps: Range<usize>,
    /// The blocked stretch these steps are (an index into the run's stretches), if any.
    pub stretch: Option<usize>,
    /// `(lane, units)`: the unit runs once that lane has run that many of its units.
    pub after: Vec<(usize, usize)>,
}

/// A run's steps as lanes of units.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Lanes {
    pub lanes: Vec<Vec<Unit>>,
}

/// The memory one step touches: `(view, written)` for each view it reads or writes,
/// as the executor slices it (a compute op's whole operands, a region's whole views).
fn footprint(step: &Step, ops: &[DataOp], mut f: impl FnMut(&View, bool)) {
    match step {
        Step::Op(i) => match &ops[*i] {
            DataOp::Copy { src, dst } | DataOp::Accumulate { src, dst, .. } => {
                f(src, false);
                f(dst, true);
            }
            DataOp::Fill { dst, .. } => f(dst, true),
            DataOp::Compute(c) => {
                c.srcs.iter().for_each(|o| f(&o.view, false));
                f(&c.dst.view, true);
            }
        },
        Step::Region(r) => {
            r.inputs.iter().for_each(|i| f(&i.view, false));
            r.outputs.iter().for_each(|o| f(&o.view, true));
            r.reduces.iter().for_each(|q| f(&q.dst, true));
        }
    }
}

/// One touch of a memory slot by a unit of a lane other than the slot's device's.
struct Foreign {
    lane: usize,
    unit: usize,
    elems: Range<usize>,
    write: bool,
}

/// What the units so far did to one memory slot.
#[derive(Default)]
struct Slot {
    /// The last unit of the slot's own lane to touch it, and to write it.
    own_touch: Option<usize>,
    own_write: Option<usize>,
    /// Touches by other lanes' units, those every other lane already follows dropped.
    foreign: Vec<Foreign>,
}

/// The lanes of `steps` (over `ops`), `stretches` each one unit, for `lanes` lanes;
/// `slot` is the memory slot (of `slots`) a view's elements are in. None where one lane
/// would hold every unit, or `on` is `Some(false)`, or it is `None` and
/// [`DEVICE_LANES_ENV`] is `0` or the steps too small to spread over the cores each
/// are too few to be worth a second core, or fewer than the larger ones (a run of large
/// steps spreads each: data movement of megabytes a block at a time, matmuls of
/// thousands of rows; in a lane, a step runs on one core).
pub(super) fn plan(
    steps: &[Step],
    ops: &[DataOp],
    stretches: &[Range<usize>],
    slots: usize,
    slot: impl Fn(&View) -> usize,
    lanes: usize,
    on: Option<bool>,
) -> Option<Lanes> {
    if lanes < 2 || on == Some(false) || (on.is_none() && !enabled()) {
        return None;
    }
    let mut planner = Planner {
        lanes,
        slots: (0..slots).map(|_| Slot::default()).collect(),
        follows: vec![vec![0; lanes]; lanes],
        out: vec![Vec::new(); lanes],
        touched: Vec::new(),
        small: 0.0,
        large: 0.0,
        ends: vec![Vec::new(); lanes],
        units: 0,
    };
    let lane_of = |step: &Step| {
        let (mut read, mut written) = (None, None);
        footprint(step, ops, |v, w| match w {
            false => read = read.or(Some(v.device())),
            true => written = written.or(Some(v.device())),
        });
        read.or(written).map(|d| d % lanes)
    };
    let mut stretches = stretches.iter().enumerate().peekable();
    let (mut k, mut open): (usize, Option<(usize, usize)>) = (0, None);
    while k < steps.len() {
        if let Some((j, s)) = stretches.next_if(|(_, s)| s.start == k) {
            if let Some((lane, start)) = open.take() {
                planner.close(lane, start..k, None, steps, ops, &slot);
            }
            let lane = steps[s.clone()].iter().find_map(lane_of).unwrap_or(0);
            planner.close(lane, s.clone(), Some(j), steps, ops, &slot);
            k = s.end;
            continue;
        }
        let lane = lane_of(&steps[k]);
        match open {
            Some((l, start)) if lane.is_none_or(|x| x == l) && k - start < MOST_STEPS => {}
            _ => {
                if let Some((l, start)) = open.take() {
                    planner.close(l, start..k, None, steps, ops, &slot);
                }
                open = Some((lane.unwrap_or(0), k));
            }
        }
        k += 1;
    }
    if let Some((lane, start)) = open {
        planner.close(lane, start..steps.len(), None, steps, ops, &slot);
    }
    let used = planner.out.iter().filter(|l| !l.is_empty()).count();
    // The time in lanes, each unit taking its elements' time once its lane and what
    // it waits for are done, against one after another: a ring whose every step waits
    // for the last (psum) gains nothing.
    let (small, large) = (planner.small, planner.large);
    let one_lane = small + large + UNIT_NS * planner.units as f64;
    let in_lanes = planner
        .ends
        .iter()
        .filter_map(|e| e.last())
        .fold(0.0, |a: f64, &b| a.max(b));
    let gain = one_lane - in_lanes;
    let worth = small >= large && gain >= in_lanes / 4.0 && super::spread::worth(gain);
    if std::env::var_os("TPUSIM_DEBUG_PLAN").is_some() {
        eprintln!(
            "tpusim: device lanes: {} units, small steps {:.3} s, large {:.3} s, in lanes {:.3} s: {}",
            planner.units,
            small * 1e-9,
            large * 1e-9,
            in_lanes * 1e-9,
            if worth { "lanes" } else { "one lane" }
        );
    }
    let worth = on == Some(true) || worth;
    (used >= 2 && worth).then_some(Lanes { lanes: planner.out })
}

/// Whether [`DEVICE_LANES_ENV`] leaves lanes on (read once).
fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os(DEVICE_LANES_ENV).is_none_or(|v| v != "0"))
}

/// The lanes being built.
struct Planner {
    lanes: usize,
    slots: Vec<Slot>,
    /// `follows[l][x]`: units of lane `x` that lane `l`'s units so far wait for.
    follows: Vec<Vec<usize>>,
    out: Vec<Vec<Unit>>,
    /// The unit being closed's touches: `(slot, elements, written, lane of the slot)`.
    touched: Vec<(usize, Range<usize>, bool, usize)>,
    /// Nanoseconds of work ([`ELEMENT_NS`], [`MAC_NS`]) of steps (a stretch: all its
    /// steps) not worth spreading each (how much work lanes spread), and of the others.
    small: f64,
    large: f64,
    /// When each unit of each lane would end, in nanoseconds of work ([`ELEMENT_NS`],
    /// [`UNIT_NS`]), each starting when its lane and what it waits for are done.
    ends: Vec<Vec<f64>>,
    units: usize,
}

impl Planner {
    /// Counts work of `ns` spread over the cores as one step, or not.
    fn sized(&mut self, ns: f64) {
        match super::spread::worth(ns) {
            true => self.large += ns,
            false => self.small += ns,
        }
    }

    /// Adds `steps[range]` as the next unit of `lane`: what it waits for, then its touches.
    fn close(
        &mut self,
        lane: usize,
        range: Range<usize>,
        stretch: Option<usize>,
        steps: &[Step],
        ops: &[DataOp],
        slot: &impl Fn(&View) -> usize,
    ) {
        let mut touched = std::mem::take(&mut self.touched);
        touched.clear();
        let (mut ns, mut work) = (0.0, 0.0);
        for step in &steps[range.clone()] {
            let mut elements = 0;
            footprint(step, ops, |v, w| {
                let at = v.offset();
                touched.push((slot(v), at..at + v.len(), w, v.device() % self.lanes));
                elements += v.len();
            });
            let macs = match step {
                Step::Op(i) => ops[*i].work().macs,
                Step::Region(_) => 0,
            };
            ns += elements as f64 * ELEMENT_NS + macs as f64 * MAC_NS;
            // A step is spread on its own, a stretch's steps together.
            if stretch.is_none() {
                work += ns;
                self.sized(std::mem::take(&mut ns));
            }
        }
        work += ns;
        self.sized(ns);
        let mut need = self.follows[lane].clone();
        for (s, elems, write, home) in &touched {
            let st = &mut self.slots[*s];
            if *home != lane {
                // After the slot's own lane's last touch (a write, where only read).
                let last = if *write { st.own_touch } else { st.own_write };
                if let Some(u) = last {
                    need[*home] = need[*home].max(u + 1);
                }
            }
            let follows = &self.follows;
            // A touch every lane but its own already follows can order nothing more.
            st.foreign.retain(|f| {
                (0..follows.len()).any(|l| l != f.lane && follows[l][f.lane] <= f.unit)
            });
            for f in &st.foreign {
                let clash =
                    (*write || f.write) && f.elems.start < elems.end && elems.start < f.elems.end;
                if f.lane != lane && clash {
                    need[f.lane] = need[f.lane].max(f.unit + 1);
                }
            }
        }
        let after: Vec<(usize, usize)> = (0..self.lanes)
            .filter(|&x| x != lane && need[x] > self.follows[lane][x])
            .map(|x| (x, need[x]))
            .collect();
        self.follows[lane] = need;
        let unit = self.out[lane].len();
        let start = after
            .iter()
            .map(|&(x, k)| self.ends[x][k - 1])
            .chain(self.ends[lane].last().copied())
            .fold(0.0, f64::max);
        self.ends[lane].push(start + work + UNIT_NS);
        self.units += 1;
        for (s, elems, write, home) in touched.drain(..) {
            let st = &mut self.slots[s];
            if home == lane {
                st.own_touch = Some(unit);
                if write {
                    st.own_write = Some(unit);
                }
            } else {
                st.foreign.push(Foreign {
                    lane,
                    unit,
                    elems,
                    write,
                });
            }
        }
        self.touched = touched;
        self.out[lane].push(Unit {
            steps: range,
            stretch,
            after,
        });
    }
}

/// A lane's progress: units run, and whether a thread holds it.
#[derive(Default)]
struct Progress {
    done: AtomicUsize,
    held: AtomicBool,
}

/// Runs every unit of `lanes` by `run(thread, unit)`, on up to `threads` threads (the
/// caller one of them, `thread` 0..threads telling whose scratch to use); the first
/// error ends the run (the units under way finish). Each thread runs its steps alone
/// ([`super::spread::alone`]): the lanes are what spreads the work.
pub(super) fn run(
    lanes: &Lanes,
    threads: usize,
    run: &(dyn Fn(usize, &Unit) -> Result<()> + Sync),
) -> Result<()> {
    let progress: Vec<Progress> = lanes.lanes.iter().map(|_| Progress::default()).collect();
    let stop = AtomicBool::new(false);
    let failed: Mutex<Option<Error>> = Mutex::new(None);
    let mode = super::float_mode::FloatMode::current();
    let take_part = |thread: usize| {
        mode.run(|| {
            super::spread::alone(|| lanes.take_part(thread, &progress, &stop, &failed, run))
        })
    };
    let threads = threads.clamp(1, lanes.lanes.len());
    super::spread::spread(threads, threads - 1, &take_part);
    match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

impl Lanes {
    /// One thread's part: runs the units of lanes it can hold until all are run or the
    /// run stops.
    fn take_part(
        &self,
        thread: usize,
        progress: &[Progress],
        stop: &AtomicBool,
        failed: &Mutex<Option<Error>>,
        run: &(dyn Fn(usize, &Unit) -> Result<()> + Sync),
    ) {
        let n = self.lanes.len();
        let mut idle = 0u32;
        loop {
            let mut finished = 0;
            let mut ran = false;
            for l in (0..n).map(|i| (thread + i) % n) {
                let units = &self.lanes[l];
                let p = &progress[l];
                if p.done.load(Ordering::Acquire) == units.len() {
                    finished += 1;
                    continue;
                }
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                // Holding a lane: its last holder's writes are seen (acquire/release).
                if p.held
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
                {
                    continue;
                }
                let _release = Release(&p.held);
                let mut next = p.done.load(Ordering::Relaxed);
                while next < units.len() && !stop.load(Ordering::Relaxed) {
                    let u = &units[next];
                    let ready = u
                        .after
                        .iter()
                        .all(|&(x, k)| progress[x].done.load(Ordering::Acquire) >= k);
                    if !ready {
                        break;
                    }
                    let outcome = crate::interrupt::check().and_then(|()| {
                        // Unwinding: the other threads stop, then the panic goes on.
                        let stopped = Stop(stop);
                        let r = run(thread, u);
                        std::mem::forget(stopped);
                        r
                    });
                    if let Err(e) = outcome {
                        stop.store(true, Ordering::Relaxed);
                        let mut f = failed.lock().unwrap_or_else(|e| e.into_inner());
                        f.get_or_insert(e);
                        return;
                    }
                    next += 1;
                    // The unit's writes before its count (release).
                    p.done.store(next, Ordering::Release);
                    ran = true;
                }
            }
            if finished == n {
                return;
            }
            if ran {
                idle = 0;
            } else {
                // Every lane held by another thread or waiting: spin briefly, then yield.
                idle += 1;
                if idle < 64 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
}

/// Lets go of a lane when dropped (however the unit ended).
struct Release<'a>(&'a AtomicBool);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Stops the run when dropped: dropped only while a unit unwinds.
struct Stop<'a>(&'a AtomicBool);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Where each step of `lanes` runs: `(lane, unit)` by step index, for the tests.
#[cfg(test)]
pub(super) fn units_of(lanes: &Lanes, steps: usize) -> Vec<(usize, usize)> {
    let mut at = vec![(usize::MAX, usize::MAX); steps];
    for (l, units) in lanes.lanes.iter().enumerate() {
        for (u, unit) in units.iter().enumerate() {
            for k in unit.steps.clone() {
                at[k] = (l, u);
            }
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device_sim::fuse::{fuse_with, Keep};
    use crate::ir::{Program, Schedule};

    /// Per unit (by lane and index), how many units of each lane have surely run when
    /// it starts: its own lane's earlier ones, what it waits for, and what those waited
    /// for in turn.
    fn clocks(lanes: &Lanes) -> Vec<Vec<Vec<usize>>> {
        let n = lanes.lanes.len();
        let mut order: Vec<(usize, usize)> = lanes
            .lanes
            .iter()
            .enumerate()
            .flat_map(|(l, us)| (0..us.len()).map(move |u| (l, u)))
            .collect();
        order.sort_by_key(|&(l, u)| lanes.lanes[l][u].steps.start);
        let mut clock: Vec<Vec<Vec<usize>>> = lanes
            .lanes
            .iter()
            .map(|us| vec![vec![0; n]; us.len()])
            .collect();
        for (l, u) in order {
            let mut c = vec![0; n];
            c[l] = u;
            let join = |c: &mut Vec<usize>, other: &Vec<usize>| {
                c.iter_mut().zip(other).for_each(|(a, b)| *a = (*a).max(*b));
            };
            if u > 0 {
                join(&mut c, &clock[l][u - 1]);
            }
            for &(x, k) in &lanes.lanes[l][u].after {
                assert!(
                    k >= 1 && k <= lanes.lanes[x].len(),
                    "lane {x} has no unit {k}"
                );
                let before = &clock[x][k - 1];
                assert!(
                    lanes.lanes[x][k - 1].steps.start < lanes.lanes[l][u].steps.start,
                    "a unit waits only for earlier ones"
                );
                join(&mut c, &before.clone());
                c[x] = c[x].max(k);
            }
            clock[l][u] = c;
        }
        clock
    }

    /// Every step in one unit, each lane's in order, stretches whole; and any two steps
    /// of different lanes touching one element, one writing it, ordered as the steps are.
    /// Returns the pairs of steps of different lanes it found ordered.
    fn check(what: &str, prog: &Program, sched: &Schedule, lanes: usize) -> usize {
        let fused = fuse_with(prog, sched, &[], Keep::Outputs, super::super::CPU_JOINS);
        let ops = fused.ops.as_deref().unwrap_or(&sched.ops);
        let steps = &fused.steps;
        let stretches: Vec<Range<usize>> = super::super::blocked::stretches(steps, ops, |_| false)
            .into_iter()
            .map(|s| s.steps)
            .collect();
        let table = sched.memory(prog);
        let slot = |v: &View| table.index(v);
        let Some(plan) = plan(steps, ops, &stretches, table.len(), slot, lanes, Some(true)) else {
            return 0; // one lane holds every step
        };
        let at = units_of(&plan, steps.len());
        assert!(
            at.iter().all(|&(l, _)| l != usize::MAX),
            "{what}: a step in no unit"
        );
        for us in &plan.lanes {
            assert!(
                us.windows(2).all(|w| w[0].steps.end <= w[1].steps.start),
                "{what}"
            );
        }
        for (j, s) in stretches.iter().enumerate() {
            let (l, u) = at[s.start];
            assert_eq!(plan.lanes[l][u].steps, *s, "{what}: stretch {j}");
            assert_eq!(plan.lanes[l][u].stretch, Some(j), "{what}");
        }
        let clock = clocks(&plan);
        let mut touches: Vec<Vec<(usize, Range<usize>, bool)>> = vec![Vec::new(); table.len()];
        let mut pairs = 0;
        for (k, step) in steps.iter().enumerate() {
            footprint(step, ops, |v, w| {
                let elems = v.offset()..v.offset() + v.len();
                for (j, e, w2) in &touches[slot(v)] {
                    let clash = (w || *w2) && e.start < elems.end && elems.start < e.end;
                    let ((la, ua), (lb, ub)) = (at[*j], at[k]);
                    if clash && la != lb {
                        pairs += 1;
                        assert!(
                            clock[lb][ub][la] > ua,
                            "{what}, {lanes} lanes: step {k} (lane {lb}, unit {ub}) may run \
                             before step {j} (lane {la}, unit {ua}), which touches {v:?} too"
                        );
                    }
                }
                touches[slot(v)].push((k, elems, w));
            });
        }
        pairs
    }

    #[test]
    fn steps_touching_one_element_run_in_order_whatever_the_lanes() {
        use crate::collectives::Registry;
        use crate::mesh::{Mesh, Placement};
        use crate::run::Job;
        let (mut checked, mut pairs) = (0, 0);
        for c in Registry::builtin().iter() {
            for devices in [2, 3, 4, 5, 8] {
                let mesh = Mesh::new(devices, "x").unwrap();
                let job = Job::collective(c.clone(), Placement::whole(mesh)).with_shape(&[64, 256]);
                let Ok(plan) = job.plan() else { continue };
                for lanes in 2..=devices.min(4) {
                    pairs += check(c.name(), &plan.program, &plan.schedule, lanes);
                }
                checked += 1;
            }
        }
        assert!(
            checked >= 30 && pairs > 1000,
            "{checked} plans, {pairs} pairs checked"
        );
    }
}
