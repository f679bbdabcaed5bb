//! `tpusim trace`: step tables.

use super::out::{out, outln};
use super::{limits, mesh};
use tpusim::budget::Work;
use tpusim::collectives::Registry;
use tpusim::{DType, Error, Mesh};

/// Arguments of `tpusim trace`.
#[derive(clap::Args)]
pub struct TraceArgs {
    /// Collective.
    pub collective: String,
    /// Number of devices.
    #[arg(short = 'p', long = "devices", default_value_t = 4)]
    pub devices: usize,
    /// Output format: markdown or json.
    #[arg(long, default_value = "markdown")]
    pub format: String,
}

/// `tpusim trace`.
pub fn trace(reg: &Registry, a: &TraceArgs) -> tpusim::Result<bool> {
    let mesh = mesh(a.devices)?;
    let c = reg.by_name(&a.collective)?;
    if a.format != "markdown" && a.format != "json" {
        return Err(Error::bad_input(format!(
            "unknown format `{}` (expected markdown or json)",
            a.format
        )));
    }
    let p = mesh.size();
    limits::fit(
        format!("`tpusim trace {}` at P={p}", a.collective),
        p,
        &|q| {
            c.call(
                &Mesh::new(q, "x")?,
                &tpusim::trace::trace_shape(c.as_ref(), q),
                DType::F32,
            )
        },
        Work::Trace,
    )?;
    let table = tpusim::trace::trace(c.as_ref(), &mesh)?;
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
