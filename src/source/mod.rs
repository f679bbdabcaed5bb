//! Where in a kernel's source: its lines ([`SourceLoc`]) and the loop iterations an op
//! was recorded in ([`Iteration`]), interned so that every op's site stays small. Below
//! the IR and the errors, which both name them.

pub(crate) mod files;
mod iteration;
mod loc;

pub use iteration::Iteration;
pub use loc::SourceLoc;
