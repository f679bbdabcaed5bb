//! `tpusim trace`: step tables.

use super::out::{out, outln};
use super::placement;
use tpusim::collectives::Registry;
use tpusim::run::Job;
use tpusim::{DType, Error};

/// Arguments of `tpusim trace`.
#[derive(clap::Args)]
pub struct TraceArgs {
    /// Collective.
    pub collective: String,
    /// Number of devices.
    #[arg(short = 'p', long = "devices", default_value_t = 4)]
    pub devices: usize,
    /// A multi-axis mesh, e.g. 2x2 (axes x and y): a ring collective runs along `--axis`
    /// (every group an independent ring); a whole-mesh one (allreduce_2d) on all of it.
    #[arg(long, conflicts_with = "devices")]
    pub mesh: Option<String>,
    /// The mesh axis (or axes, `x,y`) a ring collective runs over (with --mesh; default x).
    #[arg(long, requires = "mesh")]
    pub axis: Option<String>,
    /// Element type the kernel is built in (f32, i32, f16, bf16); the table's cells are
    /// symbolic, the same for every dtype.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Output format: markdown or json.
    #[arg(long, default_value = "markdown")]
    pub format: String,
}

/// `tpusim trace`.
pub fn trace(reg: &Registry, a: &TraceArgs) -> tpusim::Result<bool> {
    let c = reg.by_name(&a.collective)?;
    let place = placement(c.as_ref(), a.mesh.as_deref(), a.devices, a.axis.as_deref())?;
    if a.format != "markdown" && a.format != "json" {
        return Err(Error::bad_input(format!(
            "unknown format `{}` (expected markdown or json)",
            a.format
        )));
    }
    let dtype = DType::parse(&a.dtype)?;
    let table = Job::collective(c, place).with_dtype(dtype).trace()?;
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
