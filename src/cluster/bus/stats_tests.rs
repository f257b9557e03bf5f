//! What the bus counts (`ClusterStats`), for the metrics: a frame with a
//! bad checksum, a handshake refused on each side, a dial that fails.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::FutureExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::frame::encode;
use super::handshake::introduce;
use super::wire::{Hello, Kind, PROTOCOL, Request};
use super::{Admission, Bus, ForwardError, serve_admitting};
use crate::cluster::clock_guard::Guard;
use crate::cluster::tests::{TestClock, WAIT, lone_node};
use crate::cluster::types::{Forward, Forwarded};
use crate::registry::{Op, Outcome};
use crate::state::cluster_stats::{BusError, ClusterStats};

fn errors(stats: &ClusterStats) -> Vec<(&'static str, u64)> {
    (BusError::ALL.iter().map(|error| error.as_str()))
        .zip(stats.bus_errors())
        .filter(|(_, count)| *count > 0)
        .collect()
}

fn forward() -> Forward {
    let op = Op::Release {
        lease_id: Bytes::from_static(b"a:w:1"),
        token: 1,
    };
    Forward { ops: vec![op] }
}

#[tokio::test]
async fn each_side_counts_what_went_wrong() {
    let secret = Bytes::from_static(b"s3cret");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let clock = TestClock::default();
    let node = lone_node(&clock).await;
    let server_stats = Arc::new(ClusterStats::default());
    let admission = Admission {
        secret: Some(secret.clone()),
        tls: None,
        stats: server_stats.clone(),
    };
    let echo: super::ForwardHandler = Arc::new(|forward: Forward| {
        let answers = vec![Forwarded::Outcome(Outcome::Flag(true)); forward.ops.len()];
        async move { answers }.boxed()
    });
    let shutdown = CancellationToken::new();
    let guard = Guard::new(clock.clock());
    let raft = node.raft.clone();
    let handlers = super::Handlers {
        forward: echo,
        read_index: Arc::new(|| async { Err("no reads in this test".to_string()) }.boxed()),
        queue: None,
        membership: None,
    };
    let server = tokio::spawn(serve_admitting(
        listener,
        raft,
        handlers,
        guard,
        admission,
        shutdown.clone(),
    ));

    // The right secret: nothing counted.
    let right = Bus::new(1, Some(secret.clone())).with_stats(Arc::default());
    assert!(right.forward(&addr, forward()).await.is_ok());
    assert_eq!(errors(&server_stats), []);

    // A wrong one: refused by the server, rejected for the client.
    let client_stats = Arc::new(ClusterStats::default());
    let wrong = Bus::new(1, Some(Bytes::from_static(b"guess"))).with_stats(client_stats.clone());
    let sent = wrong.forward(&addr, forward()).await;
    assert!(matches!(sent, Err(ForwardError::NotSent(_))), "{sent:?}");
    assert_eq!(errors(&client_stats), [("rejected", 1)]);
    assert_eq!(errors(&server_stats), [("refused", 1)]);

    // A frame with a bad checksum after a good handshake.
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let hello = Hello {
        protocol: PROTOCOL,
        from: 1,
        kind: Kind::Forward,
    };
    introduce(&mut stream, hello, Some(&secret), None)
        .await
        .unwrap();
    let mut bytes = encode(&Request::Forward(forward())).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    stream.write_all(&bytes).await.unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(WAIT, stream.read_to_end(&mut rest)).await;
    assert_eq!(read.unwrap().unwrap(), 0, "the server closes it");
    assert_eq!(errors(&server_stats), [("refused", 1), ("crc", 1)]);

    // A port nobody listens on: a failed dial.
    shutdown.cancel();
    server.await.unwrap();
    let sent = wrong.forward(&addr, forward()).await;
    assert!(matches!(sent, Err(ForwardError::NotSent(_))), "{sent:?}");
    assert_eq!(errors(&client_stats), [("connect", 1), ("rejected", 1)]);
    node.raft.shutdown().await.unwrap();
}
