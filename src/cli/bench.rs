//! `tpusim bench`: the nccl-tests-style sweep.

use super::{executor, mesh};
use tpusim::collectives::Registry;
use tpusim::device_sim::ScheduleSpec;
use tpusim::exec::Backend;
use tpusim::DType;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Collective, or `all`.
    #[arg(default_value = "all")]
    collective: String,
    /// Number of devices.
    #[arg(short = 'p', long = "devices", default_value_t = 4)]
    devices: usize,
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
    /// Element type: f32 or i32.
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
}

/// `tpusim bench`.
pub fn bench(reg: &Registry, a: &BenchArgs) -> tpusim::Result<bool> {
    use std::io::Write;
    use tpusim::bench::{header, line, parse_size, sweep, BenchConfig, Progress};
    let mesh = mesh(a.devices)?;
    let cfg = BenchConfig {
        devices: mesh.size(),
        min_bytes: parse_size(&a.min)?,
        max_bytes: parse_size(&a.max)?,
        factor: a.factor,
        iters: a.iters,
        warmup: a.warmup,
        checks: a.checks,
        dtype: DType::parse(&a.dtype)?,
        schedule: ScheduleSpec::parse(&a.schedule)?,
    };
    tpusim::bench::sizes(&cfg)?;
    let names: Vec<&str> = if a.collective == "all" {
        reg.names()
    } else {
        reg.by_name(&a.collective)?;
        vec![a.collective.as_str()]
    };
    let exec = executor(Backend::parse(&a.backend)?)?;
    println!(
        "# tpusim bench: P={} dtype={} schedule={} iters={} warmup={} checks={} on {}",
        cfg.devices,
        cfg.dtype,
        cfg.schedule,
        cfg.iters,
        cfg.warmup,
        cfg.checks,
        exec.describe()
    );
    println!("# size: nccl-tests' (all_gather: gathered bytes; others: one device's input)");
    println!("# copy: plain buffer copy of one device's input, same run; moved: copy-equivalent bytes the schedule moves / time");
    println!("{}", header());
    let mut rows = Vec::new();
    for n in names {
        let c = reg.by_name(n)?;
        let mut progress = |p: Progress| {
            match p {
                Progress::Size(s) => eprint!("\r\x1b[2K{s}"),
                Progress::Skipped(s) => eprintln!("\r\x1b[2Kskipped {s}"),
            }
            let _ = std::io::stderr().flush();
        };
        let r = sweep(c.as_ref(), &cfg, exec.as_ref(), &mut progress)?;
        eprint!("\r\x1b[2K");
        for row in &r {
            println!("{}", line(row));
        }
        rows.extend(r);
    }
    if let Some(path) = &a.json {
        let v = serde_json::Value::Array(rows.iter().map(|r| r.json()).collect());
        std::fs::write(path, serde_json::to_string_pretty(&v).expect("JSON"))?;
    }
    let wrong: usize = rows.iter().map(|r| r.wrong).sum();
    if wrong > 0 {
        eprintln!("tpusim: {wrong} wrong elements");
    }
    Ok(wrong == 0)
}
