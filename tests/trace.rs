//! Step tables against the seed's tables (P = 4) and hand-derived ones (P = 2, 3), and
//! the cost model against closed-form times.

use approx::assert_relative_eq;
use std::sync::Arc;
use tpusim::collectives;
use tpusim::collectives::Collective;
use tpusim::kernel::{GridSpec, MemorySpace, PallasCall};
use tpusim::mesh::Placement;
use tpusim::model::{chrome_trace, CostModel, Timed, TimedEvent, Topology};
use tpusim::run::Job;
use tpusim::trace::{Cell, Table};

/// The step table of `c` on `mesh`.
fn trace(c: Arc<dyn Collective>, mesh: &Mesh) -> tpusim::Result<Table> {
    Job::collective(c, Placement::whole(mesh.clone())).trace()
}
use tpusim::{DType, Error, Mesh};

fn table(name: &str, p: usize) -> Table {
    let c = collectives::Registry::builtin().by_name(name).unwrap();
    trace(c, &Mesh::new(p, "x").unwrap()).unwrap()
}

/// Cells of one row, in the seed's notation, device by device.
fn row(t: &Table, after: &[usize]) -> Vec<Vec<String>> {
    let r = t
        .rows
        .iter()
        .find(|r| r.after.as_deref() == Some(after))
        .unwrap_or_else(|| panic!("no row after {after:?}"));
    r.cells
        .iter()
        .map(|d| d.iter().map(|c| t.notation(c)).collect())
        .collect()
}

fn split(s: &str) -> Vec<String> {
    s.split(',').map(|v| v.trim().to_string()).collect()
}

#[test]
fn all_gather_matches_the_seed_table() {
    // Seed section 2.5, one row per step: D0..D3 slots.
    let seed = [
        ["x0,-,-,x3", "x0,x1,-,-", "-,x1,x2,-", "-,-,x2,x3"],
        ["x0,-,x2,x3", "x0,x1,-,x3", "x0,x1,x2,-", "-,x1,x2,x3"],
        ["x0,x1,x2,x3", "x0,x1,x2,x3", "x0,x1,x2,x3", "x0,x1,x2,x3"],
    ];
    let t = table("all_gather", 4);
    assert!(
        t.rows[0].cells.iter().flatten().all(|c| *c == Cell::Never),
        "initial row is all `-`"
    );
    for (step, want) in seed.iter().enumerate() {
        let got = row(&t, &[step]);
        for d in 0..4 {
            assert_eq!(got[d], split(want[d]), "step {step} D{d}");
        }
    }
}

#[test]
fn psum_matches_the_seed_table() {
    // Seed section 3.5 (H0, H1, o); `all` is every device's shard, in ring order here.
    let seed = [
        ["x3,x2,x3", "x0,x3,x0", "x1,x0,x1", "x2,x1,x2"],
        ["x1,x2,x3+x2", "x2,x3,x0+x3", "x3,x0,x1+x0", "x0,x1,x2+x1"],
        [
            "x1,x0,x3+x2+x1",
            "x2,x1,x0+x3+x2",
            "x3,x2,x1+x0+x3",
            "x0,x3,x2+x1+x0",
        ],
        ["x3,x0,all", "x0,x1,all", "x1,x2,all", "x2,x3,all"],
    ];
    let t = table("psum", 4);
    for (step, want) in seed.iter().enumerate() {
        let got = row(&t, &[step]);
        for d in 0..4 {
            let want = split(want[d]);
            assert_eq!(got[d][..2], want[..2], "step {step} D{d}");
            if want[2] == "all" {
                let mut terms: Vec<&str> = got[d][2].split('+').collect();
                terms.sort();
                assert_eq!(terms, ["x0", "x1", "x2", "x3"], "step {step} D{d}");
            } else {
                assert_eq!(got[d][2], want[2], "step {step} D{d}");
            }
        }
    }
}

#[test]
fn psum_scatter_matches_the_seed_table_except_its_o_ref() {
    // Seed section 4.6: (H0.T, H0.B, H1.T, H1.B, accum) per device after each (step, phase).
    let seed: [((usize, usize), [&str; 4]); 8] = [
        (
            (0, 0),
            [
                "T1(1+0),B3(3),-,-,T1(1+0)",
                "T2(2+1),B0(0),-,-,T2(2+1)",
                "T3(3+2),B1(1),-,-,T3(3+2)",
                "T0(0+3),B2(2),-,-,T0(0+3)",
            ],
        ),
        (
            (0, 1),
            [
                "T1(1+0),B3(3+0),T2(2+1),-,B3(3+0)",
                "T2(2+1),B0(0+1),T3(3+2),-,B0(0+1)",
                "T3(3+2),B1(1+2),T0(0+3),-,B1(1+2)",
                "T0(0+3),B2(2+3),T1(1+0),-,B2(2+3)",
            ],
        ),
        (
            (1, 0),
            [
                "T1(1+0),B3(3+0),T2(2+1+0),B2(2+3),T2(2+1+0)",
                "T2(2+1),B0(0+1),T3(3+2+1),B3(3+0),T3(3+2+1)",
                "T3(3+2),B1(1+2),T0(0+3+2),B0(0+1),T0(0+3+2)",
                "T0(0+3),B2(2+3),T1(1+0+3),B1(1+2),T1(1+0+3)",
            ],
        ),
        (
            (1, 1),
            [
                "T3(3+2+1),B3(3+0),T2(2+1+0),B2(2+3+0),B2(2+3+0)",
                "T0(0+3+2),B0(0+1),T3(3+2+1),B3(3+0+1),B3(3+0+1)",
                "T1(1+0+3),B1(1+2),T0(0+3+2),B0(0+1+2),B0(0+1+2)",
                "T2(2+1+0),B2(2+3),T1(1+0+3),B1(1+2+3),B1(1+2+3)",
            ],
        ),
        (
            (2, 0),
            [
                "T3(3+2+1+0),B1(1+2+3),T2(2+1+0),B2(2+3+0),T3(3+2+1+0)",
                "T0(0+3+2+1),B2(2+3+0),T3(3+2+1),B3(3+0+1),T0(0+3+2+1)",
                "T1(1+0+3+2),B3(3+0+1),T0(0+3+2),B0(0+1+2),T1(1+0+3+2)",
                "T2(2+1+0+3),B0(0+1+2),T1(1+0+3),B1(1+2+3),T2(2+1+0+3)",
            ],
        ),
        (
            (2, 1),
            [
                "T3(3+2+1+0),B1(1+2+3+0),T0(0+3+2+1),B2(2+3+0),B1(1+2+3+0)",
                "T0(0+3+2+1),B2(2+3+0+1),T1(1+0+3+2),B3(3+0+1),B2(2+3+0+1)",
                "T1(1+0+3+2),B3(3+0+1+2),T2(2+1+0+3),B0(0+1+2),B3(3+0+1+2)",
                "T2(2+1+0+3),B0(0+1+2+3),T3(3+2+1+0),B1(1+2+3),B0(0+1+2+3)",
            ],
        ),
        (
            (3, 0),
            [
                "T3(3+2+1+0),B1(1+2+3+0),T0(0+3+2+1),B0(0+1+2+3),T0(0+3+2+1)",
                "T0(0+3+2+1),B2(2+3+0+1),T1(1+0+3+2),B1(1+2+3+0),T1(1+0+3+2)",
                "T1(1+0+3+2),B3(3+0+1+2),T2(2+1+0+3),B2(2+3+0+1),T2(2+1+0+3)",
                "T2(2+1+0+3),B0(0+1+2+3),T3(3+2+1+0),B3(3+0+1+2),T3(3+2+1+0)",
            ],
        ),
        (
            (3, 1),
            [
                "T1(1+0+3+2),B1(1+2+3+0),T0(0+3+2+1),B0(0+1+2+3),B0(0+1+2+3)",
                "T2(2+1+0+3),B2(2+3+0+1),T1(1+0+3+2),B1(1+2+3+0),B1(1+2+3+0)",
                "T3(3+2+1+0),B3(3+0+1+2),T2(2+1+0+3),B2(2+3+0+1),B2(2+3+0+1)",
                "T0(0+3+2+1),B0(0+1+2+3),T3(3+2+1+0),B3(3+0+1+2),B3(3+0+1+2)",
            ],
        ),
    ];
    let t = table("psum_scatter", 4);
    for ((step, phase), want) in seed {
        let got = row(&t, &[step, phase]);
        for d in 0..4 {
            assert_eq!(got[d][..5], split(want[d])[..], "({step}, {phase}) D{d}");
        }
    }
    // Where the seed is wrong: its o_ref column is `-` until (3, LEFT), but the kernel
    // zeroes o_ref in its first grid point (`o_ref[...] = jnp.zeros_like(o_ref)`), so
    // after (0, LEFT) o_ref holds zeros, not "never written".
    assert_eq!(row(&t, &[0, 0])[0][5..], ["0".to_string(), "0".to_string()]);
    // The seed's final o_ref, T0(all)+B0(all), holds: top and bottom of block d, every device.
    let last = row(&t, &[3, 1]);
    for (d, cells) in last.iter().enumerate() {
        for (i, half) in ["T", "B"].iter().enumerate() {
            let c = &cells[5 + i];
            assert!(c.starts_with(&format!("{half}{d}(")), "{c}");
            let mut devs: Vec<char> = c[3..c.len() - 1]
                .split('+')
                .map(|s| s.chars().next().unwrap())
                .collect();
            devs.sort();
            assert_eq!(devs, ['0', '1', '2', '3'], "{c}");
        }
    }
}

#[test]
fn small_meshes_match_hand_derived_tables() {
    // ppermute: device i ends with x(i-1).
    for p in [2usize, 3] {
        let t = table("ppermute", p);
        let last = &t.rows.last().unwrap().cells;
        for (d, cells) in last.iter().enumerate() {
            assert_eq!(cells[0], Cell::Sum(vec![((d + p - 1) % p, 0)], 0));
        }
    }
    // all_gather: after step s, device i holds slots i, i-1, ..., i-s-1 (mod P).
    for p in [2usize, 3] {
        let t = table("all_gather", p);
        for s in 0..p - 1 {
            let cells = &t
                .rows
                .iter()
                .find(|r| r.after == Some(vec![s]))
                .unwrap()
                .cells;
            for (i, dev) in cells.iter().enumerate() {
                for (slot, cell) in dev.iter().enumerate() {
                    let held = (0..=s + 1).any(|k| (i + p - k) % p == slot);
                    let want = if held {
                        Cell::Sum(vec![(slot, 0)], 0)
                    } else {
                        Cell::Never
                    };
                    assert_eq!(*cell, want, "P={p} step {s} D{i} slot {slot}");
                }
            }
        }
    }
    // psum: after step s, o_ref on device i is x(i-1) + x(i-2) + ... + x(i-1-s).
    for p in [2usize, 3] {
        let t = table("psum", p);
        for s in 0..p {
            let cells = &t
                .rows
                .iter()
                .find(|r| r.after == Some(vec![s]))
                .unwrap()
                .cells;
            for (i, dev) in cells.iter().enumerate() {
                let want: Vec<(usize, usize)> =
                    (1..=s + 1).map(|k| ((i + 2 * p - k) % p, 0)).collect();
                assert_eq!(dev[2], Cell::Sum(want, 0), "P={p} step {s} D{i}");
            }
        }
    }
}

#[test]
fn json_has_the_documented_shape() {
    let j = table("psum", 2).json();
    assert_eq!(j["collective"], "psum");
    assert_eq!(j["devices"], 2);
    assert_eq!(
        j["columns"],
        serde_json::json!(["hbm_buf[0]", "hbm_buf[1]", "o_ref"])
    );
    assert!(j["rows"][0]["after"].is_null());
    assert_eq!(j["rows"][0]["cells"][0][0], serde_json::Value::Null);
    let last = &j["rows"][2];
    assert_eq!(last["after"], serde_json::json!([1]));
    // Device 0 after step 1: o_ref = x1 + x0 as [device, block] pairs.
    assert_eq!(last["cells"][0][2], serde_json::json!([[1, 0], [0, 0]]));
}

fn modeled(call: &PallasCall, p: usize, m: &CostModel) -> (f64, Vec<TimedEvent>) {
    let mesh = Mesh::new(p, "x").unwrap();
    let program = call.lower(&mesh).unwrap();
    let run = Timed::new(&program, m.clone()).unwrap().run().unwrap();
    (run.seconds, run.events)
}

#[test]
fn one_dma_and_a_full_ring_take_their_formula_times() {
    let m = CostModel::preset("v5e").unwrap();
    let rows = 1024usize;
    let bytes = (rows * 128 * 4) as f64;
    let mesh4 = Mesh::new(4, "x").unwrap();
    // One remote DMA per device, each on its own link: bytes / link_bw + latency.
    let shift = collectives::Registry::builtin()
        .by_name("ppermute")
        .unwrap()
        .call(&mesh4, &[rows, 128], DType::F32)
        .unwrap();
    let (t, events) = modeled(&shift, 4, &m);
    assert_relative_eq!(t, bytes / m.link_bw + m.link_latency, max_relative = 1e-9);
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, TimedEvent::Dma { .. }))
            .count(),
        4
    );
    // The source is read when the last byte leaves; it lands one link latency later.
    for e in &events {
        if let TimedEvent::Dma {
            start, sent, end, ..
        } = e
        {
            assert_relative_eq!(*sent - *start, bytes / m.link_bw, max_relative = 1e-9);
            assert_relative_eq!(*end - *sent, m.link_latency, max_relative = 1e-9);
        }
    }
    // The ring all_gather: one local copy, then P-1 hops each of bytes / link_bw + latency.
    let ag = collectives::Registry::builtin()
        .by_name("all_gather")
        .unwrap()
        .call(&mesh4, &[rows, 128], DType::F32)
        .unwrap();
    let (t, _) = modeled(&ag, 4, &m);
    let want = bytes / m.hbm_bw + m.dma_latency + 3.0 * (bytes / m.link_bw + m.link_latency);
    assert_relative_eq!(t, want, max_relative = 1e-9);
}

#[test]
fn concurrent_dmas_on_one_link_share_it() {
    let m = CostModel::preset("v6e").unwrap();
    let n = 4096usize;
    let spec = GridSpec::new()
        .input("x", MemorySpace::Any, &[2, n], DType::F32)
        .output("y", MemorySpace::Any, &[2, n], DType::F32)
        .dma_sem("send")
        .dma_sem("recv");
    let call = PallasCall::new("two", spec, |pl, a| {
        let other = 1 - pl.axis_index("x");
        let first =
            pl.make_async_remote_copy(a.r(0).at(0), a.r(1).at(0), a.sem(2), a.sem(3), other);
        let second =
            pl.make_async_remote_copy(a.r(0).at(1), a.r(1).at(1), a.sem(2), a.sem(3), other);
        first.start();
        second.start();
        first.wait();
        second.wait();
    });
    let (t, _) = modeled(&call, 2, &m);
    let bytes = (n * 4) as f64;
    // Both at half rate: both finish after 2·bytes / bw, then the latency.
    assert_relative_eq!(
        t,
        2.0 * bytes / m.link_bw + m.link_latency,
        max_relative = 1e-9
    );
}

#[test]
fn vmem_beyond_the_preset_is_an_error_and_the_timeline_is_chrome_json() {
    let m = CostModel::preset("v5p").unwrap();
    let mesh = Mesh::new(2, "x").unwrap();
    let big = collectives::Registry::builtin()
        .by_name("psum")
        .unwrap()
        .call(&mesh, &[4096, 4096], DType::F32)
        .unwrap();
    let e = m.check_vmem(&big.lower(&mesh).unwrap()).unwrap_err();
    let Error::Limit { limit, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(*limit, 64 << 20);
    assert!(e.to_string().contains("VMEM of `psum` on v5p"), "{e}");

    let small = collectives::Registry::builtin()
        .by_name("psum")
        .unwrap()
        .call(&mesh, &[8, 128], DType::F32)
        .unwrap();
    let (_, events) = modeled(&small, 2, &m);
    let trace = chrome_trace("psum", 2, &events);
    let ev = trace["traceEvents"].as_array().unwrap();
    assert!(
        ev.iter().any(|e| e["ph"] == "s") && ev.iter().any(|e| e["ph"] == "f"),
        "flow arrows"
    );
    assert!(
        ev.iter().any(|e| e["ph"] == "X" && e["tid"] == 0),
        "grid point slices"
    );
    assert!(ev
        .iter()
        .any(|e| e["name"] == "process_name" && e["args"]["name"] == "device 1"));
}

#[test]
fn seed_003_ring_has_a_row_per_loop_step() {
    // Seed 003's kernel loops inside one grid point; its `trace_step` marks give rows.
    for p in [3usize, 4] {
        let t = table("ring_allreduce", p);
        let step_rows: Vec<&str> = t.rows.iter().filter_map(|r| r.step.as_deref()).collect();
        assert_eq!(step_rows.len(), 2 * (p - 1), "{step_rows:?}");
        for s in 0..p - 1 {
            let r = t
                .rows
                .iter()
                .find(|r| r.step.as_deref() == Some(&format!("reduce-scatter {s}")))
                .unwrap();
            for (rank, cells) in r.cells.iter().enumerate() {
                // Rank r has just reduced chunk r-s-2: its own value, then its left's partial.
                let c = (rank + 2 * p - s - 2) % p;
                let want: Vec<(usize, usize)> =
                    (0..=s + 1).map(|k| ((rank + p - k) % p, c)).collect();
                assert_eq!(cells[c], Cell::Sum(want, 0), "P={p} RS {s} rank {rank}");
            }
        }
        let last = t
            .rows
            .iter()
            .find(|r| r.step.as_deref() == Some(&format!("all-gather {}", p - 2)))
            .unwrap();
        for cells in &last.cells {
            for (c, cell) in cells[..p].iter().enumerate() {
                let Cell::Sum(terms, _) = cell else {
                    panic!("{cell:?}")
                };
                let mut devs: Vec<usize> = terms.iter().map(|t| t.0).collect();
                devs.sort();
                assert_eq!(devs, (0..p).collect::<Vec<_>>());
                assert!(terms.iter().all(|t| t.1 == c));
            }
        }
    }
}

/// all_gather without its seed layout: the table is derived from the kernel's own
/// allocations.
struct PlainAllGather;

impl collectives::Collective for PlainAllGather {
    fn name(&self) -> &str {
        "plain_all_gather"
    }
    fn summary(&self) -> &str {
        "all_gather with no step-table layout of its own"
    }
    fn call(
        &self,
        mesh: &Mesh,
        shard: &[usize],
        dtype: DType,
    ) -> tpusim::Result<tpusim::kernel::PallasCall> {
        collectives::AllGather.call(mesh, shard, dtype)
    }
    fn reference(
        &self,
        inputs: &[Vec<tpusim::HostArray>],
    ) -> tpusim::Result<Vec<Vec<tpusim::HostArray>>> {
        collectives::AllGather.reference(inputs)
    }
    fn traffic(&self) -> tpusim::model::Traffic {
        tpusim::model::Traffic::AllGather
    }
}

#[test]
fn a_kernel_without_a_layout_gets_columns_from_its_allocations() {
    let mesh = Mesh::new(3, "x").unwrap();
    let t = trace(Arc::new(PlainAllGather), &mesh).unwrap();
    // out_ref stacks P shard-shaped blocks: one column each; the input is not shown.
    assert_eq!(t.columns, vec!["out_ref[0]", "out_ref[1]", "out_ref[2]"]);
    let last = t.rows.last().unwrap();
    for d in 0..3 {
        for (i, cell) in last.cells[d].iter().enumerate() {
            assert_eq!(*cell, Cell::Sum(vec![(i, 0)], 0), "device {d} block {i}");
        }
    }
    assert!(t.markdown().contains("`(x0, x1, x2)`"), "{}", t.markdown());
}

#[test]
fn all_to_all_table_shows_each_device_gathering_its_block_of_every_shard() {
    let reg = collectives::Registry::builtin();
    let mesh = Mesh::new(4, "x").unwrap();
    let t = trace(reg.by_name("all_to_all").unwrap(), &mesh).unwrap();
    assert_eq!(
        t.columns,
        vec!["o_ref[0]", "o_ref[1]", "o_ref[2]", "o_ref[3]"]
    );
    let last = t.rows.last().unwrap();
    for d in 0..4 {
        for (j, cell) in last.cells[d].iter().enumerate() {
            // Block d of device j's shard.
            assert_eq!(*cell, Cell::Sum(vec![(j, d)], 0), "device {d} column {j}");
        }
    }
    assert!(
        t.markdown().contains("`(x0.1, x1.1, x2.1, x3.1)`"),
        "{}",
        t.markdown()
    );
}

#[test]
fn a_bidirectional_ring_gathers_in_about_half_the_time() {
    let m = CostModel::preset("v5e").unwrap();
    let reg = collectives::Registry::builtin();
    let mesh = Mesh::new(8, "x").unwrap();
    let rows = 1024usize;
    let bytes = (rows * 128 * 4) as f64;
    let time = |name: &str| {
        let call = reg
            .by_name(name)
            .unwrap()
            .call(&mesh, &[rows, 128], DType::F32)
            .unwrap();
        modeled(&call, 8, &m).0
    };
    let hop = bytes / m.link_bw + m.link_latency;
    let local = bytes / m.hbm_bw + m.dma_latency;
    assert_relative_eq!(time("all_gather"), local + 7.0 * hop, max_relative = 1e-9);
    // ceil(7/2) = 4 steps, both directions at once on separate links.
    assert_relative_eq!(
        time("all_gather_bidir"),
        local + 4.0 * hop,
        max_relative = 1e-9
    );
}

/// Device `from` pushes its shard to device `to`; everyone else idles.
fn one_push(from: i64, to: i64, rows: usize) -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Any, &[rows, 128], DType::F32)
        .output("y", MemorySpace::Any, &[rows, 128], DType::F32)
        .dma_sem("send")
        .dma_sem("recv");
    PallasCall::new("one_push", spec, move |pl, a| {
        let me = pl.axis_index("x");
        let c = pl.make_async_remote_copy(a.r("x"), a.r("y"), a.sem("send"), a.sem("recv"), to);
        if me == from {
            c.start();
            c.wait_send();
        }
        if me == to {
            c.wait_recv();
        }
    })
}

#[test]
fn dmas_are_routed_hop_by_hop_and_share_every_link_they_cross() {
    let mut m = CostModel::preset("v5e").unwrap();
    let rows = 1024usize;
    let bytes = (rows * 128 * 4) as f64;
    // Two hops on a ring of 4: the bytes stream through, each hop adds its latency.
    let (t, events) = modeled(&one_push(0, 2, rows), 4, &m);
    assert_relative_eq!(
        t,
        bytes / m.link_bw + 2.0 * m.link_latency,
        max_relative = 1e-9
    );
    let route = events.iter().find_map(|e| match e {
        TimedEvent::Dma { route, .. } => Some(route.clone()),
        _ => None,
    });
    assert_eq!(route, Some(vec![0, 1, 2]));
    // The shorter way round: 0 -> 3 on a ring of 4 is one hop, left.
    let (t, _) = modeled(&one_push(0, 3, rows), 4, &m);
    assert_relative_eq!(t, bytes / m.link_bw + m.link_latency, max_relative = 1e-9);
    // With a link between every pair, the far push is one hop.
    m.topology = Some(Topology::Full);
    let (t, _) = modeled(&one_push(0, 2, rows), 4, &m);
    assert_relative_eq!(t, bytes / m.link_bw + m.link_latency, max_relative = 1e-9);
}

#[test]
fn an_all_to_all_on_a_ring_is_bounded_by_its_bisection() {
    let m = CostModel::preset("v5e").unwrap();
    let reg = collectives::Registry::builtin();
    let p = 8usize;
    let mesh = Mesh::new(p, "x").unwrap();
    let rows = 256 * p;
    let v = (rows * 1024 * 4) as f64; // bytes per device
    let call = reg
        .by_name("all_to_all")
        .unwrap()
        .call(&mesh, &[rows, 1024], DType::F32)
        .unwrap();
    let (ring, _) = modeled(&call, p, &m);
    // Half the devices send P·V/4 bytes to the other half over the 2 links a cut crosses.
    let bisection = p as f64 * v / 4.0 / 2.0 / m.link_bw;
    assert!(ring >= bisection, "{ring} < {bisection}");
    let mut full = m.clone();
    full.topology = Some(Topology::Full);
    let (direct, _) = modeled(&call, p, &full);
    assert!(
        direct < bisection,
        "a link per pair has no bisection to cross"
    );
    let mut torus = m.clone();
    torus.topology = Some(Topology::Torus(vec![4, 2]));
    let (t2, _) = modeled(&call, p, &torus);
    assert!(t2 < ring && t2 > direct, "{direct} < {t2} < {ring}");
}

/// Device d loops d+1 times; iteration i copies its input into block i of `o`, d+1
/// times over (devices take different numbers of steps per iteration), then marks
/// `i={i}`.
fn uneven_loops() -> PallasCall {
    let spec = GridSpec::new()
        .input("x", MemorySpace::Vmem, &[1], DType::F32)
        .output("o", MemorySpace::Vmem, &[3, 1], DType::F32);
    PallasCall::new("uneven", spec, |pl, a| {
        let d = pl.device();
        for i in 0..=d {
            pl.in_iteration(i, || {
                for _ in 0..=d {
                    pl.copy(a.r("o").at(i as i64), a.r("x"));
                }
                pl.trace_step(format!("i={i}"));
            });
        }
    })
}

#[test]
fn loops_of_different_lengths_get_a_row_per_iteration_in_lockstep() {
    let mesh = Mesh::new(3, "x").unwrap();
    let (program, errors) = uneven_loops().trace(&mesh).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    let layout = tpusim::trace::derived_layout(&program, &[1]);
    let t = tpusim::trace::trace_program("uneven", &program, &layout).unwrap();
    let steps: Vec<&str> = t.rows.iter().filter_map(|r| r.step.as_deref()).collect();
    // Iteration 1 only on devices 1 and 2, iteration 2 only on device 2: each a row.
    assert_eq!(steps, ["i=0", "i=1", "i=2"], "{}", t.markdown());
    for (i, step) in steps.iter().enumerate() {
        let r = t
            .rows
            .iter()
            .find(|r| r.step.as_deref() == Some(step))
            .unwrap();
        for (d, cells) in r.cells.iter().enumerate() {
            // Device d has written blocks 0..=min(i, d) and no further: no device ran
            // ahead into its next iteration before the row was taken.
            for (b, cell) in cells.iter().enumerate() {
                let want = if b <= i.min(d) {
                    Cell::Sum(vec![(d, 0)], 0)
                } else {
                    Cell::Never
                };
                assert_eq!(
                    *cell,
                    want,
                    "row {step} device {d} block {b}\n{}",
                    t.markdown()
                );
            }
        }
    }
}
