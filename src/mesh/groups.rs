//! A collective over one axis of a multi-axis mesh: the 1-D program of that axis,
//! instantiated once per group of devices that share every other coordinate
//! (independent rings per row or column, as `shard_map` runs a collective over one
//! named axis). The union is an ordinary program on the whole mesh, so the scheduler,
//! the verifier, the cost model (with the mesh's real device ids on its topology) and
//! the executors need nothing new.

use super::Mesh;
use crate::error::{Error, Result};
use crate::ir::{Op, OpSite, Program, Remap, SemRef, View};

/// The groups of `mesh` along `axis`: for every combination of the other coordinates,
/// the devices in order of their coordinate on `axis`. `axis` may name several axes,
/// comma-separated (`x,y`): a group is then every device that shares the remaining
/// coordinates, in row-major order, one ring through all of them.
pub fn groups_along(mesh: &Mesh, axis: &str) -> Result<Vec<Vec<usize>>> {
    let mut ks: Vec<usize> = Vec::new();
    for a in axis.split(',').map(str::trim) {
        let k = mesh.axis_named(a)?;
        if ks.contains(&k) {
            return Err(Error::bad_input(format!(
                "axis `{a}` is named twice in `{axis}` (name each axis once, e.g. x,y)"
            )));
        }
        ks.push(k);
    }
    let mut groups: Vec<(Vec<usize>, Vec<usize>)> = Vec::new();
    for d in 0..mesh.size() {
        let mut c = mesh.coords(d);
        for &k in &ks {
            c[k] = 0;
        }
        match groups.iter_mut().find(|g| g.0 == c) {
            Some(g) => g.1.push(d),
            None => groups.push((c, vec![d])),
        }
    }
    // Devices come in linear order: their row-major order over `axis` within a group.
    Ok(groups.into_iter().map(|g| g.1).collect())
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
    }
}
