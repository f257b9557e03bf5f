//! The Raft type configuration: what a log entry carries and what applying
//! one answers.
//!
//! An entry is a [`Command`]: a [`Batch`] of the registry's [`Op`]s with
//! the time the leader stamped on it, or a [`Tick`] that lets time pass.
//! Entries are handed between nodes as values (the in-process network), so
//! openraft's `serde` feature is off and nothing here is serialisable yet:
//! the network bus will choose a wire format.

use std::fmt;

use crate::registry::{Op, Outcome};

/// A node's id in the cluster.
pub type NodeId = u64;

/// Ops written together, applied in order at the leader's stamp.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// The leader's time (seconds since the Unix epoch): the `clock` every
    /// replica passes to [`crate::registry::Registry::apply`].
    pub time: f64,
    pub ops: Vec<Op>,
}

/// Time passing with no command: registry time moves to `time` and up to
/// `reclaim` leases past retention are removed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tick {
    pub time: f64,
    pub reclaim: usize,
}

/// A log entry's payload.
#[derive(Clone, Debug, PartialEq)]
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

openraft::declare_raft_types!(
    /// The cluster's openraft types: [`Command`] entries, answered with
    /// one [`Outcome`] per op.
    pub TypeConfig:
        D = Command,
        R = Vec<Outcome>,
        NodeId = NodeId,
);
