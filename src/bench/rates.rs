//! The roof of a bench row: an executor's best rates, measured in the same process, and
//! the least time a schedule can take at them.

use crate::array::DType;
use crate::device_sim::{BlockedStretch, Executor};
use crate::error::Result;
use crate::ir::{Allocation, ComputeKind, DataOp, DotDims, Program, Schedule};
use crate::kernel::{GridSpec, PallasCall};
use crate::mesh::Mesh;
use crate::sched::{schedule, Eager};

/// An executor's best rates and fixed cost, measured in the same run: bytes of
/// destination per second for copies, accumulates, non-zero fills and zero fills (the
/// best over ops of [`RATE_SIZES`]), FLOP/s of a matmul (the best over
/// [`MATMUL_SHAPES`]), elementwise operations per second (the faster of a negation into a
/// temporary and an accumulate in place, one operation per element each, best over
/// [`RATE_SIZES`]), and the least time one submitted run takes
/// (a kernel that does nothing). [`Rates::roofline`] adds them up into the least time a
/// schedule can take on the executor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rates {
    /// Copies (a VMEM copy; DMAs run the same way).
    pub copy: f64,
    /// Accumulates (`dst += src`).
    pub accumulate: f64,
    /// Fills with a non-zero value.
    pub fill: f64,
    /// Fills with zeros (a buffer clear on the GPU).
    pub zero: f64,
    /// FLOP/s of a matmul (2 per multiply-add).
    pub matmul: f64,
    /// Elementwise operations per second ([`crate::ir::Work::vector_ops`]).
    pub vector: f64,
    /// Seconds of one submitted run of a kernel that does nothing.
    pub fixed: f64,
    /// The best data rates of ops that stay in a core's caches, which [`Rates::over`]
    /// keeps: the rates of a blocked stretch's ops ([`Rates::roofline_blocked`]).
    pub in_cache: InCache,
    /// The data rates measured by op size, which [`Rates::over`] fills in: where given,
    /// an op's bytes are bounded by the rates of its size ([`BySize::bound`]) in place of
    /// `copy`, `accumulate`, `fill` and `zero` (those of the schedule's footprint, which
    /// a small op whose buffers stay in the caches beats).
    pub by_size: BySize,
}

/// Data rates (copy, accumulate, fill, zero: destination bytes per second) of single ops
/// of some sizes, measured each on its own (its buffers as hot as repeated runs leave
/// them), ascending by size; empty where not measured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BySize {
    /// (destination bytes of the op, its rates); the first `len` are measured.
    points: [(u64, [f64; 4]); RATE_SIZES.len() + 1],
    len: usize,
}

impl BySize {
    /// The table of `points` ((op bytes, rates), any order; at most
    /// [`RATE_SIZES`]`.len() + 1` of them, the rest left out).
    pub fn new(points: &[(u64, [f64; 4])]) -> Self {
        let mut t = BySize::default();
        for &p in points.iter().take(t.points.len()) {
            t.points[t.len] = p;
            t.len += 1;
        }
        t.points[..t.len].sort_by_key(|p| p.0);
        t
    }

    /// The measured points, ascending: (op bytes, [copy, accumulate, fill, zero]).
    pub fn points(&self) -> &[(u64, [f64; 4])] {
        &self.points[..self.len]
    }

    /// The most rates an op of `bytes` reaches, per kind (copy, accumulate, fill, zero):
    /// the best of the ops measured at sizes from the largest not above `bytes` (every
    /// size for an op below the smallest). An op's rate rises with its size while fixed
    /// costs shrink and falls as its buffers leave each cache, so an op is no faster than
    /// the best op at least as large as the measured size below it. `None` when empty.
    pub fn bound(&self, bytes: u64) -> Option<[f64; 4]> {
        let points = self.points();
        let from = points.iter().rposition(|p| p.0 <= bytes).unwrap_or(0);
        let mut best: Option<[f64; 4]> = None;
        for (_, r) in &points[from..] {
            let b = best.get_or_insert([0.0; 4]);
            for (b, r) in b.iter_mut().zip(r) {
                *b = b.max(*r);
            }
        }
        best
    }
}

/// Destination bytes per second of each kind of data op, the best over [`RATE_SIZES`]
/// (ops that stay in a core's caches run fastest).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InCache {
    /// Copies.
    pub copy: f64,
    /// Accumulates.
    pub accumulate: f64,
    /// Fills with a non-zero value.
    pub fill: f64,
    /// Fills with zeros.
    pub zero: f64,
}

/// What a rate is measured on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Copy,
    Accumulate,
    Fill,
    Zero,
    /// `-x` into a temporary: one elementwise op per element.
    Neg,
}

impl Kind {
    /// The kinds whose rate is in bytes (or elements) of destination, in [`Rates`]'
    /// order.
    const ALL: [Kind; 5] = [
        Kind::Copy,
        Kind::Accumulate,
        Kind::Fill,
        Kind::Zero,
        Kind::Neg,
    ];

    /// The rate a data op's bytes are bounded by (a compute op writes its bytes at least
    /// as slowly as a copy does).
    fn of(op: &DataOp) -> Kind {
        match op {
            DataOp::Copy { .. } | DataOp::Compute(_) => Kind::Copy,
            DataOp::Accumulate { .. } => Kind::Accumulate,
            DataOp::Fill { bits: 0, .. } => Kind::Zero,
            DataOp::Fill { .. } => Kind::Fill,
        }
    }
}

/// The op sizes rates are measured on: small enough to stay in caches, up to one large op
/// whose two buffers exceed what the GPU executor runs as one arena program
/// ([`crate::device_sim::gpu::ArenaMode`]), so that it runs as a plain copy or dispatch.
pub const RATE_SIZES: [u64; 5] = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 20 << 20];

/// The most bytes of buffers data rates are measured over for a schedule that holds
/// more than [`RATE_SIZES`]' ops do ([`Rates::over`]): beyond, memory's rate no longer
/// changes with the size.
pub const MOST_FOOTPRINT_BYTES: u64 = 1 << 30;

/// The data rates (copy, accumulate, fill, zero, in [`Kind::ALL`]'s order) of ops over
/// buffers of some bytes in all.
type DataRates = [f64; 4];

/// The matmuls (`M x K` by `K x N`) the matmul rate is measured on: the shapes bench
/// gives the matmul collectives' blocks (K = N = 128), from a few rows to many.
pub const MATMUL_SHAPES: [[usize; 3]; 4] = [
    [32, 128, 128],
    [256, 128, 128],
    [1024, 128, 128],
    [2048, 128, 128],
];

/// Least seconds per iteration of `run`, over five timed runs of enough iterations to
/// take about 1 ms each, after one warm-up; with the executor's `fixed` cost of a
/// submission taken off each run.
fn least_per_iter(run: &mut dyn crate::device_sim::Prepared, fixed: f64) -> Result<f64> {
    let first = run.run(1)?.as_secs_f64();
    let iters = ((1e-3 / first.max(1e-7)).ceil() as usize).clamp(1, 2000);
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = run.run(iters)?.as_secs_f64();
        best = best.min((t - fixed).max(0.0) / iters as f64);
    }
    Ok(best)
}

/// Least seconds per iteration of a one-device kernel whose body is `body`, run on
/// `exec` (`fixed`: the cost of a submission, taken off).
fn kernel_time(
    exec: &dyn Executor,
    spec: GridSpec,
    fixed: f64,
    body: impl Fn(&crate::kernel::Ctx, &crate::kernel::Args) + Send + Sync + 'static,
) -> Result<f64> {
    let mesh = Mesh::new(1, "x")?;
    let call = PallasCall::new("rate", spec, body);
    let program = call.lower(&mesh)?;
    exec.check(&program)?;
    let sched = schedule(&program, &mut Eager::default())?;
    let mut run = exec.prepare_literal(&program, &sched)?;
    least_per_iter(run.as_mut(), fixed)
}

impl Rates {
    /// The best rates of `exec` in this process: for every kind of data op, the best of
    /// ops of [`RATE_SIZES`] bytes (one device, VMEM scratch, `dtype`), and of matmuls
    /// of [`MATMUL_SHAPES`] in `dtype` (accumulated as the matmul collectives do),
    /// measured on the first call for an executor (by its description) and dtype and
    /// kept. A data op of any size moves its bytes no faster than the best of these
    /// (small ops pay more per byte, large ones leave the caches), and a matmul of any
    /// shape computes no faster, so their sum is a bound.
    pub fn best(exec: &dyn Executor, dtype: DType) -> Result<Self> {
        match Self::cache(&(exec.describe(), dtype), None) {
            Some(r) => Ok(r),
            None => Self::measure_again(exec, dtype),
        }
    }

    /// Measures `exec`'s rates again and keeps, per kind, the best of every measurement
    /// so far (and the least fixed cost): when a run beats its roof, one measurement came
    /// out slow (the machine was busy), and the roof is computed again from these.
    pub fn measure_again(exec: &dyn Executor, dtype: DType) -> Result<Self> {
        let fixed = Self::empty(exec, dtype)?;
        let mut best = [0.0f64; 5];
        for &b in &RATE_SIZES {
            let mut data = [0.0; 4];
            for (k, kind) in Kind::ALL.into_iter().enumerate() {
                let r = Self::rate(exec, kind, b, dtype, fixed)?;
                best[k] = best[k].max(r);
                if let Some(d) = data.get_mut(k) {
                    *d = r;
                }
            }
            // An op of `b` bytes has two buffers of `b`.
            Self::sized(&(exec.describe(), dtype, 2 * b), Some(data));
        }
        let mut matmul = 0.0f64;
        for s in MATMUL_SHAPES {
            matmul = matmul.max(Self::matmul_rate(exec, s, dtype, fixed)?);
        }
        let r = Rates {
            copy: best[0],
            accumulate: best[1],
            fill: best[2],
            zero: best[3],
            matmul,
            // An add the executor runs as an accumulate in place (a blocked stretch's
            // `dst = dst + src`) is an elementwise op at the accumulate's rate.
            vector: best[4].max(best[1]) / dtype.size() as f64,
            fixed: fixed.0,
            in_cache: InCache {
                copy: best[0],
                accumulate: best[1],
                fill: best[2],
                zero: best[3],
            },
            by_size: BySize::default(),
        };
        Ok(Self::cache(&(exec.describe(), dtype), Some(r)).unwrap_or(r))
    }

    /// These rates with the data rates (copy, accumulate, fill, zero) those of ops over
    /// as much memory as a schedule holding `footprint` bytes of buffers
    /// ([`Rates::footprint_point`]: an op of [`RATE_SIZES`], whose two buffers hold twice
    /// its bytes, or, for a schedule larger than those, one op over two buffers of half
    /// the largest power of two at most `footprint`, capped at [`MOST_FOOTPRINT_BYTES`],
    /// never more memory than the schedule held): the rate a blocked stretch's writes
    /// leave for memory at ([`Rates::stretch_seconds`]). And [`Rates::by_size`], the rates
    /// of every measured op size (that footprint's op among them), which bound each op by
    /// its own size: a small op in a large schedule may find its buffers in the caches (a
    /// chunk copy of what the step before wrote). Kept per executor, dtype and footprint;
    /// `again` measures the large footprint again, keeping the best (the sizes of
    /// [`RATE_SIZES`] are measured again by [`Rates::measure_again`]).
    pub fn over(
        &self,
        exec: &dyn Executor,
        dtype: DType,
        footprint: u64,
        again: bool,
    ) -> Result<Self> {
        let point = Self::footprint_point(footprint);
        let key = (exec.describe(), dtype, point);
        let kept = Self::sized(&key, None);
        let data = match kept {
            Some(d) if !(again && point > 2 * RATE_SIZES[RATE_SIZES.len() - 1]) => d,
            _ => {
                let fixed = Self::empty(exec, dtype)?;
                let mut d = [0.0; 4];
                for (k, kind) in Kind::ALL[..4].iter().enumerate() {
                    d[k] = Self::rate(exec, *kind, point / 2, dtype, fixed)?;
                }
                Self::sized(&key, Some(d)).unwrap_or(d)
            }
        };
        let at = |bytes| (exec.describe(), dtype, bytes);
        let mut points: Vec<(u64, DataRates)> = RATE_SIZES
            .iter()
            .filter_map(|&b| Some((b, Self::sized(&at(2 * b), None)?)))
            .collect();
        if point > 2 * RATE_SIZES[RATE_SIZES.len() - 1] {
            points.push((point / 2, data));
        }
        Ok(Rates {
            copy: data[0],
            accumulate: data[1],
            fill: data[2],
            zero: data[3],
            by_size: BySize::new(&points),
            ..*self
        })
    }

    /// The footprint (bytes of buffers) whose data rates bound a schedule holding
    /// `footprint` bytes: the largest measured one at most `footprint` (the least, twice
    /// [`RATE_SIZES`]' first, for a smaller schedule).
    pub fn footprint_point(footprint: u64) -> u64 {
        let largest = 2 * RATE_SIZES[RATE_SIZES.len() - 1];
        if footprint > largest {
            let pow2 = 1u64 << (63 - footprint.leading_zeros());
            return pow2.clamp(largest, MOST_FOOTPRINT_BYTES);
        }
        RATE_SIZES
            .iter()
            .map(|b| 2 * b)
            .filter(|&f| f <= footprint)
            .max()
            .unwrap_or(2 * RATE_SIZES[0])
    }

    /// The kept data rates over `key`'s footprint (executor, dtype, bytes), merged first
    /// with `new` when given (the best of each).
    fn sized(key: &(String, DType, u64), new: Option<DataRates>) -> Option<DataRates> {
        use std::collections::HashMap;
        use std::sync::Mutex;
        type Cache = Option<HashMap<(String, DType, u64), DataRates>>;
        static SIZED: Mutex<Cache> = Mutex::new(None);
        let mut guard = SIZED.lock().unwrap_or_else(|p| p.into_inner());
        let map = guard.get_or_insert_with(HashMap::new);
        if let Some(n) = new {
            let e = map.entry(key.clone()).or_insert(n);
            for (o, n) in e.iter_mut().zip(n) {
                *o = o.max(n);
            }
        }
        map.get(key).copied()
    }

    /// The kept rates for `key`, merged first with `new` when given.
    fn cache(key: &(String, DType), new: Option<Rates>) -> Option<Rates> {
        use std::collections::HashMap;
        use std::sync::Mutex;
        /// Best rates by executor description and dtype.
        type Cache = Option<HashMap<(String, DType), Rates>>;
        static CACHE: Mutex<Cache> = Mutex::new(None);
        let mut guard = CACHE.lock().unwrap_or_else(|p| p.into_inner());
        let map = guard.get_or_insert_with(HashMap::new);
        if let Some(n) = new {
            let merged = match map.get(key) {
                Some(o) => Rates {
                    copy: o.copy.max(n.copy),
                    accumulate: o.accumulate.max(n.accumulate),
                    fill: o.fill.max(n.fill),
                    zero: o.zero.max(n.zero),
                    matmul: o.matmul.max(n.matmul),
                    vector: o.vector.max(n.vector),
                    fixed: o.fixed.min(n.fixed),
                    in_cache: InCache {
                        copy: o.in_cache.copy.max(n.in_cache.copy),
                        accumulate: o.in_cache.accumulate.max(n.in_cache.accumulate),
                        fill: o.in_cache.fill.max(n.in_cache.fill),
                        zero: o.in_cache.zero.max(n.in_cache.zero),
                    },
                    by_size: n.by_size,
                },
                None => n,
            };
            map.insert(key.clone(), merged);
        }
        map.get(key).copied()
    }

    /// Bytes per second of `kind` on ops of `bytes`: below 1 MiB, from the difference
    /// between kernels of 2 and 6 such ops (what an iteration costs beyond its ops
    /// cancels out); from 1 MiB, one op, less an empty iteration.
    fn rate(
        exec: &dyn Executor,
        kind: Kind,
        bytes: u64,
        dtype: DType,
        fixed: (f64, f64),
    ) -> Result<f64> {
        let elems = ((bytes / dtype.size() as u64) as usize).max(1);
        let per_op = if bytes >= 1 << 20 {
            Self::time(exec, elems, dtype, 1, kind, fixed.0)? - fixed.1
        } else {
            let two = Self::time(exec, elems, dtype, 2, kind, fixed.0)?;
            let six = Self::time(exec, elems, dtype, 6, kind, fixed.0)?;
            (six - two) / 4.0
        };
        Ok((elems * dtype.size()) as f64 / per_op.max(1e-12))
    }

    /// FLOP/s of one matmul of `[m, k, n]` in `dtype` (products accumulated in
    /// [`crate::collectives::accumulator`]'s dtype): from the difference between kernels
    /// of 1 and 3 of them, so that what an iteration costs beyond them cancels out.
    fn matmul_rate(
        exec: &dyn Executor,
        [m, k, n]: [usize; 3],
        dtype: DType,
        fixed: (f64, f64),
    ) -> Result<f64> {
        let time = |ops: usize| {
            let spec = GridSpec::new()
                .vmem("x", &[m, k], dtype)
                .vmem("w", &[k, n], dtype);
            kernel_time(exec, spec, fixed.0, move |pl, a| {
                let dims = DotDims {
                    lhs_contract: vec![1],
                    rhs_contract: vec![0],
                    ..DotDims::default()
                };
                let acc = crate::collectives::accumulator(dtype);
                for _ in 0..ops {
                    let (x, w) = (pl.read(a.r("x")), pl.read(a.r("w")));
                    drop(pl.dot_general(&x, &w, dims.clone(), acc));
                }
            })
        };
        let (one, three) = (time(1)?, time(3)?);
        let per_op = (three - one) / 2.0;
        Ok(2.0 * (m * k * n) as f64 / per_op.max(1e-12))
    }

    /// The least time of one submitted run of a kernel that does nothing, and the least
    /// time per iteration of many in one submission.
    fn empty(exec: &dyn Executor, dtype: DType) -> Result<(f64, f64)> {
        let mesh = Mesh::new(1, "x")?;
        let spec = GridSpec::new().vmem("a", &[1], dtype);
        let call = PallasCall::new("empty", spec, |_, _| {});
        let program = call.lower(&mesh)?;
        let sched = schedule(&program, &mut Eager::default())?;
        let mut run = exec.prepare_literal(&program, &sched)?;
        run.run(1)?;
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            best = best.min(run.run(1)?.as_secs_f64());
        }
        let per_iter = least_per_iter(run.as_mut(), best)?;
        Ok((best, per_iter))
    }

    /// Least seconds per iteration of a kernel of `ops` ops of `kind` on `elems` elements.
    fn time(
        exec: &dyn Executor,
        elems: usize,
        dtype: DType,
        ops: usize,
        kind: Kind,
        fixed: f64,
    ) -> Result<f64> {
        let spec = GridSpec::new()
            .vmem("a", &[elems], dtype)
            .vmem("b", &[elems], dtype);
        kernel_time(exec, spec, fixed, move |pl, a| {
            for _ in 0..ops {
                match kind {
                    Kind::Copy => pl.copy(a.r("a"), a.r("b")),
                    Kind::Accumulate => pl.add_assign(a.r("a"), a.r("b")),
                    Kind::Fill => pl.fill(a.r("a"), 1.0),
                    Kind::Zero => pl.fill(a.r("a"), 0.0),
                    Kind::Neg => drop(-&pl.read(a.r("b"))),
                }
            }
        })
    }

    /// The least seconds `op` can take at these rates: its bytes at the rate of its
    /// kind; for a compute op, the most of that, its FLOPs at the matmul rate and (for an
    /// elementwise op) its elementwise operations at the elementwise rate, each a bound
    /// on its own. `allocs` is [`Schedule::allocations`]'.
    pub fn op_seconds(&self, op: &DataOp, allocs: &[Allocation]) -> f64 {
        let bytes = op.bytes(allocs);
        let data = [self.copy, self.accumulate, self.fill, self.zero];
        let rates = self.by_size.bound(bytes).unwrap_or(data);
        let bytes = bytes as f64
            / match Kind::of(op) {
                Kind::Copy | Kind::Neg => rates[0],
                Kind::Accumulate => rates[1],
                Kind::Fill => rates[2],
                Kind::Zero => rates[3],
            };
        let DataOp::Compute(c) = op else {
            return bytes;
        };
        let w = c.work();
        let flops = 2.0 * w.macs as f64 / self.matmul;
        // Elementwise ops at the elementwise rate ([`Rates::vector`]); reductions and
        // data movement (reshape, slice…) are bounded by their bytes only.
        let elementwise = matches!(
            c.kind,
            ComputeKind::Unary(_)
                | ComputeKind::Binary(_)
                | ComputeKind::Compare(_)
                | ComputeKind::Select
        );
        let vector = if elementwise {
            w.vector_ops as f64 / self.vector
        } else {
            0.0
        };
        bytes.max(flops).max(vector)
    }

    /// The least seconds one iteration of `sched` can take on this executor when `iters`
    /// iterations run in one submission: every data op's [`Rates::op_seconds`], plus the
    /// fixed cost of the submission shared by the iterations. Costs the executor has
    /// beyond those (a dispatch, a semaphore, the scheduler) only add time.
    pub fn roofline(&self, sched: &Schedule, program: &Program, iters: usize) -> f64 {
        self.roofline_of(sched, program, iters, |_| true)
    }

    /// [`Rates::roofline`] of a run that executes the ops of `blocked` a block at a time
    /// ([`Executor::blocked_stretches`]) and not those of `skipped` at all
    /// ([`Executor::skipped_ops`]): each stretch takes its [`Rates::stretch_seconds`] in
    /// place of its ops' own. Where the run has `lanes` of devices side by side
    /// ([`Executor::side_by_side`]), each op still takes its own time but at most `lanes`
    /// run at once, and one device's run one after another: the iteration takes the
    /// most of the whole work shared among the lanes and each device's ops alone (a copy
    /// between two devices counted in neither device's).
    pub fn roofline_blocked(
        &self,
        sched: &Schedule,
        program: &Program,
        iters: usize,
        blocked: &[BlockedStretch],
        skipped: &[usize],
        lanes: usize,
    ) -> f64 {
        let allocs = sched.allocations(program);
        let mut alone = vec![true; sched.ops.len()];
        for i in blocked.iter().flat_map(|b| &b.ops).chain(skipped) {
            if let Some(a) = alone.get_mut(*i) {
                *a = false;
            }
        }
        let stretches: f64 = blocked
            .iter()
            .map(|b| self.stretch_seconds(b, &sched.ops, &allocs))
            .sum();
        let ops = sched.ops.iter().zip(alone).filter(|(_, a)| *a);
        let mut device = vec![0.0f64; program.devices];
        let mut data = 0.0;
        for (o, _) in ops {
            let t = self.op_seconds(o, &allocs);
            data += t;
            let mut on = o.reads().chain(o.writes()).map(|v| v.device());
            let first = on.next();
            if let Some(d) = first.filter(|&d| on.all(|e| e == d)) {
                device[d] += t;
            }
        }
        let work = match lanes {
            0 | 1 => data + stretches,
            n => ((data + stretches) / n as f64).max(device.into_iter().fold(0.0, f64::max)),
        };
        work + self.fixed / iters.max(1) as f64
    }

    /// The least seconds blocked stretch `b` (of the schedule's `ops`) can take: the most
    /// of two bounds, as memory and the cores' caches work at once (a sum would assume
    /// they take turns). Memory: a block's views stay in a core's cache from the
    /// stretch's first op to its last, so each view it writes leaves for memory once, and
    /// no pass writes memory faster than the fastest op over as much memory writes its
    /// destination (the data rates, [`Rates::over`]: ops as large spread over the same
    /// cores). Its reads of memory are not counted (no read rate is measured; they only
    /// add time). Caches: every op still makes its pass over every element, a block at
    /// a time in a core's cache, each at least its [`Rates::op_seconds`] at the in-cache
    /// rates ([`InCache`]), the blocks spread over `b.cores` cores.
    pub fn stretch_seconds(
        &self,
        b: &BlockedStretch,
        ops: &[DataOp],
        allocs: &[Allocation],
    ) -> f64 {
        let storage = |v: &crate::ir::View| v.bytes(allocs[v.alloc()].dtype.storage());
        let written: u64 = b.written.iter().map(storage).sum();
        let fastest = self.copy.max(self.accumulate).max(self.fill).max(self.zero);
        let memory = written as f64 / fastest;
        let cached = Rates {
            copy: self.in_cache.copy,
            accumulate: self.in_cache.accumulate,
            fill: self.in_cache.fill,
            zero: self.in_cache.zero,
            by_size: BySize::default(),
            ..*self
        };
        let passes = b.ops.iter().filter_map(|&i| ops.get(i));
        let passes: f64 = passes.map(|o| cached.op_seconds(o, allocs)).sum();
        memory.max(passes / b.cores.max(1) as f64)
    }

    /// [`Rates::roofline`] of the ops `runs_here` keeps (one rank's share of a schedule).
    pub fn roofline_of(
        &self,
        sched: &Schedule,
        program: &Program,
        iters: usize,
        runs_here: impl Fn(&DataOp) -> bool,
    ) -> f64 {
        let allocs = sched.allocations(program);
        let data: f64 = sched
            .ops
            .iter()
            .filter(|o| runs_here(o))
            .map(|o| self.op_seconds(o, &allocs))
            .sum();
        data + self.fixed / iters.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An op's rates are the best of those measured from the largest size not above its
    /// own: the peak where fixed costs fade, then what larger ops reach as they leave the
    /// caches.
    #[test]
    fn an_op_is_bounded_by_the_best_rates_from_its_measured_size_up() {
        assert_eq!(BySize::default().bound(1 << 20), None);
        let r = |x: f64| [x, x / 2.0, x / 4.0, x / 8.0];
        // Measured out of order; 1 MiB is the peak.
        let t = BySize::new(&[
            (1 << 20, r(80.0)),
            (4 << 10, r(10.0)),
            (64 << 10, r(60.0)),
            (64 << 20, r(20.0)),
            (4 << 20, r(30.0)),
        ]);
        for (bytes, want) in [
            (1, 80.0),
            (4 << 10, 80.0),
            (512 << 10, 80.0),
            (1 << 20, 80.0),
            (2 << 20, 80.0),
            (4 << 20, 30.0),
            (16 << 20, 30.0),
            (64 << 20, 20.0),
            (1 << 30, 20.0),
        ] {
            assert_eq!(t.bound(bytes), Some(r(want)), "{bytes}");
        }
        // Per kind: a kind whose best lies at another size keeps its own best.
        let t = BySize::new(&[
            (4 << 10, [1.0, 9.0, 1.0, 1.0]),
            (1 << 20, [5.0, 2.0, 1.0, 1.0]),
        ]);
        assert_eq!(t.bound(8 << 10), Some([5.0, 9.0, 1.0, 1.0]));
        assert_eq!(t.bound(2 << 20), Some([5.0, 2.0, 1.0, 1.0]));
    }
}
