//! Pipeline step device_sim over MPI ranks: each rank runs its own devices' share.
//!
//! Partitioned execution: the P simulated devices split over R ranks (processes, each
//! with its own executor and memory), as `mpirun -np R tpusim run …` runs them.
//!
//! - [`Partition`]: the one definition of which rank holds which device: contiguous
//!   blocks of linear device ids, so ring and torus neighbours mostly share a rank.
//! - [`plan::RankPlan`]: the one place that decides, per data op of the schedule, whether
//!   a rank runs it, sends, receives or skips it. Every rank plans the same schedule (the
//!   planner is deterministic); a copy from a device of one rank to a device of another
//!   (a remote DMA's receive completion) is a message carrying its bytes, sent when the
//!   sender reaches it in the schedule, tagged by its position in the schedule, and
//!   landed in the receiver's memory no later than the receiver's first later op that
//!   touches the destination ([`plan::dues`]).
//! - [`shm`]: ranks on one host pass those bytes through a ring per pair in shared
//!   memory (one copy out of the sender's memory, one into the receiver's); ranks on
//!   other hosts, or where the segment cannot be made, through the [`Comm`]'s messages.
//! - [`RankExecutor`]: any [`Executor`] wrapped so that it holds its rank's devices'
//!   memory only, runs the local ops in pieces between messages, and reads and writes the
//!   views that messages carry.
//! - [`agree`]: the ranks compare their command lines before they run.
//! - [`Comm`]: what the ranks need of a transport: messages, an all-gather, abort. MPI
//!   implements it behind the `mpi` cargo feature (`mpi.rs`); [`threads`] runs ranks as
//!   threads of one process (tests, and trying a partition without MPI).
//!
//! Why the result is bit-identical to one process: every write to a device's memory is
//! an op whose destination is on that device, which its rank runs in schedule order; a
//! message carries the bytes its source holds at the copy's position, because every
//! earlier write to the source is an earlier op of the sender, and the sender reads the
//! source at that position. A receive lands after every earlier op of the receiver
//! (it is landed only once the walk has passed its position) and before every later op
//! that reads or writes its destination, so each op of the receiver sees the bytes it
//! sees in one process; ops that do not touch the destination commute with it.
//!
//! Why no rank waits forever: a rank waits (a) to land a receive whose position it has
//! passed, the receives landing in walk order, or (b) for room in a ring or for MPI to
//! take a send, and only after it has landed every receive it has passed. Take the wait
//! on the lowest schedule position: in (a) the sender is past that position (else it
//! would wait lower), so the message is in the ring or on its way; in (b) the
//! receiver is past the unread messages' positions (else it would wait lower), so by
//! the rule above it is not waiting in (b), and in (a) it lands them in order. Either
//! way the wait ends.

pub mod agree;
pub mod plan;
pub mod shm;
pub mod threads;
mod wire;

#[cfg(feature = "mpi")]
pub mod mpi;

use super::{check_inputs, Executor, Prepared};
use crate::array::HostArray;
use crate::error::{Error, Result};
use crate::ir::{Program, Schedule, View};
use plan::{Event, RankPlan};
use shm::Host;
use std::collections::VecDeque;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Which rank holds which device: rank r holds devices `r·P/R .. (r+1)·P/R` (rounded
/// down), blocks whose sizes differ by at most one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partition {
    devices: usize,
    ranks: usize,
}

impl Partition {
    /// `devices` split over `ranks`: at least one rank, and no more ranks than devices.
    pub fn new(devices: usize, ranks: usize) -> Result<Self> {
        if ranks == 0 {
            return Err(Error::bad_input("a partition needs at least one rank"));
        }
        if ranks > devices {
            return Err(Error::bad_input(format!(
                "{ranks} ranks for {devices} simulated devices: every rank must hold at least one device \
                 (start at most {devices} ranks, or simulate more devices)"
            )));
        }
        Ok(Self { devices, ranks })
    }

    /// Ranks.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// Devices.
    pub fn devices(&self) -> usize {
        self.devices
    }

    /// The devices rank `r` holds.
    pub fn devices_of(&self, r: usize) -> Range<usize> {
        let at = |r: usize| (r as u128 * self.devices as u128 / self.ranks as u128) as usize;
        at(r)..at(r + 1)
    }

    /// The rank holding device `d`.
    pub fn owner(&self, d: usize) -> usize {
        (((d as u128 + 1) * self.ranks as u128 - 1) / self.devices as u128) as usize
    }

    /// The most devices one rank holds.
    pub fn most(&self) -> usize {
        self.devices.div_ceil(self.ranks)
    }

    /// The split as printed: `2 ranks over 8 devices: rank 0 devices 0-3, rank 1 devices 4-7`
    /// (long splits are shortened in the middle).
    pub fn describe(&self) -> String {
        let one = |r: usize| {
            let d = self.devices_of(r);
            if d.len() == 1 {
                format!("rank {r} device {}", d.start)
            } else {
                format!("rank {r} devices {}-{}", d.start, d.end - 1)
            }
        };
        let list: Vec<String> = if self.ranks <= 8 {
            (0..self.ranks).map(one).collect()
        } else {
            vec![one(0), one(1), "…".into(), one(self.ranks - 1)]
        };
        format!(
            "{} rank{} over {} devices: {}",
            self.ranks,
            if self.ranks == 1 { "" } else { "s" },
            self.devices,
            list.join(", ")
        )
    }
}

/// What the ranks need of a transport. Every call but `send` blocks; collective calls
/// (`exchange`) are made by every rank in the same order.
pub trait Comm: Send {
    /// This rank.
    fn rank(&self) -> usize;
    /// Ranks.
    fn size(&self) -> usize;
    /// Ranks on this host, which share its memory (1 when unknown).
    fn on_host(&self) -> usize {
        1
    }
    /// This rank's index among the ranks on its host (which GPU it takes).
    fn local_rank(&self) -> usize {
        0
    }
    /// The ranks on this host, this one among them, in rank order (this one alone when
    /// unknown): those that may share memory ([`shm`]).
    fn host_peers(&self) -> Vec<usize> {
        vec![self.rank()]
    }
    /// The directory this rank's host makes its shared segment in ([`shm::dir`]).
    fn shm_dir(&self) -> PathBuf {
        shm::dir()
    }
    /// Bytes of each shared-memory ring between this host's ranks (`None`: the host's
    /// share of [`shm`]'s budget).
    fn ring_bytes(&self) -> Option<usize> {
        None
    }
    /// An error once another rank has failed: called while waiting on shared memory.
    fn alive(&mut self) -> Result<()> {
        Ok(())
    }
    /// A buffer of `len` bytes to fill and [`Comm::send`] (a used one, where the
    /// transport keeps them, so that sending allocates nothing after the first run).
    fn spare(&mut self, len: usize) -> Vec<u8> {
        vec![0; len]
    }
    /// Starts sending `bytes` to rank `to` under `tag`; may return before it is delivered.
    fn send(&mut self, to: usize, tag: i32, bytes: Vec<u8>) -> Result<()>;
    /// Receives into `out` the message of `out.len()` bytes rank `from` sent under `tag`.
    fn recv(&mut self, from: usize, tag: i32, out: &mut [u8]) -> Result<()>;
    /// Waits until every message this rank started sending has left it.
    fn flush(&mut self) -> Result<()>;
    /// Every rank's `bytes`, in rank order, on every rank.
    fn exchange(&mut self, bytes: Vec<u8>) -> Result<Vec<Vec<u8>>>;
    /// Ends every rank with `code`, after printing `message` (a rank that fails while
    /// others wait for it).
    fn abort(&mut self, code: i32, message: &str) -> !;
}

/// One rank's time in a partitioned run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RankTime {
    /// Wall seconds of the run on this rank.
    pub seconds: f64,
    /// Seconds spent running its own ops and reading and writing the views it sends
    /// and receives.
    pub busy: f64,
    /// Seconds spent waiting for messages (to arrive, or to leave).
    pub wait: f64,
    /// Bytes it sent.
    pub sent_bytes: u64,
}

/// The last partitioned run, every rank's share.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunReport {
    /// Per rank, in rank order.
    pub ranks: Vec<RankTime>,
    /// How rank 0 exchanged with the other ranks of its host ([`Ranks::exchange_path`]).
    pub via: Option<String>,
}

impl RunReport {
    /// Bytes that crossed ranks.
    pub fn crossed_bytes(&self) -> u64 {
        self.ranks.iter().map(|r| r.sent_bytes).sum()
    }

    /// The run's wall time: the slowest rank's.
    pub fn seconds(&self) -> f64 {
        self.ranks.iter().map(|r| r.seconds).fold(0.0, f64::max)
    }

    /// Each rank's busy time as a fraction of the run's wall time.
    pub fn busy_fractions(&self) -> Vec<f64> {
        let t = self.seconds().max(1e-12);
        self.ranks.iter().map(|r| r.busy / t).collect()
    }
}

/// Exit status of an error, as the command line gives it (2 bad input, 130 work
/// stopped by a request, as a process ended by SIGINT reports itself to a shell; 1
/// otherwise).
pub fn status_of(e: &Error) -> u8 {
    match e {
        Error::BadInput(_)
        | Error::NoAdapter(_)
        | Error::Limit { .. }
        | Error::TooLarge(_)
        | Error::File { .. } => 2,
        Error::Rank { status, .. } => *status,
        Error::Interrupted => 130,
        _ => 1,
    }
}

/// The ranks of a partitioned run, shared by its executor and the pipeline: the
/// transport, and the rule that keeps a failing rank from hanging the others. Every
/// collective call goes through one exchange, whose payload says whether the rank
/// failed: a rank that fails while the ranks are between runs joins the next exchange
/// with its error ([`Ranks::conclude`]), so every rank returns that error and exits with
/// its status; a rank that fails while others may wait for its messages aborts them all.
pub struct Ranks {
    comm: Mutex<Box<dyn Comm>>,
    rank: usize,
    size: usize,
    on_host: usize,
    local_rank: usize,
    executing: AtomicBool,
    failed: AtomicBool,
    last: Mutex<RunReport>,
    /// The host's shared memory, once connected (at the first partitioned run), or why
    /// this rank exchanges messages only.
    host: OnceLock<std::result::Result<Host, String>>,
}

/// Payload kinds of an exchange.
const OK: u8 = 0;
const FAILED: u8 = 1;

impl Ranks {
    /// The ranks of `comm`.
    pub fn new(comm: Box<dyn Comm>) -> Self {
        Self {
            rank: comm.rank(),
            size: comm.size(),
            on_host: comm.on_host().max(1),
            local_rank: comm.local_rank(),
            comm: Mutex::new(comm),
            executing: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            last: Mutex::new(RunReport::default()),
            host: OnceLock::new(),
        }
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// True on rank 0, which prints.
    pub fn is_root(&self) -> bool {
        self.rank == 0
    }

    /// Ranks on this host (they share its memory).
    pub fn on_host(&self) -> usize {
        self.on_host
    }

    /// This rank's index on its host.
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }

    /// The partition of `devices` over these ranks.
    pub fn partition(&self, devices: usize) -> Result<Partition> {
        Partition::new(devices, self.size)
    }

    /// The devices this rank holds of `devices`.
    pub fn held(&self, devices: usize) -> Result<Range<usize>> {
        Ok(self.partition(devices)?.devices_of(self.rank))
    }

    fn comm(&self) -> std::sync::MutexGuard<'_, Box<dyn Comm>> {
        self.comm.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every rank's `data`, or the error of the first rank that failed.
    fn all(&self, kind: u8, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut payload = Vec::with_capacity(data.len() + 1);
        payload.push(kind);
        payload.extend_from_slice(data);
        let got = self.comm().exchange(payload)?;
        if let Some((r, p)) = got.iter().enumerate().find(|(_, p)| p.first() != Some(&OK)) {
            self.failed.store(true, Ordering::SeqCst);
            let status = p.get(1).copied().unwrap_or(1);
            let message = String::from_utf8_lossy(p.get(2..).unwrap_or_default()).into_owned();
            return Err(Error::Rank {
                rank: r,
                status,
                message,
            });
        }
        Ok(got.into_iter().map(|mut p| p.split_off(1)).collect())
    }

    /// Every rank's `data`, in rank order (a collective call).
    pub fn exchange(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.all(OK, data)
    }

    /// The sum of every rank's `x`.
    pub fn sum(&self, x: u64) -> Result<u64> {
        Ok(self
            .exchange(&x.to_le_bytes())?
            .iter()
            .map(|b| u64::from_le_bytes(b[..8].try_into().expect("8 bytes")))
            .sum())
    }

    /// The largest of every rank's `x` (a collective call).
    pub fn max(&self, x: f64) -> Result<f64> {
        Ok(self
            .exchange(&x.to_le_bytes())?
            .iter()
            .map(|b| f64::from_le_bytes(b[..8].try_into().expect("8 bytes")))
            .fold(f64::NEG_INFINITY, f64::max))
    }

    /// True when a failure has been exchanged: every rank returns it.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// True while a partitioned run is prepared: a rank's failure then aborts them all.
    pub fn executing(&self) -> bool {
        self.executing.load(Ordering::SeqCst)
    }

    /// The last partitioned run's report (every rank's share of its time).
    pub fn last_run(&self) -> RunReport {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Connects the ranks of each host through shared memory, once (a collective call);
    /// where that fails they exchange messages.
    fn connect(&self) -> Result<()> {
        if self.host.get().is_none() {
            let (peers, dir, ring) = {
                let c = self.comm();
                (c.host_peers(), c.shm_dir(), c.ring_bytes())
            };
            let host = shm::connect(self.rank, &peers, &dir, ring, |b| self.exchange(b))?;
            let _ = self.host.set(host);
        }
        Ok(())
    }

    /// The host's shared memory, when this rank is connected to others through it.
    fn shared(&self) -> Option<&Host> {
        self.host.get().and_then(|h| h.as_ref().ok())
    }

    /// How the ranks of this host exchange the bytes of DMAs (after a partitioned run):
    /// `None` before any, or where this rank is alone on its host.
    pub fn exchange_path(&self) -> Option<String> {
        match self.host.get()? {
            Ok(h) => Some(format!(
                "shared memory between the {} ranks of this host",
                h.ranks()
            )),
            Err(why) if why.is_empty() => None,
            Err(why) => Some(format!("messages between the ranks of this host ({why})")),
        }
    }

    /// Ends every rank after `e` on this one, while others may be waiting for it.
    pub fn abort(&self, e: &Error) -> ! {
        let message = format!("tpusim (rank {} of {}): {e}", self.rank, self.size);
        let code = i32::from(status_of(e));
        self.comm().abort(code, &message)
    }

    /// The end of a command on this rank: the ranks agree on how it went (one exchange),
    /// so every rank returns the first failing rank's error, or its own result. A failure
    /// inside a partitioned run aborts every rank instead.
    pub fn conclude<T>(&self, result: Result<T>) -> Result<T> {
        match result {
            Err(e) if self.executing() => self.abort(&e),
            Err(e) if self.failed() => Err(e),
            Err(e) => {
                let mut data = vec![status_of(&e)];
                data.extend_from_slice(e.to_string().as_bytes());
                match self.all(FAILED, &data) {
                    Err(Error::Rank { rank, .. }) if rank == self.rank => Err(e),
                    Err(first) => Err(first),
                    Ok(_) => Err(e),
                }
            }
            Ok(v) => self.exchange(&[]).map(|_| v),
        }
    }

    /// Runs `f`, aborting every rank if it fails (inside a partitioned run).
    fn or_abort<T>(&self, r: Result<T>) -> T {
        r.unwrap_or_else(|e| self.abort(&e))
    }
}

/// An executor whose memory is one rank's devices: wraps any executor (CPU or GPU) and
/// exchanges the bytes of DMAs between ranks as messages.
pub struct RankExecutor {
    inner: Box<dyn Executor>,
    ranks: Arc<Ranks>,
}

impl RankExecutor {
    /// `inner` on `ranks` (this process's rank of them).
    pub fn new(inner: Box<dyn Executor>, ranks: Arc<Ranks>) -> Self {
        Self { inner, ranks }
    }
}

impl Executor for RankExecutor {
    fn describe(&self) -> String {
        let n = self.ranks.size;
        format!(
            "{} x {n} rank{}",
            self.inner.describe(),
            if n == 1 { "" } else { "s" }
        )
    }

    fn check(&self, program: &Program) -> Result<()> {
        self.ranks.partition(program.devices)?;
        self.inner.check(program)
    }

    fn prepare<'a>(
        &'a self,
        program: &'a Program,
        schedule: &'a Schedule,
    ) -> Result<Box<dyn Prepared + 'a>> {
        let part = self.ranks.partition(program.devices)?;
        let plan = Box::new(RankPlan::new(program, schedule, &part, self.ranks.rank)?);
        // SAFETY: `plan` is boxed, so its address is stable; it is never moved out of
        // or changed while `inner` lives, and `inner` (declared first in `RankRun`) is
        // dropped before it.
        let local: &'a RankPlan = unsafe { &*(plan.as_ref() as *const RankPlan) };
        let inner = self.inner.prepare_pieces_between(
            &local.program,
            &local.schedule,
            &local.cuts,
            local.between(),
        );
        // The ranks agree that every one of them is ready before any message moves.
        let inner = match inner {
            Err(e) => return self.ranks.conclude(Err(e)),
            Ok(i) => i,
        };
        self.ranks.exchange(&[])?;
        self.ranks.connect()?;
        self.ranks.executing.store(true, Ordering::SeqCst);
        Ok(Box::new(RankRun {
            inner,
            ranks: &self.ranks,
            devices: program.devices,
            program,
            plan,
            received: Vec::new(),
            outstanding: VecDeque::new(),
            landed: 0,
        }))
    }

    fn copy_bandwidth(&self, bytes: u64) -> Result<Option<f64>> {
        self.inner.copy_bandwidth(bytes)
    }

    fn is_gpu(&self) -> bool {
        self.inner.is_gpu()
    }

    fn buffers_in_host_memory(&self) -> bool {
        self.inner.buffers_in_host_memory()
    }

    fn ranks(&self) -> Option<&Ranks> {
        Some(&self.ranks)
    }

    fn inner(&self) -> Option<&dyn Executor> {
        Some(self.inner.as_ref())
    }
}

/// A rank's part of a schedule, prepared on its executor.
struct RankRun<'a> {
    inner: Box<dyn Prepared + 'a>,
    ranks: &'a Ranks,
    devices: usize,
    program: &'a Program,
    plan: Box<RankPlan>,
    /// Where messages are received (kept between them).
    received: Vec<u8>,
    /// Receives through shared memory not landed yet, oldest first.
    outstanding: VecDeque<Landing>,
    /// Receives of this walk landed so far.
    landed: usize,
}

/// A receive of a walk: the bytes of `tag` from rank `from` into `view`.
#[derive(Clone, Copy)]
struct Landing {
    view: View,
    elem: usize,
    from: usize,
    tag: i32,
}

/// Busy and waiting time of a walk.
#[derive(Default)]
struct Times {
    busy: Duration,
    wait: Duration,
}

/// Elements `from .. from + bytes / elem` of `view`, where `from` is `at / elem`: the
/// part of a view a piece of its bytes (at byte `at`) fills.
fn part(view: View, elem: usize, at: usize, bytes: usize) -> View {
    View::new(
        view.device(),
        view.alloc(),
        view.offset() + at / elem,
        bytes / elem,
    )
}

impl RankRun<'_> {
    fn held(&self) -> Range<usize> {
        self.plan.first..self.plan.first + self.plan.program.devices
    }

    /// One walk through the schedule: (busy, waiting) seconds.
    fn walk(&mut self) -> Result<(Duration, Duration)> {
        let mut time = Times::default();
        self.landed = 0;
        for i in 0..self.plan.events.len() {
            self.land(self.plan.due[i], &mut time)?;
            match self.plan.events[i] {
                Event::Piece(k) => {
                    let t = Instant::now();
                    self.inner.run_piece(k)?;
                    time.busy += t.elapsed();
                }
                Event::Send {
                    view,
                    elem,
                    to,
                    tag,
                } => self.send(view, elem, to, tag, &mut time)?,
                Event::Recv {
                    view,
                    elem,
                    from,
                    tag,
                } => {
                    let recv = Landing {
                        view,
                        elem,
                        from,
                        tag,
                    };
                    if self.ranks.shared().and_then(|h| h.from(from)).is_some() {
                        // Through shared memory: it lands when needed (`RankPlan::due`).
                        self.outstanding.push_back(recv);
                    } else {
                        self.land(usize::MAX, &mut time)?;
                        self.receive(&recv, &mut time)?;
                    }
                }
            }
        }
        self.land(usize::MAX, &mut time)?;
        Ok((time.busy, time.wait))
    }

    /// Lands outstanding receives, oldest first, until `due` of the walk have landed
    /// (or none is outstanding).
    fn land(&mut self, due: usize, time: &mut Times) -> Result<()> {
        while self.landed < due {
            let Some(recv) = self.outstanding.pop_front() else {
                break;
            };
            self.receive(&recv, time)?;
        }
        Ok(())
    }

    /// Receives `recv` into its destination now.
    fn receive(&mut self, recv: &Landing, time: &mut Times) -> Result<()> {
        let Landing {
            view,
            elem,
            from,
            tag,
        } = *recv;
        let t = Instant::now();
        let len = view.len() * elem;
        let inner = &mut self.inner;
        if let Some(ring) = self.ranks.shared().and_then(|h| h.from(from)) {
            let drain =
                |at, piece: &[u8]| inner.write_view(part(view, elem, at, piece.len()), elem, piece);
            let waited = ring.take(tag, len, drain, &mut || self.ranks.comm().alive())?;
            time.wait += waited;
            time.busy += t.elapsed() - waited;
        } else {
            self.received.resize(len, 0);
            self.ranks.comm().recv(from, tag, &mut self.received)?;
            time.wait += t.elapsed();
            let t = Instant::now();
            inner.write_view(view, elem, &self.received)?;
            time.busy += t.elapsed();
        }
        self.landed += 1;
        Ok(())
    }

    /// Sends the bytes of `view` to rank `to` now.
    fn send(
        &mut self,
        view: View,
        elem: usize,
        to: usize,
        tag: i32,
        time: &mut Times,
    ) -> Result<()> {
        let len = view.len() * elem;
        let ring = self.ranks.shared().and_then(|h| h.to(to));
        // A rank about to wait for room, or for MPI, first lands what it was sent: the
        // receiver may itself be waiting for room to send to this rank.
        if !ring.as_ref().is_some_and(|r| r.fits(len)) {
            self.land(usize::MAX, time)?;
        }
        let t = Instant::now();
        let inner = &mut self.inner;
        if let Some(ring) = ring {
            let fill = |at, piece: &mut [u8]| {
                inner.read_view_into(part(view, elem, at, piece.len()), elem, piece)
            };
            let waited = ring.put(tag, len, fill, &mut || self.ranks.comm().alive())?;
            time.wait += waited;
            time.busy += t.elapsed() - waited;
        } else {
            let mut bytes = self.ranks.comm().spare(len);
            inner.read_view_into(view, elem, &mut bytes)?;
            time.busy += t.elapsed();
            let t = Instant::now();
            self.ranks.comm().send(to, tag, bytes)?;
            time.wait += t.elapsed();
        }
        Ok(())
    }

    fn run_all(&mut self, iters: usize) -> Result<Duration> {
        // Start together, so each rank's time is the run's and not its wait for the others.
        self.ranks.exchange(&[])?;
        let t = Instant::now();
        let (mut busy, mut wait) = (Duration::ZERO, Duration::ZERO);
        self.outstanding.clear();
        for _ in 0..iters {
            let (b, w) = self.walk()?;
            busy += b;
            wait += w;
        }
        let f = Instant::now();
        self.ranks.comm().flush()?;
        wait += f.elapsed();
        let me = RankTime {
            seconds: t.elapsed().as_secs_f64(),
            busy: busy.as_secs_f64(),
            wait: wait.as_secs_f64(),
            sent_bytes: self.plan.sent_bytes * iters as u64,
        };
        let mut data = Vec::new();
        for x in [me.seconds, me.busy, me.wait, me.sent_bytes as f64] {
            data.extend_from_slice(&x.to_le_bytes());
        }
        let all = self.ranks.exchange(&data)?;
        let f = |b: &[u8], i: usize| {
            f64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8 bytes"))
        };
        let report = RunReport {
            ranks: all
                .iter()
                .map(|b| RankTime {
                    seconds: f(b, 0),
                    busy: f(b, 1),
                    wait: f(b, 2),
                    sent_bytes: f(b, 3) as u64,
                })
                .collect(),
            via: self.ranks.exchange_path(),
        };
        let seconds = report.seconds();
        *self.ranks.last.lock().unwrap_or_else(|e| e.into_inner()) = report;
        Ok(Duration::from_secs_f64(seconds))
    }
}

impl Prepared for RankRun<'_> {
    /// `inputs` of every device; those of devices other ranks hold may be empty.
    fn upload(&mut self, inputs: &[Vec<HostArray>]) -> Result<()> {
        let held = self.held();
        let r = if inputs.len() != self.devices {
            Err(Error::bad_input(format!(
                "`{}` runs on {} devices but inputs for {} were given",
                self.program.name,
                self.devices,
                inputs.len()
            )))
        } else {
            check_inputs(&self.plan.program, &inputs[held.clone()])
                .and_then(|()| self.inner.upload(&inputs[held]))
        };
        self.ranks.or_abort(r);
        Ok(())
    }

    fn run(&mut self, iters: usize) -> Result<Duration> {
        let r = self.run_all(iters);
        Ok(self.ranks.or_abort(r))
    }

    /// Every device's outputs, on every rank (each rank's sent to all).
    fn read_outputs(&mut self) -> Result<Vec<Vec<HostArray>>> {
        let mine = self.read_held_outputs()?;
        let held = self.held();
        let bytes = wire::encode(&mine[held]);
        let all = self.ranks.exchange(&bytes);
        let all = self.ranks.or_abort(all);
        let mut out = Vec::with_capacity(self.devices);
        for b in &all {
            out.extend(self.ranks.or_abort(wire::decode(b)));
        }
        Ok(out)
    }

    fn read_held_outputs(&mut self) -> Result<Vec<Vec<HostArray>>> {
        let r = self.inner.read_outputs();
        let local = self.ranks.or_abort(r);
        let held = self.held();
        let mut out = vec![Vec::new(); self.devices];
        for (d, o) in held.zip(local) {
            out[d] = o;
        }
        Ok(out)
    }
}

impl Drop for RankRun<'_> {
    fn drop(&mut self) {
        self.ranks.executing.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_the_devices_in_order() {
        for p in 1..40 {
            for r in 1..=p {
                let part = Partition::new(p, r).unwrap();
                let mut next = 0;
                for k in 0..r {
                    let d = part.devices_of(k);
                    assert_eq!(d.start, next);
                    assert!(!d.is_empty() && d.len() <= part.most());
                    for x in d.clone() {
                        assert_eq!(part.owner(x), k, "P={p} R={r} device {x}");
                    }
                    next = d.end;
                }
                assert_eq!(next, p);
            }
        }
        assert!(Partition::new(4, 5)
            .unwrap_err()
            .to_string()
            .contains("5 ranks for 4"));
        assert_eq!(
            Partition::new(8, 2).unwrap().describe(),
            "2 ranks over 8 devices: rank 0 devices 0-3, rank 1 devices 4-7"
        );
    }
}
