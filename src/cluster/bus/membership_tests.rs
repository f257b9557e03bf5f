//! Membership changes over the bus: a node sends `CLUSTER ADDNODE|DELNODE`
//! to the leader on a connection of its own, with the change's deadline
//! (not a forward's), and gets the leader's answer back as it was.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::wire::{Kind, Request};
use super::{Bus, ForwardError, Handlers, MembershipCall, MembershipHandler, serve};
use crate::cluster::clock_guard::Guard;
use crate::cluster::node::Node;
use crate::cluster::tests::{TestClock, lone_node};
use crate::command::ClusterChange;

/// A server whose membership handler is `membership`; its address, and
/// what stops it.
async fn server(membership: Option<MembershipHandler>) -> (String, CancellationToken, Node) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let clock = TestClock::default();
    let node = lone_node(&clock).await;
    let handlers = Handlers {
        forward: Arc::new(|_| async { Vec::new() }.boxed()),
        read_index: Arc::new(|| async { Err("no reads in this test".to_string()) }.boxed()),
        queue: None,
        membership,
    };
    let shutdown = CancellationToken::new();
    let guard = Guard::new(clock.clock());
    let raft = node.raft.clone();
    tokio::spawn(serve(
        listener,
        raft,
        handlers,
        guard,
        None,
        shutdown.clone(),
    ));
    (addr, shutdown, node)
}

/// Adds after `delay`; refuses every removal; counts the notices of its
/// own removal in `told`.
fn slow_leader(delay: Duration, told: Arc<AtomicUsize>) -> MembershipHandler {
    Arc::new(move |call| {
        let told = told.clone();
        async move {
            tokio::time::sleep(delay).await;
            match call {
                MembershipCall::Change(ClusterChange::Add { .. }) => Ok(()),
                MembershipCall::Change(ClusterChange::Remove { id }) => {
                    Err(format!("ERR node {id} is not a member of this cluster"))
                }
                MembershipCall::Removed => {
                    told.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                }
            }
        }
        .boxed()
    })
}

#[tokio::test]
async fn a_change_is_answered_by_the_leader_past_a_forwards_deadline() {
    let told = Arc::new(AtomicUsize::new(0));
    let leader = slow_leader(Duration::from_millis(600), told.clone());
    let (addr, shutdown, node) = server(Some(leader)).await;
    // A forward would have given up after 100 ms: a change has its own
    // deadline.
    let bus = Bus::new(1, None).with_forward_timeout(Duration::from_millis(100));
    let add = ClusterChange::Add {
        id: 4,
        address: "127.0.0.1:7004".into(),
    };
    let added = bus.membership(&addr, add, Duration::from_secs(10)).await;
    assert_eq!(added, Ok(Ok(())));
    // The leader's refusal comes back word for word.
    let removed = bus
        .membership(
            &addr,
            ClusterChange::Remove { id: 7 },
            Duration::from_secs(10),
        )
        .await;
    let expected = "ERR node 7 is not a member of this cluster";
    assert_eq!(removed, Ok(Err(expected.to_string())));
    // Past the change's own deadline: sent, no answer (it may be made).
    let late = bus
        .membership(
            &addr,
            ClusterChange::Remove { id: 7 },
            Duration::from_millis(200),
        )
        .await;
    assert!(matches!(late, Err(ForwardError::NoAnswer(_))), "{late:?}");
    // A removed node is told, on the same kind of connection (with a
    // forward's deadline: this handler takes 600 ms).
    assert_eq!(Bus::new(1, None).removed(&addr).await, Ok(()));
    assert_eq!(told.load(Ordering::Relaxed), 1);
    shutdown.cancel();
    node.raft.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_node_that_takes_no_changes_says_so() {
    let (addr, shutdown, node) = server(None).await;
    let bus = Bus::new(1, None);
    let change = ClusterChange::Remove { id: 2 };
    let answer = bus.membership(&addr, change, Duration::from_secs(10)).await;
    let refused = answer.unwrap().unwrap_err();
    assert!(refused.contains("takes no membership changes"), "{refused}");
    shutdown.cancel();
    node.raft.shutdown().await.unwrap();
}

#[tokio::test]
async fn nobody_listening_means_not_sent() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let change = ClusterChange::Remove { id: 2 };
    let sent = (Bus::new(1, None))
        .membership(&addr, change, Duration::from_secs(10))
        .await;
    assert!(matches!(sent, Err(ForwardError::NotSent(_))), "{sent:?}");
}

#[test]
fn a_change_rides_only_its_own_connections() {
    let change = Request::Membership(ClusterChange::Remove { id: 2 });
    for call in [change, Request::Removed] {
        assert!(call.goes_on(Kind::Membership));
        for other in [Kind::Forward, Kind::Vote, Kind::Append, Kind::Block] {
            assert!(!call.goes_on(other), "{other:?}");
        }
    }
    assert!(!Request::ReadIndex.goes_on(Kind::Membership));
}
