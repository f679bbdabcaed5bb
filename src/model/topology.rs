//! How the simulated devices are wired: a torus (a ring is a 1-D torus) with
//! wraparound links, each direction of each link its own channel, and DMAs routed hop
//! by hop in dimension order (the shorter way round each dimension); or `full`, a
//! direct link between every pair (the model before topologies).

use crate::error::{Error, Result};
use std::fmt;

/// The wiring of the devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Topology {
    /// A torus with these dimensions (x fastest: device i sits at (i mod A, i / A, …)).
    Torus(Vec<usize>),
    /// A ring of however many devices the run has (a 1-D torus).
    Ring,
    /// A direct link between every pair of devices.
    Full,
}

impl Topology {
    /// Parses `ring`, `full` or `torus:AxB[xC]`.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || {
            Error::bad_input(format!(
                "unknown topology `{s}` (expected ring, full or torus:AxB[xC], e.g. torus:4x4)"
            ))
        };
        match s {
            "ring" => Ok(Topology::Ring),
            "full" => Ok(Topology::Full),
            _ => {
                let dims = s.strip_prefix("torus:").ok_or_else(bad)?;
                let dims: Vec<usize> = dims
                    .split('x')
                    .map(|d| d.parse::<usize>().ok().filter(|&d| d > 0))
                    .collect::<Option<_>>()
                    .ok_or_else(bad)?;
                if dims.is_empty() || dims.len() > 3 {
                    return Err(bad());
                }
                Ok(Topology::Torus(dims))
            }
        }
    }

    /// The torus of `mesh`'s shape: mesh device ids are row-major (the last axis
    /// fastest) and torus positions x-fastest, so the axes come in reverse.
    pub fn of_mesh(mesh: &crate::mesh::Mesh) -> Self {
        Topology::Torus(mesh.axes().iter().rev().map(|a| a.1).collect())
    }

    /// The torus dimensions for `p` devices (`None`: full), or an error when the torus
    /// does not have exactly `p` chips.
    pub fn dims(&self, p: usize) -> Result<Option<Vec<usize>>> {
        match self {
            Topology::Full => Ok(None),
            Topology::Ring => Ok(Some(vec![p])),
            Topology::Torus(d) => {
                let n: usize = d.iter().product();
                if n != p {
                    return Err(Error::bad_input(format!(
                        "topology {self} has {n} chips but the run has P={p} devices"
                    )));
                }
                Ok(Some(d.clone()))
            }
        }
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Topology::Ring => write!(f, "ring"),
            Topology::Full => write!(f, "full"),
            Topology::Torus(d) => {
                let d: Vec<String> = d.iter().map(|x| x.to_string()).collect();
                write!(f, "torus:{}", d.join("x"))
            }
        }
    }
}

/// The devices a DMA from `src` to `dst` passes, both ends included: dimension-order
/// routing on the torus `dims` (x first), each dimension the shorter way round (the
/// positive way on a tie). On `None` (full) the route is direct.
pub fn route(dims: Option<&[usize]>, src: usize, dst: usize) -> Vec<usize> {
    let Some(dims) = dims else {
        return vec![src, dst];
    };
    let coords = |mut i: usize| {
        dims.iter()
            .map(|&n| {
                let c = i % n;
                i /= n;
                c
            })
            .collect::<Vec<_>>()
    };
    let index = |c: &[usize]| {
        c.iter()
            .zip(dims)
            .rev()
            .fold(0, |acc, (&ci, &n)| acc * n + ci)
    };
    let mut at = coords(src);
    let to = coords(dst);
    let mut path = vec![src];
    for (k, &n) in dims.iter().enumerate() {
        let forward = (to[k] + n - at[k]) % n;
        let (step, hops) = if forward <= n - forward {
            (1, forward)
        } else {
            (n - 1, n - forward)
        };
        for _ in 0..hops {
            at[k] = (at[k] + step) % n;
            path.push(index(&at));
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_go_the_short_way_in_dimension_order() {
        let ring = [8];
        assert_eq!(route(Some(&ring), 0, 3), vec![0, 1, 2, 3]);
        assert_eq!(route(Some(&ring), 1, 6), vec![1, 0, 7, 6]);
        assert_eq!(route(Some(&ring), 0, 4), vec![0, 1, 2, 3, 4]);
        assert_eq!(route(Some(&ring), 5, 5), vec![5]);
        // 4x2 torus: device i at (i % 4, i / 4); x first, then y.
        assert_eq!(route(Some(&[4, 2]), 0, 7), vec![0, 3, 7]);
        assert_eq!(route(None, 2, 5), vec![2, 5]);
        assert_eq!(
            Topology::parse("torus:4x2").unwrap().to_string(),
            "torus:4x2"
        );
        assert!(Topology::parse("torus:4x0").is_err() && Topology::parse("mesh").is_err());
        assert!(Topology::parse("torus:4x2").unwrap().dims(6).is_err());
        assert_eq!(Topology::Ring.dims(5).unwrap(), Some(vec![5]));
    }
}
