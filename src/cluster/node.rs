//! One cluster node: its Raft, its state machine and its stamper. Writes
//! go through the leader, which stamps each entry with its time.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use openraft::alias::LogIdOf;
use openraft::error::{ClientWriteError, Fatal, RaftError};
use openraft::network::NetSnapshot;
use openraft::{Config, Raft, RaftNetworkFactory};

use tracing::warn;

use super::disk::OpenError;
use super::log_store::LogStore;
use super::stamp::{Clock, Stamper};
use super::state_machine::{MakeRegistry, StateMachine};
use super::types::{Batch, Command, NodeId, Tick, TypeConfig};
use crate::registry::{Op, Outcome};

pub type WriteError = RaftError<TypeConfig, ClientWriteError<TypeConfig>>;

/// Where a node keeps its Raft log, vote and snapshots.
#[derive(Clone, Debug)]
pub enum Storage {
    /// Nowhere: a restarted node rejoins empty (for tests).
    Memory,
    /// Under `dir/raft/`, fsynced before they are acknowledged.
    Dir(PathBuf),
}

/// Why a node did not start.
#[derive(Debug)]
pub enum StartError {
    /// Its Raft state could not be opened.
    Open(OpenError),
    Raft(Fatal<TypeConfig>),
    /// The other mode's state in `dir` (`super::migrate`).
    Migrate(super::migrate::MigrateError),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Open(error) => error.fmt(f),
            StartError::Raft(error) => write!(f, "Raft did not start: {error}"),
            StartError::Migrate(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for StartError {}

/// The log and the state machine under `dir/raft/`; the log first, as it
/// takes the directory's lock.
fn open(make: MakeRegistry, dir: &Path) -> Result<(LogStore, StateMachine), StartError> {
    let log = LogStore::open(dir).map_err(StartError::Open)?;
    let state = StateMachine::open(make, dir).map_err(StartError::Open)?;
    Ok((log, state))
}

pub struct Node {
    pub id: NodeId,
    pub raft: Raft<TypeConfig, StateMachine>,
    pub state: StateMachine,
    stamper: Stamper,
    /// Set when the leader answered this node's own removal: the log id
    /// of the membership this node held then. A removed follower may
    /// never receive the entry that removes it (the leader stops
    /// replicating to it as soon as it appends that entry), so the answer
    /// is what tells it. A newer membership naming it again (added anew)
    /// makes it a member again.
    removed_in: Mutex<Option<Option<LogIdOf<TypeConfig>>>>,
    /// Whether this node has logged its removal.
    warned_removed: AtomicBool,
    /// Becomes true when this node is told it was removed.
    told_removed: tokio::sync::watch::Sender<bool>,
    /// Set while this leader hands its lead over before its own removal:
    /// it takes no writes then (openraft refuses them), so its clients'
    /// go to the next leader once it is known.
    handing_over: AtomicBool,
}

impl Node {
    /// Starts a node whose registries `make` makes, from what `storage`
    /// holds: its saved snapshot and the log after it (or nothing).
    pub async fn start<N>(
        id: NodeId,
        config: Arc<Config>,
        network: N,
        make: MakeRegistry,
        clock: Clock,
        storage: Storage,
    ) -> Result<Node, StartError>
    where
        N: RaftNetworkFactory<TypeConfig>,
        N::Network: NetSnapshot<TypeConfig, SnapshotData = bytes::Bytes>,
    {
        let (log, state) = match storage {
            Storage::Memory => (LogStore::in_memory(), StateMachine::new(make)),
            // Reading the files back blocks: off the runtime's threads.
            Storage::Dir(dir) => tokio::task::spawn_blocking(move || open(make, &dir))
                .await
                .expect("opening the Raft state panicked")?,
        };
        let raft = Raft::new(id, config, network, log, state.clone())
            .await
            .map_err(StartError::Raft)?;
        Ok(Node {
            id,
            raft,
            state,
            stamper: Stamper::new(clock),
            removed_in: Mutex::default(),
            warned_removed: AtomicBool::new(false),
            told_removed: tokio::sync::watch::Sender::new(false),
            handing_over: AtomicBool::new(false),
        })
    }

    /// Why this node serves no lease command, if it is no member of its
    /// cluster: not added yet (`cluster-join yes`, before `CLUSTER
    /// ADDNODE`), or removed (`CLUSTER DELNODE`).
    pub fn not_member(&self) -> Option<String> {
        use openraft::async_runtime::WatchReceiver;
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        let membership = metrics.membership_config.membership();
        let told = self.removed_in.lock().expect("removal lock").as_ref()
            == Some(metrics.membership_config.log_id());
        if membership.get_node(&self.id).is_some() && !told {
            return None;
        }
        Some(if membership.nodes().next().is_none() {
            format!(
                "this node (node {}) has not joined a cluster yet: it waits for CLUSTER ADDNODE \
                 on the leader",
                self.id
            )
        } else {
            format!(
                "this node (node {}) was removed from the cluster (CLUSTER DELNODE): send \
                 commands to another node",
                self.id
            )
        })
    }

    /// The leader committed this node's removal (its own `CLUSTER DELNODE`,
    /// answered `+OK`): from now on it serves no lease command, as if it
    /// held the entry that removed it.
    pub fn removed(&self) {
        use openraft::async_runtime::WatchReceiver;
        let held = *self
            .raft
            .metrics()
            .borrow_watched()
            .membership_config
            .log_id();
        *self.removed_in.lock().expect("removal lock") = Some(held);
        self.told_removed.send_replace(true);
        self.warn_removed();
    }

    /// Resolves, with why this node serves nothing, once it is told it
    /// was removed ([`Node::removed`]); never while it is a member (added
    /// anew since, say).
    pub async fn until_removed(&self) -> String {
        let mut told = self.told_removed.subscribe();
        if told.wait_for(|removed| *removed).await.is_ok()
            && let Some(why) = self.not_member()
        {
            return why;
        }
        std::future::pending().await
    }

    /// Whether this leader is handing its lead over
    /// ([`Node::set_handing_over`]).
    pub fn handing_over(&self) -> bool {
        self.handing_over.load(Ordering::Relaxed)
    }

    /// Marks the start (or the end) of this leader's hand-over before its
    /// own removal.
    pub fn set_handing_over(&self, handing_over: bool) {
        self.handing_over.store(handing_over, Ordering::Relaxed);
    }

    /// The leader after this node, once another node leads in this node's
    /// view (this node no longer does); `None` if none is known by
    /// `deadline`, or the node stopped.
    pub async fn next_leader(&self, deadline: tokio::time::Instant) -> Option<NodeId> {
        use openraft::async_runtime::WatchReceiver;
        let mut metrics = self.raft.metrics();
        loop {
            let next = {
                let current = metrics.borrow_watched();
                let led = current.state != openraft::ServerState::Leader;
                (current.current_leader).filter(|leader| led && *leader != self.id)
            };
            if next.is_some() {
                return next;
            }
            match tokio::time::timeout_at(deadline, metrics.changed()).await {
                Ok(Ok(())) => {}
                _ => return None,
            }
        }
    }

    /// Logs, once, that this node was removed and what to do with it.
    pub fn warn_removed(&self) {
        if self.warned_removed.swap(true, Ordering::Relaxed) {
            return;
        }
        warn!(
            "Cluster node {}: this node was removed from the cluster (CLUSTER DELNODE); it \
             serves no lease command any more (its clients get -TRYAGAIN). Stop it, and \
             start it again only with an empty dir and cluster-join yes, to be added anew",
            self.id
        );
    }

    /// The next stamp: never below this node's registry time.
    pub fn stamp(&self) -> f64 {
        let floor = self.state.lock().registry.time();
        self.stamper.stamp(floor)
    }

    /// Writes `ops` as one entry, if this node leads; returns the stamp
    /// and each op's outcome once the entry is applied here.
    ///
    /// Concurrent writes may reach the log out of stamp order: a replica
    /// then evaluates the later entry's lagging stamp at registry time, as
    /// every replica does, so outcomes stay the same everywhere.
    pub async fn write(&self, ops: Vec<Op>) -> Result<(f64, Vec<Outcome>), WriteError> {
        let time = self.stamp();
        let response = self
            .raft
            .client_write(Command::Batch(Batch { time, ops }))
            .await?;
        Ok((time, response.data))
    }

    /// Lets time pass on every replica: registry time to this leader's
    /// stamp, and up to `reclaim` leases past retention removed.
    pub async fn tick(&self, reclaim: usize) -> Result<(f64, Vec<Outcome>), WriteError> {
        let time = self.stamp();
        let response = self
            .raft
            .client_write(Command::Tick(Tick { time, reclaim }))
            .await?;
        Ok((time, response.data))
    }
}
