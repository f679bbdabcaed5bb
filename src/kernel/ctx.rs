//! `Ctx`: what a kernel body calls (`pl.*` / `pltpu.*`). Every call is recorded as an
//! op of the current device and grid point; nothing runs until the scheduler does.

use super::refs::{Fault, Ref, Sem};
use crate::array::DType;
use crate::error::{DeviceName, KernelError, KernelErrorKind, Site};
use crate::ir::{Block, Cmp, SemId};
use crate::ir::{
    DataOp, Dma, Layout, MemorySpace, Op, OpKind, OpSite, ReduceOp, SemKind, SemRef, View, WaitKind,
};
use crate::mesh::{DeviceId, Mesh, SignalTarget};
use crate::source::{Iteration, SourceLoc};
use std::cell::{Cell, RefCell};
use std::panic::Location;

/// The semaphores a DMA may signal: DMA semaphores (its bytes) and REGULAR ones (one
/// per completion, TPU v6 and later); see `Program::dma_credit`.
const DMA_SIGNALS: &[SemKind] = &[SemKind::Dma, SemKind::Regular];

#[derive(Default)]
pub(crate) struct Recording {
    pub ops: Vec<Op>,
    pub dmas: Vec<Dma>,
    pub errors: Vec<KernelError>,
}

/// The kernel's view of one device at one grid point.
pub struct Ctx<'a> {
    pub(crate) mesh: &'a Mesh,
    pub(crate) layout: &'a Layout,
    pub(crate) device: usize,
    pub(crate) grid: &'a [usize],
    pub(crate) point: Vec<usize>,
    pub(crate) grid_linear: usize,
    pub(crate) dma_base: usize,
    pub(crate) barrier: Option<Sem>,
    pub(crate) pull_model: bool,
    pub(crate) scoped_base: SemId,
    pub(crate) scoped_depth: Cell<usize>,
    /// The source line calls are attributed to, when a front end set one.
    pub(crate) source: Cell<Option<SourceLoc>>,
    /// The loop iteration calls are recorded in ([`Ctx::in_iteration`]).
    pub(crate) iteration: Cell<Iteration>,
    /// Devices per chip ([`crate::kernel::GridSpec::cores`]): HBM is the chip's.
    pub(crate) cores: usize,
    pub(crate) rec: RefCell<Recording>,
    /// Where values live (shared by every device and grid point of the trace).
    pub(crate) temps: &'a RefCell<super::temps::Temps>,
}

/// How deeply `run_scoped` semaphore scopes may nest.
pub const MAX_SCOPED: usize = 4;

/// The completion a [`Ctx::dma_wait`] waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaSide {
    /// A local copy's only completion.
    Local,
    /// A remote copy's send completion (its source has been read).
    Send,
    /// A remote copy's receive completion (its destination has been written).
    Recv,
}

/// A local DMA descriptor (`pltpu.make_async_copy`).
#[must_use = "a copy descriptor does nothing until `start()`"]
pub struct AsyncCopy<'c, 'a> {
    ctx: &'c Ctx<'a>,
    dma: Option<Dma>,
}

/// A remote DMA descriptor (`pltpu.make_async_remote_copy`): push-only.
#[must_use = "a copy descriptor does nothing until `start()`"]
pub struct AsyncRemoteCopy<'c, 'a> {
    ctx: &'c Ctx<'a>,
    dma: Option<Dma>,
    /// The issuer's own recv semaphore, for `wait_recv` on the receiving side.
    own_recv: Option<SemRef>,
}

impl<'a> Ctx<'a> {
    #[track_caller]
    pub(super) fn site(&self, op: &'static str) -> OpSite {
        OpSite::new(
            u32::try_from(self.device).expect("fewer than 2^32 devices"),
            u32::try_from(self.grid_linear).expect("fewer than 2^32 grid points"),
            op,
            // Not in a closure: `Location::caller` must run in this `#[track_caller]` fn.
            self.source.get().unwrap_or(Location::caller().into()),
        )
        .in_iteration(self.iteration.get())
    }

    /// Attributes the calls that follow to `loc` instead of the Rust line that makes
    /// them (`None`: back to the Rust caller's line). This is how a front end for kernels
    /// written in another language (the Python package) makes every report, trace-time
    /// error and verifier finding name its kernel's own source line.
    pub fn set_source(&self, loc: Option<SourceLoc>) {
        self.source.set(loc);
    }

    /// Runs `body` as iteration `index` of a loop of the kernel (the loop at the
    /// caller's line, nested in the iteration this call is in): every site recorded in
    /// it, and so every report that names one, says which iteration. No effect on
    /// execution.
    ///
    /// ```ignore
    /// for s in 0..steps {
    ///     pl.in_iteration(s, || ring_step(pl, s));
    /// }
    /// ```
    #[track_caller]
    pub fn in_iteration<R>(&self, index: usize, body: impl FnOnce() -> R) -> R {
        let outer = self.iteration.get();
        let index = u32::try_from(index).expect("fewer than 2^32 loop iterations");
        self.iteration.set(outer.within(SourceLoc::caller(), index));
        let r = body();
        self.iteration.set(outer);
        r
    }

    /// Records the calls that follow in loop iteration `iteration`
    /// ([`Iteration::NONE`]: outside every loop): how a front end that evaluates a
    /// kernel's loops itself (the Python package) names the iteration of every site.
    pub fn set_iteration(&self, iteration: Iteration) {
        self.iteration.set(iteration);
    }

    /// The loop iteration the calls are recorded in.
    pub fn iteration(&self) -> Iteration {
        self.iteration.get()
    }

    /// Reports a kernel mistake that a front end found itself (an index it resolved, a
    /// device id it computed), at the current source line: like the checks of this API,
    /// it is a finding of every command, not an abort.
    #[track_caller]
    pub fn report(&self, kind: KernelErrorKind, op: &'static str, detail: impl Into<String>) {
        let site = self.site(op);
        self.fail(site, kind, detail.into());
    }

    /// This device's linear id in the mesh.
    pub fn device(&self) -> usize {
        self.device
    }

    /// This grid point's row-major index (0 for the first point).
    pub fn grid_index(&self) -> usize {
        self.grid_linear
    }

    pub(super) fn fail(&self, site: OpSite, kind: KernelErrorKind, detail: String) {
        self.rec.borrow_mut().errors.push(KernelError {
            kind,
            site: Site {
                device: DeviceName::of(self.device, self.cores).device,
                core: DeviceName::of(self.device, self.cores).core,
                invocation: None,
                grid: self.point.clone(),
                iteration: site.iteration,
                op: site.op(),
                location: site.location.to_string(),
            },
            detail,
        });
    }

    pub(super) fn push(&self, kind: OpKind, site: OpSite) {
        self.rec.borrow_mut().ops.push(Op { kind, site });
    }

    pub(super) fn name(&self, r: &Ref) -> &str {
        self.layout.allocs.get(r.alloc).map_or("?", |a| &a.name)
    }

    /// Checks a ref used by an op; returns its view on `device`.
    pub(super) fn view(&self, r: &Ref, device: usize, site: OpSite) -> Option<View> {
        if r.fault == Some(Fault::Arg) {
            return None;
        }
        if let Some(f) = r.fault {
            self.fail(site, KernelErrorKind::OutOfBounds, f.describe(self.name(r)));
            return None;
        }
        if let Some((rows, len, stride)) = r.rows() {
            let f = Fault::rows(rows, stride, len);
            self.fail(
                site,
                KernelErrorKind::Misuse,
                format!(
                    "{}: `{}` takes a contiguous ref here (a strided window moves by DMA)",
                    f.describe(self.name(r)),
                    site.op()
                ),
            );
            return None;
        }
        Some(View::new(
            self.chip_device(r, device),
            r.alloc,
            r.offset,
            r.numel(),
        ))
    }

    /// HBM belongs to the chip: its cores address it on the first one.
    fn chip_device(&self, r: &Ref, device: usize) -> usize {
        if r.space == MemorySpace::Any {
            device - device % self.cores.max(1)
        } else {
            device
        }
    }

    /// What a DMA of `r` on `device` moves: its rows, or one contiguous run.
    pub(super) fn block(&self, r: &Ref, device: usize, site: OpSite) -> Option<Block> {
        let Some((rows, len, stride)) = r.rows() else {
            return self.view(r, device, site).map(Block::from);
        };
        if r.fault == Some(Fault::Arg) {
            return None;
        }
        if let Some(f) = r.fault {
            self.fail(site, KernelErrorKind::OutOfBounds, f.describe(self.name(r)));
            return None;
        }
        let size = self.layout.allocs[r.alloc].numel();
        let end = r.offset + (rows - 1) * stride + len;
        if end > size {
            self.fail(
                site,
                KernelErrorKind::OutOfBounds,
                format!(
                    "`{}` as {rows} rows of {len} elements {stride} apart from element {} ends at element {end} of {size}",
                    self.name(r),
                    r.offset
                ),
            );
            return None;
        }
        let first = View::new(self.chip_device(r, device), r.alloc, r.offset, len);
        Block::new(first, rows, stride)
    }

    fn sem_ref(&self, s: &Sem, device: usize, want: &[SemKind], site: OpSite) -> Option<SemRef> {
        if s.fault == Some(Fault::Arg) {
            return None;
        }
        let name = &self.layout.sems[s.base].name;
        let base = name.split('[').next().unwrap_or(name);
        if let Some(f) = s.fault {
            self.fail(site, KernelErrorKind::OutOfBounds, f.describe(base));
            return None;
        }
        if s.is_array {
            self.fail(
                site,
                KernelErrorKind::Misuse,
                format!(
                    "`{base}` is an array of {} semaphores: pick one with `.at(i)`",
                    s.count
                ),
            );
            return None;
        }
        if !want.contains(&s.kind) {
            self.fail(
                site,
                KernelErrorKind::Misuse,
                format!(
                    "`{name}` is a {:?} semaphore; `{}` needs {:?}",
                    s.kind,
                    site.op(),
                    want
                ),
            );
            return None;
        }
        Some(SemRef::new(device, s.base))
    }

    pub(super) fn same_shape(&self, a: &Ref, b: &Ref, site: OpSite) -> bool {
        if a.fault == Some(Fault::Arg) || b.fault == Some(Fault::Arg) {
            return false;
        }
        // A DMA moves bytes: dtypes of one width move the same elements.
        let same_bits = a.dtype == b.dtype || crate::ir::bitcastable(a.dtype, b.dtype);
        if a.shape() != b.shape() || !same_bits {
            self.fail(
                site,
                KernelErrorKind::ShapeMismatch,
                format!(
                    "`{}` is {:?} {} but `{}` is {:?} {}",
                    self.name(a),
                    a.shape(),
                    a.dtype,
                    self.name(b),
                    b.shape(),
                    b.dtype
                ),
            );
            return false;
        }
        true
    }

    pub(super) fn resolve(&self, id: &DeviceId, site: OpSite) -> Option<usize> {
        match self.mesh.resolve(id) {
            Ok(d) => Some(d),
            Err(msg) => {
                self.fail(site, KernelErrorKind::DeviceIdOutOfRange, msg);
                None
            }
        }
    }

    /// `pl.program_id(axis)`: this grid point's coordinate on `axis`.
    #[track_caller]
    pub fn program_id(&self, axis: usize) -> i64 {
        self.grid_axis(axis, &self.point, "program_id", 0)
    }

    /// `pl.num_programs(axis)`: the grid's size on `axis`.
    #[track_caller]
    pub fn num_programs(&self, axis: usize) -> i64 {
        self.grid_axis(axis, self.grid, "num_programs", 1)
    }

    /// `of[axis]` (this point's coordinates or the grid's sizes), or a kernel error of
    /// `op` and `fallback` when the grid has no such axis.
    #[track_caller]
    fn grid_axis(&self, axis: usize, of: &[usize], op: &'static str, fallback: i64) -> i64 {
        if let Some(v) = of.get(axis) {
            return *v as i64;
        }
        let site = self.site(op);
        self.fail(
            site,
            KernelErrorKind::OutOfBounds,
            format!(
                "grid axis {axis} does not exist (the grid is {:?})",
                self.grid
            ),
        );
        fallback
    }

    /// `lax.axis_index(name)`: this device's coordinate on mesh axis `name`.
    #[track_caller]
    pub fn axis_index(&self, name: &str) -> i64 {
        match self.mesh.axis_position(name) {
            Some(p) => self.mesh.coords(self.device)[p] as i64,
            None => {
                let site = self.site("axis_index");
                self.fail(
                    site,
                    KernelErrorKind::Misuse,
                    format!(
                        "the mesh has no axis `{name}` (axes: {:?})",
                        self.mesh.axes()
                    ),
                );
                0
            }
        }
    }

    /// Whether the mesh has an axis called `name` (a kernel written for a 2-D torus can
    /// also serve the 1-D mesh as its P x 1 case).
    pub fn has_axis(&self, name: &str) -> bool {
        self.mesh.axis_position(name).is_some()
    }

    /// Number of devices on mesh axis `name` (`lax.psum(1, name)` / `num_devices`).
    #[track_caller]
    pub fn axis_size(&self, name: &str) -> i64 {
        match self.mesh.axis_position(name) {
            Some(p) => self.mesh.axes()[p].1 as i64,
            None => {
                let site = self.site("axis_size");
                self.fail(
                    site,
                    KernelErrorKind::Misuse,
                    format!(
                        "the mesh has no axis `{name}` (axes: {:?})",
                        self.mesh.axes()
                    ),
                );
                1
            }
        }
    }

    /// Total number of devices in the mesh.
    pub fn num_devices(&self) -> i64 {
        self.mesh.size() as i64
    }

    /// `pltpu.make_async_copy(src, dst, sem)`: a local DMA; completion adds its bytes to `sem`.
    #[track_caller]
    pub fn make_async_copy<'c>(&'c self, src: Ref, dst: Ref, sem: Sem) -> AsyncCopy<'c, 'a> {
        let site = self.site("make_async_copy");
        let dma = (|| {
            let s = self.block(&src, self.device, site)?;
            let d = self.block(&dst, self.device, site)?;
            let sem = self.sem_ref(&sem, self.device, DMA_SIGNALS, site)?;
            self.same_shape(&src, &dst, site).then_some(())?;
            Some(Dma {
                src: s,
                dst: d,
                send_sem: None,
                recv_sem: sem,
                bytes: src.bytes(),
                origin: site,
            })
        })();
        AsyncCopy { ctx: self, dma }
    }

    /// `pltpu.make_async_remote_copy(src, dst, send_sem, recv_sem, device_id)`: this
    /// device pushes `src` into `dst` on `device_id`. Two separate completions, in either
    /// order: the send completion adds the bytes to `send_sem` here (the source has been
    /// read), the receive completion to `recv_sem` on the target (the destination has
    /// been written).
    #[track_caller]
    pub fn make_async_remote_copy<'c>(
        &'c self,
        src: Ref,
        dst: Ref,
        send_sem: Sem,
        recv_sem: Sem,
        device_id: impl Into<DeviceId>,
    ) -> AsyncRemoteCopy<'c, 'a> {
        let site = self.site("make_async_remote_copy");
        let id = device_id.into();
        let own_recv = self.sem_ref(&recv_sem, self.device, DMA_SIGNALS, site);
        let dma = (|| {
            let target = self.resolve(&id, site)?;
            let s = self.block(&src, self.device, site)?;
            let d = self.block(&dst, target, site)?;
            let send = self.sem_ref(&send_sem, self.device, DMA_SIGNALS, site)?;
            let recv = self.sem_ref(&recv_sem, target, DMA_SIGNALS, site)?;
            self.same_shape(&src, &dst, site).then_some(())?;
            Some(Dma {
                src: s,
                dst: d,
                send_sem: Some(send),
                recv_sem: recv,
                bytes: src.bytes(),
                origin: site,
            })
        })();
        AsyncRemoteCopy {
            ctx: self,
            dma,
            own_recv,
        }
    }

    /// `pl.semaphore_signal(sem, inc, device_id=…)`: adds `inc` to `sem` on `device_id`
    /// (this device when `None`). The device id is the same type `make_async_remote_copy`
    /// takes: `right`, `DeviceId::Logical(3)`, `Some(right.into())`, or `None`.
    #[track_caller]
    pub fn semaphore_signal(&self, sem: Sem, inc: i64, device_id: impl SignalTarget) {
        let site = self.site("semaphore_signal");
        let device_id = device_id.device_id();
        let target = match &device_id {
            Some(id) => match self.resolve(id, site) {
                Some(t) => t,
                None => return,
            },
            None => self.device,
        };
        if inc < 0 {
            self.fail(
                site,
                KernelErrorKind::Misuse,
                format!("semaphore_signal with a negative increment {inc}"),
            );
            return;
        }
        if let Some(s) = self.sem_ref(&sem, target, &[SemKind::Regular, SemKind::Barrier], site) {
            self.push(
                OpKind::Signal {
                    sem: s,
                    inc: inc as u64,
                    set: false,
                },
                site,
            );
        }
    }

    /// `pl.semaphore_read(sem)`: writes the semaphore's value when the op runs into `dst`,
    /// one int32 element in VMEM. The value depends on the schedule (what was signalled and
    /// waited for by then), which is decided after tracing, so it reaches the kernel as data
    /// only, never as a trace-time number.
    #[track_caller]
    pub fn semaphore_read(&self, sem: Sem, dst: Ref) {
        let site = self.site("semaphore_read");
        let Some(s) = self.sem_ref(
            &sem,
            self.device,
            &[SemKind::Regular, SemKind::Dma, SemKind::Barrier],
            site,
        ) else {
            return;
        };
        let Some(d) = self.vmem_view(&dst, site) else {
            return;
        };
        if d.len() != 1 || dst.dtype != DType::I32 {
            self.fail(
                site,
                KernelErrorKind::Misuse,
                format!(
                    "semaphore_read writes one int32 element; `{}` is {:?} {}",
                    self.name(&dst),
                    dst.shape(),
                    dst.dtype
                ),
            );
            return;
        }
        self.push(OpKind::SemRead { sem: s, dst: d }, site);
    }

    /// `pl.semaphore_wait(sem, value)`: blocks until `sem >= value`, then subtracts `value`.
    #[track_caller]
    pub fn semaphore_wait(&self, sem: Sem, value: i64) {
        let site = self.site("semaphore_wait");
        if value < 0 {
            self.fail(
                site,
                KernelErrorKind::Misuse,
                format!("semaphore_wait for a negative value {value}"),
            );
            return;
        }
        if let Some(s) = self.sem_ref(
            &sem,
            self.device,
            &[SemKind::Regular, SemKind::Barrier],
            site,
        ) {
            self.push(
                OpKind::Wait {
                    sem: s,
                    amount: value as u64,
                    why: WaitKind::Semaphore,
                    cmp: Cmp::Ge,
                },
                site,
            );
        }
    }

    /// `pltpu.get_barrier_semaphore()`: needs a `collective_id` in the spec.
    #[track_caller]
    pub fn get_barrier_semaphore(&self) -> Sem {
        match self.barrier {
            Some(s) => s,
            None => {
                let site = self.site("get_barrier_semaphore");
                self.fail(
                    site,
                    KernelErrorKind::Misuse,
                    "the barrier semaphore needs a collective_id in the GridSpec".into(),
                );
                Sem {
                    base: 0,
                    count: 0,
                    cols: 0,
                    is_array: false,
                    kind: SemKind::Barrier,
                    fault: None,
                }
            }
        }
    }

    pub(super) fn vmem_view(&self, r: &Ref, site: OpSite) -> Option<View> {
        if r.space != MemorySpace::Vmem {
            self.fail(
                site,
                KernelErrorKind::HbmInCompute,
                format!(
                    "`{}` lives in HBM (memory_space=ANY); compute may only touch VMEM, so DMA it into a VMEM buffer first",
                    self.name(r)
                ),
            );
            return None;
        }
        self.view(r, self.device, site)
    }

    /// Marks the end of a step for `tpusim trace`, in kernels that loop inside one grid
    /// point (as seed 003's does): the step table gets a row once every device passed
    /// its k-th mark. No effect on execution, checking or timing.
    #[track_caller]
    pub fn trace_step(&self, label: impl Into<String>) {
        let site = self.site("trace_step");
        let label: String = label.into();
        self.push(OpKind::Mark(label.into()), site);
    }

    /// `dst[...] = jnp.full_like(dst, value)` (VMEM only).
    #[track_caller]
    pub fn fill(&self, dst: Ref, value: f64) {
        let site = self.site("fill");
        if let Some(d) = self.vmem_view(&dst, site) {
            self.push(
                OpKind::Compute(Box::new(DataOp::Fill {
                    dst: d,
                    bits: dst.dtype.bits_of(value),
                })),
                site,
            );
        }
    }

    /// `dst[...] = src[...]` (VMEM only).
    #[track_caller]
    pub fn copy(&self, dst: Ref, src: Ref) {
        let site = self.site("copy");
        let (Some(d), Some(s)) = (self.vmem_view(&dst, site), self.vmem_view(&src, site)) else {
            return;
        };
        if self.same_shape(&dst, &src, site) {
            self.push(
                OpKind::Compute(Box::new(DataOp::Copy { src: s, dst: d })),
                site,
            );
        }
    }

    /// `dst[...] += src[...]` (VMEM only).
    #[track_caller]
    pub fn add_assign(&self, dst: Ref, src: Ref) {
        self.accumulate_at(dst, src, ReduceOp::Sum, self.site("add_assign"));
    }

    /// `dst[...] = op(dst[...], src[...])` for sum, max or min (VMEM only).
    #[track_caller]
    pub fn accumulate(&self, dst: Ref, src: Ref, op: ReduceOp) {
        self.accumulate_at(dst, src, op, self.site("accumulate"));
    }

    fn accumulate_at(&self, dst: Ref, src: Ref, op: ReduceOp, site: OpSite) {
        let (Some(d), Some(s)) = (self.vmem_view(&dst, site), self.vmem_view(&src, site)) else {
            return;
        };
        if !DType::COLLECTIVE.contains(&dst.dtype) {
            self.fail(
                site,
                KernelErrorKind::Misuse,
                format!(
                    "an accumulate takes f32, i32, f16 or bf16, not {} (`{}`): use the value ops",
                    dst.dtype,
                    self.name(&dst)
                ),
            );
            return;
        }
        if src.dtype != dst.dtype {
            self.fail(
                site,
                KernelErrorKind::ShapeMismatch,
                format!(
                    "an accumulate combines one dtype, not {} into {} (`{}`)",
                    src.dtype,
                    dst.dtype,
                    self.name(&dst)
                ),
            );
            return;
        }
        if self.same_shape(&dst, &src, site) {
            self.push(
                OpKind::Compute(Box::new(DataOp::Accumulate {
                    dst: d,
                    src: s,
                    op,
                    dtype: dst.dtype,
                })),
                site,
            );
        }
    }

    fn start_dma(&self, dma: &Option<Dma>, site: OpSite) {
        if let Some(d) = dma {
            let mut rec = self.rec.borrow_mut();
            let id = self.dma_base + rec.dmas.len();
            let mut d = d.clone();
            d.origin = site;
            rec.dmas.push(d);
            rec.ops.push(Op {
                kind: OpKind::DmaStart(id),
                site,
            });
        }
    }

    fn wait_on(&self, sem: Option<SemRef>, amount: u64, why: WaitKind, site: OpSite) {
        if let Some(s) = sem {
            if self.layout.sems[s.sem()].kind == SemKind::Regular {
                self.fail(
                    site,
                    KernelErrorKind::Misuse,
                    format!(
                        "`{}` is a REGULAR semaphore: a DMA adds one to it per completion, so wait for it with semaphore_wait(sem, 1), not `{}`",
                        self.layout.sems[s.sem()].name,
                        site.op()
                    ),
                );
                return;
            }
            self.push(
                OpKind::Wait {
                    sem: SemRef::new(self.device, s.sem()),
                    amount,
                    why,
                    cmp: Cmp::Ge,
                },
                site,
            );
        }
    }

    /// Waits until this device's DMA semaphore `sem` holds `bytes`, then subtracts them:
    /// what a descriptor's `wait` (`side` [`DmaSide::Local`]), `wait_send` or `wait_recv`
    /// does, for a front end whose waits name only the semaphore and the size (a
    /// jaxpr's `dma_wait` equation: the descriptor need not have been started, or even
    /// be in bounds).
    #[track_caller]
    pub fn dma_wait(&self, sem: Sem, bytes: u64, side: DmaSide) {
        let (op, why) = match side {
            DmaSide::Local => ("wait", WaitKind::DmaWait),
            DmaSide::Send => ("wait_send", WaitKind::WaitSend),
            DmaSide::Recv => ("wait_recv", WaitKind::WaitRecv),
        };
        let site = self.site(op);
        let s = self.sem_ref(&sem, self.device, DMA_SIGNALS, site);
        self.wait_on(s, bytes, why, site);
    }

    /// `pl.run_scoped(second=pltpu.SemaphoreType.REGULAR)`: runs `body` with a REGULAR
    /// semaphore that exists only inside the scope (the same slot on every device).
    #[track_caller]
    pub fn run_scoped<R>(&self, body: impl FnOnce(Sem) -> R) -> Option<R> {
        let depth = self.scoped_depth.get();
        if depth >= MAX_SCOPED {
            let site = self.site("run_scoped");
            self.fail(
                site,
                KernelErrorKind::Misuse,
                format!("run_scoped nests deeper than {MAX_SCOPED} levels"),
            );
            return None;
        }
        self.scoped_depth.set(depth + 1);
        let r = body(Sem {
            base: self.scoped_base + depth,
            count: 1,
            cols: 0,
            is_array: false,
            kind: SemKind::Regular,
            fault: None,
        });
        self.scoped_depth.set(depth);
        Some(r)
    }
}

impl AsyncCopy<'_, '_> {
    /// Starts the DMA; it is in flight until its semaphore is credited.
    #[track_caller]
    pub fn start(&self) {
        self.ctx.start_dma(&self.dma, self.ctx.site("start"));
    }

    /// Blocks until the semaphore holds this copy's bytes, then subtracts them.
    #[track_caller]
    pub fn wait(&self) {
        let site = self.ctx.site("wait");
        if let Some(d) = &self.dma {
            self.ctx
                .wait_on(Some(d.recv_sem), d.bytes, WaitKind::DmaWait, site);
        }
    }
}

impl AsyncRemoteCopy<'_, '_> {
    /// Starts the DMA; it is in flight until both semaphores are credited.
    #[track_caller]
    pub fn start(&self) {
        self.ctx.start_dma(&self.dma, self.ctx.site("start"));
    }

    /// `wait_send()` then `wait_recv()`.
    #[track_caller]
    pub fn wait(&self) {
        let site = self.ctx.site("wait");
        self.wait_send_at(site);
        self.wait_recv_at(site);
    }

    /// Blocks until this device's `send_sem` holds the source's bytes, then subtracts them.
    #[track_caller]
    pub fn wait_send(&self) {
        self.wait_send_at(self.ctx.site("wait_send"));
    }

    /// Blocks until this device's `recv_sem` holds the destination's bytes (what a
    /// peer sent here with the same shapes), then subtracts them.
    #[track_caller]
    pub fn wait_recv(&self) {
        self.wait_recv_at(self.ctx.site("wait_recv"));
    }

    fn wait_send_at(&self, site: OpSite) {
        if let Some(d) = &self.dma {
            self.ctx
                .wait_on(d.send_sem, d.bytes, WaitKind::WaitSend, site);
        }
    }

    fn wait_recv_at(&self, site: OpSite) {
        if let Some(d) = &self.dma {
            self.ctx
                .wait_on(self.own_recv, d.bytes, WaitKind::WaitRecv, site);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::kernel::{GridSpec, MemorySpace, PallasCall, SourceLoc};
    use crate::{DType, Mesh};

    #[test]
    fn set_source_attributes_ops_and_errors_to_that_line() {
        let spec = GridSpec::new()
            .input("x_ref", MemorySpace::Any, &[2], DType::F32)
            .output("y_ref", MemorySpace::Any, &[2], DType::F32)
            .dma_sem("sem");
        let call = PallasCall::new("k", spec, |pl, a| {
            pl.set_source(Some(SourceLoc::intern("kernel.py", 7)));
            let c = pl.make_async_copy(a.r("x_ref"), a.r("y_ref"), a.sem("sem"));
            c.start();
            pl.set_source(None);
            c.wait();
            pl.set_source(Some(SourceLoc::intern("kernel.py", 9)));
            pl.semaphore_signal(a.sem("sem"), 1, 5i64);
        });
        let mesh = Mesh::new(2, "x").unwrap();
        let (program, errors) = call.trace(&mesh).unwrap();
        let ops = &program.ops[0];
        assert_eq!(ops[0].site.location.to_string(), "kernel.py:7");
        assert!(ops[1].site.location.file().ends_with("ctx.rs"));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].site.location, "kernel.py:9");
        let a = SourceLoc::intern("kernel.py", 1);
        assert!(std::ptr::eq(
            a.file(),
            SourceLoc::intern("kernel.py", 2).file()
        ));
    }
}
