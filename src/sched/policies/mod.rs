//! Scheduling policies: given what can happen next, pick one. Each policy is a file;
//! [`ScheduleSpec`] names one (`eager`, `lazy`, `lockstep`, `run-ahead:D`, `random:SEED`).

mod eager;
mod lazy;
mod lockstep;
mod random;
mod ready;
mod run_ahead;

pub use eager::Eager;
pub use lazy::Lazy;
pub use lockstep::Lockstep;
pub use random::Random;
pub use ready::{RankedSet, ReadySet};
pub use run_ahead::RunAhead;

use crate::error::{Error, Result};
use crate::ir::Completion;
#[cfg(test)]
use std::collections::BTreeSet;
use std::fmt;

/// One thing the scheduler can do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Run the next step of `device`: its entry into the kernel, or its next op, which
    /// belongs to grid point `grid` (row-major).
    Device {
        /// Device.
        device: usize,
        /// Grid point of its next op.
        grid: usize,
        /// Index of that op in the device's program.
        op: usize,
        /// The step is the device's entry into the kernel (its op comes after).
        enter: bool,
    },
    /// Let completion `side` of the in-flight DMA `id` (started by `issuer`) happen.
    CompleteDma {
        /// DMA id.
        id: usize,
        /// Which completion: a remote DMA's send and receive completions are separate
        /// choices, in either order.
        side: Completion,
        /// Device that started it.
        issuer: usize,
        /// True when some device's next op waits on the semaphore this completion credits.
        awaited: bool,
    },
}

/// The pending DMA completions, in start order (a remote DMA's receive completion
/// before its send completion), as [`Choices`] needs them: counted and looked up, not
/// listed, so that a step costs O(log n) however many DMAs are in flight.
pub trait Completions {
    /// Number of pending completions.
    fn len(&self) -> usize;
    /// True when none is pending.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The `i`-th pending completion (from 0).
    fn nth(&self, i: usize) -> Option<Choice>;
    /// Number of pending completions some device's next op waits on.
    fn awaited_len(&self) -> usize;
    /// The `i`-th of those (from 0), in start order.
    fn nth_awaited(&self, i: usize) -> Option<Choice>;
    /// Completion `side` of DMA `id`, if pending.
    fn find(&self, id: usize, side: Completion) -> Option<Choice>;
}

/// A list of completions is a set of them (for hand-made choices).
impl Completions for &[Choice] {
    fn len(&self) -> usize {
        <[Choice]>::len(self)
    }
    fn nth(&self, i: usize) -> Option<Choice> {
        self.get(i).copied()
    }
    fn awaited_len(&self) -> usize {
        self.iter().filter(|c| is_awaited(c)).count()
    }
    fn nth_awaited(&self, i: usize) -> Option<Choice> {
        self.iter().copied().filter(is_awaited).nth(i)
    }
    fn find(&self, id: usize, side: Completion) -> Option<Choice> {
        self.iter().copied().find(
            |x| matches!(*x, Choice::CompleteDma { id: i, side: s, .. } if i == id && s == side),
        )
    }
}

fn is_awaited(c: &Choice) -> bool {
    matches!(c, Choice::CompleteDma { awaited: true, .. })
}

/// What can happen next, as a policy sees it: the pending DMA completions and the
/// runnable devices (many of each at large P: looked up, not listed, so that a step
/// costs O(log P) for the policies that do not need them all).
pub struct Choices<'a> {
    dmas: &'a dyn Completions,
    ready: &'a dyn ReadySet,
    device: &'a dyn Fn(usize) -> Choice,
    /// Steps taken before this one.
    step: usize,
    /// The devices whose step may have changed since the step before (`None`: any).
    changed: Option<&'a [usize]>,
}

impl<'a> Choices<'a> {
    /// `dmas`, and the devices in `ready` described by `device`; any device may have
    /// changed since a step before.
    pub fn new(
        dmas: &'a dyn Completions,
        ready: &'a dyn ReadySet,
        device: &'a dyn Fn(usize) -> Choice,
    ) -> Self {
        Self {
            dmas,
            ready,
            device,
            step: 0,
            changed: None,
        }
    }

    /// These choices are those of step `step`, and only the devices in `changed` were
    /// re-examined after step `step - 1` (what a policy that keeps its own order of
    /// the devices needs to update it).
    pub fn at_step(mut self, step: usize, changed: &'a [usize]) -> Self {
        self.step = step;
        self.changed = (step > 0).then_some(changed);
        self
    }

    /// Steps taken before this one.
    pub fn step(&self) -> usize {
        self.step
    }

    /// The devices whose step may differ from the choices of step `step() - 1`, when
    /// known (`None`: any device may have changed).
    pub fn changed(&self) -> Option<&[usize]> {
        self.changed
    }

    /// Number of choices.
    pub fn len(&self) -> usize {
        self.dmas.len() + self.ready.len()
    }

    /// True when nothing can happen.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runnable devices, in id order.
    pub fn devices(&self) -> impl Iterator<Item = Choice> + '_ {
        self.ready.members().map(|d| (self.device)(d))
    }

    /// Pending DMA completions, in start order.
    pub fn dmas(&self) -> impl Iterator<Item = Choice> + '_ {
        (0..self.dmas.len()).filter_map(|i| self.dmas.nth(i))
    }

    /// Every choice: the DMA completions, then the devices.
    pub fn iter(&self) -> impl Iterator<Item = Choice> + '_ {
        self.dmas().chain(self.devices())
    }

    /// Choice `i` of [`Choices::iter`].
    pub fn get(&self, i: usize) -> Option<Choice> {
        let n = self.dmas.len();
        if i < n {
            self.dmas.nth(i)
        } else {
            self.ready.nth(i - n).map(|d| (self.device)(d))
        }
    }

    /// Device `d`, if it can run.
    pub fn device(&self, d: usize) -> Option<Choice> {
        self.ready.contains(d).then(|| (self.device)(d))
    }

    /// Device `d`'s next step as a choice, whether it can run or not.
    pub fn describe(&self, d: usize) -> Choice {
        (self.device)(d)
    }

    /// Round robin: the first runnable device at or after `d`, else the lowest.
    pub fn device_from(&self, d: usize) -> Option<Choice> {
        self.ready
            .first_from(d)
            .or_else(|| self.ready.first_from(0))
            .map(|d| (self.device)(d))
    }

    /// The first (oldest) pending DMA completion, if any.
    pub fn first_dma(&self) -> Option<Choice> {
        self.dmas.nth(0)
    }

    /// The newest pending DMA completion, if any.
    pub fn last_dma(&self) -> Option<Choice> {
        self.dmas
            .len()
            .checked_sub(1)
            .and_then(|i| self.dmas.nth(i))
    }

    /// The oldest pending DMA completion some device's next op waits on.
    pub fn first_awaited_dma(&self) -> Option<Choice> {
        self.dmas.nth_awaited(0)
    }

    /// The newest pending DMA completion some device's next op waits on.
    pub fn last_awaited_dma(&self) -> Option<Choice> {
        let n = self.dmas.awaited_len();
        n.checked_sub(1).and_then(|i| self.dmas.nth_awaited(i))
    }

    /// True when `c` is one of the choices.
    pub fn contains(&self, c: &Choice) -> bool {
        match *c {
            Choice::Device { device, .. } => self.ready.contains(device),
            Choice::CompleteDma { id, side, .. } => self.dmas.find(id, side) == Some(*c),
        }
    }

    /// The choice that takes the same step as `c` (the same device, or the same
    /// completion of the same DMA) as it stands now (whether a device waits on a
    /// completion may have changed since `c` was taken), if it can happen.
    pub fn same_step(&self, c: &Choice) -> Option<Choice> {
        match *c {
            Choice::Device { device, .. } => self.device(device),
            Choice::CompleteDma { id, side, .. } => self.dmas.find(id, side),
        }
    }
}

/// Picks the next step among the choices (never empty).
pub trait Policy {
    /// The policy's name; for the built-in ones, the [`ScheduleSpec`] that recreates it.
    fn name(&self) -> String;
    /// The step to take: one of `choices`.
    fn pick(&mut self, choices: &Choices) -> Choice;
    /// Step `c`, one of `choices`, is taken without asking (a run replaying the steps
    /// of one before it, [`crate::sched::Steps`]): a policy whose picks keep state of
    /// their own (the cost model's clock) does what picking it would have done.
    fn forced(&mut self, _choices: &Choices, _c: Choice) {}
}

/// A named, replayable schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScheduleSpec {
    /// DMAs complete as soon as they start; devices take turns.
    Eager,
    /// DMA completions happen only when someone waits on them, newest first.
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

/// Round robin over every runnable device, in O(log P).
fn next_device(choices: &Choices, next: &mut usize) -> Option<Choice> {
    let pick = choices.device_from(*next)?;
    if let Choice::Device { device, .. } = pick {
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
            side: Completion::Local,
            issuer: 0,
            awaited,
        }
    }

    fn dev(device: usize, grid: usize) -> Choice {
        Choice::Device {
            device,
            grid,
            op: 0,
            enter: false,
        }
    }

    /// Runs `f` on the choices `dmas` plus the devices of `devs` (device, grid).
    fn with<R>(dmas: &[Choice], devs: &[(usize, usize)], f: impl FnOnce(&Choices) -> R) -> R {
        let ready: BTreeSet<usize> = devs.iter().map(|d| d.0).collect();
        let grid = |d: usize| devs.iter().find(|x| x.0 == d).map_or(0, |x| x.1);
        let describe = |d: usize| dev(d, grid(d));
        f(&Choices::new(&dmas, &ready, &describe))
    }

    #[test]
    fn each_policy_picks_what_it_promises() {
        let dmas = [dma(4, false), dma(9, true)];
        let devs = [(0, 3), (1, 2), (2, 2)];
        with(&dmas, &devs, |c| {
            assert_eq!(
                Eager::default().pick(c),
                dma(4, false),
                "eager completes the oldest DMA"
            );
            assert!(
                matches!(Lazy::default().pick(c), Choice::Device { .. }),
                "lazy runs devices first"
            );
            assert_eq!(
                RunAhead::new(2).pick(c),
                dev(2, 2),
                "run-ahead runs its leader"
            );
            assert_eq!(
                RunAhead::new(3).pick(c),
                dma(9, true),
                "then the DMAs someone waits on"
            );
            let mut a = Random::new(5);
            let mut b = Random::new(5);
            let picks: Vec<Choice> = (0..20).map(|_| a.pick(c)).collect();
            assert_eq!(picks, (0..20).map(|_| b.pick(c)).collect::<Vec<_>>());
            assert!(picks.iter().any(|p| *p != picks[0]), "random varies");
            assert!(picks.iter().all(|p| c.contains(p)));
        });
        with(&[dma(4, false), dma(9, true), dma(11, false)], &[], |c| {
            assert_eq!(
                Lazy::default().pick(c),
                dma(9, true),
                "lazy completes the newest awaited DMA"
            );
        });
        with(&[], &devs, |c| {
            assert_eq!(
                Lockstep::default().pick(c),
                dev(1, 2),
                "lockstep runs the lowest grid point"
            );
            let mut e = Eager::default();
            let order: Vec<Choice> = (0..4).map(|_| e.pick(c)).collect();
            assert_eq!(
                order,
                vec![dev(0, 3), dev(1, 2), dev(2, 2), dev(0, 3)],
                "eager takes turns"
            );
        });
    }
}
