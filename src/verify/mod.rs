//! The verifier: runs a kernel under many schedules with the happens-before checker
//! and reports every distinct problem — races, deadlocks, semaphores not zero at exit,
//! DMAs never waited, reads of memory nothing wrote, and the trace-time mistakes (device
//! id out of range, out-of-bounds slices, peer reads in the TPU model) — each with a
//! schedule that reproduces it.

mod clock;
mod entry;
mod fixpoint;
mod hb;
mod log;
#[cfg(test)]
mod naive;
mod orders;
mod race;
mod reach;
mod serialize;
mod shadow;
mod side;
mod sync;
mod uninit;

pub use clock::Clock;
pub use entry::{EarlySend, StandIn};
pub use log::{Entry, Event, EventLog};
pub use race::{Race, SharedSemaphore};
use reach::Reach;
pub use side::RaceSide;
pub use uninit::{UninitRead, UnwrittenOutput};

use crate::error::{Blocked, Error, ExitProblem, KernelError, KernelErrorKind};
use crate::ir::Program;
use crate::sched::{observe, ScheduleSpec};
use std::fmt;

/// The kind of a problem, for tests and summaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProblemKind {
    /// Unordered conflicting accesses.
    Race,
    /// No device can make progress.
    Deadlock,
    /// A semaphore not zero at kernel exit.
    SemaphoreNotZero,
    /// A DMA nobody waited for.
    DmaNotWaited,
    /// A device id outside the mesh.
    DeviceIdOutOfRange,
    /// An index or slice out of bounds.
    OutOfBounds,
    /// A TPU-model kernel reading a peer's memory.
    PeerRead,
    /// A DMA or signal sent to a device not known to have entered the kernel.
    SendBeforeEntry,
    /// A read of memory nothing wrote before it (scratch, an output, a VMEM block).
    UninitializedRead,
    /// An output some of which no device wrote.
    UnwrittenOutput,
    /// Any other kernel mistake (shape mismatch, compute on HBM, misuse).
    Other,
}

impl fmt::Display for ProblemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProblemKind::Race => "race",
            ProblemKind::Deadlock => "deadlock",
            ProblemKind::SemaphoreNotZero => "semaphore not zero at exit",
            ProblemKind::DmaNotWaited => "DMA never waited",
            ProblemKind::DeviceIdOutOfRange => "device id out of range",
            ProblemKind::OutOfBounds => "out-of-bounds ref slice",
            ProblemKind::PeerRead => "peer read in the TPU model",
            ProblemKind::SendBeforeEntry => "sent before the receiver entered the kernel",
            ProblemKind::UninitializedRead => "read of uninitialized memory",
            ProblemKind::UnwrittenOutput => "output not written",
            ProblemKind::Other => "kernel error",
        })
    }
}

/// One problem found under one schedule.
#[derive(Clone, Debug)]
pub enum Problem {
    /// A race.
    Race(Race),
    /// A send to a device not known to have entered the kernel.
    Early(EarlySend),
    /// A read of memory nothing wrote before it.
    Uninit(UninitRead),
    /// An output some of which no device wrote.
    Unwritten(UnwrittenOutput),
    /// A deadlock, with every blocked device.
    Deadlock(Vec<Blocked>),
    /// A leftover at kernel exit.
    Exit(ExitProblem),
    /// A mistake found while tracing (the same under every schedule).
    Kernel(KernelError),
}

impl Problem {
    /// The problem's kind.
    pub fn kind(&self) -> ProblemKind {
        match self {
            Problem::Race(_) => ProblemKind::Race,
            Problem::Early(_) => ProblemKind::SendBeforeEntry,
            Problem::Uninit(_) => ProblemKind::UninitializedRead,
            Problem::Unwritten(_) => ProblemKind::UnwrittenOutput,
            Problem::Deadlock(_) => ProblemKind::Deadlock,
            Problem::Exit(ExitProblem::SemaphoreNotZero { .. }) => ProblemKind::SemaphoreNotZero,
            Problem::Exit(_) => ProblemKind::DmaNotWaited,
            Problem::Kernel(k) => match k.kind {
                KernelErrorKind::DeviceIdOutOfRange => ProblemKind::DeviceIdOutOfRange,
                KernelErrorKind::OutOfBounds => ProblemKind::OutOfBounds,
                KernelErrorKind::PeerRead => ProblemKind::PeerRead,
                _ => ProblemKind::Other,
            },
        }
    }

    /// What makes two problems the same bug (kernel lines, semaphore, allocation).
    pub fn key(&self) -> String {
        match self {
            Problem::Race(r) => r.key(),
            Problem::Early(e) => format!("entry:{}", e.sender.location),
            Problem::Uninit(u) => u.key(),
            Problem::Unwritten(u) => u.key(),
            Problem::Deadlock(b) => {
                let mut sites: Vec<String> = b
                    .iter()
                    .map(|b| {
                        let sem = Program::unlabeled(&b.semaphore);
                        format!("{}@{}:{sem}", b.site.op, b.site.location)
                    })
                    .collect();
                sites.sort();
                sites.dedup();
                format!("deadlock:{}", sites.join(","))
            }
            Problem::Exit(ExitProblem::SemaphoreNotZero { semaphore, .. }) => {
                format!("nonzero:{}", Program::unlabeled(semaphore))
            }
            Problem::Exit(ExitProblem::DmaNotWaited { site, .. }) => {
                format!("unwaited:{}", site.location)
            }
            Problem::Kernel(k) => format!("kernel:{:?}:{}", k.kind, k.site.location),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Race(r) => write!(f, "{r}"),
            Problem::Early(e) => write!(f, "{e}"),
            Problem::Uninit(u) => write!(f, "{u}"),
            Problem::Unwritten(u) => write!(f, "{u}"),
            Problem::Deadlock(b) => {
                write!(f, "{}", Error::Deadlock(b.clone()).to_string().trim_end())
            }
            Problem::Exit(e) => {
                write!(f, "{}", Error::Exit(vec![e.clone()]).to_string().trim_end())
            }
            Problem::Kernel(k) => write!(f, "{}", Error::Kernel(k.clone())),
        }
    }
}

/// Runs `program` once under `spec`, then checks that run: races and the entry rule
/// under the orders every schedule guarantees (`sync`), each held against the exact
/// search (`reach`), deadlocks and exit problems.
pub fn check_schedule(program: &Program, spec: ScheduleSpec) -> Vec<Problem> {
    check_schedule_with(program, spec, &mut Reach::new(program))
}

/// [`check_schedule`] with the exact search's answers so far (a check of many
/// schedules asks it the same questions).
fn check_schedule_with(program: &Program, spec: ScheduleSpec, reach: &mut Reach) -> Vec<Problem> {
    let mut log = EventLog::for_program(program);
    let mut policy = spec.policy();
    let result = observe(program, policy.as_mut(), &mut log);
    problems_of(program, &log, result, reach)
}

/// The problems of a run of `program` whose events are `log` and whose end was
/// `result` (`reach`: the exact search's answers so far).
fn problems_of(
    program: &Program,
    log: &EventLog,
    result: crate::Result<()>,
    reach: &mut Reach,
) -> Vec<Problem> {
    let found = fixpoint::check(program, &log.events, reach);
    let mut problems: Vec<Problem> = found.early.into_iter().map(Problem::Early).collect();
    problems.extend(found.races.into_iter().map(Problem::Race));
    problems.extend(found.uninit.into_iter().map(Problem::Uninit));
    match result {
        Ok(_) => problems.extend(found.unwritten.into_iter().map(Problem::Unwritten)),
        Err(Error::Deadlock(b)) => problems.push(Problem::Deadlock(b)),
        Err(Error::Exit(e)) => problems.extend(e.into_iter().map(Problem::Exit)),
        Err(Error::Kernel(k)) => problems.push(Problem::Kernel(k)),
        // Stopped part way (crate::interrupt): check_program ends there.
        Err(Error::Interrupted) => {}
        Err(other) => unreachable!("scheduling only fails with deadlock or exit problems: {other}"),
    }
    problems
}

/// A distinct problem, the first schedule that showed it, and how many schedules did.
#[derive(Clone, Debug)]
pub struct Finding {
    /// The first instance.
    pub problem: Problem,
    /// A schedule that reproduces it (`None`: found while tracing, under any schedule).
    pub schedule: Option<ScheduleSpec>,
    /// Number of schedules that showed it.
    pub schedules: usize,
}

/// The result of checking one kernel under many schedules.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Schedules run.
    pub schedules: usize,
    /// Distinct problems, in the order first found.
    pub findings: Vec<Finding>,
}

impl Report {
    /// True when nothing was found.
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }

    /// The report of a kernel whose trace found `errors` (they hold under every
    /// schedule, so no schedule runs).
    pub fn of_kernel_errors(errors: Vec<KernelError>) -> Self {
        Report {
            schedules: 0,
            findings: errors
                .into_iter()
                .map(|k| Finding {
                    problem: Problem::Kernel(k),
                    schedule: None,
                    schedules: 0,
                })
                .collect(),
        }
    }

    /// Kinds of the problems found.
    pub fn kinds(&self) -> Vec<ProblemKind> {
        self.findings.iter().map(|f| f.problem.kind()).collect()
    }
}

/// Checks a lowered program under each schedule in `specs` (on a terminal, with its
/// progress after a second). A caller watching for a request to stop
/// ([`crate::interrupt`]) gets what was checked before it came, and must ask.
pub fn check_program(program: &Program, specs: &[ScheduleSpec]) -> Report {
    let mut reach = Reach::new(program);
    report_of(specs, |spec| {
        Ok(check_schedule_with(program, spec, &mut reach))
    })
    .expect("no schedule fails")
}

/// Checks a kernel traced while it runs ([`crate::steer`]) under each schedule in
/// `specs`: each schedule traces the program its own reads lead to, and that run is
/// checked as [`check_schedule`] checks one. A mistake found while tracing is a finding
/// of the schedule that traced it.
pub fn check_steered(
    steering: &dyn crate::steer::Steering,
    mesh: &crate::Mesh,
    specs: &[ScheduleSpec],
) -> crate::Result<Report> {
    use crate::steer::{steer, Attempt};
    let one = |spec: ScheduleSpec| -> crate::Result<Vec<Problem>> {
        let traced = steer(steering, mesh, |p, resume| {
            let mut log = EventLog::for_program(p);
            let mut policy = spec.policy();
            let mut d = crate::sched::Split {
                policy: policy.as_mut(),
                observer: &mut log,
            };
            Ok(match crate::sched::run_steps(p, &mut d, resume) {
                Ok(steps) if steps.paused.is_some() => Attempt::Paused(steps),
                result => {
                    let result = result.map(|_| ());
                    Attempt::Done(problems_of(p, &log, result, &mut Reach::new(p)))
                }
            })
        });
        match traced {
            Ok((_, problems)) => Ok(problems),
            Err(Error::Kernel(k)) => Ok(vec![Problem::Kernel(k)]),
            Err(e) => Err(e),
        }
    };
    report_of(specs, one)
}

/// The report of `specs`, each schedule's problems from `problems`.
fn report_of(
    specs: &[ScheduleSpec],
    mut problems: impl FnMut(ScheduleSpec) -> crate::Result<Vec<Problem>>,
) -> crate::Result<Report> {
    let mut report = Report::default();
    let mut progress =
        crate::progress::Progress::new("checking schedules", Some(specs.len() as u64));
    for spec in specs {
        // A watched caller that asked to stop gets what was checked so far, and knows.
        if crate::interrupt::requested() {
            break;
        }
        progress.set(report.schedules as u64, None);
        report.schedules += 1;
        let mut seen = Vec::new();
        for p in problems(*spec)? {
            let key = p.key();
            if seen.contains(&key) {
                continue;
            }
            seen.push(key.clone());
            match report.findings.iter_mut().find(|f| f.problem.key() == key) {
                Some(f) => f.schedules += 1,
                None => report.findings.push(Finding {
                    problem: p,
                    schedule: Some(*spec),
                    schedules: 1,
                }),
            }
        }
    }
    Ok(report)
}
