//! The verifier's report as data (for Python and JSON): every finding with its kind, the
//! message `check` prints, the schedule that reproduces it, the kernel sites it names in
//! order, and its details.

use super::{Finding, Problem, Report};
use crate::error::{ExitProblem, Site};
use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Serialize, Serializer};

impl Problem {
    /// Every kernel site the problem names, in the order its message does.
    pub fn sites(&self) -> Vec<&Site> {
        match self {
            Problem::Race(r) => {
                let mut v: Vec<&Site> = [&r.first, &r.second]
                    .iter()
                    .filter_map(|s| s.site.as_ref())
                    .collect();
                if let Some(sh) = &r.shared {
                    v.push(&sh.wait);
                    v.extend(sh.instead.site.as_ref());
                }
                v
            }
            Problem::Early(e) => {
                let mut v: Vec<&Site> =
                    std::iter::once(&e.sender).chain(e.entry.as_ref()).collect();
                if let Some(st) = &e.stand_in {
                    v.push(&st.wait);
                    v.extend(st.took.site.as_ref());
                    v.extend(st.instead.site.as_ref());
                }
                v
            }
            Problem::Uninit(u) => u.read.site.iter().collect(),
            Problem::Unwritten(_) => Vec::new(),
            Problem::Deadlock(b) => b.iter().map(|b| &b.site).collect(),
            Problem::Exit(ExitProblem::SemaphoreNotZero { last_signal, .. }) => {
                last_signal.iter().collect()
            }
            Problem::Exit(ExitProblem::DmaNotWaited { site, .. }) => vec![site],
            Problem::Kernel(k) => vec![&k.site],
        }
    }
}

/// A problem's details: the fields of the race, early send, exit problem or kernel
/// error; a deadlock's blocked devices.
impl Serialize for Problem {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Problem::Race(r) => r.serialize(s),
            Problem::Early(e) => e.serialize(s),
            Problem::Uninit(u) => u.serialize(s),
            Problem::Unwritten(u) => u.serialize(s),
            Problem::Deadlock(b) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("blocked", b)?;
                m.end()
            }
            Problem::Exit(e) => e.serialize(s),
            Problem::Kernel(k) => k.serialize(s),
        }
    }
}

impl Serialize for Finding {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Finding", 6)?;
        st.serialize_field("kind", &self.problem.kind().to_string())?;
        st.serialize_field("message", &self.problem.to_string())?;
        st.serialize_field("schedule", &self.schedule.map(|x| x.to_string()))?;
        st.serialize_field("schedules", &self.schedules)?;
        st.serialize_field("sites", &self.problem.sites())?;
        st.serialize_field("details", &self.problem)?;
        st.end()
    }
}

impl Serialize for Report {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Report", 2)?;
        st.serialize_field("schedules", &self.schedules)?;
        st.serialize_field("findings", &self.findings)?;
        st.end()
    }
}
