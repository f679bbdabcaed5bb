//! Seed 003's model on `Ctx`: a signal matrix written by `notify`, a non-decrementing
//! `wait`, and `remote_load` (a pull, allowed only in kernels declared with
//! `GridSpec::pull_model`; TPU remote DMAs are push-only).

use super::ctx::Ctx;
use super::refs::{Ref, Sem};
use crate::error::KernelErrorKind;
use crate::ir::{Cmp, DataOp, OpKind, OpSite, SemKind, SemRef, WaitKind};
use crate::mesh::DeviceId;

/// Seed-003 `NotifyOp`: how `notify` writes the peer's signal cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotifyOp {
    /// Add the value.
    AtomicAdd,
    /// Overwrite with the value.
    Set,
}

/// Seed-003 `WaitCmp`: how `wait` compares the local signal cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitCmp {
    /// Equal to the expected value.
    Eq,
    /// At least the expected value.
    Ge,
}

impl Ctx<'_> {
    fn signal_cell(
        &self,
        sig: &Sem,
        offsets: [i64; 2],
        device: usize,
        site: OpSite,
    ) -> Option<SemRef> {
        if sig.kind != SemKind::Signal || sig.cols == 0 {
            self.fail(
                site,
                KernelErrorKind::Misuse,
                format!(
                    "`{}` is not a signal matrix",
                    self.layout.sems[sig.base].name
                ),
            );
            return None;
        }
        let rows = (sig.count / sig.cols) as i64;
        let [r, c] = offsets;
        if r < 0 || r >= rows || c < 0 || c >= sig.cols as i64 {
            let name = &self.layout.sems[sig.base].name;
            let base = name.split('[').next().unwrap_or(name);
            self.fail(
                site,
                KernelErrorKind::OutOfBounds,
                format!(
                    "signal offsets [{r}, {c}] are outside `{base}` of shape [{rows}, {}]",
                    sig.cols
                ),
            );
            return None;
        }
        Some(SemRef::new(
            device,
            sig.base + r as usize * sig.cols + c as usize,
        ))
    }

    /// Seed-003 `notify(signal, peer, offsets, value, op)`: writes cell `offsets` of
    /// `peer`'s signal matrix (adds to it, or sets it).
    #[track_caller]
    pub fn notify(
        &self,
        signal: Sem,
        peer: impl Into<DeviceId>,
        offsets: [i64; 2],
        value: i64,
        op: NotifyOp,
    ) {
        let site = self.site("notify");
        let Some(target) = self.resolve(&peer.into(), site) else {
            return;
        };
        if value < 0 {
            self.fail(
                site,
                KernelErrorKind::Misuse,
                format!("notify with a negative value {value}"),
            );
            return;
        }
        if let Some(s) = self.signal_cell(&signal, offsets, target, site) {
            self.push(
                OpKind::Signal {
                    sem: s,
                    inc: value as u64,
                    set: op == NotifyOp::Set,
                },
                site,
            );
        }
    }

    /// Seed-003 `wait(signal, offsets, expected, cmp)`: blocks until this device's
    /// cell compares true with `expected`. It does not decrement the cell.
    #[track_caller]
    pub fn wait(&self, signal: Sem, offsets: [i64; 2], expected: i64, cmp: WaitCmp) {
        let site = self.site("wait");
        if expected < 0 {
            self.fail(
                site,
                KernelErrorKind::Misuse,
                format!("wait for a negative value {expected}"),
            );
            return;
        }
        if let Some(s) = self.signal_cell(&signal, offsets, self.device, site) {
            self.push(
                OpKind::Wait {
                    sem: s,
                    amount: expected as u64,
                    why: WaitKind::Signal,
                    cmp: match cmp {
                        WaitCmp::Eq => Cmp::Eq,
                        WaitCmp::Ge => Cmp::Ge,
                    },
                },
                site,
            );
        }
    }

    /// Seed-003 `remote_load(buf, peer, offsets, shape)`: copies `src` as it is on
    /// `peer` into the local VMEM `dst`, now. Only kernels in the pull model may do
    /// this; a TPU kernel reading a peer's memory is an error.
    #[track_caller]
    pub fn remote_load(&self, dst: Ref, src: Ref, peer: impl Into<DeviceId>) {
        let site = self.site("remote_load");
        if !self.pull_model {
            self.fail(
                site,
                KernelErrorKind::PeerRead,
                format!(
                    "`remote_load` of `{}` reads a peer's memory, but TPU remote DMAs are push-only: \
                     have the peer push it with make_async_remote_copy (or declare the kernel with GridSpec::pull_model)",
                    self.name(&src)
                ),
            );
            return;
        }
        let Some(target) = self.resolve(&peer.into(), site) else {
            return;
        };
        let (Some(d), Some(s)) = (self.vmem_view(&dst, site), self.view(&src, target, site)) else {
            return;
        };
        if self.same_shape(&dst, &src, site) {
            self.push(
                OpKind::Compute(Box::new(DataOp::Copy { src: s, dst: d })),
                site,
            );
        }
    }
}
