//! A cluster node inside the server: its Raft, the core task connections
//! talk to, and the task that keeps `Shared`'s view of the cluster (for
//! ROLE, INFO and CLUSTER) up to date.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::error::{Fatal, InitializeError, RaftError};
use openraft::network::NetSnapshot;
use openraft::{BasicNode, Raft, RaftNetworkFactory, ServerState};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::core::{ClusterCore, Forwarding, ToLeader};
use super::leader_queue::QueueHandle;
use super::node::{Node, StartError, Storage};
use super::recorder;
use super::stamp::{Anchor, Clock};
use super::state_machine::{MakeRegistry, StateMachine};
use super::status::{Address, ClusterStatus};
use super::types::{NodeId, TypeConfig};
use crate::core::{CoreHandle, QUEUE_DEPTH, publish_applied};
use crate::state::Shared;
use crate::state::cluster_stats::ClusterStats;

/// The least time between two rebuilds of a node's published status.
const STATUS_EVERY: Duration = Duration::from_millis(20);

/// What a node needs to know to join its cluster.
#[derive(Clone, Debug)]
pub struct Settings {
    pub id: NodeId,
    /// Every member, this node included.
    pub addresses: Vec<Address>,
    /// How often the leader tells followers it is alive.
    pub heartbeat: Duration,
    /// `cluster-election-timeout`: the silence after which a follower
    /// votes for a candidate ([`Settings::raft_config`]).
    pub election_timeout: Duration,
    /// How long a command may wait for its entry before it is answered
    /// `-UNCERTAIN`.
    pub patience: Duration,
    /// Where the Raft log, vote and snapshots are kept.
    pub storage: Storage,
    /// `cluster-join`: a pristine node waits to be added instead of
    /// forming a cluster of `addresses`.
    pub join: bool,
}

impl Settings {
    /// openraft's configuration for these settings.
    ///
    /// openraft's follower refuses votes while its leader's lease runs
    /// (`election_timeout_max` since it last heard it), and stands for
    /// election only once the lease and then its own timeout (drawn
    /// between `election_timeout_min` and `_max`) have passed. With the
    /// lease set to `cluster-election-timeout` T and the draw between T/2
    /// and T, a follower votes after T of silence and stands after 1.5 T to
    /// 2 T: a new leader about T after the lease, rather than the 1.8 to
    /// 2.4 s of a draw between T and 2 T on top of a 2 T lease.
    pub fn raft_config(&self) -> Arc<openraft::Config> {
        let millis = |duration: Duration| duration.as_millis() as u64;
        let config = openraft::Config {
            cluster_name: "leased".into(),
            heartbeat_interval: millis(self.heartbeat),
            election_timeout_min: millis(self.election_timeout) / 2,
            election_timeout_max: millis(self.election_timeout),
            ..Default::default()
        };
        Arc::new(
            config
                .validate()
                .expect("cluster timeouts are checked at start-up"),
        )
    }

    /// The initial membership: every member by its client address, the
    /// same on every node (each node's bus knows how it reaches the
    /// others' buses from its own configuration).
    fn membership(&self) -> BTreeMap<NodeId, BasicNode> {
        (self.addresses.iter())
            .map(|address| (address.id, BasicNode::new(address.addr.to_string())))
            .collect()
    }
}

/// A started node, for the server.
pub struct Started {
    pub node: Arc<Node>,
    /// The core's queue, for connections.
    pub core: CoreHandle,
    /// Where the bus server hands followers' forwards.
    pub forwards: mpsc::Sender<Forwarding>,
    /// Where the bus server hands followers' blocked acquires.
    pub queue: QueueHandle,
    /// Resolves once the core has stopped (the last [`CoreHandle`] gone)
    /// and the node's Raft has shut down.
    pub task: JoinHandle<()>,
}

/// Starts this node's Raft on `network`, joins (or forms) the cluster
/// the settings name, and spawns the core and the status task.
pub async fn start<N>(
    settings: Settings,
    shared: Arc<Shared>,
    network: N,
    to_leader: ToLeader,
    make: MakeRegistry,
) -> Result<Started, StartError>
where
    N: RaftNetworkFactory<TypeConfig>,
    N::Network: NetSnapshot<TypeConfig, SnapshotData = bytes::Bytes>,
{
    start_with(settings, shared, network, to_leader, make, |_| {}).await
}

/// [`start`], running `prepare` on the node's Raft before it joins its
/// cluster: the clock guard turns elections off there, before the first
/// one can start.
pub async fn start_with<N>(
    settings: Settings,
    shared: Arc<Shared>,
    network: N,
    to_leader: ToLeader,
    make: MakeRegistry,
    prepare: impl FnOnce(&Raft<TypeConfig, StateMachine>),
) -> Result<Started, StartError>
where
    N: RaftNetworkFactory<TypeConfig>,
    N::Network: NetSnapshot<TypeConfig, SnapshotData = bytes::Bytes>,
{
    let clock_shared = shared.clone();
    let wall: Clock = Arc::new(move || clock_shared.clock.now());
    let anchor = Anchor::new(wall);
    let node = Node::start(
        settings.id,
        settings.raft_config(),
        network,
        make,
        anchor.clock(),
        settings.storage.clone(),
    );
    let node = Arc::new(node.await?);
    recorder::install(&node.raft, shared.cluster_stats.clone()).await;
    prepare(&node.raft);
    let events = shared.clone();
    let publish = move |registry: &mut _| publish_applied(registry, &events.pubsub);
    node.state.set_on_applied(Arc::new(publish));
    initialize(&node, &settings)
        .await
        .map_err(StartError::Raft)?;
    let addresses = settings.addresses.clone();
    let status = tokio::spawn(publish_status(
        node.clone(),
        addresses,
        shared.clone(),
        anchor,
    ));
    let (batch_queue, batches) = mpsc::channel(QUEUE_DEPTH);
    let (forwards, forwarded) = mpsc::channel(QUEUE_DEPTH);
    let core = ClusterCore::new(node.clone(), to_leader, shared.clone(), settings.patience);
    let waiting = core.queue_handle();
    let stopping = node.clone();
    let task = tokio::spawn(async move {
        core.run(batches, forwarded).await;
        status.abort();
        if let Err(error) = stopping.raft.shutdown().await {
            warn!("Stopping the cluster node: {error}");
        }
        shared.set_cluster(None);
    });
    Ok(Started {
        node,
        core: CoreHandle::new(batch_queue),
        forwards,
        queue: waiting,
        task,
    })
}

/// Forms the cluster on a pristine node (every member does the same with
/// the same membership, which Raft allows); a node that already has a
/// log keeps its own (its membership is the log's, whatever
/// `cluster-nodes` says now); a joining node waits to be added.
async fn initialize(node: &Node, settings: &Settings) -> Result<(), Fatal<TypeConfig>> {
    if settings.join {
        if !node.raft.is_initialized().await? {
            info!(
                "Cluster node {} waits to be added (cluster-join yes): send CLUSTER ADDNODE {} \
                 <host:port> to the leader",
                settings.id, settings.id
            );
        }
        return Ok(());
    }
    match node.raft.initialize(settings.membership()).await {
        Ok(()) => {
            info!("Cluster node {} formed its cluster", settings.id);
            Ok(())
        }
        Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
        Err(RaftError::APIError(InitializeError::NotInMembers(error))) => {
            unreachable!("settings name this node: {error}")
        }
        Err(RaftError::Fatal(fatal)) => Err(fatal),
    }
}

/// Republishes the node's view of its cluster whenever Raft's metrics
/// change, logs its changes of leader, and anchors the stamps' clock
/// again when this node becomes leader.
async fn publish_status(
    node: Arc<Node>,
    addresses: Vec<Address>,
    shared: Arc<Shared>,
    anchor: Arc<Anchor>,
) {
    let mut metrics = node.raft.metrics();
    let mut last_state = ServerState::Learner;
    let mut last_leader = None;
    let mut was_member = false;
    loop {
        let current = metrics.borrow_watched().clone();
        let member = node.not_member().is_none();
        if was_member && !member {
            node.warn_removed();
        }
        was_member = member;
        if current.current_leader != last_leader {
            match current.current_leader {
                Some(leader) => info!(
                    "Cluster node {}: node {leader} leads, term {}",
                    current.id, current.current_term
                ),
                None => info!("Cluster node {}: no leader known", current.id),
            }
        }
        if current.state == ServerState::Leader && last_state != ServerState::Leader {
            anchor.reset();
        }
        last_state = current.state;
        last_leader = current.current_leader;
        // Counted by the node's recorder, which sees every change of role
        // (this loop sees only some).
        let elections = ClusterStats::read(&shared.cluster_stats.elections_started);
        let status = ClusterStatus::from_metrics(&current, &addresses, elections);
        // The clock guard's part (serve.rs) is kept as it last published it.
        shared.update_cluster(|published| {
            let clock = published.map(|status| status.clock).unwrap_or_default();
            Some(ClusterStatus {
                clock,
                ..status.clone()
            })
        });
        // Raft's metrics change with every entry applied: under load the
        // status is rebuilt at most this often, not once per entry.
        tokio::time::sleep(STATUS_EVERY).await;
        if metrics.changed().await.is_err() {
            return;
        }
    }
}
