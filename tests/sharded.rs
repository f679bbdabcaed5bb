//! The library user's path: a global array sharded over a mesh, collectives applied
//! like `jax.shard_map`, `.npy` in and out. Expected values are computed directly here.

mod common;

use std::process::Command;
use tpusim::collectives;
use tpusim::device_sim::cpu::CpuExecutor;
use tpusim::mesh::sharded::ShardedArray;
use tpusim::mesh::Placement;
use tpusim::npy::{read_npy, write_npy};
use tpusim::run::Job;
use tpusim::{HostArray, Mesh};

fn global(rows: usize, cols: usize) -> HostArray {
    HostArray::from_i32(
        &[rows, cols],
        (0..(rows * cols) as i32)
            .map(|v| v * 7 % 101 - 50)
            .collect(),
    )
    .unwrap()
}

#[test]
fn psum_over_column_shards_sums_the_blocks() {
    let p = 4;
    let mesh = Mesh::new(p, "x").unwrap();
    let g = global(8, 3 * p);
    let x = ShardedArray::shard(&g, &mesh, 1).unwrap();
    let c = collectives::Registry::builtin().by_name("psum").unwrap();
    let out = Job::collective(c.clone(), Placement::whole(mesh.clone()))
        .shard_map(&x, 1, &mut *common::gpu())
        .unwrap()
        .unshard()
        .unwrap();
    assert_eq!(out.shape, vec![8, 3 * p]);
    let g_at = |i: usize, j: usize| g.as_i32()[i * 3 * p + j];
    for i in 0..8 {
        for j in 0..3 * p {
            let want: i32 = (0..p).map(|d| g_at(i, d * 3 + j % 3)).sum();
            assert_eq!(out.as_i32()[i * 3 * p + j], want, "({i}, {j})");
        }
    }
}

#[test]
fn all_gather_and_psum_scatter_follow_the_seed_specs() {
    let p = 2;
    let mesh = Mesh::new(p, "x").unwrap();
    // all_gather: rows sharded, every device gets every shard, joined along dim 0.
    let g = global(2 * p, 3);
    let x = ShardedArray::shard(&g, &mesh, 0).unwrap();
    let ag = collectives::Registry::builtin()
        .by_name("all_gather")
        .unwrap();
    let out = Job::collective(ag.clone(), Placement::whole(mesh.clone()))
        .shard_map(&x, 0, &mut CpuExecutor::new())
        .unwrap()
        .unshard()
        .unwrap();
    assert_eq!(out.shape, vec![p * p, 2, 3]);
    for d in 0..p {
        assert_eq!(
            out.as_i32()[d * g.len()..(d + 1) * g.len()],
            *g.as_i32(),
            "device {d}'s gather"
        );
    }
    // psum_scatter: columns sharded; device d keeps block d of the rows, summed over devices.
    let g = global(8, 2 * p);
    let x = ShardedArray::shard(&g, &mesh, 1).unwrap();
    let ps = collectives::Registry::builtin()
        .by_name("psum_scatter")
        .unwrap();
    let out = Job::collective(ps.clone(), Placement::whole(mesh.clone()))
        .shard_map(&x, 0, &mut *common::gpu())
        .unwrap()
        .unshard()
        .unwrap();
    assert_eq!(out.shape, vec![8, 2]);
    let g_at = |i: usize, j: usize| g.as_i32()[i * 2 * p + j];
    for i in 0..8 {
        for j in 0..2 {
            let want: i32 = (0..p).map(|k| g_at(i, k * 2 + j)).sum();
            assert_eq!(out.as_i32()[i * 2 + j], want, "({i}, {j})");
        }
    }
}

#[test]
fn apply_reads_and_writes_npy() {
    let dir = std::env::temp_dir().join(format!("tpusim-apply-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (input, output) = (dir.join("x.npy"), dir.join("y.npy"));
    let p = 4;
    let g = global(4, 2 * p);
    write_npy(&input, &g).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tpusim"))
        .args([
            "apply",
            "ring_allreduce_push",
            "--op",
            "max",
            "-p",
            "4",
            "--backend",
            "cpu",
        ])
        .arg("--input")
        .arg(&input)
        .arg("--output")
        .arg(&output)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("0 wrong vs XLA semantics"), "{stdout}");
    let y = read_npy(&output).unwrap();
    assert_eq!(y.shape, g.shape);
    let g_at = |i: usize, j: usize| g.as_i32()[i * 2 * p + j];
    for i in 0..4 {
        for j in 0..2 * p {
            let want = (0..p).map(|d| g_at(i, d * 2 + j % 2)).max().unwrap();
            assert_eq!(y.as_i32()[i * 2 * p + j], want);
        }
    }
    // Bad input: not divisible, and not a .npy file.
    let bad = Command::new(env!("CARGO_BIN_EXE_tpusim"))
        .args(["apply", "psum", "-p", "3", "--backend", "cpu"])
        .arg("--input")
        .arg(&input)
        .arg("--output")
        .arg(&output)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not divisible by 3 devices"));
    std::fs::write(dir.join("junk.npy"), b"hello").unwrap();
    let junk = Command::new(env!("CARGO_BIN_EXE_tpusim"))
        .args([
            "apply",
            "psum",
            "--backend",
            "cpu",
            "--output",
            "/dev/null",
            "--input",
        ])
        .arg(dir.join("junk.npy"))
        .output()
        .unwrap();
    assert_eq!(junk.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&junk.stderr).contains("is not a .npy file"));
}
