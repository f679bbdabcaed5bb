//! `tpusim bench` result files describe their run, `bench --model` is the modeled TPU's
//! table, and `tpusim plot` draws them.

mod common;

use common::tpusim;

fn temp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tpusim-bench-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn read_json(p: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// ppermute on the v5e ring moves one device's buffer over one link: the modeled time is
/// size / 50 GB/s plus one hop's 1 us latency, at every size.
#[test]
fn bench_model_prints_the_modeled_table_and_a_self_describing_file() {
    let json = temp("model.json");
    let (code, out, err) = tpusim(&[
        "bench",
        "ppermute",
        "-p",
        "4",
        "--model",
        "v5e",
        "-b",
        "1M",
        "-e",
        "16M",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("on the cost model v5e"), "{out}");
    let j = read_json(&json);
    let rows = j["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{j}");
    for r in rows {
        let size = r["size"].as_f64().unwrap();
        let want = size / 50e9 * 1e6 + 1.0;
        let got = r["time_us"].as_f64().unwrap();
        assert!((got - want).abs() < 1e-6 * want, "{got} vs {want}: {r}");
        let algbw = r["algbw_gbps"].as_f64().unwrap();
        assert!(
            (algbw - size / (want * 1e-6) / 1e9).abs() < 1e-6 * algbw,
            "{r}"
        );
        assert_eq!(
            r["busbw_gbps"], r["algbw_gbps"],
            "ppermute's bus factor is 1"
        );
    }
    assert_eq!(j["tpusim"], env!("CARGO_PKG_VERSION"));
    assert_eq!(j["model"], "v5e");
    assert_eq!(j["topology"], "ring");
    assert_eq!(j["timing"], "modeled");
    assert_eq!(j["devices"], 4);
    assert_eq!(j["mesh"], "x=4");
    assert_eq!(j["dtype"], "f32");
    assert_eq!(j["schedule"], "eager");
    let cmd: Vec<&str> = j["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(&cmd[1..4], ["bench", "ppermute", "-p"]);
    let date = j["date"].as_str().unwrap();
    assert!(
        date.len() == 20 && date.starts_with("20") && date.ends_with('Z'),
        "{date}"
    );
    // psum keeps its shard in VMEM: 64 MiB does not fit v5e's 128 MiB three times over,
    // so that size is skipped and said so, the others are modeled.
    let (code, out, err) = tpusim(&[
        "bench", "psum", "-p", "8", "--model", "v5e", "-b", "4M", "-e", "64M",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("psum ")).count(),
        2,
        "{out}"
    );
    assert!(err.contains("skipped psum 64M: VMEM"), "{err}");
    // Standard error is not a terminal here: plain lines, no cursor escapes.
    assert!(!err.contains('\x1b') && !err.contains('\r'), "{err:?}");
}

#[test]
fn bench_files_record_the_executor_and_the_run() {
    let json = temp("cpu.json");
    let (code, out, err) = tpusim(&[
        "bench",
        "all_gather",
        "--mesh",
        "2x4",
        "--axis",
        "y",
        "-b",
        "4K",
        "-e",
        "16K",
        "-n",
        "3",
        "-w",
        "1",
        "--backend",
        "cpu",
        "--dtype",
        "bf16",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let j = read_json(&json);
    assert_eq!(j["rows"].as_array().unwrap().len(), 2, "{j}");
    assert_eq!(j["backend"], "cpu");
    assert_eq!(j["executor"], "cpu");
    assert_eq!(j["adapter"], "cpu");
    assert_eq!(j["timing"], "measured");
    assert_eq!(j["devices"], 8);
    assert_eq!(j["group_devices"], 4);
    assert_eq!(j["mesh"], "x=2,y=4");
    assert_eq!(j["axis"], "y");
    assert_eq!(j["dtype"], "bf16");
    assert_eq!(
        (j["iters"].clone(), j["warmup"].clone()),
        (3.into(), 1.into())
    );
    assert!(j["model"].is_null());
    assert_eq!(j["rows"][0]["wrong"], 0);
}

/// Width and height from a PNG's IHDR chunk, after checking its signature.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&bytes[16..20]), be(&bytes[20..24]))
}

#[test]
fn plot_draws_bench_files_and_timelines_as_png_and_svg() {
    let (measured, modeled, timeline) = (temp("m.json"), temp("v5e.json"), temp("tl.json"));
    let (code, out, err) = tpusim(&[
        "bench",
        "psum",
        "-p",
        "4",
        "-b",
        "4K",
        "-e",
        "64K",
        "-n",
        "2",
        "-w",
        "0",
        "--backend",
        "cpu",
        "--json",
        measured.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = tpusim(&[
        "bench",
        "all",
        "-p",
        "4",
        "--model",
        "v5e",
        "-b",
        "4K",
        "-e",
        "1M",
        "--json",
        modeled.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = tpusim(&[
        "run",
        "psum",
        "-p",
        "4",
        "--backend",
        "cpu",
        "--model",
        "v5e",
        "--timeline",
        timeline.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let collectives = tpusim::collectives::Registry::builtin().names().len();

    let png = temp("busbw.png");
    let (code, out, err) = tpusim(&[
        "plot",
        modeled.to_str().unwrap(),
        "-o",
        png.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("({collectives} lines)")), "{out}");
    // The panels, and the legend under them (three entries a row).
    let legend = 16 + 22 * collectives.div_ceil(3) as u32;
    assert_eq!(
        png_size(&std::fs::read(&png).unwrap()),
        (1200, 520 + legend)
    );

    // Two files: a line per collective and file, labelled with the file's name.
    let svg = temp("busbw.svg");
    let (code, out, err) = tpusim(&[
        "plot",
        modeled.to_str().unwrap(),
        measured.to_str().unwrap(),
        "-o",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("({} lines)", collectives + 1)),
        "{out}"
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("the SVG parses");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.tag_name().name() == "text")
        .filter_map(|n| n.text().map(str::trim))
        .collect();
    assert!(
        texts.contains(&"psum (m)") && texts.contains(&"psum (v5e)"),
        "{texts:?}"
    );
    assert!(texts.contains(&"bus bandwidth") && texts.contains(&"time per iteration"));
    // One polyline per line and panel.
    let lines = doc
        .descendants()
        .filter(|n| n.tag_name().name() == "polyline")
        .count();
    assert!(lines >= 2 * (collectives + 1), "{lines} polylines");

    // A timeline: a lane per device track (6 per device) and per ring link (4).
    let t = temp("t.png");
    let (code, out, err) = tpusim(&[
        "plot",
        timeline.to_str().unwrap(),
        "-o",
        t.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("(28 lanes)"), "{out}");
    assert_eq!(png_size(&std::fs::read(&t).unwrap()), (1200, 90 + 22 * 28));
    let tsvg = temp("t.svg");
    let (code, out, err) = tpusim(&[
        "plot",
        timeline.to_str().unwrap(),
        "-o",
        tsvg.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let text = std::fs::read_to_string(&tsvg).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("the SVG parses");
    let labels: Vec<&str> = doc
        .descendants()
        .filter(|n| n.tag_name().name() == "text")
        .filter_map(|n| n.text().map(str::trim))
        .collect();
    assert!(
        labels.contains(&"device 3 / DMA out") && labels.contains(&"ICI links / link 3->0"),
        "{labels:?}"
    );

    // Bad input: an unknown format, a file without rows.
    let (code, _, err) = tpusim(&["plot", modeled.to_str().unwrap(), "-o", "x.jpg"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(".svg or .png"), "{err}");
    let empty = temp("empty.json");
    std::fs::write(&empty, "{}").unwrap();
    let (code, _, err) = tpusim(&["plot", empty.to_str().unwrap(), "-o", svg.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("holds no bench rows"), "{err}");
}
