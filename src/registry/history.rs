//! Tenure history: each run's most recent tenures (`LEASE.HISTORY`).
//!
//! A run's current lease is its *active* tenure: its slot keeps when it
//! was acquired and how many heartbeats it has had. When a tenure ends —
//! released, or taken over after it expired — it becomes a *past* tenure
//! in the run's entry (see `runs`), with how and when it ended, and the
//! newest `lease-history-len` are kept. A lease that expires and is never
//! taken over or released stays the active tenure and reads `expired`;
//! if its retention runs out, the run's history goes with it, as its data
//! does.
//!
//! Past tenures are packed into one heap block per run, oldest first, so
//! a tenure costs 33 bytes plus its worker id, 41 when it was released
//! (an expired tenure's `ended_at` is its `expires_at` and is not stored):
//!
//! | bytes | field |
//! |---|---|
//! | 8 | `fencing_token: u64` |
//! | 8 | `acquired_at: f64` |
//! | 8 | `expires_at: f64` |
//! | 1 | `end`: 0 released, 1 released-late, 2 expired |
//! | 4 | `heartbeats: u32` |
//! | 4 | `worker_len: u32` |
//! | `worker_len` | `worker_id` |
//! | 8 | `ended_at: f64`, unless expired |
//!
//! The lease id is derived, never stored.

use bytes::{Buf, BufMut, Bytes};

use super::{Registry, TenureEnd};

/// A tenure that has ended, as a run's history keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct PastTenure {
    pub worker_id: Bytes,
    pub fencing_token: u64,
    pub acquired_at: f64,
    /// The last `expires_at` it had.
    pub expires_at: f64,
    pub end: TenureEnd,
    /// When it ended: its release, or its `expires_at` when it expired.
    pub ended_at: f64,
    pub heartbeats: u32,
}

/// A tenure as `LEASE.HISTORY` reports it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Tenure {
    pub lease_id: Bytes,
    pub worker_id: Bytes,
    pub fencing_token: u64,
    pub acquired_at: f64,
    pub expires_at: f64,
    /// `None` while active.
    pub ended_at: Option<f64>,
    /// `None`: active.
    pub end: Option<TenureEnd>,
    pub heartbeats: u32,
}

impl Tenure {
    /// `end` as the reply names it: `active`, `released`, ...
    pub fn end_name(&self) -> &'static str {
        self.end.map_or("active", TenureEnd::as_str)
    }
}

/// The bytes of an encoded tenure with an empty worker id and no
/// `ended_at`.
const FIXED: usize = 8 + 8 + 8 + 1 + 4 + 4;

/// A run's past tenures, encoded as the module docs say.
#[derive(Debug, Default)]
pub(super) struct History(Box<[u8]>);

impl History {
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The bytes it holds.
    pub(super) fn bytes(&self) -> usize {
        self.0.len()
    }

    /// How many tenures it holds, counted without copying them out.
    pub(super) fn len(&self) -> usize {
        let mut rest = &self.0[..];
        let mut count = 0;
        while !rest.is_empty() {
            skip(&mut rest);
            count += 1;
        }
        count
    }

    /// Oldest first.
    pub(super) fn iter(&self) -> impl DoubleEndedIterator<Item = PastTenure> + '_ {
        let mut rest = &self.0[..];
        let mut tenures = Vec::new();
        while !rest.is_empty() {
            tenures.push(decode(&mut rest));
        }
        tenures.into_iter()
    }

    /// Appends `tenure`, keeping the newest `keep`; false, changing
    /// nothing, when the history already has it or a newer one.
    pub(super) fn push(&mut self, tenure: &PastTenure, keep: usize) -> bool {
        let mut starts = Vec::new();
        let mut rest = &self.0[..];
        let mut newest = 0;
        while !rest.is_empty() {
            starts.push(self.0.len() - rest.len());
            newest = skip(&mut rest);
        }
        if !starts.is_empty() && newest >= tenure.fencing_token {
            return false;
        }
        let drop = (starts.len() + 1).saturating_sub(keep);
        let from = starts.get(drop).copied().unwrap_or(self.0.len());
        let mut buffer = Vec::with_capacity(self.0.len() - from + encoded_len(tenure));
        buffer.extend_from_slice(&self.0[from..]);
        if drop <= starts.len() {
            encode(tenure, &mut buffer);
        }
        self.0 = buffer.into_boxed_slice();
        true
    }
}

fn encoded_len(tenure: &PastTenure) -> usize {
    let ended_at = if tenure.end == TenureEnd::Expired {
        0
    } else {
        8
    };
    FIXED + tenure.worker_id.len() + ended_at
}

fn encode(tenure: &PastTenure, out: &mut Vec<u8>) {
    out.put_u64_le(tenure.fencing_token);
    out.put_f64_le(tenure.acquired_at);
    out.put_f64_le(tenure.expires_at);
    out.put_u8(tenure.end as u8);
    out.put_u32_le(tenure.heartbeats);
    let worker_len = u32::try_from(tenure.worker_id.len()).expect("worker ids are below 4 GiB");
    out.put_u32_le(worker_len);
    out.put_slice(&tenure.worker_id);
    if tenure.end != TenureEnd::Expired {
        out.put_f64_le(tenure.ended_at);
    }
}

/// Moves past the tenure at the front of `bytes` without copying it out;
/// returns its token.
fn skip(bytes: &mut &[u8]) -> u64 {
    let fencing_token = bytes.get_u64_le();
    bytes.advance(16);
    let end = bytes.get_u8();
    bytes.advance(4);
    let worker_len = bytes.get_u32_le() as usize;
    let ended_at = if end == TenureEnd::Expired as u8 {
        0
    } else {
        8
    };
    bytes.advance(worker_len + ended_at);
    fencing_token
}

/// Decodes the tenure at the front of `bytes` and moves past it.
fn decode(bytes: &mut &[u8]) -> PastTenure {
    let fencing_token = bytes.get_u64_le();
    let acquired_at = bytes.get_f64_le();
    let expires_at = bytes.get_f64_le();
    let end = TenureEnd::ALL[usize::from(bytes.get_u8())];
    let heartbeats = bytes.get_u32_le();
    let worker_len = bytes.get_u32_le() as usize;
    let worker_id = Bytes::copy_from_slice(&bytes[..worker_len]);
    bytes.advance(worker_len);
    let ended_at = if end == TenureEnd::Expired {
        expires_at
    } else {
        bytes.get_f64_le()
    };
    PastTenure {
        worker_id,
        fencing_token,
        acquired_at,
        expires_at,
        end,
        ended_at,
        heartbeats,
    }
}

impl Registry {
    /// How many tenures per run `LEASE.HISTORY` keeps (0: none). A
    /// smaller value applies to each run as its next tenure ends, and to
    /// every read at once.
    pub fn set_history_len(&mut self, len: usize) {
        self.history_len = len;
    }

    pub fn history_len(&self) -> usize {
        self.history_len
    }

    /// Past tenures kept, over all runs.
    pub fn history_entries(&self) -> usize {
        self.runs.tenure_count()
    }

    /// The bytes past tenures hold.
    pub fn history_memory(&self) -> usize {
        self.runs.history_memory()
    }

    /// `LEASE.HISTORY`: the run's newest tenures at `at`, newest first, at
    /// most `count` and `lease-history-len`. A run whose history is gone
    /// by then (see `runs`) has none.
    pub fn history(&self, run_id: &[u8], count: usize, at: f64) -> Vec<Tenure> {
        let count = count.min(self.history_len);
        if count == 0 {
            return Vec::new();
        }
        let slot = self.leases.find_run(run_id);
        if slot.is_some_and(|slot| self.leases.get(slot).expires_at + self.retention <= at) {
            return Vec::new();
        }
        let active = slot.map(|slot| self.active_tenure(slot, at));
        let past = self
            .runs
            .get(run_id)
            .filter(|entry| !self.run_gone(run_id, entry, at))
            .into_iter()
            .flat_map(|entry| entry.history.iter().rev())
            .map(|past| to_tenure(run_id, past));
        active.into_iter().chain(past).take(count).collect()
    }

    /// The current lease's tenure at `at`: active, or expired once its
    /// time has passed.
    fn active_tenure(&self, slot: u32, at: f64) -> Tenure {
        let entry = self.leases.get(slot);
        let expired = entry.expires_at <= at;
        Tenure {
            lease_id: Bytes::from(super::to_lease(entry).lease_id()),
            worker_id: Bytes::copy_from_slice(entry.worker_id()),
            fencing_token: entry.fencing_token,
            acquired_at: entry.acquired_at,
            expires_at: entry.expires_at,
            ended_at: expired.then_some(entry.expires_at),
            end: expired.then_some(TenureEnd::Expired),
            heartbeats: entry.heartbeats,
        }
    }

    /// The tenure of the lease in `slot` ends, as `end` at `ended_at`: it
    /// joins its run's history (when history is kept).
    pub(super) fn end_tenure(&mut self, slot: u32, end: TenureEnd, ended_at: f64) {
        if self.history_len == 0 {
            return;
        }
        let entry = self.leases.get(slot);
        let tenure = PastTenure {
            worker_id: Bytes::copy_from_slice(entry.worker_id()),
            fencing_token: entry.fencing_token,
            acquired_at: entry.acquired_at,
            expires_at: entry.expires_at,
            end,
            ended_at,
            heartbeats: entry.heartbeats,
        };
        let run_id = Bytes::copy_from_slice(entry.run_id());
        self.runs.push_tenure(&run_id, &tenure, self.history_len);
    }
}

fn to_tenure(run_id: &[u8], past: PastTenure) -> Tenure {
    let lease = super::Lease {
        run_id: Bytes::copy_from_slice(run_id),
        worker_id: past.worker_id.clone(),
        fencing_token: past.fencing_token,
        expires_at: past.expires_at,
    };
    Tenure {
        lease_id: Bytes::from(lease.lease_id()),
        worker_id: past.worker_id,
        fencing_token: past.fencing_token,
        acquired_at: past.acquired_at,
        expires_at: past.expires_at,
        ended_at: Some(past.ended_at),
        end: Some(past.end),
        heartbeats: past.heartbeats,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenure(token: u64, end: TenureEnd, worker: &'static [u8]) -> PastTenure {
        PastTenure {
            worker_id: Bytes::from_static(worker),
            fencing_token: token,
            acquired_at: token as f64,
            expires_at: token as f64 + 10.0,
            end,
            ended_at: if end == TenureEnd::Expired {
                token as f64 + 10.0
            } else {
                token as f64 + 2.5
            },
            heartbeats: token as u32 * 3,
        }
    }

    #[test]
    fn a_history_keeps_the_newest_and_each_tenure_once() {
        let mut history = History::default();
        let ends = [
            TenureEnd::Released,
            TenureEnd::Expired,
            TenureEnd::ReleasedLate,
        ];
        for token in 1..=5 {
            let past = tenure(token, ends[token as usize % 3], b"worker:x");
            assert!(history.push(&past, 3));
            assert!(!history.push(&past, 3), "token {token} twice");
        }
        let kept: Vec<PastTenure> = history.iter().collect();
        let want: Vec<PastTenure> = (3..=5)
            .map(|token| tenure(token, ends[token as usize % 3], b"worker:x"))
            .collect();
        assert_eq!(kept, want);
        assert!(!history.push(&tenure(2, TenureEnd::Released, b""), 3));
        assert_eq!(history.len(), 3);
    }

    #[test]
    fn a_past_tenure_costs_33_bytes_and_its_worker_id_41_if_released() {
        let mut history = History::default();
        history.push(&tenure(1, TenureEnd::Expired, b"worker-23"), 8);
        assert_eq!(history.bytes(), 33 + 9);
        history.push(&tenure(2, TenureEnd::Released, b"worker-23"), 8);
        assert_eq!(history.bytes(), 33 + 9 + 41 + 9);
    }

    #[test]
    fn keeping_one_replaces_and_keeping_none_empties() {
        let mut history = History::default();
        history.push(&tenure(1, TenureEnd::Released, b"a"), 1);
        history.push(&tenure(2, TenureEnd::Expired, b"b"), 1);
        let kept: Vec<u64> = history.iter().map(|t| t.fencing_token).collect();
        assert_eq!(kept, [2]);
        history.push(&tenure(3, TenureEnd::Expired, b"c"), 0);
        assert!(history.is_empty());
    }
}
