//! Run data: one fenced checkpoint per run (`LEASE.SETDATA`,
//! `LEASE.GETDATA`, `LEASE.DELDATA`, `WITHDATA`).
//!
//! The data belongs to the run, not to one lease: it survives takeovers
//! and releases, and is kept in the run's entry beside its history (see
//! `runs`, which also says how long an entry lives), so runs without data
//! pay nothing for it.

use bytes::Bytes;

/// A run's checkpoint as the registry reports it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunData {
    pub value: Bytes,
    /// The token of the lease that wrote it.
    pub fencing_token: u64,
    /// The time the `SETDATA` was evaluated at.
    pub written_at: f64,
}

impl super::Registry {
    /// `LEASE.SETDATA`: stores `value` as the run's data if the lease
    /// passes `HEARTBEAT`'s test at `now` (the run's current lease,
    /// unexpired, id and token matching). Does not extend the lease.
    pub fn set_data(
        &mut self,
        lease_id: &[u8],
        fencing_token: u64,
        value: &Bytes,
        now: f64,
    ) -> bool {
        let now = self.advance_time(now);
        let Some(slot) = self.holder(lease_id, fencing_token, now) else {
            return false;
        };
        let run_id = Bytes::copy_from_slice(self.leases.get(slot).run_id());
        self.runs.set_data(
            &run_id,
            RunData {
                value: value.clone(),
                fencing_token,
                written_at: now,
            },
        );
        self.record(|| Change::SetData {
            run_id: run_id.clone(),
            value: value.clone(),
            fencing_token,
            written_at: now,
        });
        self.emit(super::EventKind::Data, slot);
        true
    }

    /// `LEASE.DELDATA`: removes the run's data if the lease passes
    /// `HEARTBEAT`'s test at the server's `clock` (or registry time, if
    /// later); whether there was data to remove. Time does not move.
    pub fn del_data(&mut self, lease_id: &[u8], fencing_token: u64, clock: f64) -> bool {
        let at = clock.max(self.time);
        let Some(slot) = self.holder(lease_id, fencing_token, at) else {
            return false;
        };
        let run_id = Bytes::copy_from_slice(self.leases.get(slot).run_id());
        self.drop_data(&run_id)
    }

    /// `LEASE.GETDATA`: the run's data at `at`, unless it is gone by then:
    /// orphaned `retention` seconds ago or more, or its run's lease past
    /// retention (swept yet or not).
    pub fn get_data(&self, run_id: &[u8], at: f64) -> Option<RunData> {
        let entry = self.runs.get(run_id)?;
        let data = entry.data.as_ref()?;
        (!self.run_gone(run_id, entry, at)).then(|| RunData::clone(data))
    }

    /// Runs that have data (some may be due to go).
    pub fn data_count(&self) -> usize {
        self.runs.data_count()
    }

    /// The bytes the run data holds, with the runs' entries (those that
    /// hold history only too).
    pub fn data_memory(&self) -> usize {
        self.runs.data_memory()
    }

    /// The slot of the lease `HEARTBEAT` would accept at `at`.
    fn holder(&self, lease_id: &[u8], fencing_token: u64, at: f64) -> Option<u32> {
        self.current_by_token(fencing_token).filter(|&slot| {
            let entry = self.leases.get(slot);
            super::id_matches(lease_id, entry) && entry.expires_at > at
        })
    }

    /// Removes the run's data, a logged change; whether it had any.
    pub(super) fn drop_data(&mut self, run_id: &[u8]) -> bool {
        if !self.runs.remove_data(run_id) {
            return false;
        }
        self.record(|| Change::DelData {
            run_id: Bytes::copy_from_slice(run_id),
        });
        true
    }

    /// Replays a data change (see [`Change`]): each sets state outright.
    pub(super) fn replay_data(&mut self, change: Change) {
        match change {
            Change::SetData {
                run_id,
                value,
                fencing_token,
                written_at,
            } => {
                self.last_token = self.last_token.max(fencing_token);
                self.runs.set_data(
                    &run_id,
                    RunData {
                        value,
                        fencing_token,
                        written_at,
                    },
                );
            }
            Change::DelData { run_id } => {
                self.runs.remove_data(&run_id);
            }
            _ => unreachable!("not a data change"),
        }
    }
}

use super::Change;
