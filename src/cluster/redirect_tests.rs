//! The redirect a node answers, from hand-made statuses.

use std::net::SocketAddr;

use super::*;
use crate::cluster::status::{ClockStatus, Member};
use crate::cluster::types::NodeId;

/// Member `id` at `host:700<id>`.
fn member(host: &str, id: NodeId) -> Member {
    let addr: SocketAddr = format!("{host}:700{id}").parse().unwrap();
    Member {
        id,
        addr,
        bus_addr: addr,
        voter: true,
        matched: None,
    }
}

/// Node `id` of three, in `role`, following `leader`.
fn status(host: &str, id: NodeId, role: Role, leader: Option<NodeId>) -> ClusterStatus {
    ClusterStatus {
        id,
        role,
        term: 3,
        leader,
        commit_index: None,
        applied_index: None,
        last_log_index: None,
        members: (1..=3).map(|id| member(host, id)).collect(),
        elections: 0,
        clock: ClockStatus::default(),
    }
}

#[test]
fn slots_are_redis_clusters() {
    // Redis Cluster's specification: CRC16 (XMODEM) of the key mod 16384,
    // of the part in the first non-empty `{...}` when there is one.
    assert_eq!(slot(b"123456789"), 12739);
    assert_eq!(slot(b"foo"), 12182);
    assert_eq!(slot(b"run-42"), 4178);
    assert_eq!(slot(b"{run-42}:w:1"), slot(b"run-42"));
    assert_eq!(slot(b""), 0);
}

#[test]
fn the_leader_runs_the_command() {
    let leader = status("127.0.0.1", 1, Role::Leader, Some(1));
    assert_eq!(redirect(&leader, b"run-42"), None);
    // A node that names itself leader, whatever its role says.
    let itself = status("127.0.0.1", 1, Role::Follower, Some(1));
    assert_eq!(redirect(&itself, b"run-42"), None);
}

#[test]
fn a_follower_or_learner_names_the_slot_and_the_leader() {
    for role in [Role::Follower, Role::Learner] {
        let follower = status("127.0.0.1", 2, role, Some(3));
        assert_eq!(
            redirect(&follower, b"run-42").as_deref(),
            Some("MOVED 4178 127.0.0.1:7003")
        );
        assert_eq!(
            redirect(&follower, b"run-42:w:1").as_deref(),
            Some("MOVED 16127 127.0.0.1:7003")
        );
    }
    // IPv6 without brackets, as Redis writes it.
    let follower = status("[::1]", 2, Role::Follower, Some(1));
    assert_eq!(
        redirect(&follower, b"foo").as_deref(),
        Some("MOVED 12182 ::1:7001")
    );
}

#[test]
fn without_a_leader_the_cluster_is_down() {
    for role in [Role::Follower, Role::Candidate, Role::Shutdown] {
        let lost = status("127.0.0.1", 2, role, None);
        assert_eq!(redirect(&lost, b"run-42").as_deref(), Some(CLUSTER_DOWN));
    }
}
