//! The cluster's core task on three in-process nodes: commands sent to any
//! node's [`CoreHandle`] (as connections send them) run on the leader,
//! followers relay, and failover answers say what a client may resend.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::core::{ForwardFailure, Forwarder, Forwarding, ToLeader};
use super::leader_queue::{LeaderQueue, QueueHandle};
use super::network::{Links, Router};
use super::node::{Node as RaftNode, Storage};
use super::reads::{ReadIndexAsker, read_index};
use super::start::{self, Settings, Started};
use super::status::{Address, Role};
use super::tests::{heartbeat, release};
use super::types::NodeId;
use crate::config::Config;
use crate::core::{CoreAnswer, CoreCommand, CoreHandle, Refusal};
use crate::registry::{Lease, Op, Outcome, Registry};
use crate::state::{Clock, Shared};

const WAIT: Duration = Duration::from_secs(20);

/// The forwards queue of every node, for the test network's forwarder.
type Forwards = Arc<Mutex<HashMap<NodeId, mpsc::Sender<Forwarding>>>>;

/// Every node, for the test network's read-index calls.
type Nodes = Arc<Mutex<HashMap<NodeId, Arc<RaftNode>>>>;

/// Every node's queue, for the test network's way to the leader's queue.
type Queues = Arc<Mutex<HashMap<NodeId, QueueHandle>>>;

struct Node {
    started: Started,
    shared: Arc<Shared>,
}

pub(super) struct Cluster {
    pub(super) router: Arc<Router>,
    nodes: HashMap<NodeId, Node>,
    forwards: Forwards,
}

fn address(id: NodeId) -> Address {
    let addr: SocketAddr = format!("127.0.0.1:{}", 7000 + id).parse().unwrap();
    let bus_addr: SocketAddr = format!("127.0.0.1:{}", 17000 + id).parse().unwrap();
    Address { id, addr, bus_addr }
}

/// Forwards through the router's links (a cut link loses the forward
/// before it is sent) to the target's core.
fn forwarder(from: NodeId, router: Arc<Router>, forwards: Forwards) -> Forwarder {
    Arc::new(move |to, request| {
        let reachable = router.reachable(from, to);
        let target = forwards.lock().unwrap().get(&to).cloned();
        Box::pin(async move {
            let (Some(target), true) = (target, reachable) else {
                return Err(ForwardFailure::NotSent(format!(
                    "link {from} -> {to} is cut"
                )));
            };
            let (reply, answer) = oneshot::channel();
            let sent = target.send(Forwarding { request, reply }).await;
            sent.map_err(|_| ForwardFailure::NotSent("node stopped".into()))?;
            answer
                .await
                .map_err(|_| ForwardFailure::NoAnswer("node stopped".into()))
        })
    })
}

/// Asks for a read index through the router's links, delayed as they are
/// both ways; a link cut either way loses the call or its answer.
fn asker(from: NodeId, router: Arc<Router>, nodes: Nodes) -> ReadIndexAsker {
    Arc::new(move |to| {
        let router = router.clone();
        let target = nodes.lock().unwrap().get(&to).cloned();
        Box::pin(async move {
            router.wait(from, to).await;
            let (Some(target), true) = (target, router.reachable(from, to)) else {
                return Err(format!("link {from} -> {to} is cut"));
            };
            let index = read_index(&target).await?;
            router.wait(to, from).await;
            match router.reachable(to, from) {
                true => Ok(index),
                false => Err(format!("link {to} -> {from} is cut")),
            }
        })
    })
}

/// The way to the leader's queue through the router's links (a cut link
/// loses the request before it is sent); the conversation itself is not
/// cut with the link.
fn leader_queue(from: NodeId, router: Arc<Router>, queues: Queues) -> LeaderQueue {
    let target = move |to: NodeId| {
        let queue = queues.lock().unwrap().get(&to).cloned();
        match (queue, router.reachable(from, to)) {
            (Some(queue), true) => Ok(queue),
            _ => Err(ForwardFailure::NotSent(format!(
                "link {from} -> {to} is cut"
            ))),
        }
    };
    let target = Arc::new(target);
    let asking = target.clone();
    LeaderQueue {
        block: Arc::new(move |to, block| {
            let queue = target(to);
            Box::pin(async move { Ok(queue?.block(block)) })
        }),
        waiters: Arc::new(move |to, run| {
            let queue = asking(to);
            Box::pin(async move {
                (queue?.waiters(run).await)
                    .map_err(|refused| ForwardFailure::NoAnswer(format!("{refused:?}")))
            })
        }),
    }
}

impl Cluster {
    pub(super) async fn start(ids: &[NodeId]) -> Cluster {
        Cluster::start_with(ids, &[]).await
    }

    /// A cluster whose nodes' clocks are off the machine's by `offsets`
    /// seconds (in `ids`' order; missing ones are 0).
    pub(super) async fn start_with(ids: &[NodeId], offsets: &[f64]) -> Cluster {
        let router = Arc::new(Router::default());
        let forwards: Forwards = Arc::default();
        let raft_nodes: Nodes = Arc::default();
        let queues: Queues = Arc::default();
        let mut nodes = HashMap::new();
        for (index, &id) in ids.iter().enumerate() {
            let offset = offsets.get(index).copied().unwrap_or(0.0);
            let clock = Clock::Tokio {
                start: Clock::System.now() + offset,
                origin: tokio::time::Instant::now(),
            };
            let settings = Settings {
                id,
                addresses: ids.iter().map(|&id| address(id)).collect(),
                heartbeat: Duration::from_millis(100),
                election_timeout: Duration::from_millis(800),
                patience: Duration::from_secs(3),
                storage: Storage::Memory,
                join: false,
            };
            // lease-max-skew off: the linearizability test sends `now`s far
            // ahead of the clock.
            let config = Config {
                lease_max_skew: 0.0,
                ..Config::default()
            };
            let shared = Arc::new(Shared::new(config, Vec::new(), Vec::new(), clock));
            let links = Links {
                from: id,
                router: router.clone(),
            };
            let forward = forwarder(id, router.clone(), forwards.clone());
            let ask = asker(id, router.clone(), raft_nodes.clone());
            let make = Arc::new(|| Registry::new(10.0, 0));
            let queue = leader_queue(id, router.clone(), queues.clone());
            let started = start::start(
                settings,
                shared.clone(),
                links,
                ToLeader {
                    forward,
                    read_index: ask,
                    queue,
                },
                make,
            )
            .await
            .unwrap();
            queues.lock().unwrap().insert(id, started.queue.clone());
            router.add(id, started.node.raft.clone());
            (raft_nodes.lock().unwrap()).insert(id, started.node.clone());
            forwards
                .lock()
                .unwrap()
                .insert(id, started.forwards.clone());
            nodes.insert(id, Node { started, shared });
        }
        Cluster {
            router,
            nodes,
            forwards,
        }
    }

    /// Whether node `id` leads now.
    pub(super) fn nodes_leads(&self, id: NodeId) -> bool {
        self.nodes[&id].started.node.raft.is_leader()
    }

    pub(super) fn core(&self, id: NodeId) -> &CoreHandle {
        &self.nodes[&id].started.core
    }

    /// Node `id`'s Raft and replica.
    pub(super) fn node(&self, id: NodeId) -> &Arc<RaftNode> {
        &self.nodes[&id].started.node
    }

    /// The leader every node of `among` agrees on.
    pub(super) async fn leader(&self, among: &[NodeId]) -> NodeId {
        let agreed = async {
            loop {
                let seen: Vec<Option<NodeId>> = (among.iter())
                    .map(|id| self.nodes[id].shared.cluster().and_then(|s| s.leader))
                    .collect();
                if let Some(Some(leader)) = seen.first()
                    && among.contains(leader)
                    && seen.iter().all(|seen| *seen == Some(*leader))
                    && self.nodes[leader].started.node.raft.is_leader()
                {
                    return *leader;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(WAIT, agreed).await.expect("no leader")
    }

    /// Sends `ops` to node `id`'s core as one batch; a refusal that says
    /// the command did not happen is sent again (a leader just elected may
    /// refuse a few).
    pub(super) async fn call(&self, id: NodeId, ops: Vec<Op>) -> Vec<CoreAnswer> {
        for _ in 0..100 {
            let commands = ops.iter().cloned().map(CoreCommand::Op).collect();
            let answers = self.core(id).call(commands).await.answers;
            if !answers
                .iter()
                .any(|answer| matches!(answer, CoreAnswer::Refused(Refusal::TryAgain(_))))
            {
                return answers;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("node {id} kept refusing {ops:?}");
    }

    /// Waits until every node's registry has applied `last_token`.
    pub(super) async fn converge(&self, ids: &[NodeId], last_token: u64) {
        let converged = async {
            while !ids.iter().all(|id| {
                let replica = self.nodes[id].started.node.state.lock();
                replica.registry.last_token() == last_token
            }) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(WAIT, converged)
            .await
            .expect("replicas did not converge");
    }
}

pub(super) fn acquire(run: &str, worker: &str) -> Op {
    super::tests::acquire(run, worker, 30.0)
}

pub(super) fn lease(answer: &CoreAnswer) -> Lease {
    match answer {
        CoreAnswer::Outcome(Outcome::Acquired(Some(lease))) => lease.clone(),
        other => panic!("expected a lease, got {other:?}"),
    }
}

pub(super) fn flag(answer: &CoreAnswer) -> bool {
    match answer {
        CoreAnswer::Outcome(Outcome::Flag(done)) => *done,
        other => panic!("expected a flag, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_on_any_node_run_on_the_leader() {
    let cluster = Cluster::start(&[1, 2, 3]).await;
    let leader = cluster.leader(&[1, 2, 3]).await;
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();

    let first = lease(&cluster.call(leader, vec![acquire("a", "w1")]).await[0]);
    let answers = cluster
        .call(follower, vec![acquire("b", "w2"), acquire("a", "w3")])
        .await;
    let second = lease(&answers[0]);
    assert_eq!((first.fencing_token, second.fencing_token), (1, 2));
    assert!(
        matches!(answers[1], CoreAnswer::Outcome(Outcome::Acquired(None))),
        "run a is held: {:?}",
        answers[1]
    );
    let beats = cluster
        .call(follower, vec![heartbeat(&first), heartbeat(&second)])
        .await;
    assert!(flag(&beats[0]) && flag(&beats[1]));
    cluster.converge(&[1, 2, 3], 2).await;

    let status = cluster.nodes[&follower].shared.cluster().unwrap();
    assert_eq!(status.role, Role::Follower);
    assert_eq!(status.leader, Some(leader));
    assert_eq!(status.members.len(), 3);
    let status = cluster.nodes[&leader].shared.cluster().unwrap();
    assert_eq!(status.role, Role::Leader);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_leader_answers_uncertain_and_the_rest_go_on() {
    let cluster = Cluster::start(&[1, 2, 3]).await;
    let old = cluster.leader(&[1, 2, 3]).await;
    let first = hold_a(&cluster, old, "w1").await;

    cluster.router.isolate(old);
    // Appended to the old leader's log, never committed: its fate is
    // unknown to the client.
    let answers = cluster
        .core(old)
        .call(vec![CoreCommand::Op(acquire("b", "w2"))])
        .await;
    assert!(
        matches!(
            &answers.answers[0],
            CoreAnswer::Refused(Refusal::Uncertain(_))
        ),
        "{:?}",
        answers.answers[0]
    );

    let rest: Vec<NodeId> = [1, 2, 3].into_iter().filter(|&id| id != old).collect();
    let new = cluster.leader(&rest).await;
    assert_ne!(new, old);
    let follower = rest.into_iter().find(|&id| id != new).unwrap();
    let taken = lease(&cluster.call(follower, vec![acquire("c", "w3")]).await[0]);
    assert_eq!(
        taken.fencing_token, 2,
        "the uncommitted acquire took no token"
    );
    assert!(flag(&cluster.call(new, vec![heartbeat(&first)]).await[0]));

    cluster.router.heal();
    cluster.converge(&[1, 2, 3], 2).await;
    let replica = cluster.nodes[&old].started.node.state.lock();
    assert_eq!(
        replica.registry.len(),
        2,
        "the old leader's entry was dropped"
    );
    drop(replica);
    drop(cluster.forwards);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_without_a_reachable_leader_says_try_again() {
    let cluster = Cluster::start(&[1, 2, 3]).await;
    let leader = cluster.leader(&[1, 2, 3]).await;
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    cluster.router.cut(follower, leader);
    let answers = cluster
        .core(follower)
        .call(vec![CoreCommand::Op(acquire("a", "w1"))])
        .await;
    assert!(
        matches!(
            &answers.answers[0],
            CoreAnswer::Refused(Refusal::TryAgain(_))
        ),
        "{:?}",
        answers.answers[0]
    );
    let replica = cluster.nodes[&leader].started.node.state.lock();
    assert_eq!(replica.registry.len(), 0, "nothing reached the leader");
}

/// A blocked acquire sent to node `id`: its receiver.
async fn block(
    cluster: &Cluster,
    id: NodeId,
    op: Op,
    timeout: Option<Duration>,
) -> oneshot::Receiver<crate::core::Granted> {
    block_as(cluster, id, op, timeout, 7).await
}

/// A blocked acquire sent to node `id` by client `client_id`.
async fn block_as(
    cluster: &Cluster,
    id: NodeId,
    op: Op,
    timeout: Option<Duration>,
    client_id: u64,
) -> oneshot::Receiver<crate::core::Granted> {
    let command = CoreCommand::AcquireBlocking {
        op,
        timeout,
        client_id,
    };
    match cluster.core(id).call(vec![command]).await.answers.pop() {
        Some(CoreAnswer::Blocked(receiver)) => receiver,
        other => panic!("not blocked: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_acquire_on_a_follower_gets_the_run_when_it_is_released() {
    let cluster = Cluster::start(&[1, 2, 3]).await;
    let leader = cluster.leader(&[1, 2, 3]).await;
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    let held = hold_a(&cluster, leader, "w1").await;

    let waiting = block(&cluster, follower, acquire("a", "w2"), None).await;
    // The follower's clients wait for the run: an acquire there gets null.
    let answers = cluster.call(follower, vec![acquire("a", "w3")]).await;
    assert!(matches!(
        answers[0],
        CoreAnswer::Outcome(Outcome::Acquired(None))
    ));
    // The waiter reaches the leader's queue over the network, after the
    // follower answered that it blocks: WAITERS (the leader's queue, on any
    // node) shows it once it is there.
    queue_is(&cluster, follower, "a", &["w2"]).await;

    assert!(flag(&cluster.call(leader, vec![release(&held)]).await[0]));
    let granted = answer(waiting).await;
    match granted {
        crate::core::Granted::Lease(lease, None) => {
            assert_eq!(
                (lease.worker_id.as_ref(), lease.fencing_token),
                (&b"w2"[..], 2)
            );
        }
        other => panic!("not granted: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_acquire_times_out_and_blocked_clients_hear_of_a_new_leader() {
    let cluster = Cluster::start(&[1, 2, 3]).await;
    let leader = cluster.leader(&[1, 2, 3]).await;
    let follower = [1, 2, 3].into_iter().find(|&id| id != leader).unwrap();
    hold_a(&cluster, leader, "w1").await;

    let short = block(
        &cluster,
        follower,
        acquire("a", "w2"),
        Some(Duration::from_millis(200)),
    );
    let granted = answer(short.await).await;
    assert!(
        matches!(granted, crate::core::Granted::TimedOut),
        "{granted:?}"
    );

    let waiting = block(&cluster, follower, acquire("a", "w3"), None).await;
    cluster.router.isolate(leader);
    let granted = answer(waiting).await;
    assert!(
        matches!(granted, crate::core::Granted::Refused(Refusal::TryAgain(_))),
        "{granted:?}"
    );
}

/// `LEASE.WAITERS run` on node `id`.
async fn waiters(cluster: &Cluster, id: NodeId, run: &'static str) -> Vec<Bytes> {
    let command = CoreCommand::Waiters(Bytes::from_static(run.as_bytes()));
    match cluster.core(id).call(vec![command]).await.answers.pop() {
        Some(CoreAnswer::Workers(workers)) => workers,
        other => panic!("not workers: {other:?}"),
    }
}

/// Waits until the leader's queue for `run` is `expected` (as node `id`
/// reports it).
async fn queue_is(cluster: &Cluster, id: NodeId, run: &'static str, expected: &[&str]) {
    let expected: Vec<Bytes> = (expected.iter())
        .map(|worker| Bytes::copy_from_slice(worker.as_bytes()))
        .collect();
    let seen = async {
        while waiters(cluster, id, run).await != expected {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(WAIT, seen)
        .await
        .unwrap_or_else(|_| panic!("node {id} never saw {expected:?} waiting for {run}"));
}

/// What a blocked acquire was answered, within [`WAIT`].
async fn answer(receiver: oneshot::Receiver<crate::core::Granted>) -> crate::core::Granted {
    let answered = tokio::time::timeout(WAIT, receiver).await;
    answered
        .expect("no answer in time")
        .expect("answer dropped")
}

/// The lease a blocked acquire was granted.
async fn granted(receiver: oneshot::Receiver<crate::core::Granted>) -> Lease {
    match answer(receiver).await {
        crate::core::Granted::Lease(lease, None) => lease,
        other => panic!("not granted: {other:?}"),
    }
}

/// `worker` takes run "a" through node `id`, and every node applies it.
async fn hold_a(cluster: &Cluster, id: NodeId, worker: &str) -> Lease {
    let held = lease(&cluster.call(id, vec![acquire("a", worker)]).await[0]);
    cluster.converge(&[1, 2, 3], 1).await;
    held
}

fn others(leader: NodeId) -> (NodeId, NodeId) {
    let mut rest = [1, 2, 3].into_iter().filter(|&id| id != leader);
    (rest.next().unwrap(), rest.next().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_on_the_followers_and_the_leader_are_granted_in_arrival_order() {
    let cluster = Cluster::start(&[1, 2, 3]).await;
    let leader = cluster.leader(&[1, 2, 3]).await;
    let (one, two) = others(leader);
    let mut held = hold_a(&cluster, leader, "w0").await;

    // Each joins once the one before is in the leader's queue.
    let order = [(one, "w1"), (leader, "w2"), (two, "w3"), (one, "w4")];
    let mut blocked = Vec::new();
    let mut queued = Vec::new();
    for (client, (node, worker)) in order.into_iter().enumerate() {
        let waiting = block_as(
            &cluster,
            node,
            acquire("a", worker),
            None,
            client as u64 + 1,
        );
        blocked.push(waiting.await);
        queued.push(worker);
        queue_is(&cluster, leader, "a", &queued).await;
    }
    // Every node reads the leader's queue; no node lets an ordinary
    // acquire jump it.
    for node in [1, 2, 3] {
        queue_is(&cluster, node, "a", &queued).await;
        let answers = cluster.call(node, vec![acquire("a", "jumper")]).await;
        assert!(
            matches!(answers[0], CoreAnswer::Outcome(Outcome::Acquired(None))),
            "node {node}: {:?}",
            answers[0]
        );
    }

    // Released from a follower each time: the head of the queue gets it.
    for (waiting, expected) in blocked.into_iter().zip(["w1", "w2", "w3", "w4"]) {
        assert!(flag(&cluster.call(two, vec![release(&held)]).await[0]));
        let lease = granted(waiting).await;
        assert_eq!(lease.worker_id, Bytes::from_static(expected.as_bytes()));
        assert_eq!(lease.fencing_token, held.fencing_token + 1);
        held = lease;
    }
    queue_is(&cluster, one, "a", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_waiter_that_times_out_or_leaves_is_never_granted() {
    let cluster = Cluster::start(&[1, 2, 3]).await;
    let leader = cluster.leader(&[1, 2, 3]).await;
    let (one, two) = others(leader);
    let held = hold_a(&cluster, leader, "w0").await;

    // Times out: null, and it leaves the leader's queue.
    let short = block_as(
        &cluster,
        one,
        acquire("a", "w1"),
        Some(Duration::from_millis(300)),
        1,
    );
    let short = short.await;
    queue_is(&cluster, leader, "a", &["w1"]).await;
    let timed_out = answer(short).await;
    assert!(
        matches!(timed_out, crate::core::Granted::TimedOut),
        "{timed_out:?}"
    );
    queue_is(&cluster, leader, "a", &[]).await;

    // Leaves (its connection closes): out of the queue too.
    let gone = block_as(&cluster, two, acquire("a", "w2"), None, 2).await;
    queue_is(&cluster, leader, "a", &["w2"]).await;
    drop(gone);
    queue_is(&cluster, leader, "a", &[]).await;

    // CLIENT UNBLOCK on its follower: answered at once, out of the queue.
    let unblocked = block_as(&cluster, one, acquire("a", "w3"), None, 3).await;
    queue_is(&cluster, leader, "a", &["w3"]).await;
    let unblock = CoreCommand::Unblock {
        client_id: 3,
        error: true,
    };
    let answers = cluster.core(one).call(vec![unblock]).await.answers;
    assert!(flag(&answers[0]));
    let answered = answer(unblocked).await;
    assert!(
        matches!(answered, crate::core::Granted::Unblocked),
        "{answered:?}"
    );
    queue_is(&cluster, leader, "a", &[]).await;

    // Nobody took a token: the next acquire after the release gets 2.
    assert!(flag(&cluster.call(leader, vec![release(&held)]).await[0]));
    let next = lease(&cluster.call(two, vec![acquire("a", "w4")]).await[0]);
    assert_eq!(next.fencing_token, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_clients_of_every_node_hear_try_again_when_the_leader_changes() {
    let cluster = Cluster::start(&[1, 2, 3]).await;
    let old = cluster.leader(&[1, 2, 3]).await;
    let (one, two) = others(old);
    hold_a(&cluster, old, "w0").await;

    let on_leader = block_as(&cluster, old, acquire("a", "w1"), None, 1).await;
    let on_follower = block_as(&cluster, one, acquire("a", "w2"), None, 2).await;
    queue_is(&cluster, old, "a", &["w1", "w2"]).await;

    cluster.router.isolate(old);
    let answered = answer(on_follower).await;
    assert!(
        matches!(
            answered,
            crate::core::Granted::Refused(Refusal::TryAgain(_))
        ),
        "{answered:?}"
    );
    let new = cluster.leader(&[one, two]).await;
    // The new leader's queue starts empty; blocking again works there.
    queue_is(&cluster, new, "a", &[]).await;
    cluster.router.heal();
    // The old leader hears of the new one: its queue is answered.
    let answered = answer(on_leader).await;
    assert!(
        matches!(
            answered,
            crate::core::Granted::Refused(Refusal::TryAgain(_))
        ),
        "{answered:?}"
    );
}
