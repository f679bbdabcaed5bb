//! nccl-tests' conventions: the size a collective is measured by, the bus-bandwidth
//! factor, and the ideal time of a ring on one link direction.

/// How a collective's size and bus bandwidth are defined (nccl-tests' PERFORMANCE.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Traffic {
    /// All-reduce: size = one device's buffer; busbw = algbw · 2(P−1)/P.
    AllReduce,
    /// All-gather: size = the gathered buffer (P shards); busbw = algbw · (P−1)/P.
    AllGather,
    /// Reduce-scatter: size = one device's input (P blocks); busbw = algbw · (P−1)/P.
    ReduceScatter,
    /// Send/receive: size = one device's buffer; busbw = algbw.
    SendRecv,
    /// Broadcast: size = the buffer; busbw = algbw.
    Broadcast,
    /// All-to-all: size = one device's buffer (P blocks); busbw = algbw · (P−1)/P.
    AllToAll,
}

impl Traffic {
    /// Every class, with its name ([`Traffic::name`]).
    pub const ALL: [Traffic; 6] = [
        Traffic::AllReduce,
        Traffic::AllGather,
        Traffic::ReduceScatter,
        Traffic::SendRecv,
        Traffic::Broadcast,
        Traffic::AllToAll,
    ];

    /// Its name: `all_reduce`, `all_gather`, `reduce_scatter`, `send_recv`,
    /// `broadcast`, `all_to_all`.
    pub fn name(self) -> &'static str {
        match self {
            Traffic::AllReduce => "all_reduce",
            Traffic::AllGather => "all_gather",
            Traffic::ReduceScatter => "reduce_scatter",
            Traffic::SendRecv => "send_recv",
            Traffic::Broadcast => "broadcast",
            Traffic::AllToAll => "all_to_all",
        }
    }

    /// The class called `name`.
    pub fn parse(name: &str) -> crate::Result<Self> {
        Traffic::ALL
            .into_iter()
            .find(|t| t.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = Traffic::ALL.iter().map(|t| t.name()).collect();
                crate::Error::bad_input(format!(
                    "unknown traffic `{name}` (expected {})",
                    names.join(", ")
                ))
            })
    }

    /// nccl-tests' size for one device's input of `shard_bytes` bytes on `p` devices:
    /// the gathered output for an all-gather, the device's own buffer otherwise.
    pub fn size(self, p: usize, shard_bytes: u64) -> u64 {
        match self {
            Traffic::AllGather => shard_bytes * p as u64,
            _ => shard_bytes,
        }
    }
}

/// busbw / algbw for `p` devices.
pub fn bus_factor(t: Traffic, p: usize) -> f64 {
    let p = p as f64;
    match t {
        Traffic::AllReduce => 2.0 * (p - 1.0) / p,
        Traffic::AllGather | Traffic::ReduceScatter | Traffic::AllToAll => (p - 1.0) / p,
        Traffic::SendRecv | Traffic::Broadcast => 1.0,
    }
}

/// The bandwidth bound of a ring on one link direction for `size` bytes (nccl-tests'
/// size) and `p` devices: `bus_factor · size / link_bw` (for an all-reduce,
/// 2(P−1)/P · N / link bandwidth).
pub fn ideal_seconds(t: Traffic, p: usize, size: f64, link_bw: f64) -> f64 {
    bus_factor(t, p) * size / link_bw
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_match_nccl_tests() {
        assert_eq!(bus_factor(Traffic::AllReduce, 4), 1.5);
        assert_eq!(bus_factor(Traffic::AllGather, 4), 0.75);
        assert_eq!(bus_factor(Traffic::SendRecv, 8), 1.0);
        assert_eq!(ideal_seconds(Traffic::AllReduce, 4, 1e9, 1e9), 1.5);
        assert_eq!(Traffic::AllGather.size(4, 100), 400);
        assert_eq!(Traffic::ReduceScatter.size(4, 100), 100);
    }
}
