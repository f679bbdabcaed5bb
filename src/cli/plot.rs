//! `tpusim plot`: a figure of bench result files, or of a modeled timeline.

use super::out::outln;
use std::path::PathBuf;
use tpusim::files::Output;
use tpusim::plot::{bench_figure, bench_series, timeline_figure, timeline_lanes, Format};

#[derive(clap::Args)]
pub struct PlotArgs {
    /// Bench result files (`tpusim bench … --json FILE`), or one timeline
    /// (`tpusim run … --model PRESET --timeline FILE`).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// The figure to write: .svg or .png.
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
}

/// True when `path` holds a Chrome trace (a timeline) rather than bench rows.
fn is_timeline(path: &std::path::Path) -> bool {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|v| v.get("traceEvents").is_some())
}

/// `tpusim plot`.
pub fn plot(a: &PlotArgs) -> tpusim::Result<bool> {
    let format = Format::of(&a.output)?;
    let out = Output::check(&a.output, "figure")?;
    let (bytes, what) = if a.files.len() == 1 && is_timeline(&a.files[0]) {
        let lanes = timeline_lanes(&a.files[0])?;
        let title = format!(
            "{} (modeled timeline)",
            a.files[0]
                .file_stem()
                .map_or_else(String::new, |s| s.to_string_lossy().into_owned())
        );
        let n = lanes.len();
        (
            timeline_figure(&lanes, &title, format)?,
            format!("{n} lanes"),
        )
    } else {
        let series = bench_series(&a.files)?;
        let n = series.len();
        (bench_figure(&series, format)?, format!("{n} lines"))
    };
    out.write_with(|w| w.write_all(&bytes))?;
    outln!("figure written to {} ({what})", a.output.display())?;
    Ok(true)
}
