//! How much of a modeled run's communication its compute hid, read off the timeline
//! (the clock's events are the one record of what ran when).

use super::{TimedEvent, Unit};

/// Compute and communication of a modeled run, summed over its devices.
///
/// A device communicates while at least one remote DMA it sent is in flight (from its
/// start to its receive completion); its communication is hidden while its MXU or VPU
/// is busy at the same time. `hidden_seconds / comm_seconds` is the share of the
/// communication that compute overlapped: 100% when every transfer ran under compute,
/// 0% when the device computed only between transfers.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Overlap {
    /// Seconds during which a device had a remote DMA in flight, summed over devices.
    pub comm_seconds: f64,
    /// Of those, the seconds during which that device's MXU or VPU was busy.
    pub hidden_seconds: f64,
    /// Seconds the MXUs were busy, summed over devices.
    pub mxu_seconds: f64,
    /// Seconds the vector ALUs were busy, summed over devices.
    pub vpu_seconds: f64,
    /// Seconds the vector load/store slots were busy, summed over devices.
    pub load_store_seconds: f64,
    /// Multiply-adds of every device.
    pub macs: u64,
}

/// `spans` sorted and merged into disjoint intervals.
fn union(mut spans: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    spans.retain(|s| s.1 > s.0);
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(spans.len());
    for (s, e) in spans {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

fn length(spans: &[(f64, f64)]) -> f64 {
    spans.iter().map(|s| s.1 - s.0).sum()
}

/// Length of the intersection of two unions of disjoint, sorted intervals.
fn common(a: &[(f64, f64)], b: &[(f64, f64)]) -> f64 {
    let (mut i, mut j, mut total) = (0, 0, 0.0);
    while i < a.len() && j < b.len() {
        let (s, e) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
        if e > s {
            total += e - s;
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    total
}

impl Overlap {
    /// The overlap of a run of `devices` devices with timeline `events`.
    pub fn of(devices: usize, events: &[TimedEvent]) -> Self {
        let mut comm = vec![Vec::new(); devices];
        let mut busy = vec![Vec::new(); devices];
        let mut o = Overlap::default();
        for e in events {
            match e {
                TimedEvent::Dma {
                    from,
                    to,
                    start,
                    end,
                    ..
                } if from != to && *from < devices => comm[*from].push((*start, *end)),
                TimedEvent::Compute {
                    device,
                    unit,
                    macs,
                    start,
                    end,
                    ..
                } if *device < devices => {
                    busy[*device].push((*start, *end));
                    match unit {
                        Unit::Mxu => o.mxu_seconds += end - start,
                        Unit::Vpu => o.vpu_seconds += end - start,
                        Unit::LoadStore => o.load_store_seconds += end - start,
                    }
                    o.macs += macs;
                }
                _ => {}
            }
        }
        for (c, b) in comm.into_iter().zip(busy) {
            let (c, b) = (union(c), union(b));
            o.comm_seconds += length(&c);
            o.hidden_seconds += common(&c, &b);
        }
        o
    }

    /// The share of communication time during which compute ran (`None`: no remote
    /// DMA).
    pub fn hidden(&self) -> Option<f64> {
        (self.comm_seconds > 0.0).then(|| self.hidden_seconds / self.comm_seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_merge_and_intersect() {
        let a = union(vec![(3.0, 4.0), (0.0, 2.0), (1.0, 2.5)]);
        assert_eq!(a, vec![(0.0, 2.5), (3.0, 4.0)]);
        let b = union(vec![(2.0, 3.5)]);
        assert_eq!(common(&a, &b), 1.0);
        assert_eq!(length(&a), 3.5);
    }

    #[test]
    fn hidden_is_the_share_of_transfer_time_under_compute() {
        let dma = |start, end| TimedEvent::Dma {
            id: 0,
            from: 0,
            to: 1,
            bytes: 1,
            start,
            sent: end,
            end,
            route: vec![0, 1],
        };
        let mxu = |start, end| TimedEvent::Compute {
            device: 0,
            op: "dot_general",
            unit: Unit::Mxu,
            macs: 10,
            start,
            end,
        };
        let o = Overlap::of(2, &[dma(0.0, 4.0), mxu(1.0, 2.0), mxu(3.0, 6.0)]);
        assert_eq!(o.comm_seconds, 4.0);
        assert_eq!(o.hidden_seconds, 2.0);
        assert_eq!(o.hidden(), Some(0.5));
        assert_eq!(o.mxu_seconds, 4.0);
        assert_eq!(o.macs, 20);
    }
}
