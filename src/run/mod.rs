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
//! use tpusim::exec::cpu::CpuExecutor;
//! use tpusim::mesh::Placement;
//! use tpusim::run::Job;
//! use tpusim::Mesh;
//!
//! let psum = Registry::builtin().by_name("psum").unwrap();
//! let job = Job::collective(psum, Placement::whole(Mesh::new(4, "x").unwrap()));
//! let checked = job.run(&mut CpuExecutor::new(), 0).unwrap();
//! assert_eq!(checked.wrong, 0);
//! ```

mod execute;
mod model;
mod shard;

pub use execute::{random_inputs, Checked, Plan};
pub use model::{Modeled, Nccl};

use crate::array::DType;
use crate::budget::{ensure_fits, Buffers, Need, Request, Work};
use crate::collectives::variants::Variant;
use crate::collectives::{Collective, Options, Registry};
use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::ir::Program;
use crate::kernel::PallasCall;
use crate::mesh::{Mesh, Placement};
use crate::model::Traffic;
use crate::sched::{schedule, ScheduleSpec};
use crate::trace::{derived_layout, TraceLayout};
use crate::verify::{self, Report};
use std::sync::Arc;

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
}

/// One kernel placed on a mesh, with its shard shape, dtype and schedule: everything a
/// pipeline step needs.
#[derive(Clone)]
pub struct Job {
    kernel: Kernel,
    place: Placement,
    shape: Vec<usize>,
    dtype: DType,
    schedule: ScheduleSpec,
}

impl Job {
    /// Collective `c` where `place` puts it, at its default shape for the devices one
    /// instance spans, in f32, under the default schedule.
    pub fn collective(c: Arc<dyn Collective>, place: Placement) -> Self {
        let shape = c.default_shape(place.devices());
        Self {
            kernel: Kernel::Collective(c),
            place,
            shape,
            dtype: DType::F32,
            schedule: ScheduleSpec::Eager,
        }
    }

    /// The broken variant `v` of collective `c`, as [`Job::collective`].
    pub fn variant(c: Arc<dyn Collective>, v: Variant, place: Placement) -> Self {
        Self {
            kernel: Kernel::Variant(c.clone(), v),
            ..Self::collective(c, place)
        }
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
            kernel: Kernel::Call { call, layout: None },
            place: Placement::whole(mesh),
            shape,
            dtype,
            schedule: ScheduleSpec::Eager,
        }
    }

    /// This job with one device's shard of `shape`.
    pub fn with_shape(mut self, shape: &[usize]) -> Self {
        self.shape = shape.to_vec();
        self
    }

    /// This job in `dtype`.
    pub fn with_dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }

    /// This job under schedule `spec`.
    pub fn with_schedule(mut self, spec: ScheduleSpec) -> Self {
        self.schedule = spec;
        self
    }

    /// A kernel job with these step-table columns (collectives have their own).
    pub fn with_layout(mut self, layout: Option<TraceLayout>) -> Self {
        if let Kernel::Call { layout: l, .. } = &mut self.kernel {
            *l = layout;
        }
        self
    }

    /// What runs.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// Where it runs.
    pub fn place(&self) -> &Placement {
        &self.place
    }

    /// One device's shard shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The schedule.
    pub fn schedule(&self) -> ScheduleSpec {
        self.schedule
    }

    /// The collective, when the job runs one (or a variant of one).
    pub fn collective_of(&self) -> Option<&Arc<dyn Collective>> {
        match &self.kernel {
            Kernel::Collective(c) | Kernel::Variant(c, _) => Some(c),
            Kernel::Call { .. } => None,
        }
    }

    /// The kernel's name as reports print it: `psum`, `psum --variant no-capacity-sem`.
    pub fn name(&self) -> String {
        match &self.kernel {
            Kernel::Collective(c) => c.name().to_string(),
            Kernel::Variant(c, v) => format!("{} --variant {}", c.name(), v.name),
            Kernel::Call { call, .. } => call.name().to_string(),
        }
    }

    /// The kernel for `mesh` and `shard`.
    fn build(&self, mesh: &Mesh, shard: &[usize]) -> Result<PallasCall> {
        if self.collective_of().is_some() && !DType::COLLECTIVE.contains(&self.dtype) {
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
        }
    }

    /// The kernel one instance runs (built for [`Placement::ring`]).
    pub fn pallas_call(&self) -> Result<PallasCall> {
        self.build(&self.place.ring, &self.shape)
    }

    /// The kernel at `q` devices for the budget's estimate and its search of the largest
    /// P that fits: a collective is built on a ring of `q` at the job's shard shape, or
    /// where it cannot serve that shape at `q` the shape of the same size rounded to one
    /// it can (as `bench` rounds); a kernel built for one mesh exists at its P only.
    fn census_at(&self, q: usize) -> Result<(PallasCall, Mesh)> {
        let c = match &self.kernel {
            Kernel::Call { call, .. } => {
                return if q == self.place.mesh.size() {
                    Ok((call.clone(), self.place.mesh.clone()))
                } else {
                    Err(Error::bad_input(format!(
                        "`{}` is built for {} devices",
                        call.name(),
                        self.place.mesh.size()
                    )))
                };
            }
            Kernel::Collective(c) | Kernel::Variant(c, _) => c,
        };
        let mesh = Mesh::new(q, "x")?;
        let call = self.build(&mesh, &self.shape).or_else(|e| {
            let bytes = c.shard_bytes(&self.shape, self.dtype);
            let size = match c.traffic() {
                Traffic::AllGather => bytes.saturating_mul(q as u64),
                _ => bytes,
            };
            match c.bench_shape(q, size, self.dtype) {
                Some(s) => self.build(&mesh, &s),
                None => Err(e),
            }
        })?;
        Ok((call, mesh))
    }

    /// How budget messages name this job: `psum` at P=8 (2x4 along y, 2 groups) with
    /// shape 8x128.
    fn describe(&self) -> String {
        let dims: Vec<String> = self.shape.iter().map(|d| d.to_string()).collect();
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
        let what = match work {
            Work::Run { .. } => format!("a run of {}", self.describe()),
            Work::Model { .. } => format!("a model of {}", self.describe()),
            Work::Check => format!("a check of {}", self.describe()),
            Work::Trace => format!("the step table of {}", self.describe()),
            Work::Bench { .. } => format!("a bench of {}", self.describe()),
            Work::Apply { .. } => format!("an apply of {}", self.describe()),
        };
        ensure_fits(&Request {
            what: what + note,
            devices: self.place.mesh.size(),
            build: &|q| self.census_at(q),
            work,
        })
    }

    /// Traces the kernel on [`Placement::ring`] and spreads it over the mesh, with every
    /// distinct kernel mistake (the program is usable only when there are none).
    pub fn trace_kernel(&self) -> Result<(Program, Vec<crate::error::KernelError>)> {
        let (one, errors) = self.pallas_call()?.trace(&self.place.ring)?;
        if !errors.is_empty() {
            return Ok((one, errors));
        }
        Ok((self.place.spread(one)?, errors))
    }

    /// The kernel traced on every device of the mesh (its first mistake an error).
    pub fn lower(&self) -> Result<Program> {
        let program = self.pallas_call()?.lower(&self.place.ring)?;
        self.place.spread(program)
    }

    /// Lowers and schedules the job (no budget check: the steps below make it).
    pub fn plan(&self) -> Result<Plan> {
        let t0 = std::time::Instant::now();
        let program = self.lower()?;
        let schedule = schedule(&program, self.schedule.policy().as_mut())?;
        Ok(Plan {
            program,
            schedule,
            plan_time: t0.elapsed(),
        })
    }

    /// XLA's result for `inputs[device][operand]` of the whole mesh: the collective's
    /// reference per kernel instance.
    pub fn reference(
        &self,
        inputs: &[Vec<crate::HostArray>],
    ) -> Result<Vec<Vec<crate::HostArray>>> {
        match self.collective_of() {
            Some(c) => self.place.per_group(inputs, &|x| c.reference(x)),
            None => Err(Error::bad_input(format!(
                "`{}` is a kernel of your own: tpusim has no reference for it",
                self.name()
            ))),
        }
    }

    /// The relative tolerance results are compared with: the collective's for this
    /// dtype and the devices one instance reduces over.
    pub fn tolerance(&self) -> f32 {
        self.collective_of().map_or(0.0, |c| {
            c.tolerance_at(&self.shape, self.dtype, self.place.mesh.size())
        })
    }

    /// The verifier under `specs`: kernel mistakes found while tracing are the report
    /// (they hold under every schedule).
    pub fn check(&self, specs: &[ScheduleSpec]) -> Result<Report> {
        self.ensure_fits(Work::Check)?;
        for s in specs {
            s.validate(self.place.mesh.size())?;
        }
        let (program, errors) = self.trace_kernel()?;
        if !errors.is_empty() {
            return Ok(Report::of_kernel_errors(errors));
        }
        Ok(verify::check_program(&program, specs))
    }

    /// The step table: the lockstep schedule run by the symbolic executor, with the
    /// collective's columns (at the shape they are written for) or columns derived from
    /// the kernel's allocations.
    pub fn trace(&self) -> Result<crate::trace::Table> {
        let p = self.place.devices();
        let (job, custom) = match &self.kernel {
            Kernel::Call { layout, .. } => (self.clone(), layout.clone()),
            Kernel::Collective(c) | Kernel::Variant(c, _) => match c.trace_layout(p) {
                Some(l) => (self.clone().with_shape(&l.shape), Some(l)),
                None => (self.clone(), None),
            },
        };
        job.ensure_fits(Work::Trace)?;
        let program = job.lower()?;
        let layout = custom.unwrap_or_else(|| derived_layout(&program, &job.shape));
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
