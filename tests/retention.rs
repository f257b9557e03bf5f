//! Retention and reclaiming against the real binary: the retention
//! boundary, takeovers and heartbeats, memory after a mass abandonment,
//! reclaims surviving crashes and restarts, registry time (not the wall
//! clock) driving the sweep, `lease-retention 0`, INFO leases, CONFIG GET
//! and DBSIZE.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{Server, error, field, pairs, run};
use redis::{Connection, Value};

/// How long a poll waits for the sweep before the test fails.
const PATIENCE: Duration = Duration::from_secs(10);

fn int(con: &mut Connection, words: &[&str]) -> i64 {
    match run(con, words) {
        Value::Int(i) => i,
        other => panic!("{words:?} gave {other:?}"),
    }
}

fn dbsize(con: &mut Connection) -> i64 {
    int(con, &["DBSIZE"])
}

/// Polls DBSIZE until it is `expected` (the sweep works between
/// requests, a step at a time); fails with the last value after PATIENCE.
fn wait_for_dbsize(con: &mut Connection, expected: i64) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let size = dbsize(con);
        if size == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "DBSIZE is {size}, expected {expected}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A lease acquired at `now` with `ttl`: its lease id and token as text.
fn acquire(con: &mut Connection, run_id: &str, worker: &str, now: &str, ttl: &str) -> Lease {
    let reply = run(con, &["LEASE.ACQUIRE", run_id, worker, now, "TTL", ttl]);
    let lease = pairs(reply);
    let token = match field(&lease, "fencing_token") {
        Value::Int(token) => token,
        other => panic!("fencing_token {other:?}"),
    };
    let id = match field(&lease, "lease_id") {
        Value::BulkString(id) => String::from_utf8(id).unwrap(),
        other => panic!("lease_id {other:?}"),
    };
    assert_eq!(id, format!("{run_id}:{worker}:{token}"));
    Lease {
        run_id: run_id.to_owned(),
        id,
        token: token.to_string(),
    }
}

struct Lease {
    run_id: String,
    id: String,
    token: String,
}

impl Lease {
    fn release(&self, con: &mut Connection) -> i64 {
        int(con, &["LEASE.RELEASE", &self.id, &self.token])
    }

    fn heartbeat(&self, con: &mut Connection, now: &str) -> i64 {
        int(con, &["LEASE.HEARTBEAT", &self.id, &self.token, now])
    }

    fn validate(&self, con: &mut Connection, now: &str) -> i64 {
        int(
            con,
            &["LEASE.VALIDATE", &self.run_id, &self.id, &self.token, now],
        )
    }
}

/// What `LEASE.GET run now` returns: the lease's id, `expires_at` and
/// `expired`, or None for null.
fn get(con: &mut Connection, run_id: &str, now: &str) -> Option<(String, f64, i64)> {
    let reply = run(con, &["LEASE.GET", run_id, now]);
    if reply == Value::Nil {
        return None;
    }
    let lease = pairs(reply);
    let id = match field(&lease, "lease_id") {
        Value::BulkString(id) => String::from_utf8(id).unwrap(),
        other => panic!("lease_id {other:?}"),
    };
    let expires_at = match field(&lease, "expires_at") {
        Value::BulkString(text) => String::from_utf8(text).unwrap().parse().unwrap(),
        other => panic!("expires_at {other:?}"),
    };
    let expired = match field(&lease, "expired") {
        Value::Int(flag) => flag,
        other => panic!("expired {other:?}"),
    };
    Some((id, expires_at, expired))
}

/// The fields of one INFO section.
fn info(con: &mut Connection, section: &str) -> HashMap<String, String> {
    let text: String = redis::cmd("INFO").arg(section).query(con).expect("INFO");
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (name, value) = line.split_once(':').expect("name:value");
            (name.to_owned(), value.to_owned())
        })
        .collect()
}

fn info_u64(con: &mut Connection, section: &str, name: &str) -> u64 {
    let fields = info(con, section);
    let value = fields
        .get(name)
        .unwrap_or_else(|| panic!("no {name} in INFO {section}: {fields:?}"));
    value.parse().unwrap_or_else(|_| panic!("{name}:{value}"))
}

fn data_dir() -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = temp.path().join("data");
    (temp, dir)
}

#[test]
fn an_expired_lease_is_releasable_until_expiry_plus_retention_and_gone_from_then_on() {
    let server = Server::start_with(&["--lease-retention", "60"]);
    let mut con = server.connect();
    // Each expires at 10: releasable while time < 70.
    let a = acquire(&mut con, "a", "w", "0", "10");
    let b = acquire(&mut con, "b", "w", "0", "10");
    let c = acquire(&mut con, "c", "w", "0", "10");
    let _d = acquire(&mut con, "d", "w", "0", "10");
    assert_eq!(dbsize(&mut con), 4);

    // One second before the deadline: still there, expired, releasable.
    assert_eq!(get(&mut con, "a", "69"), Some((a.id.clone(), 10.0, 1)));
    assert_eq!(get(&mut con, "b", "69"), Some((b.id.clone(), 10.0, 1)));
    assert_eq!(a.release(&mut con), 1);
    assert_eq!(get(&mut con, "a", "69"), None);
    assert_eq!(dbsize(&mut con), 3);

    // Exactly at the deadline it is gone.
    assert_eq!(get(&mut con, "b", "70"), None);
    assert_eq!(b.release(&mut con), 0);

    // One second after: gone for every command, and the sweep takes the
    // one no command looked at (d).
    assert_eq!(get(&mut con, "c", "71"), None);
    assert_eq!(c.release(&mut con), 0);
    assert_eq!(c.heartbeat(&mut con, "71"), 0);
    assert_eq!(c.validate(&mut con, "71"), 0);
    wait_for_dbsize(&mut con, 0);
    assert_eq!(get(&mut con, "d", "71"), None);
    let leases = info(&mut con, "leases");
    assert_eq!(leases["leases_reclaimed"], "3", "{leases:?}");
    assert_eq!(leases["leases"], "0");

    // A reclaimed run is free; the next token follows on.
    let again = acquire(&mut con, "c", "w2", "71", "10");
    assert_eq!(again.token, "5");
}

#[test]
fn a_run_taken_over_keeps_its_new_lease_past_the_old_leases_retention() {
    let server = Server::start_with(&["--lease-retention", "5"]);
    let mut con = server.connect();
    let old = acquire(&mut con, "run", "a", "0", "10");
    // A lease nobody takes over, expiring with the old one: its reclaim
    // shows the sweep has been past that second.
    acquire(&mut con, "abandoned", "a", "0", "10");
    let new = acquire(&mut con, "run", "b", "12", "10");
    assert_eq!(new.token, "3");

    // Past the old lease's deadline (15), before the new one's (27).
    assert_eq!(get(&mut con, "run", "26"), Some((new.id.clone(), 22.0, 1)));
    wait_for_dbsize(&mut con, 1);
    assert_eq!(get(&mut con, "abandoned", "26"), None);
    assert_eq!(get(&mut con, "run", "26"), Some((new.id.clone(), 22.0, 1)));
    assert_eq!(old.release(&mut con), 0);
    assert_eq!(dbsize(&mut con), 1);
    assert_eq!(info(&mut con, "leases")["leases_reclaimed"], "1");
    assert_eq!(new.release(&mut con), 1);
    assert_eq!(dbsize(&mut con), 0);
}

#[test]
fn a_heartbeat_postpones_reclaiming() {
    let server = Server::start_with(&["--lease-retention", "5"]);
    let mut con = server.connect();
    let kept = acquire(&mut con, "kept", "w", "0", "10");
    acquire(&mut con, "abandoned", "w", "0", "10");
    // Expiry 10 -> 18: into another second of the expiry index.
    assert_eq!(kept.heartbeat(&mut con, "8"), 1);

    // Past 10 + 5, before 18 + 5.
    assert_eq!(
        get(&mut con, "abandoned", "0"),
        Some(("abandoned:w:2".into(), 10.0, 0))
    );
    assert_eq!(get(&mut con, "other", "22"), None);
    wait_for_dbsize(&mut con, 1);
    assert_eq!(
        get(&mut con, "kept", "22"),
        Some((kept.id.clone(), 18.0, 1))
    );
    assert_eq!(get(&mut con, "abandoned", "22"), None);

    // At 18 + 5 the heartbeat's deadline has come too.
    assert_eq!(get(&mut con, "other", "24"), None);
    wait_for_dbsize(&mut con, 0);
    assert_eq!(kept.release(&mut con), 0);
    assert_eq!(info(&mut con, "leases")["leases_reclaimed"], "2");
}

/// `used_memory` as a new, sole connection sees it: the buffers of
/// connections that have closed are freed, so the figure is the registry
/// and what the core keeps between requests.
fn used_memory_alone(server: &Server) -> u64 {
    let mut con = server.connect();
    let deadline = Instant::now() + PATIENCE;
    while info_u64(&mut con, "clients", "connected_clients") != 1 {
        assert!(Instant::now() < deadline, "other clients stay connected");
        std::thread::sleep(Duration::from_millis(10));
    }
    info_u64(&mut con, "memory", "used_memory")
}

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
    let mut con = server.connect();
    for start in (0..RUNS).step_by(BATCH) {
        let mut pipe = redis::pipe();
        for i in start..start + BATCH {
            pipe.cmd("LEASE.ACQUIRE")
                .arg(format!("abandoned-run-{i:06}"))
                .arg("worker-1")
                .arg(0)
                .arg("TTL")
                .arg(10)
                .ignore();
        }
        let () = pipe.query(&mut con).expect("pipelined LEASE.ACQUIRE");
    }
    assert_eq!(dbsize(&mut con), RUNS as i64);
    let peak = info_u64(&mut con, "memory", "used_memory");
    let growth = peak.saturating_sub(before);
    // A slot is 56 bytes, the ids take a 32-byte block, and two hash
    // indexes: well over 15 MiB, or the figure is not measuring leases.
    assert!(
        growth > 15 << 20,
        "used_memory grew only {growth} bytes for {RUNS} leases ({before} -> {peak})"
    );

    // One command moves time past every deadline (10 + 5).
    assert_eq!(get(&mut con, "nobody", "16"), None);
    wait_for_dbsize(&mut con, 0);
    let leases = info(&mut con, "leases");
    assert_eq!(leases["leases_reclaimed"], RUNS.to_string(), "{leases:?}");
    assert_eq!(leases["leases"], "0");
    assert_eq!(get(&mut con, "abandoned-run-000000", "16"), None);
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

#[test]
fn reclaims_are_logged_and_stay_gone_after_a_crash_and_a_clean_restart() {
    const RUNS: usize = 2_500; // more than one sweep step
    let (_temp, dir) = data_dir();
    let args = ["--lease-retention", "5", "--appendfsync", "always"];
    let mut server = Server::start_in(&dir, &args).unwrap_or_else(|e| panic!("{e}"));
    let mut con = server.connect();
    let mut pipe = redis::pipe();
    for i in 0..RUNS {
        pipe.cmd("LEASE.ACQUIRE")
            .arg(format!("run-{i}"))
            .arg("w")
            .arg(0)
            .arg("TTL")
            .arg(10)
            .ignore();
    }
    let () = pipe.query(&mut con).expect("pipelined LEASE.ACQUIRE");
    // Gone to every command at exactly its deadline, before the sweep
    // (which takes whole seconds) reclaims it: a lookup changes nothing.
    let looked_up = acquire(&mut con, "looked-up", "w", "0.5", "10");
    assert_eq!(get(&mut con, "looked-up", "15.5"), None);
    assert_eq!(looked_up.release(&mut con), 0);
    assert_eq!(info(&mut con, "leases")["leases_reclaimed"], "0");

    // Past every deadline; this lease lives on.
    let live = acquire(&mut con, "live", "w", "100", "1000");
    wait_for_dbsize(&mut con, 1);
    assert_eq!(
        info(&mut con, "leases")["leases_reclaimed"],
        (RUNS + 1).to_string()
    );
    drop(con);
    server.kill9();

    // Restarted keeping expired leases forever: a reclaim that was not
    // logged would bring its lease back for good.
    let forever = ["--lease-retention", "0", "--appendfsync", "always"];
    for crash in [true, false] {
        let mut server = Server::start_in(&dir, &forever).unwrap_or_else(|e| panic!("{e}"));
        let mut con = server.connect();
        let how = if crash {
            "after kill -9"
        } else {
            "after a clean stop"
        };
        assert_eq!(dbsize(&mut con), 1, "{how}");
        for run_id in ["run-0", "run-1234", "run-2499", "looked-up"] {
            assert_eq!(get(&mut con, run_id, "0"), None, "{run_id} {how}");
        }
        assert_eq!(
            get(&mut con, "live", "0"),
            Some((live.id.clone(), 1100.0, 0))
        );
        let leases = info(&mut con, "leases");
        assert_eq!(leases["leases"], "1", "{how}: {leases:?}");
        assert_eq!(leases["leases_reclaimed"], "0", "{how}: {leases:?}");
        drop(con);
        server.stop();
    }
}

/// Leases made at small explicit times, expired and within retention
/// (retention 5: expiry 110, deadline 115), on a fresh server.
fn server_with_retained_leases() -> (Server, Connection) {
    let server = Server::start_with(&["--lease-retention", "5"]);
    let mut con = server.connect();
    for run_id in ["x", "y", "z"] {
        acquire(&mut con, run_id, "w", "100", "10");
    }
    assert_eq!(get(&mut con, "x", "112"), Some(("x:w:1".into(), 110.0, 1)));
    (server, con)
}

#[test]
fn reclaiming_follows_registry_time_not_the_wall_clock() {
    let (_server, mut con) = server_with_retained_leases();
    // Idle, then commands that do not carry a lease time.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(dbsize(&mut con), 3);
    for words in [
        &["PING"][..],
        &["INFO"],
        &["INFO", "leases"],
        &["DBSIZE"],
        &["CONFIG", "GET", "*"],
        &["TIME"],
    ] {
        run(&mut con, words);
    }
    // A lease command with a lagging now is read at registry time (112),
    // and RELEASE carries no time at all.
    assert_eq!(int(&mut con, &["LEASE.RELEASE", "nobody:w:99", "99"]), 0);
    assert_eq!(get(&mut con, "nobody", "50"), None);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(dbsize(&mut con), 3);
    let leases = info(&mut con, "leases");
    assert_eq!(leases["registry_time"], "112", "{leases:?}");
    assert_eq!(leases["leases_reclaimed"], "0", "{leases:?}");
    for run_id in ["x", "y", "z"] {
        let lease = get(&mut con, run_id, "101").unwrap_or_else(|| panic!("{run_id} gone"));
        assert_eq!(lease.2, 1);
    }

    // An explicit now at the deadline: a lookup finds x gone, and once
    // the whole second of their expiry is past it, the sweep takes the rest.
    assert_eq!(get(&mut con, "x", "115"), None);
    assert_eq!(get(&mut con, "nobody", "116"), None);
    wait_for_dbsize(&mut con, 0);
    assert_eq!(info(&mut con, "leases")["leases_reclaimed"], "3");
}

#[test]
fn a_read_without_now_changes_nothing_and_a_write_without_now_moves_time_and_reclaims() {
    let (_server, mut con) = server_with_retained_leases();
    // Evaluated at the server's clock, so expired, but time stays at 112.
    assert_eq!(run(&mut con, &["LEASE.GET", "nobody"]), Value::Nil);
    assert_eq!(int(&mut con, &["LEASE.VALIDATE", "x", "x:w:1", "1"]), 0);
    let leases = info(&mut con, "leases");
    assert_eq!(leases["registry_time"], "112", "{leases:?}");
    assert_eq!(get(&mut con, "x", "112"), Some(("x:w:1".into(), 110.0, 1)));
    // An acquire without `now` moves registry time to the clock: the three
    // are past retention, and reclaimed.
    run(&mut con, &["LEASE.ACQUIRE", "fresh", "w"]);
    wait_for_dbsize(&mut con, 1);
    let leases = info(&mut con, "leases");
    assert_eq!(leases["leases_reclaimed"], "3", "{leases:?}");
    let time: f64 = leases["registry_time"].parse().unwrap();
    assert!(time > 1.6e9, "registry time {time}");
    assert_eq!(get(&mut con, "x", "112"), None);
}

#[test]
fn retention_0_keeps_expired_leases_forever() {
    let server = Server::start_with(&["--lease-retention", "0"]);
    let mut con = server.connect();
    let first = acquire(&mut con, "first", "w", "0", "10");
    let second = acquire(&mut con, "second", "w", "0", "10");
    assert_eq!(
        get(&mut con, "first", "1e9"),
        Some((first.id.clone(), 10.0, 1))
    );
    // And the server clock, later still.
    assert_eq!(run(&mut con, &["LEASE.GET", "nobody"]), Value::Nil);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(dbsize(&mut con), 2);
    assert_eq!(
        get(&mut con, "second", "0"),
        Some((second.id.clone(), 10.0, 1))
    );
    let leases = info(&mut con, "leases");
    assert_eq!(leases["leases_reclaimed"], "0", "{leases:?}");
    assert_eq!(leases["leases_expired"], "2", "{leases:?}");
    assert_eq!(leases["lease_retention"], "0", "{leases:?}");
    assert_eq!(first.release(&mut con), 1);
    assert_eq!(second.release(&mut con), 1);
    assert_eq!(dbsize(&mut con), 0);
}

#[test]
fn info_leases_counts_leases_and_command_outcomes() {
    let server = Server::start_with(&["--lease-retention", "100", "--lease-ttl", "7"]);
    let mut con = server.connect();
    let a = acquire(&mut con, "a", "w", "0", "10");
    let b = acquire(&mut con, "b", "w", "0", "10");
    let c = acquire(&mut con, "c", "w", "0", "1000");
    assert_eq!(run(&mut con, &["LEASE.ACQUIRE", "a", "w", "5"]), Value::Nil);
    assert_eq!(c.heartbeat(&mut con, "20"), 1);
    assert_eq!(a.heartbeat(&mut con, "50"), 0); // expired
    assert_eq!(int(&mut con, &["LEASE.HEARTBEAT", &c.id, "99", "50"]), 0);
    // Default TTL: expires at 57.
    let reply = run(&mut con, &["LEASE.ACQUIRE", "d", "w", "50"]);
    assert_eq!(field(&pairs(reply), "expires_at"), common::bulk_value("57"));

    // a and b expired (within retention), c and d active.
    let leases = info(&mut con, "leases");
    assert_eq!(leases["leases"], "4", "{leases:?}");
    assert_eq!(leases["leases_active"], "2", "{leases:?}");
    assert_eq!(leases["leases_expired"], "2", "{leases:?}");
    assert_eq!(dbsize(&mut con), 4);

    assert_eq!(c.validate(&mut con, "50"), 1);
    assert_eq!(a.validate(&mut con, "50"), 0);
    assert_eq!(b.release(&mut con), 1);
    assert_eq!(b.release(&mut con), 0);
    assert!(get(&mut con, "c", "50").is_some());
    assert!(get(&mut con, "a", "50").is_some()); // expired, still a lease
    assert_eq!(get(&mut con, "b", "50"), None);
    assert_eq!(get(&mut con, "never", "50"), None);

    let leases = info(&mut con, "leases");
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
        assert_eq!(leases[name], value, "{name} in {leases:?}");
    }
    let retention: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("lease-retention")
        .query(&mut con)
        .unwrap();
    assert_eq!(retention, ["lease-retention", "100"]);
    // Errors are answered and the connection stays usable.
    error(&mut con, &["LEASE.GET"]);
    assert_eq!(dbsize(&mut con), 3);
}

#[test]
fn a_bad_lease_retention_stops_the_start_naming_the_directive() {
    for value in ["-1", "abc", "inf", ""] {
        let (_temp, dir) = data_dir();
        let exited = common::run_to_exit(&[
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

#[test]
fn dbsize_counts_active_and_retained_expired_leases() {
    let server = Server::start_with(&["--lease-retention", "30"]);
    let mut con = server.connect();
    assert_eq!(dbsize(&mut con), 0);
    for run_id in ["old-1", "old-2"] {
        acquire(&mut con, run_id, "w", "0", "10");
    }
    for run_id in ["new-1", "new-2", "new-3"] {
        acquire(&mut con, run_id, "w", "20", "100");
    }
    // old-* expired at 10, retained until 40.
    assert_eq!(dbsize(&mut con), 5);
    assert_eq!(get(&mut con, "nobody", "39"), None);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(dbsize(&mut con), 5);
    let leases = info(&mut con, "leases");
    assert_eq!(leases["leases_expired"], "2", "{leases:?}");
    assert_eq!(get(&mut con, "nobody", "41"), None);
    wait_for_dbsize(&mut con, 3);
}
