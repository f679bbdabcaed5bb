//! The one pipeline: from a kernel (a collective of a registry, one of its broken
//! variants, or a kernel of the user's own) and where it runs (a [`Placement`]) to a
//! budget check, a schedule, an execution checked against the reference, a modeled run
//! with nccl-tests' figures, a verification and a step table. The command line, the
//! Python package, `bench`, the examples and the tests all go through a [`Job`]; none of
//! them assembles these steps itself, so every entry point refuses work that cannot fit
//! the same way and reports the same numbers.
//!
//! ```
//! use tpusim::collectives::Registry;
//! use tpusim::device_sim::cpu::CpuExecutor;
//! use tpusim::mesh::Placement;
//! use tpusim::run::Job;
//! use tpusim::Mesh;
//!
//! let psum = Registry::builtin().by_name("psum").unwrap();
//! let job = Job::collective(psum, Placement::whole(Mesh::new(4, "x").unwrap()));
//! let checked = job.run(&mut CpuExecutor::new(), 0).unwrap();
//! assert_eq!(checked.wrong, 0);
//! ```

mod data;
mod execute;
mod model;
mod shard;

pub use data::{fill_words, random_inputs_of};
pub use execute::{random_inputs, Checked, HeldData, Plan};
pub use model::{Modeled, Nccl};

use crate::array::DType;
use crate::budget::{
    ensure_fits, ranks_needed, Available, Buffers, Census, Need, Request, Share, Work,
};
use crate::collectives::variants::Variant;
use crate::collectives::{Collective, Options, Registry};
use crate::device_sim::Executor;
use crate::error::{Error, Result};
use crate::ir::{Feed, Program, Uninit};
use crate::kernel::PallasCall;
use crate::mesh::{Mesh, Placement};
use crate::model::Traffic;
use crate::sched::{run_steps, schedule, NoObserver, ScheduleSpec, Split};
use crate::steer::{self, Attempt, Steering};
use crate::trace::{derived_layout, TraceLayout};
use crate::verify::{self, Report};
use std::sync::Arc;

/// The most work [`Job::vet`] takes on (ops over every device, times the devices: what
/// the verifier's vector clocks cost): a tenth of a second or so, about what planning
/// the run costs (psum at P = 64 is 2.6 million).
const VET_WORK: usize = 4_000_000;

/// What a job runs.
#[derive(Clone)]
pub enum Kernel {
    /// A collective (its options applied): built for any mesh and shape, with its
    /// reference, traffic class and step-table layout.
    Collective(Arc<dyn Collective>),
    /// A deliberately broken variant of a collective: its kernel, the collective's
    /// reference and sizes.
    Variant(Arc<dyn Collective>, Variant),
    /// A kernel built for one mesh (a user's `PallasCall`, a kernel recorded in Python):
    /// no reference; an optional step-table layout.
    Call {
        /// The kernel.
        call: PallasCall,
        /// Step-table columns (`None`: derived from its allocations).
        layout: Option<TraceLayout>,
    },
    /// A kernel traced while it runs ([`steer`]): no program before a schedule.
    Steered {
        /// Its tracers and the data it steers by.
        steering: Arc<dyn Steering>,
        /// Step-table columns (`None`: derived from its allocations).
        layout: Option<TraceLayout>,
    },
}

/// One invocation of a job: its kernel, one device's shard shape and the dtype.
#[derive(Clone)]
struct Part {
    kernel: Kernel,
    shape: Vec<usize>,
    dtype: DType,
}

/// One kernel placed on a mesh, with its shard shape, dtype and schedule: everything a
/// pipeline step needs. A job may be a sequence of kernel invocations run back to back
/// on every device ([`Job::then`], [`Job::repeat`]): one program, whose invocations
/// share the barrier semaphore of their `collective_id` (see [`crate::ir::sequence()`]).
#[derive(Clone)]
pub struct Job {
    /// The invocations, in order (at least one).
    parts: Vec<Part>,
    /// How many times the invocations run, in order, back to back.
    repeat: usize,
    place: Placement,
    schedule: ScheduleSpec,
    /// One process, or the ranks of a partitioned run (for the budget).
    share: Share,
    /// What memory nothing wrote reads as in a run.
    uninit: Uninit,
}

impl Job {
    /// Collective `c` where `place` puts it, at its default shape for the devices one
    /// instance spans, in f32, under the default schedule.
    pub fn collective(c: Arc<dyn Collective>, place: Placement) -> Self {
        let shape = c.default_shape(place.devices());
        Self {
            parts: vec![Part {
                kernel: Kernel::Collective(c),
                shape,
                dtype: DType::F32,
            }],
            repeat: 1,
            place,
            schedule: ScheduleSpec::Eager,
            share: Share::default(),
            uninit: Uninit::default(),
        }
    }

    /// The broken variant `v` of collective `c`, as [`Job::collective`].
    pub fn variant(c: Arc<dyn Collective>, v: Variant, place: Placement) -> Self {
        let mut job = Self::collective(c.clone(), place);
        job.parts[0].kernel = Kernel::Variant(c, v);
        job
    }

    /// Collective `name` of `registry` with `opts`, or its broken `variant` (which takes
    /// no options), where `place` puts it.
    pub fn named(
        registry: &Registry,
        name: &str,
        opts: &Options,
        variant: Option<&str>,
        place: Placement,
    ) -> Result<Self> {
        let c = registry.get(name, opts)?;
        match variant {
            None => Ok(Self::collective(c, place)),
            Some(_) if *opts != Options::default() => Err(Error::bad_input(
                "--variant runs the broken kernel as shipped (a sum, the seed's permutation): it takes no --op or --perm",
            )),
            Some(_) if place.groups.is_some() => Err(Error::bad_input(
                "--variant runs the broken kernel on the whole mesh (-p, or --mesh for a whole-mesh collective); it does not run along an --axis",
            )),
            Some(v) => Ok(Self::variant(
                c,
                crate::collectives::variants::variant(name, v)?,
                place,
            )),
        }
    }

    /// A kernel built for `mesh`, at its first input's shape and dtype.
    pub fn call(call: PallasCall, mesh: Mesh) -> Self {
        let (shape, dtype) = call
            .spec()
            .inputs()
            .first()
            .map_or((vec![1], DType::F32), |o| (o.shape.clone(), o.dtype));
        Self {
            parts: vec![Part {
                kernel: Kernel::Call { call, layout: None },
                shape,
                dtype,
            }],
            repeat: 1,
            place: Placement::whole(mesh),
            schedule: ScheduleSpec::Eager,
            share: Share::default(),
            uninit: Uninit::default(),
        }
    }

    /// A kernel traced while it runs on `mesh` ([`steer`]), at shard `shape` and `dtype`
    /// (its first input's). It runs alone: not repeated, not in a sequence.
    pub fn steered(steering: Arc<dyn Steering>, mesh: Mesh, shape: &[usize], dtype: DType) -> Self {
        Self {
            parts: vec![Part {
                kernel: Kernel::Steered {
                    steering,
                    layout: None,
                },
                shape: shape.to_vec(),
                dtype,
            }],
            repeat: 1,
            place: Placement::whole(mesh),
            schedule: ScheduleSpec::Eager,
            share: Share::default(),
            uninit: Uninit::default(),
        }
    }

    /// The steering of a job that runs one kernel traced while it runs; refused in a
    /// sequence or repeated.
    fn steering(&self) -> Result<Option<&Arc<dyn Steering>>> {
        let steered = self.parts.iter().find_map(|p| match &p.kernel {
            Kernel::Steered { steering, .. } => Some(steering),
            _ => None,
        });
        match steered {
            Some(s) if self.invocations() > 1 => Err(Error::bad_input(format!(
                "`{}` is traced while it runs: it runs alone, not repeated or in a sequence",
                s.name()
            ))),
            other => Ok(other),
        }
    }

    /// This job run `k` times back to back on every device (`--repeat K`): invocation
    /// i + 1 starts on a device when the device leaves invocation i, its inputs the
    /// buffers invocation i leaves ([`crate::ir::feed`]). `k` must be at least 1; what it
    /// costs is refused by the budget before anything is built.
    pub fn repeat(mut self, k: usize) -> Result<Self> {
        if k == 0 {
            return Err(Error::bad_input(
                "--repeat must be at least 1: the number of kernel invocations back to back (got 0)",
            ));
        }
        self.repeat = self
            .repeat
            .checked_mul(k)
            .filter(|r| r.checked_mul(self.parts.len()).is_some())
            .ok_or_else(|| {
                Error::bad_input(format!("--repeat {k} is beyond what can be counted"))
            })?;
        Ok(self)
    }

    /// This job, then `next` on the same devices: a sequence of kernel invocations, as
    /// a program that makes several `pallas_call`s runs them (each device enters `next`'s
    /// first invocation when it leaves this job's last).
    pub fn then(mut self, next: Job) -> Result<Self> {
        if next.place.mesh.size() != self.place.mesh.size()
            || next.place.mesh.axes() != self.place.mesh.axes()
        {
            return Err(Error::bad_input(format!(
                "`{}` and `{}` run on different meshes: a sequence runs on one",
                self.name(),
                next.name()
            )));
        }
        if self.repeat > 1 || next.repeat > 1 {
            return Err(Error::bad_input(
                "repeat a sequence once it is whole: `then` takes jobs that run once",
            ));
        }
        self.parts.extend(next.parts);
        Ok(self)
    }

    /// The kernel invocations the job runs.
    pub fn invocations(&self) -> usize {
        self.parts.len() * self.repeat
    }

    /// This job (every invocation) with one device's shard of `shape`.
    pub fn with_shape(mut self, shape: &[usize]) -> Self {
        for p in &mut self.parts {
            p.shape = shape.to_vec();
        }
        self
    }

    /// This job (every invocation) in `dtype`.
    pub fn with_dtype(mut self, dtype: DType) -> Self {
        for p in &mut self.parts {
            p.dtype = dtype;
        }
        self
    }

    /// This job under schedule `spec`.
    pub fn with_schedule(mut self, spec: ScheduleSpec) -> Self {
        self.schedule = spec;
        self
    }

    /// This job with memory nothing wrote reading as `uninit` says in its runs.
    pub fn with_uninit(mut self, uninit: Uninit) -> Self {
        self.uninit = uninit;
        self
    }

    /// This job run by the ranks of a partitioned run ([`crate::device_sim::ranks`]): the
    /// budget counts one rank's share.
    pub fn on_ranks(mut self, share: Share) -> Self {
        self.share = share;
        self
    }

    /// How the job's work is shared (one process, or ranks).
    pub fn share(&self) -> Share {
        self.share
    }

    /// A kernel job with these step-table columns (collectives have their own).
    pub fn with_layout(mut self, layout: Option<TraceLayout>) -> Self {
        if let Kernel::Call { layout: l, .. } | Kernel::Steered { layout: l, .. } =
            &mut self.parts[0].kernel
        {
            *l = layout;
        }
        self
    }

    /// What runs (the first invocation's kernel, in a sequence).
    pub fn kernel(&self) -> &Kernel {
        &self.parts[0].kernel
    }

    /// Where it runs.
    pub fn place(&self) -> &Placement {
        &self.place
    }

    /// One device's shard shape (the first invocation's).
    pub fn shape(&self) -> &[usize] {
        &self.parts[0].shape
    }

    /// The element type (the first invocation's).
    pub fn dtype(&self) -> DType {
        self.parts[0].dtype
    }

    /// The schedule.
    pub fn schedule(&self) -> ScheduleSpec {
        self.schedule
    }

    /// The collective, when the job runs one (or a variant of one); the first
    /// invocation's, in a sequence.
    pub fn collective_of(&self) -> Option<&Arc<dyn Collective>> {
        self.parts[0].collective()
    }

    /// The collective the job's last invocation runs (what its results are).
    pub fn last_collective(&self) -> Option<&Arc<dyn Collective>> {
        self.parts.last().and_then(Part::collective)
    }

    /// The kernel's name as reports print it: `psum`, `psum --variant no-capacity-sem`,
    /// `all_gather then psum`, `psum --repeat 2`.
    pub fn name(&self) -> String {
        let names: Vec<String> = self.parts.iter().map(Part::name).collect();
        let mut name = names.join(" then ");
        if self.repeat > 1 {
            if self.parts.len() > 1 {
                name = format!("({name})");
            }
            name += &format!(" --repeat {}", self.repeat);
        }
        name
    }

    /// The kernel one instance runs (built for [`Placement::ring`]; the first
    /// invocation's, in a sequence).
    pub fn pallas_call(&self) -> Result<PallasCall> {
        self.parts[0].build(&self.place.ring, &self.parts[0].shape)
    }

    /// Every invocation's kernel (built for [`Placement::ring`]), once each.
    fn pallas_calls(&self) -> Result<Vec<PallasCall>> {
        self.parts
            .iter()
            .map(|p| p.build(&self.place.ring, &p.shape))
            .collect()
    }

    /// The kernels at `q` devices for the budget's estimate and its search of the largest
    /// P that fits (see [`Part::census_at`]), once each, and the mesh to trace them on: the
    /// job's mesh at its own P, else a ring of `q`, or the placement's ring when groups
    /// along an axis run it.
    fn census_at(&self, q: usize) -> Result<(Vec<PallasCall>, Mesh)> {
        // Rings along an axis: every group runs the ring's kernel, so per device the
        // program is the ring's at any P of whole groups (q counts the devices of every
        // group); below one group, the search asks about one ring of q devices.
        let mesh = match self.place.groups {
            Some(_) if q >= self.place.ring.size() => self.place.ring.clone(),
            // At the job's own P, its own mesh: a whole-mesh kernel's program depends on
            // its axes (a 2-D torus has far fewer steps than the ring of all its devices).
            None if q == self.place.mesh.size() => self.place.mesh.clone(),
            _ => Mesh::new(q, "x")?,
        };
        let calls = self
            .parts
            .iter()
            .map(|p| p.census_at(&mesh, &self.place))
            .collect::<Result<Vec<_>>>()?;
        if self.parts.iter().any(|p| p.collective().is_none()) {
            // A kernel built for one mesh is traced on it.
            return Ok((calls, self.place.mesh.clone()));
        }
        Ok((calls, mesh))
    }

    /// How budget messages name this job: `psum` at P=8 (2x4 along y, 2 groups) with
    /// shape 8x128.
    fn describe(&self) -> String {
        let dims: Vec<String> = self.shape().iter().map(|d| d.to_string()).collect();
        format!(
            "`{}` at P={} with shape {}",
            self.name(),
            self.place.describe(),
            dims.join("x")
        )
    }

    /// Refuses `work` on this job when it cannot fit this machine's memory or the
    /// planner's limits (see [`crate::budget::ensure_fits`]), before anything
    /// proportional to P is built; else its estimated need.
    pub fn ensure_fits(&self, work: Work) -> Result<Need> {
        self.ensure_fits_noted(work, "")
    }

    /// [`Job::ensure_fits`] with `note` after the job's description in a refusal (the
    /// size a sweep reaches, the file an apply reads).
    pub fn ensure_fits_noted(&self, work: Work, note: &str) -> Result<Need> {
        self.fits_noted(work, note, None)
    }

    /// [`Job::ensure_fits`] and then [`Job::plan`], the kernel traced once: where the
    /// budget's census would trace every point, it counts the program the plan lowers
    /// (made after the spec alone is found to fit). The same need and plan as the two
    /// calls, which trace the kernel twice.
    pub fn plan_fitting(&self, work: Work) -> Result<(Need, Plan)> {
        let once = self.parts.len() == 1 && self.repeat == 1 && self.place.groups.is_none();
        if !once || self.steering()?.is_some() {
            let need = self.ensure_fits(work)?;
            return Ok((need, self.plan()?));
        }
        let t0 = std::time::Instant::now();
        let mut lap = crate::device_sim::Laps::new();
        let cell = std::cell::OnceCell::new();
        let count = |census: &mut Census| match cell.get_or_init(|| self.lower()) {
            Ok(program) => {
                census.count_program(program, self.place.mesh.size());
                true
            }
            Err(_) => false,
        };
        let need = self.fits_noted(work, "", Some(&count))?;
        lap.note("fits+lower");
        self.schedule.validate(self.place.mesh.size())?;
        let program = match cell.into_inner() {
            Some(lowered) => lowered?,
            None => self.lower()?,
        };
        let r = self.scheduled(program, t0)?;
        lap.note("scheduled");
        lap.report("plan_fitting");
        Ok((need, r))
    }

    /// [`Job::ensure_fits_noted`], the census counting `lowered` where it can
    /// ([`Request::lowered`]).
    fn fits_noted(
        &self,
        work: Work,
        note: &str,
        lowered: Option<&dyn Fn(&mut Census) -> bool>,
    ) -> Result<Need> {
        if self.steering()?.is_some() {
            // Traced while it runs: no program to count before it runs (its front end
            // holds its tracing to the budget, `ensure_recording_fits`).
            return Ok(Need::default());
        }
        let work = self.counted(work);
        let what = match work {
            Work::Run { .. } => format!("a run of {}", self.describe()),
            Work::Model { .. } => format!("a model of {}", self.describe()),
            Work::Check { .. } => {
                let n = work.schedules(self.place.mesh.size());
                format!(
                    "a check of {} under {n} schedule{}",
                    self.describe(),
                    if n == 1 { "" } else { "s" }
                )
            }
            Work::Trace => format!("the step table of {}", self.describe()),
            Work::Bench { .. } => format!("a bench of {}", self.describe()),
            Work::Apply { .. } => format!("an apply of {}", self.describe()),
        };
        // Rings along an axis are the same kernel at every P of whole groups the search
        // asks about: built once.
        let ring = std::cell::OnceCell::new();
        let build = |q| match self.place.groups {
            Some(_) if q >= self.place.ring.size() => {
                match ring.get_or_init(|| self.census_at(q).ok()) {
                    Some(built) => Ok(built.clone()),
                    None => self.census_at(q),
                }
            }
            _ => self.census_at(q),
        };
        ensure_fits(&Request {
            what: what + note,
            devices: self.place.mesh.size(),
            build: &build,
            repeat: self.repeat,
            work,
            share: self.share,
            lowered,
        })
    }

    /// `work` as this job does it (a run's or a bench's reference chunked where it can
    /// be).
    fn counted(&self, mut work: Work) -> Work {
        if let Work::Run { chunked, .. } | Work::Bench { chunked, .. } = &mut work {
            *chunked = self.elementwise().is_some();
        }
        work
    }

    /// True when an apply of this job on ranks can have each rank read its own devices'
    /// slices of the input and compute the reference in chunks (an element-wise job;
    /// the input must be a file); otherwise every rank reads the whole input.
    pub fn reads_own_slices(&self) -> bool {
        self.share.ranks > 1 && self.elementwise().is_some()
    }

    /// How many ranks of this process's size `work` on this job needs (each with the
    /// memory this process may use), with one rank's need and that memory; too large
    /// when even one device per rank does not fit.
    pub fn ranks_needed(&self, work: Work) -> Result<(usize, Need, Option<Available>)> {
        ranks_needed(&Request {
            what: format!("a run of {}", self.describe()),
            devices: self.place.mesh.size(),
            build: &|q| self.census_at(q),
            repeat: self.repeat,
            work: self.counted(work),
            share: Share::default(),
            lowered: None,
        })
    }

    /// Traces the kernel (every invocation's) on [`Placement::ring`] and spreads it over
    /// the mesh, with every distinct kernel mistake (the program is usable only when
    /// there are none).
    pub fn trace_kernel(&self) -> Result<(Program, Vec<crate::error::KernelError>)> {
        let mut parts = Vec::with_capacity(self.parts.len());
        let mut errors: Vec<crate::error::KernelError> = Vec::new();
        for call in self.pallas_calls()? {
            let (one, found) = call.trace(&self.place.ring)?;
            for e in found {
                if !errors
                    .iter()
                    .any(|x| x.kind == e.kind && x.site.location == e.site.location)
                {
                    errors.push(e);
                }
            }
            parts.push(one);
        }
        if !errors.is_empty() {
            return Ok((parts.swap_remove(0), errors));
        }
        Ok((self.spread(parts)?, errors))
    }

    /// The kernel traced on every device of the mesh (its first mistake an error): one
    /// program for every invocation of a sequence.
    pub fn lower(&self) -> Result<Program> {
        let mut lap = crate::device_sim::Laps::new();
        let parts = self
            .pallas_calls()?
            .iter()
            .map(|c| c.lower(&self.place.ring))
            .collect::<Result<Vec<_>>>()?;
        lap.note("calls lower");
        let r = self.spread(parts);
        lap.note("spread");
        lap.report("lower");
        r
    }

    /// The invocations' programs on one ring, spread over the mesh and run in sequence.
    fn spread(&self, parts: Vec<Program>) -> Result<Program> {
        let mut spread = parts
            .into_iter()
            .map(|p| self.place.spread(p))
            .collect::<Result<Vec<_>>>()?;
        if spread.len() == 1 && self.repeat == 1 {
            return Ok(spread.swap_remove(0));
        }
        crate::ir::sequence(&spread, self.repeat)
    }

    /// Lowers and schedules the job (no budget check: the steps below make it); a
    /// kernel traced while it runs is traced under the job's schedule, on its inputs. Its
    /// schedule must name devices of its mesh (`run-ahead:D` needs D < P), wherever the
    /// job came from.
    pub fn plan(&self) -> Result<Plan> {
        self.schedule.validate(self.place.mesh.size())?;
        let t0 = std::time::Instant::now();
        if self.steering()?.is_some() {
            return self.plan_steered().map(|(plan, _)| plan);
        }
        self.scheduled(self.lower()?, t0)
    }

    /// `program` (this job lowered) scheduled: its plan, made since `t0`.
    fn scheduled(&self, program: Program, t0: std::time::Instant) -> Result<Plan> {
        let mut lap = crate::device_sim::Laps::new();
        let schedule = schedule(&program, self.schedule.policy().as_mut())?;
        lap.note("schedule");
        let schedule = schedule.with_uninit(&program, self.uninit);
        lap.note("uninit");
        lap.report("scheduled");
        Ok(Plan {
            program,
            schedule,
            plan_time: t0.elapsed(),
        })
    }

    /// The plan of a kernel traced while it runs ([`steer`]) under the job's schedule, on
    /// its inputs, and the reads that steered it: another call is the same plan when each
    /// finds the same ([`steer::Stop::holds`]).
    pub fn plan_steered(&self) -> Result<(Plan, Vec<steer::Stop>)> {
        let t0 = std::time::Instant::now();
        let s = self.steering()?.ok_or_else(|| {
            Error::bad_input(format!("`{}` is not traced while it runs", self.name()))
        })?;
        let (program, schedule, stops) =
            steer::steer_stops(&**s, &self.place.ring, |p, resume| {
                let mut policy = self.schedule.policy();
                let mut d = Split {
                    policy: policy.as_mut(),
                    observer: &mut NoObserver,
                };
                let steps = run_steps(p, &mut d, resume)?;
                Ok(match steps.paused {
                    Some(_) => Attempt::Paused(steps),
                    None => Attempt::Done(steps.schedule),
                })
            })?;
        Ok((
            Plan {
                program,
                schedule,
                plan_time: t0.elapsed(),
            },
            stops,
        ))
    }

    /// XLA's result for `inputs[device][operand]` of the whole mesh: the collective's
    /// reference per kernel instance; for a sequence, each invocation's applied to what
    /// the one before leaves (its inputs fed as the program feeds them,
    /// [`crate::ir::feed`]).
    pub fn reference(
        &self,
        inputs: &[Vec<crate::HostArray>],
    ) -> Result<Vec<Vec<crate::HostArray>>> {
        let calls = self.pallas_calls()?;
        let mut ins = inputs.to_vec();
        let mut outs: Option<Vec<Vec<crate::HostArray>>> = None;
        for k in 0..self.invocations() {
            let (part, call) = (&self.parts[k % calls.len()], &calls[k % calls.len()]);
            let c = part.collective().ok_or_else(|| {
                Error::bad_input(format!(
                    "`{}` is a kernel of your own: tpusim has no reference for it",
                    part.name()
                ))
            })?;
            if let Some(prev) = outs.take() {
                ins = fed(call, &ins, &prev)?;
            }
            outs = Some(self.place.per_group(&ins, &|x| c.reference(x))?);
        }
        Ok(outs.unwrap_or_default())
    }

    /// The collective of a job of one invocation whose reference is element-wise
    /// ([`Collective::elementwise`]): a run computes its reference in chunks of element
    /// positions (a kernel's own or a sequence's reference takes every input at once).
    pub fn elementwise(&self) -> Option<&Arc<dyn Collective>> {
        let c = self.collective_of().filter(|c| c.elementwise())?;
        (self.invocations() == 1).then_some(c)
    }

    /// The relative tolerance results are compared with: the collective's for this
    /// dtype and the devices one instance reduces over, once per invocation (each
    /// rounds anew).
    pub fn tolerance(&self) -> f32 {
        self.collective_of().map_or(0.0, |c| {
            c.tolerance_at(self.shape(), self.dtype(), self.place.mesh.size())
                * self.invocations() as f32
        })
    }

    /// The schedules `tpusim check` runs: every deterministic policy (run-ahead once per
    /// device of the mesh), then seeded random ones from `seed`, `n` in all (never fewer
    /// than the deterministic ones); the verifier under them ([`Job::check`]). Counted
    /// and refused by the budget before the list is made.
    pub fn check_set(&self, n: usize, seed: u64) -> Result<Report> {
        if n == 0 {
            return Err(Error::bad_input(
                "schedules must be at least 1: a check runs every deterministic schedule, then seeded random ones",
            ));
        }
        self.ensure_fits(Work::Check {
            schedules: n as u64,
            deterministic: true,
        })?;
        self.verify(&ScheduleSpec::check_set(self.place.mesh.size(), n, seed))
    }

    /// The verifier under `specs`: kernel mistakes found while tracing are the report
    /// (they hold under every schedule).
    pub fn check(&self, specs: &[ScheduleSpec]) -> Result<Report> {
        self.ensure_fits(Work::Check {
            schedules: specs.len() as u64,
            deterministic: false,
        })?;
        self.verify(specs)
    }

    /// The verifier on the one schedule a run of this job follows, when that is cheap
    /// (`None`: the kernel is too large for a run to pay for it). A race or early send of
    /// any schedule shows under any one (happens-before does not depend on the order that
    /// ran), so a run whose result looked right can say that it was lucky.
    pub fn vet(&self) -> Result<Option<Report>> {
        let (program, errors) = self.trace_kernel()?;
        if !errors.is_empty() {
            return Ok(Some(Report::of_kernel_errors(errors)));
        }
        if program.op_count().saturating_mul(program.devices) > VET_WORK {
            return Ok(None);
        }
        Ok(Some(verify::check_program(&program, &[self.schedule])))
    }

    /// [`Job::check`] once the budget has passed it.
    fn verify(&self, specs: &[ScheduleSpec]) -> Result<Report> {
        for s in specs {
            s.validate(self.place.mesh.size())?;
        }
        if let Some(s) = self.steering()? {
            return verify::check_steered(&**s, &self.place.ring, specs);
        }
        let (program, errors) = self.trace_kernel()?;
        if !errors.is_empty() {
            return Ok(Report::of_kernel_errors(errors));
        }
        let report = verify::check_program(&program, specs);
        // Stopped part way, it is no report.
        crate::interrupt::check()?;
        Ok(report)
    }

    /// The step table: the lockstep schedule run by the symbolic executor, with the
    /// collective's columns (at the shape they are written for) or columns derived from
    /// the kernel's allocations.
    pub fn trace(&self) -> Result<crate::trace::Table> {
        let p = self.place.devices();
        // The budget first: a collective's layout may have a column per device.
        let job = match self.kernel() {
            Kernel::Call { .. } | Kernel::Steered { .. } => self.clone(),
            Kernel::Collective(c) | Kernel::Variant(c, _) => match c.trace_shape(p) {
                Some(shape) => self.clone().with_shape(&shape),
                None => self.clone(),
            },
        };
        job.ensure_fits(Work::Trace)?;
        let custom = match self.kernel() {
            Kernel::Call { layout, .. } | Kernel::Steered { layout, .. } => layout.clone(),
            Kernel::Collective(c) | Kernel::Variant(c, _) => c.trace_layout(p),
        };
        if let Some(s) = self.steering()? {
            return crate::trace::trace_steered(&job.name(), &**s, &self.place.ring, |p| {
                custom
                    .clone()
                    .unwrap_or_else(|| derived_layout(p, job.shape()))
            });
        }
        let program = job.lower()?;
        let layout = custom.unwrap_or_else(|| derived_layout(&program, job.shape()));
        crate::trace::trace_program(&job.name(), &program, &layout)
    }

    /// Where this job's buffers would live on `exec`, for the budget.
    pub fn buffers_on(exec: &dyn Executor) -> Buffers {
        if exec.buffers_in_host_memory() {
            Buffers::Host
        } else {
            Buffers::Device
        }
    }
}

impl Part {
    /// The collective it runs, if any.
    fn collective(&self) -> Option<&Arc<dyn Collective>> {
        match &self.kernel {
            Kernel::Collective(c) | Kernel::Variant(c, _) => Some(c),
            Kernel::Call { .. } | Kernel::Steered { .. } => None,
        }
    }

    /// `psum`, `psum --variant no-capacity-sem`, a kernel's own name.
    fn name(&self) -> String {
        match &self.kernel {
            Kernel::Collective(c) => c.name().to_string(),
            Kernel::Variant(c, v) => format!("{} --variant {}", c.name(), v.name),
            Kernel::Call { call, .. } => call.name().to_string(),
            Kernel::Steered { steering, .. } => steering.name(),
        }
    }

    /// The kernel for `mesh` and `shard`.
    fn build(&self, mesh: &Mesh, shard: &[usize]) -> Result<PallasCall> {
        if self.collective().is_some() && !DType::COLLECTIVE.contains(&self.dtype) {
            return Err(Error::bad_input(format!(
                "`{}` runs in f32, i32, f16 or bf16, not {}",
                self.name(),
                self.dtype
            )));
        }
        match &self.kernel {
            Kernel::Collective(c) => c.call(mesh, shard, self.dtype),
            Kernel::Variant(_, v) => v.call(mesh, shard, self.dtype),
            Kernel::Call { call, .. } => Ok(call.clone()),
            Kernel::Steered { steering, .. } => Err(Error::bad_input(format!(
                "`{}` is traced while it runs: it has no kernel before a schedule runs it",
                steering.name()
            ))),
        }
    }

    /// The kernel on `mesh`, a ring of q devices, for the budget: a collective at the
    /// job's shard shape, or where it cannot serve that shape at q the shape of the same
    /// size rounded to one it can (as `bench` rounds); a kernel built for one mesh
    /// exists at `place`'s P only.
    fn census_at(&self, mesh: &Mesh, place: &Placement) -> Result<PallasCall> {
        let q = mesh.size();
        let Some(c) = self.collective() else {
            return if q == place.mesh.size() {
                self.build(mesh, &self.shape)
            } else {
                Err(Error::bad_input(format!(
                    "`{}` is built for {} devices",
                    self.name(),
                    place.mesh.size()
                )))
            };
        };
        self.build(mesh, &self.shape).or_else(|e| {
            let bytes = c.shard_bytes(&self.shape, self.dtype);
            let size = match c.traffic() {
                Traffic::AllGather => bytes.saturating_mul(q as u64),
                _ => bytes,
            };
            match c.bench_shape(q, size, self.dtype) {
                Some(s) => self.build(mesh, &s),
                None => Err(e),
            }
        })
    }
}

/// The inputs per device of invocation `call`, from the invocation before: its inputs
/// `ins` and results `outs` (`[device][operand]`), by the sequence's rule
/// ([`crate::ir::feed`]), each in the shape the kernel takes it.
fn fed(
    call: &PallasCall,
    ins: &[Vec<crate::HostArray>],
    outs: &[Vec<crate::HostArray>],
) -> Result<Vec<Vec<crate::HostArray>>> {
    let sizes = |v: &[crate::HostArray]| -> Vec<(usize, DType)> {
        v.iter().map(|a| (a.len(), a.dtype)).collect()
    };
    let want = call.spec().inputs();
    ins.iter()
        .zip(outs)
        .map(|(i, o)| {
            let (si, so) = (sizes(i), sizes(o));
            want.iter()
                .enumerate()
                .map(|(k, w)| {
                    let n = crate::array::numel(&w.shape).unwrap_or(usize::MAX);
                    let from = match crate::ir::feed(k, (n, w.dtype), &so, &si) {
                        Some(Feed::Output(j)) => &o[j],
                        Some(Feed::Input(j)) => &i[j],
                        None => {
                            return Err(Error::bad_input(format!(
                                "`{}` takes input `{}` of {n} {} elements, but the invocation \
                                 before has no result or input {k} of that size and dtype",
                                call.name(),
                                w.name,
                                w.dtype
                            )))
                        }
                    };
                    Ok(crate::HostArray {
                        shape: w.shape.clone(),
                        ..from.clone()
                    })
                })
                .collect()
        })
        .collect()
}
