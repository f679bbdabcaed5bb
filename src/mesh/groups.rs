//! A collective over one axis of a multi-axis mesh: the 1-D program of that axis,
//! instantiated once per group of devices that share every other coordinate
//! (independent rings per row or column, as `shard_map` runs a collective over one
//! named axis). The union is an ordinary program on the whole mesh, so the scheduler,
//! the verifier, the cost model (with the mesh's real device ids on its topology) and
//! the executors need nothing new.

use super::Mesh;
use crate::error::{Error, Result};
use crate::ir::{Op, OpSite, Program, Remap, SemRef, View};

/// The groups of a mesh along some of its axes, described rather than listed: holding
/// them costs nothing proportional to P, so a placement on any mesh is made before the
/// budget looks at it; a group's devices are computed when asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Groups {
    /// Sizes of the mesh's axes, in mesh order.
    sizes: Vec<usize>,
    /// Whether each axis is one the groups run along.
    along: Vec<bool>,
}

impl Groups {
    /// The groups of `mesh` along `axis` (one axis, or several comma-separated; see
    /// [`groups_along`]).
    pub fn new(mesh: &Mesh, axis: &str) -> Result<Self> {
        let mut along = vec![false; mesh.axes().len()];
        for a in axis.split(',').map(str::trim) {
            let k = mesh.axis_named(a)?;
            if along[k] {
                return Err(Error::bad_input(format!(
                    "axis `{a}` is named twice in `{axis}` (name each axis once, e.g. x,y)"
                )));
            }
            along[k] = true;
        }
        Ok(Self {
            sizes: mesh.axes().iter().map(|a| a.1).collect(),
            along,
        })
    }

    /// Sizes of the axes that are (`true`) or are not (`false`) the groups' axes.
    fn sizes_where(&self, along: bool) -> impl Iterator<Item = usize> + '_ {
        self.sizes
            .iter()
            .zip(&self.along)
            .filter(move |(_, &a)| a == along)
            .map(|(&n, _)| n)
    }

    /// How many groups there are (the product of the other axes' sizes).
    pub fn len(&self) -> usize {
        self.sizes_where(false).product()
    }

    /// True when there are none (never, for a mesh).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Devices in each group (the product of the groups' axes' sizes).
    pub fn group_size(&self) -> usize {
        self.sizes_where(true).product()
    }

    /// The devices of group `g`, in linear order: the other coordinates are `g`'s
    /// row-major digits, the groups' coordinates run through every value.
    pub fn group(&self, g: usize) -> Vec<usize> {
        // Strides of every axis in the mesh's row-major order.
        let mut strides = vec![1usize; self.sizes.len()];
        for i in (0..self.sizes.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * self.sizes[i + 1];
        }
        let mut base = 0;
        let mut rest = g;
        for i in (0..self.sizes.len()).rev() {
            if !self.along[i] {
                base += (rest % self.sizes[i]) * strides[i];
                rest /= self.sizes[i];
            }
        }
        let mut devices = vec![base];
        for ((&n, &stride), _) in self
            .sizes
            .iter()
            .zip(&strides)
            .zip(&self.along)
            .filter(|(_, &along)| along)
        {
            devices = devices
                .iter()
                .flat_map(|&d| (0..n).map(move |c| d + c * stride))
                .collect();
        }
        devices
    }

    /// Every group, in order.
    pub fn iter(&self) -> impl Iterator<Item = Vec<usize>> + '_ {
        (0..self.len()).map(|g| self.group(g))
    }

    /// Every group as a list.
    pub fn to_vec(&self) -> Vec<Vec<usize>> {
        self.iter().collect()
    }
}

/// The groups of `mesh` along `axis`: for every combination of the other coordinates,
/// the devices in order of their coordinate on `axis`. `axis` may name several axes,
/// comma-separated (`x,y`): a group is then every device that shares the remaining
/// coordinates, in row-major order, one ring through all of them. Groups come in the
/// order of their first device.
pub fn groups_along(mesh: &Mesh, axis: &str) -> Result<Vec<Vec<usize>>> {
    Ok(Groups::new(mesh, axis)?.to_vec())
}

/// `program` (a 1-D program on `groups[g].len()` devices) run by every group at once:
/// device i of group g is the mesh's device `groups[g][i]`.
pub fn replicate(program: &Program, groups: &[Vec<usize>]) -> Result<Program> {
    let q = program.devices;
    let total: usize = groups.iter().map(Vec::len).sum();
    if groups.iter().any(|g| g.len() != q) {
        return Err(Error::bad_input(format!(
            "every group must have the {q} devices of the program"
        )));
    }
    let mut ops = vec![Vec::new(); total];
    let mut dmas = Vec::with_capacity(program.dmas.len() * groups.len());
    let mut prologue = Vec::new();
    let mut epilogue = Vec::new();
    let mut invocations = program.invocations.clone();
    for inv in &mut invocations {
        inv.starts = vec![0; total];
    }
    for g in groups {
        let map = |d: usize| g[d];
        // Sites hold 32-bit device ids; the planner keeps P below 2^32.
        let site = |mut s: OpSite| {
            s.device = map(s.device as usize) as u32;
            s
        };
        let base = dmas.len();
        let m = Remap {
            dma: &|k| base + k,
            sem: &|s: SemRef| SemRef::new(map(s.device()), s.sem()),
            view: &|v: View| v.on_device(map(v.device())),
        };
        dmas.extend(program.dmas.iter().map(|d| d.remap(&m, site(d.origin))));
        for (d, list) in program.ops.iter().enumerate() {
            ops[map(d)] = list
                .iter()
                .map(|op| Op {
                    kind: op.kind.remap(&m),
                    site: site(op.site),
                })
                .collect();
            for (inv, from) in invocations.iter_mut().zip(&program.invocations) {
                inv.starts[map(d)] = from.starts[d];
            }
        }
        prologue.extend(program.prologue.iter().map(|o| o.map_views(m.view)));
        epilogue.extend(program.epilogue.iter().map(|o| o.map_views(m.view)));
    }
    Ok(Program {
        devices: total,
        ops,
        dmas,
        prologue,
        epilogue,
        invocations,
        ..program.clone_header()
    })
}

impl Program {
    /// Everything but the per-device work: name, layout, operands.
    fn clone_header(&self) -> Program {
        Program {
            name: self.name.clone(),
            devices: self.devices,
            layout: self.layout.clone(),
            ops: Vec::new(),
            dmas: Vec::new(),
            prologue: Vec::new(),
            epilogue: Vec::new(),
            inputs: self.inputs.clone(),
            outputs: self.outputs.clone(),
            invocations: Vec::new(),
            cores: self.cores,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_run_along_one_axis_with_the_others_fixed() {
        let mesh = Mesh::with_axes(&[("x", 2), ("y", 3)]).unwrap();
        assert_eq!(
            groups_along(&mesh, "y").unwrap(),
            vec![vec![0, 1, 2], vec![3, 4, 5]]
        );
        assert_eq!(
            groups_along(&mesh, "x").unwrap(),
            vec![vec![0, 3], vec![1, 4], vec![2, 5]]
        );
        assert!(groups_along(&mesh, "z").is_err());
        assert_eq!(
            groups_along(&mesh, "x,y").unwrap(),
            vec![(0..6).collect::<Vec<_>>()]
        );
        let m3 = Mesh::with_axes(&[("x", 2), ("y", 2), ("z", 2)]).unwrap();
        assert_eq!(
            groups_along(&m3, "x,z").unwrap(),
            vec![vec![0, 1, 4, 5], vec![2, 3, 6, 7]]
        );
        assert!(groups_along(&mesh, "x,x").is_err());
        assert_eq!(
            groups_along(&m3, "y").unwrap(),
            vec![vec![0, 2], vec![1, 3], vec![4, 6], vec![5, 7]]
        );
        assert_eq!(
            groups_along(&m3, "z,x").unwrap(),
            vec![vec![0, 1, 4, 5], vec![2, 3, 6, 7]]
        );
    }

    /// The groups match the definition (devices sharing every other coordinate, in
    /// linear order; groups in the order of their first device) on every small mesh.
    #[test]
    fn groups_match_their_definition() {
        for sizes in [vec![3usize], vec![2, 3], vec![3, 1, 4], vec![2, 3, 2]] {
            let names = ["x", "y", "z"];
            let axes: Vec<(&str, usize)> = names.iter().copied().zip(sizes.clone()).collect();
            let mesh = Mesh::with_axes(&axes).unwrap();
            for along in ["x", "y", "z", "x,y", "y,z", "x,z", "x,y,z"] {
                let Ok(g) = Groups::new(&mesh, along) else {
                    continue;
                };
                let ks: Vec<usize> = along
                    .split(',')
                    .map(|a| mesh.axis_named(a).unwrap())
                    .collect();
                let mut want: Vec<(Vec<usize>, Vec<usize>)> = Vec::new();
                for d in 0..mesh.size() {
                    let mut c = mesh.coords(d);
                    for &k in &ks {
                        c[k] = 0;
                    }
                    match want.iter_mut().find(|w| w.0 == c) {
                        Some(w) => w.1.push(d),
                        None => want.push((c, vec![d])),
                    }
                }
                let want: Vec<Vec<usize>> = want.into_iter().map(|w| w.1).collect();
                assert_eq!(g.to_vec(), want, "{sizes:?} along {along}");
                assert_eq!(g.len(), want.len());
                assert_eq!(g.group_size(), want[0].len());
            }
        }
    }

    /// A placement on a mesh of a billion devices costs nothing until a group is asked for.
    #[test]
    fn groups_of_a_huge_mesh_are_described_not_listed() {
        let mesh = Mesh::with_axes(&[("x", 100_000), ("y", 100_000)]).unwrap();
        let g = Groups::new(&mesh, "y").unwrap();
        assert_eq!((g.len(), g.group_size()), (100_000, 100_000));
        assert_eq!(g.group(1)[..2], [100_000, 100_001]);
    }
}
