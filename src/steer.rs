//! Run while tracing: a kernel that decides what it does by values it computes itself
//! (an SMEM element a DMA wrote, a reduced vector, a semaphore's value) is traced until
//! a device needs such a value; what is traced so far is scheduled, its data ops run on
//! the CPU executor (the oracle) on the call's inputs, the value is read where the read
//! stands in that schedule, and tracing goes on. One mechanism for every step of the
//! pipeline: each runs its own driver (a policy, the verifier's log, the cost model's
//! clock, the step tables' symbolic executor) over the program traced so far, taking
//! the steps of its run before again as they were ([`Resume::forced`]), so the
//! schedule, and the program each schedule traces, are the ones it would have met had
//! the whole program been known at the start. A kernel whose reads race may trace a
//! different program under each schedule: the verifier checks each schedule's own.

use crate::array::HostArray;
use crate::device_sim::cpu::CpuExecutor;
use crate::device_sim::Executor;
use crate::error::{Error, KernelError, Result};
use crate::ir::{Allocation, OpKind, Program, Schedule, View};
use crate::mesh::Mesh;
use crate::sched::{Choice, Resume, Steps};
use std::collections::HashMap;
use std::sync::Arc;

/// A kernel as traced so far.
pub struct Traced {
    /// Every device's ops so far (an open device's last op is the read it waits at).
    pub program: Program,
    /// The kernel mistakes its trace found.
    pub errors: Vec<KernelError>,
    /// Per device: its trace goes on (after the read its program ends with).
    pub open: Vec<bool>,
}

/// One trace of a kernel while it runs (one per schedule).
pub trait Tracer {
    /// The kernel as traced so far, on `mesh`.
    fn traced(&mut self, mesh: &Mesh) -> Result<Traced>;
    /// The read device `device`'s program ends with found `words` (the elements of its
    /// `fetch` view, one 32-bit word each, [`crate::DType::bits_of`]'s form): trace on.
    fn answer(&mut self, device: usize, words: Vec<u32>) -> Result<()>;
}

/// A kernel that is traced while it runs: its tracers, and the data it steers by.
pub trait Steering: Send + Sync {
    /// The kernel's name.
    fn name(&self) -> String;
    /// A fresh trace, from the kernel's first op on every device.
    fn tracer(&self) -> Result<Box<dyn Tracer + '_>>;
    /// The call's inputs, `inputs[device][operand]`.
    fn inputs(&self) -> Result<Arc<Vec<Vec<HostArray>>>>;
}

/// What one run over the program traced so far came to.
pub enum Attempt<R> {
    /// It stopped after a device's read ([`Steps::paused`]).
    Paused(Steps),
    /// It ran to its end (or failed): its result.
    Done(R),
}

/// Traces `steering`'s kernel on `mesh` while it runs: `attempt` runs over the program
/// traced so far from the steps of the run before ([`Resume`]; it must keep its steps,
/// `resume.log`), until it runs to its end. The program and the last attempt's result.
/// A kernel mistake found while tracing is the error.
pub fn steer<R>(
    steering: &dyn Steering,
    mesh: &Mesh,
    attempt: impl FnMut(&Program, &Resume) -> Result<Attempt<R>>,
) -> Result<(Program, R)> {
    steer_stops(steering, mesh, attempt).map(|(p, r, _)| (p, r))
}

/// A read a run while tracing made: what its schedule's first `at` data ops left in
/// `fetch` (a view of the final program's memory, [`crate::ir::Schedule::memory`]) was
/// `words`. A plan traced this way is the plan of another call too when each of its
/// reads finds the same there ([`Stop::holds`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stop {
    /// Data ops of the schedule before the read.
    pub at: usize,
    /// What the read gave back to tracing.
    pub fetch: View,
    /// Its words ([`crate::DType::bits_of`]'s form).
    pub words: Vec<u32>,
}

impl Stop {
    /// True when `run`, prepared in pieces cut at the stops' `at` and run up to this
    /// stop, reads what tracing read here.
    pub fn holds(&self, run: &mut dyn crate::device_sim::Prepared) -> Result<bool> {
        Ok(words_of(&run.read_view(self.fetch, 4)?) == self.words)
    }
}

/// [`steer`], and the reads it stopped at, in the final schedule's terms.
pub fn steer_stops<R>(
    steering: &dyn Steering,
    mesh: &Mesh,
    mut attempt: impl FnMut(&Program, &Resume) -> Result<Attempt<R>>,
) -> Result<(Program, R, Vec<Stop>)> {
    let inputs = steering.inputs()?;
    let mut tracer = steering.tracer()?;
    let mut oracle = Oracle::default();
    let mut forced: Vec<Choice> = Vec::new();
    let mut traced = tracer.traced(mesh)?;
    // (data ops before the read, device, allocation, offset, length, words) per stop.
    let mut stops: Vec<(usize, usize, Key, usize, usize, Vec<u32>)> = Vec::new();
    loop {
        if !traced.errors.is_empty() {
            return Err(Error::Kernel(traced.errors.swap_remove(0)));
        }
        let resume = Resume {
            forced: &forced,
            open: &traced.open,
            log: true,
        };
        let program = &traced.program;
        match attempt(program, &resume)? {
            Attempt::Done(r) => {
                let program = traced.program;
                let names: Vec<&str> = program
                    .layout
                    .allocs
                    .iter()
                    .map(|a| a.name.as_str())
                    .collect();
                let stops = stops
                    .into_iter()
                    .filter_map(|(at, d, key, offset, len, words)| {
                        let alloc = key.resolve(&names)?;
                        Some(Stop {
                            at,
                            fetch: View::new(d, alloc, offset, len),
                            words,
                        })
                    })
                    .collect();
                return Ok((program, r, stops));
            }
            Attempt::Paused(steps) => {
                let first = steps
                    .paused
                    .expect("a paused run names the device it stopped at");
                let memory = steps.schedule.memory(program);
                let staging = (steps.schedule.staging > 0).then_some(program.layout.allocs.len());
                let devices: Vec<usize> = std::iter::once(first)
                    .chain(steps.reading.iter().copied())
                    .collect();
                let fetches: Vec<View> = devices
                    .iter()
                    .map(|&d| match program.ops[d].last().map(|o| &o.kind) {
                        Some(OpKind::Read { fetch, .. }) => *fetch,
                        _ => unreachable!("an open device's program ends with a read"),
                    })
                    .collect();
                let found = oracle.read_at(program, &steps.schedule, &inputs, &fetches)?;
                for ((device, fetch), words) in devices.into_iter().zip(fetches).zip(found) {
                    let key = Oracle::key(fetch.alloc(), &memory.allocs[fetch.alloc()], staging);
                    stops.push((
                        steps.schedule.ops.len(),
                        fetch.device(),
                        key,
                        fetch.offset(),
                        fetch.len(),
                        words.clone(),
                    ));
                    tracer.answer(device, words)?;
                }
                // DMAs are numbered device by device: a device's trace that grew moves
                // the ids of the devices after it. The steps name them by device and order.
                let keys: Vec<DmaKey> = steps
                    .choices
                    .iter()
                    .map(|c| DmaKey::of_choice(program, *c))
                    .collect();
                traced = tracer.traced(mesh)?;
                forced = keys
                    .into_iter()
                    .map(|k| k.choice(&traced.program))
                    .collect();
            }
        }
    }
}

/// A step taken, its DMA named by its device and order there (ids move as tracing adds
/// DMAs to the devices before it).
#[derive(Clone, Copy, Debug)]
enum DmaKey {
    /// Any step but a DMA's completion.
    Other(Choice),
    /// A completion of the `n`-th DMA device `device` started.
    Dma {
        device: usize,
        n: usize,
        choice: Choice,
    },
}

impl DmaKey {
    fn of_choice(p: &Program, c: Choice) -> Self {
        match c {
            Choice::CompleteDma { id, .. } => {
                let device = p.dmas[id].origin.device as usize;
                let first = p
                    .dmas
                    .partition_point(|d| (d.origin.device as usize) < device);
                DmaKey::Dma {
                    device,
                    n: id - first,
                    choice: c,
                }
            }
            other => DmaKey::Other(other),
        }
    }

    fn choice(self, p: &Program) -> Choice {
        match self {
            DmaKey::Other(c) => c,
            DmaKey::Dma { device, n, choice } => {
                let first = p
                    .dmas
                    .partition_point(|d| (d.origin.device as usize) < device);
                match choice {
                    Choice::CompleteDma {
                        side,
                        issuer,
                        awaited,
                        ..
                    } => Choice::CompleteDma {
                        id: first + n,
                        side,
                        issuer,
                        awaited,
                    },
                    other => other,
                }
            }
        }
    }
}

/// The data of a kernel traced while it runs, on the CPU executor: what the steps so far
/// left in every allocation, carried from one stop to the next (each stop runs only the
/// data ops past the last one's: a stop's steps begin with those of the stop before).
#[derive(Default)]
struct Oracle {
    /// Per device and allocation ([`Oracle::key`]), its words.
    memory: HashMap<(usize, Key), Vec<u32>>,
    /// Data ops run so far.
    ran: usize,
}

/// An allocation across stops: the kernel's own by position (tracing only adds to them),
/// values and the staging area by name (their positions move when it does).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Kernel(usize),
    Named(String),
}

impl Key {
    /// The allocation of `names` (a program's) this one is.
    fn resolve(&self, names: &[&str]) -> Option<usize> {
        match self {
            Key::Kernel(i) => Some(*i),
            Key::Named(n) => names.iter().position(|x| x == n),
        }
    }
}

impl Oracle {
    fn key(i: usize, a: &Allocation, staging: Option<usize>) -> Key {
        if a.holds_values() || Some(i) == staging {
            Key::Named(a.name.clone())
        } else {
            Key::Kernel(i)
        }
    }

    /// The elements of each of `views` once `schedule` (the steps so far) ran on
    /// `inputs`, as words.
    fn read_at(
        &mut self,
        program: &Program,
        schedule: &Schedule,
        inputs: &[Vec<HostArray>],
        views: &[View],
    ) -> Result<Vec<Vec<u32>>> {
        let cpu = CpuExecutor::new();
        let from = self.ran.min(schedule.ops.len());
        let cuts: Vec<usize> = (from > 0 && from < schedule.ops.len())
            .then_some(from)
            .into_iter()
            .collect();
        let mut run = cpu.prepare_pieces(program, schedule, &cuts)?;
        let memory = schedule.memory(program);
        let staging = (schedule.staging > 0).then_some(program.layout.allocs.len());
        let every = || {
            (0..program.devices).flat_map(|d| {
                memory
                    .allocs
                    .iter()
                    .enumerate()
                    .map(move |(k, a)| (d, k, a))
            })
        };
        if from == 0 {
            run.upload(inputs)?;
        } else {
            for (d, k, a) in every() {
                if let Some(words) = self.memory.get(&(d, Self::key(k, a, staging))) {
                    let n = words.len().min(a.numel());
                    let view = View::new(d, k, 0, n);
                    run.write_view(view, 4, bytemuck::cast_slice(&words[..n]))?;
                }
            }
        }
        if from < schedule.ops.len() {
            run.run_piece(cuts.len())?;
        }
        self.ran = schedule.ops.len();
        for (d, k, a) in every() {
            let bytes = run.read_view(View::new(d, k, 0, a.numel()), 4)?;
            self.memory
                .insert((d, Self::key(k, a, staging)), words_of(&bytes));
        }
        views
            .iter()
            .map(|&v| Ok(words_of(&run.read_view(v, 4)?)))
            .collect()
    }
}

/// Little-endian bytes as 32-bit words.
fn words_of(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}
