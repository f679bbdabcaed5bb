//! Where a collective runs on a mesh: a [`Span::Mesh`] collective is one kernel over
//! the whole mesh; a [`Span::Ring`] collective on a multi-axis mesh runs its 1-D kernel
//! once per group of devices along the chosen axes (`device_sim::groups`).

use super::{Collective, Span};
use crate::array::HostArray;
use crate::device_sim::groups::{groups_along, replicate};
use crate::device_sim::Program;
use crate::error::{Error, Result};
use crate::kernel::PallasCall;
use crate::mesh::Mesh;

/// A collective's devices: the whole mesh, the groups its rings run on, and the mesh its
/// kernel is built for.
#[derive(Clone, Debug)]
pub struct Placement {
    /// Every device.
    pub mesh: Mesh,
    /// The groups of devices along `axis`, each an independent ring (`None`: one
    /// kernel over `mesh`).
    pub groups: Option<Vec<Vec<usize>>>,
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
        let groups = groups_along(&mesh, axis)?;
        Ok(Self {
            ring: Mesh::new(groups[0].len(), "x")?,
            mesh,
            groups: Some(groups),
            axis: Some(axis.to_string()),
        })
    }

    /// Where `c` runs on `mesh`: a whole-mesh collective takes no `axis`; a ring
    /// collective runs along `axis` (default `x`) on a multi-axis mesh, or over a 1-D
    /// mesh whole when no axis is named.
    pub fn of(c: &dyn Collective, mesh: Mesh, axis: Option<&str>) -> Result<Self> {
        match (c.span(), axis) {
            (Span::Mesh, Some(a)) => Err(Error::bad_input(format!(
                "`{}` is one kernel over the whole mesh (devices addressed by mesh coordinates): \
                 give --mesh without --axis (got --axis {a})",
                c.name()
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

    /// `call` (built for [`Placement::ring`]) lowered on the whole mesh.
    pub fn lower(&self, call: &PallasCall) -> Result<Program> {
        let one = call.lower(&self.ring)?;
        match &self.groups {
            Some(g) => replicate(&one, g),
            None => Ok(one),
        }
    }

    /// `c`'s reference for `inputs[device][operand]` of the whole mesh: per group, or
    /// over every device.
    pub fn reference(
        &self,
        c: &dyn Collective,
        inputs: &[Vec<HostArray>],
    ) -> Result<Vec<Vec<HostArray>>> {
        match &self.groups {
            Some(g) => super::reference_along(c, g, inputs),
            None => c.reference(inputs),
        }
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
