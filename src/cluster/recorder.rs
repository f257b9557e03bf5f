//! Counts a node's elections and snapshots from inside its Raft.
//!
//! openraft hands a [`MetricsRecorder`] its figures on every turn of its
//! core's loop, synchronously: unlike its metrics channel, which a
//! reader sees only now and then (the last value wins), the recorder sees
//! every change of role and snapshot, so an election won a millisecond
//! after it started is still counted as started. The counts go to the
//! server's [`ClusterStats`], where the metrics endpoint reads them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use openraft::async_runtime::WatchReceiver;
use openraft::metrics::MetricsRecorder;
use openraft::{Raft, ServerState};
use tracing::warn;

use super::state_machine::StateMachine;
use super::types::TypeConfig;
use crate::state::cluster_stats::ClusterStats;

/// openraft's numbers for the server states it reports
/// (`openraft::metrics::forward_metrics`).
const LEARNER: u8 = 0;
const FOLLOWER: u8 = 1;
const CANDIDATE: u8 = 2;
const LEADER: u8 = 3;
const SHUTDOWN: u8 = 4;

/// The recorder of one node.
#[derive(Debug)]
pub struct Recorder {
    stats: Arc<ClusterStats>,
    /// The state last reported.
    state: AtomicU8,
    /// The last log index of the node's snapshot last reported, plus one
    /// (0: none; openraft reports only a snapshot it has).
    snapshot: AtomicU64,
}

impl Recorder {
    /// A recorder of a node that is in `state` and has the snapshot whose
    /// last log index is `snapshot`, if any: changes from these count.
    pub fn new(stats: Arc<ClusterStats>, state: ServerState, snapshot: Option<u64>) -> Recorder {
        let state = match state {
            ServerState::Learner => LEARNER,
            ServerState::Follower => FOLLOWER,
            ServerState::Candidate => CANDIDATE,
            ServerState::Leader => LEADER,
            ServerState::Shutdown => SHUTDOWN,
        };
        Recorder {
            stats,
            state: AtomicU8::new(state),
            snapshot: AtomicU64::new(snapshot.map_or(0, |index| index + 1)),
        }
    }
}

/// Installs a recorder counting into `stats` on `raft`, from where the
/// node stands now (the snapshot it loaded at start is no new one).
pub async fn install(raft: &Raft<TypeConfig, StateMachine>, stats: Arc<ClusterStats>) {
    let (state, snapshot) = {
        let metrics = raft.metrics();
        let now = metrics.borrow_watched();
        (now.state, now.snapshot.map(|id| id.index))
    };
    let recorder = Arc::new(Recorder::new(stats, state, snapshot));
    if let Err(error) = raft.set_metrics_recorder(Some(recorder)).await {
        warn!("The cluster's election and snapshot counts are off: {error}");
    }
}

impl MetricsRecorder for Recorder {
    fn set_server_state(&self, state: u8) {
        if self.state.swap(state, Ordering::Relaxed) == state {
            return;
        }
        match state {
            CANDIDATE => ClusterStats::count(&self.stats.elections_started),
            LEADER => ClusterStats::count(&self.stats.elections_won),
            _ => {}
        }
    }

    fn set_snapshot_index(&self, index: u64) {
        let index = index + 1;
        if self.snapshot.swap(index, Ordering::Relaxed) == index {
            return;
        }
        match self.stats.installing.load(Ordering::Relaxed) == index {
            true => ClusterStats::count(&self.stats.snapshots_installed),
            false => ClusterStats::count(&self.stats.snapshots_built),
        }
    }

    fn record_apply_batch(&self, _: u64) {}
    fn record_append_batch(&self, _: u64) {}
    fn record_write_batch(&self, _: u64) {}
    fn set_current_term(&self, _: u64) {}
    fn set_last_log_index(&self, _: u64) {}
    fn set_committed_index(&self, _: u64) {}
    fn set_applied_index(&self, _: u64) {}
    fn set_purged_index(&self, _: u64) {}
    fn increment_vote(&self) {}
    fn increment_heartbeat(&self) {}
    fn increment_append(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(stats: &ClusterStats) -> [u64; 4] {
        [
            ClusterStats::read(&stats.elections_started),
            ClusterStats::read(&stats.elections_won),
            ClusterStats::read(&stats.snapshots_built),
            ClusterStats::read(&stats.snapshots_installed),
        ]
    }

    #[test]
    fn changes_of_role_count_elections_started_and_won() {
        let stats = Arc::new(ClusterStats::default());
        // A node restarted as a candidate has started no election yet.
        let recorder = Recorder::new(stats.clone(), ServerState::Candidate, None);
        recorder.set_server_state(CANDIDATE);
        assert_eq!(counts(&stats), [0, 0, 0, 0]);
        let states = [FOLLOWER, FOLLOWER, CANDIDATE, CANDIDATE, LEADER, LEADER];
        for state in states.into_iter().chain([FOLLOWER, CANDIDATE, FOLLOWER]) {
            recorder.set_server_state(state);
        }
        assert_eq!(counts(&stats), [2, 1, 0, 0]);
    }

    #[test]
    fn a_new_snapshot_is_built_unless_it_is_the_one_being_installed() {
        let stats = Arc::new(ClusterStats::default());
        // The snapshot the node started from is reported again and again.
        let recorder = Recorder::new(stats.clone(), ServerState::Follower, Some(10));
        recorder.set_snapshot_index(10);
        recorder.set_snapshot_index(10);
        assert_eq!(counts(&stats), [0, 0, 0, 0]);
        recorder.set_snapshot_index(5010);
        assert_eq!(counts(&stats), [0, 0, 1, 0]);
        // The bus server notes index + 1 before it installs.
        stats.installing.store(9001, Ordering::Relaxed);
        recorder.set_snapshot_index(9000);
        recorder.set_snapshot_index(9000);
        assert_eq!(counts(&stats), [0, 0, 1, 1]);
        // A node without a snapshot: its first, even at index 0, is new.
        let fresh = Recorder::new(stats.clone(), ServerState::Learner, None);
        fresh.set_snapshot_index(0);
        fresh.set_snapshot_index(0);
        assert_eq!(counts(&stats), [0, 0, 2, 1]);
    }
}
