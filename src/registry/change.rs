//! The registry's changes as the append-only log records them, and their
//! replay at start-up.

use bytes::Bytes;

use super::history::PastTenure;
use super::runs::RunRecord;
use super::table::NewLease;
use super::{Registry, TenureEnd};

/// A change to the registry's state, as the append-only log records it.
/// Every change sets state outright instead of relative to what was there,
/// so replaying one whose effect is already present changes nothing: a
/// snapshot taken while changes go on, followed by those changes, gives
/// the right state.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// The run's current lease is this one, replacing any it had; it was
    /// acquired at `acquired_at` (`None` in logs from before tenure
    /// history: replay takes registry time) and has had `heartbeats`
    /// heartbeats (0 but in a snapshot).
    Put {
        run_id: Bytes,
        worker_id: Bytes,
        fencing_token: u64,
        expires_at: f64,
        ttl: f64,
        acquired_at: Option<f64>,
        heartbeats: u32,
    },
    /// The lease with this token, if there is one, expires at `expires_at`
    /// and has had one more heartbeat (logs before `Beat` have these).
    Extend { fencing_token: u64, expires_at: f64 },
    /// The lease with this token, if there is one, expires at `expires_at`
    /// and has had `heartbeats` heartbeats: a heartbeat. The count is set
    /// outright, so a heartbeat both in a snapshot and after it counts once.
    Beat {
        fencing_token: u64,
        expires_at: f64,
        heartbeats: u32,
    },
    /// The lease with this token, if there is one, is gone.
    Remove { fencing_token: u64 },
    /// Registry time is at least this.
    Time(f64),
    /// The last token issued is at least this. Snapshots carry it because a
    /// released lease no longer shows its token.
    LastToken(u64),
    /// The lease with this token, if there is one, has this lock delay
    /// (recorded after its `Put`, only when it is not 0).
    LockDelay { fencing_token: u64, lock_delay: f64 },
    /// The run's data is this, written by the lease with this token at
    /// `written_at`; the run has a lease (it is no orphan).
    SetData {
        run_id: Bytes,
        value: Bytes,
        fencing_token: u64,
        written_at: f64,
    },
    /// The run has no data.
    DelData { run_id: Bytes },
    /// The run's data and history, if it has any, were orphaned at `at`:
    /// its run's last lease was released then (a snapshot's record of an
    /// orphan; a release itself logs [`Change::Release`]).
    Orphan { run_id: Bytes, at: f64 },
    /// The lease with this token, if there is one, was released at `at`
    /// (the server's clock or registry time, whichever was later): its
    /// tenure ends `released`, or `released-late` when `at` is not before
    /// its `expires_at`; its run's data and history are orphaned at `at`
    /// (a release does not move registry time, so the due time is
    /// logged); the lease is gone.
    Release { fencing_token: u64, at: f64 },
    /// The run has no data and no history: its last lease's retention ran
    /// out.
    Forget { run_id: Bytes },
    /// The run's history has this past tenure, after those it has (a
    /// snapshot's record; one it has already is not added again).
    Past { run_id: Bytes, tenure: PastTenure },
}

/// A lease as a snapshot reads it, borrowed from the registry: written to
/// the log as a `Put` without copying its ids.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LeaseRecord<'a> {
    pub run_id: &'a [u8],
    pub worker_id: &'a [u8],
    pub fencing_token: u64,
    pub expires_at: f64,
    pub ttl: f64,
    /// 0 for none.
    pub lock_delay: f64,
    pub acquired_at: f64,
    pub heartbeats: u32,
}

impl LeaseRecord<'_> {
    /// The changes that recreate this lease: its `Put`, and its
    /// `LockDelay` when it has one.
    pub fn to_changes(&self) -> impl Iterator<Item = Change> + use<> {
        let put = Change::Put {
            run_id: Bytes::copy_from_slice(self.run_id),
            worker_id: Bytes::copy_from_slice(self.worker_id),
            fencing_token: self.fencing_token,
            expires_at: self.expires_at,
            ttl: self.ttl,
            acquired_at: Some(self.acquired_at),
            heartbeats: self.heartbeats,
        };
        let lock_delay = (self.lock_delay > 0.0).then_some(Change::LockDelay {
            fencing_token: self.fencing_token,
            lock_delay: self.lock_delay,
        });
        std::iter::once(put).chain(lock_delay)
    }
}

impl RunRecord<'_> {
    /// The changes that recreate this run's entry: its `SetData` when it
    /// has data, a `Past` per past tenure, oldest first, and its `Orphan`
    /// when its run has no lease.
    pub fn to_changes(&self) -> impl Iterator<Item = Change> + use<> {
        let run_id = Bytes::copy_from_slice(self.run_id);
        let set = self.data.map(|data| Change::SetData {
            run_id: run_id.clone(),
            value: data.value.clone(),
            fencing_token: data.fencing_token,
            written_at: data.written_at,
        });
        let past: Vec<Change> = self
            .history
            .iter()
            .map(|tenure| Change::Past {
                run_id: run_id.clone(),
                tenure: tenure.clone(),
            })
            .collect();
        let orphan = self.orphaned_at.map(|at| Change::Orphan { run_id, at });
        set.into_iter().chain(past).chain(orphan)
    }
}

impl Registry {
    /// Applies a change read back from the log. Changes set state outright,
    /// so applying one whose effect is already present changes nothing.
    /// Tokens and time only ever grow. Nothing is recorded.
    pub fn replay(&mut self, change: Change) {
        match change {
            Change::Put {
                run_id,
                worker_id,
                fencing_token,
                expires_at,
                ttl,
                acquired_at,
                heartbeats,
            } => {
                self.last_token = self.last_token.max(fencing_token);
                // A lease older than the run's: a snapshot taken while
                // changes went on already holds what came of it (its run's
                // newer lease, and in the run's entry how it ended).
                if self
                    .leases
                    .find_run(&run_id)
                    .is_some_and(|slot| self.leases.get(slot).fencing_token > fencing_token)
                {
                    return;
                }
                // The run has a lease again: its entry is no orphan.
                self.runs.adopt(&run_id);
                if let Some(slot) = self.leases.find_token(fencing_token) {
                    // Only a replayed log can put a token twice; the newer wins.
                    self.leases.remove(slot);
                }
                let lease = NewLease {
                    worker_id: &worker_id,
                    fencing_token,
                    expires_at,
                    ttl,
                    lock_delay: 0.0,
                    acquired_at: acquired_at.unwrap_or(self.time),
                };
                let slot = match self.leases.find_run(&run_id) {
                    Some(slot) => {
                        // A takeover: the expired lease's tenure ends.
                        let expired_at = self.leases.get(slot).expires_at;
                        self.end_tenure(slot, TenureEnd::Expired, expired_at);
                        self.leases.replace(slot, &lease);
                        slot
                    }
                    None => self.leases.insert(&run_id, &lease),
                };
                self.leases.set_tenure(slot, lease.acquired_at, heartbeats);
            }
            Change::Extend {
                fencing_token,
                expires_at,
            } => {
                if let Some(slot) = self.leases.find_token(fencing_token) {
                    self.leases.set_expiry(slot, expires_at);
                    let entry = self.leases.get(slot);
                    let heartbeats = entry.heartbeats.saturating_add(1);
                    self.leases.set_tenure(slot, entry.acquired_at, heartbeats);
                }
            }
            Change::Beat {
                fencing_token,
                expires_at,
                heartbeats,
            } => {
                if let Some(slot) = self.leases.find_token(fencing_token) {
                    self.leases.set_expiry(slot, expires_at);
                    let acquired_at = self.leases.get(slot).acquired_at;
                    self.leases.set_tenure(slot, acquired_at, heartbeats);
                }
            }
            Change::Release { fencing_token, at } => {
                if let Some(slot) = self.leases.find_token(fencing_token) {
                    self.end_release(slot, at);
                }
            }
            Change::Past { run_id, tenure } => {
                self.last_token = self.last_token.max(tenure.fencing_token);
                self.runs.push_tenure(&run_id, &tenure, self.history_len);
            }
            Change::Forget { run_id } => {
                self.runs.forget(&run_id);
            }
            Change::Orphan { run_id, at } => {
                self.runs.orphan(&run_id, at);
            }
            Change::Remove { fencing_token } => {
                if let Some(slot) = self.leases.find_token(fencing_token) {
                    self.leases.remove(slot);
                }
            }
            Change::Time(time) => self.time = self.time.max(time),
            Change::LastToken(token) => self.last_token = self.last_token.max(token),
            Change::LockDelay {
                fencing_token,
                lock_delay,
            } => {
                if let Some(slot) = self.leases.find_token(fencing_token) {
                    self.leases.set_lock_delay(slot, lock_delay);
                }
            }
            change @ (Change::SetData { .. } | Change::DelData { .. }) => self.replay_data(change),
        }
    }
}
