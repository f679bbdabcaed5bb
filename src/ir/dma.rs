//! DMAs and their completions: what a DMA reads and writes until which event.

use super::op::Remap;
use super::site::OpSite;
use super::view::{SemRef, View};

/// A DMA as started by a kernel. A remote DMA (one with a `send_sem`) completes in two
/// separate events, in either order: [`Completion::Send`] (its source has been read) and
/// [`Completion::Recv`] (its destination has been written). A local DMA completes once.
#[derive(Clone, Debug)]
pub struct Dma {
    /// Source view (on the issuing device).
    pub src: View,
    /// Destination view (on the target device).
    pub dst: View,
    /// Semaphore credited on the issuer at send completion (remote DMAs only).
    pub send_sem: Option<SemRef>,
    /// Semaphore credited on the receiver at receive completion (the only one for local DMAs).
    pub recv_sem: SemRef,
    /// Bytes moved.
    pub bytes: u64,
    /// Where it was started.
    pub origin: OpSite,
}

/// One completion event of a DMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Completion {
    /// A remote DMA's source has been read: `send_sem` on the sender gains the bytes.
    Send,
    /// A remote DMA's destination has been written: `recv_sem` on the receiver gains the bytes.
    Recv,
    /// A local DMA is done: it read its source, wrote its destination, credited its semaphore.
    Local,
}

impl Dma {
    /// The same DMA with its views and semaphores moved by `m`, started at `origin`.
    pub fn remap(&self, m: &Remap, origin: OpSite) -> Dma {
        Dma {
            src: (m.view)(self.src),
            dst: (m.view)(self.dst),
            send_sem: self.send_sem.map(m.sem),
            recv_sem: (m.sem)(self.recv_sem),
            bytes: self.bytes,
            origin,
        }
    }

    /// True for `make_async_remote_copy` (two completions), false for a local copy.
    pub fn is_remote(&self) -> bool {
        self.send_sem.is_some()
    }

    /// The completion events this DMA has, in the order eager policies take them.
    pub fn completions(&self) -> &'static [Completion] {
        if self.is_remote() {
            &[Completion::Recv, Completion::Send]
        } else {
            &[Completion::Local]
        }
    }

    /// The semaphore that `c` credits with [`Dma::bytes`].
    pub fn credits(&self, c: Completion) -> Option<SemRef> {
        match c {
            Completion::Send => self.send_sem,
            Completion::Recv | Completion::Local => Some(self.recv_sem),
        }
    }

    /// The view this DMA is still reading until completion `c`: its source, until the
    /// send completion (or a local DMA's only one).
    pub fn reads_until(&self, c: Completion) -> Option<View> {
        (c != Completion::Recv).then_some(self.src)
    }

    /// The view this DMA may still be writing until completion `c`: its destination,
    /// until the receive completion (or a local DMA's only one).
    pub fn writes_until(&self, c: Completion) -> Option<View> {
        (c != Completion::Send).then_some(self.dst)
    }
}
