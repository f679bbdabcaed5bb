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
        let inputs: Vec<Vec<HostArray>> = x
            .shards
            .iter()
            .map(|s| {
                vec![HostArray {
                    shape: in_shape.clone(),
                    ..s.clone()
                }]
            })
            .collect();
        let out_shape = job.out_shape();
        Ok(run(&job, &inputs)?
            .into_iter()
            .map(|mut o| HostArray {
                shape: out_shape.clone(),
                ..o.swap_remove(0)
            })
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
