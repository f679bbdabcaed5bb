//! Lowering: trace a `PallasCall` over every device and grid point into a [`Program`].

use super::ctx::{Ctx, Recording, MAX_SCOPED};
use super::refs::{Ref, Sem, MAX_RANK};
use super::spec::{Arg, Args, PallasCall, ScratchSpec};
use super::temps::Temps;
use crate::error::{DeviceName, Error, KernelError, KernelErrorKind, Result, Site};
use crate::ir::{
    grid_coords, Allocation, DataOp, Invocation, Layout, MemorySpace, Op, OpKind, Program, SemInfo,
    SemKind, View,
};
use crate::mesh::Mesh;
use crate::source::Iteration;
use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// What a trace needs before the kernel runs: the layout every device shares, the
/// kernel's arguments, and where operands live.
pub(crate) struct Frame {
    /// Allocations and semaphore slots.
    pub(crate) layout: Layout,
    /// The barrier semaphore, with a `collective_id`.
    pub(crate) barrier: Option<Sem>,
    /// The first `run_scoped` slot.
    pub(crate) scoped_base: usize,
    /// (HBM, VMEM) pairs copied in before the grid.
    pub(crate) prologue_pairs: Vec<(usize, usize)>,
    /// (VMEM, HBM) pairs copied out after the grid.
    pub(crate) epilogue_pairs: Vec<(usize, usize)>,
    /// Input allocations.
    pub(crate) inputs: Vec<usize>,
    /// Output allocations.
    pub(crate) outputs: Vec<usize>,
}

/// What one thread tracing a kernel changes: the arguments (with the mistakes made in
/// asking for them) and the values' temporaries, numbered after the kernel's own
/// allocations.
pub(crate) struct Lane {
    pub(crate) args: Args,
    pub(crate) temps: RefCell<Temps>,
}

impl Lane {
    /// A lane for another thread: the same arguments, no mistakes, no values yet.
    fn fork(&self) -> Lane {
        Lane {
            args: self.args.fork(),
            temps: RefCell::new(Temps::new(self.temps.borrow().first())),
        }
    }
}

/// Devices `devices` of a kernel traced by one thread: each device's ops, their DMAs
/// (numbered from zero), and the distinct kernel mistakes found.
struct Traced {
    ops: Vec<Vec<Op>>,
    dmas: Vec<crate::ir::Dma>,
    errors: Vec<KernelError>,
}

/// Keeps `e` unless a mistake of its kind at its line is kept already or enough are.
fn note(errors: &mut Vec<KernelError>, e: KernelError) {
    let dup = errors
        .iter()
        .any(|x| x.kind == e.kind && x.site.location == e.site.location);
    if !dup && errors.len() < MAX_KERNEL_ERRORS {
        errors.push(e);
    }
}

/// How many distinct kernel mistakes one trace collects before it stops.
const MAX_KERNEL_ERRORS: usize = 32;

impl PallasCall {
    /// Traces the kernel on every device of `mesh` and every grid point. A kernel
    /// mistake is returned as [`Error::Kernel`] (the first one found).
    pub fn lower(&self, mesh: &Mesh) -> Result<Program> {
        let (program, mut errors) = self.trace(mesh)?;
        if errors.is_empty() {
            Ok(program)
        } else {
            Err(Error::Kernel(errors.swap_remove(0)))
        }
    }

    /// The layout and the kernel's arguments (in the lane of a first thread tracing it),
    /// built from the spec before any tracing.
    /// Without `named`, semaphore array elements get no names (for counting ops, where
    /// a seed-003 signal matrix of 2P² cells would otherwise cost a string each).
    pub(crate) fn frame(&self, named: bool) -> Result<(Frame, Lane)> {
        let element = |name: &str, index: std::fmt::Arguments| {
            if named {
                format!("{name}[{index}]")
            } else {
                String::new()
            }
        };
        let spec = &self.spec;
        let mut layout = Layout::default();
        let mut args = Vec::new();
        let mut names = Vec::new();
        let mut prologue_pairs = Vec::new();
        let mut epilogue_pairs = Vec::new();
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();

        let alloc = |layout: &mut Layout, name: String, space, shape: &[usize], dtype| {
            layout.allocs.push(Allocation {
                name,
                space,
                dtype,
                shape: shape.to_vec(),
            });
            layout.allocs.len() - 1
        };

        for (is_out, ops) in [(false, &spec.inputs), (true, &spec.outputs)] {
            for o in ops.iter() {
                if o.shape.len() > MAX_RANK {
                    return Err(Error::bad_input(format!(
                        "operand `{}` has rank {}; at most {MAX_RANK} dimensions are supported",
                        o.name,
                        o.shape.len()
                    )));
                }
                if o.shape.is_empty() || o.shape.contains(&0) {
                    return Err(Error::bad_input(format!(
                        "operand `{}` has shape {:?}; every dimension must be at least 1",
                        o.name, o.shape
                    )));
                }
                let hbm = alloc(
                    &mut layout,
                    o.name.clone(),
                    MemorySpace::Any,
                    &o.shape,
                    o.dtype,
                );
                let seen = if o.space == MemorySpace::Vmem {
                    layout.allocs[hbm].name = format!("{} (HBM operand)", o.name);
                    let v = alloc(
                        &mut layout,
                        o.name.clone(),
                        MemorySpace::Vmem,
                        &o.shape,
                        o.dtype,
                    );
                    if is_out {
                        epilogue_pairs.push((v, hbm));
                    } else {
                        prologue_pairs.push((hbm, v));
                    }
                    v
                } else {
                    hbm
                };
                if is_out {
                    outputs.push(hbm);
                } else {
                    inputs.push(hbm);
                }
                args.push(Arg::Ref(Ref::whole(seen, o.space, o.dtype, &o.shape)));
                names.push(o.name.clone());
            }
        }
        // Aliased operands: the output starts as the input, and the kernel sees the output.
        let mut first = Vec::new();
        for &(i, o) in &spec.aliases {
            let (Some(&src), Some(&dst)) = (inputs.get(i), outputs.get(o)) else {
                return Err(Error::bad_input(format!(
                    "input_output_aliases {i}: {o} names an operand the kernel does not have"
                )));
            };
            let (a, b) = (&spec.inputs[i], &spec.outputs[o]);
            if a.shape != b.shape || a.dtype != b.dtype {
                return Err(Error::bad_input(format!(
                    "input_output_aliases {i}: {o}: `{}` is {:?} {} but `{}` is {:?} {}",
                    a.name, a.shape, a.dtype, b.name, b.shape, b.dtype
                )));
            }
            let out = spec.inputs.len() + o;
            let Arg::Ref(seen) = args[out] else {
                unreachable!("operands are refs")
            };
            first.push((src, seen.alloc));
            first.push((src, dst));
            args[i] = args[out];
        }
        first.dedup();
        prologue_pairs.splice(0..0, first);
        for s in &spec.scratch {
            match s {
                ScratchSpec::Vmem { name, shape, dtype } => {
                    if shape.len() > MAX_RANK || shape.contains(&0) {
                        return Err(Error::bad_input(format!(
                            "scratch `{name}` has shape {shape:?}; every dimension must be at least 1, at most {MAX_RANK} of them"
                        )));
                    }
                    let id = alloc(&mut layout, name.clone(), MemorySpace::Vmem, shape, *dtype);
                    args.push(Arg::Ref(Ref::whole(id, MemorySpace::Vmem, *dtype, shape)));
                    names.push(name.clone());
                }
                ScratchSpec::Sem {
                    name,
                    kind,
                    count,
                    carried,
                } => {
                    let base = layout.sems.len();
                    match count {
                        None => layout.sems.push(SemInfo {
                            name: name.clone(),
                            kind: *kind,
                            carried: *carried,
                        }),
                        Some(n) => layout.sems.extend((0..*n).map(|i| SemInfo {
                            name: element(name, format_args!("{i}")),
                            kind: *kind,
                            carried: *carried,
                        })),
                    }
                    args.push(Arg::Sem(Sem {
                        base,
                        count: count.unwrap_or(1),
                        cols: 0,
                        is_array: count.is_some(),
                        kind: *kind,
                        fault: None,
                    }));
                    names.push(name.clone());
                }
                ScratchSpec::SignalMatrix { name, rows, cols } => {
                    let base = layout.sems.len();
                    for r in 0..*rows {
                        for c in 0..*cols {
                            layout.sems.push(SemInfo {
                                name: element(name, format_args!("{r}, {c}")),
                                kind: SemKind::Signal,
                                carried: false,
                            });
                        }
                    }
                    args.push(Arg::Sem(Sem {
                        base,
                        count: rows * cols,
                        cols: *cols,
                        is_array: true,
                        kind: SemKind::Signal,
                        fault: None,
                    }));
                    names.push(name.clone());
                }
            }
        }
        let barrier = spec.collective_id.map(|id| {
            layout.sems.push(SemInfo {
                name: format!("barrier_semaphore(collective_id={id})"),
                kind: SemKind::Barrier,
                carried: false,
            });
            Sem {
                base: layout.sems.len() - 1,
                count: 1,
                cols: 0,
                is_array: false,
                kind: SemKind::Barrier,
                fault: None,
            }
        });
        // Slots for `run_scoped` semaphores, one per nesting depth, shared by every device
        // (a scope at the same depth is the same allocation everywhere, as on a TPU).
        let scoped_base = layout.sems.len();
        layout.sems.extend((0..MAX_SCOPED).map(|d| SemInfo {
            name: format!("run_scoped[{d}]"),
            kind: SemKind::Regular,
            carried: false,
        }));
        let args = Args::new(args, names);
        let lane = Lane {
            args,
            temps: RefCell::new(Temps::new(layout.allocs.len())),
        };
        Ok((
            Frame {
                layout,
                barrier,
                scoped_base,
                prologue_pairs,
                epilogue_pairs,
                inputs,
                outputs,
            },
            lane,
        ))
    }

    /// Traces device `device` at row-major grid point `g` (its DMAs numbered from
    /// `dma_base`) into `rec` (empty; a recycled one keeps the room its vectors had, so
    /// a trace does not allocate anew at every grid point), the arguments and values
    /// `lane`'s: what it recorded, and the message of a panic in the kernel body.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn trace_point(
        &self,
        mesh: &Mesh,
        frame: &Frame,
        lane: &Lane,
        device: usize,
        g: usize,
        dma_base: usize,
        rec: Recording,
    ) -> (Recording, Option<String>) {
        let spec = &self.spec;
        let ctx = Ctx {
            mesh,
            layout: &frame.layout,
            device,
            grid: &spec.grid,
            point: grid_coords(&spec.grid, g),
            grid_linear: g,
            dma_base,
            barrier: frame.barrier,
            pull_model: spec.pull_model,
            scoped_base: frame.scoped_base,
            scoped_depth: Cell::new(0),
            source: Cell::new(None),
            iteration: Cell::new(Iteration::NONE),
            cores: spec.cores.max(1),
            rec: RefCell::new(rec),
            temps: &lane.temps,
        };
        // Values live within one grid point.
        lane.temps.borrow_mut().reset();
        let run = catch_unwind(AssertUnwindSafe(|| (self.kernel)(&ctx, &lane.args)));
        let rec = ctx.rec.into_inner();
        let panic = run.err().map(|panic| {
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "the kernel panicked".into())
        });
        (rec, panic)
    }

    /// Every device of `mesh` traced, the devices split among the threads of the pool
    /// (each in its own lane, `lane` the first's; devices trace independently), and the
    /// values' temporaries of all. The same program as one thread tracing device after
    /// device, which it falls back to where the lanes met the values' dtypes in
    /// different orders.
    fn trace_all(&self, mesh: &Mesh, frame: &Frame, lane: Lane) -> Result<(Traced, Temps)> {
        use rayon::prelude::*;
        let n = mesh.size();
        let k = rayon::current_num_threads().clamp(1, n);
        let lanes: Vec<Lane> = (1..k).map(|_| lane.fork()).collect();
        // This thread traces the first devices, watched (crate::interrupt); the other
        // lanes stop at their next check once it is asked to.
        let stopped = AtomicBool::new(false);
        let range = |i: usize| i * n / k..(i + 1) * n / k;
        let (first, rest) = rayon::join(
            || {
                let check =
                    || crate::interrupt::check().inspect_err(|_| stopped.store(true, Relaxed));
                let part = self.trace_devices(mesh, frame, &lane, range(0), &check);
                (part, lane)
            },
            || {
                let check = || match stopped.load(Relaxed) {
                    true => Err(Error::Interrupted),
                    false => Ok(()),
                };
                lanes
                    .into_par_iter()
                    .enumerate()
                    .map(|(i, lane)| {
                        let part = self.trace_devices(mesh, frame, &lane, range(i + 1), &check);
                        part.map(|p| (p, lane))
                    })
                    .collect::<Result<Vec<_>>>()
            },
        );
        let ((first, lane), parts) = (first, rest?);
        let mut all = first?;
        let mut temps = lane.temps.into_inner();
        for (mut part, lane) in parts {
            if !temps.absorb(lane.temps.into_inner()) {
                // Values of another dtype first: numbered otherwise. Traced again, in
                // order, in a lane of its own.
                let (_, lane) = self.frame(true)?;
                let one = self.trace_devices(mesh, frame, &lane, 0..n, &crate::interrupt::check)?;
                return Ok((one, lane.temps.into_inner()));
            }
            let base = all.dmas.len();
            for op in part.ops.iter_mut().flatten() {
                if let OpKind::DmaStart(id) = &mut op.kind {
                    *id += base;
                }
            }
            all.ops.append(&mut part.ops);
            all.dmas.append(&mut part.dmas);
            for e in part.errors {
                note(&mut all.errors, e);
            }
        }
        Ok((all, temps))
    }

    /// Devices `devices` traced at every grid point in `lane` (DMAs numbered from zero).
    fn trace_devices(
        &self,
        mesh: &Mesh,
        frame: &Frame,
        lane: &Lane,
        devices: std::ops::Range<usize>,
        check: &dyn Fn() -> Result<()>,
    ) -> Result<Traced> {
        let spec = &self.spec;
        let points: usize = spec.grid.iter().product();
        let mut ops: Vec<Vec<Op>> = Vec::with_capacity(devices.len());
        let mut dmas = Vec::new();
        let mut errors: Vec<KernelError> = Vec::new();
        let mut spare = Recording::default();
        for device in devices {
            // Devices mostly trace alike: room for as many ops as the last one.
            let mut dev_ops = Vec::with_capacity(ops.last().map_or(0, Vec::len));
            for g in 0..points {
                // A watched caller may stop a long trace (crate::interrupt).
                if g.is_multiple_of(1024) {
                    check()?;
                }
                let (mut rec, panic) = self.trace_point(
                    mesh,
                    frame,
                    lane,
                    device,
                    g,
                    dmas.len(),
                    std::mem::take(&mut spare),
                );
                let site = |op: &'static str, location: String| Site {
                    device: DeviceName::of(device, spec.cores).device,
                    core: DeviceName::of(device, spec.cores).core,
                    invocation: None,
                    grid: grid_coords(&spec.grid, g),
                    iteration: Iteration::NONE,
                    op,
                    location,
                };
                if let Some(msg) = panic {
                    note(
                        &mut errors,
                        KernelError {
                            kind: KernelErrorKind::Misuse,
                            site: site("kernel body", self.name.clone()),
                            detail: msg,
                        },
                    );
                }
                for e in rec.errors.drain(..) {
                    note(&mut errors, e);
                }
                for (at, detail) in lane.args.errors.borrow_mut().drain(..) {
                    note(
                        &mut errors,
                        KernelError {
                            kind: KernelErrorKind::Misuse,
                            site: site("kernel argument", format!("{}:{}", at.file(), at.line())),
                            detail,
                        },
                    );
                }
                if dev_ops.is_empty() {
                    // The device's first ops: the point's list taken whole, not copied
                    // (a grid of one point is one list per device); the room kept for
                    // the next point is the one made for the device.
                    std::mem::swap(&mut dev_ops, &mut rec.ops);
                } else {
                    dev_ops.append(&mut rec.ops);
                }
                dmas.append(&mut rec.dmas);
                spare = rec;
            }
            ops.push(dev_ops);
        }
        Ok(Traced { ops, dmas, errors })
    }

    /// Traces the kernel and returns the program together with every distinct kernel
    /// mistake (by kind and source line); the program is only usable when there are none.
    pub fn trace(&self, mesh: &Mesh) -> Result<(Program, Vec<KernelError>)> {
        let spec = &self.spec;
        if !mesh.size().is_multiple_of(spec.cores.max(1)) {
            return Err(Error::bad_input(format!(
                "a mesh of {} devices cannot hold chips of {} cores",
                mesh.size(),
                spec.cores
            )));
        }
        let (frame, lane) = self.frame(true)?;
        let (Traced { ops, dmas, errors }, temps) = self.trace_all(mesh, &frame, lane)?;
        let Frame {
            mut layout,
            prologue_pairs,
            epilogue_pairs,
            inputs,
            outputs,
            ..
        } = frame;
        // The kernel's own VMEM buffers, before the values' allocations join them.
        let buffers = layout
            .allocs
            .iter()
            .filter(|a| a.space == MemorySpace::Vmem)
            .map(|a| a.bytes())
            .sum();
        layout.vmem.push(crate::ir::VmemUse {
            kernel: self.name.clone(),
            buffers,
            values: temps.peak_live_bytes(),
            limit: spec.vmem_limit,
        });
        for (dtype, elems) in temps.allocations() {
            layout.allocs.push(Allocation::values(dtype, elems));
        }

        let cores = spec.cores.max(1);
        // An HBM allocation is the chip's (see `GridSpec::cores`).
        let whole = |a: usize, device: usize| {
            let alloc = &layout.allocs[a];
            let device = if alloc.space == MemorySpace::Any {
                device - device % cores
            } else {
                device
            };
            View::new(device, a, 0, alloc.numel())
        };
        let copies = |pairs: &[(usize, usize)]| {
            let mut ops = Vec::new();
            for d in 0..mesh.size() {
                for &(s, t) in pairs {
                    // A chip's HBM is written by its first core only.
                    if crate::ir::holds(cores, d, layout.allocs[t].space) {
                        ops.push(DataOp::Copy {
                            src: whole(s, d),
                            dst: whole(t, d),
                        });
                    }
                }
            }
            ops
        };
        let prologue = copies(&prologue_pairs);
        let epilogue = copies(&epilogue_pairs);
        let invocation = Invocation {
            parallel: spec.parallel,
            ..Invocation::single(&self.name, &spec.grid, spec.collective_id, mesh.size())
        };
        Ok((
            Program {
                name: self.name.clone(),
                devices: mesh.size(),
                layout,
                ops,
                dmas,
                prologue,
                epilogue,
                inputs,
                outputs,
                invocations: vec![invocation],
                cores: spec.cores.max(1),
            },
            errors,
        ))
    }
}
