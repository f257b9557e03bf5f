//! What a node knows of its cluster, for `ROLE`, `INFO replication`,
//! `CLUSTER INFO`, `CLUSTER NODES` and the metrics: a plain value the node
//! republishes whenever its Raft metrics change, read without waiting on
//! the core.

use std::net::SocketAddr;

/// A node's id in the cluster.
pub type NodeId = u64;

/// This node's part in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower,
    /// Standing for election: there is no leader it knows of.
    Candidate,
    /// Catching up, not voting (a node being added).
    Learner,
    /// Stopped (a fatal Raft error, or shutting down).
    Shutdown,
}

/// One member of the cluster, as this node sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    pub id: NodeId,
    /// Its client address (`cluster-nodes`).
    pub addr: SocketAddr,
    /// Its bus address (the client port + 10000, or its `cluster-port`).
    pub bus_addr: SocketAddr,
    pub voter: bool,
    /// On the leader: the index of the last entry this member is known to
    /// hold (`None`: unknown, or not the leader).
    pub matched: Option<u64>,
}

/// A node's view of its cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterStatus {
    pub id: NodeId,
    pub role: Role,
    pub term: u64,
    /// The leader this node knows of.
    pub leader: Option<NodeId>,
    /// The last log index this node knows to be committed.
    pub commit_index: Option<u64>,
    /// The last log index applied to this node's registry.
    pub applied_index: Option<u64>,
    /// The last log index in this node's log.
    pub last_log_index: Option<u64>,
    /// Every member, in id order (this node included).
    pub members: Vec<Member>,
    /// Elections this node has started since it started.
    pub elections: u64,
    /// This node's clock against the majority's.
    pub clock: ClockStatus,
}

/// This node's clock against the majority's, as its clock guard last
/// judged it (src/cluster/skew.rs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockStatus {
    /// This node's clock minus the majority's, in milliseconds (positive:
    /// ahead); `None` until it has estimates of a majority's clocks.
    pub offset_ms: Option<i64>,
    /// Whether it is further off than `cluster-max-clock-skew`, and so
    /// refuses to lead.
    pub skewed: bool,
}

impl ClusterStatus {
    /// The leader's entry in `members`, if a leader is known.
    pub fn leader_member(&self) -> Option<&Member> {
        let leader = self.leader?;
        self.members.iter().find(|member| member.id == leader)
    }

    /// Whether a leader is known (the cluster can serve writes).
    pub fn has_leader(&self) -> bool {
        self.leader.is_some()
    }
}

/// How a connection asks this node for `CLUSTER ADDNODE|DELNODE`: the
/// cluster installs it at start ([`crate::state::Shared::set_membership`]);
/// the future answers the client's reply once the change is done or has
/// failed.
#[derive(Clone)]
pub struct MembershipHook(
    pub  std::sync::Arc<
        dyn Fn(
                crate::command::ClusterChange,
            ) -> futures_util::future::BoxFuture<'static, crate::reply::Reply>
            + Send
            + Sync,
    >,
);

impl std::fmt::Debug for MembershipHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MembershipHook")
    }
}
