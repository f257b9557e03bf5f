//! A cluster node's counters of what happened, as opposed to its status
//! (`ClusterStatus`, what is true now): elections, snapshots, and what
//! went wrong on the node bus. The bus and the node's Raft count them as
//! they happen, with relaxed atomics; the metrics endpoint and `INFO`
//! read them when asked. A single node keeps them at zero and shows none.

use std::sync::atomic::{AtomicU64, Ordering};

/// Every counter of one node. Shared behind an `Arc` by the server's
/// state, the bus (client and server side) and the Raft's recorder.
#[derive(Debug, Default)]
pub struct ClusterStats {
    /// Elections this node started (it became a candidate).
    pub elections_started: AtomicU64,
    /// Elections this node won (it became the leader).
    pub elections_won: AtomicU64,
    /// Snapshots this node built of its own registry.
    pub snapshots_built: AtomicU64,
    /// Snapshots this node, leading, sent whole to a follower that lacked
    /// the log entries they cover (Redis's full resync).
    pub snapshots_sent: AtomicU64,
    /// Snapshots this node received from its leader and installed.
    pub snapshots_installed: AtomicU64,
    /// The last log index of the snapshot being installed, plus one (0:
    /// none): a change of the node's snapshot to this index is that
    /// install, not a snapshot it built.
    pub installing: AtomicU64,
    /// Bus errors, by [`BusError`].
    bus_errors: [AtomicU64; BusError::ALL.len()],
}

/// What went wrong on the bus, as counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BusError {
    /// Dialling a peer failed or timed out (it is down, or unreachable).
    Connect,
    /// A TLS handshake failed, dialling or accepting (another CA, a
    /// certificate that does not name the address, TLS on one side only).
    Tls,
    /// This node refused a peer's bus handshake (a wrong or missing
    /// `cluster-secret`, another bus protocol version).
    Refused,
    /// A peer refused this node's handshake, or another node answered at
    /// the peer's address.
    Rejected,
    /// A frame whose CRC did not match its payload.
    Crc,
    /// A connection lost or garbled in the middle of a call or a
    /// handshake (reset, cut short, undecodable, over the size limit).
    Broken,
}

impl BusError {
    pub const ALL: [BusError; 6] = [
        BusError::Connect,
        BusError::Tls,
        BusError::Refused,
        BusError::Rejected,
        BusError::Crc,
        BusError::Broken,
    ];

    /// Its label value in the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            BusError::Connect => "connect",
            BusError::Tls => "tls",
            BusError::Refused => "refused",
            BusError::Rejected => "rejected",
            BusError::Crc => "crc",
            BusError::Broken => "broken",
        }
    }
}

impl ClusterStats {
    /// Counts one bus error.
    pub fn bus_error(&self, error: BusError) {
        self.bus_errors[error as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The bus errors counted, in [`BusError::ALL`]'s order.
    pub fn bus_errors(&self) -> [u64; BusError::ALL.len()] {
        BusError::ALL.map(|error| self.bus_errors[error as usize].load(Ordering::Relaxed))
    }

    /// Adds one to `counter`.
    pub fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// `counter`'s value.
    pub fn read(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bus_error_has_its_own_counter() {
        let stats = ClusterStats::default();
        stats.bus_error(BusError::Crc);
        stats.bus_error(BusError::Crc);
        stats.bus_error(BusError::Connect);
        assert_eq!(stats.bus_errors(), [1, 0, 0, 0, 2, 0]);
        let names: Vec<&str> = BusError::ALL.iter().map(|e| e.as_str()).collect();
        assert_eq!(
            names,
            ["connect", "tls", "refused", "rejected", "crc", "broken"]
        );
    }
}
