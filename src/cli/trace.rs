//! `tpusim trace`: step tables.

use super::out::{out, outln};
use tpusim::collectives::Registry;
use tpusim::run::Job;
use tpusim::{args, DType, Error};

/// Arguments of `tpusim trace`.
#[derive(clap::Args)]
pub struct TraceArgs {
    /// Collective.
    pub collective: String,
    #[command(flatten)]
    pub place: super::place::PlaceArgs,
    /// Element type the kernel is built in (f32, i32, f16, bf16); the table's cells are
    /// symbolic, the same for every dtype.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Output format: markdown or json.
    #[arg(long, default_value = "markdown")]
    pub format: String,
    /// Kernel invocations back to back on every device: a device enters invocation k+1
    /// when it leaves k, and the barrier semaphore of a collective_id carries over.
    #[arg(long, default_value = "1", allow_hyphen_values = true)]
    pub repeat: String,
}

/// `tpusim trace`.
pub fn trace(reg: &Registry, a: &TraceArgs) -> tpusim::Result<bool> {
    let c = reg.by_name(&a.collective)?;
    let place = a.place.placement(c.as_ref())?;
    if a.format != "markdown" && a.format != "json" {
        return Err(Error::bad_input(format!(
            "unknown format `{}` (expected markdown or json)",
            a.format
        )));
    }
    let dtype = DType::parse_collective(&a.dtype)?;
    let table = Job::collective(c, place)
        .with_dtype(dtype)
        .repeat(args::REPEAT.parse(&a.repeat)? as usize)?
        .trace()?;
    if a.format == "json" {
        outln!(
            "{}",
            serde_json::to_string_pretty(&table.json()).expect("JSON")
        )?;
    } else {
        out!("{}", table.markdown())?;
    }
    Ok(true)
}
