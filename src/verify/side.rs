//! One side of a race or an early send: who accessed (a device, or a DMA's bytes),
//! where in the kernel, and how.

use crate::error::Site;
use std::fmt;

/// One side of a race.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RaceSide {
    /// Who accessed: `device 2`, or `DMA device 1 -> device 2`.
    pub actor: String,
    /// Where the access (or the DMA's `start`) is in the kernel.
    pub site: Option<Site>,
    /// `read` or `write`.
    pub access: &'static str,
}

impl fmt::Display for RaceSide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} by {}", self.access, self.actor)?;
        if let Some(s) = &self.site {
            let what = if self.actor.starts_with("DMA") {
                "started at"
            } else {
                "at"
            };
            write!(f, ", {what} {s}")?;
        }
        Ok(())
    }
}

impl RaceSide {
    pub(super) fn actor_and_site(&self) -> String {
        match &self.site {
            Some(s) if self.actor.starts_with("DMA") => {
                format!("the bytes of {} started at {s}", self.actor)
            }
            Some(s) => format!("{} at {s}", self.actor),
            None => self.actor.clone(),
        }
    }
}
