//! How leases fare, counted where the registry decides: heartbeats refused
//! and why, how much of its TTL a lease had left when its heartbeat came
//! (its slack), how tenures ended, and acquires held off by a lock delay.
//! An operator reads them (INFO `leases`, the metrics endpoint) to see a
//! fleet that heartbeats too late before it starts losing leases.
//!
//! Figures, not state: never logged or replayed, so they start at zero
//! after a restart and after `CONFIG RESETSTAT`, as Redis's stats do.

use super::Registry;
use crate::histogram::Histogram;

/// Why a heartbeat answered 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The lease is still its run's, but its `expires_at` has passed.
    Expired,
    /// Its run has a newer lease: someone took the run over.
    TakenOver,
    /// No such lease: never issued, released, reclaimed, or the id and
    /// token do not belong together.
    Unknown,
}

impl Refused {
    pub const ALL: [Refused; 3] = [Refused::Expired, Refused::TakenOver, Refused::Unknown];

    pub fn as_str(self) -> &'static str {
        match self {
            Refused::Expired => "expired",
            Refused::TakenOver => "taken_over",
            Refused::Unknown => "unknown",
        }
    }
}

/// How a tenure (one lease, from its acquire) ended, as `LEASE.HISTORY`
/// names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TenureEnd {
    /// Released before its `expires_at`.
    Released,
    /// Released at or after its `expires_at`, before anyone took the run
    /// over: a worker that stalled past its lease.
    ReleasedLate,
    /// Past `expires_at` and never released: counted when the run is taken
    /// over or the lease reclaimed, so a tenure is counted once.
    Expired,
}

impl TenureEnd {
    pub const ALL: [TenureEnd; 3] = [
        TenureEnd::Released,
        TenureEnd::ReleasedLate,
        TenureEnd::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TenureEnd::Released => "released",
            TenureEnd::ReleasedLate => "released-late",
            TenureEnd::Expired => "expired",
        }
    }
}

/// Buckets of heartbeat slack: the lease's time left over its TTL, from
/// 0 (it was about to expire) to 1 (just extended).
pub const SLACK_BOUNDS: &[f64] = &[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];

#[derive(Clone, Debug, PartialEq)]
pub struct Health {
    /// Heartbeats refused, by [`Refused::ALL`].
    pub refused: [u64; 3],
    /// Tenures ended, by [`TenureEnd::ALL`].
    pub ended: [u64; 3],
    /// Acquires refused because the run's lease had expired but its lock
    /// delay had not passed.
    pub lock_delayed: u64,
    /// The slack of every heartbeat that extended a lease.
    pub slack: Histogram,
}

impl Default for Health {
    fn default() -> Health {
        Health {
            refused: [0; 3],
            ended: [0; 3],
            lock_delayed: 0,
            slack: Histogram::new(SLACK_BOUNDS),
        }
    }
}

impl Health {
    pub(super) fn refuse(&mut self, why: Refused) {
        self.refused[why as usize] += 1;
    }

    pub(super) fn end(&mut self, how: TenureEnd) {
        self.ended[how as usize] += 1;
    }
}

impl Registry {
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// `CONFIG RESETSTAT`.
    pub fn reset_health(&mut self) {
        self.health = Health::default();
    }

    /// Whether the run a refused heartbeat's lease id names has a newer
    /// lease. The id is `run:worker:token`, and run and worker may both
    /// hold `:`: every split of what precedes `:token` is tried as the
    /// run. Only a refused heartbeat pays for this.
    pub(super) fn taken_over(&self, lease_id: &[u8], fencing_token: u64) -> bool {
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(fencing_token).as_bytes();
        let Some(named) = lease_id
            .strip_suffix(digits)
            .and_then(|rest| rest.strip_suffix(b":"))
        else {
            return false;
        };
        let runs = (0..named.len()).filter(|&at| named[at] == b':');
        runs.map(|at| &named[..at]).any(|run_id| {
            self.current_by_run(run_id)
                .is_some_and(|slot| self.leases.get(slot).fencing_token > fencing_token)
        })
    }
}
