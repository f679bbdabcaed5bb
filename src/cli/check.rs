//! `tpusim check`: the verifier over many schedules, broken variants, replay.

use super::mesh;
use tpusim::collectives::variants::{variant, variants};
use tpusim::collectives::Registry;
use tpusim::device_sim::ScheduleSpec;
use tpusim::verify::{self, Report};
use tpusim::{array, DType, Error};

#[derive(clap::Args)]
pub struct CheckArgs {
    /// Collective, or `all`.
    collective: Option<String>,
    /// Number of devices.
    #[arg(short = 'p', long = "devices", default_value_t = 4)]
    devices: usize,
    /// Schedules to run: every deterministic policy, then seeded random ones.
    #[arg(long, default_value_t = 200)]
    schedules: usize,
    /// First seed of the random schedules.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// A deliberately broken variant (see --list-variants).
    #[arg(long)]
    variant: Option<String>,
    /// Run exactly one schedule, as printed by a failing check (e.g. `lazy`, `random:17`).
    #[arg(long)]
    replay: Option<String>,
    /// List the broken variants and exit.
    #[arg(long)]
    list_variants: bool,
    /// One device's shard shape (default: a small shape the collective can serve).
    #[arg(long)]
    shape: Option<String>,
}

fn print_report(title: &str, replay_cmd: &str, r: &Report) {
    if r.is_clean() {
        println!("{title}: clean under {} schedules", r.schedules);
        return;
    }
    println!(
        "{title}: {} problem{} in {} schedule{}",
        r.findings.len(),
        if r.findings.len() == 1 { "" } else { "s" },
        r.schedules,
        if r.schedules == 1 { "" } else { "s" }
    );
    for (i, f) in r.findings.iter().enumerate() {
        match f.schedule {
            Some(s) => println!(
                "[{}] {} (in {} of {} schedules; replay: {replay_cmd} --replay {s})",
                i + 1,
                f.problem.kind(),
                f.schedules,
                r.schedules
            ),
            None => println!(
                "[{}] {} (found while tracing: every schedule has it; replay: {replay_cmd})",
                i + 1,
                f.problem.kind()
            ),
        }
        for line in f.problem.to_string().lines() {
            println!("    {line}");
        }
    }
}

/// `tpusim check`.
pub fn check(reg: &Registry, a: &CheckArgs) -> tpusim::Result<bool> {
    if a.list_variants {
        for v in variants() {
            println!(
                "{:<15} --variant {:<16} {} [{}]",
                v.collective, v.name, v.summary, v.expect
            );
        }
        return Ok(true);
    }
    let name = a
        .collective
        .as_deref()
        .ok_or_else(|| Error::bad_input("name a collective (or `all`), or pass --list-variants"))?;
    let mesh = mesh(a.devices)?;
    let p = mesh.size();
    let specs = match &a.replay {
        Some(s) => vec![ScheduleSpec::parse(s)?],
        None => {
            if a.schedules == 0 {
                return Err(Error::bad_input("--schedules must be at least 1"));
            }
            ScheduleSpec::check_set(p, a.schedules, a.seed)
        }
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
    let mut clean = true;
    for n in names {
        let shape = match &shape {
            Some(s) => s.clone(),
            None => reg.by_name(n)?.default_shape(p),
        };
        let (call, title) = match &a.variant {
            Some(v) => (
                variant(n, v)?.call(&mesh, &shape, DType::F32)?,
                format!("{n} --variant {v} P={p}"),
            ),
            None => (
                reg.by_name(n)?.call(&mesh, &shape, DType::F32)?,
                format!("{n} P={p}"),
            ),
        };
        let replay = match &a.variant {
            Some(v) => format!("tpusim check {n} -p {p} --variant {v}"),
            None => format!("tpusim check {n} -p {p}"),
        };
        let report = verify::check(&call, &mesh, &specs)?;
        print_report(&title, &replay, &report);
        clean &= report.is_clean();
    }
    Ok(clean)
}
