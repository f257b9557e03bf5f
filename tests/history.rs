//! Tenure history (`LEASE.HISTORY`) through the `redis` crate against the
//! real binary: a run's tenures through acquires, heartbeats, releases,
//! expiries, late releases and takeovers with every field, the
//! `lease-history-len` cap (at start and at runtime), `COUNT`, the history
//! reclaimed with its run, INFO's counts of it, errors, the replies in
//! RESP2 and RESP3, and durability: restarts, kill -9 under load in every
//! fsync mode, and a rewrite under load.
//!
//! HISTORY reads at the server's clock. Times the tests choose are whole
//! seconds near it (`t`), so that they come back exactly; the ones the
//! server chooses (a release's `ended_at`, leases taken without `now`) are
//! checked between readings of the clock taken around the command.

mod common;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::binary::{Server, clock, data_dir, wait_for_rewrites, wait_until};
use common::client::{Client, Lease, info_number, lease_reply};
use redis::Value;

/// A tenure as `LEASE.HISTORY` replies with it.
#[derive(Clone, Debug, PartialEq)]
struct Tenure {
    lease_id: String,
    worker_id: String,
    fencing_token: i64,
    acquired_at: f64,
    expires_at: f64,
    ended_at: Option<f64>,
    end: String,
    heartbeats: i64,
}

const KEYS: [&str; 8] = [
    "lease_id",
    "worker_id",
    "fencing_token",
    "acquired_at",
    "expires_at",
    "ended_at",
    "end",
    "heartbeats",
];

/// Reads one tenure, checking its shape: in RESP3 a map whose times are
/// doubles and whose open `ended_at` is null; in RESP2 a flat array whose
/// times are bulk strings and whose open `ended_at` is nil. The keys come
/// in the contract's order.
fn tenure(value: &Value) -> Tenure {
    let (pairs, resp3): (Vec<(&Value, &Value)>, bool) = match value {
        Value::Map(pairs) => (pairs.iter().map(|(k, v)| (k, v)).collect(), true),
        Value::Array(items) if items.len() == 16 => (
            items.chunks(2).map(|pair| (&pair[0], &pair[1])).collect(),
            false,
        ),
        other => panic!("not a tenure: {other:?}"),
    };
    let keys: Vec<&Value> = pairs.iter().map(|(k, _)| *k).collect();
    let want: Vec<Value> = KEYS
        .iter()
        .map(|k| Value::BulkString(k.as_bytes().to_vec()))
        .collect();
    assert_eq!(keys, want.iter().collect::<Vec<_>>(), "keys of {value:?}");
    let bulk = |value: &Value| match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).expect("UTF-8"),
        other => panic!("expected a bulk string, got {other:?} in {value:?}"),
    };
    let int = |value: &Value| match value {
        Value::Int(i) => *i,
        other => panic!("expected an integer, got {other:?}"),
    };
    let time = |value: &Value| match (resp3, value) {
        (true, Value::Double(d)) => *d,
        (false, Value::BulkString(text)) => std::str::from_utf8(text)
            .ok()
            .and_then(|text| text.parse().ok())
            .unwrap_or_else(|| panic!("not a number: {text:?}")),
        (_, other) => panic!("a time of the wrong type (RESP3: {resp3}): {other:?}"),
    };
    let ended_at = match pairs[5].1 {
        Value::Nil => None,
        other => Some(time(other)),
    };
    let tenure = Tenure {
        lease_id: bulk(pairs[0].1),
        worker_id: bulk(pairs[1].1),
        fencing_token: int(pairs[2].1),
        acquired_at: time(pairs[3].1),
        expires_at: time(pairs[4].1),
        ended_at,
        end: bulk(pairs[6].1),
        heartbeats: int(pairs[7].1),
    };
    let ends = ["active", "released", "released-late", "expired"];
    assert!(ends.contains(&tenure.end.as_str()), "{tenure:?}");
    assert_eq!(
        tenure.ended_at.is_none(),
        tenure.end == "active",
        "{tenure:?}"
    );
    if tenure.end == "expired" {
        assert_eq!(tenure.ended_at, Some(tenure.expires_at), "{tenure:?}");
    }
    tenure
}

/// The tenures of a `LEASE.HISTORY` reply, newest first.
fn tenures(reply: &Value) -> Vec<Tenure> {
    match reply {
        Value::Array(items) => items.iter().map(tenure).collect(),
        other => panic!("LEASE.HISTORY is not an array: {other:?}"),
    }
}

fn history_reply(con: &mut dyn redis::ConnectionLike, run: &str) -> Value {
    redis::cmd("LEASE.HISTORY")
        .arg(run)
        .query(con)
        .expect("LEASE.HISTORY")
}

/// `LEASE.HISTORY run`, newest first.
fn history(con: &mut dyn redis::ConnectionLike, run: &str) -> Vec<Tenure> {
    tenures(&history_reply(con, run))
}

/// `LEASE.HISTORY run COUNT count`, newest first.
fn history_count(con: &mut dyn redis::ConnectionLike, run: &str, count: i64) -> Vec<Tenure> {
    let reply: Value = redis::cmd("LEASE.HISTORY")
        .arg(run)
        .arg("COUNT")
        .arg(count)
        .query(con)
        .expect("LEASE.HISTORY COUNT");
    tenures(&reply)
}

/// The fencing tokens of tenures, in the order given.
fn tokens(tenures: &[Tenure]) -> Vec<i64> {
    tenures.iter().map(|tenure| tenure.fencing_token).collect()
}

/// A whole second of the server's clock, a little behind it.
fn whole_second() -> f64 {
    clock().floor()
}

/// `LEASE.RELEASE` at the server's clock: the readings of the clock just
/// before and just after it, between which its `ended_at` falls (the
/// server reads its clock in whole milliseconds, rounded down).
fn release_between(con: &mut Client, lease: &Lease) -> (f64, f64) {
    let before = (clock() * 1000.0).floor() / 1000.0;
    assert!(con.release(lease), "release of {lease:?}");
    (before, clock())
}

/// The tenure of `lease` with `acquired_at` and the rest as given.
fn tenure_of(lease: &Lease, acquired_at: f64, heartbeats: i64) -> Tenure {
    Tenure {
        lease_id: String::from_utf8(lease.lease_id.clone()).unwrap(),
        worker_id: String::from_utf8(lease.worker_id.clone()).unwrap(),
        fencing_token: lease.fencing_token,
        acquired_at,
        expires_at: lease.expires_at,
        ended_at: None,
        end: "active".into(),
        heartbeats,
    }
}

/// Checks that a released tenure ended between `from` and `to` and
/// returns it with that `ended_at`, to compare the rest exactly.
fn ended_between(read: &Tenure, from: f64, to: f64) -> Option<f64> {
    let at = read.ended_at.expect("ended");
    assert!(
        from <= at && at <= to,
        "ended at {at}, not in [{from}, {to}]"
    );
    Some(at)
}

#[test]
fn a_run_s_tenures_come_newest_first_with_every_field() {
    let server = Server::start();
    let mut con = server.typed();
    let t = whole_second();
    assert_eq!(history(&mut con, "r"), [], "an unknown run");

    // w1: two heartbeats, then its time passes.
    let w1 = con.acquire("r", "w1", Some(t - 100.0), Some(10.0)).unwrap();
    assert_eq!(w1.fencing_token, 1);
    assert!(con.heartbeat(&w1, Some(t - 95.0)));
    assert!(con.heartbeat(&w1, Some(t - 92.0)));
    let w1_tenure = Tenure {
        expires_at: t - 82.0,
        ended_at: Some(t - 82.0),
        end: "expired".into(),
        ..tenure_of(&w1, t - 100.0, 2)
    };
    // Expired at the server's clock although nobody took the run over.
    assert_eq!(history(&mut con, "r"), std::slice::from_ref(&w1_tenure));

    // w2 takes it over: w1's tenure stays expired, ended at its expiry.
    let w2 = con.acquire("r", "w2", Some(t - 80.0), Some(10.0)).unwrap();
    assert!(con.heartbeat(&w2, Some(t - 75.0)));
    let mut w2_tenure = Tenure {
        expires_at: t - 65.0,
        ended_at: Some(t - 65.0),
        end: "expired".into(),
        ..tenure_of(&w2, t - 80.0, 1)
    };
    assert_eq!(
        history(&mut con, "r"),
        [w2_tenure.clone(), w1_tenure.clone()]
    );
    // Taken over, w1's lease cannot be released: it stays expired.
    assert!(!con.release(&w1));
    assert_eq!(history(&mut con, "r")[1], w1_tenure);
    // Its worker releases it after its time: released-late, at the
    // server's clock.
    let (before, after) = release_between(&mut con, &w2);
    let read = history(&mut con, "r");
    w2_tenure.end = "released-late".into();
    w2_tenure.ended_at = ended_between(&read[0], before, after);
    assert_eq!(read, [w2_tenure.clone(), w1_tenure.clone()]);

    // w3 releases in time (its heartbeat at t + 2 is registry time, so
    // the release is at t + 2 or later).
    let w3 = con.acquire("r", "w3", Some(t + 1.0), Some(1000.0)).unwrap();
    assert!(con.heartbeat(&w3, Some(t + 2.0)));
    let mut w3_tenure = Tenure {
        expires_at: t + 1002.0,
        ..tenure_of(&w3, t + 1.0, 1)
    };
    assert_eq!(
        history(&mut con, "r"),
        [w3_tenure.clone(), w2_tenure.clone(), w1_tenure.clone()]
    );
    let (before, after) = release_between(&mut con, &w3);
    let read = history(&mut con, "r");
    w3_tenure.end = "released".into();
    w3_tenure.ended_at = ended_between(&read[0], before.max(t + 2.0), after.max(t + 2.0));
    // w4 holds it now.
    let w4 = con.acquire("r", "w4", Some(t + 3.0), Some(1000.0)).unwrap();
    let w4_tenure = tenure_of(&w4, t + 3.0, 0);
    let all = vec![w4_tenure, w3_tenure, w2_tenure, w1_tenure];
    assert_eq!(history(&mut con, "r"), all);
    assert_eq!(tokens(&all), [4, 3, 2, 1]);

    // COUNT: the newest n.
    assert_eq!(history_count(&mut con, "r", 1), all[..1]);
    assert_eq!(history_count(&mut con, "r", 3), all[..3]);
    assert_eq!(history_count(&mut con, "r", 100), all);
    let lower = tenures(&con.run(&["LEASE.HISTORY", "r", "count", "2"]));
    assert_eq!(lower, all[..2]);
    // The last COUNT counts, as in Redis.
    let twice = tenures(&con.run(&["LEASE.HISTORY", "r", "COUNT", "1", "COUNT", "2"]));
    assert_eq!(twice, all[..2]);
    // Other runs are their own.
    assert_eq!(history(&mut con, "other"), []);
    // Reading changed nothing.
    assert_eq!(history(&mut con, "r"), all);
}

/// Acquires `run` for `worker` (TTL 100, server clock) and releases it.
fn tenure_released(con: &mut Client, run: &str, worker: &str) -> Lease {
    let lease = con.acquire(run, worker, None, Some(100.0)).expect("free");
    assert!(con.release(&lease));
    lease
}

#[test]
fn lease_history_len_caps_each_run_at_start_and_at_runtime() {
    let server = Server::start_with(&["--lease-history-len", "3"]);
    let mut con = server.typed();
    assert_eq!(con.config_get("lease-history-len"), "3");
    for i in 1..=6 {
        tenure_released(&mut con, "r", &format!("w{i}"));
    }
    let read = history(&mut con, "r");
    assert_eq!(tokens(&read), [6, 5, 4]);
    assert!(
        read.iter().all(|tenure| tenure.end == "released"),
        "{read:?}"
    );
    assert_eq!(history_count(&mut con, "r", 10).len(), 3);
    assert_eq!(info_number(&con.info("memory"), "run_history_entries"), 3);
    // The current tenure counts toward the cap.
    let w7 = con.acquire("r", "w7", None, Some(100.0)).unwrap();
    let read = history(&mut con, "r");
    assert_eq!(tokens(&read), [7, 6, 5]);
    assert_eq!(read[0].end, "active");

    // Lowered: reads at once, each run's memory as its next tenure ends.
    con.config_set(&[("lease-history-len", "2")]).unwrap();
    assert_eq!(tokens(&history(&mut con, "r")), [7, 6]);
    assert_eq!(info_number(&con.info("memory"), "run_history_entries"), 3);
    assert!(con.release(&w7));
    assert_eq!(tokens(&history(&mut con, "r")), [7, 6]);
    assert_eq!(info_number(&con.info("memory"), "run_history_entries"), 2);

    // 0 keeps none: every read is empty, and tenures ending meanwhile are
    // not kept.
    con.config_set(&[("lease-history-len", "0")]).unwrap();
    assert_eq!(history(&mut con, "r"), []);
    assert_eq!(history_count(&mut con, "r", 5), []);
    assert_eq!(
        con.run(&["LEASE.HISTORY", "r"]),
        Value::Array(vec![]),
        "an empty array"
    );
    tenure_released(&mut con, "r", "w8");
    let w9 = con.acquire("r", "w9", None, Some(100.0)).unwrap();
    assert_eq!(history(&mut con, "r"), []);
    con.config_set(&[("lease-history-len", "8")]).unwrap();
    assert_eq!(w9.fencing_token, 9);
    assert_eq!(tokens(&history(&mut con, "r")), [9, 7, 6]);
    // Out of range is refused.
    assert!(
        con.config_set(&[("lease-history-len", "1001")]).is_err(),
        "1001 accepted"
    );
    assert_eq!(con.config_get("lease-history-len"), "8");

    // Started with 0: nothing, ever.
    let none = Server::start_with(&["--lease-history-len", "0"]);
    let mut con = none.typed();
    tenure_released(&mut con, "r", "w");
    con.acquire("r", "w", None, Some(100.0)).unwrap();
    assert_eq!(history(&mut con, "r"), []);
    assert_eq!(info_number(&con.info("memory"), "run_history_entries"), 0);
    assert_eq!(info_number(&con.info("memory"), "mem_run_history"), 0);
}

/// Heartbeats `tick` without `now` until `done` answers `Ok`: a write
/// without `now` moves registry time to the server's clock, which is what
/// reclaims (a read never does).
fn tick_until<T>(
    con: &mut Client,
    tick: &Lease,
    mut done: impl FnMut(&mut Client) -> Result<T, String>,
) -> T {
    wait_until(Duration::from_secs(10), || {
        assert!(con.heartbeat(tick, None), "the tick lease is held");
        done(con)
    })
}

fn history_memory(con: &mut Client) -> (u64, u64) {
    let info = con.info("memory");
    (
        info_number(&info, "run_history_entries"),
        info_number(&info, "mem_run_history"),
    )
}

#[test]
fn the_history_goes_with_the_run_after_lease_retention() {
    let server = Server::start_with(&["--lease-retention", "2"]);
    let mut con = server.typed();
    let tick = con.acquire("tick", "w", None, Some(600.0)).unwrap();
    // Expired, after a takeover: its past tenure goes with its last lease,
    // two seconds after that one expires.
    let first = con.acquire("expired", "w1", None, Some(1.0)).unwrap();
    let second = wait_until(Duration::from_secs(10), || {
        con.acquire("expired", "w2", None, Some(1.0))
            .ok_or_else(|| "still held".to_string())
    });
    // Released: goes two seconds after the release.
    let released = con.acquire("released", "w", None, Some(100.0)).unwrap();
    assert!(con.heartbeat(&released, None));
    assert!(con.release(&released));
    assert_eq!(
        tokens(&history(&mut con, "expired")),
        [second.fencing_token, first.fencing_token]
    );
    assert_eq!(history(&mut con, "released").len(), 1);
    assert_eq!(history_memory(&mut con).0, 2);

    // Gone to reads on the server's clock, reclaimed or not ...
    wait_until(Duration::from_secs(10), || {
        let left = (history(&mut con, "released"), history(&mut con, "expired"));
        if left.0.is_empty() && left.1.is_empty() {
            Ok(())
        } else {
            Err(format!("still there: {left:?}"))
        }
    });
    // ... and from memory once registry time passes.
    tick_until(&mut con, &tick, |con| match history_memory(con) {
        (0, 0) => Ok(()),
        seen => Err(format!("entries and bytes still kept: {seen:?}")),
    });
    // A new lease does not bring it back.
    let again = con.acquire("released", "w", None, Some(100.0)).unwrap();
    assert_eq!(
        tokens(&history(&mut con, "released")),
        [again.fencing_token]
    );
    assert_eq!(history(&mut con, "expired"), []);
    assert_eq!(history(&mut con, "tick").len(), 1);
}

#[test]
fn info_memory_counts_past_tenures_as_they_end_and_are_reclaimed() {
    let server = Server::start_with(&["--lease-retention", "2"]);
    let mut con = server.typed();
    let tick = con.acquire("tick", "w", None, Some(600.0)).unwrap();
    assert_eq!(history_memory(&mut con), (0, 0));
    // Active tenures live in their lease: nothing yet.
    con.acquire("b", "worker-42", None, Some(0.5)).unwrap();
    assert_eq!(history_memory(&mut con), (0, 0));
    // Expired and taken over: 33 bytes and its worker id.
    wait_until(Duration::from_secs(10), || {
        con.acquire("b", "worker-43", None, Some(1.0))
            .ok_or_else(|| "still held".to_string())
    });
    assert_eq!(history_memory(&mut con), (1, 33 + 9));
    // Released: 41 bytes and its worker id.
    let a = con.acquire("a", "worker-23", None, Some(100.0)).unwrap();
    assert!(con.release(&a));
    assert_eq!(history_memory(&mut con), (2, 33 + 9 + 41 + 9));
    // A second tenure of a: the first stays.
    let a = con.acquire("a", "worker-23", None, Some(100.0)).unwrap();
    assert!(con.release(&a));
    assert_eq!(history_memory(&mut con), (3, 33 + 9 + 2 * (41 + 9)));
    // Both runs' retention runs out: a's two seconds after its release, b's
    // two seconds after its lease expires.
    tick_until(&mut con, &tick, |con| match history_memory(con) {
        (0, 0) => Ok(()),
        seen => Err(format!("entries and bytes still kept: {seen:?}")),
    });
}

#[test]
fn errors_are_redis_worded_and_change_nothing() {
    let server = Server::start();
    let mut con = server.typed();
    let lease = con.acquire("r", "w", None, Some(100.0)).unwrap();
    assert!(con.release(&lease));
    con.acquire("r", "w", None, Some(100.0)).unwrap();
    let before = history(&mut con, "r");
    assert_eq!(before.len(), 2);
    let info = history_memory(&mut con);
    let long = "x".repeat(1025);
    let cases: [(&[&str], &str); 10] = [
        (
            &["LEASE.HISTORY"],
            "ERR wrong number of arguments for 'lease.history' command",
        ),
        (
            &["LEASE.HISTORY", "r", "COUNT", "0"],
            "ERR value is out of range, must be positive",
        ),
        (
            &["LEASE.HISTORY", "r", "COUNT", "-1"],
            "ERR value is out of range, must be positive",
        ),
        (
            &["LEASE.HISTORY", "r", "COUNT", "x"],
            "ERR value is not an integer or out of range",
        ),
        (
            &["LEASE.HISTORY", "r", "COUNT", "1.5"],
            "ERR value is not an integer or out of range",
        ),
        (&["LEASE.HISTORY", "r", "COUNT"], "ERR syntax error"),
        (&["LEASE.HISTORY", "r", "LIMIT", "1"], "ERR syntax error"),
        (
            &["LEASE.HISTORY", "r", "COUNT", "1", "COUNT"],
            "ERR syntax error",
        ),
        (&["LEASE.HISTORY", "r", "WITHDATA"], "ERR syntax error"),
        (
            &["LEASE.HISTORY", &long],
            "ERR run id is longer than 1024 bytes (lease-max-id-len)",
        ),
    ];
    for (words, want) in cases {
        assert_eq!(con.error(words), want, "{words:?}");
    }
    // At the limit it is only an unknown run.
    assert_eq!(history(&mut con, &long[1..]), []);
    // The connection is alive and nothing changed.
    con.ping();
    assert_eq!(history(&mut con, "r"), before);
    assert_eq!(history_memory(&mut con), info);
    assert_eq!(con.dbsize(), 1);
}

#[test]
fn resp2_replies_flat_arrays_and_resp3_maps() {
    let server = Server::start();
    let mut resp2 = server.typed();
    let mut resp3 = server.typed_resp3();
    let t = whole_second();
    let first = resp2.acquire("r", "w", Some(t), Some(100.0)).unwrap();
    assert!(resp2.release(&first));
    resp2.acquire("r", "w", Some(t + 1.0), Some(100.0)).unwrap();
    let (two, three) = (
        history_reply(&mut resp2, "r"),
        history_reply(&mut resp3, "r"),
    );
    // Both read the same tenures (`tenure` checks each one's shape).
    assert_eq!(tenures(&two), tenures(&three));
    let word = |text: &str| Value::BulkString(text.as_bytes().to_vec());
    let time = |at: f64| word(&at.to_string());
    let Value::Array(items) = &two else {
        panic!("{two:?}")
    };
    // RESP2: flat arrays, times as bulk strings, a nil `ended_at`.
    assert_eq!(
        items[0],
        Value::Array(vec![
            word("lease_id"),
            word("r:w:2"),
            word("worker_id"),
            word("w"),
            word("fencing_token"),
            Value::Int(2),
            word("acquired_at"),
            time(t + 1.0),
            word("expires_at"),
            time(t + 101.0),
            word("ended_at"),
            Value::Nil,
            word("end"),
            word("active"),
            word("heartbeats"),
            Value::Int(0),
        ])
    );
    let Value::Array(items) = &three else {
        panic!("{three:?}")
    };
    // RESP3: maps, times as doubles, a null `ended_at`.
    assert_eq!(
        items[0],
        Value::Map(vec![
            (word("lease_id"), word("r:w:2")),
            (word("worker_id"), word("w")),
            (word("fencing_token"), Value::Int(2)),
            (word("acquired_at"), Value::Double(t + 1.0)),
            (word("expires_at"), Value::Double(t + 101.0)),
            (word("ended_at"), Value::Nil),
            (word("end"), word("active")),
            (word("heartbeats"), Value::Int(0)),
        ])
    );
    match &items[1] {
        Value::Map(pairs) => assert!(matches!(pairs[5], (_, Value::Double(_))), "{pairs:?}"),
        other => panic!("{other:?}"),
    }
    // An unknown run: an empty array in both.
    assert_eq!(history_reply(&mut resp2, "none"), Value::Array(vec![]));
    assert_eq!(history_reply(&mut resp3, "none"), Value::Array(vec![]));
}

// ---------------------------------------------------------------------------
// Durability
// ---------------------------------------------------------------------------

fn start(dir: &Path, args: &[&str]) -> Server {
    Server::start_in(dir, args).unwrap_or_else(|output| panic!("{output}"))
}

/// HISTORY and GETDATA of each run, as replied.
fn snapshot(con: &mut Client, runs: &[String]) -> Vec<(Value, Value)> {
    let mut pipe = redis::pipe();
    for run in runs {
        pipe.cmd("LEASE.HISTORY").arg(run);
        pipe.cmd("LEASE.GETDATA").arg(run);
    }
    let replies: Vec<Value> = pipe.query(con).expect("HISTORY and GETDATA");
    replies
        .chunks(2)
        .map(|pair| {
            tenures(&pair[0]);
            (pair[0].clone(), pair[1].clone())
        })
        .collect()
}

#[test]
fn data_and_history_survive_restarts_kill9_and_a_rewrite() {
    let (_temp, dir) = data_dir();
    // Retention 0 keeps runs forever, so leases long expired on the
    // server's clock keep their history across the restarts.
    let args = ["--appendfsync", "always", "--lease-retention", "0"];
    let mut server = start(&dir, &args);
    let mut con = server.typed();
    let t = whole_second();
    let runs: Vec<String> = (0..6).map(|i| format!("run-{i}")).collect();
    // Tenures of every kind, in rounds over every run, in time order.
    for (i, run) in runs.iter().enumerate() {
        let old = con
            .acquire(run, "old", Some(t - 300.0), Some(10.0))
            .unwrap();
        assert!(con.heartbeat(&old, Some(t - 295.0)));
        let token = old.fencing_token.to_string();
        let step = format!("step={i}");
        let setdata = [
            "LEASE.SETDATA",
            &text(&old.lease_id),
            &token,
            &step,
            &(t - 294.0).to_string(),
        ];
        assert_eq!(con.run(&setdata), Value::Int(1));
    }
    for run in &runs {
        // Takes over the expired one.
        let late = con
            .acquire(run, "late", Some(t - 200.0), Some(10.0))
            .unwrap();
        assert!(con.release(&late), "released late");
    }
    for (i, run) in runs.iter().enumerate() {
        let lease = con.acquire(run, "now", Some(t), Some(600.0)).unwrap();
        if i % 2 == 0 {
            assert!(con.heartbeat(&lease, Some(t + 1.0)));
            assert!(con.release(&lease));
        }
    }
    let before = snapshot(&mut con, &runs);
    for (run, (history, _)) in runs.iter().zip(&before) {
        assert!(tenures(history).len() >= 3, "{run}: {history:?}");
    }
    drop(con);

    server.stop();
    let mut server = start(&dir, &args);
    let mut con = server.typed();
    assert_eq!(snapshot(&mut con, &runs), before, "after a clean restart");
    drop(con);

    server.kill9();
    let server = start(&dir, &args);
    let mut con = server.typed();
    assert_eq!(snapshot(&mut con, &runs), before, "after kill -9");
    assert_eq!(
        con.run(&["BGREWRITEAOF"]),
        Value::SimpleString("Background append only file rewriting started".into())
    );
    wait_for_rewrites(&mut con, 1);
    assert_eq!(snapshot(&mut con, &runs), before, "after the rewrite");
    drop(con);
    let mut server = server;
    server.kill9();
    let server = start(&dir, &args);
    let mut con = server.typed();
    assert_eq!(
        snapshot(&mut con, &runs),
        before,
        "after a rewrite and kill -9"
    );
    // Tokens go on above every one used.
    let next = con.acquire("fresh", "w", None, None).unwrap();
    assert!(next.fencing_token > 18, "{next:?}");
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8")
}

/// A TTL no test outlives.
const LONG_TTL: f64 = 100_000.0;

/// A tenure as a client was told it went.
#[derive(Clone, Debug)]
struct Told {
    worker: String,
    token: i64,
    /// Heartbeats that returned 1.
    heartbeats: i64,
    /// Whether its release returned 1.
    released: bool,
}

/// The command a client had sent when the server died.
#[derive(Clone, Debug, PartialEq)]
enum InFlight {
    Acquire(String),
    Heartbeat,
    Release,
}

/// What one storm client was told, run by run.
#[derive(Default)]
struct Storm {
    told: HashMap<String, Vec<Told>>,
    in_flight: Option<(String, InFlight)>,
}

/// Whether an error means the server went away (as opposed to replying).
fn gone(error: &redis::RedisError) -> bool {
    error.is_io_error() || error.is_connection_dropped()
}

/// Runs whose tenures one storm client goes through.
const STORM_RUNS: usize = 4;

/// One client: tenure after tenure on runs of its own, round robin, each
/// acquired (server clock), heartbeated 0 to 2 times and released, until
/// the server goes away.
fn storm_client(mut con: redis::Connection, tag: String, t: usize, ops: Arc<AtomicUsize>) -> Storm {
    let mut storm = Storm::default();
    let mut sent = |storm: &mut Storm, run: &str, what: InFlight, cmd: &redis::Cmd| match cmd
        .query::<Value>(&mut con)
    {
        Ok(reply) => {
            ops.fetch_add(1, Ordering::Relaxed);
            Some(reply)
        }
        Err(error) if gone(&error) => {
            storm.in_flight = Some((run.to_string(), what));
            None
        }
        Err(error) => panic!("{run}: {error:?}"),
    };
    'rounds: for round in 0.. {
        for k in 0..STORM_RUNS {
            let run = format!("{tag}-{t}-{k}");
            let worker = format!("w{t}-{round}");
            let mut acquire = redis::cmd("LEASE.ACQUIRE");
            acquire.arg(&run).arg(&worker).arg("TTL").arg(LONG_TTL);
            let Some(reply) = sent(
                &mut storm,
                &run,
                InFlight::Acquire(worker.clone()),
                &acquire,
            ) else {
                break 'rounds;
            };
            let lease = lease_reply(&reply);
            let told = storm.told.entry(run.clone()).or_default();
            told.push(Told {
                worker,
                token: lease.fencing_token,
                heartbeats: 0,
                released: false,
            });
            for _ in 0..(round + k) % 3 {
                let mut beat = redis::cmd("LEASE.HEARTBEAT");
                beat.arg(&lease.lease_id[..]).arg(lease.fencing_token);
                let Some(reply) = sent(&mut storm, &run, InFlight::Heartbeat, &beat) else {
                    break 'rounds;
                };
                assert_eq!(reply, Value::Int(1), "heartbeat of {run}");
                storm
                    .told
                    .get_mut(&run)
                    .unwrap()
                    .last_mut()
                    .unwrap()
                    .heartbeats += 1;
            }
            let mut release = redis::cmd("LEASE.RELEASE");
            release.arg(&lease.lease_id[..]).arg(lease.fencing_token);
            let Some(reply) = sent(&mut storm, &run, InFlight::Release, &release) else {
                break 'rounds;
            };
            assert_eq!(reply, Value::Int(1), "release of {run}");
            storm
                .told
                .get_mut(&run)
                .unwrap()
                .last_mut()
                .unwrap()
                .released = true;
        }
    }
    storm
}

/// Checks one run's history after the crash against what its client was
/// told: the state of some moment, `told` up to one of its tenures, the
/// newest `cap` of them. With `every_ack`, every acknowledged change is
/// there (the command in flight may or may not be).
fn check_run(
    run: &str,
    read: &[Tenure],
    told: &[Told],
    in_flight: Option<&InFlight>,
    every_ack: bool,
) {
    let cap = 8;
    let Some(newest) = read.first() else {
        assert!(
            !every_ack || told.is_empty(),
            "{run}: history lost, told {told:?}"
        );
        return;
    };
    // Oldest first, as `told`.
    let read: Vec<&Tenure> = read.iter().rev().collect();
    let at = told
        .iter()
        .position(|tenure| tenure.token == newest.fencing_token);
    let upto = match at {
        Some(at) => {
            assert!(
                !every_ack || at + 1 == told.len(),
                "{run}: tenure {at} is the newest, told {told:?}"
            );
            at
        }
        None => {
            // The acquire in flight, which was logged.
            let Some(InFlight::Acquire(worker)) = in_flight else {
                panic!(
                    "{run}: token {} was never told: {read:?} {told:?}",
                    newest.fencing_token
                );
            };
            assert_eq!(&newest.worker_id, worker, "{run}");
            assert_eq!(
                (newest.end.as_str(), newest.heartbeats),
                ("active", 0),
                "{run}"
            );
            told.len()
        }
    };
    let first = (upto + 1).saturating_sub(cap);
    assert_eq!(read.len(), upto + 1 - first, "{run}: {read:?} {told:?}");
    let last_told = told.len().saturating_sub(1);
    for (tenure, i) in read.iter().zip(first..=upto) {
        let Some(want) = told.get(i) else { continue };
        assert_eq!(tenure.fencing_token, want.token, "{run}");
        assert_eq!(tenure.worker_id, want.worker, "{run}");
        assert_eq!(
            tenure.lease_id,
            format!("{run}:{}:{}", want.worker, want.token),
            "{run}"
        );
        assert!(
            tenure.ended_at.is_none_or(|at| at >= tenure.acquired_at),
            "{tenure:?}"
        );
        let newest = i == upto;
        let pending = |what: InFlight| newest && i == last_told && in_flight == Some(&what);
        match tenure.end.as_str() {
            "released" => {
                assert!(
                    want.released || pending(InFlight::Release),
                    "{run}: {tenure:?} {want:?}"
                );
                assert_eq!(tenure.heartbeats, want.heartbeats, "{run}: {tenure:?}");
            }
            "active" => {
                assert!(newest, "{run}: an older tenure is open: {tenure:?}");
                assert!(
                    !every_ack || !want.released,
                    "{run}: release lost: {tenure:?}"
                );
                let most = want.heartbeats + i64::from(pending(InFlight::Heartbeat));
                assert!(tenure.heartbeats <= most, "{run}: {tenure:?} {want:?}");
                if every_ack {
                    assert!(
                        tenure.heartbeats >= want.heartbeats,
                        "{run}: {tenure:?} {want:?}"
                    );
                }
            }
            end => panic!("{run}: a tenure ended {end}: {tenure:?}"),
        }
    }
}

fn kill_under_load(fsync: &str) {
    const CLIENTS: usize = 4;
    let (_temp, dir) = data_dir();
    let args = ["--appendfsync", fsync];
    let mut server = start(&dir, &args);
    let ops = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|t| {
            let con = server.connect();
            let (tag, ops) = (format!("storm-{fsync}"), ops.clone());
            std::thread::spawn(move || storm_client(con, tag, t, ops))
        })
        .collect();
    // Enough tenures that the runs pass their cap of 8.
    wait_until(Duration::from_secs(30), || {
        match ops.load(Ordering::Relaxed) {
            done if done >= 2_500 => Ok(()),
            done => Err(format!("clients too slow: {done} commands")),
        }
    });
    server.kill9();
    let storms: Vec<Storm> = clients
        .into_iter()
        .map(|client| client.join().expect("client thread"))
        .collect();

    let server = start(&dir, &args);
    let mut con = server.typed();
    let every_ack = fsync == "always";
    let told_max = storms
        .iter()
        .flat_map(|storm| storm.told.values().flatten().map(|told| told.token))
        .max()
        .expect("some acquires");
    let mut read_max = 0;
    let mut seen = HashSet::new();
    let mut newest: HashMap<String, i64> = HashMap::new();
    for (t, storm) in storms.iter().enumerate() {
        for k in 0..STORM_RUNS {
            let run = format!("storm-{fsync}-{t}-{k}");
            let read = history(&mut con, &run);
            let told = storm.told.get(&run).map_or(&[][..], Vec::as_slice);
            let in_flight = storm
                .in_flight
                .as_ref()
                .filter(|(r, _)| *r == run)
                .map(|(_, what)| what);
            check_run(&run, &read, told, in_flight, every_ack);
            for tenure in &read {
                assert!(
                    seen.insert(tenure.fencing_token),
                    "token {} twice",
                    tenure.fencing_token
                );
                read_max = read_max.max(tenure.fencing_token);
            }
            newest.insert(run, read.first().map_or(0, |tenure| tenure.fencing_token));
        }
    }
    // A prefix in time across runs as well: tokens go out in order, so an
    // acquire told before the newest one kept is there too.
    for (t, storm) in storms.iter().enumerate() {
        for (run, told) in &storm.told {
            let kept = told
                .iter()
                .map(|told| told.token)
                .filter(|&token| token <= read_max)
                .max();
            if let Some(kept) = kept {
                assert!(
                    newest[run] >= kept,
                    "client {t}: {run} lost token {kept}, has {}",
                    newest[run]
                );
            }
        }
    }
    // Tokens are never reused.
    let next = con.acquire("after-the-crash", "w", None, None).unwrap();
    assert!(
        next.fencing_token > told_max.max(read_max),
        "{fsync}: token {} after the crash, {told_max} told before",
        next.fencing_token
    );
    let runs_done: usize = storms
        .iter()
        .map(|s| s.told.values().map(Vec::len).sum::<usize>())
        .sum();
    assert!(
        runs_done > 8 * CLIENTS * STORM_RUNS,
        "{fsync}: only {runs_done} tenures"
    );
}

#[test]
fn kill9_under_load_with_appendfsync_always_keeps_every_acknowledged_tenure() {
    kill_under_load("always");
}

#[test]
fn kill9_under_load_with_appendfsync_everysec_keeps_a_prefix_of_each_history() {
    kill_under_load("everysec");
}

#[test]
fn kill9_under_load_with_appendfsync_no_keeps_a_prefix_of_each_history() {
    kill_under_load("no");
}

/// One client while the log is rewritten: rounds over runs of its own,
/// heartbeating the leases it holds and releasing every other one, then
/// acquiring those it does not hold, in pipelines, until `stop`.
fn rewrite_client(
    mut con: redis::Connection,
    runs: Vec<String>,
    held: Vec<Option<Lease>>,
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicUsize>,
) {
    let mut held = held;
    for round in 0.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let mut pipe = redis::pipe();
        let mut releases = Vec::new();
        for (k, lease) in held.iter().enumerate() {
            let Some(lease) = lease else { continue };
            pipe.cmd("LEASE.HEARTBEAT")
                .arg(&lease.lease_id[..])
                .arg(lease.fencing_token);
            if (k + round) % 2 == 0 {
                pipe.cmd("LEASE.RELEASE")
                    .arg(&lease.lease_id[..])
                    .arg(lease.fencing_token);
                releases.push(k);
            }
        }
        let replies: Vec<i64> = pipe.query(&mut con).expect("heartbeats and releases");
        assert!(replies.iter().all(|&reply| reply == 1), "{replies:?}");
        for k in releases {
            held[k] = None;
        }
        let mut pipe = redis::pipe();
        let free: Vec<usize> = (0..runs.len()).filter(|&k| held[k].is_none()).collect();
        for &k in &free {
            pipe.cmd("LEASE.ACQUIRE")
                .arg(&runs[k])
                .arg(format!("w{round}"))
                .arg("TTL")
                .arg(LONG_TTL);
        }
        let replies: Vec<Value> = pipe.query(&mut con).expect("acquires");
        for (k, reply) in free.into_iter().zip(&replies) {
            held[k] = Some(lease_reply(reply));
        }
        ops.fetch_add(1, Ordering::Relaxed);
    }
}

fn rewrite_under_load(crash: bool) {
    const CLIENTS: usize = 3;
    const RUNS: usize = 1_500;
    let (_temp, dir) = data_dir();
    let fsync = if crash { "always" } else { "everysec" };
    let args = ["--appendfsync", fsync];
    let mut server = start(&dir, &args);
    let mut con = server.typed();
    // Every run with a history before the clients start: two released
    // tenures and a third held.
    let runs: Vec<String> = (0..RUNS).map(|i| format!("run-{i}")).collect();
    let mut held = Vec::new();
    for tenure in 0..3 {
        let mut pipe = redis::pipe();
        for run in &runs {
            pipe.cmd("LEASE.ACQUIRE")
                .arg(run)
                .arg(format!("pre{tenure}"))
                .arg("TTL")
                .arg(LONG_TTL);
        }
        let replies: Vec<Value> = pipe.query(&mut con).expect("preload");
        let leases: Vec<Lease> = replies.iter().map(lease_reply).collect();
        if tenure < 2 {
            let mut pipe = redis::pipe();
            for lease in &leases {
                pipe.cmd("LEASE.HEARTBEAT")
                    .arg(&lease.lease_id[..])
                    .arg(lease.fencing_token);
                pipe.cmd("LEASE.RELEASE")
                    .arg(&lease.lease_id[..])
                    .arg(lease.fencing_token);
            }
            let replies: Vec<i64> = pipe.query(&mut con).expect("preload releases");
            assert!(replies.iter().all(|&reply| reply == 1));
        } else {
            held = leases;
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicUsize::new(0));
    let held = Arc::new(Mutex::new(held.into_iter().map(Some).collect::<Vec<_>>()));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|t| {
            let con = server.connect();
            let mine: Vec<usize> = (t..RUNS).step_by(CLIENTS).collect();
            let held = mine
                .iter()
                .map(|&i| held.lock().unwrap()[i].take())
                .collect();
            let runs = mine.iter().map(|&i| runs[i].clone()).collect();
            let (stop, ops) = (stop.clone(), ops.clone());
            std::thread::spawn(move || rewrite_client(con, runs, held, stop, ops))
        })
        .collect();
    let wait_for_ops = |at_least: usize| {
        wait_until(Duration::from_secs(30), || {
            match ops.load(Ordering::Relaxed) {
                done if done >= at_least => Ok(()),
                done => Err(format!("clients too slow: {done} rounds")),
            }
        })
    };
    wait_for_ops(2 * CLIENTS);
    let started = con.run(&["BGREWRITEAOF"]);
    assert_eq!(
        started,
        Value::SimpleString("Background append only file rewriting started".into())
    );
    let during = ops.load(Ordering::Relaxed);
    let info = wait_for_rewrites(&mut con, 1);
    assert_eq!(info["aof_last_bgrewrite_status"], "ok");
    // And some rounds after it, into the new log.
    let finished = ops.load(Ordering::Relaxed);
    wait_for_ops(finished + 2 * CLIENTS);
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().expect("client thread");
    }
    eprintln!(
        "{} client rounds while rewriting, {} in all",
        finished - during,
        ops.load(Ordering::Relaxed)
    );
    let before = snapshot(&mut con, &runs);
    // Every run has gone past its preloaded tenures.
    for (run, (history, _)) in runs.iter().zip(&before) {
        let read = tenures(history);
        assert!(read.len() >= 4, "{run}: {read:?}");
    }
    let entries = history_memory(&mut con);
    drop(con);
    if crash {
        server.kill9();
    } else {
        server.stop();
    }
    let server = start(&dir, &args);
    let mut con = server.typed();
    let after = snapshot(&mut con, &runs);
    for ((run, before), after) in runs.iter().zip(&before).zip(&after) {
        assert_eq!(before, after, "{run} changed across the restart");
    }
    assert_eq!(history_memory(&mut con), entries);
}

#[test]
fn a_rewrite_under_load_keeps_every_history_across_a_clean_restart() {
    rewrite_under_load(false);
}

#[test]
fn a_rewrite_under_load_keeps_every_history_across_kill9_with_always() {
    rewrite_under_load(true);
}
