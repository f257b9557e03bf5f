//! Run data: one fenced checkpoint per run (`LEASE.SETDATA`,
//! `LEASE.GETDATA`, `LEASE.DELDATA`, `WITHDATA`).
//!
//! The data belongs to the run, not to one lease: it survives takeovers
//! and releases. It is kept apart from the lease table, keyed by run, so
//! runs without data pay nothing for it.
//!
//! Its lifetime follows the run's leases:
//!
//! - while the run has a lease, the data lives as long as that lease does:
//!   when the lease expires and its retention runs out (it is reclaimed, or
//!   an acquire finds it past retention), the data goes with it;
//! - when the run's lease is released, the data is *orphaned* at the
//!   release's time and goes `retention` seconds later, unless the run is
//!   acquired again before that (the new lease adopts it).
//!
//! Orphans are kept in a due-time order as well, so that
//! [`super::Registry::reclaim`] sweeps the due ones earliest first, a
//! bounded number per step, on registry time as leases are reclaimed. A
//! read treats data that is due as gone, swept or not (a read never
//! writes).

use std::collections::{BTreeMap, BTreeSet, btree_map};
use std::ops::Bound;

use bytes::Bytes;

use super::Seconds;

/// A run's checkpoint as the registry reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct RunData {
    pub value: Bytes,
    /// The token of the lease that wrote it.
    pub fencing_token: u64,
    /// The time the `SETDATA` was evaluated at.
    pub written_at: f64,
}

/// A run's data as a snapshot reads it: the data, and when its run's last
/// lease was released if the run has none now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DataRecord<'a> {
    pub run_id: &'a [u8],
    pub value: &'a [u8],
    pub fencing_token: u64,
    pub written_at: f64,
    pub orphaned_at: Option<f64>,
}

#[derive(Debug)]
struct Entry {
    data: RunData,
    /// When the run's last lease was released, while it has none.
    orphaned_at: Option<f64>,
}

/// Bytes an entry costs beyond its run id and value: the entry, and the
/// map's share of a node (an estimate).
const ENTRY_OVERHEAD: usize = 96;

/// Every run's data, and the orphans by release time.
#[derive(Debug, Default)]
pub(super) struct DataStore {
    /// Ordered by run, so a snapshot can walk it a chunk at a time from
    /// the last run it wrote.
    by_run: BTreeMap<Bytes, Entry>,
    orphans: BTreeSet<(Seconds, Bytes)>,
    /// The bytes the data holds (run ids, values, an estimate per entry).
    memory: usize,
}

impl DataStore {
    pub(super) fn len(&self) -> usize {
        self.by_run.len()
    }

    pub(super) fn memory(&self) -> usize {
        self.memory
    }

    pub(super) fn get(&self, run_id: &[u8]) -> Option<(&RunData, Option<f64>)> {
        self.by_run
            .get(run_id)
            .map(|entry| (&entry.data, entry.orphaned_at))
    }

    /// Sets the run's data; a run that has data to set has a lease, so it
    /// is no orphan. One walk of the map, whether the run has data or not.
    pub(super) fn set(&mut self, run_id: &Bytes, data: RunData) {
        let added = data.value.len();
        match self.by_run.entry(run_id.clone()) {
            btree_map::Entry::Occupied(mut slot) => {
                let entry = slot.get_mut();
                if let Some(at) = entry.orphaned_at.take() {
                    self.orphans.remove(&(Seconds(at), run_id.clone()));
                }
                self.memory = self.memory - entry.data.value.len() + added;
                entry.data = data;
            }
            btree_map::Entry::Vacant(slot) => {
                self.memory += run_id.len() + added + ENTRY_OVERHEAD;
                slot.insert(Entry {
                    data,
                    orphaned_at: None,
                });
            }
        }
    }

    /// Removes the run's data; whether it had any.
    pub(super) fn remove(&mut self, run_id: &[u8]) -> bool {
        let Some((run, entry)) = self.by_run.remove_entry(run_id) else {
            return false;
        };
        if let Some(at) = entry.orphaned_at {
            self.orphans.remove(&(Seconds(at), run.clone()));
        }
        self.memory -= run.len() + entry.data.value.len() + ENTRY_OVERHEAD;
        true
    }

    /// Marks the run's data, if any, as orphaned at `at`.
    pub(super) fn orphan(&mut self, run_id: &[u8], at: f64) -> bool {
        let Some((run, entry)) = self.by_run.get_key_value(run_id) else {
            return false;
        };
        let run = run.clone();
        if let Some(old) = entry.orphaned_at {
            self.orphans.remove(&(Seconds(old), run.clone()));
        }
        self.orphans.insert((Seconds(at), run));
        if let Some(entry) = self.by_run.get_mut(run_id) {
            entry.orphaned_at = Some(at);
        }
        true
    }

    /// The run has a lease again: its data is no orphan.
    pub(super) fn adopt(&mut self, run_id: &[u8]) {
        if let Some(entry) = self.by_run.get_mut(run_id)
            && let Some(at) = entry.orphaned_at.take()
        {
            self.orphans
                .remove(&(Seconds(at), Bytes::copy_from_slice(run_id)));
        }
    }

    /// The earliest orphan: its release time and run.
    pub(super) fn earliest_orphan(&self) -> Option<(f64, Bytes)> {
        self.orphans
            .first()
            .map(|(at, run_id)| (at.0, run_id.clone()))
    }

    /// The data of up to `max` runs after `after` (from the first when
    /// `None`), in run order; returns the last run visited if more may
    /// follow.
    pub(super) fn walk(
        &self,
        after: Option<&[u8]>,
        max: usize,
        mut visit: impl FnMut(DataRecord<'_>),
    ) -> Option<Bytes> {
        let range = match after {
            Some(run) => self
                .by_run
                .range::<[u8], _>((Bound::Excluded(run), Bound::Unbounded)),
            None => self.by_run.range::<[u8], _>(..),
        };
        let mut last = None;
        for (count, (run_id, entry)) in range.enumerate() {
            if count == max {
                return last;
            }
            visit(DataRecord {
                run_id,
                value: &entry.data.value,
                fencing_token: entry.data.fencing_token,
                written_at: entry.data.written_at,
                orphaned_at: entry.orphaned_at,
            });
            last = Some(run_id.clone());
        }
        None
    }
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
        self.data.set(
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
        let (data, orphaned_at) = self.data.get(run_id)?;
        let gone = match orphaned_at {
            Some(released) => released + self.retention <= at,
            None => self
                .leases
                .find_run(run_id)
                .is_none_or(|slot| self.leases.get(slot).expires_at + self.retention <= at),
        };
        (!gone).then(|| data.clone())
    }

    /// Runs that have data (some may be due to go).
    pub fn data_count(&self) -> usize {
        self.data.len()
    }

    /// The bytes the run data holds.
    pub fn data_memory(&self) -> usize {
        self.data.memory()
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
        if !self.data.remove(run_id) {
            return false;
        }
        self.record(|| Change::DelData {
            run_id: Bytes::copy_from_slice(run_id),
        });
        true
    }

    /// The run's lease was released at `at`: its data, if any, is
    /// orphaned from then (a logged change, so replay finds the same due
    /// time).
    pub(super) fn orphan_data(&mut self, run_id: &[u8], at: f64) {
        if self.data.orphan(run_id, at) {
            self.record(|| Change::Orphan {
                run_id: Bytes::copy_from_slice(run_id),
                at,
            });
        }
    }

    /// A new lease on the run at registry time: data orphaned long enough
    /// ago is gone, other data is the new lease's.
    pub(super) fn adopt_data(&mut self, run_id: &[u8]) {
        match self.data.get(run_id) {
            Some((_, Some(released))) if released + self.retention <= self.time => {
                self.drop_data(run_id);
            }
            Some(_) => self.data.adopt(run_id),
            None => {}
        }
    }

    /// Whether an orphan's time is up at registry time.
    pub(super) fn orphan_due(&self) -> bool {
        self.data
            .earliest_orphan()
            .is_some_and(|(released, _)| released + self.retention <= self.time)
    }

    /// Removes the earliest orphan if it is due; whether it did.
    pub(super) fn sweep_orphan(&mut self) -> bool {
        match self.data.earliest_orphan() {
            Some((released, run_id)) if released + self.retention <= self.time => {
                self.drop_data(&run_id)
            }
            _ => false,
        }
    }

    /// Snapshot of the run data: up to `max` runs after `after`; returns
    /// where to continue, or `None` after the last.
    pub fn snapshot_data(
        &self,
        after: Option<&[u8]>,
        max: usize,
        visit: impl FnMut(DataRecord<'_>),
    ) -> Option<Bytes> {
        self.data.walk(after, max, visit)
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
                self.data.set(
                    &run_id,
                    RunData {
                        value,
                        fencing_token,
                        written_at,
                    },
                );
            }
            Change::DelData { run_id } => {
                self.data.remove(&run_id);
            }
            Change::Orphan { run_id, at } => {
                self.data.orphan(&run_id, at);
            }
            _ => unreachable!("not a data change"),
        }
    }
}

use super::Change;
