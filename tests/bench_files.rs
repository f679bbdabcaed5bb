//! `tpusim bench` result files describe their run, `bench --model` is the modeled TPU's
//! table, and `tpusim plot` draws them.

use std::process::Command;

fn tpusim(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tpusim"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

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
