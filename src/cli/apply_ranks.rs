//! `tpusim apply` on the ranks of an MPI job, for an element-wise collective: each rank
//! reads its own devices' slices of the input, runs them, computes their reference in
//! chunks (the other devices' elements read from the file a chunk at a time) and writes
//! its devices' results into one `.npy` file that rank 0 lays out: a temporary file,
//! renamed over the output once every rank's part is in, so a failure leaves none.

use super::out::outln;
use std::os::unix::ffi::OsStrExt;
use tpusim::device_sim::ranks::Ranks;
use tpusim::device_sim::Executor;
use tpusim::files::Output;
use tpusim::mesh::sharded::{block_runs, runs_within, ShardedArray};
use tpusim::npy::{header_bytes, read_runs, write_runs, write_to, Layout};
use tpusim::run::Job;
use tpusim::{Error, HostArray};

/// Runs `job` (at its shard shape) on this rank's slices of `at`, writes the joined
/// result to `output` with the other ranks, and says how many elements differ from
/// XLA's result (on every rank: the sum).
pub fn apply(
    ranks: &Ranks,
    job: &Job,
    at: &Slices,
    output: &Output,
    mut exec: Box<dyn Executor>,
) -> tpusim::Result<bool> {
    let (layout, dim) = (at.layout, at.dim);
    let p = job.place().devices();
    let held = ranks.held(p)?;
    let shard_shape = ShardedArray::shard_shape(&layout.shape, p, dim)?;
    let runs = |d| block_runs(&layout.shape, dim, p, d);
    let shards = (0..p)
        .map(|d| {
            let words = match held.contains(&d) {
                true => read_runs(at.input, layout, &runs(d))?,
                false => Vec::new(),
            };
            Ok(HostArray {
                dtype: layout.dtype,
                shape: shard_shape.clone(),
                words,
            })
        })
        .collect::<tpusim::Result<Vec<_>>>()?;
    let x = ShardedArray { dim, shards };
    let got = job.shard_map_held(&x, exec.as_mut())?;
    let fetch = |d, range| read_runs(at.input, layout, &runs_within(&runs(d), range));
    let want = job
        .reference_held(&x, held.clone(), &fetch)?
        .ok_or_else(|| {
            Error::bad_input("apply on ranks reads slices of element-wise collectives only")
        })?;
    drop(x);
    let c = job
        .collective_of()
        .expect("an element-wise job runs a collective");
    let tolerance = c.tolerance_for(layout.dtype, p);
    let wrong: usize = held
        .clone()
        .map(|d| got[d].count_mismatches(&want[d], tolerance))
        .sum();
    drop(want);
    let wrong = ranks.sum(wrong as u64)?;
    // The joined result's shape: the devices' results along `out_dim`.
    let mut shape = got[held.start].shape.clone();
    if at.out_dim >= shape.len() {
        return Err(Error::bad_input(format!(
            "--out-dim {}: the result of `{}` has shape {shape:?}, with no dimension {} to join along",
            at.out_dim,
            c.name(),
            at.out_dim
        )));
    }
    shape[at.out_dim] *= p;
    let joined = Joined {
        shape: &shape,
        got: &got,
        held: held.clone(),
        out_dim: at.out_dim,
    };
    write(ranks, output, &joined)?;
    outln!(
        "{} on P={} ({}): {:?} {} sharded on dim {dim} -> {:?} joined on dim {}, written to {}; {wrong} wrong vs XLA semantics",
        c.name(),
        job.place().describe(),
        exec.describe(),
        layout.shape,
        layout.dtype,
        shape,
        at.out_dim,
        output.path().display()
    )?;
    Ok(wrong == 0)
}

/// The devices' results, to be joined into one array.
struct Joined<'a> {
    /// The joined array's shape.
    shape: &'a [usize],
    /// Every device's result (those of other ranks' devices without words).
    got: &'a [HostArray],
    /// This rank's devices.
    held: std::ops::Range<usize>,
    /// The dimension the results are joined along.
    out_dim: usize,
}

/// Writes the joined results into one `.npy`: rank 0 makes the file and its header,
/// each rank writes its devices' blocks in place, and rank 0 renames it over `output`
/// once all are in. A stream, which cannot be written at places, gets the results
/// gathered on rank 0.
fn write(ranks: &Ranks, output: &Output, joined: &Joined) -> tpusim::Result<()> {
    let Joined {
        shape,
        got,
        held,
        out_dim,
    } = joined;
    let (held, out_dim) = (held.clone(), *out_dim);
    let p = got.len();
    let dtype = got[held.start].dtype;
    let header = header_bytes(dtype, shape);
    let n: usize = shape.iter().product();
    let len = (header.len() + n * dtype.size()) as u64;
    let mut shared = match ranks.is_root() {
        true => output.shared(len)?,
        false => None,
    };
    let fail = |e| Error::File {
        action: "write result to".into(),
        path: output.path().to_path_buf(),
        source: e,
    };
    if let Some(s) = &mut shared {
        use std::os::unix::fs::FileExt;
        s.file().write_all_at(&header, 0).map_err(fail)?;
    }
    let path = shared
        .as_ref()
        .map(|s| s.path().as_os_str().as_bytes().to_vec())
        .unwrap_or_default();
    let path = ranks.exchange(&path)?.swap_remove(0);
    if path.is_empty() {
        return gather(ranks, output, joined);
    }
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(&path));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(fail)?;
    for d in held {
        let runs = block_runs(shape, out_dim, p, d);
        write_runs(&f, header.len() as u64, dtype, &runs, &got[d].words).map_err(fail)?;
    }
    f.sync_all().map_err(fail)?;
    drop(f);
    // Every rank's part is in (a rank that failed fails this exchange for all).
    ranks.exchange(&[])?;
    match shared {
        Some(s) => s.commit(),
        None => Ok(()),
    }
}

/// The results gathered on rank 0 and written there in order (an output that is a
/// stream).
fn gather(ranks: &Ranks, output: &Output, joined: &Joined) -> tpusim::Result<()> {
    let got = joined.got;
    let mine: Vec<u8> = got[joined.held.clone()]
        .iter()
        .flat_map(|a| bytemuck::cast_slice::<u32, u8>(&a.words).to_vec())
        .collect();
    let all = ranks.exchange(&mine)?;
    if !ranks.is_root() {
        return Ok(());
    }
    let first = &got[0];
    let words: Vec<u32> = all
        .iter()
        .flat_map(|b| bytemuck::pod_collect_to_vec::<u8, u32>(b))
        .collect();
    let shards = words
        .chunks(first.shape.iter().product::<usize>().max(1))
        .map(|w| HostArray {
            dtype: first.dtype,
            shape: first.shape.clone(),
            words: w.to_vec(),
        })
        .collect();
    let whole = ShardedArray {
        dim: joined.out_dim,
        shards,
    }
    .unshard()?;
    debug_assert_eq!(whole.shape, joined.shape);
    output.write_with(|w| write_to(w, &whole))
}

/// Where an apply's data lies: the input file and its layout, the dimension it is split
/// along and the one the results are joined along.
pub struct Slices<'a> {
    /// The input file.
    pub input: &'a std::path::Path,
    /// Its layout.
    pub layout: &'a Layout,
    /// The input dimension split over the devices.
    pub dim: usize,
    /// The result dimension the devices' results are joined along.
    pub out_dim: usize,
}
