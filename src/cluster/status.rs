//! A node's view of its cluster from openraft's metrics: the status
//! types themselves live in `state::cluster`, which every layer above the
//! state may read.

use std::net::SocketAddr;

pub use crate::state::cluster::{ClockStatus, ClusterStatus, Member, Role};

use super::types::NodeId;

/// A member's addresses, as `cluster-nodes` gives them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Address {
    pub id: NodeId,
    pub addr: SocketAddr,
    pub bus_addr: SocketAddr,
}

impl ClusterStatus {
    /// The status openraft's metrics describe: the members of the
    /// membership in the log, at the addresses `addresses` (this node's
    /// `cluster-nodes`) gives them, else at the membership's.
    pub fn from_metrics(
        metrics: &openraft::RaftMetrics<super::types::TypeConfig>,
        addresses: &[Address],
        elections: u64,
    ) -> ClusterStatus {
        use openraft::ServerState;
        let role = match metrics.state {
            ServerState::Leader => Role::Leader,
            ServerState::Follower => Role::Follower,
            ServerState::Candidate => Role::Candidate,
            ServerState::Learner => Role::Learner,
            ServerState::Shutdown => Role::Shutdown,
        };
        let membership = metrics.membership_config.membership();
        let voters: Vec<NodeId> = membership.voter_ids().collect();
        let matched = |id: NodeId| {
            let replication = metrics.replication.as_ref()?;
            replication.get(&id).copied().flatten().map(|log| log.index)
        };
        // The members are the log's; where each is, this node's
        // configuration says first (`addresses`), else the log.
        let members = super::members::addresses(membership.nodes(), addresses)
            .iter()
            .map(|address| Member {
                id: address.id,
                addr: address.addr,
                bus_addr: address.bus_addr,
                voter: voters.contains(&address.id),
                matched: matched(address.id),
            })
            .collect();
        ClusterStatus {
            id: metrics.id,
            role,
            term: metrics.current_term,
            leader: metrics.current_leader,
            commit_index: metrics.local_committed.map(|log| log.index),
            applied_index: metrics.last_applied.map(|log| log.index),
            last_log_index: metrics.last_log_index,
            members,
            elections,
            // The clock guard's part, merged in when published.
            clock: ClockStatus::default(),
        }
    }
}
