//! DMAs and their completions: what a DMA reads and writes until which event.

use super::data::DataOp;
use super::op::Remap;
use super::site::OpSite;
use super::view::{Block, SemRef, View};

/// A DMA as started by a kernel. A remote DMA (one with a `send_sem`) completes in two
/// separate events, in either order: [`Completion::Send`] (its source has been read) and
/// [`Completion::Recv`] (its destination has been written). A local DMA completes once.
#[derive(Clone, Debug)]
pub struct Dma {
    /// Source (on the issuing device).
    pub src: Block,
    /// Destination (on the target device): as many rows as the source, as long.
    pub dst: Block,
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
            src: self.src.map_first(m.view),
            dst: self.dst.map_first(m.view),
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

    /// The runs it moves one by one: the rows of a strided side (a contiguous side is
    /// cut to match), or the whole of two contiguous sides: their length and number.
    pub fn runs(&self) -> (usize, usize) {
        let n = self.src.row_len().min(self.dst.row_len()).max(1);
        (n, self.src.numel() / n)
    }

    /// The data it moves: copies of each run of the source into the destination's
    /// (`via`: the source was staged there, contiguous, at the send completion).
    pub fn copies(&self, via: Option<View>) -> impl Iterator<Item = DataOp> + '_ {
        let (n, runs) = self.runs();
        (0..runs).map(move |i| DataOp::Copy {
            src: match via {
                Some(v) => Block::from(v).run(i, n),
                None => self.src.run(i, n),
            },
            dst: self.dst.run(i, n),
        })
    }

    /// Its source's runs copied into `staging` (contiguous, as long as the source).
    pub fn stage(&self, staging: View) -> impl Iterator<Item = DataOp> + '_ {
        let (n, runs) = self.runs();
        (0..runs).map(move |i| DataOp::Copy {
            src: self.src.run(i, n),
            dst: Block::from(staging).run(i, n),
        })
    }

    /// The semaphore that `c` credits with [`Dma::bytes`].
    pub fn credits(&self, c: Completion) -> Option<SemRef> {
        match c {
            Completion::Send => self.send_sem,
            Completion::Recv | Completion::Local => Some(self.recv_sem),
        }
    }

    /// What this DMA is still reading until completion `c`: its source, until the
    /// send completion (or a local DMA's only one).
    pub fn reads_until(&self, c: Completion) -> Option<Block> {
        (c != Completion::Recv).then_some(self.src)
    }

    /// What this DMA may still be writing until completion `c`: its destination,
    /// until the receive completion (or a local DMA's only one).
    pub fn writes_until(&self, c: Completion) -> Option<Block> {
        (c != Completion::Send).then_some(self.dst)
    }
}
