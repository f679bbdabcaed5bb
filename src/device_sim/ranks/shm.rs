//! Ranks on one host exchange the bytes of their DMAs through shared memory instead of
//! messages: one segment per host (a file in `/dev/shm`, or `TPUSIM_SHM_DIR`, made by the
//! host's lowest rank, mapped by the others and removed as soon as all have mapped it, so
//! nothing is left behind however the run ends), holding a ring of bytes per ordered
//! pair of ranks. A sender copies a view straight from its device's memory into the ring
//! and a receiver straight from the ring into its device's memory: two copies, no
//! allocation, no library in between. Where the segment cannot be made or mapped, the
//! host's ranks keep exchanging messages.

use crate::error::{Error, Result};
use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Where segments are made unless `TPUSIM_SHM_DIR` says otherwise.
const DEFAULT_DIR: &str = "/dev/shm";

/// Bytes of one ring: room for a sender to run this far ahead of its receiver.
pub const RING_BYTES: usize = 32 << 20;

/// Ring positions advance in steps of this many bytes, so that every piece of a message
/// starts on a word (and on an element of any width).
const STEP: usize = 8;

/// How long a waiting rank sleeps before it looks whether the others are still there.
const NAP: Duration = Duration::from_millis(20);

/// Rounds up to [`STEP`].
fn stepped(n: usize) -> usize {
    n.div_ceil(STEP) * STEP
}

/// The directory segments are made in.
pub fn dir() -> PathBuf {
    std::env::var_os("TPUSIM_SHM_DIR")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_DIR), PathBuf::from)
}

/// A file mapped shared into this process.
pub struct Segment {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory; who writes which part of it is the rings' rule.
unsafe impl Send for Segment {}
unsafe impl Sync for Segment {}

impl Segment {
    /// Makes `path` (which must not exist) of `len` bytes, its memory reserved up front
    /// (so a full file system is an error here, not a fault later), and maps it.
    pub fn create(path: &Path, len: usize) -> std::io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        let mapped = (|| {
            file.set_len(len as u64)?;
            // SAFETY: a valid descriptor and range.
            let code = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
            if code != 0 {
                return Err(std::io::Error::from_raw_os_error(code));
            }
            Self::map(&file, len)
        })();
        if mapped.is_err() {
            let _ = std::fs::remove_file(path);
        }
        mapped
    }

    /// Maps `path`, made by [`Segment::create`] with `len` bytes.
    pub fn open(path: &Path, len: usize) -> std::io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let size = file.metadata()?.len();
        if size != len as u64 {
            return Err(std::io::Error::other(format!(
                "{} has {size} bytes, not {len}",
                path.display()
            )));
        }
        Self::map(&file, len)
    }

    fn map(file: &std::fs::File, len: usize) -> std::io::Result<Self> {
        // SAFETY: a shared mapping of a file of `len` bytes; it outlives the descriptor.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self {
            ptr: ptr as *mut u8,
            len,
        })
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, no longer used (the rings borrow it).
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// Bytes of all the rings of one host together, at most (each ring gets its share, up
/// to [`RING_BYTES`]).
const HOST_BYTES: usize = 256 << 20;

/// Bytes of the shared rings one of `ranks` ranks can touch at most (its rings to and
/// from every other rank of its host), however many of them share its host: what the
/// memory budget counts per rank.
pub fn rank_bytes_at_most(ranks: usize) -> usize {
    // From some tens of ranks a host's rings would be under `MIN_RING`: none at all.
    let most = (HOST_BYTES / MIN_RING).isqrt() + 2;
    (2..=ranks.min(most))
        .map(|h| 2 * (h - 1) * ring_bytes(h).unwrap_or(0))
        .max()
        .unwrap_or(0)
}

/// The smallest ring: a host with so many ranks that their rings would be smaller
/// exchanges messages.
const MIN_RING: usize = 64 << 10;

/// The ranks of one host connected through a segment: a ring from each to each other.
pub struct Host {
    seg: Segment,
    /// The host's ranks, in rank order.
    peers: Vec<usize>,
    /// This rank's index among them.
    me: usize,
    ring: usize,
}

impl Host {
    /// Ranks on this host.
    pub fn ranks(&self) -> usize {
        self.peers.len()
    }

    fn local(&self, rank: usize) -> Option<usize> {
        self.peers
            .binary_search(&rank)
            .ok()
            .filter(|&k| k != self.me)
    }

    /// The ring to rank `rank`, when it is on this host.
    pub fn to(&self, rank: usize) -> Option<Ring<'_>> {
        let k = self.local(rank)?;
        Some(ring(&self.seg, self.peers.len(), self.ring, self.me, k))
    }

    /// The ring from rank `rank`, when it is on this host.
    pub fn from(&self, rank: usize) -> Option<Ring<'_>> {
        let k = self.local(rank)?;
        Some(ring(&self.seg, self.peers.len(), self.ring, k, self.me))
    }
}

/// The bytes of each ring between `ranks` ranks of one host (`None`: too many ranks).
fn ring_bytes(ranks: usize) -> Option<usize> {
    let pairs = ranks * ranks.saturating_sub(1);
    let share = (HOST_BYTES / pairs.max(1)) / MIN_RING * MIN_RING;
    (share >= MIN_RING).then_some(share.min(RING_BYTES))
}

/// Connects rank `rank` to the other ranks of its host, `peers` (a collective call: every
/// rank calls it, with `exchange` the ranks' all-gather, twice), through rings of `ring`
/// bytes each (`None`: the host's share). The host's lowest rank makes a segment in `dir`
/// and the others map it; once every one of them has (or has
/// failed to), the file is removed, so only the mappings hold the memory. `Err` with the
/// reason where this host's ranks exchange messages (empty: this rank is alone on it).
pub fn connect(
    rank: usize,
    peers: &[usize],
    dir: &Path,
    ring: Option<usize>,
    mut exchange: impl FnMut(&[u8]) -> Result<Vec<Vec<u8>>>,
) -> Result<std::result::Result<Host, String>> {
    let mut peers = peers.to_vec();
    peers.sort_unstable();
    let n = peers.len();
    let me = peers.iter().position(|&r| r == rank);
    let ring = match ring {
        Some(r) => Some(stepped(r.max(HEADER))),
        None => ring_bytes(n),
    };
    let len = ring.map_or(0, |r| segment_bytes(n, r));
    // Round 1: the host's lowest rank makes the segment and says where, or why not.
    let (mut made, mut path) = (None, None);
    let mut said = Vec::new();
    if n > 1 && me == Some(0) {
        let p = dir.join(format!(
            "tpusim-{}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        let r = match ring {
            None => Err(format!("{n} ranks on one host")),
            Some(_) => Segment::create(&p, len)
                .map_err(|e| format!("cannot make {len} bytes in {}: {e}", dir.display())),
        };
        match r {
            Ok(seg) => {
                said = [&[1u8][..], p.as_os_str().as_encoded_bytes()].concat();
                made = Some(seg);
                path = Some(p);
            }
            Err(why) => said = [&[0u8][..], why.as_bytes()].concat(),
        }
    }
    let all = exchange(&said)?;
    // Round 2: the others map it; every rank says whether it has its mapping.
    let mapped = if n <= 1 || me.is_none() {
        Err(String::new())
    } else if let Some(seg) = made {
        Ok(seg)
    } else {
        match all[peers[0]].split_first() {
            Some((1, p)) => {
                // SAFETY: bytes of an `OsStr` rank `peers[0]` encoded, on this host.
                let p = PathBuf::from(unsafe { std::ffi::OsStr::from_encoded_bytes_unchecked(p) });
                Segment::open(&p, len)
                    .map_err(|e| format!("rank {rank} cannot map {}: {e}", p.display()))
            }
            Some((_, why)) => Err(String::from_utf8_lossy(why).into_owned()),
            None => Err("no segment was made".into()),
        }
    };
    let all = exchange(&[u8::from(mapped.is_ok())])?;
    if let Some(p) = path {
        let _ = std::fs::remove_file(p);
    }
    let every = peers.iter().all(|&r| all[r].first() == Some(&1));
    Ok(match (mapped, me) {
        (Ok(seg), Some(me)) if every => Ok(Host {
            seg,
            peers,
            me,
            ring: ring.expect("a segment has rings"),
        }),
        (Ok(_), _) => Err("another rank of this host cannot map its shared memory".into()),
        (Err(why), _) => Err(why),
    })
}

/// One end's position in a ring: bytes it has put (or taken) so far, and a counter it
/// bumps after every move, which the other end sleeps on.
#[repr(C, align(64))]
struct Side {
    pos: AtomicU64,
    moves: AtomicU32,
}

/// A ring's two positions, each on its own cache line.
#[repr(C)]
struct Ends {
    put: Side,
    taken: Side,
}

/// Bytes of a ring's positions, before its data (a page, so data starts aligned).
const ENDS_BYTES: usize = 4096;

/// A message's header in a ring: its tag and length, checked by the receiver.
const HEADER: usize = 16;

/// Bytes of a segment holding the rings between `ranks` ranks, `ring` bytes each.
pub fn segment_bytes(ranks: usize, ring: usize) -> usize {
    ranks * ranks.saturating_sub(1) * (ENDS_BYTES + ring)
}

/// The ring from local rank `from` to local rank `to` of `ranks`, in `seg`.
pub fn ring(seg: &Segment, ranks: usize, ring: usize, from: usize, to: usize) -> Ring<'_> {
    assert!(from != to && from < ranks && to < ranks && ring.is_multiple_of(STEP));
    let k = from * (ranks - 1) + if to < from { to } else { to - 1 };
    let at = k * (ENDS_BYTES + ring);
    assert!(at + ENDS_BYTES + ring <= seg.len);
    // SAFETY: inside the mapping (checked above), page aligned.
    let base = unsafe { seg.ptr.add(at) };
    Ring {
        ends: unsafe { &*(base as *const Ends) },
        data: unsafe { base.add(ENDS_BYTES) },
        cap: ring,
        _seg: std::marker::PhantomData,
    }
}

/// A ring of bytes from one rank to another: one sender puts whole messages in order,
/// one receiver takes them in the same order. A message longer than the ring passes in
/// pieces, the sender waiting for room.
pub struct Ring<'a> {
    ends: &'a Ends,
    data: *mut u8,
    cap: usize,
    _seg: std::marker::PhantomData<&'a Segment>,
}

// SAFETY: the sender alone writes `put` and the bytes between `taken` and the ring's
// end; the receiver alone writes `taken`; each publishes with release and reads the
// other's position with acquire.
unsafe impl Send for Ring<'_> {}
unsafe impl Sync for Ring<'_> {}

impl Ring<'_> {
    /// Puts message `tag` of `len` bytes: `fill(offset, piece)` writes its bytes from
    /// `offset` into `piece` (a multiple of 8 bytes long, except the last). Calls `alive`
    /// while it waits for room. Returns the time it waited.
    pub fn put(
        &self,
        tag: i32,
        len: usize,
        mut fill: impl FnMut(usize, &mut [u8]) -> Result<()>,
        alive: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Duration> {
        let mut header = [0u8; HEADER];
        header[..8].copy_from_slice(&(tag as i64).to_le_bytes());
        header[8..].copy_from_slice(&(len as u64).to_le_bytes());
        let w = self.put_bytes(
            HEADER,
            |o, p| {
                p.copy_from_slice(&header[o..o + p.len()]);
                Ok(())
            },
            alive,
        )?;
        Ok(w + self.put_bytes(len, &mut fill, alive)?)
    }

    /// Takes message `tag` of `len` bytes: `drain(offset, piece)` gets its bytes from
    /// `offset` (pieces a multiple of 8 bytes long, except the last). A message of
    /// another tag or length is an error. Returns the time it waited.
    pub fn take(
        &self,
        tag: i32,
        len: usize,
        mut drain: impl FnMut(usize, &[u8]) -> Result<()>,
        alive: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Duration> {
        let mut header = [0u8; HEADER];
        let w = self.take_bytes(
            HEADER,
            |o, p| {
                header[o..o + p.len()].copy_from_slice(p);
                Ok(())
            },
            alive,
        )?;
        let got_tag = i64::from_le_bytes(header[..8].try_into().expect("8 bytes"));
        let got_len = u64::from_le_bytes(header[8..].try_into().expect("8 bytes"));
        if got_tag != tag as i64 || got_len != len as u64 {
            return Err(Error::bad_input(format!(
                "expected message {tag} of {len} bytes through shared memory, got message \
                 {got_tag} of {got_len} bytes"
            )));
        }
        Ok(w + self.take_bytes(len, &mut drain, alive)?)
    }

    /// True when a message of `len` bytes fits in the ring's free room now (putting it
    /// will not wait).
    pub fn fits(&self, len: usize) -> bool {
        let used = Self::pos(&self.ends.put) - Self::pos(&self.ends.taken);
        HEADER + stepped(len) <= self.cap - used
    }

    fn put_bytes(
        &self,
        len: usize,
        mut fill: impl FnMut(usize, &mut [u8]) -> Result<()>,
        alive: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Duration> {
        let (mine, theirs) = (&self.ends.put, &self.ends.taken);
        let mut head = mine.pos.load(Ordering::Relaxed) as usize;
        let (mut done, mut waited) = (0, Duration::ZERO);
        while done < len {
            let mut tail = theirs.pos.load(Ordering::Acquire) as usize;
            if head - tail == self.cap {
                waited += wait(theirs, || head - Self::pos(theirs) < self.cap, alive)?;
                tail = theirs.pos.load(Ordering::Acquire) as usize;
            }
            let at = head % self.cap;
            let room = (self.cap - (head - tail)).min(self.cap - at);
            let n = room.min(len - done);
            // SAFETY: bytes `at..at + n` are free: the receiver took them (tail) and
            // only this sender writes there until it publishes `head`.
            let piece = unsafe { std::slice::from_raw_parts_mut(self.data.add(at), n) };
            fill(done, piece)?;
            done += n;
            head += if done == len { stepped(n) } else { n };
            publish(mine, head);
        }
        Ok(waited)
    }

    fn take_bytes(
        &self,
        len: usize,
        mut drain: impl FnMut(usize, &[u8]) -> Result<()>,
        alive: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Duration> {
        let (mine, theirs) = (&self.ends.taken, &self.ends.put);
        let mut tail = mine.pos.load(Ordering::Relaxed) as usize;
        let (mut done, mut waited) = (0, Duration::ZERO);
        while done < len {
            let mut head = theirs.pos.load(Ordering::Acquire) as usize;
            if head == tail {
                waited += wait(theirs, || Self::pos(theirs) != tail, alive)?;
                head = theirs.pos.load(Ordering::Acquire) as usize;
            }
            let at = tail % self.cap;
            let n = (head - tail).min(self.cap - at).min(len - done);
            // SAFETY: bytes `at..at + n` were published by the sender (head) and stay
            // until this receiver publishes `tail`.
            let piece = unsafe { std::slice::from_raw_parts(self.data.add(at), n) };
            drain(done, piece)?;
            done += n;
            tail += if done == len { stepped(n) } else { n };
            publish(mine, tail);
        }
        Ok(waited)
    }

    fn pos(side: &Side) -> usize {
        side.pos.load(Ordering::Acquire) as usize
    }
}

/// Moves `side` to `pos` and wakes the other end if it sleeps.
fn publish(side: &Side, pos: usize) {
    side.pos.store(pos as u64, Ordering::Release);
    side.moves.fetch_add(1, Ordering::Release);
    wake(&side.moves);
}

/// Waits until `ready` (a condition on `side`'s position): spins a little, then sleeps
/// until `side` moves, calling `alive` every [`NAP`]. Returns the time it waited.
fn wait(
    side: &Side,
    ready: impl Fn() -> bool,
    alive: &mut dyn FnMut() -> Result<()>,
) -> Result<Duration> {
    let t = Instant::now();
    for _ in 0..256 {
        if ready() {
            return Ok(t.elapsed());
        }
        std::hint::spin_loop();
    }
    loop {
        let moves = side.moves.load(Ordering::Acquire);
        if ready() {
            return Ok(t.elapsed());
        }
        sleep(&side.moves, moves);
        alive()?;
    }
}

/// Sleeps while `word` holds `seen` (or for at most [`NAP`]).
#[cfg(target_os = "linux")]
fn sleep(word: &AtomicU32, seen: u32) {
    let nap = libc::timespec {
        tv_sec: 0,
        tv_nsec: NAP.as_nanos() as libc::c_long,
    };
    // SAFETY: a futex wait on a live word of shared memory (a process-shared futex: no
    // FUTEX_PRIVATE_FLAG), with a timeout.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            seen,
            &nap as *const libc::timespec,
            std::ptr::null::<u32>(),
            0,
        )
    };
}

/// Wakes the ranks sleeping on `word`.
#[cfg(target_os = "linux")]
fn wake(word: &AtomicU32) {
    // SAFETY: a futex wake on a live word of shared memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0,
        )
    };
}

#[cfg(not(target_os = "linux"))]
fn sleep(word: &AtomicU32, seen: u32) {
    let t = Instant::now();
    while word.load(Ordering::Acquire) == seen && t.elapsed() < NAP {
        std::thread::sleep(Duration::from_micros(20));
    }
}

#[cfg(not(target_os = "linux"))]
fn wake(_word: &AtomicU32) {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The budget's count per rank covers the rings of a rank on a host of any size up to
    /// the job's ranks, and the host's segment split among its ranks.
    #[test]
    fn a_rank_touches_no_more_ring_bytes_than_the_budget_counts() {
        assert_eq!(rank_bytes_at_most(1), 0);
        assert_eq!(rank_bytes_at_most(1 << 40), rank_bytes_at_most(200));
        for ranks in 2..200 {
            let counted = rank_bytes_at_most(ranks);
            for h in 2..=ranks {
                let Some(ring) = ring_bytes(h) else { continue };
                assert!(2 * (h - 1) * (ring + ENDS_BYTES) <= counted + 2 * (h - 1) * ENDS_BYTES);
                assert!(segment_bytes(h, ring) <= h * (counted + 2 * (h - 1) * ENDS_BYTES));
            }
        }
        assert_eq!(rank_bytes_at_most(2), 2 * RING_BYTES);
    }

    #[test]
    fn messages_longer_than_the_ring_pass_in_order_between_threads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg");
        let cap = 4096;
        let seg = Segment::create(&path, segment_bytes(2, cap)).unwrap();
        let other = Segment::open(&path, segment_bytes(2, cap)).unwrap();
        std::fs::remove_file(&path).unwrap();
        // Lengths that are not multiples of the step, and longer than the ring.
        let lens = [0usize, 3, 8, 4095, 4096, 4097, 10_001, 2, 20_000];
        let data = |m: usize, i: usize| (m * 31 + i * 7) as u8;
        std::thread::scope(|s| {
            s.spawn(|| {
                let r = ring(&seg, 2, cap, 0, 1);
                for (m, &len) in lens.iter().enumerate() {
                    let fill = |o: usize, p: &mut [u8]| {
                        for (k, b) in p.iter_mut().enumerate() {
                            *b = data(m, o + k);
                        }
                        Ok(())
                    };
                    r.put(m as i32, len, fill, &mut || Ok(())).unwrap();
                }
            });
            let r = ring(&other, 2, cap, 0, 1);
            for (m, &len) in lens.iter().enumerate() {
                let mut got = vec![0u8; len];
                let drain = |o: usize, p: &[u8]| {
                    assert!(o.is_multiple_of(STEP));
                    got[o..o + p.len()].copy_from_slice(p);
                    Ok(())
                };
                r.take(m as i32, len, drain, &mut || Ok(())).unwrap();
                let want: Vec<u8> = (0..len).map(|i| data(m, i)).collect();
                assert_eq!(got, want, "message {m}");
            }
            // A message taken under the wrong tag is an error, not a wrong answer.
            let r0 = ring(&seg, 2, cap, 1, 0);
            r0.put(
                5,
                4,
                |_, p| {
                    p.fill(1);
                    Ok(())
                },
                &mut || Ok(()),
            )
            .unwrap();
            let e = ring(&other, 2, cap, 1, 0)
                .take(6, 4, |_, _| Ok(()), &mut || Ok(()))
                .unwrap_err();
            assert!(e.to_string().contains("expected message 6"), "{e}");
        });
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_segment_that_cannot_be_made_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("seg");
        assert!(Segment::create(&path, 4096).is_err());
        assert!(Segment::open(&path, 4096).is_err());
    }
}
