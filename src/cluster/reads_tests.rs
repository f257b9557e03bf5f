//! Reads at a read index ([`super::reads`]) on three in-process nodes:
//! what a read sees on the leader and on a follower, what an isolated node
//! answers, and which reads still go through the log.

use std::time::Duration;

use bytes::Bytes;
use openraft::async_runtime::WatchReceiver;

use super::core_tests::{Cluster, acquire, flag, lease};
use super::tests::release;
use super::types::NodeId;
use crate::core::{CoreAnswer, CoreCommand, Refusal};
use crate::registry::{Lease, Op, Outcome};

const WAIT: Duration = Duration::from_secs(20);

fn validate(lease: &Lease, now: Option<f64>) -> Op {
    Op::Validate {
        run_id: lease.run_id.clone(),
        lease_id: lease.lease_id().into(),
        token: lease.fencing_token,
        now,
    }
}

fn get(run: &str, now: Option<f64>) -> Op {
    Op::Get {
        run_id: Bytes::copy_from_slice(run.as_bytes()),
        now,
    }
}

/// The lease a GET answered, and whether it had expired.
fn got(answer: &CoreAnswer) -> Option<(Lease, bool)> {
    match answer {
        CoreAnswer::Outcome(Outcome::Got(got)) => got.clone(),
        other => panic!("expected a GET's answer, got {other:?}"),
    }
}

fn try_again(answer: &CoreAnswer) -> bool {
    matches!(answer, CoreAnswer::Refused(Refusal::TryAgain(_)))
}

/// Sends `ops` to node `id` once, as one batch: its answers, refusals
/// included.
async fn once(cluster: &Cluster, id: NodeId, ops: Vec<Op>) -> Vec<CoreAnswer> {
    let commands = ops.into_iter().map(CoreCommand::Op).collect();
    cluster.core(id).call(commands).await.answers
}

fn last_log_index(cluster: &Cluster, id: NodeId) -> u64 {
    let metrics = cluster.node(id).raft.metrics();
    let index = metrics.borrow_watched().last_log_index;
    index.unwrap_or(0)
}

fn registry_time(cluster: &Cluster, id: NodeId) -> f64 {
    cluster.node(id).state.lock().registry.time()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_on_leader_and_followers_see_a_write_acknowledged_before_them() {
    let cluster = Cluster::start(&[1, 2, 3]).await;
    let leader = cluster.leader(&[1, 2, 3]).await;
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let mut last = None;
    for round in 0..10 {
        // Written through one node, read at once on every node: a
        // follower answering from what it had applied would often miss it.
        let run = format!("run-{round}");
        let writer = [leader, follower][round % 2];
        let taken = lease(&cluster.call(writer, vec![acquire(&run, "w")]).await[0]);
        for reader in [1, 2, 3] {
            let answers = once(
                &cluster,
                reader,
                vec![validate(&taken, None), get(&run, None)],
            );
            let answers = answers.await;
            assert!(flag(&answers[0]), "node {reader}, round {round}");
            let (seen, expired) = got(&answers[1]).expect("the run is held");
            assert_eq!((seen, expired), (taken.clone(), false), "node {reader}");
        }
        if let Some(previous) = last.replace(taken.clone()) {
            assert!(flag(
                &cluster.call(writer, vec![release(&previous)]).await[0]
            ));
            for reader in [1, 2, 3] {
                let answers = once(&cluster, reader, vec![validate(&previous, None)]).await;
                assert!(!flag(&answers[0]), "node {reader} saw a released lease");
            }
        }
    }

    // Served without the log: 60 reads, one at a time, add no entry of
    // their own (the leader's ticks add one a tenth of a second at most).
    let taken = last.unwrap();
    let before = last_log_index(&cluster, leader);
    let started = tokio::time::Instant::now();
    for index in 0..60 {
        let reader = [leader, follower][index % 2];
        let answers = once(&cluster, reader, vec![validate(&taken, None)]).await;
        assert!(flag(&answers[0]));
    }
    let ticks = (started.elapsed().as_millis() / 100) as u64 + 2;
    let added = last_log_index(&cluster, leader) - before;
    assert!(
        added <= ticks,
        "{added} entries for 60 reads in {ticks} ticks"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_old_leader_never_answers_a_read_from_its_stale_state() {
    let cluster = Cluster::start(&[1, 2, 3]).await;
    let old = cluster.leader(&[1, 2, 3]).await;
    let first = lease(&cluster.call(old, vec![acquire("a", "w1")]).await[0]);
    cluster.converge(&[1, 2, 3], 1).await;

    cluster.router.isolate(old);
    let rest: Vec<NodeId> = [1, 2, 3].into_iter().filter(|&id| id != old).collect();
    let new = cluster.leader(&rest).await;
    assert!(flag(&cluster.call(new, vec![release(&first)]).await[0]));
    let second = lease(&cluster.call(new, vec![acquire("a", "w2")]).await[0]);
    assert_eq!(second.fencing_token, 2);
    // The old leader's replica still has w1 holding the run...
    let stale = cluster.node(old).state.lock().registry.last_token();
    assert_eq!(stale, 1);
    // ...and it never says so: no majority confirms a read index for it.
    let answers = once(&cluster, old, vec![validate(&first, None), get("a", None)]).await;
    assert!(answers.iter().all(try_again), "{answers:?}");

    cluster.router.heal();
    // Caught up, it answers with what the new leader wrote.
    let answers = cluster
        .call(old, vec![validate(&first, None), get("a", None)])
        .await;
    assert!(!flag(&answers[0]));
    assert_eq!(got(&answers[1]).map(|(lease, _)| lease), Some(second));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_cut_off_from_the_leader_answers_reads_try_again() {
    let cluster = Cluster::start(&[1, 2, 3]).await;
    let leader = cluster.leader(&[1, 2, 3]).await;
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let taken = lease(&cluster.call(leader, vec![acquire("a", "w1")]).await[0]);
    cluster.converge(&[1, 2, 3], 1).await;

    cluster.router.cut(follower, leader);
    let answers = once(&cluster, follower, vec![validate(&taken, None)]).await;
    assert!(try_again(&answers[0]), "{answers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_with_now_above_registry_time_goes_through_the_log() {
    let cluster = Cluster::start(&[1, 2, 3]).await;
    let leader = cluster.leader(&[1, 2, 3]).await;
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let taken = lease(&cluster.call(leader, vec![acquire("a", "w1")]).await[0]);
    cluster.converge(&[1, 2, 3], 1).await;

    // Far ahead of every clock (lease-max-skew is off in these tests).
    let ahead = registry_time(&cluster, leader) + 1000.0;
    let before = last_log_index(&cluster, leader);
    let answers = cluster.call(follower, vec![get("a", Some(ahead))]).await;
    assert_eq!(got(&answers[0]), Some((taken.clone(), true)));
    // Registry time moved on the replicas: only an entry moves it.
    assert!(last_log_index(&cluster, leader) > before);
    let moved = async {
        while ![1, 2, 3]
            .into_iter()
            .all(|id| registry_time(&cluster, id) >= ahead)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(WAIT, moved)
        .await
        .expect("registry time did not move on every replica");

    // A `now` below registry time moves nothing: the read is served at
    // the read index, at registry time, where the lease has expired.
    let answers = once(
        &cluster,
        leader,
        vec![validate(&taken, Some(ahead - 999.0))],
    )
    .await;
    assert!(!flag(&answers[0]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_in_a_batch_with_a_write_go_into_its_entry() {
    let cluster = Cluster::start(&[1, 2, 3]).await;
    let leader = cluster.leader(&[1, 2, 3]).await;
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    // As a transaction's commands come: one batch. Its GET sees its
    // acquire (served at a read index apart from it, it would not).
    for id in [leader, follower] {
        let run = format!("run-{id}");
        let answers = cluster
            .call(
                id,
                vec![get(&run, None), acquire(&run, "w"), get(&run, None)],
            )
            .await;
        assert_eq!(got(&answers[0]), None);
        let taken = lease(&answers[1]);
        assert_eq!(got(&answers[2]), Some((taken, false)));
    }
}
