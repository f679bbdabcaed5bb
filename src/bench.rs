//! `tpusim bench`: nccl-tests-style size sweeps. Each size's schedule is built once and
//! reused for every iteration; on the GPU, warm-up and timed iterations each run as one
//! submission from prepared commands, and buffers come from a pool warmed at the largest
//! size, so a sweep does not reallocate per size.

use crate::array::DType;
use crate::collectives::{self, random_inputs, Collective};
use crate::device_sim::{schedule, ScheduleSpec};
use crate::error::{Error, Result};
use crate::exec::cpu::CpuExecutor;
use crate::exec::gpu::GpuExecutor;
use crate::exec::Executor;
use crate::mesh::Mesh;
use crate::model::{bus_factor, Traffic};
use serde_json::{json, Value};
use std::time::Instant;

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
}

impl BenchRow {
    /// The row as JSON.
    pub fn json(&self) -> Value {
        json!({
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
        })
    }
}

/// Parses `8`, `4K`, `64M`, `1G` (binary multiples) into bytes.
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|&n| n > 0)
        .ok_or_else(|| Error::bad_input(format!("bad size `{s}` (expected e.g. 4K, 64M, 1G)")))
}

/// `1.5 KiB`-style text for a byte count.
pub fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
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

/// One device's input shape for `size` bytes of collective `name` at `p` devices, with
/// the count rounded down to what the algorithm can serve; `None` if nothing fits.
pub fn bench_shape(name: &str, p: usize, size: u64, dtype: DType) -> Option<Vec<usize>> {
    let total = (size / dtype.size() as u64) as usize;
    // Per-device input elements, and the granularity of rows the algorithm needs.
    let (count, rows_multiple) = match name {
        "all_gather" => (total / p, 1),
        "psum_scatter" => (total, 2 * p),
        "ring_allreduce" | "ring_allreduce_push" => (total, p),
        _ => (total, 1),
    };
    let cols = if count >= 128 * rows_multiple { 128 } else { 1 };
    let rows = count / cols / rows_multiple * rows_multiple;
    (rows > 0).then(|| vec![rows, cols])
}

/// What a sweep reports as it goes.
#[derive(Clone, Copy, Debug)]
pub enum Progress<'a> {
    /// About to run this size (a short status line).
    Size(&'a str),
    /// This size was skipped, and why.
    Skipped(&'a str),
}

/// Runs the sweep of `c`, on the GPU when `gpu` is given, else on the CPU executor.
/// `progress` hears about each size before it runs, and about sizes it skips.
pub fn sweep(
    c: &dyn Collective,
    cfg: &BenchConfig,
    gpu: Option<&GpuExecutor>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<BenchRow>> {
    cfg.validate()?;
    let mesh = Mesh::new(cfg.devices, "x")?;
    let p = cfg.devices;
    let sizes = sizes(cfg)?;
    let traffic = Traffic::of(c.name());
    if let (Some(gpu), Some(&max)) = (gpu, sizes.last()) {
        // Warm the pool at the largest size so the sweep reuses its buffers.
        if let Some(shape) = bench_shape(c.name(), p, max, cfg.dtype) {
            let call = c.call(&mesh, &shape, cfg.dtype)?;
            let program = call.lower(&mesh)?;
            let sched = schedule(&program, cfg.schedule.policy().as_mut())?;
            drop(gpu.prepare(&program, &sched)?);
        }
    }
    let mut rows = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        progress(Progress::Size(&format!(
            "[{}/{}] {} {}",
            i + 1,
            sizes.len(),
            c.name(),
            human(size)
        )));
        let Some(shape) = bench_shape(c.name(), p, size, cfg.dtype) else {
            progress(Progress::Skipped(&format!(
                "{} {}: too small to split over P={p} devices",
                c.name(),
                human(size)
            )));
            continue;
        };
        let count: usize = shape.iter().product();
        let call = c.call(&mesh, &shape, cfg.dtype)?;
        let program = call.lower(&mesh)?;
        let sched = schedule(&program, cfg.schedule.policy().as_mut())?;
        if let Some(gpu) = gpu {
            gpu.check(&program)?;
        }
        let inputs = random_inputs(&program, size)?;
        let expected = if cfg.checks > 0 {
            Some(c.reference(&inputs)?)
        } else {
            None
        };
        let count_wrong = |got: &[Vec<crate::HostArray>]| -> usize {
            let Some(exp) = &expected else { return 0 };
            got.iter()
                .zip(exp)
                .map(|(g, e)| {
                    g.iter()
                        .zip(e)
                        .map(|(ga, ea)| ga.count_mismatches(ea, c.tolerance()))
                        .sum::<usize>()
                })
                .sum()
        };
        let mut wrong = (cfg.checks > 0).then_some(0);
        let (seconds, copy_bw) = match gpu {
            Some(gpu) => {
                let run = gpu.prepare(&program, &sched)?;
                run.upload(&inputs)?;
                if cfg.warmup > 0 {
                    run.run(cfg.warmup)?;
                }
                let t = run.run(cfg.iters)?;
                for _ in 0..cfg.checks {
                    run.run(1)?;
                    *wrong.get_or_insert(0) += count_wrong(&run.read_outputs()?);
                }
                drop(run);
                let shard_bytes = (count * cfg.dtype.size()) as u64;
                let bw = gpu.copy_bandwidth(shard_bytes, 5)?;
                (t.as_secs_f64() / cfg.iters as f64, Some(bw))
            }
            None => {
                let mut cpu = CpuExecutor::new();
                for _ in 0..cfg.warmup {
                    cpu.execute(&program, &sched, &inputs)?;
                }
                let t = Instant::now();
                for _ in 0..cfg.iters {
                    cpu.execute(&program, &sched, &inputs)?;
                }
                let s = t.elapsed().as_secs_f64() / cfg.iters as f64;
                for _ in 0..cfg.checks {
                    *wrong.get_or_insert(0) +=
                        count_wrong(&cpu.execute(&program, &sched, &inputs)?);
                }
                (s, None)
            }
        };
        let measured = traffic.size(p, (count * cfg.dtype.size()) as u64);
        let algbw = measured as f64 / seconds;
        rows.push(BenchRow {
            collective: c.name().to_string(),
            size: measured,
            count,
            seconds,
            algbw,
            busbw: algbw * bus_factor(traffic, p),
            wrong,
            copy_bw,
            moved_bw: sched.copy_equivalent_bytes() / seconds,
        });
    }
    Ok(rows)
}

/// The nccl-tests-style table header.
pub fn header() -> String {
    format!(
        "{:<20} {:>10} {:>12} {:>11} {:>12} {:>12} {:>7} {:>11} {:>12} {:>6}",
        "collective",
        "size",
        "count",
        "time(us)",
        "algbw(GB/s)",
        "busbw(GB/s)",
        "#wrong",
        "copy(GB/s)",
        "moved(GB/s)",
        "%copy"
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
    format!(
        "{:<20} {:>10} {:>12} {:>11.1} {:>12.3} {:>12.3} {:>7} {:>11} {:>12.3} {:>6}",
        r.collective,
        r.size,
        r.count,
        r.seconds * 1e6,
        r.algbw / 1e9,
        r.busbw / 1e9,
        r.wrong.map_or("-".into(), |w| w.to_string()),
        copy,
        r.moved_bw / 1e9,
        frac
    )
}

/// Every collective's name, for `bench all`.
pub fn all_names() -> Vec<&'static str> {
    collectives::NAMES.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_sweep() {
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert_eq!(parse_size("100").unwrap(), 100);
        assert!(parse_size("4X").is_err() && parse_size("0").is_err() && parse_size("").is_err());
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
        assert_eq!(human(64 << 20), "64M");
    }

    #[test]
    fn shapes_round_down_to_what_the_algorithm_serves() {
        assert_eq!(bench_shape("psum", 4, 4096, DType::F32), Some(vec![8, 128]));
        assert_eq!(
            bench_shape("psum_scatter", 3, 4096, DType::F32),
            Some(vec![6, 128])
        );
        assert_eq!(
            bench_shape("all_gather", 4, 4096, DType::F32),
            Some(vec![2, 128])
        );
        assert_eq!(
            bench_shape("ring_allreduce", 3, 40, DType::F32),
            Some(vec![9, 1])
        );
        assert_eq!(bench_shape("psum_scatter", 8, 32, DType::F32), None);
    }
}
