//! A job on a global array, as `jax.shard_map` runs a collective: split over the mesh,
//! run (or the reference), joined. `tpusim apply` and Python's `shard_map` use these.

use super::Job;
use crate::array::HostArray;
use crate::device_sim::Executor;
use crate::error::{Error, Result};
use crate::mesh::partition::{self, PartitionSpec};
use crate::mesh::sharded::ShardedArray;

/// Outputs `[device][operand]` of the job for inputs `[device][operand]`.
type RunFn<'a> = dyn FnMut(&Job, &[Vec<HostArray>]) -> Result<Vec<Vec<HostArray>>> + 'a;

impl Job {
    /// This job at the shard shape of `x` (one shard per device of the mesh).
    fn at_shards_of(&self, x: &ShardedArray) -> Result<Job> {
        let mesh = &self.place().mesh;
        if x.shards.len() != mesh.size() {
            return Err(Error::bad_input(format!(
                "{} shards for a mesh of {} devices",
                x.shards.len(),
                mesh.size()
            )));
        }
        let s = x
            .shards
            .first()
            .ok_or_else(|| Error::bad_input("a sharded array needs at least one shard"))?;
        Ok(self.clone().with_shape(&s.shape).with_dtype(s.dtype))
    }

    /// The result shape of one device for this job's shard (XLA's per-shard output; the
    /// last invocation's, in a sequence).
    fn out_shape(&self) -> Vec<usize> {
        match self.last_collective() {
            Some(c) => c.output_shape(self.place().devices(), self.shape()),
            None => self.shape().to_vec(),
        }
    }

    /// Each shard as the kernel's input ref sees it (the rings take `[1, N]`: a
    /// reshape), run through `run`, and the first outputs in XLA's per-shard shape.
    fn map(&self, x: &ShardedArray, run: &mut RunFn) -> Result<Vec<HostArray>> {
        let job = self.at_shards_of(x)?;
        let call = job.pallas_call()?;
        let operands = call.spec().inputs();
        if operands.len() > 1 {
            let names: Vec<&str> = operands.iter().map(|o| o.name.as_str()).collect();
            return Err(Error::bad_input(format!(
                "`{}` takes {} operands per device ({}); a sharded array gives one: run it on inputs per device (`tpusim run`, `Job::execute`)",
                self.name(),
                operands.len(),
                names.join(", ")
            )));
        }
        let in_shape = call
            .spec()
            .inputs()
            .first()
            .map_or_else(|| job.shape().to_vec(), |o| o.shape.clone());
        // A shard without words is another rank's (see `shard_map_held`).
        let inputs: Vec<Vec<HostArray>> = x
            .shards
            .iter()
            .map(|s| {
                if elsewhere(s) {
                    return Vec::new();
                }
                vec![HostArray {
                    shape: in_shape.clone(),
                    ..s.clone()
                }]
            })
            .collect();
        let out_shape = job.out_shape();
        Ok(run(&job, &inputs)?
            .into_iter()
            .map(|o| result_of(o, &job, &out_shape))
            .collect())
    }

    fn joined(
        &self,
        x: &ShardedArray,
        out_dim: usize,
        shards: Vec<HostArray>,
    ) -> Result<ShardedArray> {
        let out_shape = self.at_shards_of(x)?.out_shape();
        if out_dim >= out_shape.len() {
            return Err(Error::bad_input(format!(
                "the result of `{}` has shape {out_shape:?}; it has no dimension {out_dim} to join along",
                self.name()
            )));
        }
        Ok(ShardedArray {
            dim: out_dim,
            shards,
        })
    }

    /// Runs the job on every shard of `x` (sharded over every device of the mesh,
    /// row-major) and returns the per-device results joined along `out_dim`.
    pub fn shard_map(
        &self,
        x: &ShardedArray,
        out_dim: usize,
        exec: &mut dyn Executor,
    ) -> Result<ShardedArray> {
        self.joined(x, out_dim, Vec::new())?;
        let shards = self.map(x, &mut |job, inputs| job.execute(exec, inputs))?;
        self.joined(x, out_dim, shards)
    }

    /// [`Job::shard_map`] on one rank of a partitioned run (or every device, without
    /// ranks): the shards of devices other ranks hold have no words (their shape kept),
    /// and so do their results; this rank's devices' results, unjoined.
    pub fn shard_map_held(
        &self,
        x: &ShardedArray,
        exec: &mut dyn Executor,
    ) -> Result<Vec<HostArray>> {
        self.map(x, &mut |job, inputs| job.execute_held(exec, inputs))
    }

    /// The reference of [`Job::shard_map_held`] for the devices `held`, where the job is
    /// element-wise ([`Job::elementwise`]): computed in chunks, the other devices' words
    /// from `fetch`. `None` otherwise: the reference then needs every shard at once.
    pub fn reference_held(
        &self,
        x: &ShardedArray,
        held: std::ops::Range<usize>,
        fetch: &super::data::Fetch,
    ) -> Result<Option<Vec<HostArray>>> {
        let job = self.at_shards_of(x)?;
        let Some(c) = job.elementwise() else {
            return Ok(None);
        };
        let inputs: Vec<Vec<HostArray>> = x
            .shards
            .iter()
            .enumerate()
            .map(|(d, s)| match held.contains(&d) {
                true => vec![s.clone()],
                false => Vec::new(),
            })
            .collect();
        let p = x.shards.len();
        let out = super::data::chunked_reference(c.as_ref(), job.place(), p, &inputs, held, fetch)?;
        let out_shape = job.out_shape();
        Ok(Some(
            out.into_iter()
                .map(|o| result_of(o, &job, &out_shape))
                .collect(),
        ))
    }

    /// XLA's result for the same call as [`Job::shard_map`], from the reference.
    pub fn reference_map(&self, x: &ShardedArray, out_dim: usize) -> Result<ShardedArray> {
        self.joined(x, out_dim, Vec::new())?;
        let shards = self.map(x, &mut |job, inputs| job.reference(inputs))?;
        self.joined(x, out_dim, shards)
    }

    /// `jax.shard_map(c, mesh, in_specs=in_spec, out_specs=out_spec)`: `global` split
    /// by `in_spec` (a dimension over x, another over y, or replicated), the job run,
    /// the per-device results joined by `out_spec` (devices that hold the same block
    /// must agree, as replicated results do).
    pub fn shard_map_specs(
        &self,
        global: &HostArray,
        [in_spec, out_spec]: [&PartitionSpec; 2],
        exec: &mut dyn Executor,
    ) -> Result<HostArray> {
        self.map_specs(global, [in_spec, out_spec], &mut |job, inputs| {
            job.execute(exec, inputs)
        })
    }

    /// XLA's result for the same call as [`Job::shard_map_specs`].
    pub fn reference_map_specs(
        &self,
        global: &HostArray,
        [in_spec, out_spec]: [&PartitionSpec; 2],
    ) -> Result<HostArray> {
        self.map_specs(global, [in_spec, out_spec], &mut |job, inputs| {
            job.reference(inputs)
        })
    }

    fn map_specs(
        &self,
        global: &HostArray,
        [in_spec, out_spec]: [&PartitionSpec; 2],
        run: &mut RunFn,
    ) -> Result<HostArray> {
        let mesh = &self.place().mesh;
        let x = ShardedArray {
            dim: 0,
            shards: partition::shard(global, mesh, in_spec)?,
        };
        let outputs = self.map(&x, run)?;
        partition::unshard(&outputs, mesh, out_spec)
    }
}

/// True for a shard another rank holds: a shape with elements, but no words.
fn elsewhere(s: &HostArray) -> bool {
    s.words.is_empty() && s.shape.iter().product::<usize>() > 0
}

/// One device's result of `job` in XLA's per-shard `shape`: its first output, or for a
/// device another rank holds (no outputs) the shape without words.
fn result_of(mut outputs: Vec<HostArray>, job: &Job, shape: &[usize]) -> HostArray {
    match outputs.is_empty() {
        true => HostArray {
            dtype: job.dtype(),
            shape: shape.to_vec(),
            words: Vec::new(),
        },
        false => HostArray {
            shape: shape.to_vec(),
            ..outputs.swap_remove(0)
        },
    }
}
