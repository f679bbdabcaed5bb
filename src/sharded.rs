//! Sharded arrays for library users: a global array split over a mesh's devices along one
//! dimension (a `PartitionSpec` with one sharded dimension; on a multi-axis mesh, sharded
//! over all its axes, row-major), and [`shard_map`], which runs a collective on every
//! shard like `jax.shard_map` and reassembles the result.

use crate::array::HostArray;
use crate::collectives::{Collective, Placement};
use crate::device_sim::Program;
use crate::device_sim::{schedule, Eager};
use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::mesh::Mesh;
use crate::partition::{self, PartitionSpec};

/// A global array split into equal blocks along dimension `dim`, one per device.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardedArray {
    /// The sharded dimension.
    pub dim: usize,
    /// One block per device, in device order.
    pub shards: Vec<HostArray>,
}

/// Shape of `a` viewed as (outer, dim, inner) element counts around dimension `dim`.
fn split_at(shape: &[usize], dim: usize) -> (usize, usize, usize) {
    (
        shape[..dim].iter().product(),
        shape[dim],
        shape[dim + 1..].iter().product(),
    )
}

impl ShardedArray {
    /// Splits `global` into `mesh.size()` equal blocks along `dim`
    /// (`NamedSharding(mesh, P(…, "x", …))` with "x" at position `dim`).
    pub fn shard(global: &HostArray, mesh: &Mesh, dim: usize) -> Result<Self> {
        let p = mesh.size();
        if dim >= global.shape.len() {
            return Err(Error::bad_input(format!(
                "cannot shard dimension {dim} of an array of shape {:?}",
                global.shape
            )));
        }
        if crate::array::numel(&global.shape) != Some(global.words.len()) {
            return Err(Error::bad_input(format!(
                "an array of shape {:?} must hold that many elements, not {}",
                global.shape,
                global.words.len()
            )));
        }
        let (outer, n, inner) = split_at(&global.shape, dim);
        if n % p != 0 {
            return Err(Error::bad_input(format!(
                "dimension {dim} of shape {:?} has {n} entries, not divisible by {p} devices",
                global.shape
            )));
        }
        let block = n / p;
        let mut shape = global.shape.clone();
        shape[dim] = block;
        let shards = (0..p)
            .map(|d| {
                let mut words = Vec::with_capacity(outer * block * inner);
                for o in 0..outer {
                    let start = (o * n + d * block) * inner;
                    words.extend_from_slice(&global.words[start..start + block * inner]);
                }
                HostArray {
                    dtype: global.dtype,
                    shape: shape.clone(),
                    words,
                }
            })
            .collect();
        Ok(Self { dim, shards })
    }

    /// Concatenates the shards along `dim` into the global array.
    pub fn unshard(&self) -> Result<HostArray> {
        let first = self
            .shards
            .first()
            .ok_or_else(|| Error::bad_input("a sharded array needs at least one shard"))?;
        if self.dim >= first.shape.len()
            || self
                .shards
                .iter()
                .any(|s| s.shape != first.shape || s.dtype != first.dtype)
        {
            return Err(Error::bad_input(format!(
                "shards must share one shape and dtype with a dimension {} to join along",
                self.dim
            )));
        }
        if self
            .shards
            .iter()
            .any(|s| crate::array::numel(&s.shape) != Some(s.words.len()))
        {
            return Err(Error::bad_input(format!(
                "every shard of shape {:?} must hold that many elements",
                first.shape
            )));
        }
        let (outer, block, inner) = split_at(&first.shape, self.dim);
        let p = self.shards.len();
        let mut shape = first.shape.clone();
        shape[self.dim] = block * p;
        let mut words = Vec::with_capacity(first.len() * p);
        for o in 0..outer {
            for s in &self.shards {
                let start = o * block * inner;
                words.extend_from_slice(&s.words[start..start + block * inner]);
            }
        }
        Ok(HostArray {
            dtype: first.dtype,
            shape,
            words,
        })
    }
}

/// Runs collective `c` on every shard of `x` (as `jax.shard_map` with in_specs sharding
/// dimension `x.dim`) and returns the per-device results as a sharded array joined along
/// `out_dim` (the out_specs' sharded dimension).
pub fn shard_map(
    c: &dyn Collective,
    mesh: &Mesh,
    x: &ShardedArray,
    out_dim: usize,
    exec: &mut dyn Executor,
) -> Result<ShardedArray> {
    shard_map_placed(c, &Placement::whole(mesh.clone()), x, out_dim, exec)
}

/// [`shard_map`] on a multi-axis mesh: `x` is sharded over every device of `place.mesh`
/// in row-major order (`P(("x", "y"))` on its dimension), and `c` runs as `place` says
/// (one kernel over the mesh, or a ring per group along an axis, as `shard_map` runs a
/// collective over one named axis).
pub fn shard_map_placed(
    c: &dyn Collective,
    place: &Placement,
    x: &ShardedArray,
    out_dim: usize,
    exec: &mut dyn Executor,
) -> Result<ShardedArray> {
    let shard = first_of(x, &place.mesh)?;
    let program = place.lower(&c.call(&place.ring, &shard.shape, shard.dtype)?)?;
    let sched = schedule(&program, &mut Eager::default())?;
    exec.check(&program)?;
    let inputs = kernel_inputs(x, &program.layout.allocs[program.inputs[0]].shape);
    let outputs = exec.execute(&program, &sched, &inputs)?;
    joined(c, place.devices(), x, out_dim, outputs)
}

/// XLA's result for the same call as [`shard_map`], from the collective's reference.
pub fn reference_map(
    c: &dyn Collective,
    mesh: &Mesh,
    x: &ShardedArray,
    out_dim: usize,
) -> Result<ShardedArray> {
    reference_map_placed(c, &Placement::whole(mesh.clone()), x, out_dim)
}

/// XLA's result for the same call as [`shard_map_placed`].
pub fn reference_map_placed(
    c: &dyn Collective,
    place: &Placement,
    x: &ShardedArray,
    out_dim: usize,
) -> Result<ShardedArray> {
    let shard = first_of(x, &place.mesh)?;
    let program = c
        .call(&place.ring, &shard.shape, shard.dtype)?
        .lower(&place.ring)?;
    let inputs = kernel_inputs(x, &program.layout.allocs[program.inputs[0]].shape);
    joined(c, place.devices(), x, out_dim, place.reference(c, &inputs)?)
}

/// `jax.shard_map(c, mesh, in_specs=in_spec, out_specs=out_spec)` on a multi-axis mesh:
/// `global` is split by `in_spec` (a dimension over x, another over y, or replicated),
/// `c` runs as `place` says, and the per-device results are joined by `out_spec`
/// (devices that hold the same block must agree, as replicated results do).
pub fn shard_map_specs(
    c: &dyn Collective,
    place: &Placement,
    global: &HostArray,
    [in_spec, out_spec]: [&PartitionSpec; 2],
    exec: &mut dyn Executor,
) -> Result<HostArray> {
    map_specs(
        c,
        place,
        global,
        [in_spec, out_spec],
        &mut |program, inputs| {
            let sched = schedule(program, &mut Eager::default())?;
            exec.check(program)?;
            exec.execute(program, &sched, inputs)
        },
    )
}

/// XLA's result for the same call as [`shard_map_specs`], from the collective's reference.
pub fn reference_map_specs(
    c: &dyn Collective,
    place: &Placement,
    global: &HostArray,
    [in_spec, out_spec]: [&PartitionSpec; 2],
) -> Result<HostArray> {
    map_specs(c, place, global, [in_spec, out_spec], &mut |_, inputs| {
        place.reference(c, inputs)
    })
}

/// Per-device outputs of a lowered program for `inputs[device][operand]`.
type RunFn<'a> = dyn FnMut(&Program, &[Vec<HostArray>]) -> Result<Vec<Vec<HostArray>>> + 'a;

fn map_specs(
    c: &dyn Collective,
    place: &Placement,
    global: &HostArray,
    [in_spec, out_spec]: [&PartitionSpec; 2],
    run: &mut RunFn,
) -> Result<HostArray> {
    let shards = partition::shard(global, &place.mesh, in_spec)?;
    let x = ShardedArray { dim: 0, shards };
    let shard = first_of(&x, &place.mesh)?;
    let program = place.lower(&c.call(&place.ring, &shard.shape, shard.dtype)?)?;
    let inputs = kernel_inputs(&x, &program.layout.allocs[program.inputs[0]].shape);
    let out_shape = c.output_shape(place.devices(), &shard.shape);
    let outputs: Vec<HostArray> = run(&program, &inputs)?
        .into_iter()
        .map(|mut o| HostArray {
            shape: out_shape.clone(),
            ..o.swap_remove(0)
        })
        .collect();
    partition::unshard(&outputs, &place.mesh, out_spec)
}

/// The first shard of `x`, which must have one shard per device of `mesh`.
fn first_of<'x>(x: &'x ShardedArray, mesh: &Mesh) -> Result<&'x HostArray> {
    if x.shards.len() != mesh.size() {
        return Err(Error::bad_input(format!(
            "{} shards for a mesh of {} devices",
            x.shards.len(),
            mesh.size()
        )));
    }
    x.shards
        .first()
        .ok_or_else(|| Error::bad_input("a sharded array needs at least one shard"))
}

/// Each shard as the kernel's input ref sees it (the rings take `[1, N]`: a reshape).
fn kernel_inputs(x: &ShardedArray, in_shape: &[usize]) -> Vec<Vec<HostArray>> {
    x.shards
        .iter()
        .map(|s| {
            vec![HostArray {
                shape: in_shape.to_vec(),
                ..s.clone()
            }]
        })
        .collect()
}

/// Per-device first outputs, shaped as XLA's per-shard result, joined along `out_dim`.
fn joined(
    c: &dyn Collective,
    devices: usize,
    x: &ShardedArray,
    out_dim: usize,
    outputs: Vec<Vec<HostArray>>,
) -> Result<ShardedArray> {
    let out_shape = c.output_shape(devices, &x.shards[0].shape);
    if out_dim >= out_shape.len() {
        return Err(Error::bad_input(format!(
            "the result of `{}` has shape {out_shape:?}; it has no dimension {out_dim} to join along",
            c.name()
        )));
    }
    let shards = outputs
        .into_iter()
        .map(|mut o| HostArray {
            shape: out_shape.clone(),
            ..o.swap_remove(0)
        })
        .collect();
    Ok(ShardedArray {
        dim: out_dim,
        shards,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_and_unshard_are_inverse_along_any_dimension() {
        let mesh = Mesh::new(2, "x").unwrap();
        let g = HostArray::from_i32(&[2, 4, 3], (0..24).collect()).unwrap();
        for dim in [0, 1] {
            let s = ShardedArray::shard(&g, &mesh, dim).unwrap();
            assert_eq!(s.unshard().unwrap(), g);
        }
        let s = ShardedArray::shard(&g, &mesh, 1).unwrap();
        assert_eq!(s.shards[1].shape, vec![2, 2, 3]);
        assert_eq!(s.shards[1].as_i32()[..6], [6, 7, 8, 9, 10, 11]);
        assert!(
            ShardedArray::shard(&g, &mesh, 2).is_err(),
            "3 is not divisible by 2"
        );
        assert!(ShardedArray::shard(&g, &mesh, 3).is_err());
        // An array whose shape does not match its elements is refused, not sliced.
        let lying = HostArray {
            shape: vec![1 << 62, 1 << 62],
            ..g.clone()
        };
        assert!(ShardedArray::shard(&lying, &mesh, 1).is_err());
        let short = HostArray {
            shape: vec![4, 4],
            ..g
        };
        assert!(ShardedArray::shard(&short, &mesh, 0).is_err());
    }
}
