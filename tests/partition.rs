//! `shard_map` over 2-D PartitionSpecs: a dimension sharded over x, another over y, or
//! replicated; a collective along one axis or over the whole mesh; both executors,
//! against the reference and an independent block sum.

mod common;

use tpusim::collectives::Registry;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::mesh::partition::PartitionSpec;
use tpusim::mesh::Placement;
use tpusim::run::Job;
use tpusim::{HostArray, Mesh};

/// The sum of the `(bi, bj)` blocks of `g` (rows x cols) over the blocks `js` of
/// block row `bi`, for blocks of `br` x `bc`.
fn block_sum(
    g: &[i32],
    cols: usize,
    (br, bc): (usize, usize),
    blocks: &[(usize, usize)],
) -> Vec<i32> {
    (0..br * bc)
        .map(|e| {
            let (r, c) = (e / bc, e % bc);
            blocks
                .iter()
                .map(|&(bi, bj)| g[(bi * br + r) * cols + bj * bc + c])
                .sum()
        })
        .collect()
}

#[test]
fn psum_along_y_of_a_2d_sharded_array_is_a_sum_per_block_row() {
    let mesh = Mesh::with_axes(&[("x", 2), ("y", 4)]).unwrap();
    let (rows, cols) = (4, 8);
    let data: Vec<i32> = (0..(rows * cols) as i32).map(|v| v * 7 - 50).collect();
    let global = HostArray::from_i32(&[rows, cols], data.clone()).unwrap();
    let psum = Registry::builtin().by_name("psum").unwrap();
    let place = Placement::along(mesh.clone(), "y").unwrap();
    let in_spec = PartitionSpec::new(&[&["x"], &["y"]]);
    let out_spec = PartitionSpec::new(&[&["x"]]); // replicated along y
    let want = Job::collective(psum.clone(), place.clone())
        .reference_map_specs(&global, [&in_spec, &out_spec])
        .unwrap();
    for got in [
        Job::collective(psum.clone(), place.clone())
            .shard_map_specs(&global, [&in_spec, &out_spec], &mut CpuExecutor::new())
            .unwrap(),
        Job::collective(psum.clone(), place.clone())
            .shard_map_specs(&global, [&in_spec, &out_spec], &mut *common::gpu())
            .unwrap(),
    ] {
        assert_eq!(got, want);
    }
    // Independently: row block i is the sum of the four column blocks of block row i.
    assert_eq!(want.shape, vec![4, 2]);
    for bi in 0..2 {
        let blocks: Vec<(usize, usize)> = (0..4).map(|bj| (bi, bj)).collect();
        let sum = block_sum(&data, cols, (2, 2), &blocks);
        assert_eq!(
            &want.as_i32()[bi * 4..bi * 4 + 4],
            &sum[..],
            "block row {bi}"
        );
    }
    // Rows of the mesh differ, so a result replicated over x as well is refused.
    let everywhere = PartitionSpec::default();
    assert!(Job::collective(psum.clone(), place.clone())
        .shard_map_specs(&global, [&in_spec, &everywhere], &mut CpuExecutor::new())
        .is_err());
}

#[test]
fn allreduce_2d_of_a_2d_sharded_array_is_replicated_everywhere() {
    let mesh = Mesh::with_axes(&[("x", 2), ("y", 4)]).unwrap();
    let (rows, cols) = (8, 16);
    let data: Vec<i32> = (0..(rows * cols) as i32)
        .map(|v| (v * 13) % 101 - 40)
        .collect();
    let global = HostArray::from_i32(&[rows, cols], data.clone()).unwrap();
    let c = Registry::builtin().by_name("allreduce_2d").unwrap();
    let place = Placement::whole(mesh);
    let in_spec = PartitionSpec::new(&[&["x"], &["y"]]);
    let out_spec = PartitionSpec::default();
    let got = Job::collective(c.clone(), place.clone())
        .shard_map_specs(&global, [&in_spec, &out_spec], &mut *common::gpu())
        .unwrap();
    let blocks: Vec<(usize, usize)> = (0..2).flat_map(|i| (0..4).map(move |j| (i, j))).collect();
    assert_eq!(got.shape, vec![4, 4]);
    assert_eq!(got.as_i32(), &block_sum(&data, cols, (4, 4), &blocks)[..]);
    // Columns sharded over both axes (x major) and the rows replicated.
    let cols_xy = PartitionSpec::new(&[&[], &["x", "y"]]);
    let got = Job::collective(c.clone(), place.clone())
        .shard_map_specs(&global, [&cols_xy, &out_spec], &mut CpuExecutor::new())
        .unwrap();
    let want = Job::collective(c.clone(), place.clone())
        .reference_map_specs(&global, [&cols_xy, &out_spec])
        .unwrap();
    assert_eq!(got, want);
    assert_eq!(got.shape, vec![8, 2]);
}

#[test]
fn apply_takes_partition_specs_on_a_mesh() {
    let dir = std::env::temp_dir().join(format!("tpusim-partition-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (input, output) = (dir.join("x.npy"), dir.join("y.npy"));
    let (rows, cols) = (4, 16);
    let data: Vec<i32> = (0..(rows * cols) as i32).collect();
    tpusim::npy::write_npy(
        &input,
        &HostArray::from_i32(&[rows, cols], data.clone()).unwrap(),
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["apply", "--input", input.to_str().unwrap()];
        args.extend(["--output", output.to_str().unwrap(), "--backend", "cpu"]);
        args.extend(extra);
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_tpusim"))
            .args(&args)
            .output()
            .unwrap();
        let text =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        (o.status.code().unwrap_or(-1), text)
    };
    // psum along y of P("x", "y"), replicated over y: block rows summed over columns.
    let psum_y = ["psum", "--mesh", "2x4", "--axis", "y", "--in-spec", "x,y"];
    let (code, out) = run(&[&psum_y[..], &["--out-spec", "x,-"]].concat());
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("0 wrong"), "{out}");
    let got = tpusim::npy::read_npy(&output).unwrap();
    let blocks = |bi: usize| (0..4).map(move |bj| (bi, bj)).collect::<Vec<_>>();
    let want: Vec<i32> = [0, 1]
        .iter()
        .flat_map(|&bi| block_sum(&data, cols, (2, 4), &blocks(bi)))
        .collect();
    assert_eq!(
        (got.shape.clone(), got.as_i32().to_vec()),
        (vec![4, 4], want)
    );
    // A result that differs across x cannot be replicated over x.
    let (code, out) = run(&[&psum_y[..], &["--out-spec", "-"]].concat());
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("not replicated"), "{out}");
    let (code, out) = run(&[
        "psum",
        "--mesh",
        "2x4",
        "--in-spec",
        "x,w",
        "--out-spec",
        "x",
    ]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("no axis `w`"), "{out}");
    std::fs::remove_dir_all(&dir).ok();
}
