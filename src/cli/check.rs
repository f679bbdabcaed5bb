//! `tpusim check`: the verifier over many schedules, broken variants, replay.

use super::out::outln;
use tpusim::budget::Work;
use tpusim::collectives::variants::variants;
use tpusim::collectives::{Options, Registry, Span};
use tpusim::run::Job;
use tpusim::verify::Report;
use tpusim::{args, array, Error};

#[derive(clap::Args)]
pub struct CheckArgs {
    /// Collective, or `all`.
    collective: Option<String>,
    #[command(flatten)]
    pub place: super::place::PlaceArgs,
    /// Schedules to run: every deterministic policy, then seeded random ones.
    #[arg(long, default_value = "200", allow_hyphen_values = true)]
    schedules: String,
    /// First seed of the random schedules.
    #[arg(long, default_value = "0", allow_hyphen_values = true)]
    seed: String,
    /// A deliberately broken variant (see --list-variants).
    #[arg(long)]
    variant: Option<String>,
    /// Run exactly one schedule, as printed by a failing check (e.g. `lazy`, `random:17`).
    #[arg(long)]
    replay: Option<String>,
    /// List the broken variants and exit.
    #[arg(long, conflicts_with_all = ["collective", "devices", "schedules", "seed", "variant", "replay", "shape", "repeat"])]
    list_variants: bool,
    /// One device's shard shape (default: a small shape the collective can serve).
    #[arg(long)]
    shape: Option<String>,
    /// Kernel invocations back to back on every device: a device enters invocation k+1
    /// when it leaves k, and the barrier semaphore of a collective_id carries over.
    #[arg(long, default_value = "1", allow_hyphen_values = true)]
    repeat: String,
}

fn print_report(title: &str, replay_cmd: &str, r: &Report) -> tpusim::Result<()> {
    if r.is_clean() {
        return outln!("{title}: clean under {} schedules", r.schedules);
    }
    outln!(
        "{title}: {} problem{} in {} schedule{}",
        r.findings.len(),
        if r.findings.len() == 1 { "" } else { "s" },
        r.schedules,
        if r.schedules == 1 { "" } else { "s" }
    )?;
    for (i, f) in r.findings.iter().enumerate() {
        match f.schedule {
            Some(s) => outln!(
                "[{}] {} (in {} of {} schedules; replay: {replay_cmd} --replay {s})",
                i + 1,
                f.problem.kind(),
                f.schedules,
                r.schedules
            )?,
            None => outln!(
                "[{}] {} (found while tracing: every schedule has it; replay: {replay_cmd})",
                i + 1,
                f.problem.kind()
            )?,
        }
        for line in f.problem.to_string().lines() {
            outln!("    {line}")?;
        }
    }
    Ok(())
}

/// `tpusim check`.
pub fn check(reg: &Registry, a: &CheckArgs) -> tpusim::Result<bool> {
    if a.list_variants {
        for v in variants() {
            outln!(
                "{:<19} --variant {:<16} {} [{}]",
                v.collective,
                v.name,
                v.summary,
                v.expectation()
            )?;
        }
        return Ok(true);
    }
    let name = a
        .collective
        .as_deref()
        .ok_or_else(|| Error::bad_input("name a collective (or `all`), or pass --list-variants"))?;
    let p = a.place.mesh()?.size();
    let at = a.place.flags();
    let seed = args::SEED.parse(&a.seed)?;
    let repeat = args::REPEAT.parse(&a.repeat)? as usize;
    // The schedules: one to replay, or the check set, made only once the budget has
    // counted it (it has P + 3 entries at least).
    let (replay, schedules) = match &a.replay {
        Some(s) => (Some(args::schedule(s, Some(p))?), 1),
        None => (None, args::SCHEDULES.parse(&a.schedules)? as usize),
    };
    let names: Vec<&str> = if name == "all" {
        if a.variant.is_some() {
            return Err(Error::bad_input(
                "--variant needs one collective, not `all`",
            ));
        }
        reg.names()
    } else {
        reg.by_name(name)?;
        vec![name]
    };
    let shape = a.shape.as_deref().map(array::parse_shape).transpose()?;
    // Every kernel is built and checked against this machine's limits before any runs.
    let mut runs = Vec::new();
    for n in names {
        let c = reg.by_name(n)?;
        if name == "all" && a.place.axis.is_some() && c.span() == Span::Mesh {
            outln!("{n}: skipped (one kernel over the whole mesh: it takes no --axis)")?;
            continue;
        }
        let place = a.place.placement(c.as_ref())?;
        let mut job =
            Job::named(reg, n, &Options::default(), a.variant.as_deref(), place)?.repeat(repeat)?;
        if let Some(s) = &shape {
            job = job.with_shape(s);
        }
        job.pallas_call()?;
        job.ensure_fits(Work::Check {
            schedules: schedules as u64,
            deterministic: replay.is_none(),
        })?;
        let shown = format!("P={}", job.place().describe());
        let repeat = match repeat {
            1 => String::new(),
            k => format!(" --repeat {k}"),
        };
        let (title, replay_cmd) = match &a.variant {
            Some(v) => (
                format!("{n} --variant {v}{repeat} {shown}"),
                format!("tpusim check {n} {at} --variant {v}{repeat}"),
            ),
            None => (
                format!("{n}{repeat} {shown}"),
                format!("tpusim check {n} {at}{repeat}"),
            ),
        };
        runs.push((job, title, replay_cmd));
    }
    let mut clean = true;
    for (job, title, replay_cmd) in runs {
        let report = match replay {
            Some(spec) => job.check(&[spec])?,
            None => job.check_set(schedules, seed)?,
        };
        print_report(&title, &replay_cmd, &report)?;
        clean &= report.is_clean();
    }
    Ok(clean)
}
