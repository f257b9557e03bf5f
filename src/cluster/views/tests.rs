//! The views rendered from hand-made statuses: a leader's, a follower's,
//! a candidate's, and a node's that knows no leader.

use std::net::SocketAddr;

use super::*;
use crate::cluster::status::ClockStatus;

/// Member `id` at 127.0.0.1:700<id>, its bus at 1700<id>.
fn member(id: NodeId, matched: Option<u64>) -> Member {
    let addr: SocketAddr = format!("127.0.0.1:700{id}").parse().unwrap();
    let bus_addr: SocketAddr = format!("127.0.0.1:1700{id}").parse().unwrap();
    Member {
        id,
        addr,
        bus_addr,
        voter: true,
        matched,
    }
}

/// Node `id` of three, in `role`, following `leader`.
fn status(id: NodeId, role: Role, leader: Option<NodeId>) -> ClusterStatus {
    ClusterStatus {
        id,
        role,
        term: 7,
        leader,
        commit_index: Some(42),
        applied_index: Some(41),
        last_log_index: Some(43),
        members: vec![member(1, None), member(2, None), member(3, None)],
        elections: 2,
        clock: ClockStatus::default(),
    }
}

/// Node 1 leading; it has heard from node 2 (at 40), not yet from node 3.
fn leader() -> ClusterStatus {
    let mut status = status(1, Role::Leader, Some(1));
    status.members[0].matched = Some(43);
    status.members[1].matched = Some(40);
    status
}

fn bulk(text: &str) -> Reply {
    Reply::bulk(text.to_owned())
}

#[test]
fn a_single_node_is_a_master_without_replicas() {
    assert_eq!(
        role(None),
        Reply::Array(vec![
            Reply::text("master"),
            Reply::Int(0),
            Reply::Array(vec![])
        ])
    );
}

#[test]
fn the_leader_is_the_master_of_the_members_it_heard_from() {
    assert_eq!(
        role(Some(&leader())),
        Reply::Array(vec![
            Reply::text("master"),
            Reply::Int(41),
            Reply::Array(vec![Reply::Array(vec![
                bulk("127.0.0.1"),
                bulk("7002"),
                bulk("40"),
            ])]),
        ])
    );
}

#[test]
fn a_follower_is_a_replica_of_its_leader() {
    let follower = status(2, Role::Follower, Some(1));
    assert_eq!(
        role(Some(&follower)),
        Reply::Array(vec![
            Reply::text("slave"),
            bulk("127.0.0.1"),
            Reply::Int(7001),
            Reply::text("connected"),
            Reply::Int(41),
        ])
    );
    // A learner follows as a follower does.
    let learner = status(2, Role::Learner, Some(1));
    assert_eq!(role(Some(&learner)), role(Some(&follower)));
}

#[test]
fn without_a_leader_a_node_is_a_replica_trying_to_connect() {
    let expected = Reply::Array(vec![
        Reply::text("slave"),
        bulk(""),
        Reply::Int(0),
        Reply::text("connect"),
        Reply::Int(41),
    ]);
    for role_now in [Role::Follower, Role::Candidate, Role::Shutdown] {
        assert_eq!(role(Some(&status(2, role_now, None))), expected);
    }
    // A candidate that still names the old leader follows nobody.
    assert_eq!(role(Some(&status(2, Role::Candidate, Some(1)))), expected);
}

#[test]
fn cluster_info_of_a_leader() {
    assert_eq!(
        cluster_info(&leader()),
        "cluster_enabled:1\r\n\
         cluster_state:ok\r\n\
         cluster_slots_assigned:16384\r\n\
         cluster_slots_ok:16384\r\n\
         cluster_slots_pfail:0\r\n\
         cluster_slots_fail:0\r\n\
         cluster_known_nodes:3\r\n\
         cluster_size:1\r\n\
         cluster_current_epoch:7\r\n\
         cluster_my_epoch:7\r\n\
         cluster_role:leader\r\n\
         cluster_leader_id:1\r\n\
         cluster_term:7\r\n\
         cluster_commit_index:42\r\n\
         cluster_applied_index:41\r\n\
         cluster_last_log_index:43\r\n\
         cluster_elections:2\r\n\
         cluster_clock_offset_ms:0\r\n\
         cluster_clock_skewed:0\r\n"
    );
}

#[test]
fn cluster_info_shows_the_clock_against_the_majority() {
    let mut skewed = status(3, Role::Follower, Some(1));
    skewed.clock = ClockStatus {
        offset_ms: Some(2003),
        skewed: true,
    };
    let info = cluster_info(&skewed);
    for line in [
        "cluster_clock_offset_ms:2003\r\n",
        "cluster_clock_skewed:1\r\n",
    ] {
        assert!(info.contains(line), "{line:?} not in {info}");
    }
    skewed.clock = ClockStatus {
        offset_ms: Some(-12),
        skewed: false,
    };
    let info = cluster_info(&skewed);
    for line in [
        "cluster_clock_offset_ms:-12\r\n",
        "cluster_clock_skewed:0\r\n",
    ] {
        assert!(info.contains(line), "{line:?} not in {info}");
    }
}

#[test]
fn cluster_info_without_a_leader_fails() {
    let mut candidate = status(3, Role::Candidate, None);
    candidate.commit_index = None;
    let info = cluster_info(&candidate);
    for line in [
        "cluster_state:fail\r\n",
        "cluster_slots_ok:0\r\n",
        "cluster_slots_fail:16384\r\n",
        "cluster_role:candidate\r\n",
        "cluster_leader_id:0\r\n",
        "cluster_commit_index:0\r\n",
    ] {
        assert!(info.contains(line), "{line:?} not in {info}");
    }
}

const ONE: &str = "0000000000000000000000000000000000000001";
const TWO: &str = "0000000000000000000000000000000000000002";
const THREE: &str = "0000000000000000000000000000000000000003";

#[test]
fn node_names_are_the_id_in_forty_hex_digits() {
    assert_eq!(node_name(1), ONE);
    assert_eq!(node_name(255).len(), 40);
    assert!(node_name(255).ends_with("0ff"));
    assert_eq!(
        node_name(u64::MAX),
        format!("{}{}", "0".repeat(24), "f".repeat(16))
    );
}

#[test]
fn cluster_nodes_as_the_leader_sees_them() {
    assert_eq!(
        cluster_nodes(&leader()),
        format!(
            "{ONE} 127.0.0.1:7001@17001 myself,master - 0 0 7 connected 0-16383\n\
             {TWO} 127.0.0.1:7002@17002 slave {ONE} 0 0 7 connected\n\
             {THREE} 127.0.0.1:7003@17003 slave {ONE} 0 0 7 connected\n"
        )
    );
}

#[test]
fn cluster_nodes_as_a_follower_sees_them_with_a_learner() {
    let mut follower = status(2, Role::Follower, Some(1));
    follower.members[2].voter = false;
    assert_eq!(
        cluster_nodes(&follower),
        format!(
            "{ONE} 127.0.0.1:7001@17001 master - 0 0 7 connected 0-16383\n\
             {TWO} 127.0.0.1:7002@17002 myself,slave {ONE} 0 0 7 connected\n\
             {THREE} 127.0.0.1:7003@17003 slave,nofailover {ONE} 0 0 7 connected\n"
        )
    );
}

#[test]
fn cluster_nodes_without_a_leader_are_masters_without_slots() {
    let mut candidate = status(3, Role::Candidate, None);
    candidate.members[0].addr = "[::1]:7001".parse().unwrap();
    candidate.members[0].bus_addr = "[::1]:17001".parse().unwrap();
    assert_eq!(
        cluster_nodes(&candidate),
        format!(
            "{ONE} ::1:7001@17001 master - 0 0 7 connected\n\
             {TWO} 127.0.0.1:7002@17002 master - 0 0 7 connected\n\
             {THREE} 127.0.0.1:7003@17003 myself,master - 0 0 7 connected\n"
        )
    );
}

fn fields(pairs: Vec<(String, String)>) -> Vec<String> {
    pairs
        .into_iter()
        .map(|(name, value)| format!("{name}:{value}"))
        .collect()
}

#[test]
fn info_replication_of_a_leader() {
    assert_eq!(
        fields(replication_role(&leader())),
        [
            "role:master",
            "connected_slaves:1",
            "slave0:ip=127.0.0.1,port=7002,state=online,offset=40,lag=0",
        ]
    );
    assert_eq!(replication_offset(&leader()), 41);
    assert_eq!(
        fields(replication_cluster(&leader())),
        [
            "cluster_term:7",
            "cluster_leader_id:1",
            "cluster_commit_index:42",
            "cluster_applied_index:41",
        ]
    );
}

#[test]
fn info_replication_of_a_follower_and_of_a_candidate() {
    assert_eq!(
        fields(replication_role(&status(2, Role::Follower, Some(1)))),
        [
            "role:slave",
            "master_host:127.0.0.1",
            "master_port:7001",
            "master_link_status:up",
            "master_sync_in_progress:0",
            "slave_repl_offset:41",
            "connected_slaves:0",
        ]
    );
    let candidate = fields(replication_role(&status(2, Role::Candidate, None)));
    assert_eq!(
        candidate[..4],
        [
            "role:slave",
            "master_host:",
            "master_port:0",
            "master_link_status:down"
        ]
    );
    assert_eq!(
        fields(replication_cluster(&status(2, Role::Candidate, None)))[1],
        "cluster_leader_id:0"
    );
}

fn slot_node(host: &str, port: i64, name: &str) -> Reply {
    Reply::Array(vec![
        bulk(host),
        Reply::Int(port),
        bulk(name),
        Reply::Array(vec![]),
    ])
}

#[test]
fn cluster_slots_are_all_the_leaders() {
    let expected = Reply::Array(vec![Reply::Array(vec![
        Reply::Int(0),
        Reply::Int(16383),
        slot_node("127.0.0.1", 7002, TWO),
        slot_node("127.0.0.1", 7001, ONE),
        slot_node("127.0.0.1", 7003, THREE),
    ])]);
    // The same from any node that knows the leader.
    assert_eq!(cluster_slots(&status(1, Role::Follower, Some(2))), expected);
    assert_eq!(cluster_slots(&status(3, Role::Learner, Some(2))), expected);
    // Without a leader known, the node answering is named in its place:
    // never an empty map, which leaves a cluster client no connection.
    assert_eq!(
        cluster_slots(&status(1, Role::Candidate, None)),
        Reply::Array(vec![Reply::Array(vec![
            Reply::Int(0),
            Reply::Int(16383),
            slot_node("127.0.0.1", 7001, ONE),
            slot_node("127.0.0.1", 7002, TWO),
            slot_node("127.0.0.1", 7003, THREE),
        ])])
    );
}

fn shard_node(id: NodeId, role: &'static str, offset: i64) -> Reply {
    Reply::Map(vec![
        (Reply::text("id"), bulk(&node_name(id))),
        (Reply::text("port"), Reply::Int(7000 + id as i64)),
        (Reply::text("ip"), bulk("127.0.0.1")),
        (Reply::text("endpoint"), bulk("127.0.0.1")),
        (Reply::text("role"), Reply::text(role)),
        (Reply::text("replication-offset"), Reply::Int(offset)),
        (Reply::text("health"), Reply::text("online")),
    ])
}

fn shard(slots: Vec<Reply>, nodes: Vec<Reply>) -> Reply {
    Reply::Map(vec![
        (Reply::text("slots"), Reply::Array(slots)),
        (Reply::text("nodes"), Reply::Array(nodes)),
    ])
}

#[test]
fn cluster_shards_is_one_shard_led_by_the_leader() {
    let every_slot = vec![Reply::Int(0), Reply::Int(16383)];
    // The leader knows what its followers hold (node 3: not yet).
    assert_eq!(
        cluster_shards(&leader()),
        Reply::Array(vec![shard(
            every_slot.clone(),
            vec![
                shard_node(1, "master", 41),
                shard_node(2, "replica", 40),
                shard_node(3, "replica", 0),
            ],
        )])
    );
    // A follower names the same leader and members.
    assert_eq!(
        cluster_shards(&status(3, Role::Follower, Some(2))),
        Reply::Array(vec![shard(
            every_slot,
            vec![
                shard_node(2, "master", 41),
                shard_node(1, "replica", 0),
                shard_node(3, "replica", 0),
            ],
        )])
    );
    // Without a leader known: this node in its place, as CLUSTER SLOTS.
    assert_eq!(
        cluster_shards(&status(3, Role::Candidate, None)),
        Reply::Array(vec![shard(
            vec![Reply::Int(0), Reply::Int(16383)],
            vec![
                shard_node(3, "master", 41),
                shard_node(1, "replica", 0),
                shard_node(2, "replica", 0),
            ],
        )])
    );
}
