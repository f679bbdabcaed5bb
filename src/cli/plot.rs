//! `tpusim plot`: a figure of bench result files, or of a modeled timeline.

use super::out::outln;
use std::path::PathBuf;

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

/// `tpusim plot`.
pub fn plot(a: &PlotArgs) -> tpusim::Result<bool> {
    super::out::keep_apart(&a.output);
    let what = tpusim::plot::plot_files(&a.files, &a.output)?;
    outln!("figure written to {} ({what})", a.output.display())?;
    Ok(true)
}
