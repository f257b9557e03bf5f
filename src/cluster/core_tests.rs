//! The cluster's core task on three in-process nodes: commands sent to any
//! node's [`CoreHandle`] (as connections send them) run on the leader,
//! followers relay, and failover answers say what a client may resend.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::core::{ForwardFailure, Forwarder, Forwarding};
use super::network::{Links, Router};
use super::node::Storage;
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

impl Cluster {
    pub(super) async fn start(ids: &[NodeId]) -> Cluster {
        Cluster::start_with(ids, &[]).await
    }

    /// A cluster whose nodes' clocks are off the machine's by `offsets`
    /// seconds (in `ids`' order; missing ones are 0).
    pub(super) async fn start_with(ids: &[NodeId], offsets: &[f64]) -> Cluster {
        let router = Arc::new(Router::default());
        let forwards: Forwards = Arc::default();
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
            let make = Arc::new(|| Registry::new(10.0, 0));
            let started = start::start(settings, shared.clone(), links, forward, make)
                .await
                .unwrap();
            router.add(id, started.node.raft.clone());
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
    async fn call(&self, id: NodeId, ops: Vec<Op>) -> Vec<CoreAnswer> {
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
    async fn converge(&self, ids: &[NodeId], last_token: u64) {
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

fn acquire(run: &str, worker: &str) -> Op {
    super::tests::acquire(run, worker, 30.0)
}

fn lease(answer: &CoreAnswer) -> Lease {
    match answer {
        CoreAnswer::Outcome(Outcome::Acquired(Some(lease))) => lease.clone(),
        other => panic!("expected a lease, got {other:?}"),
    }
}

fn flag(answer: &CoreAnswer) -> bool {
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
    let first = lease(&cluster.call(old, vec![acquire("a", "w1")]).await[0]);
    cluster.converge(&[1, 2, 3], 1).await;

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
    let command = CoreCommand::AcquireBlocking {
        op,
        timeout,
        client_id: 7,
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
    let held = lease(&cluster.call(leader, vec![acquire("a", "w1")]).await[0]);
    cluster.converge(&[1, 2, 3], 1).await;

    let waiting = block(&cluster, follower, acquire("a", "w2"), None).await;
    // The follower's clients wait for the run: an acquire there gets null.
    let answers = cluster.call(follower, vec![acquire("a", "w3")]).await;
    assert!(matches!(
        answers[0],
        CoreAnswer::Outcome(Outcome::Acquired(None))
    ));
    let waiters = cluster
        .core(follower)
        .call(vec![CoreCommand::Waiters(Bytes::from_static(b"a"))])
        .await;
    assert!(
        matches!(&waiters.answers[0], CoreAnswer::Workers(workers) if workers == &[Bytes::from_static(b"w2")])
    );

    assert!(flag(&cluster.call(leader, vec![release(&held)]).await[0]));
    let granted = tokio::time::timeout(WAIT, waiting).await.unwrap().unwrap();
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
    lease(&cluster.call(leader, vec![acquire("a", "w1")]).await[0]);
    cluster.converge(&[1, 2, 3], 1).await;

    let short = block(
        &cluster,
        follower,
        acquire("a", "w2"),
        Some(Duration::from_millis(200)),
    );
    let granted = tokio::time::timeout(WAIT, short.await)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(granted, crate::core::Granted::TimedOut),
        "{granted:?}"
    );

    let waiting = block(&cluster, follower, acquire("a", "w3"), None).await;
    cluster.router.isolate(leader);
    let granted = tokio::time::timeout(WAIT, waiting).await.unwrap().unwrap();
    assert!(
        matches!(granted, crate::core::Granted::Refused(Refusal::TryAgain(_))),
        "{granted:?}"
    );
}
