//! The registry's changes as the append-only log records them, and their
//! replay at start-up.

use bytes::Bytes;

use super::Registry;
use super::data::DataRecord;
use super::table::NewLease;

/// A change to the registry's state, as the append-only log records it.
/// Every change sets state outright instead of relative to what was there,
/// so replaying one whose effect is already present changes nothing: a
/// snapshot taken while changes go on, followed by those changes, gives
/// the right state.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// The run's current lease is this one, replacing any it had.
    Put {
        run_id: Bytes,
        worker_id: Bytes,
        fencing_token: u64,
        expires_at: f64,
        ttl: f64,
    },
    /// The lease with this token, if there is one, expires at `expires_at`.
    Extend { fencing_token: u64, expires_at: f64 },
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
    /// The run's data, if it has any, was orphaned at `at`: its run's last
    /// lease was released then. Logged because the data's due time counts
    /// from it and a release does not move registry time.
    Orphan { run_id: Bytes, at: f64 },
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
        };
        let lock_delay = (self.lock_delay > 0.0).then_some(Change::LockDelay {
            fencing_token: self.fencing_token,
            lock_delay: self.lock_delay,
        });
        std::iter::once(put).chain(lock_delay)
    }
}

impl DataRecord<'_> {
    /// The changes that recreate this run's data: its `SetData`, and its
    /// `Orphan` when its run has no lease.
    pub fn to_changes(&self) -> impl Iterator<Item = Change> + use<> {
        let run_id = Bytes::copy_from_slice(self.run_id);
        let orphan = self.orphaned_at.map(|at| Change::Orphan {
            run_id: run_id.clone(),
            at,
        });
        let set = Change::SetData {
            run_id,
            value: Bytes::copy_from_slice(self.value),
            fencing_token: self.fencing_token,
            written_at: self.written_at,
        };
        std::iter::once(set).chain(orphan)
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
            } => {
                self.last_token = self.last_token.max(fencing_token);
                // The run has a lease again: its data is no orphan.
                self.data.adopt(&run_id);
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
                };
                match self.leases.find_run(&run_id) {
                    Some(slot) => self.leases.replace(slot, &lease),
                    None => {
                        self.leases.insert(&run_id, &lease);
                    }
                }
            }
            Change::Extend {
                fencing_token,
                expires_at,
            } => {
                if let Some(slot) = self.leases.find_token(fencing_token) {
                    self.leases.set_expiry(slot, expires_at);
                }
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
            change @ (Change::SetData { .. } | Change::DelData { .. } | Change::Orphan { .. }) => {
                self.replay_data(change)
            }
        }
    }
}
