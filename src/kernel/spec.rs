//! `GridSpec` and `PallasCall`: what a kernel's operands, scratch and grid are.

use super::ctx::Ctx;
use super::refs::{Ref, Sem};
use crate::array::DType;
use crate::ir::{MemorySpace, SemKind};
use std::cell::RefCell;
use std::panic::Location;
use std::sync::Arc;

/// An input or output operand (`pl.BlockSpec(memory_space=…)` plus its shape).
#[derive(Clone, Debug)]
pub struct OperandSpec {
    /// Name shown in reports (`x_ref`).
    pub name: String,
    /// `Any` stays in HBM; `Vmem` is copied into VMEM before the grid (and out after it).
    pub space: MemorySpace,
    /// Per-device shape.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
}

/// A scratch operand (`scratch_shapes`).
#[derive(Clone, Debug)]
pub enum ScratchSpec {
    /// `pltpu.VMEM(shape, dtype)`.
    Vmem {
        /// Name.
        name: String,
        /// Shape.
        shape: Vec<usize>,
        /// Element type.
        dtype: DType,
    },
    /// `pltpu.SemaphoreType.DMA` / `REGULAR`, optionally an array `(count,)`.
    Sem {
        /// Name.
        name: String,
        /// Kind.
        kind: SemKind,
        /// `Some(n)` for an array of `n`.
        count: Option<usize>,
        /// Handed on as an output ([`crate::ir::SemInfo::carried`]).
        carried: bool,
    },
    /// A seed-003 signal matrix of `rows x cols` i32 counters per device.
    SignalMatrix {
        /// Name.
        name: String,
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
    },
}

/// Operands, scratch and grid of a kernel (`pltpu.PrefetchScalarGridSpec`).
#[derive(Clone, Debug, Default)]
pub struct GridSpec {
    pub(crate) grid: Vec<usize>,
    pub(crate) inputs: Vec<OperandSpec>,
    pub(crate) outputs: Vec<OperandSpec>,
    pub(crate) scratch: Vec<ScratchSpec>,
    pub(crate) collective_id: Option<u32>,
    pub(crate) vmem_limit: Option<u64>,
    pub(crate) parallel: bool,
    pub(crate) pull_model: bool,
    pub(crate) cores: usize,
    pub(crate) aliases: Vec<(usize, usize)>,
}

impl GridSpec {
    /// An empty spec: no operands, and a grid of one point.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the grid (`grid=(…)`). Each device runs its points in row-major order.
    pub fn grid(mut self, dims: &[usize]) -> Self {
        self.grid = dims.to_vec();
        self
    }

    /// Adds an input operand.
    pub fn input(mut self, name: &str, space: MemorySpace, shape: &[usize], dtype: DType) -> Self {
        self.inputs.push(OperandSpec {
            name: name.into(),
            space,
            shape: shape.to_vec(),
            dtype,
        });
        self
    }

    /// Adds an output operand.
    pub fn output(mut self, name: &str, space: MemorySpace, shape: &[usize], dtype: DType) -> Self {
        self.outputs.push(OperandSpec {
            name: name.into(),
            space,
            shape: shape.to_vec(),
            dtype,
        });
        self
    }

    /// Adds a VMEM scratch buffer (`pltpu.VMEM(shape, dtype)`).
    pub fn vmem(mut self, name: &str, shape: &[usize], dtype: DType) -> Self {
        self.scratch.push(ScratchSpec::Vmem {
            name: name.into(),
            shape: shape.to_vec(),
            dtype,
        });
        self
    }

    /// Adds one DMA semaphore (`pltpu.SemaphoreType.DMA`).
    pub fn dma_sem(self, name: &str) -> Self {
        self.sem(name, SemKind::Dma, None)
    }

    /// Adds an array of DMA semaphores (`pltpu.SemaphoreType.DMA((n,))`).
    pub fn dma_sems(self, name: &str, n: usize) -> Self {
        self.sem(name, SemKind::Dma, Some(n))
    }

    /// Adds one REGULAR semaphore.
    pub fn regular_sem(self, name: &str) -> Self {
        self.sem(name, SemKind::Regular, None)
    }

    /// Adds an array of REGULAR semaphores.
    pub fn regular_sems(self, name: &str, n: usize) -> Self {
        self.sem(name, SemKind::Regular, Some(n))
    }

    /// Adds a semaphore (an array of `count`) the kernel hands on as an output
    /// (`out_specs` in `pltpu.SEMAPHORE`): its count at exit is a result the caller
    /// reads ([`crate::ir::SemInfo::carried`]), not a fault.
    pub fn carried_sem(mut self, name: &str, kind: SemKind, count: Option<usize>) -> Self {
        self.scratch.push(ScratchSpec::Sem {
            name: name.into(),
            kind,
            count,
            carried: true,
        });
        self
    }

    fn sem(mut self, name: &str, kind: SemKind, count: Option<usize>) -> Self {
        self.scratch.push(ScratchSpec::Sem {
            name: name.into(),
            kind,
            count,
            carried: false,
        });
        self
    }

    /// Adds a seed-003 signal matrix (`[rows, cols]` counters per device) for
    /// [`Ctx::notify`] and [`Ctx::wait`].
    pub fn signal_matrix(mut self, name: &str, rows: usize, cols: usize) -> Self {
        self.scratch.push(ScratchSpec::SignalMatrix {
            name: name.into(),
            rows,
            cols,
        });
        self
    }

    /// Runs the kernel in the seed-003 model, where [`Ctx::remote_load`] may pull from
    /// a peer. TPU kernels are push-only and leave this off.
    pub fn pull_model(mut self) -> Self {
        self.pull_model = true;
        self
    }

    /// The last mesh axis is the TensorCores of a chip (`pl.core_map` over a
    /// `pltpu.TensorCoreMesh` of `n` cores): each `n` consecutive devices are the agents
    /// of one chip, sharing its HBM (an `ANY` allocation is the chip's, addressed on its
    /// first core) and each with its own VMEM and semaphores.
    pub fn cores(mut self, n: usize) -> Self {
        self.cores = n.max(1);
        self
    }

    /// `input_output_aliases={input: output}`: output `output` is input `input`'s buffer:
    /// it starts as the input (copied in before the grid) and the kernel's refs of both
    /// are the output's.
    pub fn alias(mut self, input: usize, output: usize) -> Self {
        self.aliases.push((input, output));
        self
    }

    /// `compiler_params=pltpu.CompilerParams(collective_id=…)`: enables the barrier semaphore.
    pub fn collective_id(mut self, id: u32) -> Self {
        self.collective_id = Some(id);
        self
    }

    /// `compiler_params=pltpu.CompilerParams(vmem_limit_bytes=…)`: the VMEM the kernel
    /// may use, which the cost model's VMEM check holds it to (within the chip's).
    pub fn vmem_limit(mut self, bytes: u64) -> Self {
        self.vmem_limit = Some(bytes);
        self
    }

    /// `compiler_params=pltpu.CompilerParams(dimension_semantics=…)` with some
    /// dimension `parallel`: the cost model lets the grid use every TensorCore of a
    /// megacore chip (without, a kernel runs on one, as Mosaic compiles it).
    pub fn parallel_grid(mut self, parallel: bool) -> Self {
        self.parallel = parallel;
        self
    }

    /// Input operand specs.
    pub fn inputs(&self) -> &[OperandSpec] {
        &self.inputs
    }

    /// Output operand specs.
    pub fn outputs(&self) -> &[OperandSpec] {
        &self.outputs
    }
}

/// One kernel argument: a ref or a semaphore.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    /// A memory ref.
    Ref(Ref),
    /// A semaphore or semaphore array.
    Sem(Sem),
}

/// Names a kernel argument: by its name in the spec (`"x_ref"`, reads like the
/// seed's signature) or by its position in Pallas order (`0`).
pub trait ArgKey: Copy {
    /// Its position among `names`, if it names one.
    fn position(self, names: &[String]) -> Option<usize>;
    /// How a message names it.
    fn describe(self) -> String;
}

impl ArgKey for usize {
    fn position(self, names: &[String]) -> Option<usize> {
        (self < names.len()).then_some(self)
    }
    fn describe(self) -> String {
        format!("argument {self}")
    }
}

impl ArgKey for &str {
    fn position(self, names: &[String]) -> Option<usize> {
        names.iter().position(|n| n == self)
    }
    fn describe(self) -> String {
        format!("argument `{self}`")
    }
}

/// The kernel's arguments in Pallas order: inputs, outputs, then scratch. Ask for one
/// by name (`a.r("x_ref")`, `a.sem("send_sem")`) or position; a name that is not there,
/// or a ref asked for as a semaphore (or the reverse), is a kernel error at that line.
#[derive(Debug)]
pub struct Args {
    pub(crate) args: Vec<Arg>,
    pub(crate) names: Vec<String>,
    /// Mistakes in asking for arguments since the last drain: (kernel line, message).
    pub(crate) errors: RefCell<Vec<(&'static Location<'static>, String)>>,
}

impl Args {
    /// The same arguments, with no mistakes noted (for another thread's trace).
    pub(crate) fn fork(&self) -> Self {
        Self::new(self.args.clone(), self.names.clone())
    }

    pub(crate) fn new(args: Vec<Arg>, names: Vec<String>) -> Self {
        Self {
            args,
            names,
            errors: RefCell::new(Vec::new()),
        }
    }

    fn find(&self, key: impl ArgKey, want: &str, at: &'static Location<'static>) -> Option<Arg> {
        let found = key.position(&self.names).map(|i| (i, self.args[i]));
        let problem = match found {
            Some((_, a @ Arg::Ref(_))) if want == "ref" => return Some(a),
            Some((_, a @ Arg::Sem(_))) if want == "semaphore" => return Some(a),
            Some((i, _)) => format!(
                "kernel {} (`{}`) is a {}, not a {want}",
                key.describe(),
                self.names[i],
                if want == "ref" { "semaphore" } else { "ref" }
            ),
            None => format!(
                "the kernel has no {} (it has: {})",
                key.describe(),
                self.names.join(", ")
            ),
        };
        self.errors.borrow_mut().push((at, problem));
        None
    }

    /// Argument `key` as a ref.
    #[track_caller]
    pub fn r(&self, key: impl ArgKey) -> Ref {
        match self.find(key, "ref", Location::caller()) {
            Some(Arg::Ref(r)) => r,
            _ => Ref::poisoned(),
        }
    }

    /// Argument `key` as a semaphore (or semaphore array).
    #[track_caller]
    pub fn sem(&self, key: impl ArgKey) -> Sem {
        match self.find(key, "semaphore", Location::caller()) {
            Some(Arg::Sem(s)) => s,
            _ => Sem::poisoned(),
        }
    }

    /// Argument names, in order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Number of arguments.
    pub fn len(&self) -> usize {
        self.args.len()
    }

    /// True when there are no arguments.
    pub fn is_empty(&self) -> bool {
        self.args.is_empty()
    }
}

/// A kernel body: called once per (device, grid point) while tracing.
pub type KernelFn = dyn Fn(&Ctx, &Args) + Send + Sync;

/// `pl.pallas_call(kernel, grid_spec=…)`: a kernel and its spec, ready to lower on a mesh.
#[derive(Clone)]
pub struct PallasCall {
    pub(crate) name: String,
    pub(crate) spec: GridSpec,
    pub(crate) kernel: Arc<KernelFn>,
}

impl PallasCall {
    /// Wraps a kernel body and its spec.
    pub fn new(
        name: &str,
        spec: GridSpec,
        kernel: impl Fn(&Ctx, &Args) + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            spec,
            kernel: Arc::new(kernel),
        }
    }

    /// The spec.
    pub fn spec(&self) -> &GridSpec {
        &self.spec
    }

    /// The kernel name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl std::fmt::Debug for PallasCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PallasCall")
            .field("name", &self.name)
            .field("spec", &self.spec)
            .finish()
    }
}
