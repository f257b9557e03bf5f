//! The clock-skew rule over the real bus: three nodes on loopback, each
//! with a clock a test can set off (the stamper, the bus's answers to
//! probes and the guard's own readings all follow it). A node 2 s ahead
//! never leads, even when handed the lead; a leader whose clock jumps 2 s
//! ahead hands its lead over.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::{BasicNode, ServerState};
use tokio_util::sync::CancellationToken;

use super::tests::{config, listeners, write_handler};
use super::{Bus, serve};
use crate::cluster::clock_guard::{self, Guard};
use crate::cluster::node::{Node, Storage};
use crate::cluster::stamp::{Clock, system_clock};
use crate::cluster::status::ClockStatus;
use crate::cluster::tests::{WAIT, acquire, make};
use crate::cluster::types::NodeId;

const BOUND: Duration = Duration::from_millis(500);

/// The system clock plus an offset in milliseconds that the test moves.
#[derive(Clone, Default)]
struct Skewable(Arc<AtomicI64>);

impl Skewable {
    fn set(&self, millis: i64) {
        self.0.store(millis, Ordering::SeqCst);
    }

    fn clock(&self) -> Clock {
        let (offset, system) = (self.0.clone(), system_clock());
        Arc::new(move || system() + offset.load(Ordering::SeqCst) as f64 / 1000.0)
    }
}

/// A node with its clock guard running.
struct Guarded {
    node: Arc<Node>,
    clock: Skewable,
    /// What its guard last published.
    status: Arc<Mutex<ClockStatus>>,
}

/// Three nodes (ids 1, 2, 3), node `id`'s clock `offsets[id - 1]` ms off.
async fn three(offsets: [i64; 3], shutdown: &CancellationToken) -> BTreeMap<NodeId, Guarded> {
    let listeners = listeners(3).await;
    let addrs: HashMap<NodeId, String> = (1..)
        .zip(&listeners)
        .map(|(id, listener)| (id, listener.local_addr().unwrap().to_string()))
        .collect();
    let mut nodes = BTreeMap::new();
    for ((id, listener), offset) in (1..).zip(listeners).zip(offsets) {
        let clock = Skewable::default();
        clock.set(offset);
        let bus = Bus::new(id, None).with_peers(addrs.clone());
        let started = Node::start(
            id,
            config(),
            bus.clone(),
            make(),
            clock.clock(),
            Storage::Memory,
        );
        let node = Arc::new(started.await.unwrap());
        let raft = node.raft.clone();
        let guard = Guard::new(clock.clock());
        let status = Arc::new(Mutex::new(ClockStatus::default()));
        let published = status.clone();
        clock_guard::start(
            guard.clone(),
            raft.clone(),
            clock_guard::over_bus(bus),
            BOUND,
            Box::new(move |clock| *published.lock().unwrap() = clock),
            shutdown.clone(),
        );
        let handler = super::Handlers {
            forward: write_handler(node.clone()),
            read_index: crate::cluster::reads::handler(node.clone()),
            queue: None,
            membership: None,
        };
        tokio::spawn(serve(
            listener,
            raft,
            handler,
            guard,
            None,
            shutdown.clone(),
        ));
        let guarded = Guarded {
            node,
            clock,
            status,
        };
        nodes.insert(id, guarded);
    }
    let members: BTreeMap<NodeId, BasicNode> = (addrs.iter())
        .map(|(&id, addr)| (id, BasicNode::new(addr)))
        .collect();
    nodes[&1].node.raft.initialize(members).await.unwrap();
    nodes
}

/// Waits until `check` holds, or fails the test naming `what`.
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(WAIT, async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    waited
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {WAIT:?}"));
}

/// The leader all three agree on, once they do.
async fn agreed(nodes: &BTreeMap<NodeId, Guarded>) -> NodeId {
    let mut found = 0;
    until("a leader agreed on", || {
        let seen: Vec<Option<NodeId>> = (nodes.values())
            .map(|n| n.node.raft.metrics().borrow_watched().current_leader)
            .collect();
        match seen[0] {
            Some(leader) if seen.iter().all(|s| *s == Some(leader)) => {
                found = leader;
                nodes[&leader].node.raft.is_leader()
            }
            _ => false,
        }
    })
    .await;
    found
}

fn skewed(nodes: &BTreeMap<NodeId, Guarded>, id: NodeId) -> bool {
    nodes[&id].status.lock().unwrap().skewed
}

/// Sets `led` if node `id` is ever leader until `stop` is cancelled.
fn watch_lead(
    nodes: &BTreeMap<NodeId, Guarded>,
    id: NodeId,
    stop: CancellationToken,
) -> Arc<AtomicBool> {
    let led = Arc::new(AtomicBool::new(false));
    let (set, mut metrics) = (led.clone(), nodes[&id].node.raft.metrics());
    tokio::spawn(async move {
        loop {
            if metrics.borrow_watched().state == ServerState::Leader {
                set.store(true, Ordering::SeqCst);
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                changed = metrics.changed() => if changed.is_err() { return },
            }
        }
    });
    led
}

/// Writes through whoever leads, again after a refusal, until one takes it.
async fn write(nodes: &BTreeMap<NodeId, Guarded>, run: &str) {
    for _ in 0..100 {
        let leader = agreed(nodes).await;
        if nodes[&leader]
            .node
            .write(vec![acquire(run, "w", 10.0)])
            .await
            .is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no leader took the write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_clock_is_ahead_never_leads_and_a_leader_moved_ahead_hands_over() {
    let shutdown = CancellationToken::new();
    let nodes = three([0, 0, 2000], &shutdown).await;
    let watching = CancellationToken::new();
    let three_led = watch_lead(&nodes, 3, watching.clone());

    // Node 3 finds itself 2 s ahead of the majority; the others find
    // themselves within the bound.
    until("node 3 skewed", || skewed(&nodes, 3)).await;
    let offset = nodes[&3].status.lock().unwrap().offset_ms.unwrap();
    assert!((1900..=2100).contains(&offset), "{offset}");
    until("nodes 1 and 2 judged", || {
        [1, 2].iter().all(|id| {
            let status = *nodes[id].status.lock().unwrap();
            !status.skewed && status.offset_ms.is_some_and(|ms| ms.abs() < 100)
        })
    })
    .await;
    let first = agreed(&nodes).await;
    assert_ne!(first, 3);
    write(&nodes, "a").await;

    // Handed the lead, node 3 declines: the other two elect one of
    // themselves.
    let term = nodes[&first]
        .node
        .raft
        .metrics()
        .borrow_watched()
        .current_term;
    nodes[&first]
        .node
        .raft
        .trigger()
        .transfer_leader(3)
        .await
        .unwrap();
    until("a new term's leader", || {
        let metrics = nodes[&1].node.raft.metrics().borrow_watched().clone();
        metrics.current_term > term && metrics.current_leader.is_some()
    })
    .await;
    let second = agreed(&nodes).await;
    assert_ne!(second, 3);
    write(&nodes, "b").await;
    watching.cancel();
    assert!(!three_led.load(Ordering::SeqCst), "node 3 led");

    // Node 3's clock is set right: it may lead again.
    nodes[&3].clock.set(0);
    until("node 3 within", || !skewed(&nodes, 3)).await;

    // The leader's clock jumps 2 s ahead: it hands its lead over.
    let jumped = agreed(&nodes).await;
    nodes[&jumped].clock.set(2000);
    until("the jumped leader skewed", || skewed(&nodes, jumped)).await;
    until("the lead handed over", || {
        (nodes.values())
            .any(|n| n.node.raft.is_leader() && n.node.raft.metrics().borrow_watched().id != jumped)
    })
    .await;
    let third = agreed(&nodes).await;
    assert_ne!(third, jumped);
    write(&nodes, "c").await;
    assert_ne!(agreed(&nodes).await, jumped);

    shutdown.cancel();
    for guarded in nodes.into_values() {
        let _ = guarded.node.raft.shutdown().await;
    }
}
