//! The collective matmuls (`all_gather_matmul`, `matmul_reduce_scatter`): results against
//! matmuls computed here, the verifier on them and their broken variants, step tables,
//! and the cost model's compute term against the closed form of an overlapped ring.

mod common;

use common::tpusim;

use std::sync::Arc;
use tpusim::collectives::{variants::variant, Collective, MatmulShape, Registry};
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::mesh::Placement;
use tpusim::model::{Knob, ModelSpec, TimedEvent, Unit};
use tpusim::run::Job;
use tpusim::sched::ScheduleSpec;
use tpusim::verify::ProblemKind;
use tpusim::{DType, HostArray, Mesh};

const NAMES: [&str; 2] = ["all_gather_matmul", "matmul_reduce_scatter"];

fn collective(name: &str) -> Arc<dyn Collective> {
    Registry::builtin().by_name(name).unwrap()
}

fn job(name: &str, p: usize, shape: &[usize], dtype: DType) -> Job {
    Job::collective(
        collective(name),
        Placement::whole(Mesh::new(p, "x").unwrap()),
    )
    .with_shape(shape)
    .with_dtype(dtype)
}

/// Small integers, exact in every dtype and under every sum these shapes make.
fn small(d: usize, i: usize, salt: usize) -> f64 {
    ((d * 7 + i * 13 + salt * 5) % 9) as f64 - 4.0
}

/// `[x, w]` per device, from [`small`].
fn exact_inputs(p: usize, s: MatmulShape, dtype: DType) -> Vec<Vec<HostArray>> {
    (0..p)
        .map(|d| {
            let x: Vec<f64> = (0..s.m * s.k).map(|i| small(d, i, 0)).collect();
            let w: Vec<f64> = (0..s.k * s.n).map(|i| small(d, i, 1)).collect();
            vec![
                HostArray::from_values(dtype, &s.x(), &x).unwrap(),
                HostArray::from_values(dtype, &s.w(), &w).unwrap(),
            ]
        })
        .collect()
}

/// `a @ b` of row-major `[m, k]` and `[k, n]` values.
fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
        }
    }
    c
}

fn values(a: &HostArray) -> Vec<f64> {
    a.words.iter().map(|&w| a.dtype.value_of(w)).collect()
}

/// What each device must hold, computed here: `all_gather(x) @ w_i` as `[P, M, N]`, or
/// rows `i·M/P..` of `Σ_j x_j @ w_j`.
fn expected(name: &str, inputs: &[Vec<HostArray>], s: MatmulShape) -> Vec<Vec<f64>> {
    let p = inputs.len();
    let products: Vec<Vec<Vec<f64>>> = inputs
        .iter()
        .map(|wdev| {
            inputs
                .iter()
                .map(|xdev| matmul(&values(&xdev[0]), &values(&wdev[1]), s.m, s.k, s.n))
                .collect()
        })
        .collect();
    (0..p)
        .map(|i| {
            if name == "all_gather_matmul" {
                products[i].concat()
            } else {
                let rows = s.m / p;
                (i * rows * s.n..(i + 1) * rows * s.n)
                    .map(|e| (0..p).map(|j| products[j][j][e]).sum())
                    .collect()
            }
        })
        .collect()
}

#[test]
fn exact_data_matches_a_matmul_computed_here_on_the_cpu() {
    for name in NAMES {
        for p in [1usize, 2, 3, 4, 5, 8] {
            let s = MatmulShape {
                m: 2 * p,
                k: 24,
                n: 40,
            };
            for dtype in [DType::F32, DType::BF16, DType::F16, DType::I32] {
                let inputs = exact_inputs(p, s, dtype);
                for spec in ["eager", "lazy", "random:7"] {
                    let j = job(name, p, &[s.m, s.k, s.n], dtype)
                        .with_schedule(ScheduleSpec::parse(spec).unwrap());
                    let out = j.execute(&mut CpuExecutor::new(), &inputs).unwrap();
                    let want = expected(name, &inputs, s);
                    for d in 0..p {
                        assert_eq!(
                            values(&out[d][0]),
                            want[d],
                            "{name} P={p} {dtype} {spec} device {d}"
                        );
                    }
                    // The reference agrees (exact data: bit for bit).
                    assert_eq!(out, j.reference(&inputs).unwrap(), "{name} P={p} {dtype}");
                }
            }
        }
    }
}

#[test]
fn random_data_is_within_the_k_term_bound_of_the_reference() {
    // Uniform [0, 1) inputs: the f32 sums' error is far inside k·u of Σ|ab|, the 16-bit
    // results one rounding from the reference's.
    for name in NAMES {
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            for (p, shape) in [
                (4usize, vec![8, 512, 64]),
                (3, vec![6, 96]),
                (8, vec![8, 128, 32]),
            ] {
                let j = job(name, p, &shape, dtype);
                let r = j.run(&mut CpuExecutor::new(), p as u64).unwrap();
                assert_eq!(r.wrong, 0, "{name} P={p} {shape:?} {dtype}");
                let c = collective(name);
                assert!(c.tolerance_at(&shape, dtype, p) > 0.0);
            }
        }
        // Integers are exact: no tolerance.
        assert_eq!(
            collective(name).tolerance_at(&[8, 64, 8], DType::I32, 4),
            0.0
        );
    }
    // f32 with k = 512 allows 513 units of 2^-24 and two roundings; bf16 two of its own.
    let t = collective("all_gather_matmul").tolerance_at(&[8, 512, 64], DType::F32, 4);
    assert!((t as f64 - 515.0 * 2f64.powi(-24)).abs() < 1e-9, "{t}");
    let t = collective("all_gather_matmul").tolerance_at(&[8, 512, 64], DType::BF16, 4);
    assert!(
        (t as f64 - (2f64.powi(-7) + 513.0 * 2f64.powi(-24))).abs() < 1e-6,
        "{t}"
    );
}

#[test]
fn runs_on_the_gpu() {
    for name in NAMES {
        let c = collective(name);
        for p in [1usize, 3, 4] {
            let mesh = Mesh::new(p, "x").unwrap();
            let shape = c.default_shape(p);
            for dtype in [DType::F32, DType::I32, DType::BF16] {
                let r =
                    common::run_checked(&c, &mesh, &shape, dtype, &mut *common::gpu(), 3).unwrap();
                assert_eq!(r.wrong, 0, "{name} P={p} {dtype} on the GPU");
            }
        }
    }
}

#[test]
fn clean_for_p_2_to_8() {
    let specs = |p| ScheduleSpec::check_set(p, 60, 1);
    for name in NAMES {
        for p in 2usize..=8 {
            let r = job(name, p, &collective(name).default_shape(p), DType::F32)
                .check(&specs(p))
                .unwrap();
            assert!(
                r.is_clean(),
                "{name} P={p}: {:?}",
                r.findings.first().map(|f| f.problem.to_string())
            );
        }
    }
}

#[test]
fn broken_variants_are_reported_as_their_kind() {
    for (name, v) in [
        ("all_gather_matmul", "compute-before-wait"),
        ("all_gather_matmul", "no-capacity-sem"),
        ("matmul_reduce_scatter", "add-before-wait"),
        ("matmul_reduce_scatter", "no-capacity-sem"),
    ] {
        let var = variant(name, v).unwrap();
        assert_eq!(var.expect, Some(ProblemKind::Race));
        for p in [3usize, 4, 8] {
            let mesh = Mesh::new(p, "x").unwrap();
            let r = Job::variant(collective(name), var, Placement::whole(mesh))
                .check(&ScheduleSpec::check_set(p, 30, 0))
                .unwrap();
            assert!(
                r.findings
                    .iter()
                    .any(|f| Some(f.problem.kind()) == var.expect),
                "{name} --variant {v} P={p}: {:?}",
                r.findings
                    .iter()
                    .map(|f| f.problem.to_string())
                    .collect::<Vec<_>>()
            );
        }
    }
    // The compute side of the race is the matmul (or the add) itself.
    let var = variant("all_gather_matmul", "compute-before-wait").unwrap();
    let mesh = Mesh::new(4, "x").unwrap();
    let r = Job::variant(collective("all_gather_matmul"), var, Placement::whole(mesh))
        .check(&[ScheduleSpec::Eager])
        .unwrap();
    let shown = r.findings[0].problem.to_string();
    assert!(
        shown.contains("dot_general") && shown.contains("x_buf"),
        "{shown}"
    );
}

#[test]
fn step_tables_name_the_blocks_a_product_depends_on() {
    let t = job("all_gather_matmul", 4, &[1, 2, 2], DType::F32)
        .trace()
        .unwrap();
    let md = t.markdown();
    // After the last step every device holds every block's product, in order.
    let last = md.lines().last().unwrap();
    assert_eq!(
        last.matches("`(f(x0), f(x1), f(x2), f(x3),").count(),
        4,
        "{md}"
    );
    // After step 0, device 1 has multiplied its own block and holds device 0's.
    let row0 = md.lines().find(|l| l.starts_with("| [0] |")).unwrap();
    assert!(row0.contains("`(-, f(x1), -, -, x1, x0)`"), "{md}");
    let j = t.json();
    assert_eq!(
        j["rows"][1]["cells"][1][1],
        serde_json::json!({"f": [[1, 0]]})
    );

    let t = job("matmul_reduce_scatter", 4, &[4, 2, 2], DType::F32)
        .trace()
        .unwrap();
    let md = t.markdown();
    // Device 2's result: block 2 of every device's product, summed around the ring.
    assert!(md.contains("f(x2.2,x1.2,x0.2,x3.2))"), "{md}");
}

/// Closed form of a ring of P steps whose step i multiplies one block (`c` seconds)
/// while the block of step i+1 travels (`d`): P−1 overlapped steps and the last
/// matmul, `(P−1)·max(c, d) + c`: max(compute, communication) of the overlapped steps,
/// plus the one step that has nothing to hide.
fn closed_form(p: usize, c: f64, d: f64) -> f64 {
    (p - 1) as f64 * c.max(d) + c
}

#[test]
fn modeled_time_at_a_transformer_mlp_shape_is_the_overlapped_closed_form() {
    // x: 8192 x 8192 bf16 over 8 devices (1024 x 8192 each), w: 8192 x 4096 per device.
    let (p, m, k, n) = (8usize, 1024usize, 8192usize, 4096usize);
    for link_gbps in [None, Some(20.0)] {
        let spec = ModelSpec {
            preset: "v5e".into(),
            overrides: link_gbps.map(|g| (Knob::LinkGbps, g)).into_iter().collect(),
            topology: None,
        };
        let model = spec.build().unwrap();
        let r = job("all_gather_matmul", p, &[m, k, n], DType::BF16)
            .model(&model, None)
            .unwrap();
        let c = (m * k * n) as f64 / model.mxu_rate(DType::BF16);
        let d = (m * k * 2) as f64 / model.link_bw + model.link_latency;
        let want = closed_form(p, c, d);
        let err = (r.seconds - want).abs() / want;
        eprintln!(
            "all_gather_matmul P={p} {m}x{k}x{n} bf16 on v5e (link {:.0} GB/s): modeled {:.1} us, closed form {:.1} us (c {:.1} us, d {:.1} us), {:.1}% off; hidden {:.1}%",
            model.link_bw / 1e9,
            r.seconds * 1e6,
            want * 1e6,
            c * 1e6,
            d * 1e6,
            100.0 * err,
            100.0 * r.overlap.hidden().unwrap()
        );
        assert!(err < 0.15, "{} vs {want}", r.seconds);
        let hidden = r.overlap.hidden().unwrap();
        if c > d {
            // Compute-bound: every transfer runs under a matmul.
            assert!(hidden > 0.95, "{hidden}");
            let (tflops, peak) = r.tflops().unwrap();
            assert!(
                peak > 0.9 && peak <= 1.0,
                "{tflops} TFLOP/s, {peak} of peak"
            );
        } else {
            // Link-bound: the matmul covers c/d of each transfer.
            assert!((hidden - c / d).abs() < 0.1, "{hidden} vs {}", c / d);
        }
    }
    // The reduce-scatter: partial sums of 1024 x 2048 f32 travel, link-bound on v5e.
    let (m, k, n) = (8192usize, 4096usize, 2048usize);
    let model = ModelSpec::preset("v5e").build().unwrap();
    let r = job("matmul_reduce_scatter", p, &[m, k, n], DType::BF16)
        .model(&model, None)
        .unwrap();
    let rows = m / p;
    let c = (rows * k * n) as f64 / model.mxu_rate(DType::BF16);
    let d = (rows * n * 4) as f64 / model.link_bw + model.link_latency;
    let want = closed_form(p, c, d);
    let err = (r.seconds - want).abs() / want;
    eprintln!(
        "matmul_reduce_scatter P={p} {m}x{k}x{n} bf16 on v5e: modeled {:.1} us, closed form {:.1} us, {:.1}% off; hidden {:.1}%",
        r.seconds * 1e6,
        want * 1e6,
        100.0 * err,
        100.0 * r.overlap.hidden().unwrap()
    );
    assert!(err < 0.15, "{} vs {want}", r.seconds);
}

#[test]
fn the_timeline_shows_the_mxu_busy_while_the_ring_transfers() {
    let model = ModelSpec::preset("v5e").build().unwrap();
    let r = job("all_gather_matmul", 8, &[256, 2048, 1024], DType::BF16)
        .model(&model, None)
        .unwrap();
    let on0 = |want: Unit| -> Vec<(f64, f64)> {
        r.events
            .iter()
            .filter_map(|e| match e {
                TimedEvent::Compute {
                    device: 0,
                    unit,
                    start,
                    end,
                    ..
                } if *unit == want => Some((*start, *end)),
                _ => None,
            })
            .collect()
    };
    let mxu = on0(Unit::Mxu);
    assert_eq!(mxu.len(), 8, "one matmul per step");
    assert!(
        !on0(Unit::LoadStore).is_empty(),
        "the stores run on the load/store slots"
    );
    let sends: Vec<(f64, f64)> = r
        .events
        .iter()
        .filter_map(|e| match e {
            TimedEvent::Dma {
                from: 0,
                to,
                start,
                end,
                ..
            } if *to != 0 => Some((*start, *end)),
            _ => None,
        })
        .collect();
    assert_eq!(sends.len(), 7);
    for (s, e) in &sends {
        assert!(
            mxu.iter().any(|(a, b)| a < e && s < b),
            "the forward {s}..{e} overlaps a matmul"
        );
    }
    // The Chrome trace has the MXU and VPU tracks, the matmuls on the first.
    let json = r.chrome_trace("all_gather_matmul");
    let ev = json["traceEvents"].as_array().unwrap();
    let track = |name: &str| {
        ev.iter()
            .find(|e| e["name"] == "thread_name" && e["pid"] == 0 && e["args"]["name"] == name)
            .map(|e| e["tid"].clone())
            .unwrap()
    };
    let mxu_tid = track("MXU");
    assert_ne!(mxu_tid, track("VPU"));
    assert!(ev
        .iter()
        .any(|e| e["ph"] == "X" && e["tid"] == mxu_tid && e["name"] == "dot_general"));
}

#[test]
fn the_mxu_rate_follows_the_dtype() {
    let m = ModelSpec::preset("v6e").build().unwrap();
    assert_eq!(m.mxu_flops, 918e12);
    assert_eq!(m.mxu_rate(DType::BF16), 459e12);
    assert_eq!(m.mxu_rate(DType::I8), 918e12);
    assert_eq!(m.mxu_rate(DType::F32), 459e12 / 6.0);
    let over = ModelSpec {
        preset: "v5e".into(),
        overrides: vec![(Knob::MxuTflops, 100.0)],
        topology: None,
    }
    .build()
    .unwrap();
    assert_eq!(over.mxu_flops, 100e12);
    // An f32 matmul takes six times a bf16 one's time.
    let time = |dtype| {
        job("all_gather_matmul", 2, &[128, 512, 512], dtype)
            .model(&over, None)
            .unwrap()
            .overlap
            .mxu_seconds
    };
    let ratio = time(DType::F32) / time(DType::BF16);
    assert!((ratio - 6.0).abs() < 1e-9, "{ratio}");
}

#[test]
fn the_command_line_runs_models_and_benches_them() {
    for (name, big) in [
        ("all_gather_matmul", "1024x8192x4096"),
        ("matmul_reduce_scatter", "8192x4096x2048"),
    ] {
        let (code, out, err) = tpusim(&["run", name, "-p", "4", "--backend", "cpu"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains(": 0 wrong of"), "{out}");
        // Modeled at a size too large to execute here: no data, no adapter.
        let (code, out, err) = tpusim(&[
            "run",
            name,
            "-p",
            "8",
            "--shape",
            big,
            "--dtype",
            "bf16",
            "--model",
            "v5e",
            "--no-exec",
        ]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("modeled only (--no-exec)"), "{out}");
        assert!(out.contains("TFLOP/s per chip"), "{out}");
        assert!(out.contains("communication hidden: "), "{out}");
    }
    let (code, _, err) = tpusim(&["run", "all_gather_matmul", "--no-exec"]);
    assert_eq!(code, 2);
    assert!(err.contains("needs --model"), "{err}");
    // What the chip's VMEM cannot hold is refused, as on the chip.
    let (code, _, err) = tpusim(&[
        "run",
        "all_gather_matmul",
        "-p",
        "8",
        "--shape",
        "8192x4096x2048",
        "--model",
        "v5e",
        "--no-exec",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("VMEM of `all_gather_matmul` on v5e"), "{err}");
    let (code, _, err) = tpusim(&[
        "run",
        "matmul_reduce_scatter",
        "-p",
        "3",
        "--shape",
        "8x16x16",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("not divisible by 3"), "{err}");
    let (code, _, err) = tpusim(&["run", "all_gather_matmul", "--shape", "2x3x4x5"]);
    assert_eq!(code, 2);
    assert!(err.contains("takes a shape MxKxN"), "{err}");

    // bench: a TFLOP/s column for collectives that compute, `-` for the others.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("b.json");
    let (code, out, err) = tpusim(&[
        "bench",
        "all_gather_matmul",
        "-p",
        "2",
        "--backend",
        "cpu",
        "-b",
        "64K",
        "-e",
        "64K",
        "-n",
        "1",
        "-w",
        "0",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("TFLOP/s"), "{out}");
    let row = out.lines().last().unwrap();
    let tflops: f64 = row.split_whitespace().last().unwrap().parse().unwrap();
    assert!(tflops > 0.0, "{row}");
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    // 64 KiB gathered: x of 64 x 128 f32 per device, w 128 x 128; 2 devices multiply
    // 2 blocks each.
    let r = &j["rows"][0];
    assert_eq!(r["macs"], 2 * 2 * 64 * 128 * 128);
    assert!(r["tflops"].as_f64().unwrap() > 0.0);
    let (code, out, _) = tpusim(&[
        "bench",
        "psum",
        "-p",
        "2",
        "--backend",
        "cpu",
        "-b",
        "4K",
        "-e",
        "4K",
        "-n",
        "1",
    ]);
    assert_eq!(code, 0);
    assert_eq!(
        out.lines().last().unwrap().split_whitespace().last(),
        Some("-")
    );

    // apply shards one array: the matmuls take two operands per device.
    let x = dir.path().join("x.npy");
    let x_arr = HostArray::from_values(DType::F32, &[8, 128], &[1.0; 1024]).unwrap();
    tpusim::npy::write_npy(&x, &x_arr).unwrap();
    let y = dir.path().join("y.npy");
    let (code, _, err) = tpusim(&[
        "apply",
        "all_gather_matmul",
        "--input",
        x.to_str().unwrap(),
        "--output",
        y.to_str().unwrap(),
        "-p",
        "2",
        "--backend",
        "cpu",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("takes 2 operands per device (x_ref, w_ref)"),
        "{err}"
    );
}
