//! Nodes that keep their Raft state on disk, stopped (their Raft shut
//! down, off the network) and started again from their directories: a
//! follower catches up from its own log, or from its snapshot and then
//! the leader's, and a whole cluster keeps every committed write.

use super::{
    Cluster, NodeId, Op, acquire, acquired, check_fencing, heartbeat, release, snapshot_and_purge,
    until,
};

const IDS: [NodeId; 3] = [1, 2, 3];

fn others(id: NodeId) -> Vec<NodeId> {
    IDS.iter().copied().filter(|&other| other != id).collect()
}

/// A follower of the leader all of `IDS` agree on.
async fn a_follower(cluster: &Cluster) -> NodeId {
    let leader = cluster.leader(&IDS).await;
    *IDS.iter().find(|&&id| id != leader).unwrap()
}

/// Every node agrees on a leader, has applied all it has, and holds the
/// registry a single one fed the history holds.
async fn assert_all_agree(cluster: &Cluster) {
    let leader = cluster.leader(&IDS).await;
    cluster.settle(leader, &IDS).await;
    let reference = cluster.reference();
    for id in IDS {
        assert_eq!(cluster.state_of(id), reference, "node {id}");
    }
    check_fencing(&cluster.history);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_restarted_from_its_dir_catches_up() {
    let mut cluster = Cluster::start_on_disk(&IDS, 100.0).await;
    let a = acquired(&cluster.write(&IDS, vec![acquire("a", "w", 10.0)]).await[0]);
    cluster.write(&IDS, vec![acquire("b", "w", 10.0)]).await;
    let follower = a_follower(&cluster).await;
    let leader = cluster.leader(&IDS).await;
    cluster.settle(leader, &IDS).await;
    let before = cluster.state_of(follower);
    let applied = cluster.nodes[&follower].state.last_applied_index();

    cluster.stop(follower).await;
    let rest = others(follower);
    cluster.set_clocks(101.0);
    cluster.write(&rest, vec![heartbeat(&a)]).await;
    cluster
        .write(&rest, vec![release(&a), acquire("c", "w", 10.0)])
        .await;

    // Back where it stopped before it hears from anyone: its log, and the
    // committed entries re-applied.
    cluster.router.isolate(follower);
    cluster.start_node(follower).await;
    assert!(cluster.nodes[&follower].state.last_applied_index() >= applied);
    assert_eq!(cluster.state_of(follower), before);
    cluster.router.heal();
    assert_all_agree(&cluster).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_from_its_snapshot_catches_up_from_the_leaders() {
    let mut cluster = Cluster::start_on_disk(&IDS, 100.0).await;
    let mut leases = Vec::new();
    for run in ["a", "b", "c"] {
        leases.push(acquired(
            &cluster.write(&IDS, vec![acquire(run, "w", 10.0)]).await[0],
        ));
    }
    let follower = a_follower(&cluster).await;
    let leader = cluster.leader(&IDS).await;
    cluster.settle(leader, &IDS).await;
    // The follower snapshots and purges all it has.
    let index = snapshot_and_purge(&cluster, follower).await;
    let before = cluster.state_of(follower);
    cluster.stop(follower).await;

    // The others go on, and the leader purges what the follower missed.
    let rest = others(follower);
    let data = Op::SetData {
        lease_id: leases[0].lease_id().into(),
        token: leases[0].fencing_token,
        value: bytes::Bytes::from_static(b"checkpoint"),
        now: None,
    };
    cluster.write(&rest, vec![data, release(&leases[1])]).await;
    cluster.write(&rest, vec![acquire("d", "w", 10.0)]).await;
    let leader = cluster.leader(&rest).await;
    let newer = snapshot_and_purge(&cluster, leader).await;

    // It starts from its own snapshot (the registry it saved, no log)
    // before it hears from anyone.
    cluster.router.isolate(follower);
    cluster.start_node(follower).await;
    assert!(cluster.nodes[&follower].state.last_applied_index() >= index);
    assert_eq!(cluster.state_of(follower), before);
    let covered = |m: &openraft::RaftMetrics<_>| {
        m.snapshot.map(|id| id.index) >= index && m.purged.map(|id| id.index) >= index
    };
    until(&cluster, follower, covered).await;
    cluster.router.heal();
    // The leader no longer has the entries the follower missed: it is sent the
    // leader's snapshot.
    until(&cluster, follower, |m| {
        m.snapshot.map(|id| id.index) >= newer
    })
    .await;
    assert_all_agree(&cluster).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_cluster_restarted_keeps_every_committed_write() {
    let mut cluster = Cluster::start_on_disk(&IDS, 100.0).await;
    let mut issued = 0;
    for run in ["a", "b"] {
        let lease = acquired(&cluster.write(&IDS, vec![acquire(run, "w", 10.0)]).await[0]);
        issued = issued.max(lease.fencing_token);
    }
    // One node's state is partly in a snapshot, the rest in its log.
    let leader = cluster.leader(&IDS).await;
    cluster.settle(leader, &IDS).await;
    let index = cluster.nodes[&leader].state.last_applied_index();
    cluster.nodes[&leader]
        .raft
        .trigger()
        .snapshot()
        .await
        .unwrap();
    until(&cluster, leader, |m| m.snapshot.map(|id| id.index) >= index).await;
    for run in ["c", "d"] {
        let lease = acquired(&cluster.write(&IDS, vec![acquire(run, "w", 10.0)]).await[0]);
        issued = issued.max(lease.fencing_token);
    }

    for id in IDS {
        cluster.stop(id).await;
    }
    for id in IDS {
        cluster.start_node(id).await;
    }
    assert_all_agree(&cluster).await;
    cluster.set_clocks(120.0);
    let again = cluster
        .write(
            &IDS,
            vec![acquire("a", "w2", 10.0), acquire("e", "w", 10.0)],
        )
        .await;
    for outcome in &again {
        let lease = acquired(outcome);
        assert!(
            lease.fencing_token > issued,
            "token {} not above {issued}",
            lease.fencing_token
        );
        issued = lease.fencing_token;
    }
    assert_all_agree(&cluster).await;
    cluster.shutdown().await;
}
