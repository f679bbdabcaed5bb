//! `lax.ppermute`: the seed's right shift (section 1) and any permutation given as pairs.

use super::{Collective, Options, Takes};
use crate::array::{DType, HostArray};
use crate::error::{Error, Result};
use crate::kernel::{Ctx, GridSpec, MemorySpace, PallasCall, Ref, Sem};
use crate::mesh::Mesh;
use crate::model::Traffic;
use crate::trace::{Column, Labels, TraceLayout};
use std::sync::Arc;

/// The seed's `right_shift_kernel`, line for line: each device pushes its shard into
/// `y_ref` on its right neighbour.
pub fn right_shift_kernel(pl: &Ctx, x_ref: Ref, y_ref: Ref, send_sem: Sem, recv_sem: Sem) {
    let num_devices = pl.num_devices();
    let my_id = pl.axis_index("x");
    let target = (my_id + 1) % num_devices;

    let dma = pl.make_async_remote_copy(x_ref, y_ref, send_sem, recv_sem, target);
    dma.start();
    dma.wait();
}

/// A general permutation: device `src` pushes its shard to `dst` for every pair.
/// Every device builds the same descriptor shape, so a receiver can `wait_recv` what
/// its sender pushed; a device that receives nothing writes zeros (XLA semantics).
#[allow(clippy::too_many_arguments)]
pub fn ppermute_kernel(
    pl: &Ctx,
    perm: &[(usize, usize)],
    x_ref: Ref,
    y_ref: Ref,
    send_sem: Sem,
    recv_sem: Sem,
    zeros: Ref,
    local_sem: Sem,
) {
    let my_id = pl.axis_index("x") as usize;
    let target = perm.iter().find(|p| p.0 == my_id).map(|p| p.1);
    let receives = perm.iter().any(|p| p.1 == my_id);

    let dma = pl.make_async_remote_copy(
        x_ref,
        y_ref,
        send_sem,
        recv_sem,
        target.unwrap_or(my_id) as i64,
    );
    if target.is_some() {
        dma.start();
    }
    if !receives {
        pl.fill(zeros, 0.0);
        let zero = pl.make_async_copy(zeros, y_ref, local_sem);
        zero.start();
        zero.wait();
    }
    if target.is_some() {
        dma.wait_send();
    }
    if receives {
        dma.wait_recv();
    }
}

/// `ppermute`: the seed's right shift, or an explicit permutation.
#[derive(Clone, Debug, Default)]
pub struct Ppermute {
    /// `None`: the seed's right shift `(i, i+1 mod P)`. `Some(pairs)`: `(source, destination)`.
    pub perm: Option<Vec<(usize, usize)>>,
}

impl Ppermute {
    /// Parses pairs written `0:1,1:2,2:0`.
    pub fn parse_perm(s: &str) -> Result<Vec<(usize, usize)>> {
        s.split(',')
            .map(|p| {
                let (a, b) = p.split_once(':').ok_or_else(|| {
                    Error::bad_input(format!("permutation pair `{p}` is not `src:dst`"))
                })?;
                let n = |v: &str| {
                    v.trim().parse::<usize>().map_err(|_| {
                        Error::bad_input(format!("permutation pair `{p}` has a non-numeric device"))
                    })
                };
                Ok((n(a)?, n(b)?))
            })
            .collect()
    }

    fn check(perm: &[(usize, usize)], p: usize) -> Result<()> {
        let mut sources = std::collections::HashSet::new();
        let mut targets = std::collections::HashSet::new();
        for &(s, d) in perm {
            if s >= p || d >= p {
                return Err(Error::bad_input(format!(
                    "permutation pair {s}:{d} names a device outside the mesh of {p} devices"
                )));
            }
            if !sources.insert(s) {
                return Err(Error::bad_input(format!(
                    "device {s} is a source twice in the permutation"
                )));
            }
            if !targets.insert(d) {
                return Err(Error::bad_input(format!(
                    "device {d} is a destination twice in the permutation"
                )));
            }
        }
        Ok(())
    }
}

impl Collective for Ppermute {
    fn traffic(&self) -> Traffic {
        Traffic::SendRecv
    }

    fn takes(&self) -> Takes {
        Takes {
            perm: true,
            ..Takes::default()
        }
    }

    fn with_options(&self, opts: &Options) -> Result<Arc<dyn Collective>> {
        Ok(Arc::new(Ppermute {
            perm: opts.perm.clone(),
        }))
    }

    fn trace_layout(&self, _p: usize) -> Option<TraceLayout> {
        Some(TraceLayout {
            shape: vec![1, 2],
            columns: vec![Column::new("y_ref", "y_ref", 0, 2)],
            labels: Labels::Whole { elems: 2 },
        })
    }

    fn name(&self) -> &'static str {
        "ppermute"
    }

    fn summary(&self) -> &'static str {
        "right shift (or any permutation): 1 step, each device pushes its whole shard (N bytes) once"
    }

    fn call(&self, mesh: &Mesh, shard: &[usize], dtype: DType) -> Result<PallasCall> {
        let spec = GridSpec::new()
            .input("x_ref", MemorySpace::Any, shard, dtype)
            .output("y_ref", MemorySpace::Any, shard, dtype)
            .dma_sem("send_sem")
            .dma_sem("recv_sem");
        match &self.perm {
            None => Ok(PallasCall::new("ppermute", spec, |pl, a| {
                right_shift_kernel(
                    pl,
                    a.r("x_ref"),
                    a.r("y_ref"),
                    a.sem("send_sem"),
                    a.sem("recv_sem"),
                )
            })),
            Some(perm) => {
                Self::check(perm, mesh.size())?;
                let perm = perm.clone();
                let spec = spec.vmem("zeros", shard, dtype).dma_sem("local_sem");
                Ok(PallasCall::new("ppermute", spec, move |pl, a| {
                    ppermute_kernel(
                        pl,
                        &perm,
                        a.r("x_ref"),
                        a.r("y_ref"),
                        a.sem("send_sem"),
                        a.sem("recv_sem"),
                        a.r("zeros"),
                        a.sem("local_sem"),
                    )
                }))
            }
        }
    }

    fn reference(&self, inputs: &[Vec<HostArray>]) -> Result<Vec<Vec<HostArray>>> {
        let p = inputs.len();
        let perm = self
            .perm
            .clone()
            .unwrap_or_else(|| (0..p).map(|i| (i, (i + 1) % p)).collect());
        Self::check(&perm, p)?;
        Ok(super::reference::ppermute(inputs, &perm))
    }
}
