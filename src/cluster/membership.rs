//! `CLUSTER ADDNODE` and `CLUSTER DELNODE`: membership changes, made by
//! the leader, one at a time, sent to any node.
//!
//! - ADDNODE adds the node as a learner (the leader sends it a snapshot
//!   and the log after it), waits until it has caught up with the entry
//!   that added it, then makes it a voter (openraft's joint consensus: two
//!   entries). The reply comes once it votes, or an error says where it
//!   stopped: a node that does not catch up within [`CATCH_UP`] stays a
//!   learner, and the same ADDNODE again goes on from there.
//! - DELNODE removes a voter (a dead one too: the others are a majority of
//!   both the old and the new voters) or a learner. Removing the leader
//!   itself hands the lead over first: the leader names the most
//!   up-to-date other voter its successor (openraft's `transfer_leader`:
//!   no election timeout passes), waits until a new leader is known
//!   ([`hand_over`]), and sends it the DELNODE, which the new leader
//!   commits as any other removal. So no entry is committed by a leader
//!   that is no longer a member, and the old leader's clients are served
//!   through the new one (it forwards, as a follower does) until the
//!   removal is done. If no leader is known in time, the reply says so and
//!   nothing was removed.
//! - A node that does not lead sends both to the leader over the bus
//!   ([`Kind::Membership`](super::bus::wire::Kind::Membership), with a
//!   deadline long enough for ADDNODE's catch-up) and answers the
//!   leader's reply. A change that reaches a node over the bus is made
//!   there or refused, never sent on.
//!
//! The change runs in a task of its own: a client that goes away does not
//! stop it halfway.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use openraft::async_runtime::WatchReceiver;
use openraft::{BasicNode, ChangeMembers, RaftMetrics, ServerState};
use tokio::time::Instant;
use tracing::{info, warn};

use super::bus::{MembershipCall, MembershipHandler};
use super::core::ForwardFailure;
use super::members;
use super::node::Node;
use super::types::{NodeId, TypeConfig};
use crate::command::ClusterChange;
use crate::config::parse_member;
use crate::reply::Reply;
use crate::state::cluster::MembershipHook;

/// How long ADDNODE waits for the new node to catch up.
pub const CATCH_UP: Duration = Duration::from_secs(60);

/// How long a membership entry may take to commit (a majority of the old
/// and of the new voters must hold it).
pub const COMMIT: Duration = Duration::from_secs(30);

/// How long a node waits for the leader's answer to a change it sent:
/// ADDNODE's longest (the learner's entry, the catch-up, the voter's
/// entries), with room to spare.
pub const SENT: Duration = Duration::from_secs(COMMIT.as_secs() * 2 + CATCH_UP.as_secs() + 10);

/// What a node answers a change sent to it by another once it no longer
/// leads (the sender may try again).
const NO_LONGER_LEADS: &str = "which does not lead";

/// How many times `cluster-election-timeout` (openraft's longest election
/// timeout, src/cluster/start.rs) a leader removing itself waits for a new
/// leader to be known.
const HAND_OVER_TIMEOUTS: u64 = 8;

/// Sends a change to a node (the leader) and returns how it ended there:
/// `Ok` for `+OK`, else the client's error.
pub type ChangeSender = Arc<
    dyn Fn(NodeId, ClusterChange) -> BoxFuture<'static, Result<Result<(), String>, ForwardFailure>>
        + Send
        + Sync,
>;

/// Tells a node that its removal was committed; made before the change
/// (a removed member's bus address is soon forgotten), run after it.
pub type RemovalNotice = Arc<dyn Fn(NodeId) -> BoxFuture<'static, ()> + Send + Sync>;

/// How this node reaches others about membership changes.
pub struct Messengers {
    pub send: ChangeSender,
    pub tell_removed: RemovalNotice,
}

/// This node's part in membership changes.
pub struct Membership {
    node: Arc<Node>,
    /// The change under way on this node, if any: its command.
    busy: Mutex<Option<String>>,
    send: ChangeSender,
    tell_removed: RemovalNotice,
}

/// Where a change came from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// A client of this node: sent to the leader if this node does not lead.
    Client,
    /// Another node, over the bus: made here, or refused.
    Peer,
}

impl Membership {
    pub fn new(node: Arc<Node>, messengers: Messengers) -> Arc<Membership> {
        Arc::new(Membership {
            node,
            busy: Mutex::default(),
            send: messengers.send,
            tell_removed: messengers.tell_removed,
        })
    }
}

/// The hook connections call for ADDNODE and DELNODE on this node.
pub fn hook(membership: Arc<Membership>) -> MembershipHook {
    MembershipHook(Arc::new(move |change| {
        let task = spawn(membership.clone(), change, Origin::Client);
        async move {
            task.await
                .unwrap_or_else(|_| Reply::error("ERR the membership change failed"))
        }
        .boxed()
    }))
}

/// What answers the changes other nodes send this one over the bus, and
/// the leader telling it that it was removed.
pub fn handler(membership: Arc<Membership>) -> MembershipHandler {
    Arc::new(move |call| {
        let change = match call {
            MembershipCall::Change(change) => change,
            MembershipCall::Removed => {
                membership.node.removed();
                return async { Ok(()) }.boxed();
            }
        };
        let task = spawn(membership.clone(), change, Origin::Peer);
        async move {
            match task.await {
                Ok(Reply::Error(error)) => Err(error),
                Ok(_) => Ok(()),
                Err(_) => Err("ERR the membership change failed".into()),
            }
        }
        .boxed()
    })
}

fn spawn(
    membership: Arc<Membership>,
    change: ClusterChange,
    from: Origin,
) -> tokio::task::JoinHandle<Reply> {
    tokio::spawn(async move { membership.run(change, from).await })
}

/// Why this node does not make a change itself.
enum NotLeading {
    /// Another node leads: the change is sent there.
    Follower(NodeId, String),
    NoLeader,
    /// Leading, between two configurations.
    Joint,
}

impl NotLeading {
    fn reply(&self, me: NodeId, from: Origin) -> Reply {
        Reply::error(match (self, from) {
            (NotLeading::Follower(_, leader), Origin::Client) => format!(
                "ERR this node is not the leader: send membership changes to the leader, {leader}"
            ),
            (NotLeading::Follower(_, leader), Origin::Peer) => format!(
                "ERR the change reached node {me}, {NO_LONGER_LEADS} (the lead moved \
                 meanwhile: {leader} leads): send it again"
            ),
            (NotLeading::NoLeader, _) => {
                "ERR the cluster has no leader now: try again in a moment".to_owned()
            }
            (NotLeading::Joint, _) => "ERR a membership change is in progress (the cluster is \
                                       between two configurations): try again in a moment"
                .to_owned(),
        })
    }
}

impl Membership {
    /// Makes the change here if this node leads; sends a client's to the
    /// leader otherwise.
    async fn run(&self, change: ClusterChange, from: Origin) -> Reply {
        let command = change.describe();
        let reply = match leading(&self.node) {
            Ok(()) => self.make(change).await,
            Err(NotLeading::Follower(leader, _)) if from == Origin::Client => {
                info!("{command}: sent to the leader, node {leader}");
                let reply = self.send(leader, change).await;
                if let Reply::Error(why) = &reply {
                    warn!("{command}: {why}");
                } else {
                    info!("{command}: done by the leader, node {leader}");
                }
                return reply;
            }
            Err(refused) => refused.reply(self.node.id, from),
        };
        match &reply {
            Reply::Error(why) => warn!("{command}: {why}"),
            _ => info!("{command}: done"),
        }
        reply
    }

    /// Makes one change, if none is under way here.
    async fn make(&self, change: ClusterChange) -> Reply {
        let command = change.describe();
        {
            let mut busy = self.busy.lock().expect("membership lock");
            if let Some(other) = busy.as_ref() {
                return Reply::error(format!(
                    "ERR a membership change is in progress ({other}): one change at a time; \
                     send this one again once it has answered"
                ));
            }
            *busy = Some(command);
        }
        let node = &self.node;
        let reply = match change {
            ClusterChange::Add { id, address } => add(node, id, &address).await,
            ClusterChange::Remove { id } if id == node.id => self.remove_leader().await,
            ClusterChange::Remove { id } => self.remove(id).await,
        };
        *self.busy.lock().expect("membership lock") = None;
        reply
    }

    /// Sends `change` to `leader` and answers its reply.
    async fn send(&self, leader: NodeId, change: ClusterChange) -> Reply {
        match (self.send)(leader, change).await {
            Ok(Ok(())) => Reply::OK,
            Ok(Err(error)) => Reply::error(error),
            Err(ForwardFailure::NotSent(why)) => Reply::error(format!(
                "ERR the leader (node {leader}) cannot be reached: {why}; nothing was changed: \
                 send it again"
            )),
            Err(ForwardFailure::NoAnswer(why)) => Reply::error(format!(
                "ERR the leader (node {leader}) did not answer: {why}; the change may have \
                 been made, or be under way: check CLUSTER NODES"
            )),
        }
    }

    /// DELNODE of this node, the leader: the lead goes to another voter
    /// first, which then commits the removal.
    async fn remove_leader(&self) -> Reply {
        let node = &self.node;
        let id = node.id;
        let metrics = node.raft.metrics().borrow_watched().clone();
        if let Err(refused) = removable(&metrics, id) {
            return refused;
        }
        let Some(to) = successor(&metrics) else {
            return Reply::error(format!(
                "ERR node {id} has no other voter to hand its lead to"
            ));
        };
        info!(
            "CLUSTER DELNODE {id}: this node, the leader (term {}), hands its lead to node \
             {to}, the most up-to-date other voter, first; the new leader commits the removal",
            metrics.current_term
        );
        let timeout = Duration::from_millis(node.raft.config().election_timeout_max);
        let within = timeout * HAND_OVER_TIMEOUTS as u32;
        let deadline = Instant::now() + within;
        node.set_handing_over(true);
        let handed = hand_over(node, to, metrics.current_term, within).await;
        node.set_handing_over(false);
        let leader = match handed {
            Ok(leader) => leader,
            Err(refused) => return refused,
        };
        let term = node.raft.metrics().borrow_watched().current_term;
        info!("CLUSTER DELNODE {id}: node {leader} leads (term {term}); it is sent the removal");
        let change = ClusterChange::Remove { id };
        let reply = loop {
            let reply = self.send(leader, change.clone()).await;
            // The new leader's own view may lag this node's by a moment.
            let early = matches!(&reply, Reply::Error(why) if why.contains(NO_LONGER_LEADS));
            if !early || Instant::now() >= deadline {
                break reply;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        match reply {
            Reply::Error(why) => Reply::error(format!(
                "ERR node {id} handed its lead to node {leader}, which answered its removal: \
                 {why}"
            )),
            done => {
                info!("CLUSTER DELNODE {id}: committed by node {leader}, the leader");
                node.removed();
                done
            }
        }
    }
}

/// The other voter with the most of the log: the one openraft's
/// hand-over can elect at once (a voter behind the leader's log ignores
/// it). `None` if this node is the only voter or does not lead.
fn successor(metrics: &RaftMetrics<TypeConfig>) -> Option<NodeId> {
    let replication = metrics.replication.as_ref()?;
    let matched = |id: &NodeId| replication.get(id).copied().flatten().map(|log| log.index);
    (metrics.membership_config.membership().voter_ids())
        .filter(|voter| *voter != metrics.id)
        .max_by_key(|voter| (matched(voter), std::cmp::Reverse(*voter)))
}

/// Hands this leader's lead to `to` and waits until a leader other than
/// this node, in a later term than `term`, is known (`to`, or whichever
/// node an election picked if `to` could not take it); asks again every
/// election timeout while this node still leads (a successor a few
/// entries short when first asked ignores the request).
async fn hand_over(node: &Node, to: NodeId, term: u64, within: Duration) -> Result<NodeId, Reply> {
    let id = node.id;
    let deadline = Instant::now() + within;
    let stopped = || Reply::error("ERR this node stopped");
    let again = Duration::from_millis(node.raft.config().election_timeout_min);
    let mut metrics = node.raft.metrics();
    loop {
        // Ignored by openraft once this node no longer leads.
        (node.raft.trigger().transfer_leader(to).await).map_err(|_| stopped())?;
        let ask_again = (Instant::now() + again).min(deadline);
        loop {
            let led_by = {
                let current = metrics.borrow_watched();
                current
                    .current_leader
                    .filter(|leader| *leader != id && current.current_term > term)
            };
            if let Some(leader) = led_by {
                return Ok(leader);
            }
            match tokio::time::timeout_at(ask_again, metrics.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(stopped()),
                Err(_) => break,
            }
        }
        if Instant::now() >= deadline {
            return Err(Reply::error(format!(
                "ERR node {id}, the leader, could not hand its lead over (to node {to}) within \
                 {:.1} s: nothing was removed; it stopped taking writes for the hand-over, so \
                 an election picks the next leader. Send CLUSTER DELNODE {id} again once a \
                 leader is known",
                within.as_secs_f64()
            )));
        }
    }
}

/// Whether this node may change the membership: it leads, and the last
/// change is finished (not left in a joint configuration).
fn leading(node: &Node) -> Result<(), NotLeading> {
    let metrics = node.raft.metrics().borrow_watched().clone();
    if metrics.state != ServerState::Leader {
        let membership = metrics.membership_config.membership();
        let leader = (metrics.current_leader)
            .filter(|leader| *leader != node.id)
            .and_then(|leader| {
                let entry = membership.get_node(&leader)?;
                let address = members::address(leader, entry)?;
                Some((leader, format!("node {leader} at {}", address.addr)))
            });
        return Err(match leader {
            Some((leader, named)) => NotLeading::Follower(leader, named),
            None => NotLeading::NoLeader,
        });
    }
    if metrics
        .membership_config
        .membership()
        .get_joint_config()
        .len()
        > 1
    {
        return Err(NotLeading::Joint);
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
    let adding = tokio::time::timeout(COMMIT, node.raft.add_learner(id, learner, false));
    let added = match adding.await {
        Ok(Ok(response)) => response.log_id,
        Ok(Err(error)) => {
            return Err(Reply::error(format!(
                "ERR node {id} was not added as a learner: {error}"
            )));
        }
        Err(_) => {
            return Err(Reply::error(format!(
                "ERR node {id}'s learner entry did not commit within {} s (is a majority of \
                 the voters up?): check CLUSTER NODES, and send it again",
                COMMIT.as_secs()
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
                     learner; send the same CLUSTER ADDNODE again"
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

/// Whether node `id` may be removed: a member, and not the only voter.
fn removable(metrics: &RaftMetrics<TypeConfig>, id: NodeId) -> Result<(), Reply> {
    let membership = metrics.membership_config.membership();
    if membership.get_node(&id).is_none() {
        return Err(Reply::error(format!(
            "ERR node {id} is not a member of this cluster"
        )));
    }
    let mut voters = membership.voter_ids();
    if voters.all(|voter| voter == id) {
        return Err(Reply::error(format!(
            "ERR node {id} is the cluster's only voter: it cannot be removed"
        )));
    }
    Ok(())
}

impl Membership {
    /// DELNODE of another node: a voter or a learner out of the
    /// membership; the node is told once it is done.
    async fn remove(&self, id: NodeId) -> Reply {
        let notice = (self.tell_removed)(id);
        let reply = remove(&self.node, id).await;
        if let Reply::Status(_) = reply {
            tokio::spawn(notice);
        }
        reply
    }
}

/// DELNODE of another node, the change itself.
async fn remove(node: &Node, id: NodeId) -> Reply {
    let metrics = node.raft.metrics().borrow_watched().clone();
    if let Err(refused) = removable(&metrics, id) {
        return refused;
    }
    let membership = metrics.membership_config.membership();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let ids = BTreeSet::from([id]);
    let changes = if voters.contains(&id) {
        ChangeMembers::RemoveVoters(ids)
    } else {
        ChangeMembers::RemoveNodes(ids)
    };
    let reply = change(node, changes).await;
    if let Reply::Status(_) = reply {
        // The entry's leader, for whoever checks who committed it.
        let term = node.raft.metrics().borrow_watched().current_term;
        info!("CLUSTER DELNODE {id}: committed by this node, the leader in term {term}");
    }
    reply
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

#[cfg(test)]
#[path = "membership_tests.rs"]
mod tests;
