//! The XLA custom call a `pallas_call` lowers to under `tpusim.simulate`: one call per
//! device (XLA's typed FFI, `jax.ffi.ffi_call`), whose P calls meet here, in Rust,
//! without the GIL. A device that is not the last to arrive leaves its buffers and a
//! future with the meeting and returns: XLA's thread goes on, and its call completes
//! when the future is set. The last to arrive takes the GIL once and hands every
//! device's operand and result buffers ([`CallBuffers`]) to the meeting's Python
//! callback, which plans the simulation and runs it on them in place (the data does not
//! pass through Python), then sets the others' futures. A watchdog fails a round whose
//! devices do not all come in time. A host callback per device (`io_callback`) cost
//! milliseconds a call in JAX's machinery alone; a call that blocked its XLA thread
//! until the last device came cost the P threads' sleeps and wake-ups.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::BadInput;
use crate::xla_ffi::{self, Buffers, CallFrame, Future};

/// A device's operand or result buffer: XLA's memory, valid until its call completes.
#[derive(Clone, Copy)]
struct Span {
    data: *mut u8,
    len: usize,
}
// The pointers are only used before their calls complete (XLA keeps them until then).
unsafe impl Send for Span {}
unsafe impl Sync for Span {}

impl Span {
    /// The buffer's bytes (valid while its device's call waits in the meeting).
    fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: XLA's buffer of that size, alive until its call completes (after the round).
        unsafe { std::slice::from_raw_parts(self.data, self.len) }
    }

    /// The buffer, to write into.
    #[allow(clippy::mut_from_ref)] // XLA's memory, written by one thread: the leader's
    fn bytes_mut(&self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as in `bytes`; only the meeting's leader writes, once.
        unsafe { std::slice::from_raw_parts_mut(self.data, self.len) }
    }
}

/// One round's buffers: every device's operands (after the header) and results, XLA's
/// memory, lent to the meeting's Python callback while the round's calls wait; closed
/// (every access an error) once the callback returns.
#[pyclass(module = "tpusim._native", frozen)]
pub struct CallBuffers {
    ins: Vec<Vec<Span>>,
    outs: Vec<Vec<Span>>,
    open: AtomicBool,
}

impl CallBuffers {
    fn span(&self, results: bool, device: usize, k: usize) -> PyResult<&Span> {
        if !self.open.load(Ordering::Acquire) {
            return Err(BadInput::new_err(
                "bad input: the buffers of a pallas_call that has returned",
            ));
        }
        let (list, what) = if results {
            (&self.outs, "result")
        } else {
            (&self.ins, "operand")
        };
        list.get(device).and_then(|r| r.get(k)).ok_or_else(|| {
            pyo3::exceptions::PyIndexError::new_err(format!("no {what} {k} of device {device}"))
        })
    }

    /// Operand `k` of `device`.
    pub fn operand(&self, device: usize, k: usize) -> PyResult<&[u8]> {
        Ok(self.span(false, device, k)?.bytes())
    }

    /// Result `k` of `device`, to write into.
    #[allow(clippy::mut_from_ref)] // XLA's memory, written by the round's one runner
    pub fn result(&self, device: usize, k: usize) -> PyResult<&mut [u8]> {
        Ok(self.span(true, device, k)?.bytes_mut())
    }
}

#[pymethods]
impl CallBuffers {
    /// How many devices' buffers.
    #[getter]
    fn devices(&self) -> usize {
        self.ins.len()
    }

    /// A copy of operand `k` of `device`.
    fn operand_bytes<'py>(
        &self,
        py: Python<'py>,
        device: usize,
        k: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        Ok(PyBytes::new(py, self.operand(device, k)?))
    }

    /// Writes `data` (a C-contiguous uint8 buffer of the result's size) into result `k`
    /// of `device`.
    fn write_result(
        &self,
        py: Python<'_>,
        device: usize,
        k: usize,
        data: PyBuffer<u8>,
    ) -> PyResult<()> {
        let dst = self.result(device, k)?;
        if data.len_bytes() != dst.len() {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                "result {k} of device {device}: {} bytes for a buffer of {}",
                data.len_bytes(),
                dst.len()
            )));
        }
        data.copy_to_slice(py, dst)
    }

    /// Zeros every result.
    fn zero_results(&self) -> PyResult<()> {
        for d in 0..self.outs.len() {
            for k in 0..self.outs[d].len() {
                self.result(d, k)?.fill(0);
            }
        }
        Ok(())
    }
}

unsafe fn spans(list: &Buffers, from: usize) -> Result<Vec<Span>, String> {
    (from..list.size as usize)
        .map(|i| {
            let b = &**list.items.add(i);
            let elem = xla_ffi::element_bytes(b.dtype).ok_or_else(|| {
                format!(
                    "operand {i} has an XLA type ({}) tpusim cannot take",
                    b.dtype
                )
            })?;
            let n: i64 = (0..b.rank as usize).map(|k| *b.dims.add(k)).product();
            Ok(Span {
                data: b.data as *mut u8,
                len: n as usize * elem,
            })
        })
        .collect()
}

/// Why a call failed: in Python's `run` (which has kept the error), or here.
#[derive(Clone)]
enum Failure {
    InRun(String),
    Here(String),
}

impl Failure {
    fn message(&self) -> &str {
        match self {
            Failure::InRun(m) | Failure::Here(m) => m,
        }
    }
}

/// One round of a meeting: the calls of every device's `k`-th call.
struct Round {
    ins: Vec<Option<Vec<Span>>>,
    outs: Vec<Option<Vec<Span>>>,
    arrived: usize,
    /// The calls that came and went on, completed when the round ends.
    pending: Vec<Future>,
    deadline: Instant,
    /// Set once the round failed before every device came: its late calls fail at once.
    failed: Option<String>,
}

/// What a device's call does once it has joined its round.
enum Joined {
    /// Return this future to XLA: the round completes it.
    Later(*mut xla_ffi::RawFuture),
    /// The call is over (it led the round, or the round had failed).
    Now(Result<(), Failure>),
}

struct Meeting {
    name: String,
    devices: usize,
    timeout: Duration,
    run: Py<PyAny>,
    /// Told the message of a call that fails here, not in `run` (a device missing).
    failed: Py<PyAny>,
    /// Every device's next round, and the rounds some device has come to.
    state: Mutex<(Vec<u64>, HashMap<u64, Round>)>,
}

fn meetings() -> &'static Mutex<Vec<&'static Meeting>> {
    static M: OnceLock<Mutex<Vec<&'static Meeting>>> = OnceLock::new();
    M.get_or_init(|| Mutex::new(Vec::new()))
}

/// Registers a meeting of `devices` device calls of pallas_call `name`; `run` is called
/// with one round's [`CallBuffers`] and runs the call on them; `failed` is told the
/// message of a call that fails in the meeting itself (a device that did not come within
/// `timeout_s`). Returns its number, the first element of every device call's header
/// operand.
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
    /// Device `device`'s call joins its round; `api` makes its future if it is not the
    /// last to come.
    fn join(
        &'static self,
        device: usize,
        ins: Vec<Span>,
        outs: Vec<Span>,
        api: *const xla_ffi::Api,
    ) -> Joined {
        if device >= self.devices {
            return Joined::Now(Err(Failure::Here(format!(
                "device {device} in a meeting of {}",
                self.devices
            ))));
        }
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (count, rounds) = &mut *guard;
        let k = count[device];
        count[device] += 1;
        let p = self.devices;
        let round = rounds.entry(k).or_insert_with(|| {
            watchdog().opened(self);
            Round {
                ins: vec![None; p],
                outs: vec![None; p],
                arrived: 0,
                pending: Vec::new(),
                deadline: Instant::now() + self.timeout,
                failed: None,
            }
        });
        round.arrived += 1;
        if let Some(msg) = &round.failed {
            let msg = msg.clone();
            if round.arrived == p {
                rounds.remove(&k);
            }
            return Joined::Now(Err(Failure::Here(msg)));
        }
        round.ins[device] = Some(ins);
        round.outs[device] = Some(outs);
        if round.arrived < p {
            // SAFETY: the API of this call's live frame.
            return match unsafe { Future::create(api) } {
                Ok(f) => {
                    let raw = f.raw();
                    round.pending.push(f);
                    Joined::Later(raw)
                }
                Err(()) => {
                    // The round cannot wait for this call: it fails, as on a timeout.
                    let msg = "XLA refused a future for a call of pallas_call".to_string();
                    round.failed = Some(msg.clone());
                    round.ins.clear();
                    round.outs.clear();
                    let pending = std::mem::take(&mut round.pending);
                    drop(guard);
                    watchdog().closed(1);
                    for f in pending {
                        f.set(Err(&msg));
                    }
                    Joined::Now(Err(Failure::Here(msg)))
                }
            };
        }
        let round = rounds.remove(&k).expect("the round in progress");
        drop(guard);
        watchdog().closed(1);
        let ins = round
            .ins
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect();
        let outs = round
            .outs
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect();
        let outcome = self.lead(ins, outs);
        for f in round.pending {
            f.set(outcome.as_ref().map(|_| ()).map_err(Failure::message));
        }
        Joined::Now(outcome)
    }

    /// Fails the rounds whose time is up before every device came (their calls complete
    /// with the error; the devices still to come fail at once).
    fn expire(&self, now: Instant) {
        let mut expired = Vec::new();
        {
            let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
            for r in guard.1.values_mut() {
                if r.failed.is_none() && now >= r.deadline {
                    let msg = format!(
                        "bad input: only {} of the {} devices reached pallas_call `{}` within {:.0} s (every device of the shard_map must make the same calls)",
                        r.arrived,
                        self.devices,
                        self.name,
                        self.timeout.as_secs_f64()
                    );
                    r.failed = Some(msg.clone());
                    r.ins.clear();
                    r.outs.clear();
                    expired.push((msg, std::mem::take(&mut r.pending)));
                }
            }
        }
        if !expired.is_empty() {
            watchdog().closed(expired.len());
        }
        for (msg, pending) in expired {
            Python::attach(|py| self.failed.call1(py, (msg.as_str(),)).map(drop)).ok();
            for f in pending {
                f.set(Err(&msg));
            }
        }
    }

    /// Hands the operands to Python once and copies its results into XLA's buffers.
    fn lead(&self, ins: Vec<Vec<Span>>, outs: Vec<Vec<Span>>) -> Result<(), Failure> {
        Python::attach(|py| -> PyResult<()> {
            let bufs = Py::new(
                py,
                CallBuffers {
                    ins,
                    outs,
                    open: AtomicBool::new(true),
                },
            )?;
            let ran = self.run.call1(py, (bufs.clone_ref(py),));
            // XLA's buffers go back with the calls: nothing may touch them after.
            bufs.get().open.store(false, Ordering::Release);
            ran.map(drop)
        })
        .map_err(|e| Failure::InRun(Python::attach(|py| e.value(py).to_string())))
    }
}

/// The thread that fails rounds whose devices did not all come in time: it looks at the
/// meetings every tick while a round is open anywhere, and sleeps while none is.
struct Watchdog {
    /// The rounds open, and every meeting that ever had one.
    state: Mutex<(usize, Vec<&'static Meeting>)>,
    cv: Condvar,
}

fn watchdog() -> &'static Watchdog {
    static W: OnceLock<&'static Watchdog> = OnceLock::new();
    W.get_or_init(|| {
        let w: &'static Watchdog = Box::leak(Box::new(Watchdog {
            state: Mutex::new((0, Vec::new())),
            cv: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("tpusim-meetings".into())
            .spawn(move || w.watch())
            .expect("a thread for the meetings' watchdog");
        w
    })
}

impl Watchdog {
    /// `m` opened a round.
    fn opened(&self, m: &'static Meeting) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !s.1.iter().any(|o| std::ptr::eq(*o, m)) {
            s.1.push(m);
        }
        s.0 += 1;
        if s.0 == 1 {
            self.cv.notify_one();
        }
    }

    /// `n` rounds ended (ran, or failed).
    fn closed(&self, n: usize) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.0 = s.0.saturating_sub(n);
    }

    fn watch(&self) {
        let tick = Duration::from_millis(50);
        loop {
            let watched = {
                let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
                while s.0 == 0 {
                    s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
                }
                s.1.clone()
            };
            std::thread::sleep(tick);
            let now = Instant::now();
            for m in watched {
                m.expire(now);
            }
        }
    }
}

/// Joins the call of `frame` to its meeting.
unsafe fn call(frame: &mut CallFrame) -> Result<(), String> {
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
    let spans = spans(&frame.args, 1).and_then(|ins| Ok((ins, spans(&frame.rets, 0)?)));
    let joined = match spans {
        Ok((ins, outs)) => meeting.join(h[1] as usize, ins, outs, frame.api),
        Err(msg) => Joined::Now(Err(Failure::Here(msg))),
    };
    match joined {
        Joined::Later(future) => {
            frame.future = future;
            Ok(())
        }
        Joined::Now(Ok(())) => Ok(()),
        Joined::Now(Err(f)) => {
            if let Failure::Here(msg) = &f {
                Python::attach(|py| meeting.failed.call1(py, (msg.as_str(),)).map(drop)).ok();
            }
            Err(f.message().to_string())
        }
    }
}

/// The FFI handler (execute stage; answers XLA's metadata query).
unsafe extern "C" fn handler(frame: *mut CallFrame) -> *mut std::ffi::c_void {
    let f = &mut *frame;
    if xla_ffi::answer_metadata(f) || f.stage != xla_ffi::STAGE_EXECUTE {
        return null_mut();
    }
    let api = f.api;
    match catch_unwind(AssertUnwindSafe(|| call(f))) {
        Ok(Ok(())) => null_mut(),
        Ok(Err(msg)) => xla_ffi::error(api, &msg),
        Err(_) => xla_ffi::error(api, "tpusim's pallas_call handler panicked"),
    }
}
