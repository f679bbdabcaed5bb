//! Scale checks for the commands, before anything is planned: the kernel a command runs
//! at any P (for the estimate and the search of the largest P that fits), and the check.

use tpusim::budget::{ensure_fits, Request, Work};
use tpusim::collectives::Collective;
use tpusim::kernel::PallasCall;
use tpusim::model::Traffic;
use tpusim::{DType, Mesh, Result};

/// The kernel `make` builds for `q` devices and a shard of `shape`; where the collective
/// `c` cannot serve that shape at `q` devices (a ring needs a multiple of P elements),
/// the shape of the same size rounded down to one it can serve (as `bench` rounds).
pub fn call_at(
    q: usize,
    c: &dyn Collective,
    shape: &[usize],
    dtype: DType,
    make: &dyn Fn(&Mesh, &[usize]) -> Result<PallasCall>,
) -> Result<PallasCall> {
    let mesh = Mesh::new(q, "x")?;
    make(&mesh, shape).or_else(|e| {
        let bytes = (tpusim::array::numel(shape).unwrap_or(usize::MAX) as u64)
            .saturating_mul(dtype.size() as u64);
        let size = match c.traffic() {
            Traffic::AllGather => bytes.saturating_mul(q as u64),
            _ => bytes,
        };
        match c.bench_shape(q, size, dtype) {
            Some(s) => make(&mesh, &s),
            None => Err(e),
        }
    })
}

/// Refuses `work` on the kernel `build` makes when it cannot fit this machine (see
/// [`tpusim::budget::ensure_fits`]); `what` names it in the message.
pub fn fit(
    what: String,
    devices: usize,
    build: &dyn Fn(usize) -> Result<PallasCall>,
    work: Work,
) -> Result<()> {
    ensure_fits(&Request {
        what,
        devices,
        build,
        work,
    })
    .map(drop)
}
