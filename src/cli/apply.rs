//! `tpusim apply`: a collective on your own data, `.npy` in and out, like `jax.shard_map`.

use super::apply_ranks::Slices;
use super::out::outln;
use std::path::PathBuf;
use tpusim::budget::{Buffers, Work};
use tpusim::collectives::{Options, Ppermute, Registry};
use tpusim::device_sim::{count_wrong, Backend};
use tpusim::files::Output;
use tpusim::kernel::ReduceOp;
use tpusim::mesh::partition::{self, PartitionSpec};
use tpusim::mesh::sharded::ShardedArray;
use tpusim::npy::{read_layout, read_npy, write_to, Layout};
use tpusim::run::Job;
use tpusim::Error;

/// Arguments of `tpusim apply`.
#[derive(clap::Args)]
pub struct ApplyArgs {
    /// Collective.
    pub collective: String,
    /// The global input array (.npy, float32 or int32).
    #[arg(long)]
    pub input: PathBuf,
    /// Where to write the global result (.npy).
    #[arg(long)]
    pub output: PathBuf,
    #[command(flatten)]
    pub place: super::place::PlaceArgs,
    /// With --mesh: the input's PartitionSpec, one entry per dimension (`x,y`: rows over
    /// x, columns over y; `-` replicated; `x+y` over both), instead of --dim.
    #[arg(long, requires_all = ["mesh", "out_spec"], conflicts_with_all = ["dim", "out_dim"])]
    pub in_spec: Option<String>,
    /// With --in-spec: the result's PartitionSpec (`x,-`: rows over x, replicated over y).
    #[arg(long, requires = "in_spec")]
    pub out_spec: Option<String>,
    /// Input dimension sharded over the devices (default: the collective's, e.g. 0 for all_gather, else 1).
    #[arg(long)]
    pub dim: Option<usize>,
    /// Result dimension the per-device results are joined along (default: the seed's out_specs).
    #[arg(long)]
    pub out_dim: Option<usize>,
    /// Reduction for psum and the ring all-reduces: sum, max or min.
    #[arg(long, default_value = "sum")]
    pub op: String,
    /// ppermute only: explicit `src:dst` pairs.
    #[arg(long)]
    pub perm: Option<String>,
    /// Executor: auto (the GPU one on a hardware adapter, else the CPU one), gpu or cpu.
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// Print how many ranks (processes with this one's memory, `mpirun -np N`) the apply
    /// needs, and exit.
    #[arg(long)]
    pub ranks_needed: bool,
}

/// `tpusim apply`: shard, run, compare with XLA's result, join, write.
pub fn apply(reg: &Registry, a: &ApplyArgs) -> tpusim::Result<bool> {
    let opts = Options {
        op: ReduceOp::parse(&a.op)?,
        perm: a.perm.as_deref().map(Ppermute::parse_perm).transpose()?,
    };
    let c = reg.get(&a.collective, &opts)?;
    let place = a.place.placement(c.as_ref())?;
    let mesh = &place.mesh;
    // The collective's own in_specs / out_specs unless the user names dimensions.
    let (dim0, out0) = c.apply_dims();
    let dim = a.dim.unwrap_or(dim0);
    let out_dim = a.out_dim.unwrap_or(if a.dim.is_some() && dim0 == out0 {
        dim
    } else {
        out0
    });
    let chosen = Backend::parse(&a.backend)?.resolve()?;
    let backend = chosen.backend;
    let output = Output::check_apart(&a.output, "result", &[&a.input])?;
    super::out::keep_apart(&a.output);
    let file_bytes = std::fs::metadata(&a.input).map_or(0, |m| m.len());
    let job = Job::collective(c.clone(), place.clone()).on_ranks(super::ranks::share());
    // On ranks, each reads its own devices' slices of a file (the header first); a
    // stream, which cannot be read at places, is read whole by every rank.
    let own_slices = job.reads_own_slices()
        && a.in_spec.is_none()
        && std::fs::metadata(&a.input).is_ok_and(|m| m.is_file());
    let (layout, global) = match own_slices {
        true => (read_layout(&a.input)?, None),
        false => {
            let g = read_npy(&a.input)?;
            let layout = Layout {
                dtype: g.dtype,
                shape: g.shape.clone(),
                data_at: 0,
            };
            (layout, Some(g))
        }
    };
    // Check the scale before the array is split (the shard shape, or the nearest one the
    // collective serves at other P).
    let p = mesh.size();
    let mut shard = layout.shape.clone();
    if let Some(d) = shard.get_mut(dim) {
        *d = (*d / p).max(1);
    }
    let sized = job.clone().with_shape(&shard).with_dtype(layout.dtype);
    let note = format!(
        " on {} ({:?} {})",
        a.input.display(),
        layout.shape,
        layout.dtype
    );
    let fit = |buffers| {
        sized.ensure_fits_noted(
            Work::Apply {
                buffers,
                gpu: backend == Backend::Gpu,
                file_bytes,
                chunked: own_slices,
            },
            &note,
        )
    };
    if a.ranks_needed {
        return super::run::ranks_needed(
            &sized,
            Work::Apply {
                buffers: match backend {
                    Backend::Gpu => Buffers::Device,
                    Backend::Cpu | Backend::Auto => Buffers::Host,
                },
                gpu: backend == Backend::Gpu,
                file_bytes,
                chunked: own_slices,
            },
        );
    }
    // The executor, once the work is known to fit its memory (and host memory, where
    // the GPU's buffers live there).
    let fitted_executor = || {
        fit(match backend {
            Backend::Cpu | Backend::Auto => Buffers::Host,
            Backend::Gpu => Buffers::Device,
        })?;
        let exec = super::executor(&chosen)?;
        if backend == Backend::Gpu && exec.buffers_in_host_memory() {
            fit(Buffers::Host)?;
        }
        Ok::<_, Error>(exec)
    };
    let Some(global) = global else {
        let r = super::ranks::current()
            .ok_or_else(|| Error::bad_input("an apply reads slices of its input on ranks only"))?;
        let exec = fitted_executor()?;
        let at = Slices {
            input: &a.input,
            layout: &layout,
            dim,
            out_dim,
        };
        return super::apply_ranks::apply(&r, &sized, &at, &output, exec);
    };
    if let (Some(i), Some(o)) = (&a.in_spec, &a.out_spec) {
        let specs = [PartitionSpec::parse(i)?, PartitionSpec::parse(o)?];
        // The shard shape and the joined result are checked before the run.
        partition::shard(&global, mesh, &specs[0])?;
        let mut exec = fitted_executor()?;
        let [i, o] = [&specs[0], &specs[1]];
        let want = job.reference_map_specs(&global, [i, o])?;
        let got = job.shard_map_specs(&global, [i, o], exec.as_mut())?;
        let wrong = count_wrong(
            &[vec![got.clone()]],
            &[vec![want]],
            c.tolerance_for(global.dtype, mesh.size()),
        );
        if super::ranks::runs_alone() {
            output.write_with(|w| write_to(w, &got))?;
        }
        outln!(
            "{} on P={} ({}): {:?} {} in P({i}) -> {:?} out P({o}), written to {}; {wrong} wrong vs XLA semantics",
            c.name(),
            place.describe(),
            exec.describe(),
            global.shape,
            global.dtype,
            got.shape,
            a.output.display(),
            i = a.in_spec.as_deref().unwrap_or_default(),
            o = a.out_spec.as_deref().unwrap_or_default(),
        )?;
        return Ok(wrong == 0);
    }
    let x = ShardedArray::shard(&global, mesh, dim)?;
    let out_shape = c.output_shape(place.devices(), &x.shards[0].shape);
    if out_dim >= out_shape.len() {
        return Err(Error::bad_input(format!(
            "--out-dim {out_dim}: the result of `{}` has shape {out_shape:?}, with no dimension {out_dim} to join along",
            c.name()
        )));
    }
    let mut exec = fitted_executor()?;
    let got = job.shard_map(&x, out_dim, exec.as_mut())?;
    let want = job.reference_map(&x, out_dim)?;
    let wrong = count_wrong(
        std::slice::from_ref(&got.shards),
        std::slice::from_ref(&want.shards),
        c.tolerance_for(global.dtype, mesh.size()),
    );
    let result = got.unshard()?;
    if super::ranks::runs_alone() {
        output.write_with(|w| write_to(w, &result))?;
    }
    outln!(
        "{} on P={} ({}): {:?} {} sharded on dim {dim} -> {:?} joined on dim {out_dim}, written to {}; {wrong} wrong vs XLA semantics",
        c.name(),
        place.describe(),
        exec.describe(),
        global.shape,
        global.dtype,
        result.shape,
        a.output.display()
    )?;
    Ok(wrong == 0)
}
