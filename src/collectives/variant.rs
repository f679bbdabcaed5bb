//! A deliberately broken variant of a collective: its name, the mistake, the problem
//! the verifier must report, and its kernel ([`super::variants`] lists them).

use crate::array::DType;
use crate::error::Result;
use crate::kernel::PallasCall;
use crate::mesh::Mesh;
use crate::verify::ProblemKind;

/// A named broken variant of a collective.
#[derive(Clone, Copy)]
pub struct Variant {
    /// The collective it breaks.
    pub collective: &'static str,
    /// Variant name (`--variant`).
    pub name: &'static str,
    /// The mistake, in one line.
    pub summary: &'static str,
    /// The problem the verifier must report (`None`: none, the kernel's other
    /// handshakes make the mistake harmless; it ships to show that).
    pub expect: Option<ProblemKind>,
    /// The kernel invocations back to back it takes to show (`--repeat`): 1 for a
    /// mistake within one invocation.
    pub repeat: usize,
    /// The smallest mesh the mistake shows on (devices of a ring): on a smaller one the
    /// kernel's other handshakes cover it, and the verifier reports it clean.
    pub devices: usize,
    pub(super) build: fn(&Mesh, &[usize], DType) -> Result<PallasCall>,
}

impl Variant {
    /// The broken kernel for `mesh`.
    pub fn call(&self, mesh: &Mesh, shard: &[usize], dtype: DType) -> Result<PallasCall> {
        (self.build)(mesh, shard, dtype)
    }

    /// What the verifier says of it: `race`, `… under --repeat 2`, `… from P = 5`,
    /// `clean …`.
    pub fn expectation(&self) -> String {
        let from = match self.devices {
            0..=3 => String::new(),
            p => format!(", from P = {p}"),
        };
        match (self.expect, self.repeat) {
            (Some(k), 1) => format!("{k}{from}"),
            (Some(k), r) => format!("{k}, under --repeat {r}{from}"),
            (None, _) => "clean, under any --repeat".into(),
        }
    }
}

impl std::fmt::Debug for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} --variant {}", self.collective, self.name)
    }
}
