//! `tpusim bench`: nccl-tests-style size sweeps. Each size's schedule is built once and
//! reused for every iteration; on the GPU, warm-up and timed iterations each run as one
//! submission from prepared commands, and buffers come from a pool warmed at the largest
//! size, so a sweep does not reallocate per size.

use crate::array::DType;
use crate::budget::{Need, Work};
use crate::device_sim::{count_wrong, Executor};
use crate::error::{Error, Result};
use crate::ir::{Program, Schedule};
use crate::model::{bus_factor, CostModel};
use crate::run::Job;
use crate::sched::ScheduleSpec;
use crate::units::human;
pub use crate::units::parse_size;
use serde_json::{json, Value};

mod meta;
mod rates;
pub use meta::{results, Asked, Ran, VERSION};
pub use rates::{BySize, InCache, Rates, MATMUL_SHAPES, MOST_FOOTPRINT_BYTES, RATE_SIZES};

/// What to sweep.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// Devices.
    pub devices: usize,
    /// Smallest size in bytes (nccl-tests' size for the collective).
    pub min_bytes: u64,
    /// Largest size in bytes.
    pub max_bytes: u64,
    /// Multiply the size by this between steps (at least 2).
    pub factor: u64,
    /// Timed iterations per size.
    pub iters: usize,
    /// Warm-up iterations per size.
    pub warmup: usize,
    /// Check iterations per size (each read back and compared with the reference).
    pub checks: usize,
    /// Element type.
    pub dtype: DType,
    /// The schedule every size runs (built once per size).
    pub schedule: ScheduleSpec,
}

/// One line of the table.
#[derive(Clone, Debug)]
pub struct BenchRow {
    /// Collective.
    pub collective: String,
    /// Size in bytes (nccl-tests' definition).
    pub size: u64,
    /// Elements in one device's input.
    pub count: usize,
    /// Seconds per iteration.
    pub seconds: f64,
    /// size / time.
    pub algbw: f64,
    /// algbw × nccl-tests' bus factor.
    pub busbw: f64,
    /// Wrong elements over the check iterations (`None`: no check iteration ran).
    pub wrong: Option<usize>,
    /// Copy-equivalent bytes the schedule moves per iteration (an accumulate counts as
    /// reading two elements and writing one), per second.
    pub moved_bw: f64,
    /// The least seconds an iteration can take on this executor ([`roof`]).
    pub roof_seconds: f64,
    /// The rates the roof was computed from.
    pub rates: Rates,
    /// The bytes of buffers its data rates were measured over ([`Rates::over`]: the
    /// largest measured footprint at most that of the schedule's buffers here).
    pub rates_footprint: u64,
    /// Multiply-adds of the schedule's matmuls, every device's (0: it computes none).
    pub macs: u64,
    /// On ranks ([`crate::device_sim::ranks`]): bytes that crossed ranks per iteration and
    /// each rank's busy share of the timed run.
    pub ranks: Option<RankShare>,
}

impl BenchRow {
    /// The FLOP/s this executor reached on the schedule's matmuls (2 per multiply-add,
    /// every simulated device's together: they all ran on this adapter), if it has any.
    pub fn flops(&self) -> Option<f64> {
        (self.macs > 0).then(|| 2.0 * self.macs as f64 / self.seconds)
    }
}

/// What a bench row on ranks adds: what the partition costs.
#[derive(Clone, Debug, PartialEq)]
pub struct RankShare {
    /// Bytes sent from one rank to another per iteration.
    pub crossed_bytes: u64,
    /// Per rank, the fraction of the timed run's wall time it ran its own ops (the rest
    /// it waited for messages).
    pub busy: Vec<f64>,
}

impl BenchRow {
    /// The row as JSON.
    pub fn json(&self) -> Value {
        let mut v = json!({
            "collective": self.collective,
            "size": self.size,
            "count": self.count,
            "time_us": self.seconds * 1e6,
            "algbw_gbps": self.algbw / 1e9,
            "busbw_gbps": self.busbw / 1e9,
            "wrong": self.wrong,
            "moved_gbps": self.moved_bw / 1e9,
            "roof_us": self.roof_seconds * 1e6,
            "roof_fraction": self.roof_seconds / self.seconds,
            "rates": {
                "copy_gbps": self.rates.copy / 1e9,
                "accumulate_gbps": self.rates.accumulate / 1e9,
                "fill_gbps": self.rates.fill / 1e9,
                "zero_gbps": self.rates.zero / 1e9,
                "matmul_tflops": self.rates.matmul / 1e12,
                "vector_gops": self.rates.vector / 1e9,
                "fixed_us": self.rates.fixed * 1e6,
                "data_footprint_bytes": self.rates_footprint,
                "in_cache_gbps": {
                    "copy": self.rates.in_cache.copy / 1e9,
                    "accumulate": self.rates.in_cache.accumulate / 1e9,
                    "fill": self.rates.in_cache.fill / 1e9,
                    "zero": self.rates.in_cache.zero / 1e9,
                },
                "by_size_gbps": self.rates.by_size.points().iter().map(|(b, r)| json!({
                    "bytes": b,
                    "copy": r[0] / 1e9,
                    "accumulate": r[1] / 1e9,
                    "fill": r[2] / 1e9,
                    "zero": r[3] / 1e9,
                })).collect::<Vec<_>>(),
            },
            "macs": self.macs,
            "tflops": self.flops().map(|f| f / 1e12),
        });
        if let Some(r) = &self.ranks {
            v["crossed_bytes"] = json!(r.crossed_bytes);
            v["rank_busy"] = json!(r.busy);
        }
        v
    }
}

impl serde::Serialize for BenchRow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.json().serialize(s)
    }
}

impl BenchConfig {
    /// Checks the ranges: at least one timed iteration, a factor of at least 2, sizes in
    /// order, a schedule that names a device of the mesh.
    pub fn validate(&self) -> Result<()> {
        if self.iters == 0 {
            return Err(Error::bad_input("-n (timed iterations) must be at least 1"));
        }
        self.schedule.validate(self.devices)?;
        sizes(self).map(drop)
    }
}

/// The sizes of a sweep.
pub fn sizes(cfg: &BenchConfig) -> Result<Vec<u64>> {
    if cfg.min_bytes > cfg.max_bytes {
        return Err(Error::bad_input(format!(
            "minimum size {} is above the maximum {}",
            cfg.min_bytes, cfg.max_bytes
        )));
    }
    if cfg.factor < 2 {
        return Err(Error::bad_input("the size factor -f must be at least 2"));
    }
    let mut v = vec![cfg.min_bytes];
    while let Some(&last) = v.last() {
        match last.checked_mul(cfg.factor) {
            Some(n) if n <= cfg.max_bytes => v.push(n),
            _ => break,
        }
    }
    Ok(v)
}

/// What a sweep reports as it goes.
#[derive(Clone, Copy, Debug)]
pub enum Progress<'a> {
    /// About to run this size (a short status line).
    Size(&'a str),
    /// This size was skipped, and why.
    Skipped(&'a str),
}

/// The job of `job`'s kernel at nccl-tests' size `size` for this sweep (`None`: the
/// size is too small to split over the devices one instance spans).
fn at_size(job: &Job, cfg: &BenchConfig, size: u64) -> Result<Option<Job>> {
    let c = job.collective_of().ok_or_else(|| {
        Error::bad_input(format!(
            "`{}` is a kernel of your own: bench sweeps the sizes of a collective",
            job.name()
        ))
    })?;
    Ok(c.bench_shape(job.place().devices(), size, cfg.dtype)
        .map(|s| {
            job.clone()
                .with_shape(&s)
                .with_dtype(cfg.dtype)
                .with_schedule(cfg.schedule)
        }))
}

/// The sweep's largest size of `job` and its work, with the buffers on `exec` (or,
/// before an adapter is opened, in GPU memory when `gpu`); `None` when every size is
/// skipped.
pub fn largest(
    job: &Job,
    cfg: &BenchConfig,
    gpu: bool,
    host_buffers: bool,
) -> Result<Option<(Job, Work)>> {
    let work = Work::Bench {
        buffers: if host_buffers {
            crate::budget::Buffers::Host
        } else {
            crate::budget::Buffers::Device
        },
        gpu,
        iters: cfg.iters as u64,
        warmup: cfg.warmup as u64,
        checks: cfg.checks as u64,
        chunked: false,
    };
    Ok(at_size(job, cfg, cfg.max_bytes)?.map(|j| (j, work)))
}

/// Refuses the sweep of `job` when its largest size cannot fit this machine, with the
/// buffers on `exec` (or, before an adapter is opened, in GPU memory when `gpu`).
pub fn ensure_fits(
    job: &Job,
    cfg: &BenchConfig,
    gpu: bool,
    host_buffers: bool,
) -> Result<Option<Need>> {
    let Some((largest, work)) = largest(job, cfg, gpu, host_buffers)? else {
        return Ok(None); // every size is skipped, and says so
    };
    largest
        .ensure_fits_noted(
            work,
            &format!(", the sweep's largest size ({})", human(cfg.max_bytes)),
        )
        .map(Some)
}

/// Runs the sweep of `job`'s collective on `exec` (on a multi-axis mesh: sizes, bus
/// factors and references are those of one instance of the kernel, a group's along an
/// axis). `progress` hears about each size before it runs, and about sizes it skips.
pub fn sweep(
    job: &Job,
    cfg: &BenchConfig,
    exec: &dyn Executor,
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<BenchRow>> {
    cfg.validate()?;
    let place = job.place();
    if place.mesh.size() != cfg.devices {
        return Err(Error::bad_input(format!(
            "the bench is configured for {} devices but the mesh has {}",
            cfg.devices,
            place.mesh.size()
        )));
    }
    let job = &job.clone().on_ranks(crate::budget::Share::of(exec));
    ensure_fits(job, cfg, exec.is_gpu(), exec.buffers_in_host_memory())?;
    let p = place.devices();
    let sizes = sizes(cfg)?;
    let name = job.name();
    if let Some(&max) = sizes.last() {
        // Warm the executor at the largest size (the GPU pools its buffers).
        if let Some(j) = at_size(job, cfg, max)? {
            let plan = j.plan()?;
            exec.check(&plan.program)?;
            drop(exec.prepare(&plan.program, &plan.schedule)?);
        }
    }
    let mut rows = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        progress(Progress::Size(&format!(
            "[{}/{}] {name} {}",
            i + 1,
            sizes.len(),
            human(size)
        )));
        let Some(j) = at_size(job, cfg, size)? else {
            progress(Progress::Skipped(&format!(
                "{name} {}: too small to split over P={p} devices",
                human(size)
            )));
            continue;
        };
        let plan = j.plan()?;
        let (program, sched) = (&plan.program, &plan.schedule);
        // Elements of one device's (first) input.
        let count = program
            .inputs
            .first()
            .map_or(0, |&a| program.layout.allocs[a].numel());
        exec.check(program)?;
        // On ranks, each makes and keeps its own devices' inputs and expected results.
        let held = match exec.ranks() {
            Some(r) => r.held(program.devices)?,
            None => 0..program.devices,
        };
        // The memory this process's devices hold: beyond the caches, the roof's data
        // rates are measured over as much memory (`Rates::over`).
        let per_device: u64 = sched.allocations(program).iter().map(|a| a.bytes()).sum();
        let footprint = per_device * held.len() as u64;
        let (inputs, expected) = j.held_data(program, size, held, cfg.checks > 0)?;
        let mut wrong = (cfg.checks > 0).then_some(0);
        let mut run = exec.prepare(program, sched)?;
        run.upload(&inputs)?;
        if cfg.warmup > 0 {
            run.run(cfg.warmup)?;
        }
        let seconds = run.run(cfg.iters)?.as_secs_f64() / cfg.iters as f64;
        let share = exec.ranks().map(|r| {
            let last = r.last_run();
            RankShare {
                crossed_bytes: last.crossed_bytes() / cfg.iters as u64,
                busy: last.busy_fractions(),
            }
        });
        if let Some(want) = &expected {
            for _ in 0..cfg.checks {
                run.run(1)?;
                let got = run.read_held_outputs()?;
                *wrong.get_or_insert(0) += count_wrong(&got, want, j.tolerance());
            }
            if let (Some(r), Some(w)) = (exec.ranks(), wrong.as_mut()) {
                *w = r.sum(*w as u64)? as usize;
            }
        }
        drop(run);
        let shard_bytes = (count * cfg.dtype.size()) as u64;
        let inner = exec.inner().unwrap_or(exec);
        let mut rates = Rates::best(inner, cfg.dtype)?.over(inner, cfg.dtype, footprint, false)?;
        let mut roof_seconds = roof(exec, &rates, sched, program, cfg.iters)?;
        // A run faster than its roof means a rate measurement came out slow: measure
        // again (at most twice), keeping the best of all measurements. (On ranks every
        // rank has the same roof and time, so all of them measure again or none.)
        for _ in 0..2 {
            if roof_seconds <= seconds {
                break;
            }
            rates =
                Rates::measure_again(inner, cfg.dtype)?.over(inner, cfg.dtype, footprint, true)?;
            roof_seconds = roof(exec, &rates, sched, program, cfg.iters)?;
        }
        let traffic = j
            .collective_of()
            .map(|c| c.traffic())
            .expect("a bench job runs a collective");
        let measured = traffic.size(p, shard_bytes);
        // An iteration of a sequence (`--repeat K`) runs the collective K times.
        let algbw = measured as f64 * j.invocations() as f64 / seconds;
        rows.push(BenchRow {
            collective: name.clone(),
            size: measured,
            count,
            seconds,
            algbw,
            busbw: algbw * bus_factor(traffic, p),
            wrong,
            moved_bw: sched.copy_equivalent_bytes(program) / seconds,
            roof_seconds,
            rates,
            rates_footprint: Rates::footprint_point(footprint),
            macs: sched.ops.iter().map(|o| o.work().macs).sum(),
            ranks: share,
        });
    }
    Ok(rows)
}

/// The least seconds one iteration of `sched` can take on `exec`
/// ([`Rates::roofline_blocked`] at `rates`, this process's, over the stretches `exec`
/// runs a block at a time, without the ops it skips: [`Executor::skipped_ops`], the
/// devices it runs side by side sharing the work: [`Executor::side_by_side`]). On ranks (whose pieces run unblocked) ([`crate::device_sim::ranks`]) the ranks run
/// concurrently, each its own ops on its own executor, and the iteration ends when the
/// last rank's does: an iteration takes at least, on every rank, the roof of the ops that
/// rank runs (its [`crate::device_sim::ranks::plan::RankPlan`]'s local schedule) at that rank's
/// own rates, so the largest of these over the ranks is the bound (a collective call:
/// every rank gets it). The messages between ranks are not counted: they only add time.
pub fn roof(
    exec: &dyn Executor,
    rates: &Rates,
    sched: &Schedule,
    program: &Program,
    iters: usize,
) -> Result<f64> {
    let Some(r) = exec.ranks() else {
        let blocked = exec.blocked_stretches(program, sched);
        let skipped = exec.skipped_ops(program, sched);
        let lanes = exec.side_by_side(program, sched);
        return Ok(rates.roofline_blocked(sched, program, iters, &blocked, &skipped, lanes));
    };
    let part = r.partition(program.devices)?;
    let plan = crate::device_sim::ranks::plan::RankPlan::new(program, sched, &part, r.rank())?;
    r.max(rates.roofline(&plan.schedule, &plan.program, iters))
}

/// One line of the modeled table: the collective on the cost model's clock.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRow {
    /// Collective.
    pub collective: String,
    /// Size in bytes (nccl-tests' definition).
    pub size: u64,
    /// Elements in one device's input.
    pub count: usize,
    /// Modeled seconds per iteration.
    pub seconds: f64,
    /// size / time.
    pub algbw: f64,
    /// algbw × nccl-tests' bus factor.
    pub busbw: f64,
    /// The bandwidth bound of a ring on one link direction, seconds.
    pub ideal_seconds: f64,
    /// The wiring the model used.
    pub topology: String,
}

impl ModelRow {
    /// The row as JSON.
    pub fn json(&self) -> Value {
        json!({
            "collective": self.collective,
            "size": self.size,
            "count": self.count,
            "time_us": self.seconds * 1e6,
            "algbw_gbps": self.algbw / 1e9,
            "busbw_gbps": self.busbw / 1e9,
            "ideal_us": self.ideal_seconds * 1e6,
            "topology": self.topology,
        })
    }
}

impl serde::Serialize for ModelRow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.json().serialize(s)
    }
}

/// The sweep of `job`'s collective on the cost model `model`'s clock: nccl-tests' table of
/// the modeled TPU (nothing runs on an executor; `cfg`'s iterations do not apply, the
/// model's clock has no noise). A size whose VMEM does not fit the model's chip is
/// skipped, with the reason told to `progress`.
pub fn sweep_model(
    job: &Job,
    cfg: &BenchConfig,
    model: &CostModel,
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<ModelRow>> {
    cfg.validate()?;
    let p = job.place().devices();
    let sizes = sizes(cfg)?;
    let name = job.name();
    let mut rows = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        progress(Progress::Size(&format!(
            "[{}/{}] {name} {} on {}",
            i + 1,
            sizes.len(),
            human(size),
            model.name
        )));
        let Some(j) = at_size(job, cfg, size)? else {
            progress(Progress::Skipped(&format!(
                "{name} {}: too small to split over P={p} devices",
                human(size)
            )));
            continue;
        };
        // A kernel that keeps its shard in VMEM cannot run at sizes beyond the chip's
        // VMEM: that size is skipped, as the chip would refuse it, and the sweep goes on.
        if let Err(e) = model.check_vmem(&j.lower()?) {
            progress(Progress::Skipped(&format!("{name} {}: {e}", human(size))));
            continue;
        }
        let m = j.model(model, None)?;
        let n = m
            .nccl
            .as_ref()
            .expect("a bench job runs a collective, which has a traffic class");
        rows.push(ModelRow {
            collective: name.clone(),
            size: n.size,
            count: j.shape().iter().product(),
            seconds: m.seconds,
            algbw: n.algbw,
            busbw: n.busbw,
            ideal_seconds: n.ideal_seconds,
            topology: m.topology.to_string(),
        });
    }
    Ok(rows)
}

/// The modeled table's header.
pub fn model_header() -> String {
    format!(
        "{:<20} {:>10} {:>12} {:>11} {:>12} {:>12} {:>10} {:>7}",
        "collective",
        "size",
        "count",
        "time(us)",
        "algbw(GB/s)",
        "busbw(GB/s)",
        "ideal(us)",
        "%ideal"
    )
}

/// One modeled table line.
pub fn model_line(r: &ModelRow) -> String {
    format!(
        "{:<20} {:>10} {:>12} {:>11.3} {:>12.3} {:>12.3} {:>10.3} {:>7.0}",
        r.collective,
        r.size,
        r.count,
        r.seconds * 1e6,
        r.algbw / 1e9,
        r.busbw / 1e9,
        r.ideal_seconds * 1e6,
        100.0 * r.ideal_seconds / r.seconds.max(f64::MIN_POSITIVE)
    )
}

/// The current time in UTC as ISO 8601 (`2026-12-01T23:45:07Z`), for result files.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc(secs)
}

/// `secs` since the Unix epoch as ISO 8601 in UTC (Howard Hinnant's civil-from-days).
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The columns a table on ranks adds to [`header`]: megabytes that crossed ranks per
/// iteration, and each rank's busy share of the run (percent, in rank order).
pub fn rank_header() -> String {
    format!(" {:>12} {}", "xrank(MB)", "busy%/rank")
}

/// The nccl-tests-style table header.
pub fn header() -> String {
    format!(
        "{:<21} {:>10} {:>12} {:>11} {:>12} {:>12} {:>7} {:>12} {:>10} {:>6} {:>9}",
        "collective",
        "size",
        "count",
        "time(us)",
        "algbw(GB/s)",
        "busbw(GB/s)",
        "#wrong",
        "moved(GB/s)",
        "roof(us)",
        "%roof",
        "TFLOP/s"
    )
}

/// One table line.
pub fn line(r: &BenchRow) -> String {
    let ranks = r.ranks.as_ref().map_or_else(String::new, |s| {
        let busy: Vec<String> = s.busy.iter().map(|b| format!("{:.0}", 100.0 * b)).collect();
        format!(" {:>12.1} {}", s.crossed_bytes as f64 / 1e6, busy.join("/"))
    });
    format!(
        "{:<21} {:>10} {:>12} {:>11.1} {:>12.3} {:>12.3} {:>7} {:>12.3} {:>10.1} {:>6.0} {:>9}{ranks}",
        r.collective,
        r.size,
        r.count,
        r.seconds * 1e6,
        r.algbw / 1e9,
        r.busbw / 1e9,
        r.wrong.map_or("-".into(), |w| w.to_string()),
        r.moved_bw / 1e9,
        r.roof_seconds * 1e6,
        100.0 * r.roof_seconds / r.seconds,
        r.flops().map_or("-".into(), |f| format!("{:.4}", f / 1e12))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_sweep_by_the_factor() {
        let cfg = BenchConfig {
            devices: 4,
            min_bytes: 1024,
            max_bytes: 64 << 10,
            factor: 4,
            iters: 1,
            warmup: 0,
            checks: 0,
            dtype: DType::F32,
            schedule: ScheduleSpec::Eager,
        };
        assert_eq!(sizes(&cfg).unwrap(), vec![1024, 4096, 16384, 65536]);
    }

    /// A schedule's data rates are measured over the largest footprint at most its own
    /// (twice an op of `RATE_SIZES` up to their largest, then powers of two up to the cap).
    #[test]
    fn the_roof_rates_footprint_is_the_largest_measured_at_most_the_schedules() {
        use super::rates::{MOST_FOOTPRINT_BYTES, RATE_SIZES};
        let point = Rates::footprint_point;
        assert_eq!(point(1), 2 * RATE_SIZES[0]);
        for f in [
            8 << 10,
            100 << 10,
            3 << 20,
            40 << 20,
            41 << 20,
            100 << 20,
            5 << 30,
        ] {
            let p = point(f);
            assert!(p <= f, "{f}: {p}");
            let measured = RATE_SIZES.iter().any(|b| 2 * b == p) || p.is_power_of_two();
            assert!(measured && p <= MOST_FOOTPRINT_BYTES, "{f}: {p}");
            // Nothing measured lies between it and the footprint.
            let between = RATE_SIZES.iter().any(|b| p < 2 * b && 2 * b <= f);
            assert!(!between, "{f}: {p}");
        }
        assert_eq!(point(40 << 20), 40 << 20);
        assert_eq!(point(100 << 20), 64 << 20);
        assert_eq!(point(5 << 30), MOST_FOOTPRINT_BYTES);
        let mut last = 0;
        for f in (0..40).map(|k| 1u64 << k) {
            assert!(point(f) >= last, "not monotone at {f}");
            last = point(f);
        }
    }

    #[test]
    fn dates_are_utc_iso_8601() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        // `date -u -d @1709251199`: the last second of 29 February 2024.
        assert_eq!(utc(1_709_251_199), "2024-02-29T23:59:59Z");
        assert_eq!(utc(1_798_761_600), "2027-01-01T00:00:00Z");
        assert_eq!(utc(951_827_696), "2000-02-29T12:34:56Z");
    }

    #[test]
    fn shapes_round_down_to_what_the_algorithm_serves() {
        let r = crate::collectives::Registry::builtin();
        let shape = |name: &str, p, size| r.by_name(name).unwrap().bench_shape(p, size, DType::F32);
        assert_eq!(shape("psum", 4, 4096), Some(vec![8, 128]));
        assert_eq!(shape("psum_scatter", 3, 4096), Some(vec![6, 128]));
        assert_eq!(shape("all_gather", 4, 4096), Some(vec![2, 128]));
        assert_eq!(shape("ring_allreduce", 3, 40), Some(vec![9, 1]));
        assert_eq!(shape("psum_scatter", 8, 32), None);
    }
}
