//! Retention and reclaiming: the retention boundary, takeovers and
//! heartbeats, registry time (not the server's clock) driving the reclaim,
//! `lease-retention 0`, INFO leases, CONFIG GET and DBSIZE, against a
//! server in the test's runtime whose clock the test moves on (no
//! waiting); memory after a mass abandonment and reclaims surviving
//! crashes and restarts, against the real binary.

mod common;

use std::time::Duration;

use common::binary::{Server, data_dir, wait_until};
use common::client::{AsyncClient, Client, Lease, acquire_all_cmd, info_number};
use common::inprocess::{InProcess, settle};
use redis::Value;
use tokio::time::advance;

const SECOND: Duration = Duration::from_secs(1);
const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test(start_paused = true)]
async fn an_expired_lease_is_releasable_until_expiry_plus_retention_and_gone_from_then_on() {
    let server = InProcess::start(&["--lease-retention", "60"]).await;
    let mut con = server.client().await;
    // Each expires at 10: releasable while time < 70.
    let a = &con.acquire("a", "w", Some(0.0), Some(10.0)).await.unwrap();
    let b = &con.acquire("b", "w", Some(0.0), Some(10.0)).await.unwrap();
    let c = &con.acquire("c", "w", Some(0.0), Some(10.0)).await.unwrap();
    con.acquire("d", "w", Some(0.0), Some(10.0)).await.unwrap();
    assert_eq!(con.dbsize().await, 4);

    // One second before the deadline: still there, expired, releasable.
    assert_eq!(con.get("a", Some(69.0)).await, Some(a.with_expired(true)));
    assert_eq!(con.get("b", Some(69.0)).await, Some(b.with_expired(true)));
    assert!(con.release(a).await);
    assert_eq!(con.get("a", Some(69.0)).await, None);
    assert_eq!(con.dbsize().await, 3);

    // Exactly at the deadline it is gone.
    assert_eq!(con.get("b", Some(70.0)).await, None);
    assert!(!con.release(b).await);

    // One second after: gone for every command, and the reclaim takes the
    // one no command looked at (d).
    assert_eq!(con.get("c", Some(71.0)).await, None);
    assert!(!con.release(c).await);
    assert!(!con.heartbeat(c, Some(71.0)).await);
    assert!(!con.validate("c", c, Some(71.0)).await);
    settle().await;
    assert_eq!(con.dbsize().await, 0);
    assert_eq!(con.get("d", Some(71.0)).await, None);
    let info = con.info("leases").await;
    assert_eq!(info["leases_reclaimed"], "3", "{info:?}");
    assert_eq!(info["leases"], "0");

    // A reclaimed run is free; the next token follows on.
    let again = con.acquire("c", "w2", Some(71.0), Some(10.0)).await;
    assert_eq!(again.expect("c is free").fencing_token, 5);
}

#[tokio::test(start_paused = true)]
async fn a_run_taken_over_keeps_its_new_lease_past_the_old_leases_retention() {
    let server = InProcess::start(&["--lease-retention", "5"]).await;
    let mut con = server.client().await;
    let old = con
        .acquire("run", "a", Some(0.0), Some(10.0))
        .await
        .unwrap();
    // A lease nobody takes over, expiring with the old one: its reclaim
    // shows the reclaim has been past that second.
    con.acquire("abandoned", "a", Some(0.0), Some(10.0))
        .await
        .unwrap();
    let new = con
        .acquire("run", "b", Some(12.0), Some(10.0))
        .await
        .unwrap();
    assert_eq!(new.fencing_token, 3);

    // Past the old lease's deadline (15), before the new one's (27).
    assert_eq!(
        con.get("run", Some(26.0)).await,
        Some(new.with_expired(true))
    );
    settle().await;
    assert_eq!(con.dbsize().await, 1);
    assert_eq!(con.get("abandoned", Some(26.0)).await, None);
    assert_eq!(
        con.get("run", Some(26.0)).await,
        Some(new.with_expired(true))
    );
    assert!(!con.release(&old).await);
    assert_eq!(con.dbsize().await, 1);
    assert_eq!(con.info("leases").await["leases_reclaimed"], "1");
    assert!(con.release(&new).await);
    assert_eq!(con.dbsize().await, 0);
}

#[tokio::test(start_paused = true)]
async fn a_heartbeat_postpones_reclaiming() {
    let server = InProcess::start(&["--lease-retention", "5"]).await;
    let mut con = server.client().await;
    let kept = con
        .acquire("kept", "w", Some(0.0), Some(10.0))
        .await
        .unwrap();
    let abandoned = con.acquire("abandoned", "w", Some(0.0), Some(10.0)).await;
    let abandoned = abandoned.unwrap();
    // Expiry 10 -> 18: into another second of the expiry index.
    assert!(con.heartbeat(&kept, Some(8.0)).await);
    let kept = Lease {
        expires_at: 18.0,
        ..kept
    };

    // Past 10 + 5, before 18 + 5.
    assert_eq!(
        con.get("abandoned", Some(0.0)).await,
        Some(abandoned.with_expired(false))
    );
    assert_eq!(con.get("other", Some(22.0)).await, None);
    settle().await;
    assert_eq!(con.dbsize().await, 1);
    assert_eq!(
        con.get("kept", Some(22.0)).await,
        Some(kept.with_expired(true))
    );
    assert_eq!(con.get("abandoned", Some(22.0)).await, None);

    // At 18 + 5 the heartbeat's deadline has come too.
    assert_eq!(con.get("other", Some(24.0)).await, None);
    settle().await;
    assert_eq!(con.dbsize().await, 0);
    assert!(!con.release(&kept).await);
    assert_eq!(con.info("leases").await["leases_reclaimed"], "2");
}

/// Waits for DBSIZE to be `expected`: the real binary reclaims in the
/// background, a step at a time, and no reply says when it is done.
fn wait_for_dbsize(con: &mut Client, expected: i64) {
    wait_until(Duration::from_secs(10), || match con.dbsize() {
        size if size == expected => Ok(()),
        size => Err(format!("DBSIZE is {size}, expected {expected}")),
    });
}

/// `used_memory` as a new, sole connection sees it: the buffers of
/// connections that have closed are freed, so the figure is the registry
/// and what the core keeps between requests.
fn used_memory_alone(server: &Server) -> u64 {
    let mut con = server.typed();
    wait_until(Duration::from_secs(10), || {
        match info_number(&con.info("clients"), "connected_clients") {
            1 => Ok(()),
            n => Err(format!("{n} clients connected")),
        }
    });
    info_number(&con.info("memory"), "used_memory")
}

/// Against the binary: the memory measured is the process's.
#[test]
fn abandoning_200000_runs_gives_their_memory_back() {
    const RUNS: usize = 200_000;
    const BATCH: usize = 5_000;
    let server = Server::start_with(&["--lease-retention", "5"]);
    // The server as it starts: what 200,000 reclaimed leases leave
    // behind is measured against this.
    let before = used_memory_alone(&server);

    // At 0 with TTL 10, in pipelines of BATCH. Run and worker ids together
    // are too long to be stored inline, so each lease has a heap block too.
    let mut con = server.typed();
    for start in (0..RUNS).step_by(BATCH) {
        let runs = (start..start + BATCH).map(|i| format!("abandoned-run-{i:06}"));
        let pipe = acquire_all_cmd(runs, "worker-1", 0.0, 10.0);
        let () = pipe.query(&mut con).expect("pipelined LEASE.ACQUIRE");
    }
    assert_eq!(con.dbsize(), RUNS as i64);
    let peak = info_number(&con.info("memory"), "used_memory");
    let growth = peak.saturating_sub(before);
    // A slot is 72 bytes, the ids take a 32-byte block, and two hash
    // indexes: well over 15 MiB, or the figure is not measuring leases.
    assert!(
        growth > 15 << 20,
        "used_memory grew only {growth} bytes for {RUNS} leases ({before} -> {peak})"
    );

    // One command moves time past every deadline (10 + 5).
    assert_eq!(con.get("nobody", Some(16.0)), None);
    wait_for_dbsize(&mut con, 0);
    let info = con.info("leases");
    assert_eq!(info["leases_reclaimed"], RUNS.to_string(), "{info:?}");
    assert_eq!(info["leases"], "0");
    assert_eq!(con.get("abandoned-run-000000", Some(16.0)), None);
    drop(con);
    let after = used_memory_alone(&server);
    // What stays is buffers sized by one batch (about 0.5 MB), not by
    // the number of leases: keeping the arena (14 MB), the id blocks
    // (6 MB) or even just the two hash indexes (2.6 MB) breaks this.
    let bound = (2 << 20).min(growth / 10);
    assert!(
        after <= before + bound,
        "{} bytes still used after reclaiming (before {before}, peak {peak}, \
         after {after}; allowed {bound})",
        after.saturating_sub(before)
    );
}

/// Against the binary: a kill -9 and restarts.
#[test]
fn reclaims_are_logged_and_stay_gone_after_a_crash_and_a_clean_restart() {
    const RUNS: usize = 2_500; // more than one reclaim step
    let (_temp, dir) = data_dir();
    let args = ["--lease-retention", "5", "--appendfsync", "always"];
    let mut server = Server::start_in(&dir, &args).unwrap_or_else(|e| panic!("{e}"));
    let mut con = server.typed();
    let runs = (0..RUNS).map(|i| format!("run-{i}"));
    let () = acquire_all_cmd(runs, "w", 0.0, 10.0)
        .query(&mut con)
        .expect("pipelined LEASE.ACQUIRE");
    // Gone to every command at exactly its deadline, before the reclaim
    // (which takes whole seconds) removes it: a lookup changes nothing.
    let looked_up = con.acquire("looked-up", "w", Some(0.5), Some(10.0));
    let looked_up = looked_up.expect("a free run");
    assert_eq!(con.get("looked-up", Some(15.5)), None);
    assert!(!con.release(&looked_up));
    assert_eq!(con.info("leases")["leases_reclaimed"], "0");

    // Past every deadline; this lease lives on.
    let live = con.acquire("live", "w", Some(100.0), Some(1000.0));
    let live = live.expect("a free run");
    wait_for_dbsize(&mut con, 1);
    assert_eq!(
        con.info("leases")["leases_reclaimed"],
        (RUNS + 1).to_string()
    );
    drop(con);
    server.kill9();

    // Restarted keeping expired leases forever: a reclaim that was not
    // logged would bring its lease back for good.
    let forever = ["--lease-retention", "0", "--appendfsync", "always"];
    for crash in [true, false] {
        let mut server = Server::start_in(&dir, &forever).unwrap_or_else(|e| panic!("{e}"));
        let mut con = server.typed();
        let how = if crash {
            "after kill -9"
        } else {
            "after a clean stop"
        };
        assert_eq!(con.dbsize(), 1, "{how}");
        for run_id in ["run-0", "run-1234", "run-2499", "looked-up"] {
            assert_eq!(con.get(run_id, Some(0.0)), None, "{run_id} {how}");
        }
        assert_eq!(con.get("live", Some(0.0)), Some(live.with_expired(false)));
        let info = con.info("leases");
        assert_eq!(info["leases"], "1", "{how}: {info:?}");
        assert_eq!(info["leases_reclaimed"], "0", "{how}: {info:?}");
        drop(con);
        server.stop();
    }
}

/// Leases made at small explicit times, expired and within retention
/// (retention 5: expiry 110, deadline 115), on a fresh server; the leases
/// of x, y and z.
async fn server_with_retained_leases() -> (InProcess, AsyncClient, Vec<Lease>) {
    let server = InProcess::start(&["--lease-retention", "5"]).await;
    let mut con = server.client().await;
    let mut leases = Vec::new();
    for run_id in ["x", "y", "z"] {
        let lease = con.acquire(run_id, "w", Some(100.0), Some(10.0)).await;
        leases.push(lease.expect("a free run"));
    }
    let x = leases[0].with_expired(true);
    assert_eq!(con.get("x", Some(112.0)).await, Some(x));
    (server, con, leases)
}

#[tokio::test(start_paused = true)]
async fn reclaiming_follows_registry_time_not_the_wall_clock() {
    let (_server, mut con, leases) = server_with_retained_leases().await;
    // An hour on the server's clock, idle, then commands that do not carry
    // a lease time.
    advance(HOUR).await;
    settle().await;
    assert_eq!(con.dbsize().await, 3);
    for words in [
        &["PING"][..],
        &["INFO"],
        &["INFO", "leases"],
        &["DBSIZE"],
        &["CONFIG", "GET", "*"],
        &["TIME"],
    ] {
        con.run(words).await;
    }
    // A lease command with a lagging now is read at registry time (112),
    // and RELEASE carries no time at all.
    let release = ["LEASE.RELEASE", "nobody:w:99", "99"];
    assert_eq!(con.run(&release).await, Value::Int(0));
    assert_eq!(con.get("nobody", Some(50.0)).await, None);
    advance(SECOND).await;
    settle().await;
    assert_eq!(con.dbsize().await, 3);
    let info = con.info("leases").await;
    assert_eq!(info["registry_time"], "112", "{info:?}");
    assert_eq!(info["leases_reclaimed"], "0", "{info:?}");
    for lease in &leases {
        let run_id = std::str::from_utf8(&lease.run_id).unwrap();
        let got = con.get(run_id, Some(101.0)).await;
        assert_eq!(got, Some(lease.with_expired(true)), "{run_id}");
    }

    // An explicit now at the deadline: a lookup finds x gone, and once
    // the whole second of their expiry is past it, the reclaim takes the
    // rest.
    assert_eq!(con.get("x", Some(115.0)).await, None);
    assert_eq!(con.get("nobody", Some(116.0)).await, None);
    settle().await;
    assert_eq!(con.dbsize().await, 0);
    assert_eq!(con.info("leases").await["leases_reclaimed"], "3");
}

#[tokio::test(start_paused = true)]
async fn a_read_without_now_changes_nothing_and_a_write_without_now_moves_time_and_reclaims() {
    let (_server, mut con, leases) = server_with_retained_leases().await;
    // Evaluated at the server's clock, so expired, but time stays at 112.
    assert_eq!(con.get("nobody", None).await, None);
    assert!(!con.validate("x", &leases[0], None).await);
    let info = con.info("leases").await;
    assert_eq!(info["registry_time"], "112", "{info:?}");
    let x = leases[0].with_expired(true);
    assert_eq!(con.get("x", Some(112.0)).await, Some(x));
    // An acquire without `now` moves registry time to the clock: the three
    // are past retention, and reclaimed.
    assert!(con.acquire("fresh", "w", None, None).await.is_some());
    settle().await;
    assert_eq!(con.dbsize().await, 1);
    let info = con.info("leases").await;
    assert_eq!(info["leases_reclaimed"], "3", "{info:?}");
    let time: f64 = info["registry_time"].parse().unwrap();
    assert!(time > 1.6e9, "registry time {time}");
    assert_eq!(con.get("x", Some(112.0)).await, None);
}

#[tokio::test(start_paused = true)]
async fn retention_0_keeps_expired_leases_forever() {
    let server = InProcess::start(&["--lease-retention", "0"]).await;
    let mut con = server.client().await;
    let first = con.acquire("first", "w", Some(0.0), Some(10.0)).await;
    let first = first.unwrap();
    let second = con.acquire("second", "w", Some(0.0), Some(10.0)).await;
    let second = second.unwrap();
    let got = con.get("first", Some(1e9)).await;
    assert_eq!(got, Some(first.with_expired(true)));
    // And the server clock, later still, and an hour on.
    assert_eq!(con.get("nobody", None).await, None);
    advance(HOUR).await;
    settle().await;
    assert_eq!(con.dbsize().await, 2);
    let got = con.get("second", Some(0.0)).await;
    assert_eq!(got, Some(second.with_expired(true)));
    let info = con.info("leases").await;
    assert_eq!(info["leases_reclaimed"], "0", "{info:?}");
    assert_eq!(info["leases_expired"], "2", "{info:?}");
    assert_eq!(info["lease_retention"], "0", "{info:?}");
    assert!(con.release(&first).await);
    assert!(con.release(&second).await);
    assert_eq!(con.dbsize().await, 0);
}

#[tokio::test]
async fn info_leases_counts_leases_and_command_outcomes() {
    let server = InProcess::start(&["--lease-retention", "100", "--lease-ttl", "7"]).await;
    let mut con = server.client().await;
    let a = con.acquire("a", "w", Some(0.0), Some(10.0)).await.unwrap();
    let b = con.acquire("b", "w", Some(0.0), Some(10.0)).await.unwrap();
    let c = con
        .acquire("c", "w", Some(0.0), Some(1000.0))
        .await
        .unwrap();
    assert_eq!(con.acquire("a", "w", Some(5.0), None).await, None);
    assert!(con.heartbeat(&c, Some(20.0)).await);
    assert!(!con.heartbeat(&a, Some(50.0)).await); // expired
    let wrong_token = Lease {
        fencing_token: 99,
        ..c.clone()
    };
    assert!(!con.heartbeat(&wrong_token, Some(50.0)).await);
    // Default TTL: expires at 57.
    let d = con.acquire("d", "w", Some(50.0), None).await.unwrap();
    assert_eq!(d.expires_at, 57.0);

    // a and b expired (within retention), c and d active.
    let info = con.info("leases").await;
    assert_eq!(info["leases"], "4", "{info:?}");
    assert_eq!(info["leases_active"], "2", "{info:?}");
    assert_eq!(info["leases_expired"], "2", "{info:?}");
    assert_eq!(con.dbsize().await, 4);

    assert!(con.validate("c", &c, Some(50.0)).await);
    assert!(!con.validate("a", &a, Some(50.0)).await);
    assert!(con.release(&b).await);
    assert!(!con.release(&b).await);
    assert!(con.get("c", Some(50.0)).await.is_some());
    assert!(con.get("a", Some(50.0)).await.is_some()); // expired, still a lease
    assert_eq!(con.get("b", Some(50.0)).await, None);
    assert_eq!(con.get("never", Some(50.0)).await, None);

    let info = con.info("leases").await;
    let expected = [
        ("leases", "3"),
        ("leases_active", "2"),
        ("leases_expired", "1"),
        ("leases_reclaimed", "0"),
        ("last_fencing_token", "4"),
        ("registry_time", "50"),
        ("lease_ttl", "7"),
        ("lease_retention", "100"),
        ("acquire_ok", "4"),
        ("acquire_failed", "1"),
        ("heartbeat_ok", "1"),
        ("heartbeat_failed", "2"),
        ("validate_ok", "1"),
        ("validate_failed", "1"),
        ("release_ok", "1"),
        ("release_failed", "1"),
        ("get_ok", "2"),
        ("get_failed", "2"),
    ];
    for (name, value) in expected {
        assert_eq!(info[name], value, "{name} in {info:?}");
    }
    assert_eq!(con.config_get("lease-retention").await, "100");
    // Errors are answered and the connection stays usable.
    con.error(&["LEASE.GET"]).await;
    assert_eq!(con.dbsize().await, 3);
}

#[test]
fn a_bad_lease_retention_stops_the_start_naming_the_directive() {
    for value in ["-1", "abc", "inf", ""] {
        let (_temp, dir) = data_dir();
        let exited = common::binary::run_to_exit(&[
            "--port",
            "0",
            "--dir",
            dir.to_str().unwrap(),
            "--lease-retention",
            value,
        ]);
        let output = exited.output();
        assert!(!exited.status.success(), "{value:?}: {output}");
        assert!(
            output.contains("lease-retention") && !output.contains("Ready to accept"),
            "{value:?}: {output}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn dbsize_counts_active_and_retained_expired_leases() {
    let server = InProcess::start(&["--lease-retention", "30"]).await;
    let mut con = server.client().await;
    assert_eq!(con.dbsize().await, 0);
    for run_id in ["old-1", "old-2"] {
        con.acquire(run_id, "w", Some(0.0), Some(10.0))
            .await
            .unwrap();
    }
    for run_id in ["new-1", "new-2", "new-3"] {
        con.acquire(run_id, "w", Some(20.0), Some(100.0))
            .await
            .unwrap();
    }
    // old-* expired at 10, retained until 40.
    assert_eq!(con.dbsize().await, 5);
    assert_eq!(con.get("nobody", Some(39.0)).await, None);
    settle().await;
    assert_eq!(con.dbsize().await, 5);
    let info = con.info("leases").await;
    assert_eq!(info["leases_expired"], "2", "{info:?}");
    assert_eq!(con.get("nobody", Some(41.0)).await, None);
    settle().await;
    assert_eq!(con.dbsize().await, 3);
}
