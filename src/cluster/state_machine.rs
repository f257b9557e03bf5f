//! The replicated state machine: one [`Registry`] per node, fed the
//! committed entries in log order.
//!
//! Every op of a [`Batch`] is applied with [`Registry::apply`] at the
//! batch's stamp, so every replica computes the same outcomes and reaches
//! the same state without reading a clock. A [`Tick`] moves registry time
//! to its stamp and reclaims a bounded number of leases ([`Op::Reclaim`]).
//!
//! A snapshot ([`super::snapshot_walk`]) is built a step at a time on a
//! thread of its own: no step holds the replica's lock for more than a
//! fraction of a millisecond, so entries go on being applied (and the node
//! answering) while it is built. Each step's records go to the snapshot's
//! file as they come ([`snapshot_file::Writer`]); the changes applied
//! meanwhile follow the walk, and the snapshot's last log id is the entry
//! applied when the last of them was taken. Installing one replays it into
//! a fresh registry off the lock, then swaps it in.
//!
//! A state machine opened on a directory ([`StateMachine::open`]) saves
//! every snapshot it builds or installs there before reporting it done
//! ([`super::snapshot_file`]), and starts from the saved one: openraft then
//! replays only the log entries after it.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use openraft::alias::{EntryOf, LogIdOf, SnapshotMetaOf, SnapshotOf, StoredMembershipOf};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use tracing::{info, warn};

use super::disk::{self, OpenError};
use super::saves::{Holds, Saves};
use super::snapshot_file::{self, Meta, Writer};
use super::snapshot_walk::{self, Walk};
use super::types::{Batch, Command, Tick, TypeConfig};
use crate::registry::{Op, Outcome, Registry};

pub use super::snapshot_walk::{decode_into, encode_registry};

/// Makes the empty registry a snapshot is installed into: the node's
/// settings (default TTL, retention, history length), no leases.
pub type MakeRegistry = Arc<dyn Fn() -> Registry + Send + Sync>;

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
    /// Snapshots installed: a build walking the registry an install
    /// replaced starts again on the new one.
    installs: u64,
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

    /// Puts a build's file in the snapshot's place, unless a newer one
    /// was saved meanwhile.
    fn finish(&self, writer: Writer, meta: &Meta) -> io::Result<()> {
        let mut saved = self.saved.lock().expect("snapshot save lock");
        if *saved > meta.last_log_id {
            writer.abandon();
            return Ok(());
        }
        writer.finish(meta)?;
        *saved = meta.last_log_id;
        Ok(())
    }
}

type Snapshot = SnapshotOf<TypeConfig, Bytes>;

/// A node's state machine; clones share it, so the node (and a test) can
/// read the registry openraft applies to.
#[derive(Clone)]
pub struct StateMachine {
    replica: Arc<Mutex<Replica>>,
    /// `None` in memory: snapshots are lost with the process.
    disk: Option<Arc<Disk>>,
    /// Held by the build under way: one at a time.
    building: Arc<Mutex<()>>,
    /// What the node's snapshot file holds, and how its builds went.
    saves: Arc<Saves>,
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
                installs: 0,
            })),
            disk: None,
            building: Arc::new(Mutex::new(())),
            saves: Arc::new(Saves::default()),
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
            let holds = Holds {
                index: meta.last_log_id.map_or(0, |id| id.index),
                last_token: registry.last_token(),
            };
            let path = snapshot_file::path(&raft);
            let modified = std::fs::metadata(&path).and_then(|file| file.modified());
            machine.saves.loaded(holds, modified.ok());
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

    /// What the node's snapshot file holds, and how its builds went.
    pub fn saves(&self) -> &Arc<Saves> {
        &self.saves
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

    /// Builds a snapshot a step at a time (blocking: run it on a thread
    /// of its own).
    pub fn build(&self) -> io::Result<Snapshot> {
        self.build_stepping(|| {})
    }

    /// [`StateMachine::build`], calling `between` between two steps (with
    /// the lock free: a test applies entries there).
    pub fn build_stepping(&self, between: impl FnMut()) -> io::Result<Snapshot> {
        self.build_holding(between).map(|(snapshot, _)| snapshot)
    }

    /// [`StateMachine::build_stepping`], and the last token the snapshot
    /// holds.
    fn build_holding(&self, mut between: impl FnMut()) -> io::Result<(Snapshot, u64)> {
        let _one = self.building.lock().expect("snapshot build lock");
        loop {
            if let Some(built) = self.try_build(&mut between)? {
                return Ok(built);
            }
            // An install replaced the registry mid-walk: walk the new one.
        }
    }

    /// One build, and the last token it holds: `None` if an installed
    /// snapshot replaced the registry meanwhile.
    fn try_build(&self, between: &mut impl FnMut()) -> io::Result<Option<(Snapshot, u64)>> {
        let mut writer = match &self.disk {
            Some(disk) => Some(Writer::build(&disk.raft)?),
            None => None,
        };
        let (installs, head, walk) = {
            let mut replica = self.lock();
            let mut head = BytesMut::new();
            snapshot_walk::head(&replica.registry, &mut head);
            replica.registry.set_recording(true);
            (replica.installs, head, Walk::new(&replica.registry))
        };
        let walked = self.walk(installs, head, walk, writer.as_mut(), between);
        if !matches!(walked, Ok(Some(_))) {
            let mut replica = self.lock();
            if replica.installs == installs {
                replica.registry.set_recording(false);
            }
            drop(replica);
            if let Some(writer) = writer.take() {
                writer.abandon();
            }
        }
        let Some((meta, pieces, last_token)) = walked? else {
            return Ok(None);
        };
        if let (Some(disk), Some(writer)) = (&self.disk, writer) {
            disk.finish(writer, &meta)?;
        }
        let snapshot = Snapshot {
            meta,
            snapshot: joined(pieces),
        };
        Ok(Some((snapshot, last_token)))
    }

    /// Walks the registry a step at a time, each step under the lock and
    /// its records written to `writer` off it; then takes the changes
    /// applied meanwhile, and the meta they bring the snapshot to. `None`
    /// if an installed snapshot replaced the registry.
    fn walk(
        &self,
        installs: u64,
        head: BytesMut,
        mut walk: Walk,
        mut writer: Option<&mut Writer>,
        between: &mut impl FnMut(),
    ) -> io::Result<Option<(Meta, Vec<BytesMut>, u64)>> {
        let mut pieces = vec![head];
        let mut changes = Vec::new();
        let started = Instant::now();
        // The longest the lock was held by one step: what the build cost
        // the node's applying at most.
        let mut longest = Duration::ZERO;
        loop {
            if let Some(writer) = writer.as_deref_mut() {
                writer.data(pieces.last().expect("the head at least"))?;
            }
            between();
            // Whoever waits for the lock gets it before the next step.
            std::thread::yield_now();
            let mut piece = BytesMut::new();
            let mut replica = self.lock();
            let locked = Instant::now();
            if replica.installs != installs {
                return Ok(None);
            }
            let more = walk.step(&replica.registry, &mut piece);
            changes.push(snapshot_walk::take_changes(&mut replica.registry));
            if more {
                drop(replica);
                longest = longest.max(locked.elapsed());
                pieces.push(piece);
                continue;
            }
            replica.registry.set_recording(false);
            let meta = Meta {
                last_log_id: replica.last_applied,
                last_membership: replica.membership.clone(),
            };
            let last_token = replica.registry.last_token();
            drop(replica);
            longest = longest.max(locked.elapsed());
            pieces.push(piece);
            info!(
                "Snapshot up to log index {} walked in {} steps, {:.3} s: {} bytes; one step \
                 held the state machine's lock {:.3} ms at most",
                meta.last_log_id.map_or(0, |id| id.index),
                pieces.len() - 1,
                started.elapsed().as_secs_f64(),
                pieces
                    .iter()
                    .chain(&changes)
                    .map(|piece| piece.len())
                    .sum::<usize>(),
                longest.as_secs_f64() * 1000.0
            );
            let walked = pieces.len() - 1;
            pieces.extend(changes);
            if let Some(writer) = writer {
                for piece in &pieces[walked..] {
                    writer.data(piece)?;
                }
            }
            return Ok(Some((meta, pieces, last_token)));
        }
    }

    /// Applies one committed entry; its outcomes.
    pub fn apply_entry(&self, entry: EntryOf<TypeConfig>) -> Vec<Outcome> {
        let mut replica = self.lock();
        replica.last_applied = Some(entry.log_id);
        // Before too: a subscriber who arrived since the last entry turns
        // events on for this one.
        if let Some(on_applied) = replica.on_applied.clone() {
            on_applied(&mut replica.registry);
        }
        let outcomes = match entry.payload {
            EntryPayload::Blank => Vec::new(),
            EntryPayload::Normal(Command::Batch(batch)) => {
                apply_batch(&mut replica.registry, &batch)
            }
            EntryPayload::Normal(Command::Tick(tick)) => apply_tick(&mut replica.registry, tick),
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
    }

    /// Makes `snapshot` the current one unless a newer one already is.
    fn make_current(&self, snapshot: &Snapshot) {
        let mut replica = self.lock();
        let superseded = |current: &Snapshot| current.meta.last_log_id <= snapshot.meta.last_log_id;
        if replica.current.as_ref().is_none_or(superseded) {
            replica.current = Some(snapshot.clone());
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
        self.make_current(snapshot);
        Ok(())
    }
}

/// A snapshot's pieces as one buffer.
fn joined(pieces: Vec<BytesMut>) -> Bytes {
    let mut data = BytesMut::with_capacity(pieces.iter().map(|piece| piece.len()).sum());
    for piece in pieces {
        data.extend_from_slice(&piece);
    }
    data.freeze()
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    type SnapshotData = Bytes;

    /// Built on a thread of its own ([`StateMachine::build`]), and
    /// reported built only once saved: openraft then purges the log it
    /// covers.
    async fn build_snapshot(&mut self) -> Result<SnapshotOf<TypeConfig, Bytes>, io::Error> {
        let machine = self.clone();
        self.saves.begin();
        let built = tokio::task::spawn_blocking(move || machine.build_holding(|| {}))
            .await
            .map_err(io::Error::other)
            .flatten();
        let (snapshot, last_token) = match built {
            Ok(built) => built,
            Err(error) => {
                self.saves.end(None);
                warn!("Building a snapshot failed: {error}");
                return Err(error);
            }
        };
        let index = snapshot.meta.last_log_id.map_or(0, |id| id.index);
        self.saves.end(Some(Holds { index, last_token }));
        if let Some(disk) = &self.disk {
            info!(
                "Snapshot saved in {}: up to log index {index}, fencing tokens up to \
                 {last_token} (a copy of it is a backup holding tokens up to {last_token})",
                snapshot_file::path(&disk.raft).display()
            );
        }
        self.make_current(&snapshot);
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
            let outcomes = self.apply_entry(entry);
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
        let data = snapshot.clone();
        // Replayed off the runtime's threads and off the lock: the node
        // goes on answering meanwhile.
        let registry = tokio::task::spawn_blocking(move || {
            let mut registry = make();
            decode_into(&mut registry, &data).map(|()| registry)
        })
        .await
        .map_err(io::Error::other)??;
        let holds = Holds {
            index: meta.last_log_id.map_or(0, |id| id.index),
            last_token: registry.last_token(),
        };
        let snapshot = SnapshotOf::<TypeConfig, Bytes> {
            meta: meta.clone(),
            snapshot,
        };
        // Saved before it takes effect: openraft purges the log it covers
        // once this returns.
        self.keep(&snapshot).await?;
        self.saves.installed(holds);
        let old = {
            let mut replica = self.lock();
            replica.installs += 1;
            replica.last_applied = meta.last_log_id;
            replica.membership = meta.last_membership.clone();
            std::mem::replace(&mut replica.registry, registry)
        };
        // Freeing a large registry takes milliseconds: not under the lock.
        tokio::task::spawn_blocking(move || drop(old));
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<SnapshotOf<TypeConfig, Bytes>>, io::Error> {
        Ok(self.lock().current.clone())
    }
}
