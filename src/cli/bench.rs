//! `tpusim bench`: the nccl-tests-style sweep.

use super::executor;
use super::out::outln;
use tpusim::bench::BenchConfig;
use tpusim::collectives::{Registry, Span};
use tpusim::exec::Backend;
use tpusim::files::Output;
use tpusim::run::Job;
use tpusim::sched::ScheduleSpec;
use tpusim::DType;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Collective, or `all`.
    #[arg(default_value = "all")]
    collective: String,
    #[command(flatten)]
    pub place: super::place::PlaceArgs,
    /// Smallest size (K/M/G suffixes), nccl-tests' definition per collective.
    #[arg(short = 'b', long = "minbytes", default_value = "4K")]
    min: String,
    /// Largest size.
    #[arg(short = 'e', long = "maxbytes", default_value = "16M")]
    max: String,
    /// Size factor between steps.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 4)]
    factor: u64,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 10)]
    iters: usize,
    /// Warm-up iterations per size.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 2)]
    warmup: usize,
    /// Check iterations per size (read back and compared with the reference).
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    checks: usize,
    /// Element type: f32, i32, f16 or bf16.
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Executor: gpu or cpu.
    #[arg(long, default_value = "gpu")]
    backend: String,
    /// Schedule: eager, lazy, lockstep, run-ahead:D, random:SEED.
    #[arg(long, default_value = "eager")]
    schedule: String,
    /// Write the rows as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Kernel invocations back to back on every device, timed as one iteration (the
    /// barrier semaphore of a collective_id carries over between them).
    #[arg(long, default_value_t = 1)]
    repeat: usize,
}

/// `tpusim bench`.
pub fn bench(reg: &Registry, a: &BenchArgs) -> tpusim::Result<bool> {
    use std::io::Write;
    use tpusim::bench::{header, line, parse_size, sweep, Progress};
    let mesh = a.place.mesh()?;
    let cfg = BenchConfig {
        devices: mesh.size(),
        min_bytes: parse_size(&a.min)?,
        max_bytes: parse_size(&a.max)?,
        factor: a.factor,
        iters: a.iters,
        warmup: a.warmup,
        checks: a.checks,
        dtype: DType::parse_collective(&a.dtype)?,
        schedule: ScheduleSpec::parse(&a.schedule)?,
    };
    cfg.validate()?;
    let names: Vec<&str> = if a.collective == "all" {
        let mut v = Vec::new();
        for n in reg.names() {
            if a.place.axis.is_some() && reg.by_name(n)?.span() == Span::Mesh {
                eprintln!("skipped {n}: one kernel over the whole mesh, it takes no --axis");
            } else {
                v.push(n);
            }
        }
        v
    } else {
        reg.by_name(&a.collective)?;
        vec![a.collective.as_str()]
    };
    let backend = Backend::parse(&a.backend)?;
    let json = a
        .json
        .as_deref()
        .map(|p| Output::check(p, "bench results"))
        .transpose()?;
    let jobs = names
        .iter()
        .map(|n| {
            let c = reg.by_name(n)?;
            let place = a.place.placement(c.as_ref())?;
            Job::collective(c, place).repeat(a.repeat)
        })
        .collect::<tpusim::Result<Vec<Job>>>()?;
    // Refused before the adapter is opened; the sweep checks again with its buffers.
    for job in &jobs {
        tpusim::bench::ensure_fits(job, &cfg, backend == Backend::Gpu, backend == Backend::Cpu)?;
    }
    let exec = executor(backend)?;
    let at = match (&a.place.mesh, &a.place.axis) {
        (Some(m), Some(x)) => format!("{} (mesh {m} along {x})", cfg.devices),
        (Some(m), None) => format!("{} (mesh {m})", cfg.devices),
        _ => cfg.devices.to_string(),
    };
    let repeat = match a.repeat {
        1 => String::new(),
        k => format!(" repeat={k} (one iteration: {k} invocations back to back)"),
    };
    outln!(
        "# tpusim bench: P={} dtype={} schedule={} iters={} warmup={} checks={}{} on {}",
        at,
        cfg.dtype,
        cfg.schedule,
        cfg.iters,
        cfg.warmup,
        cfg.checks,
        repeat,
        exec.describe()
    )?;
    outln!("# size: nccl-tests' (all_gather: gathered bytes; others: one device's input)")?;
    outln!("# copy: plain buffer copy of one device's input, same run; moved: copy-equivalent bytes the schedule moves / time")?;
    outln!("{}", header())?;
    let mut rows = Vec::new();
    for job in &jobs {
        let mut progress = |p: Progress| {
            match p {
                Progress::Size(s) => eprint!("\r\x1b[2K{s}"),
                Progress::Skipped(s) => eprintln!("\r\x1b[2Kskipped {s}"),
            }
            let _ = std::io::stderr().flush();
        };
        let r = sweep(job, &cfg, exec.as_ref(), &mut progress)?;
        eprint!("\r\x1b[2K");
        for row in &r {
            outln!("{}", line(row))?;
        }
        rows.extend(r);
    }
    if let Some(out) = &json {
        let v = serde_json::Value::Array(rows.iter().map(|r| r.json()).collect());
        out.write_with(|w| serde_json::to_writer_pretty(w, &v).map_err(std::io::Error::from))?;
    }
    let wrong: usize = rows.iter().filter_map(|r| r.wrong).sum();
    if wrong > 0 {
        eprintln!("tpusim: {wrong} wrong elements");
    }
    Ok(wrong == 0)
}
