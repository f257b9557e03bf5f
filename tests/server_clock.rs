//! Time that passes on the server's clock, tested without waiting for it:
//! the server runs in the test's runtime with paused time, and
//! `tokio::time::advance` moves its clock. Reads without `now` are
//! evaluated at that clock and change nothing; `lease-max-skew` bounds how
//! far ahead of it an explicit `now` may be (and a start-up says when the
//! log brought registry time further ahead); work that falls due (idle
//! clients, reclaiming) happens without another command arriving.

mod common;

use std::time::Duration;

use common::client::{Lease, acquire_all_cmd};
use common::inprocess::{InProcess, at_one_instant, settle};
use tokio::io::AsyncReadExt;
use tokio::time::advance;

const SECOND: Duration = Duration::from_secs(1);

fn registry_time(info: &std::collections::HashMap<String, String>) -> f64 {
    info["registry_time"].parse().expect("a registry time")
}

#[tokio::test(start_paused = true)]
async fn a_lease_without_now_expires_on_the_server_clock_and_reads_do_not_move_it() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client().await;
    let lease: Lease = con.acquire("run", "w", None, Some(10.0)).await.unwrap();
    let taken_at = registry_time(&con.info("leases").await);
    assert_eq!(lease.expires_at, taken_at + 10.0);

    advance(Duration::from_millis(9_900)).await;
    assert!(con.validate("run", &lease, None).await);
    assert_eq!(con.get("run", None).await.unwrap().expired, Some(0));
    advance(Duration::from_millis(100)).await;
    // Expired by the clock (expiry is inclusive)...
    assert!(!con.validate("run", &lease, None).await);
    assert_eq!(con.get("run", None).await.unwrap().expired, Some(1));
    // ... while registry time stayed where the acquire left it: reads
    // without `now` wrote nothing, so the holder could still be told its
    // lease is alive by a client on a lagging logical clock.
    assert_eq!(registry_time(&con.info("leases").await), taken_at);
    assert!(!con.heartbeat(&lease, None).await);
    // A write without `now` moves registry time to the clock.
    assert!(con.acquire("run", "other", None, None).await.is_some());
    let moved = registry_time(&con.info("leases").await);
    assert!(
        (moved - taken_at - 10.0).abs() < 0.002,
        "{moved} vs {taken_at}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_now_too_far_ahead_is_refused_and_changes_nothing() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client().await;
    let held = con.acquire("held", "w", Some(100.0), None).await.unwrap();
    let wall = registry_time(&con.info("leases").await);
    assert_eq!(wall, 100.0);
    let clock: f64 = {
        let time = con.run(&["TIME"]).await;
        let redis::Value::Array(parts) = time else {
            panic!("TIME")
        };
        let redis::Value::BulkString(seconds) = &parts[0] else {
            panic!("TIME seconds")
        };
        std::str::from_utf8(seconds).unwrap().parse().unwrap()
    };
    let refused = "ERR now is more than 60 seconds ahead of the server's clock \
                   (lease-max-skew); send seconds since the Unix epoch, or omit now";
    // A read with `1e18`, and milliseconds sent as seconds.
    for words in [
        &["LEASE.GET", "nosuch", "1e18"][..],
        &["LEASE.ACQUIRE", "new", "w", "1.7e12"],
        &["LEASE.VALIDATE", "held", "held:w:1", "1", "1e18"],
    ] {
        assert_eq!(con.error(words).await, refused, "{words:?}");
    }
    let heartbeat = ["LEASE.HEARTBEAT", "held:w:1", "1", "1e18"];
    assert_eq!(con.error(&heartbeat).await, refused);
    // Nothing moved: no token, no time, the lease as it was.
    let leases = con.info("leases").await;
    assert_eq!(registry_time(&leases), 100.0);
    assert_eq!(leases["last_fencing_token"], "1");
    assert_eq!(
        con.get("held", Some(100.0)).await,
        Some(Lease {
            expired: Some(0),
            ..held
        })
    );
    // Within the bound, and any past time, are accepted.
    let soon = (clock + 50.0).to_string();
    assert!(
        con.acquire("new", "w", Some(clock + 50.0), None)
            .await
            .is_some(),
        "{soon}"
    );
    // 0 removes the bound.
    con.config_set(&[("lease-max-skew", "0")]).await.unwrap();
    assert!(con.get("nosuch", Some(1e18)).await.is_none());
    assert_eq!(registry_time(&con.info("leases").await), 1e18);
}

#[tokio::test(start_paused = true)]
async fn an_idle_client_is_closed_after_a_timeout_set_while_it_was_connected() {
    let server = InProcess::start(&[]).await;
    let mut admin = server.client().await;
    let mut idle = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .unwrap();
    // Connected, and silent from before the change on.
    advance(3 * SECOND).await;
    admin.config_set(&[("timeout", "5")]).await.unwrap();
    advance(4 * SECOND).await;
    assert_eq!(
        admin.run(&["PING"]).await,
        redis::Value::SimpleString("PONG".into())
    );
    advance(2 * SECOND).await;
    let mut rest = Vec::new();
    let closed = at_one_instant(idle.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the idle client was not closed: {closed:?}");
    assert!(rest.is_empty());
}

#[tokio::test(start_paused = true)]
async fn leases_past_retention_are_reclaimed_without_another_command() {
    const RUNS: usize = 1_000; // several of the core's steps
    let server = InProcess::start(&["--lease-retention", "5"]).await;
    let mut con = server.client().await;
    let runs = (0..RUNS).map(|i| format!("run-{i}"));
    let () = acquire_all_cmd(runs, "w", 0.0, 1.0)
        .query_async(&mut con.con)
        .await
        .unwrap();
    assert_eq!(con.dbsize().await, RUNS as i64);
    // One command past every deadline: the core takes it from there.
    assert!(con.get("other", Some(100.0)).await.is_none());
    settle().await;
    assert_eq!(con.dbsize().await, 0);
    assert_eq!(
        con.info("leases").await["leases_reclaimed"],
        RUNS.to_string()
    );
}

#[test]
fn a_registry_time_loaded_far_ahead_of_the_clock_is_warned_about_and_kept() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("data");
    let mut server = common::binary::Server::start_in(&dir, &["--lease-max-skew", "0"]).unwrap();
    let mut con = server.typed();
    assert!(con.get("nosuch", Some(1e12)).is_none());
    server.stop();
    assert!(!server.log().contains("ahead of this machine's clock"));

    let server = common::binary::Server::start_in(&dir, &[]).unwrap();
    let log = server.log();
    assert!(
        log.contains("Registry time loaded from the log (1000000000000) is")
            && log.contains("ahead of this machine's clock, more than lease-max-skew (60 seconds)"),
        "{log}"
    );
    // It never moves back.
    let mut con = server.typed();
    assert_eq!(con.info("leases")["registry_time"], "1000000000000");
}
