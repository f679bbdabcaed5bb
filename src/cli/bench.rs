//! `tpusim bench`: the nccl-tests-style sweep.

use super::out::outln;
use tpusim::bench::BenchConfig;
use tpusim::collectives::{Registry, Span};
use tpusim::device_sim::Backend;
use tpusim::files::Output;
use tpusim::run::Job;
use tpusim::{args, DType};

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
    #[arg(
        short = 'f',
        long = "stepfactor",
        default_value = "4",
        allow_hyphen_values = true
    )]
    factor: String,
    /// Timed iterations per size.
    #[arg(
        short = 'n',
        long = "iters",
        default_value = "10",
        allow_hyphen_values = true
    )]
    iters: String,
    /// Warm-up iterations per size.
    #[arg(
        short = 'w',
        long = "warmup_iters",
        default_value = "2",
        allow_hyphen_values = true
    )]
    warmup: String,
    /// Check iterations per size (read back and compared with the reference).
    #[arg(
        short = 'c',
        long = "check",
        default_value = "1",
        allow_hyphen_values = true
    )]
    checks: String,
    /// Element type: f32, i32, f16 or bf16.
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Executor: auto (the GPU one on a hardware adapter, else the CPU one), gpu or cpu.
    #[arg(long, default_value = "auto")]
    backend: String,
    /// Schedule: eager, lazy, lockstep, run-ahead:D, random:SEED.
    #[arg(long, default_value = "eager")]
    schedule: String,
    /// Write the rows as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Kernel invocations back to back on every device, timed as one iteration (the
    /// barrier semaphore of a collective_id carries over between them).
    #[arg(long, default_value = "1", allow_hyphen_values = true)]
    repeat: String,
    /// With --model: the table of the modeled TPU (time, algbw, busbw per size on the
    /// cost model's clock) instead of the simulator's own timing.
    #[command(flatten)]
    model: super::run::ModelArgs,
    /// Print how many ranks (processes with this one's memory, `mpirun -np N`) the
    /// sweep's largest size needs, and exit.
    #[arg(long)]
    ranks_needed: bool,
}

/// `tpusim bench`.
pub fn bench(reg: &Registry, a: &BenchArgs) -> tpusim::Result<bool> {
    use tpusim::bench::{header, line, parse_size, sweep, Progress};
    let mesh = a.place.mesh()?;
    let cfg = BenchConfig {
        devices: mesh.size(),
        min_bytes: parse_size(&a.min)?,
        max_bytes: parse_size(&a.max)?,
        factor: args::FACTOR.parse(&a.factor)?,
        iters: args::ITERS.parse(&a.iters)? as usize,
        warmup: args::WARMUP.parse(&a.warmup)? as usize,
        checks: args::CHECKS.parse(&a.checks)? as usize,
        dtype: DType::parse_collective(&a.dtype)?,
        schedule: args::schedule(&a.schedule, Some(mesh.size()))?,
    };
    let repeat = args::REPEAT.parse(&a.repeat)? as usize;
    cfg.validate()?;
    let names: Vec<&str> = if a.collective == "all" {
        let mut v = Vec::new();
        for n in reg.names() {
            if a.place.axis.is_some() && reg.by_name(n)?.span() == Span::Mesh {
                if super::out::notes() {
                    eprintln!("skipped {n}: one kernel over the whole mesh, it takes no --axis");
                }
            } else {
                v.push(n);
            }
        }
        v
    } else {
        reg.by_name(&a.collective)?;
        vec![a.collective.as_str()]
    };
    if a.model.timeline.is_some() {
        return Err(tpusim::Error::bad_input(
            "bench writes no timeline: `tpusim run … --model PRESET --timeline FILE` writes one run's",
        ));
    }
    let model = a.model.spec()?.map(|s| s.build()).transpose()?;
    let chosen = match &model {
        // The model needs no executor: nothing runs on one.
        Some(_) => tpusim::device_sim::Chosen {
            backend: Backend::Cpu,
            why: None,
        },
        None => Backend::parse(&a.backend)?.resolve()?,
    };
    let backend = chosen.backend;
    let json = a
        .json
        .as_deref()
        .map(|p| Output::check(p, "bench results"))
        .transpose()?;
    if let Some(j) = &json {
        super::out::keep_apart(j.path());
    }
    let jobs = names
        .iter()
        .map(|n| {
            let c = reg.by_name(n)?;
            let place = a.place.placement(c.as_ref())?;
            Ok(Job::collective(c, place)
                .repeat(repeat)?
                .on_ranks(super::ranks::share()))
        })
        .collect::<tpusim::Result<Vec<Job>>>()?;
    if a.ranks_needed {
        let mut ok = true;
        for job in &jobs {
            if let Some((j, work)) =
                tpusim::bench::largest(job, &cfg, backend == Backend::Gpu, backend == Backend::Cpu)?
            {
                ok &= super::run::ranks_needed(&j, work)?;
            }
        }
        return Ok(ok);
    }
    // Refused before the adapter is opened; the sweep checks again with its buffers.
    if model.is_none() {
        for job in &jobs {
            tpusim::bench::ensure_fits(
                job,
                &cfg,
                backend == Backend::Gpu,
                backend == Backend::Cpu,
            )?;
        }
    }
    let at = match (&a.place.mesh, &a.place.axis) {
        (Some(m), Some(x)) => format!("{} (mesh {m} along {x})", cfg.devices),
        (Some(m), None) => format!("{} (mesh {m})", cfg.devices),
        _ => cfg.devices.to_string(),
    };
    let repeat_note = match repeat {
        1 => String::new(),
        k => format!(" repeat={k} (one iteration: {k} invocations back to back)"),
    };
    let status = Status::new();
    let mut progress = |p: Progress| status.report(p);
    let asked = tpusim::bench::Asked {
        command: std::env::args().collect(),
        date: tpusim::bench::utc_now(),
        mesh: &mesh,
        axis: a.place.axis.as_deref(),
        group_devices: jobs.first().map(|j| j.place().devices()),
        repeat,
    };
    if let Some(model) = &model {
        outln!(
            "# tpusim bench: P={} dtype={} schedule={}{} on the cost model {} (link {:.0} GB/s per direction, {:.2} us per hop)",
            at,
            cfg.dtype,
            cfg.schedule,
            repeat_note,
            model.name,
            model.link_bw / 1e9,
            model.link_latency * 1e6,
        )?;
        outln!("# size: nccl-tests' (all_gather: gathered bytes; others: one device's input); time: modeled; ideal: the ring bound on one link direction")?;
        outln!("{}", tpusim::bench::model_header())?;
        let mut rows = Vec::new();
        for job in &jobs {
            let r = tpusim::bench::sweep_model(job, &cfg, model, &mut progress)?;
            status.suspend(|| {
                r.iter()
                    .try_for_each(|row| outln!("{}", tpusim::bench::model_line(row)))
            })?;
            rows.extend(r);
        }
        if let Some(out) = &json {
            let ran = tpusim::bench::Ran::Model {
                name: &model.name,
                rows: &rows,
            };
            let meta = tpusim::bench::results(&cfg, &asked, &ran);
            out.write_with(|w| {
                serde_json::to_writer_pretty(w, &meta).map_err(std::io::Error::from)
            })?;
        }
        return Ok(true);
    }
    let exec = super::executor(&chosen)?;
    outln!(
        "# tpusim bench: P={} dtype={} schedule={} iters={} warmup={} checks={}{} on {}",
        at,
        cfg.dtype,
        cfg.schedule,
        cfg.iters,
        cfg.warmup,
        cfg.checks,
        repeat_note,
        exec.describe()
    )?;
    outln!("# size: nccl-tests' (all_gather: gathered bytes; others: one device's input)")?;
    outln!("# moved: copy-equivalent bytes the schedule moves / time; roof: the least time an iteration can take here (its data ops' bytes, matmul FLOPs and elementwise ops at this executor's best rates, same run, plus a submission's fixed cost; a stretch run a cache block at a time: its written bytes once at the memory rate or its ops in the caches, the larger)")?;
    let on_ranks = super::ranks::current().is_some();
    if let Some(r) = super::ranks::current() {
        outln!(
            "# {}",
            tpusim::device_sim::ranks::Partition::new(cfg.devices, r.size())?.describe()
        )?;
        outln!("# xrank: bytes sent between ranks per iteration; busy: each rank's share of the run spent on its own ops (the rest waiting for messages); roof: the slowest rank's own ops at its rates")?;
    }
    outln!(
        "{}{}",
        header(),
        if on_ranks {
            tpusim::bench::rank_header()
        } else {
            String::new()
        }
    )?;
    let mut rows = Vec::new();
    for job in &jobs {
        let r = sweep(job, &cfg, exec.as_ref(), &mut progress)?;
        status.suspend(|| r.iter().try_for_each(|row| outln!("{}", line(row))))?;
        rows.extend(r);
    }
    if let Some(out) = json.as_ref().filter(|_| super::ranks::runs_alone()) {
        let ran = tpusim::bench::Ran::Executor {
            backend: &a.backend,
            exec: exec.as_ref(),
            rows: &rows,
        };
        let meta = tpusim::bench::results(&cfg, &asked, &ran);
        out.write_with(|w| serde_json::to_writer_pretty(w, &meta).map_err(std::io::Error::from))?;
    }
    let wrong: usize = rows.iter().filter_map(|r| r.wrong).sum();
    if wrong > 0 && !super::out::quiet() {
        eprintln!("tpusim: {wrong} wrong elements");
    }
    Ok(wrong == 0)
}

/// Progress on standard error: a spinner with the size being run (indicatif) when
/// standard error is a terminal; otherwise only skipped sizes, as plain lines, so a log
/// file gets no cursor escapes.
struct Status {
    bar: Option<indicatif::ProgressBar>,
}

impl Status {
    fn new() -> Self {
        use std::io::IsTerminal;
        // Not on ranks other than 0 (quiet): one process reports.
        let bar = (std::io::stderr().is_terminal() && super::out::notes()).then(|| {
            let b = indicatif::ProgressBar::new_spinner();
            if let Ok(style) =
                indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            {
                b.set_style(style);
            }
            b.enable_steady_tick(std::time::Duration::from_millis(120));
            b
        });
        Self { bar }
    }

    fn report(&self, p: tpusim::bench::Progress) {
        use tpusim::bench::Progress;
        match (p, &self.bar) {
            (Progress::Size(s), Some(b)) => b.set_message(s.to_string()),
            (Progress::Size(_), None) => {}
            (Progress::Skipped(s), Some(b)) => b.println(format!("skipped {s}")),
            (Progress::Skipped(s), None) if super::out::notes() => eprintln!("skipped {s}"),
            (Progress::Skipped(_), None) => {}
        }
    }

    /// Runs `f` (which prints table lines) with the spinner hidden.
    fn suspend<T>(&self, f: impl FnOnce() -> T) -> T {
        match &self.bar {
            Some(b) => b.suspend(f),
            None => f(),
        }
    }
}

impl Drop for Status {
    fn drop(&mut self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
