//! The client against the real server: acquire, heartbeat and release;
//! waiting for a held run; checkpoints and the run's data; `lost` when a
//! heartbeat is refused, the server is killed or the connection cut;
//! release on drop and on a panic; events and history.

mod support;

use std::time::Duration;

use leased_client::{Error, LeaseOptions, Registry};
use support::{Proxy, Server, current_token, eventually};
use tokio::time::Instant;

const PATIENCE: Duration = Duration::from_secs(10);

fn ttl(seconds: f64) -> LeaseOptions {
    LeaseOptions::new().ttl(Duration::from_secs_f64(seconds))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_is_acquired_heartbeated_past_its_ttl_and_released() {
    let server = Server::start();
    let registry = Registry::connect(&server.url()).await.unwrap();
    let before = Instant::now();
    let lease = registry.lease("run-1", "worker-a", ttl(0.6)).await.unwrap();
    assert_eq!(
        lease.lease_id(),
        format!("run-1:worker-a:{}", lease.token())
    );
    assert_eq!((lease.run(), lease.worker()), ("run-1", "worker-a"));
    assert!(lease.deadline() >= before + Duration::from_millis(600));
    assert!(lease.deadline() <= Instant::now() + Duration::from_millis(600));
    assert_eq!(lease.data(), None);

    // Three TTLs: only heartbeats keep it.
    tokio::time::sleep(Duration::from_millis(1800)).await;
    lease.check().expect("held");
    assert!(!lease.is_lost());
    assert!(lease.remaining() > Duration::from_millis(200), "{lease:?}");
    let history = registry.history("run-1", Some(1)).await.unwrap();
    assert!(history[0].heartbeats >= 4, "{history:?}");
    assert_eq!(history[0].end, "active");

    let lost = lease.lost();
    assert!(lease.release().await.unwrap());
    assert!(lost.is_cancelled());
    assert_eq!(registry.get("run-1").await.unwrap(), None);
    let history = registry.history("run-1", None).await.unwrap();
    assert_eq!(history[0].end, "released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ttl_defaults_to_the_servers_lease_ttl() {
    let server = Server::start_with(&["--lease-ttl", "7"]);
    let registry = Registry::connect(&server.url()).await.unwrap();
    assert_eq!(registry.server_ttl(), Duration::from_secs(7));
    let lease = registry
        .lease("run-1", "worker-a", LeaseOptions::new())
        .await
        .unwrap();
    assert_eq!(lease.ttl(), Duration::from_secs(7));
    let shown = registry.get("run-1").await.unwrap().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!((shown.expires_at - now - 7.0).abs() < 1.0, "{shown:?}");
    assert!(lease.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_run_is_refused_or_waited_for() {
    let server = Server::start();
    let registry = Registry::connect(&server.url()).await.unwrap();
    let mut holder = registry.lease("run-1", "holder", ttl(30.0)).await.unwrap();
    holder.checkpoint("step=4").await.unwrap();

    let refused = registry.lease("run-1", "waiter", ttl(5.0)).await;
    assert!(
        matches!(refused, Err(Error::RunHeld { ref run }) if run == "run-1"),
        "{refused:?}"
    );

    // A wait that runs out.
    let started = Instant::now();
    let short = ttl(5.0).wait(Duration::from_millis(300));
    let refused = registry.lease("run-1", "waiter", short).await;
    assert!(matches!(refused, Err(Error::RunHeld { .. })), "{refused:?}");
    assert!(started.elapsed() >= Duration::from_millis(300));

    // A wait longer than the redis crate's 500 ms default timeout, that
    // ends with the holder's release.
    let waiting = registry.clone();
    let waiter = tokio::spawn(async move {
        let long = ttl(5.0).wait(Duration::from_secs(20));
        waiting.lease("run-1", "waiter", long).await
    });
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!waiter.is_finished());
    let holder_token = holder.token();
    assert!(holder.release().await.unwrap());
    let lease = waiter.await.unwrap().expect("granted");
    assert_eq!(lease.token(), holder_token + 1);
    assert_eq!(lease.data(), Some(&b"step=4"[..]));
    assert_eq!(lease.data_token(), Some(holder_token));
    assert!(lease.remaining() > Duration::from_secs(4), "{lease:?}");
    lease.check().unwrap();
    assert!(lease.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_are_the_next_holders_data() {
    let server = Server::start();
    let registry = Registry::connect(&server.url()).await.unwrap();
    let mut first = registry.lease("run-1", "a", ttl(5.0)).await.unwrap();
    first.checkpoint("step=0").await.unwrap();
    first.checkpoint(b"step=1".to_vec()).await.unwrap();
    assert_eq!(first.data(), Some(&b"step=1"[..]));
    let token = first.token();
    assert!(first.release().await.unwrap());
    let data = registry.get_data("run-1").await.unwrap().unwrap();
    assert_eq!(
        (data.value.as_slice(), data.fencing_token),
        (&b"step=1"[..], token)
    );

    let second = registry.lease("run-1", "b", ttl(5.0)).await.unwrap();
    assert_eq!(second.data(), Some(&b"step=1"[..]));
    assert_eq!(second.data_token(), Some(token));
    second.release().await.unwrap();
    let without = ttl(5.0).with_data(false);
    let third = registry.lease("run-1", "c", without).await.unwrap();
    assert_eq!(third.data(), None);
    third.release().await.unwrap();
}

/// The lease is released behind the worker's back and the run taken over:
/// the next heartbeat is answered 0, which sets `lost` at once (within a
/// period); `check()` and `checkpoint()` refuse, and no `LEASE.SETDATA` is
/// sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_heartbeat_sets_lost_within_a_period() {
    let server = Server::start();
    let monitor = support::Monitor::start(&server);
    let registry = Registry::connect(&server.url()).await.unwrap();
    let mut lease = registry.lease("run-1", "a", ttl(3.0)).await.unwrap();
    let mut con = server.connect();
    let released: i64 = redis::cmd("LEASE.RELEASE")
        .arg(lease.lease_id())
        .arg(lease.token())
        .query(&mut con)
        .unwrap();
    assert_eq!(released, 1);
    let taken = Instant::now();
    let _taker = registry.lease("run-1", "b", ttl(30.0)).await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), lease.lost().cancelled())
        .await
        .expect("lost within a period (1 s) and some slack");
    assert!(taken.elapsed() <= Duration::from_millis(1000 + 500));
    assert!(lease.lost_reason().unwrap().contains("refused"));
    assert!(matches!(lease.check(), Err(Error::LeaseLost { .. })));
    let refused = lease.checkpoint("step=9").await;
    assert!(
        matches!(refused, Err(Error::LeaseLost { .. })),
        "{refused:?}"
    );
    std::thread::sleep(Duration::from_millis(100));
    let setdata = monitor
        .seen()
        .iter()
        .filter(|seen| seen.name() == "LEASE.SETDATA")
        .count();
    assert_eq!(setdata, 0, "{:?}", monitor.seen());
}

/// The server dies: heartbeats fail (connection refused) and are retried,
/// and `lost` is set within a period of the first that failed, the one
/// due next after the kill: at most two periods after it (and some slack
/// for a loaded machine), before the deadline would have said so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_sets_lost_within_a_period_of_the_failed_heartbeat() {
    let mut server = Server::start();
    let registry = Registry::connect(&server.url()).await.unwrap();
    let mut lease = registry.lease("run-1", "a", ttl(1.5)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    server.kill();
    let broken = Instant::now();
    tokio::time::timeout(Duration::from_secs(4), lease.lost().cancelled())
        .await
        .expect("lost");
    let period = Duration::from_millis(500);
    let after = Instant::now() - broken;
    assert!(
        after <= 2 * period + Duration::from_millis(500),
        "lost {after:?} after the kill"
    );
    assert!(
        lease.lost_reason().unwrap().contains("heartbeat"),
        "{lease:?}"
    );
    let refused = lease.checkpoint("step=1").await;
    assert!(
        matches!(refused, Err(Error::LeaseLost { .. })),
        "{refused:?}"
    );
}

/// The network drops everything (connections closed, new ones never
/// answered): heartbeats time out at half a period, are retried, and
/// `lost` is set within a period of the first that failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_connection_sets_lost_within_a_period_of_the_failed_heartbeat() {
    let server = Server::start();
    let proxy = Proxy::start(server.port);
    let registry = Registry::connect(&proxy.url()).await.unwrap();
    let lease = registry.lease("run-1", "a", ttl(1.5)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    proxy.cut();
    let broken = Instant::now();
    tokio::time::timeout(Duration::from_secs(4), lease.lost().cancelled())
        .await
        .expect("lost");
    let period = Duration::from_millis(500);
    let after = Instant::now() - broken;
    assert!(
        after <= 2 * period + period / 2 + Duration::from_millis(500),
        "lost {after:?} after the cut"
    );
    assert!(lease.check().is_err());
}

/// A lease dropped without a release, and one dropped by a panic, are
/// released (best effort: a task on the runtime).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_lease_is_released_also_on_a_panic() {
    let server = Server::start();
    let registry = Registry::connect(&server.url()).await.unwrap();
    {
        let lease = registry.lease("run-1", "a", ttl(30.0)).await.unwrap();
        lease.check().unwrap();
    }
    let panicking = registry.clone();
    let worker = tokio::spawn(async move {
        let lease = panicking.lease("run-2", "b", ttl(30.0)).await.unwrap();
        if lease.token() > 0 {
            panic!("the worker fails while it holds its lease");
        }
    });
    assert!(worker.await.unwrap_err().is_panic());
    let mut con = server.connect();
    let released = eventually(PATIENCE, || {
        let tokens = (
            current_token(&mut con, "run-1"),
            current_token(&mut con, "run-2"),
        );
        (tokens == (None, None)).then_some(())
    });
    assert!(released.is_some(), "still held");
    let history = registry.history("run-2", None).await.unwrap();
    assert_eq!(history[0].end, "released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_stream_the_runs_changes() {
    let server = Server::start();
    let registry = Registry::connect(&server.url()).await.unwrap();
    let mut events = registry.events("__lease__:*").await.unwrap();
    let lease = registry.lease("run:1", "worker:a", ttl(5.0)).await.unwrap();
    let token = lease.token();
    lease.release().await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let event = tokio::time::timeout(PATIENCE, events.next())
            .await
            .unwrap()
            .unwrap();
        seen.push(event);
    }
    let kinds: Vec<_> = seen.iter().map(|event| event.kind.as_str()).collect();
    assert_eq!(kinds, ["acquired", "released"]);
    for event in &seen {
        assert_eq!(event.run_id, "run:1");
        assert_eq!(event.fencing_token, token);
        assert_eq!(event.worker_id.as_deref(), Some("worker:a"));
    }
}

/// Over RESP3 (maps, doubles, pushes) the replies read the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp3_replies_read_the_same() {
    let server = Server::start();
    let url = format!("{}?protocol=resp3", server.url());
    let registry = Registry::connect(&url).await.unwrap();
    let mut events = registry.events("__leaseevent__:*").await.unwrap();
    let mut lease = registry.lease("run-1", "a", ttl(5.0)).await.unwrap();
    lease.checkpoint("step=0").await.unwrap();
    let shown = registry.get("run-1").await.unwrap().unwrap();
    assert_eq!(
        (shown.lease_id.as_str(), shown.expired),
        (lease.lease_id(), Some(false))
    );
    let data = registry.get_data("run-1").await.unwrap().unwrap();
    assert_eq!(
        (data.value.as_slice(), data.fencing_token),
        (&b"step=0"[..], lease.token())
    );
    assert!(data.written_at > 1e9);
    let history = registry.history("run-1", None).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(
        (history[0].ended_at, history[0].end.as_str()),
        (None, "active")
    );
    assert!(history[0].expires_at > history[0].acquired_at);
    let token = lease.token();
    assert!(lease.release().await.unwrap());
    let event = tokio::time::timeout(PATIENCE, events.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (event.kind.as_str(), event.run_id.as_str()),
        ("acquired", "run-1")
    );
    assert_eq!((event.fencing_token, event.worker_id), (token, None));
}
