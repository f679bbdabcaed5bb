//! The XLA custom call a `pallas_call` lowers to under `tpusim.simulate`: one call per
//! device (XLA's typed FFI, `jax.ffi.ffi_call`), whose P calls meet here, in Rust,
//! without the GIL. The last device to arrive takes the GIL once and hands every
//! device's operand and result buffers ([`CallBuffers`]) to the meeting's Python
//! callback, which plans the simulation and runs it on them in place (the data does not
//! pass through Python); the others sleep until it wakes them, each on its own (no lock
//! to queue for on the way out). A call the meeting has run before under the same
//! settings runs again from Rust alone, without the GIL (a [`SavedRun`]), where its plan
//! depends on nothing Python reads per call but the values of its SMEM and
//! scalar-prefetch operands, whose bytes choose among the runs saved ([`SavedRuns`]). A
//! host callback per device (`io_callback`) cost milliseconds a call in JAX's machinery
//! alone. (Handing XLA a future from each waiting call instead, so that its thread goes
//! on, measured the same per call.)

use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::buffers::{spans, CallBuffers, Span, Wiring};
use crate::kernel::{KernelCall, WiredCall};
use crate::xla_ffi::{self, CallFrame};

/// Why a call failed: in Python's `run` (which has kept the error), or here.
#[derive(Clone)]
enum Failure {
    InRun(String),
    Here(String),
}

/// One call of every device: the buffers gathered so far, and its outcome, which the
/// waiting calls read without the meeting's lock once they are woken.
struct Round {
    ins: Vec<Option<Vec<Span>>>,
    outs: Vec<Option<Vec<Span>>>,
    /// Devices that have come, late ones to a failed round too: the round is forgotten
    /// once all have.
    arrived: usize,
    /// The calls waiting for the outcome, woken when it is set.
    sleepers: Vec<Thread>,
    outcome: Arc<OnceLock<Result<(), Failure>>>,
}

struct Meeting {
    name: String,
    devices: usize,
    timeout: Duration,
    run: Py<PyAny>,
    /// Told the message of a call that fails here, not in `run` (a device missing).
    failed: Py<PyAny>,
    state: Mutex<(Vec<u64>, HashMap<u64, Round>)>,
    /// The runs Python saved after its rounds, for the rounds after them.
    saved: Mutex<SavedRuns>,
}

/// A round's run as Python last made it (its plan, wiring and settings), for a repeated
/// call to run without the GIL; stale once the settings change ([`EPOCH`]).
struct SavedRun {
    wired: Arc<WiredCall>,
    epoch: u64,
}

/// Runs a meeting keeps, one per set of key values (as Python keeps 64 plans).
const KEPT_KEYS: usize = 64;

/// A meeting's saved runs, by the bytes of the operands its plans are keyed by (SMEM,
/// scalar prefetch; none: a single run, under the empty key), the oldest dropped first.
#[derive(Default)]
struct SavedRuns {
    /// The operands whose bytes key the runs (the same for every round of a meeting).
    keys: Vec<usize>,
    runs: HashMap<Vec<u8>, Arc<SavedRun>>,
    /// The keys of `runs`, oldest first.
    order: VecDeque<Vec<u8>>,
}

impl SavedRuns {
    /// The run saved under this round's key values and the settings of `epoch`.
    fn find(&self, bufs: &CallBuffers, epoch: u64) -> Option<Arc<SavedRun>> {
        if self.runs.is_empty() {
            return None;
        }
        let key = bufs.key(&self.keys)?;
        self.runs.get(&key).filter(|r| r.epoch == epoch).cloned()
    }

    /// Keeps `run` under `key` (the bytes of operands `keys`); runs saved under other
    /// settings, or keyed by other operands, are dropped.
    fn save(&mut self, keys: Vec<usize>, key: Vec<u8>, run: SavedRun) {
        if self.keys != keys || self.runs.values().any(|r| r.epoch != run.epoch) {
            self.runs.clear();
            self.order.clear();
            self.keys = keys;
        }
        if self.runs.insert(key.clone(), Arc::new(run)).is_none() {
            self.order.push_back(key);
            if self.order.len() > KEPT_KEYS {
                let oldest = self.order.pop_front().expect("over the bound");
                self.runs.remove(&oldest);
            }
        }
    }
}

/// Bumped whenever something a saved run assumed may have changed (the package's
/// settings, an observer of calls): every run saved before is stale.
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// Rounds run from a saved run, since the process started.
static SAVED_ROUNDS: AtomicU64 = AtomicU64::new(0);

/// How many rounds ran from a saved run, without Python, since the process started.
#[pyfunction]
pub fn saved_rounds() -> u64 {
    SAVED_ROUNDS.load(Ordering::Relaxed)
}

/// The current settings epoch, read by a round before it reads the settings.
#[pyfunction]
pub fn settings_epoch() -> u64 {
    EPOCH.load(Ordering::Acquire)
}

/// Makes every saved run stale (the settings changed, or the calls are observed).
#[pyfunction]
pub fn forget_saved_runs() {
    EPOCH.fetch_add(1, Ordering::AcqRel);
}

/// Saves, for meeting `id`, the run its round (`bufs`, still open) just made
/// (`call.run_into` with this wiring, backend and schedule) under the settings of
/// `epoch`, keyed by the bytes of operands `keys` on every device (those the plan was
/// chosen by): the rounds after it with the same bytes run it from Rust while the epoch
/// holds.
#[pyfunction]
#[pyo3(signature = (id, epoch, bufs, keys, call, rows, inputs, out_rows, results, backend, schedule))]
#[allow(clippy::too_many_arguments)]
pub fn meeting_save_run(
    id: usize,
    epoch: u64,
    bufs: &Bound<'_, CallBuffers>,
    keys: Vec<usize>,
    call: Py<KernelCall>,
    rows: Vec<usize>,
    inputs: Vec<usize>,
    out_rows: Vec<usize>,
    results: Vec<Option<usize>>,
    backend: &str,
    schedule: &str,
) -> PyResult<()> {
    let meeting = {
        let all = meetings().lock().unwrap_or_else(|e| e.into_inner());
        *all.get(id)
            .ok_or_else(|| pyo3::exceptions::PyIndexError::new_err(format!("no meeting {id}")))?
    };
    let key = bufs.get().key(&keys).ok_or_else(|| {
        pyo3::exceptions::PyIndexError::new_err(format!(
            "the key operands {keys:?} of a round that has returned, or that lacks them"
        ))
    })?;
    let wiring = Wiring {
        rows,
        inputs,
        out_rows,
        results,
    };
    let run = SavedRun {
        wired: Arc::new(WiredCall::new(call, wiring, backend, schedule)),
        epoch,
    };
    let mut saved = meeting.saved.lock().unwrap_or_else(|e| e.into_inner());
    saved.save(keys, key, run);
    Ok(())
}

fn meetings() -> &'static Mutex<Vec<&'static Meeting>> {
    static M: OnceLock<Mutex<Vec<&'static Meeting>>> = OnceLock::new();
    M.get_or_init(|| Mutex::new(Vec::new()))
}

/// Registers a meeting of `devices` device calls of pallas_call `name`; `run` takes a
/// list (per device) of lists of operand bytes and returns the same of results (C-contiguous
/// uint8 arrays);
/// `failed` is told the message of a call that fails in the meeting itself. Returns its
/// number, the first element of every device call's header operand.
#[pyfunction]
#[pyo3(signature = (name, devices, run, failed, timeout_s=120.0))]
pub fn meeting_register(
    name: String,
    devices: usize,
    run: Py<PyAny>,
    failed: Py<PyAny>,
    timeout_s: f64,
) -> usize {
    // A lowered call may run as long as the process does: its meeting lives as long.
    let m: &'static Meeting = Box::leak(Box::new(Meeting {
        name,
        devices,
        timeout: Duration::from_secs_f64(timeout_s),
        run,
        failed,
        state: Mutex::new((vec![0; devices], HashMap::new())),
        saved: Mutex::new(SavedRuns::default()),
    }));
    let mut all = meetings().lock().unwrap_or_else(|e| e.into_inner());
    all.push(m);
    all.len() - 1
}

/// The address of the FFI handler, for `jax.ffi.register_ffi_target`.
#[pyfunction]
pub fn ffi_handler_address() -> usize {
    handler as *const () as usize
}

impl Meeting {
    fn join(&self, device: usize, ins: Vec<Span>, outs: Vec<Span>) -> Result<(), Failure> {
        if device >= self.devices {
            return Err(Failure::Here(format!(
                "device {device} in a meeting of {}",
                self.devices
            )));
        }
        let p = self.devices;
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (count, rounds) = &mut *guard;
        let k = count[device];
        count[device] += 1;
        let round = rounds.entry(k).or_insert_with(|| Round {
            ins: vec![None; p],
            outs: vec![None; p],
            arrived: 0,
            sleepers: Vec::new(),
            outcome: Arc::new(OnceLock::new()),
        });
        round.arrived += 1;
        let outcome = round.outcome.clone();
        if let Some(failed) = outcome.get() {
            // Late to a round that failed without this device.
            if round.arrived == p {
                rounds.remove(&k);
            }
            return failed.clone();
        }
        round.ins[device] = Some(ins);
        round.outs[device] = Some(outs);
        if round.arrived == p {
            let mut round = rounds.remove(&k).expect("the round in progress");
            drop(guard);
            let ins = round.ins.iter_mut().map(|s| s.take().unwrap_or_default());
            let outs = round.outs.iter_mut().map(|s| s.take().unwrap_or_default());
            let ran = self.lead(ins.collect(), outs.collect());
            let _ = outcome.set(ran);
            for t in round.sleepers {
                t.unpark();
            }
            return outcome.get().expect("set above").clone();
        }
        round.sleepers.push(std::thread::current());
        drop(guard);
        // Woken by the leader (or by a timeout), reading the outcome without the lock.
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(o) = outcome.get() {
                return o.clone();
            }
            let now = Instant::now();
            if now >= deadline {
                self.time_out(k, &outcome);
            }
            let wait = deadline.saturating_duration_since(now);
            std::thread::park_timeout(wait.max(Duration::from_millis(100)));
        }
    }

    /// Fails round `k` if devices are still missing from it past the deadline (once every
    /// device is in, the simulation may take as long as it takes), waking its calls.
    fn time_out(&self, k: u64, outcome: &OnceLock<Result<(), Failure>>) {
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(r) = guard.1.get_mut(&k) else {
            return; // every device came: the leader is running it
        };
        let failed = Failure::Here(format!(
            "bad input: only {} of the {} devices reached pallas_call `{}` within {:.0} s (every device of the shard_map must make the same calls)",
            r.arrived,
            self.devices,
            self.name,
            self.timeout.as_secs_f64()
        ));
        if outcome.set(Err(failed)).is_ok() {
            for t in r.sleepers.drain(..) {
                t.unpark();
            }
        }
    }

    /// Runs the round: the saved run where there is a current one, else Python's
    /// callback, handed the buffers once; watched for Ctrl-C (the recording, the plan
    /// and the run stop: `crate::interrupts`).
    fn lead(&self, ins: Vec<Vec<Span>>, outs: Vec<Vec<Span>>) -> Result<(), Failure> {
        crate::interrupts::watched(|| self.lead_watched(ins, outs))
    }

    fn lead_watched(&self, ins: Vec<Vec<Span>>, outs: Vec<Vec<Span>>) -> Result<(), Failure> {
        let bufs = CallBuffers::new(ins, outs);
        let epoch = EPOCH.load(Ordering::Acquire);
        let saved = (self.saved.lock().unwrap_or_else(|e| e.into_inner())).find(&bufs, epoch);
        if let Some(r) = saved {
            let ran = r.wired.run(&bufs);
            match ran {
                Ok(()) => {
                    SAVED_ROUNDS.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                // Python runs it again below, and reports what went wrong as it does.
                Err(e) => Python::attach(|_| drop(e)),
            }
        }
        Python::attach(|py| -> PyResult<()> {
            let bufs = Py::new(py, bufs)?;
            let ran = self.run.call1(py, (bufs.clone_ref(py),));
            // XLA's buffers go back with the calls: nothing may touch them after.
            bufs.get().close();
            ran.map(drop)
        })
        .map_err(|e| Failure::InRun(Python::attach(|py| e.value(py).to_string())))
    }
}

unsafe fn call(frame: &CallFrame) -> Result<(), String> {
    if frame.args.size < 1 {
        return Err("the call has no header operand".into());
    }
    let header = &**frame.args.items;
    if header.dtype != xla_ffi::DTYPE_S32 || header.rank != 1 || *header.dims != 2 {
        return Err("the header operand is not int32[2]".into());
    }
    let h = std::slice::from_raw_parts(header.data as *const i32, 2);
    let meeting = {
        let all = meetings().lock().unwrap_or_else(|e| e.into_inner());
        *all.get(h[0] as usize).ok_or("no such meeting")?
    };
    let joined = spans(&frame.args, 1)
        .and_then(|ins| Ok((ins, spans(&frame.rets, 0)?)))
        .map_err(Failure::Here)
        .and_then(|(ins, outs)| meeting.join(h[1] as usize, ins, outs));
    if let Err(Failure::Here(msg)) = &joined {
        Python::attach(|py| meeting.failed.call1(py, (msg.as_str(),)).map(drop)).ok();
    }
    joined.map_err(|f| match f {
        Failure::InRun(m) | Failure::Here(m) => m,
    })
}

/// The FFI handler (execute stage; answers XLA's metadata query).
unsafe extern "C" fn handler(frame: *mut CallFrame) -> *mut std::ffi::c_void {
    let f = &*frame;
    if xla_ffi::answer_metadata(f) || f.stage != xla_ffi::STAGE_EXECUTE {
        return null_mut();
    }
    match catch_unwind(AssertUnwindSafe(|| call(f))) {
        Ok(Ok(())) => null_mut(),
        Ok(Err(msg)) => xla_ffi::error(f.api, &msg),
        Err(_) => xla_ffi::error(f.api, "tpusim's pallas_call handler panicked"),
    }
}
