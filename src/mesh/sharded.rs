//! Sharded arrays for library users: a global array split over a mesh's devices along one
//! dimension (a `PartitionSpec` with one sharded dimension; on a multi-axis mesh, sharded
//! over all its axes, row-major), split and reassembled; `crate::run::Job::shard_map`
//! runs a collective on every shard like `jax.shard_map`.

use super::Mesh;
use crate::array::HostArray;
use crate::error::{Error, Result};

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

/// Where device `d`'s block of an array of `shape` split into `p` blocks along `dim`
/// lies in the array, row-major: runs of (first element, count), in the block's order
/// (a rank reads or writes its devices' blocks of a file with them). `shape[dim]` must be
/// a multiple of `p`.
pub fn block_runs(shape: &[usize], dim: usize, p: usize, d: usize) -> Vec<(usize, usize)> {
    let (outer, n, inner) = split_at(shape, dim);
    let block = n / p.max(1);
    (0..outer)
        .map(|o| ((o * n + d * block) * inner, block * inner))
        .filter(|r| r.1 > 0)
        .collect()
}

/// The part of `runs` (as [`block_runs`] gives them) that holds elements `range` of the
/// block they make.
pub fn runs_within(runs: &[(usize, usize)], range: std::ops::Range<usize>) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    for &(first, n) in runs {
        let (lo, hi) = (range.start.max(at), range.end.min(at + n));
        if lo < hi {
            out.push((first + lo - at, hi - lo));
        }
        at += n;
        if at >= range.end {
            break;
        }
    }
    out
}

impl ShardedArray {
    /// The shape of one of `p` equal blocks of an array of `shape` along `dim`.
    pub fn shard_shape(shape: &[usize], p: usize, dim: usize) -> Result<Vec<usize>> {
        if dim >= shape.len() {
            return Err(Error::bad_input(format!(
                "cannot shard dimension {dim} of an array of shape {shape:?}"
            )));
        }
        let n = shape[dim];
        if !n.is_multiple_of(p.max(1)) {
            return Err(Error::bad_input(format!(
                "dimension {dim} of shape {shape:?} has {n} entries, not divisible by {p} devices"
            )));
        }
        let mut block = shape.to_vec();
        block[dim] = n / p.max(1);
        Ok(block)
    }

    /// Splits `global` into `mesh.size()` equal blocks along `dim`
    /// (`NamedSharding(mesh, P(…, "x", …))` with "x" at position `dim`).
    pub fn shard(global: &HostArray, mesh: &Mesh, dim: usize) -> Result<Self> {
        let p = mesh.size();
        if crate::array::numel(&global.shape) != Some(global.words.len()) {
            return Err(Error::bad_input(format!(
                "an array of shape {:?} must hold that many elements, not {}",
                global.shape,
                global.words.len()
            )));
        }
        let shape = Self::shard_shape(&global.shape, p, dim)?;
        let (outer, n, inner) = split_at(&global.shape, dim);
        let block = shape[dim];
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

    #[test]
    fn block_runs_are_the_shards_elements() {
        let shape = [3, 8, 2];
        let global = HostArray::from_i32(&shape, (0..48).collect()).unwrap();
        let mesh = Mesh::new(4, "x").unwrap();
        let x = ShardedArray::shard(&global, &mesh, 1).unwrap();
        for (d, shard) in x.shards.iter().enumerate() {
            let runs = block_runs(&shape, 1, 4, d);
            let words: Vec<u32> = runs
                .iter()
                .flat_map(|&(f, n)| global.words[f..f + n].to_vec())
                .collect();
            assert_eq!(words, shard.words);
            let part: Vec<u32> = runs_within(&runs, 3..11)
                .iter()
                .flat_map(|&(f, n)| global.words[f..f + n].to_vec())
                .collect();
            assert_eq!(part, shard.words[3..11]);
        }
    }
}
