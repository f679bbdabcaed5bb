//! Where a collective runs on a mesh: a [`Span::Mesh`] collective is one kernel over
//! the whole mesh; a [`Span::Ring`] collective on a multi-axis mesh runs its 1-D kernel
//! once per group of devices along the chosen axes ([`super::groups`]).

use super::groups::{replicate, Groups};
use super::Mesh;
use crate::array::HostArray;
use crate::error::{Error, Result};
use crate::ir::Program;

/// Which devices one instance of a collective's kernel spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Span {
    /// A 1-D kernel over one ring (axis `x`). On a multi-axis mesh every group of
    /// devices along `--axis` runs it as an independent ring.
    Ring,
    /// One kernel over the whole mesh, addressing devices by their coordinates
    /// (`--mesh` without `--axis`).
    Mesh,
}

/// Outputs `[device][operand]` for inputs `[device][operand]` of one kernel instance.
pub type PerDeviceFn<'a> = dyn Fn(&[Vec<HostArray>]) -> Result<Vec<Vec<HostArray>>> + 'a;

/// A collective's devices: the whole mesh, the groups its rings run on, and the mesh its
/// kernel is built for.
#[derive(Clone, Debug)]
pub struct Placement {
    /// Every device.
    pub mesh: Mesh,
    /// The groups of devices along `axis`, each an independent ring (`None`: one
    /// kernel over `mesh`), described: listed only when the program is spread.
    pub groups: Option<Groups>,
    /// The mesh the kernel is built for: `mesh` itself, or a 1-D ring of one group.
    pub ring: Mesh,
    /// The axes the rings run along (comma-separated), when there are groups.
    pub axis: Option<String>,
}

impl Placement {
    /// One kernel over all of `mesh`.
    pub fn whole(mesh: Mesh) -> Self {
        Self {
            ring: mesh.clone(),
            mesh,
            groups: None,
            axis: None,
        }
    }

    /// A ring kernel on every group of `mesh` along `axis` (one axis, or several
    /// comma-separated: one ring through all their devices, row-major).
    pub fn along(mesh: Mesh, axis: &str) -> Result<Self> {
        let groups = Groups::new(&mesh, axis)?;
        Ok(Self {
            ring: Mesh::new(groups.group_size(), "x")?,
            mesh,
            groups: Some(groups),
            axis: Some(axis.to_string()),
        })
    }

    /// Where a kernel of `span` called `name` runs on `mesh`: a whole-mesh kernel takes
    /// no `axis`; a ring kernel runs along `axis` (default `x`) on a multi-axis mesh, or
    /// over a 1-D mesh whole when no axis is named.
    pub fn of(span: Span, name: &str, mesh: Mesh, axis: Option<&str>) -> Result<Self> {
        match (span, axis) {
            (Span::Mesh, Some(a)) => Err(Error::bad_input(format!(
                "`{name}` is one kernel over the whole mesh (devices addressed by mesh coordinates): \
                 give --mesh without --axis (got --axis {a})"
            ))),
            (Span::Mesh, None) => Ok(Self::whole(mesh)),
            (Span::Ring, None) if mesh.axes().len() == 1 => Ok(Self::whole(mesh)),
            (Span::Ring, a) => Self::along(mesh, a.unwrap_or("x")),
        }
    }

    /// Devices one instance of the kernel spans: the collective's P for its sizes and
    /// bus factors.
    pub fn devices(&self) -> usize {
        self.ring.size()
    }

    /// `one` (a program traced on [`Placement::ring`]) on the whole mesh: run by every
    /// group, or as it is.
    pub fn spread(&self, one: Program) -> Result<Program> {
        match &self.groups {
            Some(g) => replicate(&one, &g.to_vec()),
            None => Ok(one),
        }
    }

    /// `f` (a function of one kernel instance's devices, such as a collective's
    /// reference) applied to `inputs[device][operand]` of the whole mesh: per group, or
    /// over every device.
    pub fn per_group(
        &self,
        inputs: &[Vec<HostArray>],
        f: &PerDeviceFn,
    ) -> Result<Vec<Vec<HostArray>>> {
        let Some(groups) = &self.groups else {
            return f(inputs);
        };
        let mut out = vec![Vec::new(); inputs.len()];
        for g in groups.iter() {
            let mine: Vec<Vec<HostArray>> = g.iter().map(|&d| inputs[d].clone()).collect();
            for (&d, o) in g.iter().zip(f(&mine)?) {
                out[d] = o;
            }
        }
        Ok(out)
    }

    /// `P=…` as reports print it: `16 (4x4)`, `8 (2x4 along y, 2 groups)`, or `4`.
    pub fn describe(&self) -> String {
        let dims: Vec<String> = self.mesh.axes().iter().map(|a| a.1.to_string()).collect();
        match (&self.groups, &self.axis) {
            (Some(g), Some(a)) => format!(
                "{} ({} along {a}, {} group{})",
                self.mesh.size(),
                dims.join("x"),
                g.len(),
                if g.len() == 1 { "" } else { "s" }
            ),
            _ if dims.len() > 1 => format!("{} ({})", self.mesh.size(), dims.join("x")),
            _ => self.mesh.size().to_string(),
        }
    }
}
