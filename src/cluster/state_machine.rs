//! The replicated state machine: one [`Registry`] per node, fed the
//! committed entries in log order.
//!
//! Every op of a [`Batch`] is applied with [`Registry::apply`] at the
//! batch's stamp, so every replica computes the same outcomes and reaches
//! the same state without reading a clock. A [`Tick`] moves registry time
//! to its stamp and reclaims a bounded number of leases ([`Op::Reclaim`]).
//!
//! A snapshot is the append-only log's own snapshot format (what a rewrite
//! writes): the header, the last token and registry time, then every
//! lease's and run's changes. Installing one replays it into a fresh
//! registry, as loading the log at start-up does.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use openraft::alias::{LogIdOf, SnapshotMetaOf, SnapshotOf, StoredMembershipOf};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};

use super::types::{Batch, Command, Tick, TypeConfig};
use crate::aof::format::{self, HEADER};
use crate::registry::{Change, Op, Outcome, Registry};

/// Makes the empty registry a snapshot is installed into: the node's
/// settings (default TTL, retention, history length), no leases.
pub type MakeRegistry = Arc<dyn Fn() -> Registry + Send + Sync>;

/// Slots (and runs) the snapshot walk visits per step.
const WALK: usize = 1024;

/// Applies a batch's ops in order at its stamp.
pub fn apply_batch(registry: &mut Registry, batch: &Batch) -> Vec<Outcome> {
    batch
        .ops
        .iter()
        .map(|op| registry.apply(op, batch.time))
        .collect()
}

/// Lets time pass to a tick's stamp and reclaims what it allows.
pub fn apply_tick(registry: &mut Registry, tick: Tick) -> Vec<Outcome> {
    registry.advance_time(tick.time);
    vec![registry.apply(&Op::Reclaim { max: tick.reclaim }, tick.time)]
}

/// The registry's whole state in the append-only log's format.
pub fn encode_registry(registry: &Registry) -> Bytes {
    let mut out = BytesMut::from(HEADER);
    format::encode(&Change::LastToken(registry.last_token()), &mut out);
    if registry.time().is_finite() {
        format::encode(&Change::Time(registry.time()), &mut out);
    }
    let mut from = Some(0);
    while let Some(slot) = from {
        from = registry.snapshot(slot, WALK, |lease| {
            for change in lease.to_changes() {
                format::encode(&change, &mut out);
            }
        });
    }
    let mut after: Option<Bytes> = None;
    loop {
        let next = registry.snapshot_runs(after.as_deref(), WALK, |run| {
            for change in run.to_changes() {
                format::encode(&change, &mut out);
            }
        });
        match next {
            Some(run) => after = Some(run),
            None => break,
        }
    }
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

/// What the state machine holds; [`StateMachine`] and its snapshot
/// builders share it.
pub struct Replica {
    pub registry: Registry,
    last_applied: Option<LogIdOf<TypeConfig>>,
    membership: StoredMembershipOf<TypeConfig>,
    current: Option<SnapshotOf<TypeConfig, Bytes>>,
    make: MakeRegistry,
}

/// A node's state machine; clones share it, so the node (and a test) can
/// read the registry openraft applies to.
#[derive(Clone)]
pub struct StateMachine {
    replica: Arc<Mutex<Replica>>,
}

impl StateMachine {
    pub fn new(make: MakeRegistry) -> StateMachine {
        StateMachine {
            replica: Arc::new(Mutex::new(Replica {
                registry: make(),
                last_applied: None,
                membership: Default::default(),
                current: None,
                make,
            })),
        }
    }

    /// The replica, locked: never hold it across an await.
    pub fn lock(&self) -> MutexGuard<'_, Replica> {
        self.replica.lock().expect("state machine lock")
    }

    /// The index of the last entry applied (`None` before the first).
    /// Ahead of the node's metrics, which openraft updates after applying.
    pub fn last_applied_index(&self) -> Option<u64> {
        self.lock().last_applied.map(|id| id.index)
    }

    fn snapshot_now(&self) -> SnapshotOf<TypeConfig, Bytes> {
        let mut replica = self.lock();
        let snapshot = SnapshotOf::<TypeConfig, Bytes> {
            meta: SnapshotMetaOf::<TypeConfig> {
                last_log_id: replica.last_applied,
                last_membership: replica.membership.clone(),
            },
            snapshot: encode_registry(&replica.registry),
        };
        replica.current = Some(snapshot.clone());
        snapshot
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    type SnapshotData = Bytes;

    async fn build_snapshot(&mut self) -> Result<SnapshotOf<TypeConfig, Bytes>, io::Error> {
        Ok(self.snapshot_now())
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotData = Bytes;
    type SnapshotBuilder = StateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogIdOf<TypeConfig>>, StoredMembershipOf<TypeConfig>), io::Error> {
        let replica = self.lock();
        Ok((replica.last_applied, replica.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some(next) = entries.next().await {
            let (entry, responder) = next?;
            let outcomes = {
                let mut replica = self.lock();
                replica.last_applied = Some(entry.log_id);
                match entry.payload {
                    EntryPayload::Blank => Vec::new(),
                    EntryPayload::Normal(Command::Batch(batch)) => {
                        apply_batch(&mut replica.registry, &batch)
                    }
                    EntryPayload::Normal(Command::Tick(tick)) => {
                        apply_tick(&mut replica.registry, tick)
                    }
                    EntryPayload::Membership(membership) => {
                        replica.membership =
                            StoredMembershipOf::<TypeConfig>::new(Some(entry.log_id), membership);
                        Vec::new()
                    }
                }
            };
            if let Some(responder) = responder {
                responder.send(outcomes);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMetaOf<TypeConfig>,
        snapshot: Bytes,
    ) -> Result<(), io::Error> {
        let mut replica = self.lock();
        let mut registry = (replica.make)();
        decode_into(&mut registry, &snapshot)?;
        replica.registry = registry;
        replica.last_applied = meta.last_log_id;
        replica.membership = meta.last_membership.clone();
        replica.current = Some(SnapshotOf::<TypeConfig, Bytes> {
            meta: meta.clone(),
            snapshot,
        });
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<SnapshotOf<TypeConfig, Bytes>>, io::Error> {
        Ok(self.lock().current.clone())
    }
}
