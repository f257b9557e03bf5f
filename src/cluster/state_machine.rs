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
//!
//! A state machine opened on a directory ([`StateMachine::open`]) saves
//! every snapshot it builds or installs there before reporting it done
//! ([`super::snapshot_file`]), and starts from the saved one: openraft then
//! replays only the log entries after it.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use openraft::alias::{LogIdOf, SnapshotMetaOf, SnapshotOf, StoredMembershipOf};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};

use super::disk::{self, OpenError};
use super::snapshot_file::{self, Meta};
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
    /// Called before and after each entry is applied: this node makes
    /// events while it has subscribers and publishes those of the entries
    /// it applies (what it does is no part of the replicated state).
    on_applied: Option<OnApplied>,
}

/// What a node does after applying an entry, with its registry.
pub type OnApplied = Arc<dyn Fn(&mut Registry) + Send + Sync>;

/// Where a durable state machine keeps its snapshot.
struct Disk {
    raft: PathBuf,
    /// The last log id of the snapshot on disk: an older one (a build
    /// racing an install) never replaces it.
    saved: Mutex<Option<LogIdOf<TypeConfig>>>,
}

impl Disk {
    fn save(&self, meta: &Meta, data: &[u8]) -> io::Result<()> {
        let mut saved = self.saved.lock().expect("snapshot save lock");
        if *saved > meta.last_log_id {
            return Ok(());
        }
        snapshot_file::save(&self.raft, meta, data)?;
        *saved = meta.last_log_id;
        Ok(())
    }
}

/// A node's state machine; clones share it, so the node (and a test) can
/// read the registry openraft applies to.
#[derive(Clone)]
pub struct StateMachine {
    replica: Arc<Mutex<Replica>>,
    /// `None` in memory: snapshots are lost with the process.
    disk: Option<Arc<Disk>>,
}

impl StateMachine {
    /// A state machine that keeps its snapshots in memory only.
    pub fn new(make: MakeRegistry) -> StateMachine {
        StateMachine {
            replica: Arc::new(Mutex::new(Replica {
                registry: make(),
                last_applied: None,
                membership: Default::default(),
                current: None,
                make,
                on_applied: None,
            })),
            disk: None,
        }
    }

    /// A state machine that saves its snapshots under `dir/raft/`,
    /// starting from the one saved there if any. Open it with the node's
    /// [`super::log_store::LogStore`], which holds the directory's lock.
    pub fn open(make: MakeRegistry, dir: &Path) -> Result<StateMachine, OpenError> {
        let raft = disk::raft_dir(dir)?;
        let loaded = snapshot_file::load(&raft)?;
        let mut machine = StateMachine::new(make.clone());
        let mut saved = None;
        if let Some((meta, data)) = loaded {
            let mut registry = make();
            decode_into(&mut registry, &data).map_err(|error| {
                let why = format!("its registry does not replay: {error}");
                OpenError::corrupt(&raft.join("snapshot"), 0, why)
            })?;
            let mut replica = machine.lock();
            replica.registry = registry;
            replica.last_applied = meta.last_log_id;
            replica.membership = meta.last_membership.clone();
            saved = meta.last_log_id;
            replica.current = Some(SnapshotOf::<TypeConfig, Bytes> {
                meta,
                snapshot: data,
            });
        }
        machine.disk = Some(Arc::new(Disk {
            raft,
            saved: Mutex::new(saved),
        }));
        Ok(machine)
    }

    /// Sets what happens after each entry is applied.
    pub fn set_on_applied(&self, on_applied: OnApplied) {
        self.lock().on_applied = Some(on_applied);
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
        let replica = self.lock();
        SnapshotOf::<TypeConfig, Bytes> {
            meta: SnapshotMetaOf::<TypeConfig> {
                last_log_id: replica.last_applied,
                last_membership: replica.membership.clone(),
            },
            snapshot: encode_registry(&replica.registry),
        }
    }

    /// Saves `snapshot` durably (off the runtime's threads), then makes it
    /// the current one unless a newer one already is.
    async fn keep(&self, snapshot: &SnapshotOf<TypeConfig, Bytes>) -> io::Result<()> {
        if let Some(disk) = &self.disk {
            let disk = disk.clone();
            let meta = snapshot.meta.clone();
            let data = snapshot.snapshot.clone();
            tokio::task::spawn_blocking(move || disk.save(&meta, &data))
                .await
                .map_err(io::Error::other)??;
        }
        let mut replica = self.lock();
        let superseded = |current: &SnapshotOf<TypeConfig, Bytes>| {
            current.meta.last_log_id <= snapshot.meta.last_log_id
        };
        if replica.current.as_ref().is_none_or(superseded) {
            replica.current = Some(snapshot.clone());
        }
        Ok(())
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    type SnapshotData = Bytes;

    /// Reported built only once saved: openraft then purges the log it
    /// covers.
    async fn build_snapshot(&mut self) -> Result<SnapshotOf<TypeConfig, Bytes>, io::Error> {
        let snapshot = self.snapshot_now();
        self.keep(&snapshot).await?;
        Ok(snapshot)
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
                // Before too: a subscriber who arrived since the last entry
                // turns events on for this one.
                if let Some(on_applied) = replica.on_applied.clone() {
                    on_applied(&mut replica.registry);
                }
                let outcomes = match entry.payload {
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
                };
                if let Some(on_applied) = replica.on_applied.clone() {
                    on_applied(&mut replica.registry);
                }
                outcomes
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
        let make = self.lock().make.clone();
        let mut registry = make();
        decode_into(&mut registry, &snapshot)?;
        let snapshot = SnapshotOf::<TypeConfig, Bytes> {
            meta: meta.clone(),
            snapshot,
        };
        // Saved before it takes effect: openraft purges the log it covers
        // once this returns.
        self.keep(&snapshot).await?;
        let mut replica = self.lock();
        replica.registry = registry;
        replica.last_applied = meta.last_log_id;
        replica.membership = meta.last_membership.clone();
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<SnapshotOf<TypeConfig, Bytes>>, io::Error> {
        Ok(self.lock().current.clone())
    }
}
