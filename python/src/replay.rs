//! The Pallas front end's Rust half: a `pallas_call`'s kernel jaxpr, evaluated by
//! `tpusim/_jaxpr.py` once per device and grid point, arrives here as a list of recorded
//! calls per (device, grid point), each with the Python file and line of its equation.
//! [`python_call`] turns them into an ordinary [`PallasCall`] whose kernel replays each
//! list on the Rust [`Ctx`], line attributed by [`Ctx::set_source`]. From there on the
//! kernel is like any Rust kernel: the same checks at trace time, scheduler, verifier,
//! step tables, cost model and executors.

use serde::{Deserialize, Deserializer};
use std::sync::Arc;
use tpusim::ir::{Binary, Comparison, ComputeKind, DotDims, Reduction, SemKind, Unary};
use tpusim::kernel::Value;
use tpusim::kernel::{
    ds, Args, AsyncCopy, AsyncRemoteCopy, Ctx, DmaSide, GridSpec, Iteration, KernelErrorKind,
    MemorySpace, PallasCall, ReduceOp, Ref, Sem, SourceLoc,
};
use tpusim::{DType, DeviceId, Error, Result};

/// A Python source line, interned when the recording is read.
#[derive(Clone, Copy, Debug)]
pub struct Loc(pub SourceLoc);

impl<'de> Deserialize<'de> for Loc {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let (file, line): (String, u32) = Deserialize::deserialize(d)?;
        Ok(Loc(SourceLoc::intern(&file, line)))
    }
}

/// A ref as the kernel named it: argument position, then `.at[i]` (`[0, i, 0]`) and
/// `pl.ds(start, size)` (`[1, start, size]`) steps on the leading dimension, or a run of
/// `len` elements from element `offset` of the whole view (`[2, offset, len]`: how the
/// jaxpr front end addresses a window that leading-dimension steps cannot express),
/// which `[4, rows, stride]` makes the first of `rows` rows `stride` elements apart (a
/// window a DMA moves as one).
#[derive(Clone, Debug, Deserialize)]
pub struct RefPath(pub(crate) usize, pub(crate) Vec<(u8, i64, i64)>);

/// Where a semaphore comes from.
#[derive(Clone, Copy, Debug, Deserialize)]
pub enum SemSrc {
    /// A kernel argument (scratch semaphore or array), by position.
    Arg(usize),
    /// The result of the n-th `get_barrier_semaphore()` call of this grid point.
    Barrier(usize),
}

/// A semaphore and, for an array, the `.at[i]` index.
#[derive(Clone, Copy, Debug, Deserialize)]
pub struct SemPath(pub(crate) SemSrc, pub(crate) Option<i64>);

/// A `device_id` with its `device_id_type`.
#[derive(Clone, Debug, Deserialize)]
pub enum Dev {
    /// `DeviceIdType.MESH`: coordinates.
    Mesh(Vec<i64>),
    /// `DeviceIdType.LOGICAL`: a linear id.
    Logical(i64),
}

impl From<&Dev> for DeviceId {
    fn from(d: &Dev) -> Self {
        match d {
            Dev::Mesh(c) => DeviceId::Mesh(c.clone()),
            Dev::Logical(i) => DeviceId::Logical(*i),
        }
    }
}

/// The reduction of `dst[...] = dst[...] op src[...]`.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reduce {
    /// `+=`.
    Sum,
    /// `jnp.maximum`.
    Max,
    /// `jnp.minimum`.
    Min,
}

/// One recorded kernel call.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// `pltpu.make_async_copy(src, dst, sem)`, descriptor `id` of this grid point.
    LocalCopy {
        id: usize,
        src: RefPath,
        dst: RefPath,
        sem: SemPath,
        at: Loc,
    },
    /// `pltpu.make_async_remote_copy(src, dst, send_sem, recv_sem, device_id)`.
    RemoteCopy {
        id: usize,
        src: RefPath,
        dst: RefPath,
        send_sem: SemPath,
        recv_sem: SemPath,
        dev: Dev,
        at: Loc,
    },
    /// `descriptor.start()`.
    Start { id: usize, at: Loc },
    /// `descriptor.wait()`.
    Wait { id: usize, at: Loc },
    /// `descriptor.wait_send()`.
    WaitSend { id: usize, at: Loc },
    /// `descriptor.wait_recv()`.
    WaitRecv { id: usize, at: Loc },
    /// `pl.semaphore_signal(sem, inc, device_id=…)`.
    Signal {
        sem: SemPath,
        inc: i64,
        dev: Option<Dev>,
        at: Loc,
    },
    /// `pl.semaphore_wait(sem, value)`.
    SemWait { sem: SemPath, value: i64, at: Loc },
    /// `pl.semaphore_read(sem)`, its value written into `dst` (one int32) when it runs.
    SemRead { sem: SemPath, dst: RefPath, at: Loc },
    /// `dst[...] = jnp.zeros_like(dst)` (and `full_like`, `ones_like`, …).
    Fill { dst: RefPath, value: f64, at: Loc },
    /// `dst[...] = src[...]`.
    Copy { dst: RefPath, src: RefPath, at: Loc },
    /// `dst[...] += src[...]`, `jnp.maximum`, `jnp.minimum`.
    Accumulate {
        dst: RefPath,
        src: RefPath,
        reduce: Reduce,
        at: Loc,
    },
    /// `pltpu.get_barrier_semaphore()`.
    Barrier { at: Loc },
    /// `x_ref[...]` (or a window of it: `start`, `shape`, `strides`) into value `id`.
    Load {
        id: usize,
        src: RefPath,
        #[serde(default)]
        window: Option<Window>,
        at: Loc,
    },
    /// A constant value `id` (`jnp.full(shape, value, dtype)`).
    Full {
        id: usize,
        shape: Vec<usize>,
        value: f64,
        dtype: String,
        at: Loc,
    },
    /// A constant array value `id` (`jnp.array` literals, masks and tables the kernel
    /// computes from iotas): the call's constant `data`, of `shape` and `dtype`.
    Const {
        id: usize,
        data: usize,
        shape: Vec<usize>,
        dtype: String,
        at: Loc,
    },
    /// One lax primitive on values `args` into value `id`.
    Compute {
        id: usize,
        kind: KindRec,
        args: Vec<usize>,
        shape: Vec<usize>,
        dtype: String,
        at: Loc,
    },
    /// `dst[...] = value` (or into the window at `start`).
    Store {
        dst: RefPath,
        src: usize,
        #[serde(default)]
        start: Option<Vec<usize>>,
        at: Loc,
    },
    /// A `dma_wait` equation: wait for `bytes` on this device's `sem`.
    DmaWait {
        sem: SemPath,
        bytes: u64,
        side: Side,
        at: Loc,
    },
    /// A scalar the kernel reads to decide what it does next (traced while it runs,
    /// `tpusim/_steer.py`): value `value` (a vector it computed), or `src` of a ref
    /// (an SMEM element), the tracer given `fetch` (`src` or the whole buffer).
    Read {
        #[serde(default)]
        value: Option<usize>,
        #[serde(default)]
        src: Option<RefPath>,
        #[serde(default)]
        fetch: Option<RefPath>,
        at: Loc,
    },
    /// The calls that follow are in these loop iterations (each loop's line and the
    /// iteration, outermost first; none: outside every loop).
    Iter { loops: Vec<(Loc, u32)> },
    /// A step mark (`tpusim.trace_step(label)`, or the end of a loop iteration that
    /// communicated): a row of the step table.
    Mark { label: String, at: Loc },
    /// A mistake the front end found itself (an index or a device id it resolved).
    Error {
        kind: ErrorKind,
        what: String,
        detail: String,
        at: Loc,
    },
}

/// A window of a ref: first element, shape and step per dimension.
#[derive(Clone, Debug, Deserialize)]
pub struct Window {
    pub(crate) start: Vec<usize>,
    pub(crate) shape: Vec<usize>,
    pub(crate) strides: Vec<usize>,
}

/// A compute op's kind as the front end names it: the lax primitive and its parameters.
#[derive(Clone, Debug, Deserialize)]
pub struct KindRec {
    pub(crate) k: String,
    #[serde(default)]
    pub(crate) op: String,
    #[serde(default)]
    pub(crate) n: i32,
    #[serde(default)]
    pub(crate) dims: Vec<usize>,
    #[serde(default)]
    pub(crate) dim: usize,
    #[serde(default)]
    pub(crate) start: Vec<usize>,
    #[serde(default)]
    pub(crate) strides: Vec<usize>,
    #[serde(default)]
    pub(crate) lhs_contract: Vec<usize>,
    #[serde(default)]
    pub(crate) rhs_contract: Vec<usize>,
    #[serde(default)]
    pub(crate) lhs_batch: Vec<usize>,
    #[serde(default)]
    pub(crate) rhs_batch: Vec<usize>,
}

impl KindRec {
    fn reduction(&self) -> Option<Reduction> {
        Some(match self.op.as_str() {
            "sum" => Reduction::Sum,
            "max" => Reduction::Max,
            "min" => Reduction::Min,
            _ => return None,
        })
    }

    /// The core's kind, or None for a name it does not know.
    fn kind(&self) -> Option<ComputeKind> {
        use ComputeKind as K;
        Some(match self.k.as_str() {
            "unary" => K::Unary(Unary::from_name(&self.op, self.n)?),
            "binary" => K::Binary(Binary::from_name(&self.op)?),
            "compare" => K::Compare(Comparison::from_name(&self.op)?),
            "select" => K::Select,
            "convert" => K::Convert,
            "broadcast" => K::Broadcast {
                dims: self.dims.clone(),
            },
            "reshape" => K::Reshape,
            "bitcast" => K::Bitcast,
            "transpose" => K::Transpose {
                perm: self.dims.clone(),
            },
            "iota" => K::Iota { dim: self.dim },
            "slice" => K::Slice {
                start: self.start.clone(),
                strides: self.strides.clone(),
            },
            "update_slice" => K::UpdateSlice {
                start: self.start.clone(),
            },
            "concat" => K::Concat { dim: self.dim },
            "reduce" => K::Reduce {
                op: self.reduction()?,
                axes: self.dims.clone(),
            },
            "arg_reduce" => K::ArgReduce {
                op: self.reduction()?,
                axis: self.dim,
            },
            "dot" => K::Dot(DotDims {
                lhs_contract: self.lhs_contract.clone(),
                rhs_contract: self.rhs_contract.clone(),
                lhs_batch: self.lhs_batch.clone(),
                rhs_batch: self.rhs_batch.clone(),
            }),
            _ => return None,
        })
    }
}

/// The completion of an [`Op::DmaWait`].
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// A local copy's.
    Local,
    /// A remote copy's send completion.
    Send,
    /// A remote copy's receive completion.
    Recv,
}

/// The kinds of [`Op::Error`].
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// An index or slice outside its ref.
    OutOfBounds,
    /// A device id outside the mesh.
    DeviceIdOutOfRange,
    /// A ref or semaphore used in a way its kind does not allow.
    Misuse,
    /// Two views of one op whose sizes or dtypes differ.
    ShapeMismatch,
}

/// The iteration context of loop iterations `loops` (each loop's line and iteration,
/// outermost first).
pub fn iteration(loops: &[(Loc, u32)]) -> Iteration {
    loops
        .iter()
        .fold(Iteration::NONE, |it, (at, n)| it.within(at.0, *n))
}

/// Every device's recorded calls, per grid point (row-major).
pub type Recording = Vec<Vec<Vec<Op>>>;

/// Reads a recording from the Python objects the front end made (lists of dicts of
/// numbers, strings and lists: typed values, every float exact, infinities and NaN
/// included) through the serde derives: the reference `crate::records`' reader is
/// tested against.
pub fn read_recording_serde(obj: &pyo3::Bound<'_, pyo3::PyAny>) -> Result<Recording> {
    pythonize::depythonize(obj)
        .map_err(|e| Error::bad_input(format!("malformed kernel recording: {e}")))
}

enum Desc<'c, 'a> {
    Local(AsyncCopy<'c, 'a>),
    Remote(AsyncRemoteCopy<'c, 'a>),
}

/// Replays one grid point's calls on a [`Ctx`].
struct Replay<'c, 'a> {
    pl: &'c Ctx<'a>,
    args: &'c Args,
    /// The call's constant arrays, as words.
    constants: &'c [Arc<[u32]>],
    descs: Vec<Option<Desc<'c, 'a>>>,
    /// The grid point's values by id (dropped, their storage returned, at its end).
    values: Vec<Option<Value<'c>>>,
    barriers: Vec<Sem>,
}

impl<'c, 'a> Replay<'c, 'a> {
    fn r(&self, p: &RefPath) -> Ref {
        p.1.iter()
            .fold(self.args.r(p.0), |r, &(kind, a, b)| match kind {
                0 => r.at(a),
                1 => r.slice(ds(a, b)),
                4 => r.rows_of(a.max(0) as usize, b.max(0) as usize),
                _ => r.flat().slice(ds(a, b)),
            })
    }

    fn sem(&self, p: &SemPath) -> Sem {
        let s = match p.0 {
            SemSrc::Arg(i) => self.args.sem(i),
            SemSrc::Barrier(i) => self.barriers[i],
        };
        match p.1 {
            Some(i) => s.at(i),
            None => s,
        }
    }

    fn put(&mut self, id: usize, d: Desc<'c, 'a>) {
        if self.descs.len() <= id {
            self.descs.resize_with(id + 1, || None);
        }
        self.descs[id] = Some(d);
    }

    fn put_value(&mut self, id: usize, v: Value<'c>) {
        if self.values.len() <= id {
            self.values.resize_with(id + 1, || None);
        }
        self.values[id] = Some(v);
    }

    fn value(&self, id: usize) -> &Value<'c> {
        self.values[id]
            .as_ref()
            .expect("the recording uses only values it made")
    }

    fn desc(&self, id: usize) -> &Desc<'c, 'a> {
        self.descs[id]
            .as_ref()
            .expect("the recording starts or waits only descriptors it made")
    }

    fn run(&mut self, ops: &[Op]) {
        let pl = self.pl;
        let drops = last_uses(ops);
        for (k, op) in ops.iter().enumerate() {
            // Values whose last use was the op before: their storage goes back now, so
            // that a long grid point's temporaries are not all live at once.
            if let Some(j) = k.checked_sub(1) {
                for &id in drops.of(j) {
                    if let Some(v) = self.values.get_mut(id) {
                        *v = None;
                    }
                }
            }
            match op {
                Op::LocalCopy {
                    id,
                    src,
                    dst,
                    sem,
                    at,
                } => {
                    pl.set_source(Some(at.0));
                    let d = pl.make_async_copy(self.r(src), self.r(dst), self.sem(sem));
                    self.put(*id, Desc::Local(d));
                }
                Op::RemoteCopy {
                    id,
                    src,
                    dst,
                    send_sem,
                    recv_sem,
                    dev,
                    at,
                } => {
                    pl.set_source(Some(at.0));
                    let d = pl.make_async_remote_copy(
                        self.r(src),
                        self.r(dst),
                        self.sem(send_sem),
                        self.sem(recv_sem),
                        DeviceId::from(dev),
                    );
                    self.put(*id, Desc::Remote(d));
                }
                Op::Start { id, at } => {
                    pl.set_source(Some(at.0));
                    match self.desc(*id) {
                        Desc::Local(d) => d.start(),
                        Desc::Remote(d) => d.start(),
                    }
                }
                Op::Wait { id, at } => {
                    pl.set_source(Some(at.0));
                    match self.desc(*id) {
                        Desc::Local(d) => d.wait(),
                        Desc::Remote(d) => d.wait(),
                    }
                }
                Op::WaitSend { id, at } | Op::WaitRecv { id, at } => {
                    pl.set_source(Some(at.0));
                    match (self.desc(*id), op) {
                        (Desc::Remote(d), Op::WaitSend { .. }) => d.wait_send(),
                        (Desc::Remote(d), _) => d.wait_recv(),
                        (Desc::Local(_), _) => {
                            unreachable!(
                                "the front end records wait_send/wait_recv on remote copies only"
                            )
                        }
                    }
                }
                Op::Signal { sem, inc, dev, at } => {
                    pl.set_source(Some(at.0));
                    pl.semaphore_signal(self.sem(sem), *inc, dev.as_ref().map(DeviceId::from));
                }
                Op::SemWait { sem, value, at } => {
                    pl.set_source(Some(at.0));
                    pl.semaphore_wait(self.sem(sem), *value);
                }
                Op::SemRead { sem, dst, at } => {
                    pl.set_source(Some(at.0));
                    pl.semaphore_read(self.sem(sem), self.r(dst));
                }
                Op::Fill { dst, value, at } => {
                    pl.set_source(Some(at.0));
                    pl.fill(self.r(dst), *value);
                }
                Op::Copy { dst, src, at } => {
                    pl.set_source(Some(at.0));
                    pl.copy(self.r(dst), self.r(src));
                }
                Op::Accumulate {
                    dst,
                    src,
                    reduce,
                    at,
                } => {
                    pl.set_source(Some(at.0));
                    let op = match reduce {
                        Reduce::Sum => ReduceOp::Sum,
                        Reduce::Max => ReduceOp::Max,
                        Reduce::Min => ReduceOp::Min,
                    };
                    pl.accumulate(self.r(dst), self.r(src), op);
                }
                Op::Barrier { at } => {
                    pl.set_source(Some(at.0));
                    self.barriers.push(pl.get_barrier_semaphore());
                }
                Op::Load {
                    id,
                    src,
                    window,
                    at,
                } => {
                    pl.set_source(Some(at.0));
                    let r = self.r(src);
                    let v = match window {
                        None => pl.load(r),
                        Some(w) => pl.load_strided(r, &w.start, &w.shape, &w.strides),
                    };
                    self.put_value(*id, v);
                }
                Op::Full {
                    id,
                    shape,
                    value,
                    dtype,
                    at,
                } => {
                    pl.set_source(Some(at.0));
                    let dtype = DType::parse(dtype).expect("the front end names core dtypes");
                    let v = pl.full(shape, *value, dtype);
                    self.put_value(*id, v);
                }
                Op::Const {
                    id,
                    data,
                    shape,
                    dtype,
                    at,
                } => {
                    pl.set_source(Some(at.0));
                    let dtype = DType::parse(dtype).expect("the front end names core dtypes");
                    let words = self.constants[*data].clone();
                    let v = pl.compute(ComputeKind::Constant(words), &[], shape, dtype);
                    self.put_value(*id, v);
                }
                Op::Compute {
                    id,
                    kind,
                    args,
                    shape,
                    dtype,
                    at,
                } => {
                    pl.set_source(Some(at.0));
                    let dtype = DType::parse(dtype).expect("the front end names core dtypes");
                    let Some(k) = kind.kind() else {
                        pl.report(
                            KernelErrorKind::Misuse,
                            "compute",
                            format!("no compute op `{}` `{}`", kind.k, kind.op),
                        );
                        continue;
                    };
                    let srcs: Vec<&Value<'c>> = args.iter().map(|a| self.value(*a)).collect();
                    let v = pl.compute(k, &srcs, shape, dtype);
                    self.put_value(*id, v);
                }
                Op::Store {
                    dst,
                    src,
                    start,
                    at,
                } => {
                    pl.set_source(Some(at.0));
                    let r = self.r(dst);
                    match start {
                        None => pl.store(r, self.value(*src)),
                        Some(s) => pl.store_window(r, s, self.value(*src)),
                    }
                }
                Op::DmaWait {
                    sem,
                    bytes,
                    side,
                    at,
                } => {
                    pl.set_source(Some(at.0));
                    let side = match side {
                        Side::Local => DmaSide::Local,
                        Side::Send => DmaSide::Send,
                        Side::Recv => DmaSide::Recv,
                    };
                    pl.dma_wait(self.sem(sem), *bytes, side);
                }
                Op::Read {
                    value,
                    src,
                    fetch,
                    at,
                } => {
                    pl.set_source(Some(at.0));
                    match (value, src) {
                        (Some(id), _) => pl.scalar_read_value(self.value(*id)),
                        (None, Some(src)) => {
                            let fetch = fetch.as_ref().unwrap_or(src);
                            pl.scalar_read(self.r(src), self.r(fetch));
                        }
                        (None, None) => unreachable!("the front end reads a value or a ref"),
                    }
                }
                Op::Iter { loops } => pl.set_iteration(iteration(loops)),
                Op::Mark { label, at } => {
                    pl.set_source(Some(at.0));
                    pl.trace_step(label.clone());
                }
                Op::Error {
                    kind,
                    what,
                    detail,
                    at,
                } => {
                    pl.set_source(Some(at.0));
                    let kind = match kind {
                        ErrorKind::OutOfBounds => KernelErrorKind::OutOfBounds,
                        ErrorKind::DeviceIdOutOfRange => KernelErrorKind::DeviceIdOutOfRange,
                        ErrorKind::Misuse => KernelErrorKind::Misuse,
                        ErrorKind::ShapeMismatch => KernelErrorKind::ShapeMismatch,
                    };
                    // Sites name their op by a static string: intern it as file names are.
                    let op = SourceLoc::intern(what, 0).file();
                    pl.report(kind, op, detail.clone());
                }
            }
        }
        pl.set_source(None);
        pl.set_iteration(Iteration::NONE);
    }
}

/// For each op of a grid point's recording, the values whose last use it is (or that
/// it makes and nothing uses): all ids in one array, by op, so that a long recording
/// costs two allocations rather than one per op.
struct LastUses {
    /// `ids[starts[k]..starts[k + 1]]` are op `k`'s.
    starts: Vec<usize>,
    ids: Vec<usize>,
}

impl LastUses {
    fn of(&self, k: usize) -> &[usize] {
        &self.ids[self.starts[k]..self.starts[k + 1]]
    }
}

fn last_uses(ops: &[Op]) -> LastUses {
    const NONE: usize = usize::MAX;
    let mut last: Vec<usize> = Vec::new();
    let mut mark = |id: usize, k: usize| {
        if last.len() <= id {
            last.resize(id + 1, NONE);
        }
        last[id] = k;
    };
    for (k, op) in ops.iter().enumerate() {
        match op {
            Op::Load { id, .. } | Op::Full { id, .. } | Op::Const { id, .. } => mark(*id, k),
            Op::Read { value: Some(v), .. } => mark(*v, k),
            Op::Compute { id, args, .. } => {
                for &a in args {
                    mark(a, k);
                }
                mark(*id, k);
            }
            Op::Store { src, .. } => mark(*src, k),
            _ => {}
        }
    }
    // A counting sort by op: each op's ids stay in increasing order.
    let mut starts = vec![0usize; ops.len() + 1];
    for &k in last.iter().filter(|&&k| k != NONE) {
        starts[k + 1] += 1;
    }
    for k in 0..ops.len() {
        starts[k + 1] += starts[k];
    }
    let mut next = starts.clone();
    let mut ids = vec![0usize; starts[ops.len()]];
    for (id, &k) in last.iter().enumerate() {
        if k != NONE {
            ids[next[k]] = id;
            next[k] += 1;
        }
    }
    LastUses { starts, ids }
}

/// An operand as the Python spec gives it: name, `any`/`vmem`, shape, dtype.
pub type Operand = (String, String, Vec<usize>, String);

/// A scratch entry: name, `vmem`/`dma`/`regular`, shape (for semaphores: `[]` one,
/// `[n]` an array), dtype (VMEM only).
pub type Scratch = (String, String, Vec<usize>, String);

fn space(s: &str, name: &str) -> Result<MemorySpace> {
    match s {
        "any" => Ok(MemorySpace::Any),
        "vmem" => Ok(MemorySpace::Vmem),
        _ => Err(Error::bad_input(format!(
            "operand `{name}` has memory space `{s}`; tpusim supports ANY (HBM) and VMEM"
        ))),
    }
}

/// The [`GridSpec`] of a Python kernel.
pub fn grid_spec(
    grid: &[usize],
    inputs: &[Operand],
    outputs: &[Operand],
    scratch: &[Scratch],
    collective_id: Option<u32>,
) -> Result<GridSpec> {
    let mut spec = GridSpec::new().grid(grid);
    for (name, sp, shape, dtype) in inputs {
        spec = spec.input(name, space(sp, name)?, shape, DType::parse(dtype)?);
    }
    for (name, sp, shape, dtype) in outputs {
        spec = spec.output(name, space(sp, name)?, shape, DType::parse(dtype)?);
    }
    for (name, kind, shape, dtype) in scratch {
        spec = match (kind.as_str(), shape.as_slice()) {
            ("vmem", _) => spec.vmem(name, shape, DType::parse(dtype)?),
            ("dma", []) => spec.dma_sem(name),
            ("dma", [n]) => spec.dma_sems(name, *n),
            ("regular", []) => spec.regular_sem(name),
            ("regular", [n]) => spec.regular_sems(name, *n),
            // Semaphore-typed outputs: handed on, their counts at exit the results.
            ("dma_out", []) => spec.carried_sem(name, SemKind::Dma, None),
            ("dma_out", [n]) => spec.carried_sem(name, SemKind::Dma, Some(*n)),
            ("regular_out", []) => spec.carried_sem(name, SemKind::Regular, None),
            ("regular_out", [n]) => spec.carried_sem(name, SemKind::Regular, Some(*n)),
            ("dma" | "regular" | "dma_out" | "regular_out", _) => {
                return Err(Error::bad_input(format!(
                    "scratch `{name}`: semaphore arrays of shape {shape:?}; tpusim supports one dimension"
                )))
            }
            _ => {
                return Err(Error::bad_input(format!(
                    "scratch `{name}` has kind `{kind}`; tpusim supports VMEM buffers and DMA and REGULAR semaphores"
                )))
            }
        };
    }
    if let Some(id) = collective_id {
        spec = spec.collective_id(id);
    }
    Ok(spec)
}

/// A [`PallasCall`] whose kernel replays `recording` (every device, every grid point),
/// whose [`Op::Const`]s name `constants`.
pub fn python_call(
    name: &str,
    spec: GridSpec,
    recording: Arc<Recording>,
    constants: Vec<Arc<[u32]>>,
) -> PallasCall {
    let constants: Arc<[Arc<[u32]>]> = constants.into();
    PallasCall::new(name, spec, move |pl, args| {
        let ops = recording
            .get(pl.device())
            .and_then(|d| d.get(pl.grid_index()))
            .unwrap_or_else(|| {
                panic!(
                    "the Python kernel was evaluated on {} devices; it cannot run on another mesh",
                    recording.len()
                )
            });
        Replay {
            pl,
            args,
            constants: &constants,
            descs: Vec::new(),
            values: Vec::new(),
            barriers: Vec::new(),
        }
        .run(ops);
    })
}
