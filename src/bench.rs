//! `tpusim bench`: nccl-tests-style size sweeps. Each size's schedule is built once and
//! reused for every iteration; on the GPU, warm-up and timed iterations each run as one
//! submission from prepared commands, and buffers come from a pool warmed at the largest
//! size, so a sweep does not reallocate per size.

use crate::array::DType;
use crate::budget::{Need, Work};
use crate::error::{Error, Result};
use crate::exec::{count_wrong, Executor};
use crate::ir::{DataOp, Program, Schedule};
use crate::kernel::{GridSpec, PallasCall};
use crate::mesh::Mesh;
use crate::model::bus_factor;
use crate::run::{random_inputs, Job};
use crate::sched::{schedule, Eager, ScheduleSpec};
use crate::units::human;
pub use crate::units::parse_size;
use serde_json::{json, Value};

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
    /// The adapter's plain copy bandwidth for one device's buffer, same run (GPU only).
    pub copy_bw: Option<f64>,
    /// Copy-equivalent bytes the schedule moves per iteration, per second.
    pub moved_bw: f64,
    /// Seconds the schedule's ops would take at this executor's measured rates (the
    /// roofline for this adapter).
    pub roof_seconds: f64,
    /// Multiply-adds of the schedule's matmuls, every device's (0: it computes none).
    pub macs: u64,
    /// On ranks ([`crate::exec::ranks`]): bytes that crossed ranks per iteration and
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

/// An executor's own rates, measured in the same run on ops of a given size: bytes per
/// second of destination for copies, accumulates and (non-zero) fills.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rates {
    /// Copies (a VMEM copy; DMAs run the same way).
    pub copy: f64,
    /// Accumulates (`dst += src`).
    pub accumulate: f64,
    /// Fills with a non-zero value.
    pub fill: f64,
}

impl Rates {
    /// Measures `exec` on `ops` ops of `bytes` each of every kind (one device, a kernel
    /// of VMEM scratch), timed over `iters` runs after one warm-up.
    pub fn measure(exec: &dyn Executor, bytes: u64, dtype: DType, iters: usize) -> Result<Self> {
        const OPS: usize = 4;
        let elems = ((bytes / dtype.size() as u64) as usize).max(1);
        let mesh = Mesh::new(1, "x")?;
        let rate = |kind: usize| -> Result<f64> {
            let spec = GridSpec::new()
                .vmem("a", &[elems], dtype)
                .vmem("b", &[elems], dtype);
            let call = PallasCall::new("rate", spec, move |pl, a| {
                for _ in 0..OPS {
                    match kind {
                        0 => pl.copy(a.r("a"), a.r("b")),
                        1 => pl.add_assign(a.r("a"), a.r("b")),
                        _ => pl.fill(a.r("a"), 1.0),
                    }
                }
            });
            let program = call.lower(&mesh)?;
            exec.check(&program)?;
            let sched = schedule(&program, &mut Eager::default())?;
            let mut run = exec.prepare(&program, &sched)?;
            run.run(1)?;
            let t = run.run(iters.max(1))?.as_secs_f64();
            Ok((elems * dtype.size() * OPS * iters.max(1)) as f64 / t.max(1e-12))
        };
        Ok(Rates {
            copy: rate(0)?,
            accumulate: rate(1)?,
            fill: rate(2)?,
        })
    }

    /// Seconds `sched`'s ops take at these rates (zero fills count as fills).
    pub fn roofline(&self, sched: &Schedule, program: &Program) -> f64 {
        let allocs = sched.allocations(program);
        sched
            .ops
            .iter()
            .map(|o| {
                let b = o.bytes(&allocs) as f64;
                b / match o {
                    DataOp::Copy { .. } => self.copy,
                    // Compute ops are at least an accumulate's work per element written.
                    DataOp::Accumulate { .. } | DataOp::Compute(_) => self.accumulate,
                    DataOp::Fill { .. } => self.fill,
                }
            })
            .sum()
    }
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
            "copy_gbps": self.copy_bw.map(|b| b / 1e9),
            "moved_gbps": self.moved_bw / 1e9,
            "copy_fraction": self.copy_bw.map(|b| self.moved_bw / b),
            "roof_us": self.roof_seconds * 1e6,
            "roof_fraction": self.roof_seconds / self.seconds,
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
        let inputs = random_inputs(program, size)?;
        let expected = if cfg.checks > 0 {
            Some(j.reference(&inputs)?)
        } else {
            None
        };
        // On ranks, each keeps its own devices' inputs and expected results.
        let (inputs, expected) = match exec.ranks() {
            Some(r) => {
                let held = r.held(program.devices)?;
                let keep = |mut v: Vec<Vec<crate::HostArray>>| {
                    for (d, x) in v.iter_mut().enumerate() {
                        if !held.contains(&d) {
                            *x = Vec::new();
                        }
                    }
                    v
                };
                (keep(inputs), expected.map(keep))
            }
            None => (inputs, expected),
        };
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
        let c = j.collective_of().expect("a bench job runs a collective");
        let shard_bytes = c.shard_bytes(j.shape(), cfg.dtype);
        let copy_bw = exec.copy_bandwidth(shard_bytes)?;
        // Rates of ops of one device's buffer, the size of a shard's DMA or accumulate
        // (on lavapipe a copy of 4x the bytes runs nearly 2x faster per byte, so rates
        // of larger ops would be a bound no schedule of this size can reach).
        let rates = Rates::measure(exec.inner().unwrap_or(exec), shard_bytes, cfg.dtype, 3)?;
        let traffic = c.traffic();
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
            copy_bw,
            moved_bw: sched.copy_equivalent_bytes(program) / seconds,
            roof_seconds: rates.roofline(sched, program),
            macs: sched.ops.iter().map(|o| o.work().macs).sum(),
            ranks: share,
        });
    }
    Ok(rows)
}

/// The columns a table on ranks adds to [`header`]: megabytes that crossed ranks per
/// iteration, and each rank's busy share of the run (percent, in rank order).
pub fn rank_header() -> String {
    format!(" {:>12} {}", "xrank(MB)", "busy%/rank")
}

/// The nccl-tests-style table header.
pub fn header() -> String {
    format!(
        "{:<21} {:>10} {:>12} {:>11} {:>12} {:>12} {:>7} {:>11} {:>12} {:>6} {:>10} {:>6} {:>9}",
        "collective",
        "size",
        "count",
        "time(us)",
        "algbw(GB/s)",
        "busbw(GB/s)",
        "#wrong",
        "copy(GB/s)",
        "moved(GB/s)",
        "%copy",
        "roof(us)",
        "%roof",
        "TFLOP/s"
    )
}

/// One table line.
pub fn line(r: &BenchRow) -> String {
    let (copy, frac) = match r.copy_bw {
        Some(b) => (
            format!("{:.2}", b / 1e9),
            format!("{:.0}", 100.0 * r.moved_bw / b),
        ),
        None => ("-".into(), "-".into()),
    };
    let ranks = r.ranks.as_ref().map_or_else(String::new, |s| {
        let busy: Vec<String> = s.busy.iter().map(|b| format!("{:.0}", 100.0 * b)).collect();
        format!(" {:>12.1} {}", s.crossed_bytes as f64 / 1e6, busy.join("/"))
    });
    format!(
        "{:<21} {:>10} {:>12} {:>11.1} {:>12.3} {:>12.3} {:>7} {:>11} {:>12.3} {:>6} {:>10.1} {:>6.0} {:>9}{ranks}",
        r.collective,
        r.size,
        r.count,
        r.seconds * 1e6,
        r.algbw / 1e9,
        r.busbw / 1e9,
        r.wrong.map_or("-".into(), |w| w.to_string()),
        copy,
        r.moved_bw / 1e9,
        frac,
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
