//! Refusing work that cannot fit, before any of it is planned: the estimate against the
//! host's available memory and the planner's limits, and a message with the numbers and
//! the largest P (and shard size, or iteration count) that would fit.

use super::census::{traces_whole, Census, Traced};
use super::memory::{available, Available};
use super::need::{need_on, Need, Scales, Work};
use super::time::{time, time_limit, Time, TimeLimit};
use crate::error::{Error, Result};
use crate::kernel::PallasCall;
use crate::mesh::Mesh;
use crate::units::{bytes, count};
use std::cell::RefCell;

pub use crate::mesh::MAX_DEVICES;

/// The most traced ops per device the planner supports: the race checker's per-device
/// clocks are 32-bit counters.
pub const MAX_OPS_PER_DEVICE: f64 = (u32::MAX - 1) as f64;

/// The most elements of one allocation `check` supports: the race checker holds an
/// access's element bounds in 32 bits.
pub const MAX_CHECKED_ELEMENTS: f64 = u32::MAX as f64;

/// A command's work on a kernel, at the P asked for and, for the search of what would
/// fit, at any other P.
pub struct Request<'a> {
    /// What is asked, for messages (e.g. "`tpusim run psum` at P=100000, shape 8x128").
    pub what: String,
    /// P asked for.
    pub devices: usize,
    /// The kernel at any P and the mesh it is traced on (an error where it cannot be
    /// built at that P); a sequence's kernels, in order.
    pub build: &'a dyn Fn(usize) -> Result<(Vec<PallasCall>, Mesh)>,
    /// How many times the kernels run back to back (1: once).
    pub repeat: usize,
    /// What the command does with it.
    pub work: Work,
    /// One process, or one rank of a partitioned run.
    pub share: Share,
    /// Counts into a census ([`Census::count_program`]) the kernel lowered on the mesh
    /// [`Request::build`] gives at the P asked for (a single kernel, lowered when first
    /// asked): where the census would trace every point ([`traces_whole`]) it counts
    /// that program instead of tracing the kernel again. False (nothing counted) for a
    /// kernel that cannot be lowered: the census traces it.
    pub lowered: Option<&'a dyn Fn(&mut Census) -> bool>,
}

/// How a command's work is shared: by `ranks` processes of a partitioned run
/// ([`crate::device_sim::ranks`]), `on_host` of them on this host (they share its memory:
/// each may use its share of what the host has available; `TPUSIM_MEMORY_LIMIT` is per
/// process).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    /// Ranks.
    pub ranks: usize,
    /// Ranks on this host.
    pub on_host: usize,
}

impl Default for Share {
    fn default() -> Self {
        Share {
            ranks: 1,
            on_host: 1,
        }
    }
}

impl Share {
    /// The share of a command on `exec`: its ranks, or one process.
    pub fn of(exec: &dyn crate::device_sim::Executor) -> Self {
        exec.ranks().map_or_else(Share::default, |r| Share {
            ranks: r.size(),
            on_host: r.on_host(),
        })
    }

    /// What this rank may use of `avail`: all of an explicit limit, its share of the host's.
    fn of_available(&self, avail: Available) -> Available {
        if self.on_host <= 1 || avail.source.starts_with(super::memory::LIMIT_VAR) {
            return avail;
        }
        Available {
            bytes: avail.bytes / self.on_host as u64,
            source: format!(
                "{}, shared by {} ranks on this host",
                avail.source, self.on_host
            ),
        }
    }
}

/// Traced counts of each kernel of a request, by the size of the mesh they were sampled
/// on: the search of the largest P (or repeat) asks again for meshes it has seen, and
/// rings along an axis are traced on the same ring at every P.
type Samples = RefCell<Vec<(usize, Vec<Option<Traced>>)>>;

/// The need of `req` at `devices` devices: counted from the spec, and only sampled
/// by tracing when the spec's part fits in `limit` (a lower bound otherwise, which is
/// enough to refuse). An error when the kernel cannot be built at that P.
fn estimate_at(req: &Request, devices: usize, limit: Option<f64>, seen: &Samples) -> Result<Need> {
    estimate_repeated(req, devices, limit, req.repeat, seen)
}

/// [`estimate_at`] with the kernels run `repeat` times.
fn estimate_repeated(
    req: &Request,
    devices: usize,
    limit: Option<f64>,
    repeat: usize,
    seen: &Samples,
) -> Result<Need> {
    let (calls, mesh) = (req.build)(devices)?;
    let mut parts: Vec<Census> = calls.iter().map(|c| Census::of_spec(c, devices)).collect();
    let ranks = req.share.ranks;
    let lower = need_on(&Census::sequence(&parts, repeat), req.work, ranks);
    if limit.is_some_and(|l| lower.host() > l) {
        return Ok(lower);
    }
    let cached = seen
        .borrow()
        .iter()
        .find(|(m, _)| *m == mesh.size())
        .map(|(_, t)| t.clone());
    match cached {
        Some(traced) => {
            for (census, t) in parts.iter_mut().zip(traced) {
                census.traced = t;
            }
        }
        None => {
            let points = |c: &PallasCall| c.spec().grid.iter().product::<usize>();
            let lowered = req
                .lowered
                .filter(|_| devices == req.devices && calls.len() == 1)
                .filter(|_| traces_whole(mesh.size(), points(&calls[0])));
            for (census, call) in parts.iter_mut().zip(&calls) {
                if !lowered.is_some_and(|count| count(census)) {
                    census.sample(call, &mesh);
                }
            }
            seen.borrow_mut()
                .push((mesh.size(), parts.iter().map(|c| c.traced).collect()));
        }
    }
    Ok(need_on(&Census::sequence(&parts, repeat), req.work, ranks))
}

fn planner_ok(n: &Need) -> bool {
    n.census.traced.is_none_or(|t| t.ops <= MAX_OPS_PER_DEVICE)
}

/// The limits a need is held to: host memory (`None`: unknown) and time, in seconds.
#[derive(Clone, Copy)]
struct Limits {
    memory: Option<f64>,
    seconds: f64,
}

fn memory_ok(n: &Need, limit: Option<f64>) -> bool {
    limit.is_none_or(|l| n.host() <= l)
}

/// Whether `n` fits the planner's limits and `limit` bytes (ranks are a memory question).
fn memory_fits(n: &Need, limit: Option<f64>) -> bool {
    planner_ok(n) && memory_ok(n, limit)
}

fn fits(req: &Request, n: &Need, limits: Limits) -> bool {
    memory_fits(n, limits.memory) && time(&n.census, req.work).seconds() <= limits.seconds
}

/// Checks that `req` fits in this machine's memory, the time limit and the planner's
/// limits, and returns its estimated need; else [`Error::TooLarge`] with the numbers
/// and the largest P (shard size, iterations, schedules) that would fit.
pub fn ensure_fits(req: &Request) -> Result<Need> {
    let avail = available()?.map(|a| req.share.of_available(a));
    ensure_fits_within(req, avail.as_ref(), &time_limit()?)
}

/// How many ranks of this process's size (each with the memory this process may use)
/// `req` needs at its P, and one rank's need there: the fewest whose share fits.
/// [`Error::TooLarge`] when even one device per rank does not fit.
pub fn ranks_needed(req: &Request) -> Result<(usize, Need, Option<Available>)> {
    let avail = available()?;
    let limit = avail.as_ref().map(|a| a.bytes as f64);
    let p = req.devices;
    if p > MAX_DEVICES {
        return Err(Error::TooLarge(format!(
            "{}: P={p} is beyond what the planner supports (at most {MAX_DEVICES} devices)",
            req.what
        )));
    }
    let census = census_on_ranks(req, limit)?;
    let at = |r: usize| need_on(&census, req.work, r);
    if !planner_ok(&at(1)) {
        return Err(Error::TooLarge(format!(
            "{}: {} traced ops per device is beyond what the planner supports (at most {MAX_OPS_PER_DEVICE}), on any number of ranks",
            req.what,
            count(census.traced.map_or(0.0, |t| t.ops)),
        )));
    }
    let most = at(p);
    if !memory_fits(&most, limit) {
        let avail = avail.expect("a need only fails to fit a known limit");
        return Err(Error::TooLarge(format!(
            "not enough memory: {} needs about {} of host memory per rank even on {p} ranks of one device each, but {} {} ({}); no number of ranks of this size fits it",
            req.what,
            bytes(most.host()),
            bytes(avail.bytes as f64),
            if avail.source.starts_with(super::memory::LIMIT_VAR) {
                "are allowed"
            } else {
                "are available"
            },
            avail.source,
        )));
    }
    let r = fewest_fitting(&census, req.work, p, limit);
    Ok((r, at(r), avail))
}

/// The census of `req` for a partitioned run: estimated at one device per rank, the
/// share whose need is the least, so that the spec-only lower bound refuses (within
/// `limit`) before tracing a kernel no number of ranks could hold (tracing it would
/// allocate in proportion to its shapes).
fn census_on_ranks(req: &Request, limit: Option<f64>) -> Result<Census> {
    let one = Request {
        what: req.what.clone(),
        devices: req.devices,
        build: req.build,
        repeat: req.repeat,
        work: req.work,
        share: Share {
            ranks: req.devices.max(1),
            on_host: 1,
        },
        lowered: req.lowered,
    };
    Ok(estimate_at(&one, req.devices, limit, &Samples::default())?.census)
}

/// The fewest of up to `p` ranks whose need under `census` fits `limit` (needs shrink
/// as ranks grow); `p` when none fewer does.
fn fewest_fitting(census: &Census, work: Work, p: usize, limit: Option<f64>) -> usize {
    largest_below(p, &|x| !memory_fits(&need_on(census, work, x), limit)) + 1
}

/// The fewest ranks of this size that fit `req` in `limit` bytes each, if any does
/// (for messages).
fn fewest_ranks(req: &Request, limit: f64) -> Option<usize> {
    let census = census_on_ranks(req, Some(limit)).ok()?;
    let p = req.devices;
    memory_fits(&need_on(&census, req.work, p.max(1)), Some(limit))
        .then(|| fewest_fitting(&census, req.work, p, Some(limit)))
}

/// [`ensure_fits`] against a given amount of available memory (`None`: unknown, only
/// the planner's limits and the time limit apply).
pub fn ensure_fits_in(req: &Request, avail: Option<&Available>) -> Result<Need> {
    ensure_fits_within(req, avail, &time_limit()?)
}

/// [`ensure_fits`] against given limits of memory and time.
pub fn ensure_fits_within(
    req: &Request,
    avail: Option<&Available>,
    time_limit: &TimeLimit,
) -> Result<Need> {
    let p = req.devices;
    let limits = Limits {
        memory: avail.map(|a| a.bytes as f64),
        seconds: time_limit.seconds,
    };
    let limit = limits.memory;
    if matches!(req.work, Work::Check { .. }) {
        let (calls, _) = (req.build)(p)?;
        let largest = calls
            .iter()
            .map(|c| Census::of_spec(c, p).largest_alloc)
            .fold(0.0, f64::max);
        if largest > MAX_CHECKED_ELEMENTS {
            return Err(Error::TooLarge(format!(
                "{}: an allocation of {} elements is beyond what the race checker supports (at most {MAX_CHECKED_ELEMENTS} elements an allocation)",
                req.what,
                count(largest)
            )));
        }
    }
    if p > MAX_DEVICES {
        let largest = largest_p(req, MAX_DEVICES + 1, limits, &Samples::default());
        return Err(Error::TooLarge(format!(
            "{}: P={p} is beyond what the planner supports (at most {MAX_DEVICES} devices); {}",
            req.what,
            largest_p_text(largest)
        )));
    }
    let seen = Samples::default();
    let n = estimate_at(req, p, limit, &seen)?;
    if fits(req, &n, limits) {
        return Ok(n);
    }
    let largest = largest_p(req, p, limits, &seen);
    let repeats = (req.repeat > 1).then(|| largest_repeat(req, limits, &seen));
    if !planner_ok(&n) {
        let ops = n.census.traced.map_or(0.0, |t| t.ops);
        return Err(Error::TooLarge(format!(
            "{}: {} traced ops per device is beyond what the planner supports (at most {MAX_OPS_PER_DEVICE}); {}{}",
            req.what,
            count(ops),
            largest_p_text(largest),
            repeat_text(repeats)
        )));
    }
    if !memory_ok(&n, limit) {
        let avail = avail.expect("a need only fails to fit a known limit");
        return Err(Error::TooLarge(
            message(req, &n, avail, largest) + &repeat_text(repeats),
        ));
    }
    let t = time(&n.census, req.work);
    Err(Error::TooLarge(
        time_message(req, &t, time_limit, largest) + &repeat_text(repeats),
    ))
}

/// The largest repeat count below the request's whose need fits at its P (0: none).
fn largest_repeat(req: &Request, limits: Limits, seen: &Samples) -> usize {
    largest_below(req.repeat, &|r| {
        estimate_repeated(req, req.devices, limits.memory, r, seen)
            .is_ok_and(|n| fits(req, &n, limits))
    })
}

/// The largest count below `above` for which `ok` holds (0: none), by bisection: `ok`
/// holds up to some count and fails above it (needs grow with P and repeats).
fn largest_below(above: usize, ok: &dyn Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0usize, above);
    // Invariant: lo fits (or is 0), hi does not.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

fn repeat_text(largest: Option<usize>) -> String {
    match largest {
        Some(0) | None => String::new(),
        Some(r) => format!("; the largest --repeat that fits is {r}"),
    }
}

/// The largest P below `above` whose need fits (0: none), by bisection (needs grow with
/// P). A P the kernel cannot be built at counts as not fitting.
fn largest_p(req: &Request, above: usize, limits: Limits, seen: &Samples) -> usize {
    largest_below(above, &|q| {
        estimate_at(req, q, limits.memory, seen).is_ok_and(|n| fits(req, &n, limits))
    })
}

fn largest_p_text(largest: usize) -> String {
    if largest == 0 {
        "even P=1 does not fit".into()
    } else {
        format!("the largest P that fits is {largest}")
    }
}

/// The refusal of work that fits in memory but not in the time limit: the estimate, what
/// it is made of, and the largest count (and P) that fits.
fn time_message(req: &Request, t: &Time, limit: &TimeLimit, largest: usize) -> String {
    let mut parts: Vec<String> = t
        .terms
        .iter()
        .filter(|x| x.n > 0)
        .map(|x| {
            format!(
                "{} {}: {} of about {}{}",
                x.flag,
                x.n,
                if x.n == 1 {
                    x.unit.trim_end_matches('s')
                } else {
                    x.unit
                },
                crate::units::seconds(x.each),
                if x.n == 1 { "" } else { " each" }
            )
        })
        .collect();
    parts.push(format!(
        "{} to plan {} traced ops",
        crate::units::seconds(t.ops * super::time::PLAN_SECONDS_PER_OP),
        count(t.ops)
    ));
    let mut hints = Vec::new();
    if let Some(d) = t.dominant() {
        let most = t.largest(d, limit.seconds);
        let least = match req.work {
            // A check runs every deterministic schedule: P + 3 of them.
            Work::Check {
                deterministic: true,
                ..
            } => req.devices as f64 + 3.0,
            _ => 1.0,
        };
        if most >= least {
            hints.push(format!("the largest {} that fits is {}", d.flag, most));
        } else if least > 1.0 {
            hints.push(format!(
                "even the {} deterministic schedules a check of P={} runs do not fit \
                 (--replay SPEC checks one)",
                least, req.devices
            ));
        }
    }
    if hints.is_empty() || largest > 0 {
        hints.push(largest_p_text(largest));
    }
    format!(
        "too long: {} would take about {} ({}), beyond the time limit of {} ({}); {}",
        req.what,
        crate::units::seconds(t.seconds()),
        parts.join(", "),
        crate::units::seconds(limit.seconds),
        limit.source,
        hints.join("; ")
    )
}

fn message(req: &Request, n: &Need, avail: &Available, largest: usize) -> String {
    let host = n.host();
    let limit = avail.bytes as f64;
    let mut parts: Vec<String> = n
        .parts
        .iter()
        .filter(|p| !p.on_device && p.bytes >= 0.01 * host)
        .map(|p| format!("{} {}", p.name, bytes(p.bytes)))
        .collect();
    if let Some(t) = n.census.traced {
        parts.push(format!(
            "for {} traced ops and {} DMAs",
            count(t.ops * n.census.devices),
            count(t.dmas * n.census.devices)
        ));
    }
    let mut hints = vec![largest_p_text(largest)];
    match fewest_ranks(req, limit) {
        Some(r) if r > req.share.ranks => hints.push(format!(
            "it needs {r} ranks of this size (`mpirun -np {r}` with a build of --features mpi; `--ranks-needed` tells)"
        )),
        _ => {}
    }
    let knob = |s: Scales| {
        let rest = host - n.host_scaling(s);
        let part = n.host_scaling(s);
        (part > 0.0 && rest < limit).then(|| (limit - rest) / part)
    };
    if let Some(f) = knob(Scales::Data) {
        let shard = n.census.input_bytes * f;
        if shard >= 4.0 {
            hints.push(format!(
                "at P={} the largest shard that fits is about {} per device",
                req.devices,
                bytes(shard)
            ));
        }
    }
    if let Work::Bench { iters, warmup, .. } = req.work {
        if let Some(f) = knob(Scales::Iterations) {
            let most = (iters.max(warmup) as f64 * f).floor();
            if most >= 1.0 {
                hints.push(format!("the largest -n / -w that fits is {most}"));
            }
        }
    }
    format!(
        "not enough memory: {} needs {} {} of host memory ({}), but {} {} ({}); {}",
        req.what,
        // Unsampled, the traced program is left out: a lower bound.
        if n.census.traced.is_some() {
            "about"
        } else {
            "at least"
        },
        bytes(host),
        parts.join(", "),
        bytes(limit),
        if avail.source.starts_with(super::memory::LIMIT_VAR) {
            "are allowed"
        } else {
            "are available"
        },
        avail.source,
        hints.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::need::Buffers;
    use crate::collectives;
    use crate::DType;

    fn psum_request(
        p: usize,
        build: &dyn Fn(usize) -> Result<(Vec<PallasCall>, Mesh)>,
    ) -> Request<'_> {
        Request {
            what: format!("`psum` at P={p}"),
            devices: p,
            build,
            repeat: 1,
            share: Share::default(),
            lowered: None,
            work: Work::Run {
                buffers: Buffers::Host,
                gpu: false,
                model: false,
                timeline: false,
                chunked: false,
            },
        }
    }

    fn psum(q: usize) -> Result<(Vec<PallasCall>, Mesh)> {
        let mesh = Mesh::new(q, "x")?;
        let call =
            collectives::Registry::builtin()
                .by_name("psum")?
                .call(&mesh, &[8, 128], DType::F32)?;
        Ok((vec![call], mesh))
    }

    #[test]
    fn refuses_with_the_largest_p_that_fits() {
        let avail = Available {
            bytes: 64 << 20,
            source: "a test".into(),
        };
        let small = psum_request(8, &psum);
        assert!(ensure_fits_in(&small, Some(&avail)).is_ok());
        let big = psum_request(100_000, &psum);
        let e = ensure_fits_in(&big, Some(&avail)).unwrap_err().to_string();
        assert!(
            e.contains("not enough memory") && e.contains("64.0 MiB"),
            "{e}"
        );
        let largest: usize = e
            .split("the largest P that fits is ")
            .nth(1)
            .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{e}"));
        // The answer is the boundary: it fits, one more does not.
        let at = |q| ensure_fits_in(&psum_request(q, &psum), Some(&avail));
        assert!(at(largest).is_ok(), "{e}");
        assert!(at(largest + 1).is_err(), "{e}");
        assert!((50..1000).contains(&largest), "{e}");
    }

    #[test]
    fn the_planner_limit_applies_without_a_memory_figure() {
        let req = psum_request(MAX_DEVICES + 1, &psum);
        let e = ensure_fits_in(&req, None).unwrap_err().to_string();
        assert!(e.contains("beyond what the planner supports"), "{e}");
    }
}
