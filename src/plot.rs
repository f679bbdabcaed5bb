//! `tpusim plot`: figures of `bench` result files (bus bandwidth and time against size,
//! log axes, a line per collective and file) and of modeled timelines (a lane per
//! device track and link), as SVG or PNG, drawn with `plotters`.
//!
//! Labels are laid out (and in a PNG drawn) with a TrueType font found on this machine
//! (`TPUSIM_FONT`, else DejaVu Sans, Liberation Sans, Arial or any `.ttf` under the usual
//! font directories); none found is an error that says so. An SVG names `sans-serif`
//! and leaves the glyphs to its viewer.

use crate::error::{Error, Result};
use plotters::prelude::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The image format of a figure, from its file name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Scalable vector graphics.
    Svg,
    /// A PNG bitmap.
    Png,
}

impl Format {
    /// `.svg` or `.png` (any case); anything else is bad input.
    pub fn of(path: &Path) -> Result<Self> {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_lowercase)
            .as_deref()
        {
            Some("svg") => Ok(Format::Svg),
            Some("png") => Ok(Format::Png),
            _ => Err(Error::bad_input(format!(
                "cannot tell the image format of {}: name it .svg or .png",
                path.display()
            ))),
        }
    }
}

/// One line of a bench figure: a collective of one file.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend label: the collective, with the file's name when several files are drawn.
    pub label: String,
    /// (size in bytes, busbw in GB/s, time in us), by size.
    pub points: Vec<(f64, f64, f64)>,
}

/// The rows of a bench file: the `rows` of a self-describing file, or a bare array of
/// rows (older files, Python's `tpusim.bench`).
fn rows_of(v: &Value) -> Option<&Vec<Value>> {
    v.get("rows")
        .and_then(Value::as_array)
        .or_else(|| v.as_array())
}

/// Reads a JSON file, once (it may be a FIFO) and with a bound: its text may take a
/// tenth of the memory available (the parsed values take several times their text); the
/// parse stops at the first byte that cannot be JSON (`/dev/zero`: the first).
fn read_json(path: &Path) -> Result<Value> {
    let cap = crate::budget::available()?.map(|a| a.bytes / 10);
    crate::files::read_with(path, "input", cap, |r| {
        serde_json::from_reader(r).map_err(|e| {
            if e.is_io() {
                Error::File {
                    action: "read input".into(),
                    path: path.to_path_buf(),
                    source: e.into(),
                }
            } else {
                Error::bad_input(format!("{} is not JSON: {e}", path.display()))
            }
        })
    })
}

/// The lines of bench files `files` ([`Series`]), in file order then collective order.
pub fn bench_series(files: &[PathBuf]) -> Result<Vec<Series>> {
    let values = files
        .iter()
        .map(|f| read_json(f))
        .collect::<Result<Vec<_>>>()?;
    series_of(files, &values)
}

/// [`bench_series`] of the files' values, read already.
fn series_of(files: &[PathBuf], values: &[Value]) -> Result<Vec<Series>> {
    let mut out = Vec::new();
    for (f, v) in files.iter().zip(values) {
        let rows = rows_of(v).ok_or_else(|| {
            Error::bad_input(format!(
                "{} holds no bench rows (write one with `tpusim bench … --json FILE`)",
                f.display()
            ))
        })?;
        let stem = f
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        let mut by_name: Vec<Series> = Vec::new();
        for r in rows {
            let field = |k: &str| r.get(k).and_then(Value::as_f64);
            let (Some(name), Some(size), Some(busbw), Some(time)) = (
                r.get("collective").and_then(Value::as_str),
                field("size"),
                field("busbw_gbps"),
                field("time_us"),
            ) else {
                return Err(Error::bad_input(format!(
                    "{}: a row without collective, size, busbw_gbps and time_us: {r}",
                    f.display()
                )));
            };
            // A log axis has no place for a size of zero or less: such a row is left
            // out of the figure (nor can bandwidths of it mean anything).
            if !(size.is_finite() && size > 0.0) {
                continue;
            }
            let label = if files.len() > 1 {
                format!("{name} ({stem})")
            } else {
                name.to_string()
            };
            match by_name.iter_mut().find(|s| s.label == label) {
                Some(s) => s.points.push((size, busbw, time)),
                None => by_name.push(Series {
                    label,
                    points: vec![(size, busbw, time)],
                }),
            }
        }
        for s in &mut by_name {
            s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        out.extend(by_name);
    }
    if out.iter().all(|s| s.points.is_empty()) {
        return Err(Error::bad_input(
            "the bench files hold no rows to plot (none with a size above zero)",
        ));
    }
    Ok(out)
}

/// One bar of a timeline lane.
#[derive(Clone, Debug, PartialEq)]
pub struct Lane {
    /// `device 0 / DMA out`, `ICI links / link 0->1`.
    pub name: String,
    /// (start, duration) in microseconds.
    pub spans: Vec<(f64, f64)>,
}

/// The lanes of a Chrome trace file written by `tpusim run … --timeline`: one per
/// (process, thread) with complete events, named by their metadata, in process then
/// thread order.
pub fn timeline_lanes(path: &Path) -> Result<Vec<Lane>> {
    lanes_of(path, &read_json(path)?)
}

/// [`timeline_lanes`] of the file's value, read already.
fn lanes_of(path: &Path, v: &Value) -> Result<Vec<Lane>> {
    let events = v
        .get("traceEvents")
        .and_then(Value::as_array)
        .or_else(|| v.as_array())
        .ok_or_else(|| {
            Error::bad_input(format!(
                "{} holds no traceEvents (write one with `tpusim run … --model PRESET --timeline FILE`)",
                path.display()
            ))
        })?;
    use std::collections::BTreeMap;
    let id = |e: &Value, k: &str| e.get(k).and_then(Value::as_i64).unwrap_or(0);
    let mut process = BTreeMap::new();
    let mut thread = BTreeMap::new();
    let mut spans: BTreeMap<(i64, i64), Vec<(f64, f64)>> = BTreeMap::new();
    for e in events {
        let name = e
            .get("args")
            .and_then(|a| a.get("name"))
            .and_then(Value::as_str);
        match (
            e.get("ph").and_then(Value::as_str),
            e.get("name").and_then(Value::as_str),
        ) {
            (Some("M"), Some("process_name")) => {
                process.insert(id(e, "pid"), name.unwrap_or("").to_string());
            }
            (Some("M"), Some("thread_name")) => {
                thread.insert((id(e, "pid"), id(e, "tid")), name.unwrap_or("").to_string());
            }
            (Some("X"), _) => {
                let f = |k: &str| e.get(k).and_then(Value::as_f64).unwrap_or(0.0);
                // A time that is not a finite number at or after zero has no place on
                // the modeled clock (nor does a span that ends past what f64 holds).
                let (ts, dur) = (f("ts"), f("dur"));
                if !(ts >= 0.0 && dur >= 0.0 && (ts + dur).is_finite()) {
                    continue;
                }
                spans
                    .entry((id(e, "pid"), id(e, "tid")))
                    .or_default()
                    .push((ts, dur));
            }
            _ => {}
        }
    }
    if spans.is_empty() {
        return Err(Error::bad_input(format!(
            "{} holds no timed events to draw",
            path.display()
        )));
    }
    Ok(spans
        .into_iter()
        .map(|((pid, tid), spans)| Lane {
            name: format!(
                "{} / {}",
                process
                    .get(&pid)
                    .cloned()
                    .unwrap_or_else(|| format!("process {pid}")),
                thread
                    .get(&(pid, tid))
                    .cloned()
                    .unwrap_or_else(|| format!("track {tid}"))
            ),
            spans,
        })
        .collect())
}

/// True when `path` holds a Chrome trace (a timeline) rather than bench rows.
pub fn is_timeline(path: &Path) -> bool {
    read_json(path).is_ok_and(|v| is_trace(&v))
}

fn is_trace(v: &Value) -> bool {
    v.get("traceEvents").is_some()
}

/// What `tpusim plot` does: one timeline file drawn as [`timeline_figure`], else bench
/// files as [`bench_figure`], written to `output` (.svg or .png; written whole or not at
/// all). Returns what was drawn: `9 lines`, `24 lanes`.
pub fn plot_files(files: &[PathBuf], output: &Path) -> Result<String> {
    let format = Format::of(output)?;
    if files.is_empty() {
        return Err(Error::bad_input(
            "plot needs at least one bench or timeline file",
        ));
    }
    let inputs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let out = crate::files::Output::check_apart(output, "figure", &inputs)?;
    // Each file is read once (a FIFO can be read only once).
    let values = files
        .iter()
        .map(|f| read_json(f))
        .collect::<Result<Vec<_>>>()?;
    let (bytes, what) = if files.len() == 1 && is_trace(&values[0]) {
        let lanes = lanes_of(&files[0], &values[0])?;
        let stem = files[0]
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        let title = format!("{stem} (modeled timeline)");
        (
            timeline_figure(&lanes, &title, format)?,
            format!("{} lanes", lanes.len()),
        )
    } else {
        let series = series_of(files, &values)?;
        (
            bench_figure(&series, format)?,
            format!("{} lines", series.len()),
        )
    };
    out.write_with(|w| w.write_all(&bytes))?;
    Ok(what)
}

/// A drawing failure as an error.
fn drawing<E: std::fmt::Debug>(e: E) -> Error {
    Error::bad_input(format!("could not draw the figure: {e:?}"))
}

/// A TrueType font for PNG labels, registered with plotters once per process.
fn ensure_font() -> Result<()> {
    use std::sync::OnceLock;
    static FONT: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let path = find_font().ok_or_else(|| {
            "a figure's labels need a TrueType font and none was found (TPUSIM_FONT unset; no DejaVu Sans, Liberation Sans, Arial or other .ttf under /usr/share/fonts, /usr/local/share/fonts, ~/.fonts, /Library/Fonts, /System/Library/Fonts, C:\\Windows\\Fonts): set TPUSIM_FONT=/path/to/font.ttf, or write an .svg".to_string()
        })?;
        let bytes = read_font(&path).map_err(|e| match e {
            Error::BadInput(m) => m,
            e => e.to_string(),
        })?;
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| format!("{} is not a TrueType font plotters can read", path.display()))
    })
    .clone()
    .map_err(Error::bad_input)
}

/// The most bytes a font file may hold (the largest TrueType fonts, CJK ones, are tens
/// of MiB).
const MAX_FONT_BYTES: u64 = 256 << 20;

/// The bytes of font file `path`: a TrueType or OpenType font by its first four bytes
/// (so `/dev/zero` is refused at once), and at most [`MAX_FONT_BYTES`].
fn read_font(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    crate::files::read_with(path, "font", Some(MAX_FONT_BYTES), |r| {
        let fail = |source| Error::File {
            action: "read font".into(),
            path: path.to_path_buf(),
            source,
        };
        let mut bytes = Vec::new();
        r.take(4).read_to_end(&mut bytes).map_err(fail)?;
        if !matches!(
            bytes.as_slice(),
            [0, 1, 0, 0] | b"OTTO" | b"true" | b"ttcf" | b"typ1"
        ) {
            return Err(Error::bad_input(format!(
                "font {} is not a TrueType or OpenType font (set TPUSIM_FONT to a .ttf or .otf file)",
                path.display()
            )));
        }
        r.read_to_end(&mut bytes).map_err(fail)?;
        Ok(bytes)
    })
}

/// `TPUSIM_FONT`, or the first font of the preferred names, or any `.ttf`, under the
/// usual font directories.
fn find_font() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TPUSIM_FONT") {
        return Some(PathBuf::from(p));
    }
    let mut dirs: Vec<PathBuf> = [
        "/usr/share/fonts",
        "/usr/local/share/fonts",
        "/Library/Fonts",
        "/System/Library/Fonts",
        "C:\\Windows\\Fonts",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(Path::new(&home).join(".fonts"));
        dirs.push(Path::new(&home).join(".local/share/fonts"));
    }
    let mut all = Vec::new();
    for d in &dirs {
        collect_ttf(d, 4, &mut all);
    }
    const PREFERRED: [&str; 5] = [
        "DejaVuSans.ttf",
        "LiberationSans-Regular.ttf",
        "Arial.ttf",
        "arial.ttf",
        "FreeSans.ttf",
    ];
    PREFERRED
        .iter()
        .find_map(|n| all.iter().find(|p| p.file_name().is_some_and(|f| f == *n)))
        .or_else(|| all.first())
        .cloned()
}

/// Every `.ttf` under `dir`, at most `depth` levels down, in name order.
fn collect_ttf(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            if depth > 0 {
                collect_ttf(&p, depth - 1, out);
            }
        } else if p.extension().is_some_and(|e| e.eq_ignore_ascii_case("ttf")) {
            out.push(p);
        }
    }
}

/// The bench figure: bus bandwidth (left) and time (right) against size, log axes.
pub fn bench_figure(series: &[Series], format: Format) -> Result<Vec<u8>> {
    let size = (1200, 520 + legend_height(series.len()));
    match format {
        Format::Svg => {
            ensure_font()?; // plotters measures text with it
            let mut s = String::new();
            {
                let root = SVGBackend::with_string(&mut s, size).into_drawing_area();
                draw_bench(&root, series)?;
                root.present().map_err(drawing)?;
            }
            Ok(s.into_bytes())
        }
        Format::Png => {
            ensure_font()?;
            let mut rgb = vec![0u8; (size.0 * size.1 * 3) as usize];
            {
                let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
                draw_bench(&root, series)?;
                root.present().map_err(drawing)?;
            }
            png_bytes(&rgb, size)
        }
    }
}

/// The timeline figure: a lane per track, a bar per event, on the modeled clock.
pub fn timeline_figure(lanes: &[Lane], title: &str, format: Format) -> Result<Vec<u8>> {
    let size = (1200, (90 + 22 * lanes.len()).min(20_000) as u32);
    match format {
        Format::Svg => {
            ensure_font()?; // plotters measures text with it
            let mut s = String::new();
            {
                let root = SVGBackend::with_string(&mut s, size).into_drawing_area();
                draw_timeline(&root, lanes, title)?;
                root.present().map_err(drawing)?;
            }
            Ok(s.into_bytes())
        }
        Format::Png => {
            ensure_font()?;
            let mut rgb = vec![0u8; (size.0 * size.1 * 3) as usize];
            {
                let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
                draw_timeline(&root, lanes, title)?;
                root.present().map_err(drawing)?;
            }
            png_bytes(&rgb, size)
        }
    }
}

/// An RGB buffer as PNG bytes.
fn png_bytes(rgb: &[u8], (w, h): (u32, u32)) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header().map_err(drawing)?;
        writer.write_image_data(rgb).map_err(drawing)?;
    }
    Ok(out)
}

/// The colour of line or track `i` of the `n` in one plot: matplotlib's ten `tab10`
/// colours while they last, else `n` hues evenly around the wheel (neighbours at two
/// lightnesses), so that no two lines or tracks of a plot share one.
fn colour(i: usize, n: usize) -> RGBColor {
    const TAB10: [RGBColor; 10] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    if n <= TAB10.len() {
        return TAB10[i];
    }
    let lightness = if i.is_multiple_of(2) { 0.40 } else { 0.58 };
    let (r, g, b) = HSLColor(i as f64 / n as f64, 0.75, lightness).rgb();
    RGBColor(r, g, b)
}

/// Legend entries per row, under the bench figure's panels.
const LEGEND_COLUMNS: usize = 3;

/// The height of the legend under the bench figure's panels, for `n` lines.
fn legend_height(n: usize) -> u32 {
    (16 + 22 * n.div_ceil(LEGEND_COLUMNS)) as u32
}

/// `bytes` as a tick label of the log axis, whose ticks are powers of ten: `100B`,
/// `10kB`, `1MB`, `1.5GB` (decimal multiples).
fn size_label(bytes: f64) -> String {
    let (v, unit) = match bytes {
        b if b >= 1e9 => (b / 1e9, "GB"),
        b if b >= 1e6 => (b / 1e6, "MB"),
        b if b >= 1e3 => (b / 1e3, "kB"),
        b => (b, "B"),
    };
    if v >= 10.0 || (v - v.round()).abs() < 0.05 {
        format!("{v:.0}{unit}")
    } else {
        format!("{v:.1}{unit}")
    }
}

/// A log axis value: `100`, `2.5`, `0.04`.
fn value_label(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn draw_bench<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    series: &[Series],
) -> Result<()> {
    root.fill(&WHITE).map_err(drawing)?;
    // The legend goes under the panels, outside the data.
    let height = root.dim_in_pixel().1;
    let (top, legend) = root.split_vertically(height - legend_height(series.len()));
    let panels = top.split_evenly((1, 2));
    let all = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1) = (f64::INFINITY, 0.0f64);
    let (mut b0, mut b1, mut t0, mut t1) = (f64::INFINITY, 0.0f64, f64::INFINITY, 0.0f64);
    for &(x, b, t) in all {
        x0 = x0.min(x);
        x1 = x1.max(x);
        if b > 0.0 {
            b0 = b0.min(b);
            b1 = b1.max(b);
        }
        if t > 0.0 {
            t0 = t0.min(t);
            t1 = t1.max(t);
        }
    }
    let widen = |lo: f64, hi: f64| {
        let (lo, hi) = if lo.is_finite() {
            (lo, hi)
        } else {
            (1.0, 10.0)
        };
        (lo / 1.5, hi * 1.5)
    };
    let (x0, x1) = widen(x0, x1);
    for (k, panel) in panels.iter().enumerate() {
        let (lo, hi) = if k == 0 { widen(b0, b1) } else { widen(t0, t1) };
        let (title, ylabel) = if k == 0 {
            ("bus bandwidth", "busbw (GB/s)")
        } else {
            ("time per iteration", "time (us)")
        };
        let mut chart = ChartBuilder::on(panel)
            .caption(title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((x0..x1).log_scale(), (lo..hi).log_scale())
            .map_err(drawing)?;
        chart
            .configure_mesh()
            .x_desc("size (nccl-tests' bytes)")
            .y_desc(ylabel)
            .x_label_formatter(&|v| size_label(*v))
            .y_label_formatter(&|v| value_label(*v))
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(drawing)?;
        for (i, s) in series.iter().enumerate() {
            let c = colour(i, series.len());
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .map(|&(x, b, t)| (x, if k == 0 { b } else { t }))
                .filter(|p| p.1 > 0.0)
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                .map_err(drawing)?;
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, c.filled())))
                .map_err(drawing)?;
        }
    }
    let width = legend.dim_in_pixel().0 as i32 - 140;
    for (i, s) in series.iter().enumerate() {
        let c = colour(i, series.len());
        let x = 70 + (i % LEGEND_COLUMNS) as i32 * width / LEGEND_COLUMNS as i32;
        let y = 8 + (i / LEGEND_COLUMNS) as i32 * 22;
        legend
            .draw(&PathElement::new(
                vec![(x, y + 8), (x + 24, y + 8)],
                c.stroke_width(2),
            ))
            .map_err(drawing)?;
        legend
            .draw(&Circle::new((x + 12, y + 8), 3, c.filled()))
            .map_err(drawing)?;
        legend
            .draw(&Text::new(s.label.clone(), (x + 32, y), ("sans-serif", 13)))
            .map_err(drawing)?;
    }
    Ok(())
}

/// The most lane labels a timeline figure draws: as many as its tallest height holds.
const MAX_LANE_LABELS: usize = 20_000 / 22;

fn draw_timeline<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    lanes: &[Lane],
    title: &str,
) -> Result<()> {
    root.fill(&WHITE).map_err(drawing)?;
    let end = lanes
        .iter()
        .flat_map(|l| l.spans.iter().map(|&(s, d)| s + d))
        .fold(0.0f64, f64::max)
        .max(1e-3);
    let n = lanes.len() as i32;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(190)
        .build_cartesian_2d(0.0..end * 1.02, -0.5..(n as f64 - 0.5))
        .map_err(drawing)?;
    chart
        .configure_mesh()
        .x_desc("modeled time (us)")
        // No more labels than the figure has room for (it is at most 20 000 pixels
        // high; plotters lays out every label asked for).
        .y_labels((lanes.len() + 1).min(MAX_LANE_LABELS))
        .y_label_formatter(&|v: &f64| {
            let i = v.round();
            if (v - i).abs() > 1e-6 || i < 0.0 {
                return String::new();
            }
            lanes
                .get((n - 1 - i as i32) as usize)
                .map_or_else(String::new, |l| l.name.clone())
        })
        .label_style(("sans-serif", 12))
        .disable_y_mesh()
        .draw()
        .map_err(drawing)?;
    // Tracks of the same name share a colour across devices.
    // (A map: a timeline may have a lane of its own kind per device, thousands.)
    let kind_of = |lane: &Lane| {
        let kind = lane.name.rsplit(" / ").next().unwrap_or("");
        if kind.starts_with("link") {
            "link".to_string()
        } else {
            kind.to_string()
        }
    };
    let mut kinds: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for lane in lanes {
        let next = kinds.len();
        kinds.entry(kind_of(lane)).or_insert(next);
    }
    for (i, lane) in lanes.iter().enumerate() {
        let c = colour(kinds[&kind_of(lane)], kinds.len());
        let row = (n - 1 - i as i32) as f64;
        chart
            .draw_series(lane.spans.iter().map(|&(s, d)| {
                Rectangle::new(
                    [(s, row - 0.38), ((s + d).max(s + end * 1e-3), row + 0.38)],
                    c.mix(0.85).filled(),
                )
            }))
            .map_err(drawing)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_read_as_sizes_and_values() {
        assert_eq!(size_label(10000.0), "10kB");
        assert_eq!(size_label(1e6), "1MB");
        assert_eq!(size_label(1.5e9), "1.5GB");
        assert_eq!(size_label(4096.0), "4.1kB");
        assert_eq!(size_label(100.0), "100B");
        assert_eq!(value_label(100.0), "100");
        assert_eq!(value_label(2.5), "2.5");
        assert_eq!(value_label(0.04), "0.04");
    }

    #[test]
    fn no_two_lines_of_a_plot_share_a_colour() {
        for n in 1..=64 {
            let all: std::collections::HashSet<(u8, u8, u8)> = (0..n)
                .map(|i| {
                    let c = colour(i, n);
                    (c.0, c.1, c.2)
                })
                .collect();
            assert_eq!(all.len(), n, "{n} lines");
        }
    }

    #[test]
    fn the_legend_is_under_the_panels() {
        let series: Vec<Series> = (0..12)
            .map(|i| Series {
                label: format!("line {i}"),
                points: vec![(1e3, 1.0 + i as f64, 2.0), (1e6, 10.0 + i as f64, 20.0)],
            })
            .collect();
        let svg = String::from_utf8(bench_figure(&series, Format::Svg).unwrap()).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let panels_end = 520.0;
        for i in 0..12 {
            let label = format!("line {i}");
            let node = doc
                .descendants()
                .find(|n| {
                    n.tag_name().name() == "text" && n.text().map(str::trim) == Some(label.as_str())
                })
                .unwrap_or_else(|| panic!("{label} is drawn"));
            let y: f64 = node.attribute("y").unwrap().parse().unwrap();
            assert!(y > panels_end, "{label} at y = {y}");
        }
    }

    #[test]
    fn formats_come_from_the_file_name() {
        assert_eq!(Format::of(Path::new("a/b.SVG")).unwrap(), Format::Svg);
        assert_eq!(Format::of(Path::new("t.png")).unwrap(), Format::Png);
        assert!(Format::of(Path::new("t.jpg")).is_err());
        assert!(Format::of(Path::new("t")).is_err());
    }
}
