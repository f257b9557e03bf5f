//! The registry's one entry point for commands: [`Registry::apply`] takes
//! an [`Op`] and the server's clock and returns an [`Outcome`].
//!
//! It is deterministic: no clock is read inside it, reclaiming is bounded
//! by a count of leases rather than by elapsed time, and reads without an
//! explicit `now` change nothing. So the same ops at the same clocks give
//! the same outcomes, state and recorded changes on any machine, however
//! they are grouped into batches: the single node's core task calls it,
//! and a replicated state machine can call it with the time its leader
//! stamped into each entry.
//!
//! Outcomes are data; the connection words them for the client.

use bytes::Bytes;

use super::{KeyState, Lease, Registry, RunData, Tenure, TokensExhausted};
use crate::glob;

/// A command for the registry. `None` for `now` means "the server's
/// clock", which [`Registry::apply`] is given.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Op {
    Acquire {
        run_id: Bytes,
        worker_id: Bytes,
        now: Option<f64>,
        ttl: Option<f64>,
        /// `None`: the default lock delay.
        lock_delay: Option<f64>,
        /// `WITHDATA`: the reply carries the run's data.
        with_data: bool,
    },
    Heartbeat {
        lease_id: Bytes,
        token: u64,
        now: Option<f64>,
    },
    Validate {
        run_id: Bytes,
        lease_id: Bytes,
        token: u64,
        now: Option<f64>,
    },
    Release {
        lease_id: Bytes,
        token: u64,
    },
    Get {
        run_id: Bytes,
        now: Option<f64>,
    },
    /// `LEASE.SETDATA`: the run's data, if the lease passes `HEARTBEAT`'s
    /// test.
    SetData {
        lease_id: Bytes,
        token: u64,
        value: Bytes,
        now: Option<f64>,
    },
    /// `LEASE.GETDATA`: the run's data at the server's clock.
    GetData {
        run_id: Bytes,
    },
    /// `LEASE.DELDATA`: removes the run's data, if the lease passes
    /// `HEARTBEAT`'s test at the server's clock.
    DelData {
        lease_id: Bytes,
        token: u64,
    },
    /// `LEASE.HISTORY`: the run's newest tenures at the server's clock,
    /// at most `count` (and `lease-history-len`).
    History {
        run_id: Bytes,
        count: usize,
    },
    /// `LEASE.SCAN`: the run ids of up to about `count` leases from slot
    /// `cursor` on, those matching `pattern` if given.
    Scan {
        cursor: u64,
        pattern: Option<Bytes>,
        count: usize,
    },
    /// `DBSIZE`: leases held, active or expired.
    DbSize,
    /// The keyspace view's reads of runs as keys (`EXISTS`, `TYPE`, `TTL`,
    /// `HGETALL`, ...): each run's lease at the server's clock. Like a
    /// `LEASE.GET` without `now`, it changes nothing.
    Inspect {
        run_ids: Vec<Bytes>,
    },
    /// `RANDOMKEY`: a run that holds a lease, found from the slot `seed`
    /// picks (the caller's randomness keeps the registry deterministic).
    RandomRun {
        seed: u64,
    },
    /// Removes up to `max` leases whose retention has run out, earliest
    /// first: the core's work between requests, bounded by a count so that
    /// it is the same on every replica.
    Reclaim {
        max: usize,
    },
    /// Announces, while events are made, the leases that expired by
    /// `max(clock, registry time)`: time passing, with no command. It
    /// does not move registry time.
    AnnounceExpired,
}

/// What an [`Op`] did.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Outcome {
    /// An acquire: the new lease, or `None` when the run is held.
    Acquired(Option<Lease>),
    /// An acquire `WITHDATA` that took the run: the new lease and the
    /// run's data, if it has any (what the previous holder left).
    AcquiredData(Box<(Lease, Option<RunData>)>),
    /// Heartbeat, validate, release: whether it did what it asked.
    Flag(bool),
    /// A get: the run's lease and whether it has expired.
    Got(Option<(Lease, bool)>),
    /// A scan: where to continue (0 after the last slot), and run ids.
    Scanned { next: u64, runs: Vec<Bytes> },
    /// `DBSIZE`.
    Count(usize),
    /// An inspection: each run's lease, if it has one, in the order named.
    Inspected(Vec<Option<KeyState>>),
    /// `RANDOMKEY`: a run id, or `None` when no run holds a lease.
    Run(Option<Bytes>),
    /// Leases reclaimed.
    Reclaimed(usize),
    /// An acquire found the run free, but every token has been issued.
    TokensExhausted,
    /// `LEASE.GETDATA`: the run's data, if it has any.
    Data(Option<RunData>),
    /// `LEASE.HISTORY`: tenures, newest first.
    History(Vec<Tenure>),
}

/// Which id of a command is too long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdKind {
    Run,
    Worker,
}

impl IdKind {
    pub fn as_str(self) -> &'static str {
        match self {
            IdKind::Run => "run",
            IdKind::Worker => "worker",
        }
    }
}

impl Op {
    /// Whether the op may change leases (as opposed to only moving
    /// registry time forward): a client's such ops are refused while the
    /// log cannot be written.
    pub fn changes_leases(&self) -> bool {
        matches!(
            self,
            Op::Acquire { .. }
                | Op::Heartbeat { .. }
                | Op::Release { .. }
                | Op::SetData { .. }
                | Op::DelData { .. }
        )
    }

    /// The explicit `now` the op carries, if any.
    pub fn explicit_now(&self) -> Option<f64> {
        match self {
            Op::Acquire { now, .. }
            | Op::Heartbeat { now, .. }
            | Op::Validate { now, .. }
            | Op::Get { now, .. }
            | Op::SetData { now, .. } => *now,
            _ => None,
        }
    }

    /// The first run or worker id longer than `max` bytes, if any. Lease
    /// ids are not checked: one longer than any id could make is simply
    /// not found.
    pub fn oversized_id(&self, max: usize) -> Option<IdKind> {
        let (run_id, worker_id) = match self {
            Op::Acquire {
                run_id, worker_id, ..
            } => (run_id, Some(worker_id)),
            Op::Validate { run_id, .. }
            | Op::Get { run_id, .. }
            | Op::GetData { run_id }
            | Op::History { run_id, .. } => (run_id, None),
            _ => return None,
        };
        if run_id.len() > max {
            return Some(IdKind::Run);
        }
        worker_id
            .is_some_and(|id| id.len() > max)
            .then_some(IdKind::Worker)
    }
}

impl Registry {
    /// Applies `op` at the server's `clock` (seconds since the Unix epoch):
    /// ops that change leases, and any op with an explicit `now`, move
    /// registry time forward (to `now`, or else to `clock`); reads without
    /// one are evaluated at `max(clock, registry time)` and change nothing.
    pub fn apply(&mut self, op: &Op, clock: f64) -> Outcome {
        match op {
            Op::Acquire {
                run_id,
                worker_id,
                now,
                ttl,
                lock_delay,
                with_data,
            } => {
                let now = now.unwrap_or(clock);
                match self.acquire_with(run_id, worker_id, now, *ttl, *lock_delay) {
                    Ok(Some(lease)) if *with_data => {
                        let data = self.get_data(run_id, self.time());
                        Outcome::AcquiredData(Box::new((lease, data)))
                    }
                    Ok(lease) => Outcome::Acquired(lease),
                    Err(TokensExhausted) => Outcome::TokensExhausted,
                }
            }
            Op::Heartbeat {
                lease_id,
                token,
                now,
            } => Outcome::Flag(self.heartbeat(lease_id, *token, now.unwrap_or(clock))),
            Op::Validate {
                run_id,
                lease_id,
                token,
                now,
            } => {
                let at = self.read_time(*now, clock);
                Outcome::Flag(self.validate_at(run_id, lease_id, *token, at))
            }
            Op::Release { lease_id, token } => {
                Outcome::Flag(self.release_at(lease_id, *token, clock))
            }
            Op::Get { run_id, now } => {
                let at = self.read_time(*now, clock);
                Outcome::Got(self.get_at(run_id, at))
            }
            Op::SetData {
                lease_id,
                token,
                value,
                now,
            } => Outcome::Flag(self.set_data(lease_id, *token, value, now.unwrap_or(clock))),
            Op::GetData { run_id } => Outcome::Data(self.get_data(run_id, clock.max(self.time()))),
            Op::DelData { lease_id, token } => {
                Outcome::Flag(self.del_data(lease_id, *token, clock))
            }
            Op::History { run_id, count } => {
                Outcome::History(self.history(run_id, *count, clock.max(self.time())))
            }
            Op::Scan {
                cursor,
                pattern,
                count,
            } => self.scan_matching(*cursor, pattern.as_deref(), *count),
            Op::DbSize => Outcome::Count(self.len()),
            Op::Inspect { run_ids } => {
                let at = self.read_time(None, clock);
                Outcome::Inspected(
                    run_ids
                        .iter()
                        .map(|run_id| self.key_state(run_id, at))
                        .collect(),
                )
            }
            Op::RandomRun { seed } => Outcome::Run(self.random_run(*seed)),
            Op::Reclaim { max } => Outcome::Reclaimed(self.reclaim(*max)),
            Op::AnnounceExpired => Outcome::Count(self.announce_expired(clock.max(self.time()))),
        }
    }

    fn scan_matching(&self, cursor: u64, pattern: Option<&[u8]>, count: usize) -> Outcome {
        let mut runs = Vec::new();
        let from = usize::try_from(cursor).unwrap_or(usize::MAX);
        let next = self.scan(from, count, |run_id| {
            if pattern.is_none_or(|pattern| glob::matches(pattern, run_id, false)) {
                runs.push(Bytes::copy_from_slice(run_id));
            }
        });
        Outcome::Scanned {
            next: next.map_or(0, |slot| slot as u64),
            runs,
        }
    }
}
