//! Stopping long work when its user asks (Ctrl-C), for callers that outlive it: the
//! Python package, whose signal handlers run only on the main thread and only between
//! Python instructions, while a simulated call runs in Rust, often on another thread.
//!
//! A thread that starts long work [`watch`]es; the long loops of the pipeline (the
//! scheduler's steps, the verifier's schedules, an executor's iterations, a kernel's
//! tracing, a front end's recording) call [`check`] as they go, which fails with
//! [`Error::Interrupted`] once the watch's poll says so (Python's `PyErr_CheckSignals`,
//! which runs the interpreter's own handlers on its main thread; asked at most every
//! [`POLL_EVERY`]), or, for a watch without a poll, once a signal counted by
//! [`count_signals`] arrived after the watch began. The work then unwinds as from any error: temporary files are removed,
//! nothing is half-written. Without a watch, [`check`] never fails: the command line's
//! handler ends the process instead (see [`crate::files::remove_temporaries_on_signals`]).

use crate::error::{Error, Result};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Signals counted so far (see [`count_signals`]).
static SIGNALS: AtomicU64 = AtomicU64::new(0);

/// How often a watch's poll runs at most.
pub const POLL_EVERY: Duration = Duration::from_millis(20);

/// A question a watch asks now and then: true when the work must stop (e.g. Python's
/// signal handlers raised).
pub type Poll = fn() -> bool;

/// What a watching thread knows.
struct Watch {
    /// [`SIGNALS`] when the watch began.
    since: u64,
    poll: Option<Poll>,
    next_poll: Instant,
    stopped: bool,
}

thread_local! {
    static WATCH: RefCell<Option<Watch>> = const { RefCell::new(None) };
}

/// Counts `signals` (SIGINT, …) as requests to stop watched work, keeping whatever
/// handler the process had for them (it runs as before, after the count). A no-op where
/// signals are not Unix's.
pub fn count_signals(signals: &[i32]) -> Result<()> {
    #[cfg(unix)]
    for &sig in signals {
        // SAFETY: the action is one atomic add: async-signal-safe, it cannot panic.
        unsafe {
            signal_hook::low_level::register(sig, || {
                SIGNALS.fetch_add(1, Ordering::SeqCst);
            })
        }
        .map_err(|e| Error::bad_input(format!("cannot install a handler of signal {sig}: {e}")))?;
    }
    #[cfg(not(unix))]
    let _ = signals;
    Ok(())
}

/// Counts a request to stop, as a counted signal does.
pub fn request() {
    SIGNALS.fetch_add(1, Ordering::SeqCst);
}

/// While alive, this thread's work stops at its next [`check`] once asked to (see the
/// module docs). Watches nest: an inner one keeps the outer's start and poll.
#[must_use = "the watch ends when this is dropped"]
pub struct Watching {
    owner: bool,
}

/// Starts watching on this thread: with `poll`, asked at most every [`POLL_EVERY`],
/// the poll alone decides (it sees the signals itself, and may let one pass); without,
/// a counted signal stops the work.
pub fn watch(poll: Option<Poll>) -> Watching {
    WATCH.with(|w| {
        let mut w = w.borrow_mut();
        if w.is_some() {
            return Watching { owner: false };
        }
        *w = Some(Watch {
            since: SIGNALS.load(Ordering::SeqCst),
            poll,
            next_poll: Instant::now() + POLL_EVERY,
            stopped: false,
        });
        Watching { owner: true }
    })
}

impl Drop for Watching {
    fn drop(&mut self) {
        if self.owner {
            WATCH.with(|w| *w.borrow_mut() = None);
        }
    }
}

/// Fails with [`Error::Interrupted`] when this thread's watched work was asked to stop
/// (cheap: call it every few thousand steps of a long loop).
pub fn check() -> Result<()> {
    if requested() {
        Err(Error::Interrupted)
    } else {
        Ok(())
    }
}

/// True when this thread's watched work was asked to stop (it stays asked until the
/// watch ends).
pub fn requested() -> bool {
    WATCH.with(|w| {
        let mut w = w.borrow_mut();
        let Some(w) = w.as_mut() else {
            return false;
        };
        if w.stopped {
            return true;
        }
        match w.poll {
            None => w.stopped = SIGNALS.load(Ordering::SeqCst) != w.since,
            Some(poll) => {
                let now = Instant::now();
                if now >= w.next_poll {
                    w.next_poll = now + POLL_EVERY;
                    w.stopped = poll();
                }
            }
        }
        w.stopped
    })
}

/// Waits for `ready` to say yes, asking every few milliseconds, watching for a request
/// to stop in between (a FIFO's reader, a device that has not come yet).
pub fn wait_until(mut ready: impl FnMut() -> Result<bool>) -> Result<()> {
    while !ready()? {
        check()?;
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: requests are process-wide, so watches in tests run side by side would
    // see each other's.
    #[test]
    fn requests_stop_watched_work_begun_before_them_and_polls_stop_it_too() {
        // Unwatched: never stopped.
        request();
        assert!(check().is_ok());
        {
            // A request made before the watch began does not stop it.
            let _w = watch(None);
            assert!(check().is_ok());
            request();
            assert!(matches!(check(), Err(Error::Interrupted)));
            // It stays stopped.
            assert!(requested());
        }
        assert!(check().is_ok());
        // An inner watch's end does not end the outer one.
        let outer = watch(None);
        {
            let _inner = watch(None);
            request();
        }
        assert!(requested());
        drop(outer);
        assert!(!requested());
        // With a poll, the poll decides: a request does not stop it...
        let w = watch(Some(|| false));
        request();
        assert!(!requested());
        drop(w);
        // ...and a poll that says stop does.
        let _w = watch(Some(|| true));
        let start = Instant::now();
        while check().is_ok() {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "the poll never ran"
            );
        }
    }
}
