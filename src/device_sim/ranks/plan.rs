//! The one place that decides, per data op of a schedule, what a rank does with it: run
//! it (every view on its devices), send (a copy from its device to another rank's), receive
//! (a copy into its device from another rank's) or skip it. The ops it runs become a local
//! program and schedule on its own devices (renumbered from 0), cut into pieces at its
//! messages.

use super::Partition;
use crate::device_sim::fuse::Between;
use crate::error::{Error, Result};
use crate::ir::{DataOp, Program, Schedule, View};

/// Tags are the position of the op in the schedule, modulo this (the least upper bound
/// MPI guarantees is 32767). MPI delivers the messages between two ranks in the order
/// they were sent, and both ranks walk the schedule in order, so equal tags of ops far
/// apart never meet out of order.
pub const TAG_SPACE: usize = 32768;

/// What a rank does at one point of its walk through the schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Runs piece `k` of the local schedule (consecutive ops it runs).
    Piece(usize),
    /// Sends the bytes of `view` (local device numbering) to rank `to`.
    Send {
        /// The source on this rank.
        view: View,
        /// Bytes per element moved.
        elem: usize,
        /// The receiving rank.
        to: usize,
        /// The message's tag.
        tag: i32,
    },
    /// Receives the bytes of `view` (local device numbering) from rank `from`.
    Recv {
        /// The destination on this rank.
        view: View,
        /// Bytes per element moved.
        elem: usize,
        /// The sending rank.
        from: usize,
        /// The message's tag.
        tag: i32,
    },
}

/// One rank's part of a schedule.
#[derive(Clone, Debug)]
pub struct RankPlan {
    /// The program on this rank's devices alone (devices renumbered from 0).
    pub program: Program,
    /// The ops this rank runs, in schedule order, on the local devices.
    pub schedule: Schedule,
    /// Where the local schedule is cut into pieces (before these op indices).
    pub cuts: Vec<usize>,
    /// The walk: pieces and messages in schedule order.
    pub events: Vec<Event>,
    /// Per event, how many of the walk's receives (counted from its start) must have
    /// landed before it runs ([`dues`]).
    pub due: Vec<usize>,
    /// Per piece, the views the sends after it read ([`between`]).
    pub reads: Vec<Vec<View>>,
    /// Per piece, the views the receives after it write ([`between`]).
    pub writes: Vec<Vec<View>>,
    /// The first device this rank holds (its local device 0).
    pub first: usize,
    /// Bytes this rank sends per run of the schedule.
    pub sent_bytes: u64,
    /// Bytes this rank receives per run of the schedule.
    pub received_bytes: u64,
}

/// The one device every view of `op` is on (`None`: it spans devices, which only a
/// copy may).
fn device_of(op: &DataOp) -> Option<usize> {
    let mut views = op.reads().chain(op.writes());
    let d = views.next()?.device();
    views.all(|v| v.device() == d).then_some(d)
}

impl RankPlan {
    /// Rank `rank`'s part of `schedule` of `program` under `part`.
    pub fn new(
        program: &Program,
        schedule: &Schedule,
        part: &Partition,
        rank: usize,
    ) -> Result<Self> {
        let held = part.devices_of(rank);
        let first = held.start;
        let allocs = schedule.allocations(program);
        let local = |v: View| v.on_device(v.device() - first);
        let mut ops = Vec::new();
        let mut events = Vec::new();
        let mut cuts = Vec::new();
        let mut piece_open = false;
        let (mut sent_bytes, mut received_bytes) = (0u64, 0u64);
        for (i, op) in schedule.ops.iter().enumerate() {
            let tag = (i % TAG_SPACE) as i32;
            if let DataOp::Copy { src, dst } = op {
                let (from, to) = (part.owner(src.device()), part.owner(dst.device()));
                if from != to {
                    let elem = op.elem_bytes(&allocs);
                    if from == rank || to == rank {
                        if piece_open {
                            cuts.push(ops.len());
                            piece_open = false;
                        }
                        if from == rank {
                            sent_bytes += src.bytes(elem);
                            events.push(Event::Send {
                                view: local(*src),
                                elem,
                                to,
                                tag,
                            });
                        } else {
                            received_bytes += dst.bytes(elem);
                            events.push(Event::Recv {
                                view: local(*dst),
                                elem,
                                from,
                                tag,
                            });
                        }
                    }
                    continue;
                }
            }
            let d = match op {
                DataOp::Copy { src, .. } => src.device(),
                _ => device_of(op).ok_or_else(|| {
                    Error::bad_input(format!(
                        "op {i} of the schedule of `{}` spans devices: only a copy may",
                        program.name
                    ))
                })?,
            };
            if !held.contains(&d) {
                continue;
            }
            if !piece_open {
                events.push(Event::Piece(cuts.len()));
                piece_open = true;
            }
            ops.push(op.on_devices(|d| d - first));
        }
        // The pieces are numbered in order; cuts between them (the last piece may be empty).
        let pieces = events
            .iter()
            .filter(|e| matches!(e, Event::Piece(_)))
            .count();
        cuts.truncate(pieces.saturating_sub(1));
        let n = held.len();
        let mut local_program = Program {
            name: program.name.clone(),
            devices: n,
            layout: program.layout.clone(),
            ops: program.ops[held.clone()].to_vec(),
            dmas: Vec::new(),
            prologue: Vec::new(),
            epilogue: Vec::new(),
            inputs: program.inputs.clone(),
            outputs: program.outputs.clone(),
            invocations: program.invocations.clone(),
            cores: program.cores,
        };
        for inv in &mut local_program.invocations {
            inv.starts = inv.starts[held.clone()].to_vec();
        }
        let due = dues(&events, &ops, &cuts);
        let (reads, writes) = between(&events, cuts.len() + 1);
        Ok(RankPlan {
            due,
            reads,
            writes,
            program: local_program,
            schedule: Schedule {
                ops,
                policy: schedule.policy.clone(),
                steps: schedule.steps,
                staging: schedule.staging,
            },
            cuts,
            events,
            first,
            sent_bytes,
            received_bytes,
        })
    }

    /// What is read and written between the pieces of the local schedule.
    pub fn between(&self) -> Between<'_> {
        Between {
            reads: &self.reads,
            writes: &self.writes,
        }
    }

    /// Pieces of the local schedule.
    pub fn pieces(&self) -> usize {
        self.cuts.len() + 1
    }
}

/// Per piece of a walk of `pieces` pieces, the views the sends after it read and those
/// the receives after it write: all of a rank's memory that is touched between its
/// pieces, so the executor may fuse ops across a cut and drop the writes nothing reads
/// (a receive lands later than its position, but before any later piece touches its
/// destination). Messages before the first piece touch what the previous run left:
/// they count after the last.
pub fn between(events: &[Event], pieces: usize) -> (Vec<Vec<View>>, Vec<Vec<View>>) {
    let mut reads = vec![Vec::new(); pieces];
    let mut writes = vec![Vec::new(); pieces];
    let mut at = pieces - 1;
    for e in events {
        match e {
            Event::Piece(k) => at = *k,
            Event::Send { view, .. } => reads[at].push(*view),
            Event::Recv { view, .. } => writes[at].push(*view),
        }
    }
    (reads, writes)
}

/// Receives a walk may leave outstanding at once (the oldest lands before a new one).
const OUTSTANDING: usize = 16;

/// Outstanding receives of a walk: (number in walk order, destination), oldest first.
type Open = std::collections::VecDeque<(usize, View)>;

/// Raises `landed` past the newest outstanding receive whose destination overlaps `v`
/// (those before it land first).
fn need(open: &Open, landed: &mut usize, v: &View) {
    for &(n, w) in open.iter().rev() {
        if n < *landed {
            break;
        }
        if w.overlaps(v) {
            *landed = n + 1;
            break;
        }
    }
}

/// Per event of a walk, how many receives (in walk order) must have landed before it.
///
/// A receive need not land at its position: its destination may be written at any
/// moment after the walk passed that position and before the first later event that
/// reads or writes memory overlapping it (a piece's op, a send's source, another
/// receive's destination), since no event in between touches it. So a rank that waits
/// for a message does so only when it needs it, and runs on meanwhile, as the ranks of
/// a ring do (the rank before sends while this one still computes). Receives land in
/// walk order, so the messages of each sender leave their ring in order.
pub fn dues(events: &[Event], ops: &[DataOp], cuts: &[usize]) -> Vec<usize> {
    let mut open = Open::new();
    let mut landed = 0;
    let mut received = 0;
    let mut due = Vec::with_capacity(events.len());
    for e in events {
        match e {
            Event::Piece(k) => {
                let start = if *k == 0 { 0 } else { cuts[k - 1] };
                let end = cuts.get(*k).copied().unwrap_or(ops.len());
                for op in &ops[start..end] {
                    for v in op.reads().chain(op.writes()) {
                        need(&open, &mut landed, &v);
                    }
                }
            }
            Event::Send { view, .. } => need(&open, &mut landed, view),
            Event::Recv { view, .. } => {
                need(&open, &mut landed, view);
                if received - landed >= OUTSTANDING {
                    landed = received + 1 - OUTSTANDING;
                }
            }
        }
        while open.front().is_some_and(|&(n, _)| n < landed) {
            open.pop_front();
        }
        due.push(landed);
        if let Event::Recv { view, .. } = e {
            open.push_back((received, *view));
            received += 1;
        }
    }
    due
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectives::Registry;
    use crate::mesh::Placement;
    use crate::run::Job;
    use crate::Mesh;

    #[test]
    fn every_op_is_run_once_and_every_message_has_its_pair() {
        let psum = Registry::builtin().by_name("psum").unwrap();
        let job = Job::collective(psum, Placement::whole(Mesh::new(5, "x").unwrap()));
        let plan = job.plan().unwrap();
        for ranks in 1..=5 {
            let part = Partition::new(5, ranks).unwrap();
            let plans: Vec<RankPlan> = (0..ranks)
                .map(|r| RankPlan::new(&plan.program, &plan.schedule, &part, r).unwrap())
                .collect();
            let crossing = plan
                .schedule
                .ops
                .iter()
                .filter(|o| match o {
                    DataOp::Copy { src, dst } => {
                        part.owner(src.device()) != part.owner(dst.device())
                    }
                    _ => false,
                })
                .count();
            let run: usize = plans.iter().map(|p| p.schedule.ops.len()).sum();
            assert_eq!(run + crossing, plan.schedule.ops.len(), "R={ranks}");
            let sends = |p: &RankPlan| {
                p.events
                    .iter()
                    .filter(|e| matches!(e, Event::Send { .. }))
                    .count()
            };
            let recvs = |p: &RankPlan| {
                p.events
                    .iter()
                    .filter(|e| matches!(e, Event::Recv { .. }))
                    .count()
            };
            assert_eq!(plans.iter().map(sends).sum::<usize>(), crossing);
            assert_eq!(plans.iter().map(recvs).sum::<usize>(), crossing);
            let sent: u64 = plans.iter().map(|p| p.sent_bytes).sum();
            let received: u64 = plans.iter().map(|p| p.received_bytes).sum();
            assert_eq!(sent, received);
            for p in &plans {
                assert!(p.cuts.windows(2).all(|w| w[0] <= w[1]));
                assert!(p.cuts.last().is_none_or(|&c| c <= p.schedule.ops.len()));
                let pieces = p
                    .events
                    .iter()
                    .filter(|e| matches!(e, Event::Piece(_)))
                    .count();
                assert_eq!(pieces.max(1), p.pieces());
            }
        }
    }

    #[test]
    fn a_receive_lands_before_the_first_event_that_touches_its_destination() {
        let v = |alloc: usize, offset: usize| View::new(0, alloc, offset, 4);
        let copy = |src: View, dst: View| DataOp::Copy { src, dst };
        let recv = |view: View| Event::Recv {
            view,
            elem: 4,
            from: 1,
            tag: 0,
        };
        let send = |view: View| Event::Send {
            view,
            elem: 4,
            to: 1,
            tag: 0,
        };
        // Receive 0 into a[0..4], receive 1 into a[8..12]; piece 0 touches b only; a send
        // of a[4..8] (next to both); piece 1 reads a[10..]; piece 2 writes a[0..].
        let ops = [
            copy(v(1, 0), v(1, 4)),
            copy(v(0, 10), v(1, 0)),
            copy(v(1, 0), v(0, 0)),
        ];
        let events = [
            recv(v(0, 0)),
            recv(v(0, 8)),
            Event::Piece(0),
            send(v(0, 4)),
            Event::Piece(1),
            Event::Piece(2),
        ];
        // Receive 1 lands before piece 1, and receive 0 with it (in order).
        assert_eq!(dues(&events, &ops, &[1, 2]), vec![0, 0, 0, 0, 2, 2]);
        // A receive into a destination still outstanding lands the earlier one first.
        let events = [recv(v(0, 0)), recv(v(0, 2)), Event::Piece(0)];
        assert_eq!(dues(&events, &ops[..1], &[]), vec![0, 1, 1]);
        // No more than OUTSTANDING wait at once.
        let events: Vec<Event> = (0..OUTSTANDING + 2).map(|k| recv(v(2, 4 * k))).collect();
        let due = dues(&events, &[], &[]);
        assert_eq!(due[OUTSTANDING], 1);
        assert_eq!(due[OUTSTANDING + 1], 2);
    }
}
