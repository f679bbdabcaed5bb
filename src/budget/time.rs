//! How long a command will take, estimated from the same [`Census`] as its memory: the
//! planning (tracing and scheduling every op), then per command what it repeats (a
//! schedule of `check`, an iteration of `bench`) times how often. Work whose estimate
//! exceeds the time limit (10 minutes, or `TPUSIM_TIME_LIMIT`) is refused before it
//! starts, with the largest count (or P) that fits.
//!
//! The rates are what the project's 2-core CI machine takes when it is quiet, fitted
//! to one eager schedule of psum at P = 128 to 2048, of allreduce_torus at P = 512 to
//! 4096 and allreduce_2d at P = 1024, and psum's default check at P = 16 to 128
//! (docs/src/verifier-scale.md has the table): the estimate is within 1.5 times of those
//! measured times either way, and while other builds run, real times are up to 2 times
//! the estimate. A schedule of `check` costs its traced ops (every policy's scheduler
//! step is O(log P)) plus a vector clock of P counters merged at each wait, so a ring
//! collective's schedule grows as P^3 and the default check (P + 3 schedules at large
//! P) as P^4. A refusal says the work would take about that long on such a machine;
//! `TPUSIM_TIME_LIMIT` raises the limit.

use super::census::{Census, HOST_WORD};
use super::need::Work;
use crate::error::{Error, Result};

/// The environment variable that sets the time limit (`500ms`, `90s`, `10m`, `2h`, or
/// seconds).
pub const TIME_LIMIT_VAR: &str = "TPUSIM_TIME_LIMIT";

/// The time limit without [`TIME_LIMIT_VAR`]: 10 minutes.
pub const DEFAULT_TIME_LIMIT: f64 = 600.0;

/// Seconds to trace, lower and schedule one op (fitted: 0.6 us; `run psum` plans at 0.6
/// to 0.95 us an op, its check that the run was not lucky included).
pub const PLAN_SECONDS_PER_OP: f64 = 6e-7;
/// Seconds per traced op of one checked schedule: the scheduler, the event log and the
/// race checker's records (fitted: 0.7 us; 0.3-0.85 us in psum's default check at P =
/// 4 to 128, where the program stays in the caches).
pub const CHECK_SECONDS_PER_OP: f64 = 7e-7;
/// Seconds per device of a vector clock merged at a wait, in a checked schedule (one
/// 4-byte counter per device; fitted: 1.2 ns, the clocks of P = 1024 and more no longer
/// in the caches).
pub const CHECK_SECONDS_PER_CLOCK_ENTRY: f64 = 1.2e-9;
/// Seconds per data op of one run on the CPU executor (measured: 0.36-1 us).
pub const CPU_SECONDS_PER_DATA_OP: f64 = 2e-7;
/// Seconds per 32-bit word the CPU executor moves (16 GB/s).
pub const CPU_SECONDS_PER_WORD: f64 = 2.5e-10;
/// Seconds per element read back and compared with the reference (measured: 14-47
/// ns).
pub const COMPARE_SECONDS_PER_ELEMENT: f64 = 1e-8;
/// Seconds of one GPU submission waited for, whatever it holds.
pub const GPU_SECONDS_PER_SUBMISSION: f64 = 5e-6;
/// Seconds per data op of one run on a GPU.
pub const GPU_SECONDS_PER_DATA_OP: f64 = 5e-9;
/// Seconds per traced op of the cost model's timed run (measured on psum at P = 16 to
/// 256: 33-46 us).
pub const MODEL_SECONDS_PER_OP: f64 = 1.5e-5;

/// The time a command may take, and where that figure comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct TimeLimit {
    /// Seconds.
    pub seconds: f64,
    /// Where the figure comes from, for messages.
    pub source: String,
}

/// The time limit: [`TIME_LIMIT_VAR`] when set (a malformed one is bad input), else
/// [`DEFAULT_TIME_LIMIT`].
pub fn time_limit() -> Result<TimeLimit> {
    match std::env::var(TIME_LIMIT_VAR) {
        Ok(v) => {
            let seconds = crate::units::parse_duration(&v).map_err(|_| {
                Error::bad_input(format!(
                    "{TIME_LIMIT_VAR}=`{v}` is not a duration (expected seconds, or e.g. 500ms, 90s, 10m, 2h)"
                ))
            })?;
            Ok(TimeLimit {
                seconds,
                source: format!("{TIME_LIMIT_VAR}={v}"),
            })
        }
        Err(_) => Ok(TimeLimit {
            seconds: DEFAULT_TIME_LIMIT,
            source: format!("the default; {TIME_LIMIT_VAR} sets another"),
        }),
    }
}

/// A count a command repeats its work by (`--schedules`, `-n`, `-c`), and what one
/// repetition costs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Term {
    /// The flag that sets it, as messages name it (`--schedules`, `-c`).
    pub flag: &'static str,
    /// What it counts (`schedules`, `check iterations`).
    pub unit: &'static str,
    /// How many (as given: messages echo it exactly).
    pub n: u64,
    /// Seconds of one.
    pub each: f64,
}

impl Term {
    /// Seconds of all `n`.
    pub fn seconds(&self) -> f64 {
        self.n as f64 * self.each
    }
}

/// The estimated time of a command: what it does once, and its counts.
#[derive(Clone, Debug, PartialEq)]
pub struct Time {
    /// Seconds of the work done once (planning, a run).
    pub once: f64,
    /// The counted work.
    pub terms: Vec<Term>,
    /// Traced ops of the whole program (for messages).
    pub ops: f64,
}

impl Time {
    /// Seconds in all.
    pub fn seconds(&self) -> f64 {
        self.once + self.terms.iter().map(Term::seconds).sum::<f64>()
    }

    /// The term that costs the most, if any.
    pub fn dominant(&self) -> Option<&Term> {
        self.terms
            .iter()
            .filter(|t| t.seconds() > 0.0)
            .max_by(|a, b| a.seconds().total_cmp(&b.seconds()))
    }

    /// The largest value of `term`'s count that keeps the whole within `limit` seconds,
    /// the others as they are (0: none).
    pub fn largest(&self, term: &Term, limit: f64) -> f64 {
        let rest = self.seconds() - term.seconds();
        if term.each <= 0.0 {
            return f64::INFINITY;
        }
        ((limit - rest) / term.each).floor().max(0.0)
    }
}

/// The time of `work` on the kernel counted by `c` (sampled: unsampled, its traced
/// counts are zero and so is most of the estimate).
pub fn time(c: &Census, work: Work) -> Time {
    let p = c.devices;
    let t = c.traced.unwrap_or_default();
    let ops = p * t.ops;
    let data_ops = p * (t.computes + t.dma_runs + c.copies);
    let waits = p * (t.ops - t.dmas - t.computes - t.signals - t.marks).max(0.0);
    let outputs = p * c.output_bytes / HOST_WORD;
    let words = p * (c.input_bytes + c.output_bytes) / HOST_WORD;
    let plan = ops * PLAN_SECONDS_PER_OP;
    let compare = outputs * COMPARE_SECONDS_PER_ELEMENT;
    let iteration = |gpu: bool| {
        if gpu {
            GPU_SECONDS_PER_SUBMISSION + data_ops * GPU_SECONDS_PER_DATA_OP
        } else {
            data_ops * CPU_SECONDS_PER_DATA_OP + words * CPU_SECONDS_PER_WORD
        }
    };
    let model = |on: bool| if on { ops * MODEL_SECONDS_PER_OP } else { 0.0 };
    let (once, terms) = match work {
        Work::Run { gpu, model: m, .. } => (plan + iteration(gpu) + compare + model(m), vec![]),
        Work::Apply { gpu, .. } => (plan + iteration(gpu) + compare, vec![]),
        Work::Model { .. } => (plan + model(true), vec![]),
        Work::Trace => (plan + ops * CHECK_SECONDS_PER_OP, vec![]),
        Work::Check { .. } => (
            plan,
            vec![Term {
                flag: "--schedules",
                unit: "schedules",
                n: work.schedules(p as usize),
                each: ops * CHECK_SECONDS_PER_OP + waits * p * CHECK_SECONDS_PER_CLOCK_ENTRY,
            }],
        ),
        Work::Bench {
            gpu,
            iters,
            warmup,
            checks,
            ..
        } => {
            let each = iteration(gpu);
            (
                plan,
                vec![
                    Term {
                        flag: "-n",
                        unit: "timed iterations",
                        n: iters,
                        each,
                    },
                    Term {
                        flag: "-w",
                        unit: "warm-up iterations",
                        n: warmup,
                        each,
                    },
                    Term {
                        flag: "-c",
                        unit: "check iterations",
                        n: checks,
                        each: each + compare,
                    },
                ],
            )
        }
    };
    Time { once, terms, ops }
}

/// Seconds of one call of a Python kernel by the front end's recorder (one device, one
/// grid point) beyond the equations and loop iterations it evaluates: what a kernel that
/// does nothing costs (measured over 4 million calls on an idle machine: 1.5 us in all,
/// recording and the native call included; 22 us at a load of 6 on the 2-core CI one).
pub const RECORD_SECONDS_PER_POINT: f64 = 1e-6;

/// Seconds the recorder takes to evaluate one equation of a kernel's jaxpr (measured:
/// 14 us on the 2-core CI machine at a load of 6, some 5 us idle; scalars, refs and
/// records alike).
pub const RECORD_SECONDS_PER_EQN: f64 = 2e-6;

/// Seconds of one loop iteration's own machinery in the recorder, beyond its body's
/// equations (measured: 250 us for a `fori_loop` of a semaphore signal and wait at a
/// load of 6, some 80 us idle).
pub const RECORD_SECONDS_PER_ITERATION: f64 = 2e-5;

/// Bytes of host memory the recording of one call holds whatever it records: its entry
/// and empty list of ops in Python, in JSON and in the native call (measured: about 80
/// bytes a call for a kernel that records nothing).
pub const RECORD_BYTES_PER_POINT: f64 = 64.0;

/// What a front end counted while it recorded a kernel (per call, or per loop
/// iteration): counts, not clock time, so the budget's answer is the same in every run
/// whatever the machine's load.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Recorded {
    /// Equations of the kernel's jaxpr evaluated.
    pub eqns: f64,
    /// Loop iterations evaluated (each costs its machinery beyond its equations).
    pub iterations: f64,
    /// Bytes of the records made (their JSON, which the native call parses).
    pub bytes: f64,
}

impl Recorded {
    /// Seconds to record this much, at the rates above.
    pub fn seconds(&self) -> f64 {
        self.eqns * RECORD_SECONDS_PER_EQN + self.iterations * RECORD_SECONDS_PER_ITERATION
    }

    /// Counts as given: finite and not negative, else none.
    fn clean(self) -> Self {
        let c = |v: f64| if v.is_finite() && v >= 0.0 { v } else { 0.0 };
        Recorded {
            eqns: c(self.eqns),
            iterations: c(self.iterations),
            bytes: c(self.bytes),
        }
    }
}

/// The kernel calls (devices x grid points) of recording `what` on `devices` devices over
/// `grid`, and how messages name them.
fn recording_calls(what: &str, devices: usize, grid: &[usize]) -> Result<(f64, String)> {
    let points = grid
        .iter()
        .try_fold(1u64, |acc, &g| acc.checked_mul(g as u64))
        .ok_or_else(|| {
            Error::TooLarge(format!(
                "`{what}` has a grid of {grid:?}: more grid points than can be counted"
            ))
        })?;
    let calls = devices as f64 * points as f64;
    let shown = format!(
        "recording `{what}` on {devices} device{} x {points} grid points ({} kernel calls)",
        if devices == 1 { "" } else { "s" },
        crate::units::count(calls)
    );
    Ok((calls, shown))
}

/// Refuses to record kernel `what` on `devices` devices over `grid` (a front end that
/// runs the kernel's code once per device and grid point asks before the first call,
/// then again as it counts the calls): the calls would take longer than the time limit
/// at what each was counted to evaluate (`per_call`, the mean of the calls so far;
/// before any, a kernel that does nothing), or their records ([`RECORD_BYTES_PER_POINT`]
/// each, plus what the calls' records were counted to take) would not fit in memory.
/// The message gives the estimate and the most grid points that fit.
pub fn ensure_recording_fits(
    what: &str,
    devices: usize,
    grid: &[usize],
    per_call: Option<Recorded>,
) -> Result<()> {
    let (calls, shown) = recording_calls(what, devices, grid)?;
    let per_call = per_call.unwrap_or_default().clean();
    let each = RECORD_SECONDS_PER_POINT + per_call.seconds();
    let bytes = RECORD_BYTES_PER_POINT + per_call.bytes;
    let most = |per_call: f64, budget: f64| {
        let per_point = per_call * devices.max(1) as f64;
        (budget / per_point).floor()
    };
    if let Some(avail) = super::memory::available()? {
        if calls * bytes > avail.bytes as f64 {
            return Err(Error::TooLarge(format!(
                "not enough memory: {shown} needs at least {} for its records ({} per call), but {} are available ({}); the most grid points that fit are {}",
                crate::units::bytes(calls * bytes),
                crate::units::bytes(bytes),
                crate::units::bytes(avail.bytes as f64),
                avail.source,
                most(bytes, avail.bytes as f64)
            )));
        }
    }
    let limit = time_limit()?;
    if calls * each > limit.seconds {
        return Err(Error::TooLarge(format!(
            "too long: {shown} would take about {} ({} each), beyond the time limit of {} ({}); the most grid points that fit are {}",
            crate::units::seconds(calls * each),
            crate::units::seconds(each),
            crate::units::seconds(limit.seconds),
            limit.source,
            most(each, limit.seconds)
        )));
    }
    Ok(())
}

/// A loop the front end is recording: where it is, its trip count, and how many times
/// it runs in each kernel call (the product of the trip counts of the loops around it).
#[derive(Clone, Copy, Debug)]
pub struct RecordedLoop<'a> {
    /// `kernel.py:12`.
    pub at: &'a str,
    /// Its trip count.
    pub count: u64,
    /// How many times one kernel call runs it (1 outside other loops).
    pub runs: f64,
}

/// Refuses to record loop `lp` of kernel `what` (on `devices` devices over `grid`) once
/// its first iterations are counted (`per_iteration`: their mean): the loop is taken to
/// run at every kernel call, as the kernel's code is the same at every device and grid
/// point, and refused when it would take longer than the time limit (asked first: its
/// answer depends on counts alone), or its records would not fit in memory. The message gives the estimate and the largest trip count
/// that fits; the answer depends on counts only, so it is the same in every run.
pub fn ensure_loop_fits(
    what: &str,
    devices: usize,
    grid: &[usize],
    lp: RecordedLoop,
    per_iteration: Recorded,
) -> Result<()> {
    let (calls, shown) = recording_calls(what, devices, grid)?;
    let per = per_iteration.clean();
    let runs = calls * lp.runs.max(1.0);
    let iterations = runs * lp.count as f64;
    let each = per.seconds().max(RECORD_SECONDS_PER_ITERATION);
    let count = lp.count;
    let the_loop = format!(
        "the loop at {} ({count} iterations{}, at each of the kernel calls of {shown})",
        lp.at,
        if lp.runs > 1.0 {
            format!(" {} times a call", crate::units::count(lp.runs))
        } else {
            String::new()
        }
    );
    // The largest trip count whose iterations fit `budget` at `per` each, the calls'
    // own cost taken first.
    let largest = |per: f64, budget: f64| ((budget / runs) / per).floor().max(0.0);
    let limit = time_limit()?;
    let base = calls * RECORD_SECONDS_PER_POINT;
    if base + iterations * each > limit.seconds {
        return Err(Error::TooLarge(format!(
            "too long: {the_loop} would take about {} ({} an iteration), beyond the time limit of {} ({}); the largest count that fits is {}",
            crate::units::seconds(base + iterations * each),
            crate::units::seconds(each),
            crate::units::seconds(limit.seconds),
            limit.source,
            largest(each, limit.seconds - base)
        )));
    }
    if let Some(avail) = super::memory::available()? {
        let held = calls * RECORD_BYTES_PER_POINT;
        if per.bytes > 0.0 && held + iterations * per.bytes > avail.bytes as f64 {
            return Err(Error::TooLarge(format!(
                "not enough memory: {the_loop} needs at least {} for its records ({} an iteration), but {} are available ({}); the largest count that fits is {}",
                crate::units::bytes(held + iterations * per.bytes),
                crate::units::bytes(per.bytes),
                crate::units::bytes(avail.bytes as f64),
                avail.source,
                largest(per.bytes, avail.bytes as f64 - held)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::census::Traced;

    fn census(p: f64, ops: f64) -> Census {
        Census {
            devices: p,
            grid_points: 1.0,
            sem_slots: 4.0,
            alloc_bytes: 4096.0,
            pooled_bytes: 4096.0,
            alloc_elems: 1024.0,
            largest_alloc: 1024.0,
            input_bytes: 4096.0,
            output_bytes: 4096.0,
            copies: 0.0,
            invocations: 1.0,
            traced: Some(Traced {
                ops,
                dmas: ops / 4.0,
                dma_runs: ops / 4.0,
                computes: ops / 8.0,
                signals: 0.0,
                marks: 0.0,
            }),
        }
    }

    #[test]
    fn counts_scale_the_estimate_and_the_largest_count_fits() {
        let c = census(4.0, 32.0);
        let one = time(
            &c,
            Work::Check {
                schedules: 1,
                deterministic: false,
            },
        );
        let many = time(
            &c,
            Work::Check {
                schedules: 1_000_000_000,
                deterministic: true,
            },
        );
        assert!(many.seconds() > 1e8 * one.terms[0].each, "{many:?}");
        let term = *many.dominant().unwrap();
        assert_eq!(term.flag, "--schedules");
        let n = many.largest(&term, 600.0);
        let fitted = time(
            &c,
            Work::Check {
                schedules: n as u64,
                deterministic: true,
            },
        );
        assert!(fitted.seconds() <= 600.0, "{fitted:?}");
        let over = time(
            &c,
            Work::Check {
                schedules: n as u64 + 1,
                deterministic: true,
            },
        );
        assert!(over.seconds() > 600.0, "{over:?}");
    }

    #[test]
    fn the_bench_names_the_count_that_dominates() {
        let c = census(4.0, 32.0);
        let t = time(
            &c,
            Work::Bench {
                buffers: crate::budget::Buffers::Host,
                gpu: false,
                iters: 10,
                warmup: 2,
                checks: 1_000_000_000,
                chunked: false,
            },
        );
        assert_eq!(t.dominant().unwrap().flag, "-c");
    }

    #[test]
    fn recording_a_huge_grid_is_refused_before_it_starts() {
        let eqns = |n: f64| Recorded {
            eqns: n,
            ..Recorded::default()
        };
        let e = ensure_recording_fits("k", 4, &[10_000_000], Some(eqns(10.0)))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("too long") && e.contains("4.0e7 kernel calls"),
            "{e}"
        );
        assert!(ensure_recording_fits("k", 4, &[100], None).is_ok());
        let e = ensure_recording_fits("k", 4, &[usize::MAX, 4], None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("more grid points than can be counted"), "{e}");
    }

    #[test]
    fn a_loop_is_refused_with_the_largest_count_that_fits() {
        let per = Recorded {
            eqns: 8.0,
            iterations: 1.0,
            bytes: 0.0,
        };
        let at = |count| RecordedLoop {
            at: "k.py:3",
            count,
            runs: 1.0,
        };
        let e = ensure_loop_fits("k", 4, &[], at(100_000_000), per)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("too long: the loop at k.py:3 (100000000 iterations"),
            "{e}"
        );
        let largest: u64 = e
            .rsplit("the largest count that fits is ")
            .next()
            .unwrap()
            .parse()
            .unwrap();
        // The count stated fits, one more does not (whatever the limit in force).
        assert!(ensure_loop_fits("k", 4, &[], at(largest), per).is_ok());
        assert!(ensure_loop_fits("k", 4, &[], at(largest + 1), per).is_err());
        // Inside another loop of 1000, a thousandth of that.
        let inner = RecordedLoop {
            runs: 1000.0,
            ..at(largest / 1000 + 1)
        };
        assert!(ensure_loop_fits("k", 4, &[], inner, per).is_err());
    }
}
