//! What a run keeps beyond its current lease: its data (a checkpoint, see
//! `data`) and its past tenures (see `history`), in one entry per run.
//!
//! Both belong to the run, not to one lease: they survive takeovers and
//! releases, and share one lifetime that follows the run's leases:
//!
//! - while the run has a lease, the entry lives as long as that lease
//!   does: when the lease expires and its retention runs out (it is
//!   reclaimed, or an acquire finds it past retention), the entry goes
//!   with it;
//! - when the run's lease is released, the entry is *orphaned* at the
//!   release's time and goes `retention` seconds later, unless the run is
//!   acquired again before that (the new lease adopts it).
//!
//! Runs with neither data nor past tenures have no entry and pay nothing.
//! Orphans are kept in a due-time order as well, so that
//! [`super::Registry::reclaim`] sweeps the due ones earliest first, a
//! bounded number per step, on registry time as leases are reclaimed. A
//! read treats an entry that is due as gone, swept or not (a read never
//! writes).

use std::collections::{BTreeMap, BTreeSet, btree_map};
use std::ops::Bound;

use bytes::Bytes;

use super::history::{History, PastTenure};
use super::{RunData, Seconds};

/// A run's entry as a snapshot reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRecord<'a> {
    pub run_id: &'a [u8],
    pub data: Option<&'a RunData>,
    /// Past tenures, oldest first.
    pub history: Vec<PastTenure>,
    /// When its run's last lease was released, if the run has none now.
    pub orphaned_at: Option<f64>,
}

/// Boxed data, ids as boxed slices: an entry is 40 bytes and its key 16,
/// since the map's nodes hold room for eleven of each whether used or not.
#[derive(Debug, Default)]
pub(super) struct Entry {
    pub(super) data: Option<Box<RunData>>,
    pub(super) history: History,
    /// When the run's last lease was released, while it has none.
    pub(super) orphaned_at: Option<f64>,
}

/// Bytes an entry costs beyond its run id, value and history: the entry,
/// and the map's share of a node (an estimate).
const ENTRY_OVERHEAD: usize = 96;

/// Every run's entry, and the orphans by release time.
#[derive(Debug, Default)]
pub(super) struct RunStore {
    /// Ordered by run, so a snapshot can walk it a chunk at a time from
    /// the last run it wrote.
    by_run: BTreeMap<Box<[u8]>, Entry>,
    orphans: BTreeSet<(Seconds, Box<[u8]>)>,
    /// Runs with data.
    with_data: usize,
    /// Bytes of the entries (run ids, an estimate per entry) and values.
    data_memory: usize,
    /// Past tenures kept, and their bytes.
    tenures: usize,
    history_memory: usize,
}

impl RunStore {
    /// Runs that have data.
    pub(super) fn data_count(&self) -> usize {
        self.with_data
    }

    pub(super) fn data_memory(&self) -> usize {
        self.data_memory
    }

    /// Past tenures kept, over all runs.
    pub(super) fn tenure_count(&self) -> usize {
        self.tenures
    }

    pub(super) fn history_memory(&self) -> usize {
        self.history_memory
    }

    pub(super) fn get(&self, run_id: &[u8]) -> Option<&Entry> {
        self.by_run.get(run_id)
    }

    /// The run's entry, made if it has none: one walk of the map (the
    /// key is copied even when the run has an entry; the walk costs
    /// more).
    fn entry(&mut self, run_id: &[u8]) -> &mut Entry {
        match self.by_run.entry(run_id.into()) {
            btree_map::Entry::Occupied(entry) => entry.into_mut(),
            btree_map::Entry::Vacant(entry) => {
                self.data_memory += run_id.len() + ENTRY_OVERHEAD;
                entry.insert(Entry::default())
            }
        }
    }

    /// Sets the run's data. Only a run's lease writes its data, so the run
    /// is no orphan when it does; it is left as it is, as a snapshot's
    /// orphan is written after its data.
    pub(super) fn set_data(&mut self, run_id: &[u8], data: RunData) {
        let added = data.value.len();
        let old = self.entry(run_id).data.replace(Box::new(data));
        match old {
            Some(old) => self.data_memory = self.data_memory - old.value.len() + added,
            None => {
                self.data_memory += added;
                self.with_data += 1;
            }
        }
    }

    /// Removes the run's data, and its entry if nothing else is left;
    /// whether it had data.
    pub(super) fn remove_data(&mut self, run_id: &[u8]) -> bool {
        let Some(entry) = self.by_run.get_mut(run_id) else {
            return false;
        };
        let Some(old) = entry.data.take() else {
            return false;
        };
        self.data_memory -= old.value.len();
        self.with_data -= 1;
        if entry.history.is_empty() {
            self.forget(run_id);
        }
        true
    }

    /// Adds a past tenure to the run's history, keeping the newest `keep`
    /// (none when 0). One the history already has (its token is not newer
    /// than the newest kept) is not added twice: replay may meet it again.
    pub(super) fn push_tenure(&mut self, run_id: &[u8], tenure: &PastTenure, keep: usize) {
        if keep == 0 {
            return;
        }
        let entry = self.entry(run_id);
        let (before_count, before_bytes) = (entry.history.len(), entry.history.bytes());
        let added = entry.history.push(tenure, keep);
        let (after_count, after_bytes) = (entry.history.len(), entry.history.bytes());
        if added {
            self.tenures = self.tenures - before_count + after_count;
            self.history_memory = self.history_memory - before_bytes + after_bytes;
        }
    }

    /// Removes the run's entry, data and history; whether it had one.
    pub(super) fn forget(&mut self, run_id: &[u8]) -> bool {
        let Some((run, entry)) = self.by_run.remove_entry(run_id) else {
            return false;
        };
        if let Some(at) = entry.orphaned_at {
            self.orphans.remove(&(Seconds(at), run.clone()));
        }
        self.data_memory -= run.len() + ENTRY_OVERHEAD;
        if let Some(data) = entry.data {
            self.data_memory -= data.value.len();
            self.with_data -= 1;
        }
        self.tenures -= entry.history.len();
        self.history_memory -= entry.history.bytes();
        true
    }

    /// Marks the run's entry, if any, as orphaned at `at`.
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

    /// The run has a lease again: its entry is no orphan.
    pub(super) fn adopt(&mut self, run_id: &[u8]) {
        if let Some(entry) = self.by_run.get_mut(run_id)
            && let Some(at) = entry.orphaned_at.take()
        {
            self.orphans
                .remove(&(Seconds(at), Box::<[u8]>::from(run_id)));
        }
    }

    /// The earliest orphan: its release time and run.
    pub(super) fn earliest_orphan(&self) -> Option<(f64, Bytes)> {
        self.orphans
            .first()
            .map(|(at, run_id)| (at.0, Bytes::copy_from_slice(run_id)))
    }

    /// The entries of up to `max` runs after `after` (from the first when
    /// `None`), in run order; returns the last run visited if more may
    /// follow.
    pub(super) fn walk(
        &self,
        after: Option<&[u8]>,
        max: usize,
        mut visit: impl FnMut(RunRecord<'_>),
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
            visit(RunRecord {
                run_id,
                data: entry.data.as_deref(),
                history: entry.history.iter().collect(),
                orphaned_at: entry.orphaned_at,
            });
            last = Some(Bytes::copy_from_slice(run_id));
        }
        None
    }
}

impl super::Registry {
    /// Whether the run's entry is gone at `at` (swept yet or not): it was
    /// orphaned `retention` seconds ago or more, or its run's lease is past
    /// retention.
    pub(super) fn run_gone(&self, run_id: &[u8], entry: &Entry, at: f64) -> bool {
        match entry.orphaned_at {
            Some(released) => released + self.retention <= at,
            None => self
                .leases
                .find_run(run_id)
                .is_none_or(|slot| self.leases.get(slot).expires_at + self.retention <= at),
        }
    }

    /// Removes the run's entry, a logged change; whether it had one.
    pub(super) fn forget_run(&mut self, run_id: &[u8]) -> bool {
        if !self.runs.forget(run_id) {
            return false;
        }
        self.record(|| Change::Forget {
            run_id: Bytes::copy_from_slice(run_id),
        });
        true
    }

    /// A new lease on the run at registry time: an entry orphaned long
    /// enough ago is gone, any other is the new lease's.
    pub(super) fn adopt_run(&mut self, run_id: &[u8]) {
        match self.runs.get(run_id).map(|entry| entry.orphaned_at) {
            Some(Some(released)) if released + self.retention <= self.time => {
                self.forget_run(run_id);
            }
            Some(_) => self.runs.adopt(run_id),
            None => {}
        }
    }

    /// Whether an orphan's time is up at registry time.
    pub(super) fn orphan_due(&self) -> bool {
        self.runs
            .earliest_orphan()
            .is_some_and(|(released, _)| released + self.retention <= self.time)
    }

    /// Removes the earliest orphan if it is due; whether it did.
    pub(super) fn sweep_orphan(&mut self) -> bool {
        match self.runs.earliest_orphan() {
            Some((released, run_id)) if released + self.retention <= self.time => {
                self.forget_run(&run_id)
            }
            _ => false,
        }
    }

    /// Snapshot of the runs' entries: up to `max` runs after `after`;
    /// returns where to continue, or `None` after the last.
    pub fn snapshot_runs(
        &self,
        after: Option<&[u8]>,
        max: usize,
        visit: impl FnMut(RunRecord<'_>),
    ) -> Option<Bytes> {
        self.runs.walk(after, max, visit)
    }
}

use super::Change;
