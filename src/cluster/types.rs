//! The Raft type configuration: what a log entry carries and what applying
//! one answers.
//!
//! An entry is a [`Command`]: a [`Batch`] of the registry's [`Op`]s with
//! the time the leader stamped on it, or a [`Tick`] that lets time pass.
//! Everything here is serde-serialisable: the node bus carries entries,
//! openraft's RPCs and forwarded commands as postcard.
//!
//! A follower forwards its clients' lease commands to the leader as a
//! [`Forward`] and relays the leader's [`Forwarded`] answers; for its
//! clients' reads it asks the leader for a [`ReadIndex`] only.

use std::fmt;

use openraft::alias::LogIdOf;

use crate::registry::{Op, Outcome};

pub use crate::state::cluster::NodeId;

/// Ops written together, applied in order at the leader's stamp.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Batch {
    /// The leader's time (seconds since the Unix epoch): the `clock` every
    /// replica passes to [`crate::registry::Registry::apply`].
    pub time: f64,
    pub ops: Vec<Op>,
}

/// Time passing with no command: registry time moves to `time` and up to
/// `reclaim` leases past retention are removed.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Tick {
    pub time: f64,
    pub reclaim: usize,
}

/// A log entry's payload.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Command {
    Batch(Batch),
    Tick(Tick),
}

impl Command {
    /// The leader's stamp.
    pub fn time(&self) -> f64 {
        match self {
            Command::Batch(batch) => batch.time,
            Command::Tick(tick) => tick.time,
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Batch(batch) => {
                write!(f, "batch of {} ops at {}", batch.ops.len(), batch.time)
            }
            Command::Tick(tick) => write!(f, "tick at {} reclaiming {}", tick.time, tick.reclaim),
        }
    }
}

/// A follower's clients' lease ops, sent to the leader to be run as if
/// its own clients had sent them.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Forward {
    pub ops: Vec<Op>,
}

/// A read index, as the leader confirmed it (`super::reads`): a replica
/// that has applied the log up to `log_id` may serve reads, at a registry
/// time no further than the read lag bound behind `time`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReadIndex {
    /// The leader's commit point (or its first entry of its term, if
    /// later) when a majority confirmed it still leads.
    pub log_id: LogIdOf<TypeConfig>,
    /// The leader's stamp (its time, as it would stamp an entry) just
    /// after that confirmation.
    pub time: f64,
}

/// A follower's client's blocked acquire (`LEASE.ACQUIRE ... BLOCK`),
/// sent to the leader to wait in its queue (`waiting.rs`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Block {
    /// The acquire, on the server's clock.
    pub op: Op,
    /// The `BLOCK` timeout in milliseconds (`None`: forever).
    pub timeout_ms: Option<u64>,
}

/// How a blocked acquire sent to the leader ended.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Blocked {
    /// The run (`Acquired(Some)`, `AcquiredData`), or every token is
    /// issued (`TokensExhausted`).
    Outcome(Outcome),
    /// The timeout ran out: null.
    TimedOut,
    Refused(ClusterRefusal),
}

/// The leader's answer to one forwarded op.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Forwarded {
    Outcome(Outcome),
    Refused(ClusterRefusal),
}

/// Why a node did not run a lease op, in terms a client can act on.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum ClusterRefusal {
    /// The op surely did not happen (no leader, or it was refused before
    /// it reached the log): sending it again is safe.
    TryAgain(String),
    /// The op reached a leader that lost leadership (or a node that
    /// stopped answering) before it was known to commit: it may or may
    /// not have happened.
    Uncertain(String),
    /// An explicit `now` more than `lease-max-skew` seconds ahead of the
    /// leader's clock.
    FutureNow { max_skew: f64 },
    /// An acquire that would take a run while the leader's memory is above
    /// `maxmemory`.
    OutOfMemory,
}

openraft::declare_raft_types!(
    /// The cluster's openraft types: [`Command`] entries, answered with
    /// one [`Outcome`] per op.
    pub TypeConfig:
        D = Command,
        R = Vec<Outcome>,
        NodeId = NodeId,
);
