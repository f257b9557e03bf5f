//! `CLUSTER ADDNODE` and `CLUSTER DELNODE`: membership changes, run by the
//! leader, one at a time.
//!
//! - ADDNODE adds the node as a learner (the leader sends it a snapshot
//!   and the log after it), waits until it has caught up with the entry
//!   that added it, then makes it a voter (openraft's joint consensus: two
//!   entries). The reply comes once it votes, or an error says where it
//!   stopped: a node that does not catch up within [`CATCH_UP`] stays a
//!   learner, and the same ADDNODE again goes on from there.
//! - DELNODE removes a voter (a dead one too: the others are a majority of
//!   both the old and the new voters) or a learner. Removing the leader
//!   itself is allowed: it commits its own removal, then hands its lead to
//!   the most up-to-date voter (openraft's `removed_leader_step_down`, a
//!   leadership transfer, so no election timeout passes) and stops.
//! - A follower refuses both with the leader's address: the change is
//!   the leader's to make, and an operator sees where to send it.
//!
//! The change runs in a task of its own: a client that goes away does not
//! stop it halfway.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use openraft::ServerState;
use openraft::async_runtime::WatchReceiver;
use openraft::{BasicNode, ChangeMembers};
use tracing::{info, warn};

use super::members;
use super::node::Node;
use super::types::NodeId;
use crate::command::ClusterChange;
use crate::config::parse_member;
use crate::reply::Reply;
use crate::state::cluster::MembershipHook;

/// How long ADDNODE waits for the new node to catch up.
pub const CATCH_UP: Duration = Duration::from_secs(60);

/// How long a membership entry may take to commit (a majority of the old
/// and of the new voters must hold it).
pub const COMMIT: Duration = Duration::from_secs(30);

/// The change under way on this node, if any: its command.
type Busy = Arc<Mutex<Option<String>>>;

/// The hook connections call for ADDNODE and DELNODE on this node.
pub fn hook(node: Arc<Node>) -> MembershipHook {
    let busy: Busy = Arc::default();
    MembershipHook(Arc::new(move |change| {
        let (node, busy) = (node.clone(), busy.clone());
        let task = tokio::spawn(async move { run(&node, &busy, change).await });
        async move {
            task.await
                .unwrap_or_else(|_| Reply::error("ERR the membership change failed"))
        }
        .boxed()
    }))
}

/// Runs one change if none is under way here and this node leads.
async fn run(node: &Node, busy: &Busy, change: ClusterChange) -> Reply {
    let command = change.describe();
    {
        let mut busy = busy.lock().expect("membership lock");
        if let Some(other) = busy.as_ref() {
            return Reply::error(format!(
                "ERR a membership change is in progress ({other}): one change at a time; \
                 send this one again once it has answered"
            ));
        }
        *busy = Some(command.clone());
    }
    let reply = match leading(node) {
        Err(refused) => refused,
        Ok(()) => match change {
            ClusterChange::Add { id, address } => add(node, id, &address).await,
            ClusterChange::Remove { id } => remove(node, id).await,
        },
    };
    *busy.lock().expect("membership lock") = None;
    match &reply {
        Reply::Error(why) => warn!("{command}: {why}"),
        _ => info!("{command}: done"),
    }
    reply
}

/// Whether this node may change the membership: it leads, and the last
/// change is finished (not left in a joint configuration).
fn leading(node: &Node) -> Result<(), Reply> {
    let metrics = node.raft.metrics().borrow_watched().clone();
    if metrics.state != ServerState::Leader {
        let membership = metrics.membership_config.membership();
        let leader = metrics.current_leader.and_then(|leader| {
            let entry = membership.get_node(&leader)?;
            let address = members::address(leader, entry)?;
            Some(format!("node {leader} at {}", address.addr))
        });
        return Err(Reply::error(match leader {
            Some(leader) => format!(
                "ERR this node is not the leader: send membership changes to the leader, {leader}"
            ),
            None => "ERR the cluster has no leader now: try again in a moment".to_owned(),
        }));
    }
    if metrics
        .membership_config
        .membership()
        .get_joint_config()
        .len()
        > 1
    {
        return Err(Reply::error(
            "ERR a membership change is in progress (the cluster is between two \
             configurations): try again in a moment",
        ));
    }
    Ok(())
}

/// ADDNODE: a learner first, a voter once it has caught up.
async fn add(node: &Node, id: NodeId, address: &str) -> Reply {
    let Some(entry) = parse_member(&format!("{id}@{address}")) else {
        return Reply::error(format!("ERR Invalid node address '{address}'"));
    };
    let Some(bus_port) = entry.bus_port() else {
        return Reply::error(format!(
            "ERR node {id}'s client port {} leaves no room for a bus port at port + 10000: \
             give one, {}:{}@busport",
            entry.port, entry.host, entry.port
        ));
    };
    let metrics = node.raft.metrics().borrow_watched().clone();
    let membership = metrics.membership_config.membership();
    if membership.voter_ids().any(|voter| voter == id) {
        return Reply::error(format!("ERR node {id} is already a voter of this cluster"));
    }
    let bus_addr = std::net::SocketAddr::new(entry.ip, bus_port);
    let clash = (membership.nodes())
        .filter(|(other, _)| **other != id)
        .filter_map(|(other, node)| members::address(*other, node))
        .find(|other| {
            [other.addr, other.bus_addr]
                .iter()
                .any(|a| [entry.addr(), bus_addr].contains(a))
        });
    if let Some(other) = clash {
        return Reply::error(format!(
            "ERR node {} already uses {} or {}: every node needs addresses of its own",
            other.id,
            entry.addr(),
            bus_addr
        ));
    }
    let learner = members::basic_node(entry.addr(), Some(bus_port));
    info!(
        "CLUSTER ADDNODE {id} {address}: node {id} joins as a learner (bus {bus_addr}) and \
         catches up"
    );
    if let Err(reply) = add_learner(node, id, learner, bus_addr).await {
        return reply;
    }
    info!("Node {id} has caught up: it becomes a voter");
    let voters = BTreeSet::from([id]);
    change(node, ChangeMembers::AddVoterIds(voters)).await
}

async fn add_learner(
    node: &Node,
    id: NodeId,
    learner: BasicNode,
    bus_addr: std::net::SocketAddr,
) -> Result<(), Reply> {
    // Not openraft's own blocking wait: it counts a learner within
    // `replication_lag_threshold` (5000) entries as caught up, one that
    // holds nothing yet included.
    let added = match node.raft.add_learner(id, learner, false).await {
        Ok(response) => response.log_id,
        Err(error) => {
            return Err(Reply::error(format!(
                "ERR node {id} was not added as a learner: {error}"
            )));
        }
    };
    let mut metrics = node.raft.metrics();
    let caught_up = async {
        loop {
            let (leads, matched) = {
                let current = metrics.borrow_watched();
                let replication = current.replication.as_ref();
                let matched = replication.and_then(|r| r.get(&id).cloned().flatten());
                (current.state == ServerState::Leader, matched)
            };
            if !leads {
                return Err(Reply::error(format!(
                    "ERR this node lost its leadership while node {id} caught up: it stays a \
                     learner; send the same CLUSTER ADDNODE to the new leader"
                )));
            }
            if matched.is_some_and(|matched| matched.index >= added.index) {
                return Ok(());
            }
            if metrics.changed().await.is_err() {
                return Err(Reply::error("ERR this node stopped"));
            }
        }
    };
    match tokio::time::timeout(CATCH_UP, caught_up).await {
        Ok(done) => done,
        Err(_) => Err(Reply::error(format!(
            "ERR node {id} did not catch up within {} s: it stays a learner, not a voter. \
             Is it running, with cluster-join yes, its bus reachable at {bus_addr}? Send the \
             same CLUSTER ADDNODE again to go on waiting, or CLUSTER DELNODE {id}",
            CATCH_UP.as_secs()
        ))),
    }
}

/// DELNODE: a voter or a learner out of the membership.
async fn remove(node: &Node, id: NodeId) -> Reply {
    let metrics = node.raft.metrics().borrow_watched().clone();
    let membership = metrics.membership_config.membership();
    if membership.get_node(&id).is_none() {
        return Reply::error(format!("ERR node {id} is not a member of this cluster"));
    }
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    if voters.contains(&id) && voters.len() == 1 {
        return Reply::error(format!(
            "ERR node {id} is the cluster's only voter: it cannot be removed"
        ));
    }
    if id == node.id {
        info!(
            "CLUSTER DELNODE {id}: this node, the leader, removes itself; once that commits \
             it hands its lead to the most up-to-date voter"
        );
    }
    let ids = BTreeSet::from([id]);
    let changes = if voters.contains(&id) {
        ChangeMembers::RemoveVoters(ids)
    } else {
        ChangeMembers::RemoveNodes(ids)
    };
    change(node, changes).await
}

/// Proposes `changes` and waits until they commit.
async fn change(node: &Node, changes: ChangeMembers<NodeId, BasicNode>) -> Reply {
    match tokio::time::timeout(COMMIT, node.raft.change_membership(changes, false)).await {
        Ok(Ok(_)) => Reply::OK,
        Ok(Err(error)) => Reply::error(format!("ERR the membership change failed: {error}")),
        Err(_) => Reply::error(format!(
            "ERR the membership change did not commit within {} s (is a majority of the \
             voters up?): check CLUSTER NODES, and send it again",
            COMMIT.as_secs()
        )),
    }
}
