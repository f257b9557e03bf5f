//! Three nodes in one process: elections, writes through the leader,
//! replicas that agree with a single registry, and failover that keeps
//! fencing tokens growing; nodes restarted from their directories
//! ([`restart`]); snapshots built in steps while entries are applied,
//! installed and started from ([`snapshot`]).

mod restart;
mod snapshot;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use openraft::async_runtime::WatchReceiver;
use openraft::{BasicNode, Config};
use tempfile::TempDir;

use super::disk::OpenError;
use super::network::{Links, Router};
use super::node::Node;
use super::node::{StartError, Storage, WriteError};
use super::stamp::Clock;
use super::state_machine::apply_tick;
use super::state_machine::{MakeRegistry, apply_batch, decode_into, encode_registry};
use super::types::{Batch, Command, NodeId, Tick};
use crate::registry::{Change, Lease, Op, Outcome, Registry};
use openraft::error::{ClientWriteError, RaftError};

pub(super) const WAIT: Duration = Duration::from_secs(20);
/// A write refused by a leader about to step down (or just elected, its
/// lease not yet established) is sent again after a pause, this often.
pub(super) const RETRIES: usize = 100;
pub(super) const RETRY_AFTER: Duration = Duration::from_millis(100);

/// A clock a test sets.
#[derive(Clone, Default)]
pub(super) struct TestClock(Arc<AtomicU64>);

impl TestClock {
    pub(super) fn set(&self, seconds: f64) {
        self.0.store(seconds.to_bits(), Ordering::SeqCst);
    }

    pub(super) fn clock(&self) -> Clock {
        let now = self.0.clone();
        Arc::new(move || f64::from_bits(now.load(Ordering::SeqCst)))
    }
}

pub(super) fn make() -> MakeRegistry {
    Arc::new(|| Registry::new(10.0, 0))
}

/// A registry's state, in an order that does not depend on where its
/// leases sit: last token, time, each lease's changes by token, each
/// run's changes by run.
pub(super) type State = (u64, f64, Vec<Vec<Change>>, Vec<Change>);

pub(super) fn state(registry: &Registry) -> State {
    let mut leases = Vec::new();
    let mut from = Some(0);
    while let Some(slot) = from {
        from = registry.snapshot(slot, 256, |lease| {
            leases.push((lease.fencing_token, lease.to_changes().collect::<Vec<_>>()));
        });
    }
    leases.sort_by_key(|(token, _)| *token);
    let mut runs = Vec::new();
    let mut after: Option<Bytes> = None;
    loop {
        let next =
            registry.snapshot_runs(after.as_deref(), 256, |run| runs.extend(run.to_changes()));
        match next {
            Some(run) => after = Some(run),
            None => break,
        }
    }
    let leases = leases.into_iter().map(|(_, changes)| changes).collect();
    (registry.last_token(), registry.time(), leases, runs)
}

pub(super) fn acquire(run: &str, worker: &str, ttl: f64) -> Op {
    Op::Acquire {
        run_id: Bytes::copy_from_slice(run.as_bytes()),
        worker_id: Bytes::copy_from_slice(worker.as_bytes()),
        now: None,
        ttl: Some(ttl),
        lock_delay: None,
        with_data: false,
    }
}

pub(super) fn heartbeat(lease: &Lease) -> Op {
    Op::Heartbeat {
        lease_id: lease.lease_id().into(),
        token: lease.fencing_token,
        now: None,
    }
}

pub(super) fn release(lease: &Lease) -> Op {
    Op::Release {
        lease_id: lease.lease_id().into(),
        token: lease.fencing_token,
    }
}

pub(super) fn acquired(outcome: &Outcome) -> Lease {
    match outcome {
        Outcome::Acquired(Some(lease)) => lease.clone(),
        other => panic!("expected a lease, got {other:?}"),
    }
}

struct Cluster {
    router: Arc<Router>,
    nodes: BTreeMap<NodeId, Node>,
    clocks: HashMap<NodeId, TestClock>,
    /// Every committed batch, in log order, with its outcomes.
    history: Vec<(Command, Vec<Outcome>)>,
    config: Arc<Config>,
    /// Each node's data directory, if the nodes keep their Raft state on
    /// disk.
    dirs: HashMap<NodeId, TempDir>,
}

/// A node of its own (id 9, its log in memory, on `clock`), for tests of
/// the bus server that need a Raft behind it.
pub(super) async fn lone_node(clock: &TestClock) -> Node {
    let bus = super::bus::Bus::new(9, None);
    Node::start(9, config(), bus, make(), clock.clock(), Storage::Memory)
        .await
        .unwrap()
}

pub(super) fn config() -> Arc<Config> {
    Arc::new(
        Config {
            // Generous for a loaded machine: a leader that misses
            // heartbeats steps down, and writes are retried.
            heartbeat_interval: 100,
            election_timeout_min: 800,
            election_timeout_max: 1600,
            // A snapshot purges the whole log it covers: a node that
            // missed those entries must be sent the snapshot.
            max_in_snapshot_log_to_keep: 0,
            ..Default::default()
        }
        .validate()
        .unwrap(),
    )
}

impl Cluster {
    /// Nodes that keep their Raft state in memory.
    async fn start(ids: &[NodeId], at: f64) -> Cluster {
        Cluster::start_with(ids, at, false).await
    }

    /// Nodes that keep their Raft state in a temporary directory each.
    async fn start_on_disk(ids: &[NodeId], at: f64) -> Cluster {
        Cluster::start_with(ids, at, true).await
    }

    async fn start_with(ids: &[NodeId], at: f64, on_disk: bool) -> Cluster {
        let mut cluster = Cluster {
            router: Arc::new(Router::default()),
            nodes: BTreeMap::new(),
            clocks: HashMap::new(),
            history: Vec::new(),
            config: config(),
            dirs: HashMap::new(),
        };
        for &id in ids {
            if on_disk {
                cluster.dirs.insert(id, tempfile::tempdir().unwrap());
            }
            let clock = TestClock::default();
            clock.set(at);
            cluster.clocks.insert(id, clock);
            cluster.start_node(id).await;
        }
        let members: BTreeMap<NodeId, BasicNode> =
            ids.iter().map(|&id| (id, BasicNode::default())).collect();
        cluster.nodes[&ids[0]]
            .raft
            .initialize(members)
            .await
            .unwrap();
        cluster
    }

    /// Starts node `id` from its storage (again, after [`Cluster::stop`])
    /// and puts it on the network.
    async fn start_node(&mut self, id: NodeId) {
        let links = Links {
            from: id,
            router: self.router.clone(),
        };
        let storage = match self.dirs.get(&id) {
            Some(dir) => Storage::Dir(dir.path().to_path_buf()),
            None => Storage::Memory,
        };
        let clock = self.clocks[&id].clock();
        let deadline = Instant::now() + WAIT;
        let node = loop {
            let started = Node::start(
                id,
                self.config.clone(),
                links.clone(),
                make(),
                clock.clone(),
                storage.clone(),
            )
            .await;
            match started {
                // A stopped node's log writer lets go of the directory
                // once the writes queued before are done.
                Err(StartError::Open(OpenError::Locked { .. })) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                started => break started.unwrap(),
            }
        };
        self.router.add(id, node.raft.clone());
        self.nodes.insert(id, node);
    }

    /// Takes node `id` off the network and shuts its Raft down; what it
    /// keeps is what is in its directory.
    async fn stop(&mut self, id: NodeId) {
        self.router.remove(id);
        let node = self.nodes.remove(&id).unwrap();
        node.raft.shutdown().await.unwrap();
    }

    fn set_clocks(&self, seconds: f64) {
        for clock in self.clocks.values() {
            clock.set(seconds);
        }
    }

    /// The leader that every node in `among` agrees on, one of them.
    async fn leader(&self, among: &[NodeId]) -> NodeId {
        let agreed = async {
            loop {
                let seen: Vec<Option<NodeId>> = among
                    .iter()
                    .map(|id| {
                        self.nodes[id]
                            .raft
                            .metrics()
                            .borrow_watched()
                            .current_leader
                    })
                    .collect();
                if let Some(Some(leader)) = seen.first()
                    && among.contains(leader)
                    && seen.iter().all(|s| *s == Some(*leader))
                    && self.nodes[leader].raft.is_leader()
                {
                    return *leader;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(WAIT, agreed)
            .await
            .expect("no leader agreed on")
    }

    /// Writes `ops` through the leader of `among` and records the batch;
    /// a write refused before it was appended (the leader changed, as a
    /// loaded machine can make it) is retried at the new leader.
    async fn write(&mut self, among: &[NodeId], ops: Vec<Op>) -> Vec<Outcome> {
        for _ in 0..RETRIES {
            let leader = self.leader(among).await;
            let written = self.nodes[&leader].write(ops.clone()).await;
            if let Some((time, outcomes)) = retry_or(written) {
                let batch = Command::Batch(Batch { time, ops });
                self.history.push((batch, outcomes.clone()));
                return outcomes;
            }
            tokio::time::sleep(RETRY_AFTER).await;
        }
        panic!("no leader took the write");
    }

    /// A tick through the leader of `among`, recorded; returns its stamp.
    async fn tick(&mut self, among: &[NodeId], reclaim: usize) -> f64 {
        for _ in 0..RETRIES {
            let leader = self.leader(among).await;
            let written = self.nodes[&leader].tick(reclaim).await;
            if let Some((time, outcomes)) = retry_or(written) {
                self.history
                    .push((Command::Tick(Tick { time, reclaim }), outcomes));
                return time;
            }
            tokio::time::sleep(RETRY_AFTER).await;
        }
        panic!("no leader took the tick");
    }

    /// Waits until every node in `ids` has applied what `leader` has.
    async fn settle(&self, leader: NodeId, ids: &[NodeId]) {
        // From the state machine: a write returns once applied, before
        // the leader's metrics say so.
        let index = self.nodes[&leader].state.last_applied_index();
        for id in ids {
            self.nodes[id]
                .raft
                .wait(Some(WAIT))
                .applied_index_at_least(index, "caught up")
                .await
                .unwrap();
        }
    }

    fn state_of(&self, id: NodeId) -> State {
        state(&self.nodes[&id].state.lock().registry)
    }

    /// A single registry fed the recorded batches: same outcomes, and
    /// its final state.
    fn reference(&self) -> State {
        let mut registry = make()();
        for (command, outcomes) in &self.history {
            let applied = match command {
                Command::Batch(batch) => apply_batch(&mut registry, batch),
                Command::Tick(tick) => apply_tick(&mut registry, *tick),
            };
            assert_eq!(&applied, outcomes, "{command:?}");
        }
        state(&registry)
    }

    async fn shutdown(self) {
        for node in self.nodes.values() {
            let _ = node.raft.shutdown().await;
        }
    }
}

/// A write's result, `None` if it was refused before being appended
/// (so it may be sent again); any other error fails the test: a write
/// discarded after being appended may or may not commit.
pub(super) fn retry_or<T>(written: Result<T, WriteError>) -> Option<T> {
    match written {
        Ok(written) => Some(written),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(refused))) => {
            // Shown if the test fails.
            eprintln!("write refused, sent again: {refused}");
            None
        }
        Err(error) => panic!("write failed: {error}"),
    }
}

/// The fencing rules over a history in log order: per run, acquired
/// tokens strictly increase, and a lease is granted only once the run's
/// previous lease has ended (expired, or been released) by the stamped
/// time; tokens never repeat across runs either.
fn check_fencing(history: &[(Command, Vec<Outcome>)]) {
    struct Held {
        token: u64,
        end: f64,
        ttl: f64,
    }
    let mut runs: HashMap<Bytes, Held> = HashMap::new();
    let mut by_token: HashMap<u64, Bytes> = HashMap::new();
    let mut last_token = 0;
    let mut now = f64::NEG_INFINITY;
    for (command, outcomes) in history {
        now = now.max(command.time());
        let Command::Batch(batch) = command else {
            continue;
        };
        for (op, outcome) in batch.ops.iter().zip(outcomes) {
            match (op, outcome) {
                (Op::Acquire { run_id, .. }, Outcome::Acquired(Some(lease))) => {
                    assert!(
                        lease.fencing_token > last_token,
                        "token {} repeats",
                        lease.fencing_token
                    );
                    last_token = lease.fencing_token;
                    if let Some(held) = runs.get(run_id) {
                        assert!(
                            held.end <= now,
                            "run {run_id:?}: token {} granted at {now} while token {} held it until {}",
                            lease.fencing_token,
                            held.token,
                            held.end
                        );
                    }
                    by_token.insert(lease.fencing_token, run_id.clone());
                    runs.insert(
                        run_id.clone(),
                        Held {
                            token: lease.fencing_token,
                            end: lease.expires_at,
                            ttl: lease.expires_at - now,
                        },
                    );
                }
                (Op::Heartbeat { token, .. }, Outcome::Flag(true)) => {
                    let held = runs.get_mut(&by_token[token]).unwrap();
                    assert_eq!(held.token, *token, "a superseded lease was extended");
                    assert!(held.end > now, "an expired lease was extended");
                    held.end = now + held.ttl;
                }
                (Op::Release { token, .. }, Outcome::Flag(true)) => {
                    let held = runs.get_mut(&by_token[token]).unwrap();
                    if held.token == *token {
                        held.end = held.end.min(now);
                    }
                }
                _ => {}
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_agree_with_a_single_registry() {
    let ids = [1, 2, 3];
    let mut cluster = Cluster::start(&ids, 1000.0).await;
    let leader = cluster.leader(&ids).await;

    // A follower refuses writes: they go through the leader.
    let follower = *ids.iter().find(|&&id| id != leader).unwrap();
    assert!(
        cluster.nodes[&follower]
            .write(vec![acquire("x", "w", 5.0)])
            .await
            .is_err()
    );

    let a1 = acquired(&cluster.write(&ids, vec![acquire("a", "w1", 10.0)]).await[0]);
    let refused = cluster
        .write(
            &ids,
            vec![acquire("a", "w2", 10.0), acquire("b", "w1", 3.0)],
        )
        .await;
    assert_eq!(refused[0], Outcome::Acquired(None));
    let b1 = acquired(&refused[1]);
    cluster.set_clocks(1004.0);
    let beats = cluster
        .write(&ids, vec![heartbeat(&a1), heartbeat(&b1)])
        .await;
    // b's lease expired at 1003; a's is extended to 1014.
    assert_eq!(beats, vec![Outcome::Flag(true), Outcome::Flag(false)]);
    let b2 = acquired(&cluster.write(&ids, vec![acquire("b", "w2", 10.0)]).await[0]);
    assert!(b2.fencing_token > b1.fencing_token);
    cluster.set_clocks(1005.0);
    let released = cluster
        .write(
            &ids,
            vec![release(&a1), release(&b1), acquire("a", "w3", 10.0)],
        )
        .await;
    assert_eq!(released[..2], [Outcome::Flag(true), Outcome::Flag(false)]);
    let a2 = acquired(&released[2]);
    assert!(a2.fencing_token > b2.fencing_token);
    // A clock that went back: the stamp does not.
    cluster.set_clocks(900.0);
    let time = cluster.tick(&ids, 16).await;
    assert_eq!(time, 1005.0);

    let leader = cluster.leader(&ids).await;
    cluster.settle(leader, &ids).await;
    let reference = cluster.reference();
    for id in ids {
        assert_eq!(cluster.state_of(id), reference, "node {id}");
    }
    check_fencing(&cluster.history);
    cluster.shutdown().await;
}

/// The leader is cut off (or stopped): the others elect a new one, whose
/// tokens go on above every token issued and whose time does not go back.
async fn failover(kill: bool) {
    let ids = [1, 2, 3];
    let mut cluster = Cluster::start(&ids, 100.0).await;
    let mut first = Vec::new();
    for run in ["r0", "r1", "r2"] {
        first.push(acquired(
            &cluster.write(&ids, vec![acquire(run, "old", 5.0)]).await[0],
        ));
    }
    let old = cluster.leader(&ids).await;
    cluster.settle(old, &ids).await;
    let issued = first.iter().map(|lease| lease.fencing_token).max().unwrap();
    let times: HashMap<NodeId, f64> = ids
        .iter()
        .map(|&id| (id, cluster.nodes[&id].state.lock().registry.time()))
        .collect();

    if kill {
        cluster.router.remove(old);
        cluster.nodes[&old].raft.shutdown().await.unwrap();
    } else {
        cluster.router.isolate(old);
    }
    let rest: Vec<NodeId> = ids.iter().copied().filter(|&id| id != old).collect();
    // The survivors' clocks: one behind the old leader's stamps, one
    // past the leases' expiry.
    cluster.clocks[&rest[0]].set(50.0);
    cluster.clocks[&rest[1]].set(106.0);
    let new = cluster.leader(&rest).await;
    assert_ne!(new, old);
    let time = cluster.tick(&rest, 0).await;
    assert!(
        time >= 100.0,
        "the new leader stamped {time}, before the old one's entries"
    );
    cluster.set_clocks(106.0);

    // The old leases expired at 105: their holders' heartbeats fail, and
    // the runs are taken again with higher tokens.
    let beats = cluster
        .write(&rest, first.iter().map(heartbeat).collect())
        .await;
    assert!(beats.iter().all(|beat| *beat == Outcome::Flag(false)));
    let again = cluster
        .write(
            &rest,
            ["r0", "r1", "r2", "r3"]
                .map(|run| acquire(run, "new", 5.0))
                .to_vec(),
        )
        .await;
    let mut last = issued;
    for outcome in &again {
        let lease = acquired(outcome);
        assert!(
            lease.fencing_token > last,
            "token {} not above {last}",
            lease.fencing_token
        );
        last = lease.fencing_token;
    }

    let mut agree = rest.clone();
    if !kill {
        cluster.router.heal();
        agree.push(old);
    }
    let new = cluster.leader(&rest).await;
    cluster.settle(new, &agree).await;
    // The old leader follows the new one once it hears it.
    if !kill {
        assert_eq!(cluster.leader(&ids).await, new);
    }
    let reference = cluster.reference();
    for &id in &agree {
        assert_eq!(cluster.state_of(id), reference, "node {id}");
        let time = cluster.nodes[&id].state.lock().registry.time();
        assert!(time >= times[&id], "node {id}'s registry time went back");
    }
    check_fencing(&cluster.history);
    if kill {
        cluster.nodes.remove(&old);
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_is_replaced_and_tokens_keep_growing() {
    failover(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_leader_is_replaced_and_tokens_keep_growing() {
    failover(true).await;
}

/// Waits until `check` holds of `id`'s metrics.
async fn until(
    cluster: &Cluster,
    id: NodeId,
    check: impl Fn(&openraft::RaftMetrics<super::types::TypeConfig>) -> bool,
) {
    let reached = async {
        while !check(&cluster.nodes[&id].raft.metrics().borrow_watched()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(WAIT, reached)
        .await
        .expect("metrics never got there");
}

/// Has node `id` snapshot all it has applied and waits until its log up
/// to there is purged (the tests keep none); returns that index.
async fn snapshot_and_purge(cluster: &Cluster, id: NodeId) -> Option<u64> {
    let index = cluster.nodes[&id].state.last_applied_index();
    cluster.nodes[&id].raft.trigger().snapshot().await.unwrap();
    let covered = |m: &openraft::RaftMetrics<_>| {
        m.snapshot.map(|id| id.index) >= index && m.purged.map(|id| id.index) >= index
    };
    until(cluster, id, covered).await;
    index
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_missed_purged_entries_is_sent_a_snapshot() {
    let ids = [1, 2, 3];
    let mut cluster = Cluster::start(&ids, 100.0).await;
    let leader = cluster.leader(&ids).await;
    let behind = *ids.iter().find(|&&id| id != leader).unwrap();
    cluster.router.isolate(behind);
    let rest: Vec<NodeId> = ids.iter().copied().filter(|&id| id != behind).collect();
    let mut leases = Vec::new();
    for run in ["a", "b", "c", "d"] {
        leases.push(acquired(
            &cluster.write(&rest, vec![acquire(run, "w", 5.0)]).await[0],
        ));
    }
    let data = Op::SetData {
        lease_id: leases[0].lease_id().into(),
        token: leases[0].fencing_token,
        value: Bytes::from_static(b"checkpoint"),
        now: None,
    };
    cluster.write(&rest, vec![data, release(&leases[1])]).await;

    let leader = cluster.leader(&rest).await;
    let index = snapshot_and_purge(&cluster, leader).await;

    cluster.router.heal();
    until(&cluster, behind, |m| m.snapshot.map(|id| id.index) >= index).await;
    let leader = cluster.leader(&ids).await;
    cluster.settle(leader, &ids).await;
    let reference = cluster.reference();
    for id in ids {
        assert_eq!(cluster.state_of(id), reference, "node {id}");
    }
    cluster.shutdown().await;
}

#[test]
fn a_snapshot_replays_into_the_same_state() {
    let mut registry = make()();
    registry.set_history_len(4);
    let batch = |time, ops| Batch { time, ops };
    let a = acquired(&apply_batch(&mut registry, &batch(10.0, vec![acquire("a", "w1", 5.0)]))[0]);
    apply_batch(
        &mut registry,
        &batch(
            11.0,
            vec![
                Op::SetData {
                    lease_id: a.lease_id().into(),
                    token: a.fencing_token,
                    value: Bytes::from_static(b"checkpoint"),
                    now: None,
                },
                acquire("b", "w2", 5.0),
                release(&a),
                acquire("a", "w3", 5.0),
            ],
        ),
    );
    let bytes = encode_registry(&registry);
    let mut copy = make()();
    copy.set_history_len(4);
    decode_into(&mut copy, &bytes).unwrap();
    assert_eq!(state(&copy), state(&registry));
    assert_eq!(copy.last_token(), 3);
    // A cut snapshot is refused.
    assert!(decode_into(&mut make()(), &bytes[..bytes.len() - 1]).is_err());
}

#[test]
fn a_tick_moves_time_and_reclaims_a_bounded_count() {
    let mut registry = make()();
    registry.set_retention(1.0);
    for run in ["a", "b", "c"] {
        apply_batch(
            &mut registry,
            &Batch {
                time: 10.0,
                ops: vec![acquire(run, "w", 1.0)],
            },
        );
    }
    let outcomes = super::state_machine::apply_tick(
        &mut registry,
        super::types::Tick {
            time: 20.0,
            reclaim: 2,
        },
    );
    assert_eq!(outcomes, vec![Outcome::Reclaimed(2)]);
    assert_eq!(registry.time(), 20.0);
    assert_eq!(registry.len(), 1);
}

#[test]
#[should_panic(expected = "while token 1 held it")]
fn the_fencing_checker_sees_overlapping_leases() {
    // Two registries that each granted run `a` (a split brain) merged
    // into one history: the second grant overlaps the first.
    let mut one = make()();
    let mut two = make()();
    let first = Batch {
        time: 10.0,
        ops: vec![acquire("a", "w1", 5.0)],
    };
    let second = Batch {
        time: 12.0,
        ops: vec![acquire("a", "w2", 5.0)],
    };
    let mut history = vec![(Command::Batch(first.clone()), apply_batch(&mut one, &first))];
    two.apply(
        &Op::Acquire {
            run_id: Bytes::from_static(b"z"),
            worker_id: Bytes::from_static(b"w"),
            now: None,
            ttl: None,
            lock_delay: None,
            with_data: false,
        },
        1.0,
    );
    history.push((
        Command::Batch(second.clone()),
        apply_batch(&mut two, &second),
    ));
    check_fencing(&history);
}

#[test]
#[should_panic(expected = "repeats")]
fn the_fencing_checker_sees_a_repeated_token() {
    let mut one = make()();
    let mut two = make()();
    let first = Batch {
        time: 10.0,
        ops: vec![acquire("a", "w1", 5.0)],
    };
    let second = Batch {
        time: 20.0,
        ops: vec![acquire("b", "w2", 5.0)],
    };
    let history = vec![
        (Command::Batch(first.clone()), apply_batch(&mut one, &first)),
        (
            Command::Batch(second.clone()),
            apply_batch(&mut two, &second),
        ),
    ];
    check_fencing(&history);
}
