//! What the core tells INFO and the metrics endpoint: plain figures of the
//! registry, the log and the lease commands, taken on the core task and
//! rendered off it.

use std::time::Duration;

use crate::aof::LogStatus;
use crate::histogram::Histogram;
use crate::registry::{Health, Op, Outcome};

/// The core's figures at one moment.
#[derive(Clone, Debug)]
pub struct CoreReport {
    /// Leases held, active or expired (those past retention count until
    /// they are reclaimed).
    pub leases: usize,
    /// Leases held whose `expires_at` has passed at registry time.
    pub expired: usize,
    pub last_token: u64,
    /// The highest token reserved on disk.
    pub token_ceiling: u64,
    /// Registry time, or negative infinity before any `now` was seen.
    pub registry_time: f64,
    /// The TTL of acquires without a `TTL` option.
    pub lease_ttl: f64,
    /// Clients waiting in a blocked acquire.
    pub blocked_clients: usize,
    /// Runs with run data (`LEASE.SETDATA`), and the bytes it holds.
    pub run_data: usize,
    pub run_data_bytes: usize,
    /// Past tenures kept for `LEASE.HISTORY`, and their bytes.
    pub history_entries: usize,
    pub history_bytes: usize,
    pub commands: CommandStats,
    /// How heartbeats and tenures fared, as the registry counted them.
    pub health: Health,
    /// The append-only log's state; `None` with `appendonly no`.
    pub log: Option<LogStatus>,
    /// A cluster node's Raft snapshot file; `None` on a single node.
    pub snapshot: Option<SnapshotReport>,
}

/// A cluster node's snapshot file, for `INFO persistence` and `LASTSAVE`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SnapshotReport {
    /// A build is wanted (`BGSAVE`) or under way.
    pub in_progress: bool,
    /// Seconds the build under way has taken so far.
    pub current_secs: Option<u64>,
    /// When the file last changed, in Unix seconds (`None`: never, or
    /// unknown).
    pub last_save_unix: Option<u64>,
    /// Whether the last build completed.
    pub last_ok: bool,
    /// Seconds the last completed build took.
    pub last_took_secs: Option<u64>,
    /// Builds completed since the node started.
    pub saves: u64,
    /// Log entries applied since the file's last index.
    pub changes_since: u64,
    /// The file's last log index, and the last fencing token in it.
    pub index: Option<u64>,
    pub last_token: Option<u64>,
}

/// Buckets of the time blocked acquires waited, in seconds.
pub const WAIT_BOUNDS: &[f64] = &[
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Successes and failures of each lease command, for `INFO leases`: an
/// acquire fails when the run is held, a heartbeat, validate or release
/// when it answers 0, a get when the run has no lease, any of them on an
/// error. And what came of blocked acquires, and events published.
#[derive(Clone, Debug)]
pub struct CommandStats {
    /// `[succeeded, failed]` for each of [`CommandStats::NAMES`].
    pub counts: [[u64; 2]; 5],
    /// Lookups (heartbeat, validate, get) that found the lease they named,
    /// answering 1 or a lease, and those that did not, answering 0 or
    /// null: `keyspace_hits` and `keyspace_misses`. Errors are neither.
    pub hits: u64,
    pub misses: u64,
    /// Leases removed because their retention ran out.
    pub reclaimed: u64,
    /// Blocked acquires granted their run, and how long each waited.
    pub waited: u64,
    pub wait: Histogram,
    /// Blocked acquires whose `BLOCK` timeout ran out.
    pub timed_out: u64,
    /// Lease events published (each once, however many subscribers got it).
    pub events: u64,
}

impl Default for CommandStats {
    fn default() -> CommandStats {
        CommandStats {
            counts: [[0; 2]; 5],
            hits: 0,
            misses: 0,
            reclaimed: 0,
            waited: 0,
            wait: Histogram::new(WAIT_BOUNDS),
            timed_out: 0,
            events: 0,
        }
    }
}

impl CommandStats {
    pub const NAMES: [&'static str; 5] = ["acquire", "heartbeat", "validate", "release", "get"];

    /// Where `op` is counted, if it is one of those.
    /// Which of [`CommandStats::NAMES`] counts `op`, if one does.
    pub fn slot(op: &Op) -> Option<usize> {
        Some(match op {
            Op::Acquire { .. } => 0,
            Op::Heartbeat { .. } => 1,
            Op::Validate { .. } => 2,
            Op::Release { .. } => 3,
            Op::Get { .. } => 4,
            _ => return None,
        })
    }

    /// A blocked acquire was granted its run after `waited`.
    pub fn granted_after(&mut self, waited: Duration) {
        self.waited += 1;
        self.wait.observe(waited.as_secs_f64());
    }

    /// Counts `op`, which gave `outcome`, or an error when `None`.
    pub fn record(&mut self, op: &Op, outcome: Option<&Outcome>) {
        self.record_slot(Self::slot(op), outcome);
    }

    /// [`CommandStats::record`] by the op's [`CommandStats::slot`], for
    /// counting once the op itself is gone (into a cluster's log).
    pub fn record_slot(&mut self, slot: Option<usize>, outcome: Option<&Outcome>) {
        if let Some(Outcome::Reclaimed(count)) = outcome {
            self.reclaimed += *count as u64;
        }
        let Some(slot) = slot else {
            return;
        };
        let ok = matches!(
            outcome,
            Some(
                Outcome::Flag(true)
                    | Outcome::Acquired(Some(_))
                    | Outcome::AcquiredData(_)
                    | Outcome::Got(Some(_))
            )
        );
        self.counts[slot][usize::from(!ok)] += 1;
        let lookup = matches!(Self::NAMES[slot], "heartbeat" | "validate" | "get");
        match (lookup && outcome.is_some(), ok) {
            (true, true) => self.hits += 1,
            (true, false) => self.misses += 1,
            (false, _) => {}
        }
    }
}
