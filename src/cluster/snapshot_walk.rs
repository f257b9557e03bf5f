//! What a snapshot holds, and the walk that encodes it a step at a time.
//!
//! A snapshot is the append-only log's snapshot format (what a rewrite
//! writes): the header, the last token and registry time, then every
//! lease's and run's changes. Installing one replays it into a fresh
//! registry, as loading the log at start-up does.
//!
//! The state machine builds one the way the single node rewrites its log
//! ([`crate::aof`]): a [`Walk`] encodes [`STEP`] slots (or runs) at a time,
//! each step under the replica's lock and the rest of the work off it,
//! while entries go on being applied between the steps. The registry
//! records its changes meanwhile ([`Registry::set_recording`]), and each
//! step takes those made since the last ([`take_changes`]); they follow
//! the walk's records. Every change sets state outright, so replaying the
//! walk and then those changes gives exactly the registry as it was when
//! the last of them was taken: the snapshot's last log id.
//!
//! The walk leaves out the leases acquired after it began (a token above
//! the last one issued then): their `Put` is among the changes, in its
//! place. Walked too, a run's new lease would be replayed before the
//! release of its old one, and read as a takeover of an expired lease.

use std::io;

use bytes::{Bytes, BytesMut};

use crate::aof::format::{self, HEADER, Round};
use crate::registry::{Change, Registry};

/// Slots (or runs) one step encodes: about a tenth of a millisecond under
/// the lock (what the log rewrite measured for the same walk).
pub const STEP: usize = 1024;

/// Where a snapshot's walk is.
pub struct Walk {
    /// The last token issued when the walk began.
    born_by: u64,
    /// The next slot to encode, until the leases are out.
    leases: Option<usize>,
    /// Then the run data: `Some(None)` from the first run,
    /// `Some(Some(run))` after `run`, `None` once it is out.
    runs: Option<Option<Bytes>>,
}

impl Walk {
    /// A walk from the first slot, after [`head`], of the leases that
    /// `registry` holds now (and their runs).
    pub fn new(registry: &Registry) -> Walk {
        Walk {
            born_by: registry.last_token(),
            leases: Some(0),
            runs: Some(None),
        }
    }

    /// Encodes the next [`STEP`] slots, or runs once the leases are out,
    /// into `out`; returns whether there is more.
    pub fn step(&mut self, registry: &Registry, out: &mut BytesMut) -> bool {
        if let Some(from) = self.leases {
            let born_by = self.born_by;
            self.leases = registry.snapshot(from, STEP, |lease| {
                if lease.fencing_token <= born_by {
                    format::encode_lease(&lease, out);
                }
            });
            return true;
        }
        if let Some(after) = self.runs.take() {
            self.runs = registry
                .snapshot_runs(after.as_deref(), STEP, |run| format::encode_run(&run, out))
                .map(Some);
        }
        self.runs.is_some()
    }
}

/// The records a snapshot starts with: the header, the last token issued
/// and registry time.
pub fn head(registry: &Registry, out: &mut BytesMut) {
    out.extend_from_slice(HEADER);
    format::encode(&Change::LastToken(registry.last_token()), out);
    if registry.time().is_finite() {
        format::encode(&Change::Time(registry.time()), out);
    }
}

/// The changes `registry` recorded since the last call, encoded (time once,
/// as the log writes a round).
pub fn take_changes(registry: &mut Registry) -> BytesMut {
    let mut round = Round::default();
    for change in registry.take_changes() {
        round.push(&change);
    }
    round.close();
    BytesMut::from(round.bytes())
}

/// The registry's whole state in one walk (for a registry nobody else
/// uses meanwhile).
pub fn encode_registry(registry: &Registry) -> Bytes {
    let mut out = BytesMut::new();
    head(registry, &mut out);
    let mut walk = Walk::new(registry);
    while walk.step(registry, &mut out) {}
    out.freeze()
}

/// Replays an encoded state into `registry` (a fresh one).
pub fn decode_into(registry: &mut Registry, bytes: &[u8]) -> Result<(), io::Error> {
    let replayed = format::replay(bytes, |change| registry.replay(change))
        .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error.to_string()))?;
    match replayed.torn_at {
        Some(offset) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("snapshot cut short at byte {offset}"),
        )),
        None => Ok(()),
    }
}
