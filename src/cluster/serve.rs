//! Cluster mode in the server: a node started from `Config::cluster()`,
//! its Raft state under the data directory, its bus listening on its bus
//! address (in TLS with `tls-cluster yes`), followers forwarding through
//! the bus and asking the leader for read indexes over it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::info;

use super::bus::{Admission, Bus, ForwardError, ForwardHandler, Handlers, serve_admitting};
use super::clock_guard::{self, Guard};
use super::core::{ForwardFailure, Forwarder, Forwarding, ToLeader};
use super::leader_queue::LeaderQueue;
use super::members;
use super::membership::{self, ChangeSender, Membership, RemovalNotice};
use super::node::{StartError, Storage};
use super::reads::{self, ReadIndexAsker};
use super::stamp::Clock;
use super::start::{self, Settings};
use super::state_machine::MakeRegistry;
use super::status::{Address, ClusterStatus};
use super::types::{ClusterRefusal, Forwarded};
use crate::ceiling::DataDir;
use crate::config::{ClusterConfig, Config};
use crate::core::CoreHandle;
use crate::registry::Registry;
use crate::state::Shared;
use crate::tls::BusTls;

/// Starts this node: its Raft from `data_dir`, the bus on `listener` (in
/// TLS, both ways, with `tls`), and the core connections talk to. The
/// join handle resolves once the core has stopped (the last handle
/// dropped) and the Raft has shut down.
pub async fn start(
    cluster: &ClusterConfig,
    data_dir: &DataDir,
    shared: Arc<Shared>,
    listener: TcpListener,
    tls: Option<BusTls>,
) -> Result<(CoreHandle, JoinHandle<()>), StartError> {
    let config = shared.config();
    super::migrate::before_cluster(&config, cluster, data_dir).map_err(StartError::Migrate)?;
    let secret = cluster.secret.clone().map(Bytes::from);
    let peers: HashMap<_, _> = (cluster.peers())
        .map(|member| (member.id, member.bus_addr.to_string()))
        .collect();
    let stats = shared.cluster_stats.clone();
    let mut bus =
        (Bus::new(cluster.node_id, secret.clone()).with_peers(peers)).with_stats(stats.clone());
    if let Some(tls) = &tls {
        bus = bus.with_tls(tls.connector.clone());
    }
    let settings = Settings {
        id: cluster.node_id,
        addresses: (cluster.members.iter())
            .map(|member| Address {
                id: member.id,
                addr: member.addr,
                bus_addr: member.bus_addr,
            })
            .collect(),
        heartbeat: cluster.heartbeat_interval,
        election_timeout: cluster.election_timeout,
        // Long enough for a new leader to be elected and an entry to
        // commit through it.
        patience: (cluster.election_timeout * 4).max(Duration::from_secs(3)),
        storage: Storage::Dir(data_dir.path().to_path_buf()),
        join: cluster.join,
    };
    let make = make_registry(&config);
    drop(config);
    let learning = bus.clone();
    let messengers = membership::Messengers {
        send: change_sender(bus.clone()),
        tell_removed: removal_notice(bus.clone()),
    };
    let forward = forwarder(bus.clone());
    let read_index = asker(bus.clone());
    let queue = leader_queue(bus.clone());
    let ask = clock_guard::over_bus(bus.clone());
    let shutdown = shared.shutdown.clone();
    // The wall clock the leader's stamps are anchored to, as the server
    // reads it.
    let wall = shared.clone();
    let guard = Guard::new(Arc::new(move || wall.clock.now()) as Clock);
    let (bound, publish) = (cluster.max_clock_skew, publish_clock(shared.clone()));
    let guarding = (guard.clone(), shutdown.clone());
    let guarded = move |raft: &_| {
        let (guard, shutdown) = guarding;
        clock_guard::start(guard, Clone::clone(raft), ask, bound, publish, shutdown);
    };
    let started = start::start_with(
        settings,
        shared.clone(),
        bus,
        ToLeader {
            forward,
            read_index,
            queue,
        },
        make,
        guarded,
    )
    .await?;
    let changes = Membership::new(started.node.clone(), messengers);
    let handler = Handlers {
        forward: handler(started.forwards.clone()),
        read_index: reads::handler(started.node.clone()),
        queue: Some(started.queue.clone()),
        membership: Some(membership::handler(changes.clone())),
    };
    shared.set_membership(membership::hook(changes));
    tokio::spawn(learn_peers(learning, started.node.clone()));
    let raft = started.node.raft.clone();
    let in_tls = if tls.is_some() { " in TLS" } else { "" };
    let admission = Admission {
        secret,
        tls: tls.map(|BusTls { acceptor, .. }| acceptor),
        stats,
    };
    tokio::spawn(serve_admitting(
        listener, raft, handler, guard, admission, shutdown,
    ));
    info!(
        "Cluster node {} of {} started; its bus listens on {}{in_tls}",
        cluster.node_id,
        cluster.members.len(),
        cluster.me().bus_addr
    );
    Ok((started.core, started.task))
}

/// The clock guard's part of the published status, merged into the rest.
fn publish_clock(shared: Arc<Shared>) -> clock_guard::Publish {
    Box::new(move |clock| {
        shared.update_cluster(|published| {
            Some(ClusterStatus {
                clock,
                ..published?.clone()
            })
        })
    })
}

/// Keeps the bus's addresses of the members its configuration does not
/// list (nodes added by `CLUSTER ADDNODE`) as the membership in the log
/// gives them, while the node runs.
async fn learn_peers(bus: Bus, node: Arc<super::node::Node>) {
    use openraft::async_runtime::WatchReceiver;
    let mut metrics = node.raft.metrics();
    let mut known = None;
    loop {
        let membership = metrics.borrow_watched().membership_config.clone();
        if known.as_ref() != Some(&membership) {
            let learned = (membership.membership().nodes())
                .filter_map(|(id, entry)| members::address(*id, entry))
                .map(|address| (address.id, address.bus_addr.to_string()));
            bus.learn(learned);
            known = Some(membership);
        }
        // The metrics change with every entry applied; membership rarely.
        tokio::time::sleep(Duration::from_millis(50)).await;
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// Every replica's registry is made with this node's settings: they must
/// be the same on every node (`CONFIG SET` of them is refused).
pub fn make_registry(config: &Config) -> MakeRegistry {
    let (ttl, retention) = (config.lease_ttl, config.lease_retention);
    let (history_len, lock_delay) = (config.lease_history_len, config.lease_lock_delay);
    Arc::new(move || {
        let mut registry = Registry::new(ttl, 0);
        registry.set_retention(retention);
        registry.set_history_len(history_len);
        registry.set_default_lock_delay(lock_delay);
        registry
    })
}

/// Forwards to a peer over the bus, at the address this node knows it by.
fn forwarder(bus: Bus) -> Forwarder {
    Arc::new(move |to, request| {
        let bus = bus.clone();
        async move {
            let Some(addr) = bus.peer_addr(to) else {
                return Err(ForwardFailure::NotSent(format!("node {to} is not a peer")));
            };
            bus.forward(&addr, request)
                .await
                .map_err(|error| match error {
                    ForwardError::NotSent(why) => ForwardFailure::NotSent(why),
                    ForwardError::NoAnswer(why) => ForwardFailure::NoAnswer(why),
                })
        }
        .boxed()
    })
}

/// Sends a membership change to a peer (the leader) over the bus, with
/// the time a change may take.
fn change_sender(bus: Bus) -> ChangeSender {
    Arc::new(move |to, change| {
        let bus = bus.clone();
        async move {
            let Some(addr) = bus.peer_addr(to) else {
                return Err(ForwardFailure::NotSent(format!("node {to} is not a peer")));
            };
            (bus.membership(&addr, change, membership::SENT).await).map_err(|error| match error {
                ForwardError::NotSent(why) => ForwardFailure::NotSent(why),
                ForwardError::NoAnswer(why) => ForwardFailure::NoAnswer(why),
            })
        }
        .boxed()
    })
}

/// Tells a removed node so over the bus, at the address this node knew it
/// by before its removal (best effort: it is logged, not retried).
fn removal_notice(bus: Bus) -> RemovalNotice {
    Arc::new(move |to| {
        let (bus, addr) = (bus.clone(), bus.peer_addr(to));
        async move {
            let told = match addr {
                Some(addr) => bus.removed(&addr).await,
                None => Err("its bus address is unknown".to_owned()),
            };
            match told {
                Ok(()) => info!("Node {to} was told that it was removed"),
                Err(why) => info!("Node {to} could not be told that it was removed: {why}"),
            }
        }
        .boxed()
    })
}

/// Asks a peer for a read index over the bus.
fn asker(bus: Bus) -> ReadIndexAsker {
    Arc::new(move |to| {
        let bus = bus.clone();
        async move {
            let Some(addr) = bus.peer_addr(to) else {
                return Err(format!("node {to} is not a peer"));
            };
            bus.read_index(&addr).await
        }
        .boxed()
    })
}

/// Reaches the leader's queue over the bus, at the address this node
/// knows it by.
fn leader_queue(bus: Bus) -> LeaderQueue {
    let asking = bus.clone();
    let failure = |error| match error {
        ForwardError::NotSent(why) => ForwardFailure::NotSent(why),
        ForwardError::NoAnswer(why) => ForwardFailure::NoAnswer(why),
    };
    let not_a_peer = |to| ForwardFailure::NotSent(format!("node {to} is not a peer"));
    LeaderQueue {
        block: Arc::new(move |to, block| {
            let bus = bus.clone();
            async move {
                let addr = bus.peer_addr(to).ok_or_else(|| not_a_peer(to))?;
                bus.block(&addr, block).await.map_err(failure)
            }
            .boxed()
        }),
        waiters: Arc::new(move |to, run| {
            let bus = asking.clone();
            async move {
                let addr = bus.peer_addr(to).ok_or_else(|| not_a_peer(to))?;
                bus.waiters(&addr, run).await.map_err(failure)
            }
            .boxed()
        }),
    }
}

/// Hands a follower's forward to this node's core.
fn handler(forwards: tokio::sync::mpsc::Sender<Forwarding>) -> ForwardHandler {
    Arc::new(move |request| {
        let forwards = forwards.clone();
        async move {
            let count = request.ops.len();
            let (reply, answer) = oneshot::channel();
            let stopped = || {
                let refused = ClusterRefusal::TryAgain("the node is shutting down".into());
                vec![Forwarded::Refused(refused); count]
            };
            if forwards.send(Forwarding { request, reply }).await.is_err() {
                return stopped();
            }
            answer.await.unwrap_or_else(|_| stopped())
        }
        .boxed()
    })
}
