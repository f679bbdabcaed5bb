//! Where an op came from: the kernel's source line, the device, the grid point, the
//! loop iteration and the API call.

use crate::source::{Iteration, SourceLoc};

/// Where an op was recorded: grid point (linear), loop iteration, API call and kernel
/// source line. 24 bytes: a program at large P has millions of sites.
#[derive(Clone, Copy, Debug)]
pub struct OpSite {
    /// Device that recorded the op (32 bits, as the planner's limit on P).
    pub device: u32,
    /// Row-major index of the grid point; in a sequence of invocations, counted after
    /// every grid point of the invocations before ([`super::Invocation::first_step`]).
    pub grid_linear: u32,
    /// The API call's name, by number ([`OpSite::op`]).
    op: u32,
    /// Kernel source location.
    pub location: SourceLoc,
    /// The loop iteration(s) the op was recorded in ([`Iteration::NONE`] outside loops).
    pub iteration: Iteration,
}

impl OpSite {
    /// The site of API call `op` of `device` at grid point `grid_linear`, from `location`.
    pub fn new(device: u32, grid_linear: u32, op: &'static str, location: SourceLoc) -> Self {
        OpSite {
            device,
            grid_linear,
            op: crate::source::files::number(op),
            location,
            iteration: Iteration::NONE,
        }
    }

    /// This site, recorded in loop iteration `iteration`.
    pub fn in_iteration(self, iteration: Iteration) -> Self {
        OpSite { iteration, ..self }
    }

    /// The API call's number (equal numbers, equal names; no lock taken).
    pub fn op_number(&self) -> u32 {
        self.op
    }

    /// The API call's name.
    pub fn op(&self) -> &'static str {
        crate::source::files::name(self.op)
    }
}
