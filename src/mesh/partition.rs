//! `PartitionSpec`s on a multi-axis mesh (`jax.sharding.PartitionSpec`): each array
//! dimension split over some mesh axes (in the order named, the first major) or
//! replicated; an axis no dimension names replicates the whole array along it.

use crate::array::HostArray;
use crate::error::{Error, Result};
use crate::mesh::Mesh;

/// Per array dimension, the mesh axes it is split over (empty: replicated).
/// `PartitionSpec::new(&[&["x"], &["y"]])` is JAX's `P("x", "y")`;
/// `&[&[], &["x", "y"]]` is `P(None, ("x", "y"))`. Dimensions past the list are replicated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionSpec(pub Vec<Vec<String>>);

impl std::fmt::Display for PartitionSpec {
    /// The notation [`PartitionSpec::parse`] reads, as `P(x,-)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dims: Vec<String> = self
            .0
            .iter()
            .map(|d| {
                if d.is_empty() {
                    "-".into()
                } else {
                    d.join("+")
                }
            })
            .collect();
        write!(f, "P({})", dims.join(","))
    }
}

impl PartitionSpec {
    /// A spec from axis names per dimension.
    pub fn new(dims: &[&[&str]]) -> Self {
        Self(
            dims.iter()
                .map(|d| d.iter().map(|a| a.to_string()).collect())
                .collect(),
        )
    }

    /// Parses one entry per dimension, comma-separated: axis names joined by `+`, or `-`
    /// for a replicated dimension (`x,y` is `P("x", "y")`, `-,x+y` is
    /// `P(None, ("x", "y"))`, `-` alone replicates everything).
    pub fn parse(s: &str) -> Result<Self> {
        let dims = s
            .split(',')
            .map(|d| match d.trim() {
                "-" => Ok(Vec::new()),
                d => d
                    .split('+')
                    .map(|a| {
                        let a = a.trim();
                        if a.is_empty() || !a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                            Err(Error::bad_input(format!(
                                "bad PartitionSpec `{s}` (expected axes per dimension, e.g. x,y or -,x+y)"
                            )))
                        } else {
                            Ok(a.to_string())
                        }
                    })
                    .collect(),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self(dims))
    }

    /// For an array of rank `rank` on `mesh`: per dimension, the positions of its axes
    /// in the mesh; an error for an axis the mesh lacks or names twice.
    fn axes(&self, mesh: &Mesh, rank: usize) -> Result<Vec<Vec<usize>>> {
        if self.0.len() > rank {
            return Err(Error::bad_input(format!(
                "the PartitionSpec {self} has {} entries for an array of rank {rank}",
                self.0.len()
            )));
        }
        let mut seen = Vec::new();
        let mut out = vec![Vec::new(); rank];
        for (d, names) in self.0.iter().enumerate() {
            for a in names {
                let k = mesh.axis_named(a)?;
                if seen.contains(&k) {
                    return Err(Error::bad_input(format!(
                        "the PartitionSpec {self} names axis `{a}` twice"
                    )));
                }
                seen.push(k);
                out[d].push(k);
            }
        }
        Ok(out)
    }
}

/// For device `device`: per dimension, (number of blocks, this device's block).
fn blocks(mesh: &Mesh, axes: &[Vec<usize>], device: usize) -> Vec<(usize, usize)> {
    let c = mesh.coords(device);
    axes.iter()
        .map(|ks| {
            ks.iter().fold((1, 0), |(n, i), &k| {
                let size = mesh.axes()[k].1;
                (n * size, i * size + c[k])
            })
        })
        .collect()
}

/// The global element index of element `e` of a shard of shape `shard` in block `b`.
fn global_index(shard: &[usize], b: &[(usize, usize)], e: usize) -> usize {
    let mut rest = e;
    let mut idx = vec![0; shard.len()];
    for d in (0..shard.len()).rev() {
        idx[d] = rest % shard[d];
        rest /= shard[d];
    }
    idx.iter()
        .zip(shard)
        .zip(b)
        .fold(0, |acc, ((&i, &s), &(n, blk))| acc * s * n + blk * s + i)
}

/// Every device's shard of `global` under `spec`, in mesh (row-major) order.
pub fn shard(global: &HostArray, mesh: &Mesh, spec: &PartitionSpec) -> Result<Vec<HostArray>> {
    let axes = spec.axes(mesh, global.shape.len())?;
    let mut shard_shape = global.shape.clone();
    for (d, &(n, _)) in blocks(mesh, &axes, 0).iter().enumerate() {
        if !global.shape[d].is_multiple_of(n) {
            return Err(Error::bad_input(format!(
                "dimension {d} of shape {:?} has {} entries, not divisible by the {n} devices it is split over in {spec}",
                global.shape, global.shape[d]
            )));
        }
        shard_shape[d] /= n;
    }
    let len: usize = shard_shape.iter().product();
    Ok((0..mesh.size())
        .map(|dev| {
            let b = blocks(mesh, &axes, dev);
            HostArray {
                dtype: global.dtype,
                shape: shard_shape.clone(),
                words: (0..len)
                    .map(|e| global.words[global_index(&shard_shape, &b, e)])
                    .collect(),
            }
        })
        .collect())
}

/// The global array of per-device `shards` under `spec`. Devices that hold the same
/// block (replicated along an axis) must agree; a difference is an error.
pub fn unshard(shards: &[HostArray], mesh: &Mesh, spec: &PartitionSpec) -> Result<HostArray> {
    let first = shards
        .first()
        .filter(|_| shards.len() == mesh.size())
        .ok_or_else(|| {
            Error::bad_input(format!(
                "{} shards for a mesh of {} devices",
                shards.len(),
                mesh.size()
            ))
        })?;
    if shards.iter().any(|s| {
        s.shape != first.shape
            || s.dtype != first.dtype
            || crate::array::numel(&s.shape) != Some(s.words.len())
    }) {
        return Err(Error::bad_input("shards must share one shape and dtype"));
    }
    let axes = spec.axes(mesh, first.shape.len())?;
    let shape: Vec<usize> = blocks(mesh, &axes, 0)
        .iter()
        .zip(&first.shape)
        .map(|(&(n, _), &s)| n * s)
        .collect();
    let mut words: Vec<Option<u32>> = vec![None; shape.iter().product()];
    for (dev, s) in shards.iter().enumerate() {
        let b = blocks(mesh, &axes, dev);
        for (e, &w) in s.words.iter().enumerate() {
            let g = global_index(&first.shape, &b, e);
            match words[g] {
                Some(v) if v != w => {
                    return Err(Error::bad_input(format!(
                        "device {dev} and another device hold the same block of the result under {spec} but their values differ: \
                         the result is not replicated over the axes {spec} leaves out"
                    )))
                }
                _ => words[g] = Some(w),
            }
        }
    }
    Ok(HostArray {
        dtype: first.dtype,
        shape,
        words: words.into_iter().map(|w| w.unwrap_or(0)).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_over_x_and_y_and_back() {
        let mesh = Mesh::with_axes(&[("x", 2), ("y", 3)]).unwrap();
        let g = HostArray::from_i32(&[4, 6], (0..24).collect()).unwrap();
        let spec = PartitionSpec::new(&[&["x"], &["y"]]);
        let s = shard(&g, &mesh, &spec).unwrap();
        // Device (1, 2) holds rows 2..4, columns 4..6.
        assert_eq!(s[5].shape, vec![2, 2]);
        assert_eq!(s[5].as_i32(), &[16, 17, 22, 23]);
        assert_eq!(unshard(&s, &mesh, &spec).unwrap(), g);
        // Replicated along y: every device of a row holds the same rows.
        let rows = PartitionSpec::new(&[&["x"]]);
        let r = shard(&g, &mesh, &rows).unwrap();
        assert_eq!(r[3], r[5]);
        assert_eq!(unshard(&r, &mesh, &rows).unwrap(), g);
        assert!(shard(&g, &mesh, &PartitionSpec::new(&[&["x"], &["x"]])).is_err());
        assert!(shard(&g, &mesh, &PartitionSpec::new(&[&["z"]])).is_err());
        assert!(
            shard(&g, &mesh, &PartitionSpec::new(&[&["y"]])).is_err(),
            "4 rows over 3"
        );
    }
}
