//! Blocked acquires (`LEASE.ACQUIRE ... BLOCK ms`) and lock delays, through
//! the `redis` crate against a server in the test's runtime with paused
//! time: `tokio::time::advance` moves the server's clock, so a lease
//! expires, a waiter is served and a timeout runs out without the test
//! waiting for it, and the server's clock tells when each happened.
//!
//! Each waiter has a connection of its own, as the README tells users: a
//! blocked connection answers nothing else until it is served.

mod common;

use std::time::Duration;

use common::client::{AsyncClient, Lease, lease_or_null, lease_reply};
use common::inprocess::{InProcess, at_one_instant, settle};
use redis::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;
use tokio::time::advance;

const TTL: f64 = 5.0;
/// A timer for a time on the server's clock is set a microsecond late, to
/// be sure the clock (read to the millisecond) has reached it, and tokio
/// rounds a timer's deadline up to its next millisecond tick (ticks that
/// need not line up with the server clock's milliseconds). So a timer for
/// a time fires up to a millisecond after it: a test that moves the clock
/// to exactly that time moves it this much further. (With 2 µs, a hand-over
/// at an expiry waited forever in about one run in twenty: whenever the
/// tick fell after the expiry.)
const ROUNDING: Duration = Duration::from_micros(1_002);

/// A blocked acquire under way on a connection of its own.
struct Waiter {
    worker: String,
    /// The connection's client id, for `CLIENT UNBLOCK` and `CLIENT KILL`.
    id: i64,
    reply: JoinHandle<redis::RedisResult<Value>>,
}

/// Starts `LEASE.ACQUIRE run worker TTL 5 BLOCK block_ms` on a new
/// connection and waits until the server has queued it.
async fn block(server: &InProcess, run: &str, worker: &str, block_ms: u64) -> Waiter {
    let mut con = server.client().await;
    let id = common::client::int(&con.run(&["CLIENT", "ID"]).await);
    let queued = waiters(&mut server.client().await, run).await.len();
    let words = [
        "LEASE.ACQUIRE".to_string(),
        run.to_string(),
        worker.to_string(),
        "TTL".into(),
        TTL.to_string(),
        "BLOCK".into(),
        block_ms.to_string(),
    ];
    let reply = tokio::spawn(async move {
        let cmd = common::client::words(&words.iter().map(String::as_str).collect::<Vec<_>>());
        cmd.query_async::<Value>(&mut con.con).await
    });
    let mut admin = server.client().await;
    while waiters(&mut admin, run).await.len() == queued {
        settle().await;
    }
    Waiter {
        worker: worker.to_string(),
        id,
        reply,
    }
}

/// `LEASE.WAITERS run`.
async fn waiters(con: &mut AsyncClient, run: &str) -> Vec<String> {
    let Value::Array(items) = con.run(&["LEASE.WAITERS", run]).await else {
        panic!("LEASE.WAITERS answers an array")
    };
    items.iter().map(common::client::text).collect()
}

/// The waiter's reply, which must have come or come at this instant.
async fn outcome(waiter: Waiter) -> redis::RedisResult<Value> {
    at_one_instant(waiter.reply).await.expect("the waiter task")
}

/// The server's clock when it granted `lease` (taken with `TTL 5`).
fn granted_at(lease: &Lease) -> f64 {
    lease.expires_at - TTL
}

#[tokio::test(start_paused = true)]
async fn twenty_waiters_get_the_run_one_at_a_time_in_arrival_order() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client().await;
    let mut holder = con
        .acquire("run", "w-first", None, Some(TTL))
        .await
        .unwrap();
    let mut queue = Vec::new();
    for i in 0..20 {
        queue.push(block(&server, "run", &format!("w{i:02}"), 0).await);
    }
    let workers: Vec<String> = queue.iter().map(|w| w.worker.clone()).collect();
    assert_eq!(waiters(&mut con, "run").await, workers);
    assert_eq!(con.info("clients").await["blocked_clients"], "20");

    for (turn, waiter) in queue.into_iter().enumerate() {
        // Every other hand-over by a release, the others by an expiry with
        // no command sent.
        let released = turn % 2 == 0;
        if released {
            assert!(con.release(&holder).await);
        } else {
            advance(Duration::from_secs_f64(TTL) + ROUNDING).await;
        }
        let worker = waiter.worker.clone();
        let lease = lease_reply(&outcome(waiter).await.unwrap());
        assert_eq!(lease.worker_id, worker.as_bytes());
        assert_eq!(lease.fencing_token, holder.fencing_token + 1);
        if !released {
            // Served as the clock passed the old lease's expiry.
            let late = granted_at(&lease) - holder.expires_at;
            assert!((0.0..=0.05).contains(&late), "{late}");
        }
        // Held by the new lease alone; the others still wait, in order.
        assert!(con.validate("run", &lease, None).await);
        assert!(!con.validate("run", &holder, None).await);
        assert_eq!(waiters(&mut con, "run").await, workers[turn + 1..]);
        holder = lease;
    }
    assert_eq!(holder.fencing_token, 21);
    assert_eq!(con.info("clients").await["blocked_clients"], "0");
}

#[tokio::test(start_paused = true)]
async fn a_holder_that_dies_hands_the_run_over_at_its_expiry_with_no_command_sent() {
    let server = InProcess::start(&[]).await;
    let mut dead = server.client().await;
    let held = dead
        .acquire("run", "crashed", None, Some(2.0))
        .await
        .unwrap();
    let waiter = block(&server, "run", "next", 0).await;
    // The holder's connection goes away without a release, as a killed
    // process's would; nobody sends anything after that.
    drop(dead);
    advance(Duration::from_millis(1_999)).await;
    settle().await;
    assert!(!waiter.reply.is_finished());
    advance(Duration::from_millis(1) + ROUNDING).await;
    let lease = lease_reply(&outcome(waiter).await.unwrap());
    assert_eq!(lease.fencing_token, 2);
    let late = granted_at(&lease) - held.expires_at;
    assert!(
        (0.0..=0.05).contains(&late),
        "granted {late} s after the expiry"
    );
}

#[tokio::test(start_paused = true)]
async fn waiters_that_leave_are_never_granted_and_cost_no_token() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client().await;
    let holder = con
        .acquire("run", "holder", None, Some(100.0))
        .await
        .unwrap();
    let timing_out = block(&server, "run", "times-out", 1_000).await;
    let leaving = block(&server, "run", "disconnects", 0).await;
    let killed = block(&server, "run", "killed", 0).await;
    let unblocked = block(&server, "run", "unblocked", 0).await;
    let erred = block(&server, "run", "erred", 0).await;
    let patient = block(&server, "run", "patient", 0).await;
    let listed = con.run(&["CLIENT", "LIST"]).await;
    let blocked = common::client::text(&listed).matches("flags=b ").count();
    assert_eq!(blocked, 6);

    // The timeout runs out: null, and the waiter is gone.
    advance(Duration::from_millis(1_000)).await;
    assert_eq!(outcome(timing_out).await.unwrap(), Value::Nil);
    // Its connection closes.
    leaving.reply.abort();
    let _ = leaving.reply.await;
    // CLIENT KILL closes the connection.
    let kill = ["CLIENT", "KILL", "ID", &killed.id.to_string()];
    assert_eq!(con.run(&kill).await, Value::Int(1));
    assert!(outcome(killed).await.is_err());
    // CLIENT UNBLOCK: null, or an error; a second time finds nobody.
    let id = unblocked.id.to_string();
    assert_eq!(con.run(&["CLIENT", "UNBLOCK", &id]).await, Value::Int(1));
    assert_eq!(outcome(unblocked).await.unwrap(), Value::Nil);
    assert_eq!(con.run(&["CLIENT", "UNBLOCK", &id]).await, Value::Int(0));
    let id = erred.id.to_string();
    let unblock = ["CLIENT", "UNBLOCK", &id, "ERROR"];
    assert_eq!(con.run(&unblock).await, Value::Int(1));
    let error = outcome(erred).await.unwrap_err();
    assert_eq!(
        common::client::error_line(&error),
        "UNBLOCKED client unblocked via CLIENT UNBLOCK"
    );
    settle().await;
    assert_eq!(waiters(&mut con, "run").await, ["patient"]);
    assert_eq!(con.info("clients").await["blocked_clients"], "1");

    // The one still waiting gets the run, with the very next token.
    assert!(con.release(&holder).await);
    let lease = lease_reply(&outcome(patient).await.unwrap());
    assert_eq!(lease.worker_id, b"patient");
    assert_eq!(lease.fencing_token, 2);
    assert_eq!(con.info("clients").await["blocked_clients"], "0");
}

#[tokio::test(start_paused = true)]
async fn nobody_jumps_the_queue_of_a_run_that_has_just_come_free() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client().await;
    let holder = con.acquire("run", "holder", None, Some(TTL)).await.unwrap();
    let first = block(&server, "run", "first", 0).await;
    // In one pipeline: the release frees the run, and the acquires that
    // follow it at once find it promised to the queue.
    let mut pipe = redis::pipe();
    pipe.cmd("LEASE.RELEASE")
        .arg(&holder.lease_id)
        .arg(holder.fencing_token)
        .cmd("LEASE.ACQUIRE")
        .arg("run")
        .arg("jumper");
    let replies: Vec<Value> = at_one_instant(pipe.query_async(&mut con.con))
        .await
        .unwrap();
    assert_eq!(replies[0], Value::Int(1));
    assert_eq!(lease_or_null(&replies[1]), None);
    let lease = lease_reply(&outcome(first).await.unwrap());
    assert_eq!(
        (lease.worker_id.as_slice(), lease.fencing_token),
        (&b"first"[..], 2)
    );
    // A blocked acquire arriving now joins the back of the queue.
    let second = block(&server, "run", "second", 0).await;
    assert_eq!(waiters(&mut con, "run").await, ["second"]);
    assert!(con.acquire("run", "jumper", None, None).await.is_none());
    assert!(con.release(&lease).await);
    let lease = lease_reply(&outcome(second).await.unwrap());
    assert_eq!(lease.fencing_token, 3);
}

#[tokio::test(start_paused = true)]
async fn a_free_run_is_granted_at_once_and_a_held_one_times_out_with_null() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client().await;
    let words = ["LEASE.ACQUIRE", "run", "w", "BLOCK", "5000"];
    let lease = lease_reply(&con.run(&words).await);
    assert_eq!(lease.fencing_token, 1);
    let waiter = block(&server, "run", "late", 300).await;
    advance(Duration::from_millis(299)).await;
    settle().await;
    assert!(!waiter.reply.is_finished());
    advance(Duration::from_millis(1)).await;
    assert_eq!(outcome(waiter).await.unwrap(), Value::Nil);
    // No token was spent on it.
    assert!(con.release(&lease).await);
    let next = con.acquire("run", "w", None, None).await.unwrap();
    assert_eq!(next.fencing_token, 2);
}

#[tokio::test(start_paused = true)]
async fn a_blocked_connection_holds_its_pipeline_and_is_exempt_from_timeout() {
    let server = InProcess::start(&["--timeout", "1"]).await;
    let mut con = server.client().await;
    let holder = con
        .acquire("run", "holder", None, Some(100.0))
        .await
        .unwrap();
    let mut raw = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .unwrap();
    let pipeline = "LEASE.ACQUIRE run waiter BLOCK 0\r\nPING\r\nCLIENT GETNAME\r\n";
    raw.write_all(pipeline.as_bytes()).await.unwrap();
    let mut admin = server.client().await;
    while waiters(&mut admin, "run").await.is_empty() {
        settle().await;
    }
    // Well past `timeout`: still connected, still waiting, nothing answered
    // (the idle admin connections are closed meanwhile).
    advance(Duration::from_secs(5)).await;
    settle().await;
    let mut con = server.client().await;
    assert_eq!(waiters(&mut con, "run").await, ["waiter"]);
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(1), raw.read(&mut byte)).await;
    assert!(early.is_err(), "a blocked client answered early: {early:?}");

    assert!(con.release(&holder).await);
    let mut replies = Vec::new();
    while !replies.ends_with(b"+PONG\r\n$-1\r\n") {
        let mut chunk = [0u8; 512];
        let read = at_one_instant(raw.read(&mut chunk)).await.unwrap();
        assert!(
            read > 0,
            "closed after {:?}",
            String::from_utf8_lossy(&replies)
        );
        replies.extend_from_slice(&chunk[..read]);
    }
    let text = String::from_utf8_lossy(&replies);
    assert!(
        text.starts_with("*10\r\n$6\r\nrun_id\r\n$3\r\nrun\r\n"),
        "{text}"
    );
    assert!(text.contains("run:waiter:2"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn blocked_acquires_are_checked_like_any_acquire() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client().await;
    for (words, error) in [
        (
            &["LEASE.ACQUIRE", "r", "w", "10", "BLOCK", "100"][..],
            "ERR BLOCK cannot be given with now: a blocked acquire runs on the server's clock",
        ),
        (
            &["LEASE.ACQUIRE", "r", "w", "BLOCK", "-1"],
            "ERR timeout is negative",
        ),
        (
            &["LEASE.ACQUIRE", "r", "w", "BLOCK", "0.5"],
            "ERR timeout is not an integer or out of range",
        ),
        (&["LEASE.ACQUIRE", "r", "w", "BLOCK"], "ERR syntax error"),
        (
            &["LEASE.ACQUIRE", "r", "w", "LOCKDELAY", "61", "BLOCK", "0"],
            "ERR lock delay is more than 60 seconds (lease-max-lock-delay)",
        ),
        (
            &["CLIENT", "UNBLOCK", "1", "LATER"],
            "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR",
        ),
        (
            &["CLIENT", "UNBLOCK", "x"],
            "ERR value is not an integer or out of range",
        ),
        (
            &["CLIENT", "UNBLOCK", "1", "TIMEOUT", "extra"],
            "ERR unknown subcommand or wrong number of arguments for 'unblock'. Try CLIENT HELP.",
        ),
    ] {
        assert_eq!(con.error(words).await, error, "{words:?}");
    }
    assert_eq!(waiters(&mut con, "r").await, Vec::<String>::new());
    assert_eq!(con.dbsize().await, 0);
}

#[tokio::test(start_paused = true)]
async fn a_lock_delay_closes_the_run_after_an_expiry_but_not_after_a_release() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client().await;
    let words = ["LEASE.ACQUIRE", "run", "w", "TTL", "1", "LOCKDELAY", "2"];
    let lease = lease_reply(&con.run(&words).await);
    advance(Duration::from_millis(1_000)).await;
    // Expired, but closed until expires_at + 2, inclusive at that time.
    assert!(!con.validate("run", &lease, None).await);
    assert!(con.acquire("run", "other", None, None).await.is_none());
    advance(Duration::from_millis(1_999)).await;
    assert!(con.acquire("run", "other", None, None).await.is_none());
    advance(Duration::from_millis(1)).await;
    let taken = con.acquire("run", "other", None, Some(1.0)).await.unwrap();
    assert_eq!(taken.fencing_token, 2);

    // Released — before or after its expiry — the run is free at once.
    assert!(con.release(&taken).await);
    let words = ["LEASE.ACQUIRE", "run", "w", "TTL", "1", "LOCKDELAY", "30"];
    let lease = lease_reply(&con.run(&words).await);
    advance(Duration::from_millis(1_500)).await;
    assert!(con.release(&lease).await);
    assert!(con.acquire("run", "other", None, None).await.is_some());

    // The default comes from lease-lock-delay; a waiter waits it out.
    con.config_set(&[("lease-lock-delay", "3")]).await.unwrap();
    let lease = con.acquire("delayed", "w", None, Some(TTL)).await.unwrap();
    let waiter = block(&server, "delayed", "next", 0).await;
    advance(Duration::from_secs_f64(TTL + 2.9)).await;
    settle().await;
    assert!(!waiter.reply.is_finished());
    advance(Duration::from_millis(100) + ROUNDING).await;
    let next = lease_reply(&outcome(waiter).await.unwrap());
    let late = granted_at(&next) - (lease.expires_at + 3.0);
    assert!((0.0..=0.05).contains(&late), "{late}");
}

#[tokio::test(start_paused = true)]
async fn lock_delays_are_durable_across_a_restart_and_a_rewrite() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("data");
    let args = ["--appendonly", "yes"];
    let server = InProcess::start_in(&dir, &args).await.unwrap();
    let mut con = server.client().await;
    // On a logical clock: expires at 110, closed until 130.
    for (run, rewrite) in [("before", false), ("after", true)] {
        let words = [
            "LEASE.ACQUIRE",
            run,
            "w",
            "100",
            "TTL",
            "10",
            "LOCKDELAY",
            "20",
        ];
        lease_reply(&con.run(&words).await);
        if rewrite {
            con.run(&["BGREWRITEAOF"]).await;
        }
    }
    // Let the rewrite finish before stopping.
    for _ in 0..100 {
        settle().await;
        if con.info("persistence").await["aof_rewrite_in_progress"] == "0" {
            break;
        }
    }
    drop(con);
    server.stop().await;

    let server = InProcess::start_in(&dir, &args).await.unwrap();
    let mut con = server.client().await;
    // Each at 129.9 first: an acquire at 130 moves registry time there.
    for run in ["before", "after"] {
        assert!(con.acquire(run, "w2", Some(129.9), None).await.is_none());
    }
    for run in ["before", "after"] {
        let lease = con.acquire(run, "w2", Some(130.0), None).await.unwrap();
        assert_eq!(lease.worker_id, b"w2");
    }
    server.stop().await;
}

/// On the real clock, with the real binary: holders that die without a
/// release, each with a client blocked on its run and no other command
/// sent. How long after the dead lease's `expires_at` the server grants
/// the run, and the waiter has its reply.
#[test]
fn waiters_of_dead_holders_get_their_runs_within_50_ms_of_expires_at() {
    let server = common::binary::Server::start_with(&["--appendonly", "no"]);
    let mut waiting = Vec::new();
    for i in 0..20 {
        let run = format!("run-{i}");
        let ttl = 0.4 + 0.031 * f64::from(i);
        let mut holder = server.typed();
        let dead = holder.acquire(&run, "holder", None, Some(ttl)).unwrap();
        drop(holder);
        let mut con = server.connect();
        waiting.push(std::thread::spawn(move || {
            let mut cmd = redis::cmd("LEASE.ACQUIRE");
            cmd.arg(&run)
                .arg("next")
                .arg("TTL")
                .arg(TTL)
                .arg("BLOCK")
                .arg(10_000);
            let reply: Value = cmd.query(&mut con).unwrap();
            let arrived = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64();
            (dead, lease_reply(&reply), arrived)
        }));
    }
    let (mut granted, mut arrived) = (Vec::new(), Vec::new());
    for waiter in waiting {
        let (dead, lease, at) = waiter.join().unwrap();
        assert_eq!(lease.run_id, dead.run_id);
        assert_eq!(lease.worker_id, b"next");
        assert!(lease.fencing_token > dead.fencing_token);
        granted.push(granted_at(&lease) - dead.expires_at);
        arrived.push(at - dead.expires_at);
    }
    for (what, late) in [("granted", &mut granted), ("replied", &mut arrived)] {
        late.sort_by(f64::total_cmp);
        let (p50, p99, max) = (late[10], late[19], late[19]);
        println!(
            "{what} after expires_at: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            p50 * 1e3,
            p99 * 1e3,
            max * 1e3
        );
        // Never early (the clocks are this machine's, read to the ms).
        assert!(late[0] > -0.002, "{what}: {late:?}");
        assert!(max < 0.05, "{what}: {late:?}");
    }
}

/// `SHUTDOWN` with a client blocked: its connection closes without a
/// reply, and the run is never granted to it — after the restart the run
/// still has the lease it had, and the next token is the next one.
#[test]
fn a_waiter_stopped_by_shutdown_is_never_granted_the_run() {
    use std::io::Write;
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("data");
    let mut server = common::binary::Server::start_in(&dir, &["--appendonly", "yes"]).unwrap();
    let mut con = server.typed();
    let held = con.acquire("run", "holder", None, Some(3600.0)).unwrap();
    let mut waiter = server.raw();
    waiter
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    waiter
        .write_all(b"LEASE.ACQUIRE run waiter BLOCK 0\r\n")
        .unwrap();
    let queued = Value::Array(vec![common::client::bulk_value("waiter")]);
    while con.run(&["LEASE.WAITERS", "run"]) != queued {
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = redis::cmd("SHUTDOWN").query::<Value>(&mut server.connect());
    assert_eq!(common::raw::read_to_close(&mut waiter), b"");
    server.wait(Duration::from_secs(20));

    let server = common::binary::Server::start_in(&dir, &["--appendonly", "yes"]).unwrap();
    let mut con = server.typed();
    assert_eq!(
        con.get("run", None).map(|l| l.fencing_token),
        Some(held.fencing_token)
    );
    assert!(con.release(&held));
    let next = con.acquire("run", "next", None, None).unwrap();
    assert_eq!(next.fencing_token, held.fencing_token + 1);
}
