//! The ranks of an MPI job (`mpirun`, `srun --mpi=pmix`): [`Comm`] over MPI's
//! point-to-point messages (a DMA between ranks of different hosts is one `MPI_Isend`,
//! received with `MPI_Recv` under its schedule position's tag, both from buffers used
//! again and again) and its all-gather. Ranks on one host, as MPI's shared-memory split
//! finds them, exchange through shared memory instead ([`super::shm`]). Built with the `mpi`
//! cargo feature against the system's MPI (Debian: `libopenmpi-dev`).

use super::Comm;
use crate::error::{Error, Result};
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::CommunicatorCollectives;
use mpi::Count;
use std::collections::VecDeque;
use std::os::raw::c_void;

/// Bytes of sends that may be in flight before the oldest is waited for (at least one
/// message always is).
const PENDING_BYTES: usize = 64 << 20;

/// The largest piece one MPI call moves (counts are 32-bit); longer messages go as
/// several, in order under one tag.
const CHUNK: usize = 1 << 30;

/// Buffers of finished sends kept for the next ones.
const SPARES: usize = 8;

/// True when this process was started by an MPI launcher: `mpirun`/`mpiexec` (Open MPI,
/// MPICH) or Slurm's `srun` with a PMI plugin.
pub fn launched() -> bool {
    [
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "PMIX_RANK",
        "PMI_RANK",
        "MPI_LOCALNRANKS",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some())
}

/// A send in flight: its bytes live until MPI is done with them.
struct Pending {
    bytes: Vec<u8>,
    requests: Vec<ffi::MPI_Request>,
}

/// This process's rank of `MPI_COMM_WORLD`.
pub struct MpiComm {
    world: SimpleCommunicator,
    rank: usize,
    size: usize,
    on_host: usize,
    local_rank: usize,
    /// The ranks of this host, in rank order.
    host_peers: Vec<usize>,
    pending: VecDeque<Pending>,
    pending_bytes: usize,
    /// Buffers of sends MPI is done with, to fill again.
    spares: Vec<Vec<u8>>,
    /// Dropped last: finalizes MPI.
    _universe: mpi::environment::Universe,
}

// SAFETY: MPI is initialized with `MPI_THREAD_SERIALIZED`, so any thread may make MPI
// calls while no other does; `Ranks` holds the transport behind a mutex, and its
// handles (the communicator, the requests of sends in flight) are MPI's to use from
// any thread under that rule.
unsafe impl Send for MpiComm {}

fn failed(what: &str, code: i32) -> Error {
    Error::bad_input(format!("MPI {what} failed (error {code})"))
}

impl MpiComm {
    /// Initializes MPI (once per process); `None` when it already was.
    pub fn init() -> Option<Self> {
        let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Serialized)?;
        let world = universe.world();
        let host = world.split_shared(world.rank());
        let mut peers = vec![0i32; host.size() as usize];
        host.all_gather_into(&world.rank(), &mut peers[..]);
        let mut host_peers: Vec<usize> = peers.iter().map(|&r| r as usize).collect();
        host_peers.sort_unstable();
        Some(Self {
            rank: world.rank() as usize,
            size: world.size() as usize,
            on_host: host.size() as usize,
            local_rank: host.rank() as usize,
            host_peers,
            world,
            pending: VecDeque::new(),
            pending_bytes: 0,
            spares: Vec::new(),
            _universe: universe,
        })
    }

    /// Waits for the oldest send in flight.
    fn wait_oldest(&mut self) -> Result<()> {
        if let Some(mut p) = self.pending.pop_front() {
            for r in &mut p.requests {
                // SAFETY: `r` is a request of a send whose buffer `p.bytes` is alive.
                let code = unsafe { ffi::MPI_Wait(r, ffi::RSMPI_STATUS_IGNORE) };
                if code != 0 {
                    return Err(failed("MPI_Wait", code));
                }
            }
            self.retire(p.bytes);
        }
        Ok(())
    }

    /// Keeps the buffer of a finished send for the next (a few, the largest).
    fn retire(&mut self, bytes: Vec<u8>) {
        self.pending_bytes -= bytes.len();
        self.spares.push(bytes);
        if self.spares.len() > SPARES {
            self.spares
                .sort_unstable_by_key(|b| std::cmp::Reverse(b.capacity()));
            self.spares.truncate(SPARES);
        }
    }

    /// Drops the sends MPI is done with, oldest first.
    fn reap(&mut self) -> Result<()> {
        while let Some(p) = self.pending.front_mut() {
            let mut done = true;
            for r in &mut p.requests {
                let mut flag = 0;
                // SAFETY: as in `wait_oldest`; a completed request becomes MPI_REQUEST_NULL.
                let code = unsafe { ffi::MPI_Test(r, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
                if code != 0 {
                    return Err(failed("MPI_Test", code));
                }
                done &= flag != 0;
            }
            if !done {
                break;
            }
            let p = self.pending.pop_front().expect("the front exists");
            self.retire(p.bytes);
        }
        Ok(())
    }
}

impl Comm for MpiComm {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn on_host(&self) -> usize {
        self.on_host
    }

    fn local_rank(&self) -> usize {
        self.local_rank
    }

    fn host_peers(&self) -> Vec<usize> {
        self.host_peers.clone()
    }

    fn spare(&mut self, len: usize) -> Vec<u8> {
        // The smallest kept buffer that holds `len` bytes, else the largest (grown).
        let fits = (0..self.spares.len())
            .filter(|&i| self.spares[i].capacity() >= len)
            .min_by_key(|&i| self.spares[i].capacity());
        let pick =
            fits.or_else(|| (0..self.spares.len()).max_by_key(|&i| self.spares[i].capacity()));
        let mut b = pick.map_or_else(Vec::new, |i| self.spares.swap_remove(i));
        b.resize(len, 0);
        b
    }

    fn send(&mut self, to: usize, tag: i32, bytes: Vec<u8>) -> Result<()> {
        self.reap()?;
        while !self.pending.is_empty() && self.pending_bytes + bytes.len() > PENDING_BYTES {
            self.wait_oldest()?;
        }
        let mut p = Pending {
            bytes,
            requests: Vec::new(),
        };
        let chunks: Vec<(usize, usize)> = if p.bytes.is_empty() {
            vec![(0, 0)]
        } else {
            (0..p.bytes.len())
                .step_by(CHUNK)
                .map(|o| (o, CHUNK.min(p.bytes.len() - o)))
                .collect()
        };
        for (o, n) in chunks {
            let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
            // SAFETY: the buffer lives in `p`, kept in `pending` until the request is done.
            let code = unsafe {
                ffi::MPI_Isend(
                    p.bytes.as_ptr().add(o) as *const c_void,
                    n as Count,
                    ffi::RSMPI_UINT8_T,
                    to as i32,
                    tag,
                    self.world.as_raw(),
                    &mut req,
                )
            };
            if code != 0 {
                return Err(failed("MPI_Isend", code));
            }
            p.requests.push(req);
        }
        self.pending_bytes += p.bytes.len();
        self.pending.push_back(p);
        Ok(())
    }

    fn recv(&mut self, from: usize, tag: i32, buf: &mut [u8]) -> Result<()> {
        self.reap()?;
        let len = buf.len();
        let mut at = 0;
        loop {
            let n = CHUNK.min(len - at);
            let mut status = std::mem::MaybeUninit::<ffi::MPI_Status>::uninit();
            // SAFETY: `buf[at..at + n]` is writable; status is written by MPI.
            let code = unsafe {
                ffi::MPI_Recv(
                    buf.as_mut_ptr().add(at) as *mut c_void,
                    n as Count,
                    ffi::RSMPI_UINT8_T,
                    from as i32,
                    tag,
                    self.world.as_raw(),
                    status.as_mut_ptr(),
                )
            };
            if code != 0 {
                return Err(failed("MPI_Recv", code));
            }
            let mut got: Count = 0;
            // SAFETY: the status MPI_Recv filled in.
            unsafe { ffi::MPI_Get_count(status.as_ptr(), ffi::RSMPI_UINT8_T, &mut got) };
            if got as usize != n {
                return Err(Error::bad_input(format!(
                    "rank {} expected {n} bytes from rank {from} under tag {tag}, got {got}",
                    self.rank
                )));
            }
            at += n;
            if at >= len {
                return Ok(());
            }
        }
    }

    fn flush(&mut self) -> Result<()> {
        while !self.pending.is_empty() {
            self.wait_oldest()?;
        }
        Ok(())
    }

    fn exchange(&mut self, bytes: Vec<u8>) -> Result<Vec<Vec<u8>>> {
        let n = self.size;
        let mine = bytes.len() as Count;
        let mut counts = vec![0 as Count; n];
        self.world.all_gather_into(&mine, &mut counts[..]);
        let mut displs = Vec::with_capacity(n);
        let mut total: Count = 0;
        for &c in &counts {
            displs.push(total);
            total = total
                .checked_add(c)
                .ok_or_else(|| Error::bad_input("an exchange between ranks beyond 2 GiB"))?;
        }
        let mut all = vec![0u8; total as usize];
        {
            let mut part = mpi::datatype::PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
            self.world.all_gather_varcount_into(&bytes[..], &mut part);
        }
        Ok(counts
            .iter()
            .zip(&displs)
            .map(|(&c, &d)| all[d as usize..(d + c) as usize].to_vec())
            .collect())
    }

    fn abort(&mut self, code: i32, message: &str) -> ! {
        eprintln!("{message}");
        self.world.abort(code.max(1))
    }
}

impl Drop for MpiComm {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}
