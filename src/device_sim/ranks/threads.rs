//! Ranks as threads of one process, over channels: the same partitioned runs as MPI's,
//! without MPI (the tests use it to compare every R with one process). The threads may
//! be placed on pretend hosts ([`Layout`]): ranks on one host exchange through a shared
//! segment ([`super::shm`]) as MPI ranks on one machine do, the others by messages. A
//! rank that aborts ends the others' waits with an error instead of hanging them.

use super::Comm;
use crate::error::{Error, Result};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How often a waiting rank looks whether another one aborted.
const POLL: Duration = Duration::from_millis(50);

struct Msg {
    from: usize,
    tag: i32,
    bytes: Vec<u8>,
}

#[derive(Default)]
struct Round {
    slots: Vec<Option<Vec<u8>>>,
    filled: usize,
    result: Option<Arc<Vec<Vec<u8>>>>,
    taken: usize,
}

#[derive(Default)]
struct Shared {
    aborted: Mutex<Option<String>>,
    rounds: Mutex<HashMap<u64, Round>>,
    ready: Condvar,
}

impl Shared {
    fn aborted(&self) -> Option<String> {
        self.aborted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Where the ranks of a group of threads pretend to run.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Ranks per host, in blocks of consecutive ranks (at least 1).
    pub per_host: usize,
    /// The directory hosts make their shared segments in.
    pub shm_dir: PathBuf,
    /// Bytes of each shared-memory ring (`None`: as MPI ranks have them).
    pub ring_bytes: Option<usize>,
}

impl Default for Layout {
    /// Every rank on one host, shared memory where MPI ranks make it.
    fn default() -> Self {
        Self {
            per_host: usize::MAX,
            shm_dir: super::shm::dir(),
            ring_bytes: None,
        }
    }
}

/// One rank of a group of threads ([`comms`]).
pub struct ThreadComm {
    rank: usize,
    size: usize,
    layout: Layout,
    shared: Arc<Shared>,
    to: Vec<Sender<Msg>>,
    inbox: Receiver<Msg>,
    pending: Vec<VecDeque<Msg>>,
    rounds: u64,
}

/// The transports of `size` ranks, one per thread, all on one host.
pub fn comms(size: usize) -> Vec<ThreadComm> {
    comms_on(size, &Layout::default())
}

/// The transports of `size` ranks placed as `layout` says.
pub fn comms_on(size: usize, layout: &Layout) -> Vec<ThreadComm> {
    let shared = Arc::new(Shared::default());
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..size).map(|_| channel()).unzip();
    rxs.into_iter()
        .enumerate()
        .map(|(rank, inbox)| ThreadComm {
            rank,
            size,
            layout: layout.clone(),
            shared: shared.clone(),
            to: txs.clone(),
            inbox,
            pending: (0..size).map(|_| VecDeque::new()).collect(),
            rounds: 0,
        })
        .collect()
}

/// Runs `f` on `size` ranks, each a thread with its transport; their results in rank
/// order (a rank that aborted or panicked: `Err` with its message).
pub fn run<T: Send>(
    size: usize,
    f: impl Fn(Box<dyn Comm>) -> T + Sync,
) -> Vec<std::result::Result<T, String>> {
    run_on(size, &Layout::default(), f)
}

/// [`run`] with the ranks placed as `layout` says.
pub fn run_on<T: Send>(
    size: usize,
    layout: &Layout,
    f: impl Fn(Box<dyn Comm>) -> T + Sync,
) -> Vec<std::result::Result<T, String>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = comms_on(size, layout)
            .into_iter()
            .map(|c| {
                let f = &f;
                s.spawn(move || f(Box::new(c)))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().map_err(|p| {
                    p.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "a rank panicked".into())
                })
            })
            .collect()
    })
}

impl ThreadComm {
    fn check(&self) -> Result<()> {
        match self.shared.aborted() {
            Some(m) => Err(Error::bad_input(format!("another rank aborted: {m}"))),
            None => Ok(()),
        }
    }
}

impl Comm for ThreadComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn host_peers(&self) -> Vec<usize> {
        let per = self.layout.per_host.max(1);
        let first = self.rank / per * per;
        (first..first.saturating_add(per).min(self.size)).collect()
    }

    fn shm_dir(&self) -> PathBuf {
        self.layout.shm_dir.clone()
    }

    fn ring_bytes(&self) -> Option<usize> {
        self.layout.ring_bytes
    }

    fn alive(&mut self) -> Result<()> {
        self.check()
    }

    fn send(&mut self, to: usize, tag: i32, bytes: Vec<u8>) -> Result<()> {
        self.check()?;
        self.to[to]
            .send(Msg {
                from: self.rank,
                tag,
                bytes,
            })
            .map_err(|_| Error::bad_input(format!("rank {to} has gone")))
    }

    fn recv(&mut self, from: usize, tag: i32, out: &mut [u8]) -> Result<()> {
        let len = out.len();
        let msg = loop {
            if let Some(m) = self.pending[from].pop_front() {
                break m;
            }
            self.check()?;
            match self.inbox.recv_timeout(POLL) {
                Ok(m) => {
                    let f = m.from;
                    self.pending[f].push_back(m);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Error::bad_input("every other rank has gone"))
                }
            }
        };
        if msg.tag != tag || msg.bytes.len() != len {
            return Err(Error::bad_input(format!(
                "rank {} expected message {tag} of {len} bytes from rank {from}, got message {} of {} bytes",
                self.rank,
                msg.tag,
                msg.bytes.len()
            )));
        }
        out.copy_from_slice(&msg.bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.check()
    }

    fn exchange(&mut self, bytes: Vec<u8>) -> Result<Vec<Vec<u8>>> {
        let round = self.rounds;
        self.rounds += 1;
        let shared = self.shared.clone();
        let mut rounds = shared.rounds.lock().unwrap_or_else(|e| e.into_inner());
        {
            let r = rounds.entry(round).or_default();
            if r.slots.is_empty() {
                r.slots = vec![None; self.size];
            }
            r.slots[self.rank] = Some(bytes);
            r.filled += 1;
            if r.filled == self.size {
                let all = std::mem::take(&mut r.slots).into_iter().flatten().collect();
                r.result = Some(Arc::new(all));
                shared.ready.notify_all();
            }
        }
        loop {
            let r = rounds
                .get_mut(&round)
                .expect("a round lives until every rank took it");
            if let Some(all) = r.result.clone() {
                r.taken += 1;
                if r.taken == self.size {
                    rounds.remove(&round);
                }
                return Ok(all.as_ref().clone());
            }
            if let Some(m) = shared.aborted() {
                return Err(Error::bad_input(format!("another rank aborted: {m}")));
            }
            rounds = shared
                .ready
                .wait_timeout(rounds, POLL)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn abort(&mut self, _code: i32, message: &str) -> ! {
        {
            let mut a = self
                .shared
                .aborted
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            a.get_or_insert_with(|| message.to_string());
        }
        self.shared.ready.notify_all();
        panic!("{message}")
    }
}
