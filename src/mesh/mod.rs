//! The device mesh: P devices laid out on named axes and device ids into it ([`Mesh`]),
//! groups of devices along axes ([`groups`]), where a collective runs on a mesh
//! ([`placement`]), PartitionSpecs ([`partition`]) and sharded arrays ([`sharded`]).

pub mod groups;
pub mod partition;
pub mod placement;
pub mod sharded;

pub use placement::{Placement, Span};

/// The most devices the planner supports: device ids are 32-bit in the step tables'
/// symbolic terms.
pub const MAX_DEVICES: usize = u32::MAX as usize - 1;

use crate::error::{Error, Result};

/// A mesh of devices on named axes, row-major (the last axis varies fastest).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mesh {
    axes: Vec<(String, usize)>,
}

impl Mesh {
    /// A one-dimensional mesh of `devices` devices on axis `axis` (e.g. `"x"`).
    pub fn new(devices: usize, axis: &str) -> Result<Self> {
        Self::with_axes(&[(axis, devices)])
    }

    /// A mesh with several named axes, e.g. `[("x", 2), ("y", 4)]`.
    pub fn with_axes(axes: &[(&str, usize)]) -> Result<Self> {
        if axes.is_empty() {
            return Err(Error::bad_input("a mesh needs at least one axis"));
        }
        for (name, n) in axes {
            if *n == 0 {
                return Err(Error::bad_input(format!(
                    "mesh axis `{name}` has 0 devices (P must be at least 1)"
                )));
            }
        }
        // The size is a product of the axes: one that overflows names no mesh.
        if axes
            .iter()
            .try_fold(1usize, |acc, a| acc.checked_mul(a.1))
            .is_none()
        {
            let sizes: Vec<String> = axes.iter().map(|a| a.1.to_string()).collect();
            return Err(Error::TooLarge(format!(
                "a mesh of {} devices is more than can be counted (at most {} devices are supported)",
                sizes.join(" x "),
                MAX_DEVICES
            )));
        }
        Ok(Self {
            axes: axes.iter().map(|(n, s)| (n.to_string(), *s)).collect(),
        })
    }

    /// Total number of devices.
    pub fn size(&self) -> usize {
        self.axes.iter().map(|a| a.1).product()
    }

    /// Axis names and sizes.
    pub fn axes(&self) -> &[(String, usize)] {
        &self.axes
    }

    /// Position of the axis called `name`.
    pub fn axis_position(&self, name: &str) -> Option<usize> {
        self.axes.iter().position(|a| a.0 == name)
    }

    /// Position of the axis called `name`, or a bad-input error naming the mesh's axes.
    pub fn axis_named(&self, name: &str) -> Result<usize> {
        self.axis_position(name).ok_or_else(|| {
            let names: Vec<&str> = self.axes.iter().map(|a| a.0.as_str()).collect();
            Error::bad_input(format!(
                "the mesh has no axis `{name}` (axes: {})",
                names.join(", ")
            ))
        })
    }

    /// Mesh coordinates of linear device `device`.
    pub fn coords(&self, device: usize) -> Vec<usize> {
        let mut rest = device;
        let mut out = vec![0; self.axes.len()];
        for (i, (_, n)) in self.axes.iter().enumerate().rev() {
            out[i] = rest % n;
            rest /= n;
        }
        out
    }

    /// Linear id of a device id, or a message saying why it is not in the mesh.
    pub fn resolve(&self, id: &DeviceId) -> std::result::Result<usize, String> {
        match id {
            DeviceId::Logical(i) => {
                if *i >= 0 && (*i as usize) < self.size() {
                    Ok(*i as usize)
                } else {
                    Err(format!(
                        "logical device id {i} is outside the mesh of {} devices (valid 0..={})",
                        self.size(),
                        self.size() - 1
                    ))
                }
            }
            DeviceId::Mesh(coords) => {
                if coords.len() != self.axes.len() {
                    return Err(format!(
                        "mesh device id {coords:?} has {} coordinates but the mesh has {} axes",
                        coords.len(),
                        self.axes.len()
                    ));
                }
                let mut lin = 0usize;
                for (c, (name, n)) in coords.iter().zip(&self.axes) {
                    if *c < 0 || *c as usize >= *n {
                        return Err(format!(
                            "mesh device id {coords:?} is outside the mesh: axis `{name}` has {n} devices (valid 0..={}), got {c}",
                            n - 1
                        ));
                    }
                    lin = lin * n + *c as usize;
                }
                Ok(lin)
            }
        }
    }
}

/// A device id as a kernel names it: mesh coordinates (`DeviceIdType.MESH`) or a
/// linear id (`DeviceIdType.LOGICAL`). Components are signed so that a wrong
/// `(i - 1) % n` shows up as the negative id it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceId {
    /// Mesh coordinates, one per axis.
    Mesh(Vec<i64>),
    /// Linear id.
    Logical(i64),
}

impl From<i64> for DeviceId {
    /// A single coordinate: the mesh id on a one-axis mesh.
    fn from(v: i64) -> Self {
        DeviceId::Mesh(vec![v])
    }
}

impl From<(i64,)> for DeviceId {
    fn from(v: (i64,)) -> Self {
        DeviceId::Mesh(vec![v.0])
    }
}

impl From<(i64, i64)> for DeviceId {
    fn from(v: (i64, i64)) -> Self {
        DeviceId::Mesh(vec![v.0, v.1])
    }
}

/// Where `semaphore_signal` goes: the same device ids `make_async_remote_copy` takes
/// (`right`, `(x, y)`, a [`DeviceId`]), or `None` for this device.
pub trait SignalTarget {
    /// The device id, or `None` for the signalling device itself.
    fn device_id(self) -> Option<DeviceId>;
}

impl SignalTarget for Option<DeviceId> {
    fn device_id(self) -> Option<DeviceId> {
        self
    }
}

impl SignalTarget for DeviceId {
    fn device_id(self) -> Option<DeviceId> {
        Some(self)
    }
}

impl SignalTarget for i64 {
    fn device_id(self) -> Option<DeviceId> {
        Some(self.into())
    }
}

impl SignalTarget for (i64,) {
    fn device_id(self) -> Option<DeviceId> {
        Some(self.into())
    }
}

impl SignalTarget for (i64, i64) {
    fn device_id(self) -> Option<DeviceId> {
        Some(self.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_and_rejects_ids() {
        let m = Mesh::with_axes(&[("x", 2), ("y", 3)]).unwrap();
        assert_eq!(m.size(), 6);
        assert_eq!(m.resolve(&DeviceId::Mesh(vec![1, 2])), Ok(5));
        assert_eq!(m.coords(5), vec![1, 2]);
        let e = m.resolve(&DeviceId::Mesh(vec![-1, 0])).unwrap_err();
        assert!(e.contains("got -1"), "{e}");
        assert!(m.resolve(&DeviceId::Logical(6)).is_err());
        assert!(Mesh::new(0, "x").is_err());
    }
}
