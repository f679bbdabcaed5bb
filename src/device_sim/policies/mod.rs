//! Scheduling policies: given what can happen next, pick one. Each policy is a file;
//! [`ScheduleSpec`] names one (`eager`, `lazy`, `lockstep`, `run-ahead:D`, `random:SEED`).

mod eager;
mod lazy;
mod lockstep;
mod random;
mod run_ahead;

pub use eager::Eager;
pub use lazy::Lazy;
pub use lockstep::Lockstep;
pub use random::Random;
pub use run_ahead::RunAhead;

use crate::error::{Error, Result};
use std::fmt;

/// One thing the scheduler can do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Run the next op of `device`, which belongs to grid point `grid` (row-major).
    Device {
        /// Device.
        device: usize,
        /// Grid point of its next op.
        grid: usize,
        /// Index of that op in the device's program.
        op: usize,
    },
    /// Complete the in-flight DMA `id` (started by `issuer`).
    CompleteDma {
        /// DMA id.
        id: usize,
        /// Device that started it.
        issuer: usize,
        /// True when some device's next op waits on a semaphore this DMA credits.
        awaited: bool,
    },
}

/// Picks the next step among the runnable choices (never empty). Choices list the
/// in-flight DMAs in start order, then the runnable devices in id order.
pub trait Policy {
    /// The policy's name; for the built-in ones, the [`ScheduleSpec`] that recreates it.
    fn name(&self) -> String;
    /// Index into `choices` of the step to take.
    fn pick(&mut self, choices: &[Choice]) -> usize;
}

/// A named, replayable schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScheduleSpec {
    /// DMAs complete as soon as they start; devices take turns.
    Eager,
    /// DMAs complete only when someone waits on them, newest first.
    Lazy,
    /// No device starts grid point g+1 before every device finished g.
    Lockstep,
    /// Device `D` runs as far ahead as the semaphores allow; the others lag.
    RunAhead(usize),
    /// Seeded random interleaving and DMA completion order.
    Random(u64),
}

impl ScheduleSpec {
    /// Parses `eager`, `lazy`, `lockstep`, `run-ahead:D`, `random:SEED` or a bare SEED.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || {
            Error::bad_input(format!(
                "unknown schedule `{s}` (expected eager, lazy, lockstep, run-ahead:D, random:SEED or a number)"
            ))
        };
        let (name, arg) = match s.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (s, None),
        };
        let num = |a: Option<&str>| a.and_then(|a| a.parse::<u64>().ok()).ok_or_else(bad);
        Ok(match name {
            "eager" if arg.is_none() => ScheduleSpec::Eager,
            "lazy" if arg.is_none() => ScheduleSpec::Lazy,
            "lockstep" if arg.is_none() => ScheduleSpec::Lockstep,
            "run-ahead" => ScheduleSpec::RunAhead(num(arg)? as usize),
            "random" => ScheduleSpec::Random(num(arg)?),
            _ => match s.parse::<u64>() {
                Ok(seed) => ScheduleSpec::Random(seed),
                Err(_) => return Err(bad()),
            },
        })
    }

    /// Checks the spec against a mesh of `devices` devices: `run-ahead:D` needs a
    /// device D (D < P).
    pub fn validate(&self, devices: usize) -> Result<()> {
        match *self {
            ScheduleSpec::RunAhead(d) if d >= devices => Err(Error::bad_input(format!(
                "schedule `{self}` names device {d}, but the mesh has {devices} device{} (run-ahead:0 to run-ahead:{})",
                if devices == 1 { "" } else { "s" },
                devices.saturating_sub(1)
            ))),
            _ => Ok(()),
        }
    }

    /// A fresh policy for this spec.
    pub fn policy(&self) -> Box<dyn Policy> {
        match *self {
            ScheduleSpec::Eager => Box::new(Eager::default()),
            ScheduleSpec::Lazy => Box::new(Lazy::default()),
            ScheduleSpec::Lockstep => Box::new(Lockstep::default()),
            ScheduleSpec::RunAhead(d) => Box::new(RunAhead::new(d)),
            ScheduleSpec::Random(s) => Box::new(Random::new(s)),
        }
    }

    /// The schedules `tpusim check` runs for `devices` devices: every deterministic
    /// policy (run-ahead once per device), then seeded random ones from `seed`, `n` in all
    /// (never fewer than the deterministic ones).
    pub fn check_set(devices: usize, n: usize, seed: u64) -> Vec<ScheduleSpec> {
        let mut v = vec![
            ScheduleSpec::Eager,
            ScheduleSpec::Lazy,
            ScheduleSpec::Lockstep,
        ];
        v.extend((0..devices).map(ScheduleSpec::RunAhead));
        let mut s = seed;
        while v.len() < n {
            v.push(ScheduleSpec::Random(s));
            s = s.wrapping_add(1);
        }
        v
    }
}

impl fmt::Display for ScheduleSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScheduleSpec::Eager => write!(f, "eager"),
            ScheduleSpec::Lazy => write!(f, "lazy"),
            ScheduleSpec::Lockstep => write!(f, "lockstep"),
            ScheduleSpec::RunAhead(d) => write!(f, "run-ahead:{d}"),
            ScheduleSpec::Random(s) => write!(f, "random:{s}"),
        }
    }
}

/// Index of the first DMA choice, if any.
fn first_dma(choices: &[Choice]) -> Option<usize> {
    choices
        .iter()
        .position(|c| matches!(c, Choice::CompleteDma { .. }))
}

/// Round robin over devices: the first runnable device at or after `*next` (else the
/// lowest), advancing `*next` past it. `None` when no device is runnable.
fn round_robin(
    choices: &[Choice],
    next: &mut usize,
    allowed: impl Fn(&Choice) -> bool,
) -> Option<usize> {
    let devices = || {
        choices
            .iter()
            .enumerate()
            .filter(|(_, c)| matches!(c, Choice::Device { .. }) && allowed(c))
    };
    let pick = devices()
        .find(|(_, c)| matches!(c, Choice::Device { device, .. } if *device >= *next))
        .or_else(|| devices().next())
        .map(|(i, _)| i)?;
    if let Choice::Device { device, .. } = choices[pick] {
        *next = device + 1;
    }
    Some(pick)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_round_trip() {
        for s in ["eager", "lazy", "lockstep", "run-ahead:3", "random:42"] {
            assert_eq!(ScheduleSpec::parse(s).unwrap().to_string(), s);
        }
        assert_eq!(ScheduleSpec::parse("7").unwrap(), ScheduleSpec::Random(7));
        assert!(ScheduleSpec::parse("sometimes").is_err());
        assert!(ScheduleSpec::parse("run-ahead:x").is_err());
        assert!(ScheduleSpec::RunAhead(3).validate(4).is_ok());
        let e = ScheduleSpec::RunAhead(99)
            .validate(4)
            .unwrap_err()
            .to_string();
        assert!(e.contains("device 99") && e.contains("run-ahead:3"), "{e}");
        assert!(ScheduleSpec::Random(99).validate(1).is_ok());
        let set = ScheduleSpec::check_set(4, 10, 100);
        assert_eq!(set.len(), 10);
        assert_eq!(set[7], ScheduleSpec::Random(100));
    }
}

#[cfg(test)]
mod pick_tests {
    use super::*;

    fn dma(id: usize, awaited: bool) -> Choice {
        Choice::CompleteDma {
            id,
            issuer: 0,
            awaited,
        }
    }

    fn dev(device: usize, grid: usize) -> Choice {
        Choice::Device {
            device,
            grid,
            op: 0,
        }
    }

    #[test]
    fn each_policy_picks_what_it_promises() {
        let c = [dma(4, false), dma(9, true), dev(0, 3), dev(1, 2), dev(2, 2)];
        assert_eq!(
            Eager::default().pick(&c),
            0,
            "eager completes the oldest DMA"
        );
        assert!(
            matches!(c[Lazy::default().pick(&c)], Choice::Device { .. }),
            "lazy runs devices first"
        );
        let blocked = [dma(4, false), dma(9, true), dma(11, false)];
        assert_eq!(
            Lazy::default().pick(&blocked),
            1,
            "lazy completes the newest awaited DMA"
        );
        let d = [dev(0, 3), dev(1, 2), dev(2, 2)];
        assert_eq!(
            Lockstep::default().pick(&d),
            1,
            "lockstep runs the lowest grid point"
        );
        assert_eq!(RunAhead::new(2).pick(&c), 4, "run-ahead runs its leader");
        assert_eq!(
            RunAhead::new(3).pick(&c),
            1,
            "then the DMAs someone waits on"
        );
        let mut a = Random::new(5);
        let mut b = Random::new(5);
        let picks: Vec<usize> = (0..20).map(|_| a.pick(&c)).collect();
        assert_eq!(picks, (0..20).map(|_| b.pick(&c)).collect::<Vec<_>>());
        assert!(picks.iter().any(|&p| p != picks[0]), "random varies");
    }
}
