//! The bus: its framing byte by byte, its handshake with and without a
//! secret, and three nodes replicating over loopback TCP.

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use openraft::async_runtime::WatchReceiver;
use openraft::error::RPCError;
use openraft::network::RPCOption;
use openraft::raft::AppendEntriesRequest;
use openraft::{BasicNode, Config, RaftNetworkFactory, RaftNetworkV2};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_util::sync::CancellationToken;

use super::frame::{FrameError, MAX_FRAME, MAX_HANDSHAKE_FRAME, encode, read_frame, write_frame};
use super::handshake::{HandshakeError, Refusal, admit, introduce, prove};
use super::wire::{Challenge, Hello, Kind, PROTOCOL, Proof, Request, Response, Verdict};
use super::{Bus, ForwardError, ForwardHandler, Handlers, serve, serve_tls};
use crate::cluster::clock_guard::Guard;
use crate::cluster::node::{Node, Storage};
use crate::cluster::tests::{
    RETRIES, RETRY_AFTER, TestClock, WAIT, acquire, acquired, make, retry_or, state,
};
use crate::cluster::types::{ClusterRefusal, Forward, Forwarded, NodeId, TypeConfig};
use crate::registry::Outcome;

fn forward(runs: &[&str]) -> Forward {
    Forward {
        ops: runs.iter().map(|run| acquire(run, "w", 10.0)).collect(),
    }
}

// Framing.

#[tokio::test]
async fn frames_survive_every_split_of_the_stream() {
    let first = forward(&["a"]);
    let second = forward(&["b", "c"]);
    let mut bytes = encode(&first).unwrap();
    bytes.extend(encode(&second).unwrap());
    for at in 0..=bytes.len() {
        let mut reader = (&bytes[..at]).chain(&bytes[at..]);
        let read: Forward = read_frame(&mut reader, 1024).await.unwrap();
        assert_eq!(read, first, "split at {at}");
        let read: Forward = read_frame(&mut reader, 1024).await.unwrap();
        assert_eq!(read, second, "split at {at}");
        let end = read_frame::<_, Forward>(&mut reader, 1024).await;
        assert!(matches!(end, Err(FrameError::Closed)), "split at {at}");
    }
}

#[tokio::test]
async fn a_cut_frame_is_an_error_not_a_close() {
    let bytes = encode(&forward(&["a"])).unwrap();
    for at in 1..bytes.len() {
        let read = read_frame::<_, Forward>(&mut &bytes[..at], 1024).await;
        match read {
            Err(FrameError::Io(error)) => {
                assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof, "cut at {at}")
            }
            other => panic!("cut at {at}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_corrupt_frame_is_refused() {
    let bytes = encode(&forward(&["a"])).unwrap();
    // Any flipped bit of the CRC or the payload.
    for at in 4..bytes.len() {
        let mut corrupt = bytes.clone();
        corrupt[at] ^= 0x10;
        let read = read_frame::<_, Forward>(&mut &corrupt[..], 1024).await;
        assert!(matches!(read, Err(FrameError::Corrupt { .. })), "byte {at}");
    }
}

#[tokio::test]
async fn an_oversized_frame_is_refused_before_its_payload() {
    // A header alone: reading any payload would hit the end instead.
    let mut header = 2000u32.to_be_bytes().to_vec();
    header.extend(0u32.to_be_bytes());
    let read = read_frame::<_, Forward>(&mut &header[..], 1024).await;
    assert!(matches!(
        read,
        Err(FrameError::TooLong {
            len: 2000,
            max: 1024
        })
    ));
}

#[tokio::test]
async fn a_large_payload_arrives_whole() {
    let data = Bytes::from((0..300_000u32).map(|i| i as u8).collect::<Vec<u8>>());
    let (mut a, mut b) = duplex(4096);
    let sent = data.clone();
    let writer = tokio::spawn(async move { write_frame(&mut a, &sent).await.unwrap() });
    let read: Bytes = read_frame(&mut b, 1 << 20).await.unwrap();
    writer.await.unwrap();
    assert_eq!(read, data);
}

// Handshake.

/// Both sides of a handshake over a pipe: the client's result, the
/// server's, and whether the server's end was closed after it.
async fn handshake(
    server_secret: Option<&'static [u8]>,
    client_secret: Option<&'static [u8]>,
) -> (Result<NodeId, HandshakeError>, Result<Hello, Refusal>) {
    let (mut client, mut server) = duplex(4096);
    let hello = Hello {
        protocol: PROTOCOL,
        from: 2,
        kind: Kind::Append,
    };
    let serving = tokio::spawn(async move { admit(&mut server, 1, server_secret).await });
    let introduced = introduce(&mut client, hello, client_secret, Some(1)).await;
    (introduced, serving.await.unwrap())
}

#[tokio::test]
async fn the_right_secret_is_accepted() {
    let (client, server) = handshake(Some(b"s3cret"), Some(b"s3cret")).await;
    assert_eq!(client.unwrap(), 1);
    assert_eq!(server.unwrap().from, 2);
}

#[tokio::test]
async fn a_wrong_or_missing_secret_is_refused() {
    for client_secret in [Some(&b"guess"[..]), None] {
        let (client, server) = handshake(Some(b"s3cret"), client_secret).await;
        let Err(HandshakeError::Refused(reason)) = client else {
            panic!("{client:?}");
        };
        assert!(reason.contains("cluster-secret"), "{reason}");
        assert!(matches!(server, Err(Refusal::Denied(_))), "{server:?}");
    }
}

#[tokio::test]
async fn without_a_secret_no_proof_is_asked() {
    for client_secret in [Some(&b"s3cret"[..]), None] {
        let (client, server) = handshake(None, client_secret).await;
        assert_eq!(client.unwrap(), 1);
        assert!(server.is_ok());
    }
}

#[tokio::test]
async fn another_node_at_the_address_is_refused() {
    let (mut client, mut server) = duplex(4096);
    let serving = tokio::spawn(async move { admit(&mut server, 3, None).await });
    let hello = Hello {
        protocol: PROTOCOL,
        from: 2,
        kind: Kind::Vote,
    };
    let introduced = introduce(&mut client, hello, None, Some(1)).await;
    assert!(matches!(
        introduced,
        Err(HandshakeError::WrongNode {
            expected: 1,
            found: 3
        })
    ));
    drop(client);
    // The server saw the client go.
    assert!(matches!(serving.await.unwrap(), Err(Refusal::Frame(_))));
}

#[test]
fn refused_peers_are_logged_once_a_minute() {
    let warned = super::server::Warned::default();
    let a = "127.0.0.1".parse().unwrap();
    let b = "127.0.0.2".parse().unwrap();
    assert!(warned.first_in_a_while(a));
    assert!(!warned.first_in_a_while(a));
    assert!(warned.first_in_a_while(b));
}

// Nodes over loopback TCP.

/// The in-process tests' Raft settings: generous for a loaded machine.
pub(super) fn config() -> Arc<Config> {
    crate::cluster::tests::config()
}

/// A node, its bus, and its bus server (stopped by `shutdown`).
struct BusNode {
    node: Arc<Node>,
    bus: Bus,
    addr: String,
    shutdown: CancellationToken,
    /// `None` once stopped.
    server: Option<JoinHandle<()>>,
}

impl BusNode {
    /// Starts node `id` serving on `listener` with the forward handler
    /// `handler` makes for it (and read indexes as a node does).
    async fn start(
        id: NodeId,
        listener: TcpListener,
        secret: Option<Bytes>,
        tls: Option<&Pki>,
        handler: impl FnOnce(Arc<Node>) -> ForwardHandler,
    ) -> BusNode {
        let addr = listener.local_addr().unwrap().to_string();
        let clock = TestClock::default();
        clock.set(1000.0);
        let mut bus = Bus::new(id, secret.clone());
        if let Some(pki) = tls {
            bus = bus.with_tls(pki.connector(true));
        }
        let node = Node::start(
            id,
            config(),
            bus.clone(),
            make(),
            clock.clock(),
            Storage::Memory,
        )
        .await
        .unwrap();
        let node = Arc::new(node);
        let shutdown = CancellationToken::new();
        let handler = Handlers {
            forward: handler(node.clone()),
            read_index: crate::cluster::reads::handler(node.clone()),
            queue: None,
            membership: None,
        };
        let raft = node.raft.clone();
        // No guard runs on it: it never refuses to lead.
        let guard = Guard::new(clock.clock());
        let serving = match tls {
            Some(pki) => {
                let acceptor = pki.acceptor();
                let shutdown = shutdown.clone();
                serve_tls(listener, raft, handler, guard, secret, acceptor, shutdown).boxed()
            }
            None => serve(listener, raft, handler, guard, secret, shutdown.clone()).boxed(),
        };
        let server = Some(tokio::spawn(serving));
        BusNode {
            node,
            bus,
            addr,
            shutdown,
            server,
        }
    }

    async fn stop_serving(&mut self) {
        self.shutdown.cancel();
        if let Some(server) = self.server.take() {
            server.await.unwrap();
        }
    }
}

/// Runs forwarded ops as one write here; refused if this node does not
/// lead.
pub(super) fn write_handler(node: Arc<Node>) -> ForwardHandler {
    Arc::new(move |forward: Forward| {
        let node = node.clone();
        async move {
            let count = forward.ops.len();
            match node.write(forward.ops).await {
                Ok((_, outcomes)) => outcomes.into_iter().map(Forwarded::Outcome).collect(),
                Err(error) => {
                    let refusal = ClusterRefusal::TryAgain(error.to_string());
                    vec![Forwarded::Refused(refusal); count]
                }
            }
        }
        .boxed()
    })
}

pub(super) async fn listeners(count: usize) -> Vec<TcpListener> {
    let mut listeners = Vec::new();
    for _ in 0..count {
        listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    listeners
}

/// Three nodes (ids 1, 2, 3) whose membership names their bus addresses.
async fn three(secret: Option<Bytes>, tls: Option<&Pki>) -> BTreeMap<NodeId, BusNode> {
    let mut nodes = BTreeMap::new();
    for (id, listener) in (1..).zip(listeners(3).await) {
        let node = BusNode::start(id, listener, secret.clone(), tls, write_handler).await;
        nodes.insert(id, node);
    }
    let members: BTreeMap<NodeId, BasicNode> = nodes
        .iter()
        .map(|(&id, node)| (id, BasicNode::new(&node.addr)))
        .collect();
    nodes[&1].node.raft.initialize(members).await.unwrap();
    nodes
}

/// The leader every node in `among` agrees on.
async fn leader(nodes: &BTreeMap<NodeId, BusNode>, among: &[NodeId]) -> NodeId {
    let agreed = async {
        loop {
            let seen: Vec<Option<NodeId>> = among
                .iter()
                .map(|id| {
                    nodes[id]
                        .node
                        .raft
                        .metrics()
                        .borrow_watched()
                        .current_leader
                })
                .collect();
            if let Some(Some(leader)) = seen.first()
                && among.contains(leader)
                && seen.iter().all(|s| *s == Some(*leader))
                && nodes[leader].node.raft.is_leader()
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

/// Writes `ops` through the leader of `among`, again if it was refused
/// before being appended (the leader changed).
async fn write(
    nodes: &BTreeMap<NodeId, BusNode>,
    among: &[NodeId],
    ops: Vec<crate::registry::Op>,
) -> Vec<Outcome> {
    for _ in 0..RETRIES {
        let leader = leader(nodes, among).await;
        if let Some((_, outcomes)) = retry_or(nodes[&leader].node.write(ops.clone()).await) {
            return outcomes;
        }
        tokio::time::sleep(RETRY_AFTER).await;
    }
    panic!("no leader took the write");
}

/// Waits until every node in `ids` applied what `leader` has, and checks
/// they all hold the leader's registry.
async fn agree(nodes: &BTreeMap<NodeId, BusNode>, leader: NodeId, ids: &[NodeId]) {
    let index = nodes[&leader].node.state.last_applied_index();
    let expected = state(&nodes[&leader].node.state.lock().registry);
    for id in ids {
        nodes[id]
            .node
            .raft
            .wait(Some(WAIT))
            .applied_index_at_least(index, "caught up")
            .await
            .unwrap();
        let found = state(&nodes[id].node.state.lock().registry);
        assert_eq!(found, expected, "node {id}");
    }
}

async fn stop(nodes: BTreeMap<NodeId, BusNode>) {
    for mut node in nodes.into_values() {
        node.stop_serving().await;
        let _ = node.node.raft.shutdown().await;
    }
}

/// Forwards `forward` from `from` to the leader of `among` until it is
/// not refused (a leader that just changed refuses).
async fn forward_to_leader(
    nodes: &BTreeMap<NodeId, BusNode>,
    among: &[NodeId],
    from: NodeId,
    forward: Forward,
) -> Vec<Outcome> {
    for _ in 0..RETRIES {
        let leader = leader(nodes, among).await;
        let answers = nodes[&from]
            .bus
            .forward(&nodes[&leader].addr, forward.clone())
            .await
            .unwrap();
        let outcomes: Option<Vec<Outcome>> = answers
            .into_iter()
            .map(|answer| match answer {
                Forwarded::Outcome(outcome) => Some(outcome),
                Forwarded::Refused(_) => None,
            })
            .collect();
        if let Some(outcomes) = outcomes {
            return outcomes;
        }
        tokio::time::sleep(RETRY_AFTER).await;
    }
    panic!("the leader never took the forwarded ops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_replicate_and_forward_over_tcp() {
    let mut nodes = three(Some(Bytes::from_static(b"s3cret")), None).await;
    let ids = [1, 2, 3];
    let first = write(&nodes, &ids, vec![acquire("a", "w1", 10.0)]).await;
    let a = acquired(&first[0]);
    let leader = leader(&nodes, &ids).await;
    agree(&nodes, leader, &ids).await;

    // A follower's clients' ops, forwarded to the leader.
    let follower = *ids.iter().find(|&&id| id != leader).unwrap();
    let answers = forward_to_leader(&nodes, &ids, follower, forward(&["b", "a"])).await;
    let b = acquired(&answers[0]);
    assert!(b.fencing_token > a.fencing_token);
    assert_eq!(answers[1], Outcome::Acquired(None), "run a is held");
    let leader = self::leader(&nodes, &ids).await;
    agree(&nodes, leader, &ids).await;

    // One follower stops serving: the other two go on writing.
    let gone = *ids.iter().find(|&&id| id != leader).unwrap();
    nodes.get_mut(&gone).unwrap().stop_serving().await;
    let rest: Vec<NodeId> = ids.iter().copied().filter(|&id| id != gone).collect();
    let c = acquired(&write(&nodes, &rest, vec![acquire("c", "w", 10.0)]).await[0]);
    assert!(c.fencing_token > b.fencing_token);
    let leader = self::leader(&nodes, &rest).await;
    agree(&nodes, leader, &rest).await;
    stop(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_gets_a_read_index_from_the_leader_over_tcp() {
    let nodes = three(Some(Bytes::from_static(b"s3cret")), None).await;
    let ids = [1, 2, 3];
    write(&nodes, &ids, vec![acquire("a", "w1", 10.0)]).await;
    let leader = leader(&nodes, &ids).await;
    let written = nodes[&leader].node.state.last_applied_index();
    let follower = *ids.iter().find(|&&id| id != leader).unwrap();
    let other = *ids
        .iter()
        .find(|&&id| id != leader && id != follower)
        .unwrap();

    // The leader's read index covers the write it answered, and its
    // stamp is its clock's.
    let asked = nodes[&follower].bus.read_index(&nodes[&leader].addr).await;
    let index = asked.expect("the leader gives a read index");
    assert!(
        Some(index.log_id.index) >= written,
        "{index:?} before {written:?}"
    );
    assert!(index.time >= 1000.0, "{index:?}");
    // A follower gives none, and says why.
    let asked = nodes[&follower].bus.read_index(&nodes[&other].addr).await;
    let why = asked.expect_err("a follower gives no read index");
    assert!(why.contains("not the leader"), "{why}");
    stop(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_leader_is_replaced_over_tcp() {
    let mut nodes = three(None, None).await;
    let ids = [1, 2, 3];
    let a = acquired(&write(&nodes, &ids, vec![acquire("a", "w", 10.0)]).await[0]);
    let old = leader(&nodes, &ids).await;
    agree(&nodes, old, &ids).await;

    let mut stopped = nodes.remove(&old).unwrap();
    stopped.stop_serving().await;
    stopped.node.raft.shutdown().await.unwrap();
    let rest: Vec<NodeId> = ids.iter().copied().filter(|&id| id != old).collect();
    let new = leader(&nodes, &rest).await;
    assert_ne!(new, old);
    let b = acquired(&write(&nodes, &rest, vec![acquire("b", "w", 10.0)]).await[0]);
    assert!(b.fencing_token > a.fencing_token);
    let new = leader(&nodes, &rest).await;
    agree(&nodes, new, &rest).await;
    stop(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_joining_after_a_purge_is_sent_the_snapshot_over_tcp() {
    let secret = Some(Bytes::from_static(b"s3cret"));
    let mut nodes = three(secret.clone(), None).await;
    let ids = [1, 2, 3];
    for run in ["a", "b", "c"] {
        write(&nodes, &ids, vec![acquire(run, "w", 10.0)]).await;
    }
    let leader = leader(&nodes, &ids).await;
    let raft = nodes[&leader].node.raft.clone();
    let index = nodes[&leader].node.state.last_applied_index();
    raft.trigger().snapshot().await.unwrap();
    let purged = |m: &openraft::RaftMetrics<_>| {
        m.snapshot.map(|id| id.index) >= index && m.purged.map(|id| id.index) >= index
    };
    raft.wait(Some(WAIT))
        .metrics(purged, "snapshot and purge")
        .await
        .unwrap();

    let listener = listeners(1).await.pop().unwrap();
    let joining = BusNode::start(4, listener, secret, None, write_handler).await;
    let addr = BasicNode::new(&joining.addr);
    nodes.insert(4, joining);
    raft.add_learner(4, addr, true).await.unwrap();
    let learner = nodes[&4].node.raft.clone();
    let sent = |m: &openraft::RaftMetrics<_>| m.snapshot.map(|id| id.index) >= index;
    learner
        .wait(Some(WAIT))
        .metrics(sent, "snapshot installed")
        .await
        .unwrap();
    agree(&nodes, leader, &[1, 2, 3, 4]).await;
    stop(nodes).await;
}

/// A peer that takes the handshake and never answers a call.
async fn mute() -> (String, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        admit(&mut stream, 2, None).await.unwrap();
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest).await;
    });
    (addr, task)
}

fn heartbeat() -> AppendEntriesRequest<TypeConfig> {
    AppendEntriesRequest {
        vote: openraft::Vote::new_committed(1, 1),
        prev_log_id: None,
        entries: vec![],
        leader_commit: None,
    }
}

#[tokio::test]
async fn an_rpc_to_nobody_is_unreachable_and_a_mute_peer_times_out() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let nobody = listener.local_addr().unwrap().to_string();
    drop(listener);
    let mut bus = Bus::new(1, None);
    let option = RPCOption::new(Duration::from_millis(400));
    let mut peer = bus.new_client(2, &BasicNode::new(&nobody)).await;
    let sent = peer.append_entries(heartbeat(), option.clone()).await;
    assert!(matches!(sent, Err(RPCError::Unreachable(_))), "{sent:?}");

    let (mute, task) = mute().await;
    let mut peer = bus.new_client(2, &BasicNode::new(&mute)).await;
    let sent = peer.append_entries(heartbeat(), option).await;
    assert!(matches!(sent, Err(RPCError::Timeout(_))), "{sent:?}");
    drop(peer);
    task.abort();
}

/// Waits until every node names `to` its leader.
async fn led_by(nodes: &BTreeMap<NodeId, BusNode>, to: NodeId) {
    let led = |m: &openraft::RaftMetrics<_>| m.current_leader == Some(to);
    for node in nodes.values() {
        let raft = &node.node.raft;
        raft.wait(Some(WAIT))
            .metrics(led, "handed over")
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_hands_over_to_the_node_it_names() {
    let nodes = three(None, None).await;
    let ids = [1, 2, 3];
    // There and back: an election after a lapsed lease could pick the
    // named node by chance, twice in a row less often.
    let first = leader(&nodes, &ids).await;
    let second = *ids.iter().find(|&&id| id != first).unwrap();
    for (from, to) in [(first, second), (second, first)] {
        nodes[&from]
            .node
            .raft
            .trigger()
            .transfer_leader(to)
            .await
            .unwrap();
        led_by(&nodes, to).await;
    }
    stop(nodes).await;
}

// Forwarding's failures.

/// A node that serves the bus with `handler` and is never initialised.
async fn lone(handler: ForwardHandler, secret: Option<Bytes>, tls: Option<&Pki>) -> BusNode {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    BusNode::start(9, listener, secret, tls, |_| handler).await
}

#[tokio::test]
async fn a_forward_nobody_listens_to_is_not_sent() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let sent = Bus::new(1, None).forward(&addr, forward(&["a"])).await;
    assert!(matches!(sent, Err(ForwardError::NotSent(_))), "{sent:?}");
}

#[tokio::test]
async fn a_forward_left_unanswered_has_no_answer() {
    let never: ForwardHandler = Arc::new(|_| futures_util::future::pending().boxed());
    let mut node = lone(never, None, None).await;
    let bus = Bus::new(1, None).with_forward_timeout(Duration::from_millis(300));
    let sent = bus.forward(&node.addr, forward(&["a"])).await;
    assert!(matches!(sent, Err(ForwardError::NoAnswer(_))), "{sent:?}");
    node.stop_serving().await;
    node.node.raft.shutdown().await.unwrap();
}

/// A peer slow to shake hands, then answering every forward with no
/// outcomes; returns its address and how many connections it accepted.
async fn slow_to_greet(delay: Duration) -> (String, Arc<AtomicUsize>, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    let task = tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                admit(&mut stream, 2, None).await.unwrap();
                while let Ok(Request::Forward(_)) = read_frame(&mut stream, MAX_FRAME).await {
                    write_frame(&mut stream, &Response::Forward(vec![]))
                        .await
                        .unwrap();
                }
            });
        }
    });
    (addr, accepted, task)
}

#[tokio::test]
async fn a_dial_past_its_callers_deadline_is_kept_for_the_next_call() {
    let (addr, accepted, task) = slow_to_greet(Duration::from_millis(300)).await;
    let hasty = Bus::new(1, None).with_forward_timeout(Duration::from_millis(50));
    let sent = hasty.forward(&addr, forward(&["a"])).await;
    assert!(matches!(sent, Err(ForwardError::NotSent(_))), "{sent:?}");
    let kept = async {
        while hasty.idle(&addr, Kind::Forward) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(WAIT, kept).await.unwrap();
    let patient = hasty.with_forward_timeout(WAIT);
    assert_eq!(patient.forward(&addr, forward(&["a"])).await, Ok(vec![]));
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    task.abort();
}

/// A raw connection to `addr` that passed the handshake as `kind`.
async fn shaken(addr: &str, kind: Kind) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let hello = Hello {
        protocol: PROTOCOL,
        from: 1,
        kind,
    };
    introduce(&mut stream, hello, None, None).await.unwrap();
    stream
}

/// Waits for the peer to close `stream`, reading nothing.
async fn closed(stream: &mut TcpStream) {
    let mut rest = Vec::new();
    let read = tokio::time::timeout(WAIT, stream.read_to_end(&mut rest)).await;
    assert_eq!(read.unwrap().unwrap(), 0);
}

#[tokio::test]
async fn a_server_closes_a_connection_that_breaks_the_protocol() {
    let mut node = lone(echo(), None, None).await;
    let request = Request::Forward(forward(&["a"]));

    // A corrupt frame.
    let mut stream = shaken(&node.addr, Kind::Forward).await;
    let mut bytes = encode(&request).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    stream.write_all(&bytes).await.unwrap();
    closed(&mut stream).await;

    // A call on a connection of another kind.
    let mut stream = shaken(&node.addr, Kind::Vote).await;
    write_frame(&mut stream, &request).await.unwrap();
    closed(&mut stream).await;

    // The same call on its own kind is answered.
    let mut stream = shaken(&node.addr, Kind::Forward).await;
    write_frame(&mut stream, &request).await.unwrap();
    let answer: Response = read_frame(&mut stream, MAX_FRAME).await.unwrap();
    assert!(matches!(answer, Response::Forward(_)), "{answer:?}");

    node.stop_serving().await;
    node.node.raft.shutdown().await.unwrap();
}

/// Answers every op with `Flag(true)`.
fn echo() -> ForwardHandler {
    Arc::new(|forward: Forward| {
        let answers = vec![Forwarded::Outcome(Outcome::Flag(true)); forward.ops.len()];
        async move { answers }.boxed()
    })
}

#[tokio::test]
async fn a_forward_with_the_wrong_secret_is_not_sent_and_closed() {
    let secret = Bytes::from_static(b"s3cret");
    let mut node = lone(echo(), Some(secret.clone()), None).await;

    let right = Bus::new(1, Some(secret))
        .forward(&node.addr, forward(&["a"]))
        .await;
    assert_eq!(right, Ok(vec![Forwarded::Outcome(Outcome::Flag(true))]));
    let wrong = Bus::new(1, Some(Bytes::from_static(b"guess")))
        .forward(&node.addr, forward(&["a"]))
        .await;
    assert!(matches!(wrong, Err(ForwardError::NotSent(_))), "{wrong:?}");

    // By hand: a wrong proof is told why, then the connection is closed.
    let mut stream = TcpStream::connect(&node.addr).await.unwrap();
    let hello = Hello {
        protocol: PROTOCOL,
        from: 1,
        kind: Kind::Forward,
    };
    write_frame(&mut stream, &hello).await.unwrap();
    let challenge: Challenge = read_frame(&mut stream, MAX_HANDSHAKE_FRAME).await.unwrap();
    let nonce = challenge.nonce.expect("a secret asks a proof");
    let mac = Some(prove(b"guess", &nonce, &hello, challenge.server));
    write_frame(&mut stream, &Proof { mac }).await.unwrap();
    let verdict: Verdict = read_frame(&mut stream, MAX_HANDSHAKE_FRAME).await.unwrap();
    assert!(matches!(verdict, Verdict::Refused(_)), "{verdict:?}");
    closed(&mut stream).await;

    node.stop_serving().await;
    node.node.raft.shutdown().await.unwrap();
}

// TLS.

/// A CA, and the one certificate it signed that every node uses, as
/// server and as client, for 127.0.0.1.
struct Pki {
    ca: CertificateDer<'static>,
    cert: CertificateDer<'static>,
    key: Vec<u8>,
}

impl Pki {
    fn new() -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "bus CA");
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, "node");
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        Pki {
            ca: ca.der().clone(),
            cert: cert.der().clone(),
            key: key.serialize_der(),
        }
    }

    fn roots(&self) -> Arc<RootCertStore> {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.clone()).unwrap();
        Arc::new(roots)
    }

    fn key(&self) -> PrivateKeyDer<'static> {
        PrivatePkcs8KeyDer::from(self.key.clone()).into()
    }

    /// A client that trusts the CA, presenting the node certificate if
    /// `with_cert`.
    fn connector(&self, with_cert: bool) -> TlsConnector {
        let builder = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(self.roots());
        let config = match with_cert {
            true => builder
                .with_client_auth_cert(vec![self.cert.clone()], self.key())
                .unwrap(),
            false => builder.with_no_client_auth(),
        };
        TlsConnector::from(Arc::new(config))
    }

    /// A server that requires a client certificate signed by the CA.
    fn acceptor(&self) -> TlsAcceptor {
        let provider = Arc::new(ring::default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(self.roots(), provider.clone())
            .build()
            .unwrap();
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![self.cert.clone()], self.key())
            .unwrap();
        TlsAcceptor::from(Arc::new(config))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_replicate_over_mutual_tls() {
    let pki = Pki::new();
    let nodes = three(Some(Bytes::from_static(b"s3cret")), Some(&pki)).await;
    let ids = [1, 2, 3];
    write(&nodes, &ids, vec![acquire("a", "w", 10.0)]).await;
    let leader = leader(&nodes, &ids).await;
    let follower = *ids.iter().find(|&&id| id != leader).unwrap();
    let answers = forward_to_leader(&nodes, &ids, follower, forward(&["b"])).await;
    acquired(&answers[0]);
    let leader = self::leader(&nodes, &ids).await;
    agree(&nodes, leader, &ids).await;
    stop(nodes).await;
}

#[tokio::test]
async fn a_tls_server_lets_in_only_clients_with_a_certificate() {
    let pki = Pki::new();
    let mut node = lone(echo(), None, Some(&pki)).await;
    let trusted = Bus::new(1, None).with_tls(pki.connector(true));
    let sent = trusted.forward(&node.addr, forward(&["a"])).await;
    assert_eq!(sent, Ok(vec![Forwarded::Outcome(Outcome::Flag(true))]));
    let anonymous = Bus::new(1, None).with_tls(pki.connector(false));
    let sent = anonymous.forward(&node.addr, forward(&["a"])).await;
    assert!(matches!(sent, Err(ForwardError::NotSent(_))), "{sent:?}");
    let plain = Bus::new(1, None);
    let sent = plain.forward(&node.addr, forward(&["a"])).await;
    assert!(matches!(sent, Err(ForwardError::NotSent(_))), "{sent:?}");
    node.stop_serving().await;
    node.node.raft.shutdown().await.unwrap();
}
