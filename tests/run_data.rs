//! Run data (`LEASE.SETDATA`, `LEASE.GETDATA`, `LEASE.DELDATA`, `WITHDATA`)
//! through the `redis` crate against the real binary: the fencing of
//! writes, the replies in RESP2 and RESP3, the data's lifetime after a
//! release, errors, events, and durability across restarts, kill -9 and
//! rewrites.

mod common;

use std::path::Path;
use std::time::Duration;

use common::binary::{Server, clock, data_dir, wait_until};
use common::client::{error, field, int, pairs, run, text};
use redis::Value;

/// `LEASE.GETDATA run` as (value, fencing_token, written_at), or None.
fn getdata(con: &mut redis::Connection, run_id: &str) -> Option<(String, i64, f64)> {
    let reply = run(con, &["LEASE.GETDATA", run_id]);
    if reply == Value::Nil {
        return None;
    }
    let fields = pairs(reply);
    let written_at = match field(&fields, "written_at") {
        Value::Double(at) => at,
        other => text(&other).parse().expect("a number"),
    };
    Some((
        text(&field(&fields, "value")),
        int(&field(&fields, "fencing_token")),
        written_at,
    ))
}

fn setdata(con: &mut redis::Connection, lease_id: &str, token: i64, value: &str, now: f64) -> i64 {
    int(&run(
        con,
        &[
            "LEASE.SETDATA",
            lease_id,
            &token.to_string(),
            value,
            &now.to_string(),
        ],
    ))
}

#[test]
fn setdata_is_fenced_and_getdata_shows_the_writer() {
    let server = Server::start();
    let mut con = server.connect();
    let t = clock();
    let now = |dt: f64| (t + dt).to_string();
    run(
        &mut con,
        &["LEASE.ACQUIRE", "a", "w1", &now(0.0), "TTL", "10"],
    );
    run(
        &mut con,
        &["LEASE.ACQUIRE", "b", "w1", &now(0.0), "TTL", "10"],
    );
    // The holder writes; a stale token and another run's lease id do not.
    assert_eq!(setdata(&mut con, "a:w1:1", 1, "cp-1", t + 1.0), 1);
    assert_eq!(setdata(&mut con, "a:w1:1", 2, "x", t + 1.0), 0);
    assert_eq!(setdata(&mut con, "b:w1:2", 1, "x", t + 1.0), 0);
    assert_eq!(getdata(&mut con, "a"), Some(("cp-1".into(), 1, t + 1.0)));
    assert_eq!(getdata(&mut con, "b"), None);
    // After expiry: refused (SETDATA does not extend the lease).
    assert_eq!(setdata(&mut con, "a:w1:1", 1, "late", t + 10.0), 0);
    // The takeover reads the previous holder's checkpoint in its reply.
    let taken = pairs(run(
        &mut con,
        &["LEASE.ACQUIRE", "a", "w2", &now(11.0), "WITHDATA"],
    ));
    assert_eq!(int(&field(&taken, "fencing_token")), 3);
    assert_eq!(text(&field(&taken, "data")), "cp-1");
    assert_eq!(int(&field(&taken, "data_token")), 1);
    // The old holder is fenced off; the new one writes.
    assert_eq!(setdata(&mut con, "a:w1:1", 1, "stale", t + 12.0), 0);
    assert_eq!(setdata(&mut con, "a:w2:3", 3, "cp-2", t + 12.0), 1);
    assert_eq!(getdata(&mut con, "a"), Some(("cp-2".into(), 3, t + 12.0)));
    // WITHDATA on a run without data: null and null.
    let fresh = pairs(run(&mut con, &["LEASE.ACQUIRE", "c", "w", "WITHDATA"]));
    assert_eq!(field(&fresh, "data"), Value::Nil);
    assert_eq!(field(&fresh, "data_token"), Value::Nil);
    // RESP3: a map with a double.
    let mut resp3 = server.connect_resp3();
    match run(&mut resp3, &["LEASE.GETDATA", "a"]) {
        Value::Map(fields) => {
            assert_eq!(field(&fields, "written_at"), Value::Double(t + 12.0));
        }
        other => panic!("not a map: {other:?}"),
    }
    // DELDATA: by the holder only; 1 when there was data.
    assert_eq!(int(&run(&mut con, &["LEASE.DELDATA", "a:w1:1", "1"])), 0);
    assert_eq!(int(&run(&mut con, &["LEASE.DELDATA", "a:w2:3", "3"])), 1);
    assert_eq!(int(&run(&mut con, &["LEASE.DELDATA", "a:w2:3", "3"])), 0);
    assert_eq!(getdata(&mut con, "a"), None);
}

#[test]
fn binary_values_round_trip() {
    let server = Server::start();
    let mut con = server.connect();
    run(&mut con, &["LEASE.ACQUIRE", "r", "w"]);
    let value: Vec<u8> = (0..=255).collect();
    let stored: i64 = redis::cmd("LEASE.SETDATA")
        .arg("r:w:1")
        .arg(1)
        .arg(&value[..])
        .query(&mut con)
        .unwrap();
    assert_eq!(stored, 1);
    let fields = pairs(run(&mut con, &["LEASE.GETDATA", "r"]));
    assert_eq!(field(&fields, "value"), Value::BulkString(value));
    // INFO memory counts it.
    let info = text(&run(&mut con, &["INFO", "memory"]));
    assert!(info.contains("run_data_runs:1\r\n"), "{info}");
    let bytes: usize = info
        .lines()
        .find_map(|line| line.strip_prefix("mem_run_data:"))
        .expect("mem_run_data")
        .parse()
        .unwrap();
    assert!(bytes > 256, "{bytes}");
}

#[test]
fn data_survives_a_release_and_goes_retention_after_it() {
    let server = Server::start_with(&["--lease-retention", "2"]);
    let mut con = server.connect();
    run(&mut con, &["LEASE.ACQUIRE", "a", "w"]);
    assert_eq!(setdata(&mut con, "a:w:1", 1, "cp", clock()), 1);
    assert_eq!(int(&run(&mut con, &["LEASE.RELEASE", "a:w:1", "1"])), 1);
    assert_eq!(getdata(&mut con, "a").map(|d| d.0), Some("cp".into()));
    // Two seconds of retention from the release, on the server's clock.
    wait_until(Duration::from_secs(10), || match getdata(&mut con, "a") {
        None => Ok(()),
        Some(data) => Err(format!("still there: {data:?}")),
    });
    // A new lease does not bring it back.
    let fresh = pairs(run(&mut con, &["LEASE.ACQUIRE", "a", "w", "WITHDATA"]));
    assert_eq!(field(&fresh, "data"), Value::Nil);
}

#[test]
fn errors_are_redis_worded_and_change_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    run(&mut con, &["LEASE.ACQUIRE", "a", "w"]);
    let big = "x".repeat(65537);
    assert_eq!(
        error(&mut con, &["LEASE.SETDATA", "a:w:1", "1", &big]),
        "ERR value is longer than 65536 bytes (lease-max-data-len)"
    );
    assert_eq!(
        int(&run(&mut con, &["LEASE.SETDATA", "a:w:1", "1", &big[1..]])),
        1
    );
    run(&mut con, &["CONFIG", "SET", "lease-max-data-len", "10"]);
    assert_eq!(
        error(&mut con, &["LEASE.SETDATA", "a:w:1", "1", "eleven byte"]),
        "ERR value is longer than 10 bytes (lease-max-data-len)"
    );
    assert_eq!(
        error(&mut con, &["LEASE.SETDATA", "a:w:1", "one", "v"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        error(&mut con, &["LEASE.SETDATA", "a:w:1", "-1", "v"]),
        "ERR value is out of range, must be positive"
    );
    assert_eq!(
        error(&mut con, &["LEASE.DELDATA", "a:w:1", "x"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        error(&mut con, &["LEASE.SETDATA", "a:w:1", "1"]),
        "ERR wrong number of arguments for 'lease.setdata' command"
    );
    assert_eq!(
        error(&mut con, &["LEASE.GETDATA"]),
        "ERR wrong number of arguments for 'lease.getdata' command"
    );
    assert_eq!(
        error(&mut con, &["LEASE.DELDATA", "a:w:1"]),
        "ERR wrong number of arguments for 'lease.deldata' command"
    );
    assert!(
        error(
            &mut con,
            &[
                "LEASE.SETDATA",
                "a:w:1",
                "1",
                "v",
                &(clock() + 3600.0).to_string()
            ]
        )
        .contains("(lease-max-skew)")
    );
    // Nothing changed, and the connection is alive.
    assert_eq!(getdata(&mut con, "a").map(|d| d.0.len()), Some(65536));
    assert_eq!(run(&mut con, &["PING"]), Value::SimpleString("PONG".into()));
}

#[test]
fn a_pattern_subscriber_sees_data_events() {
    let server = Server::start();
    let mut sub = server.connect();
    let mut pubsub = sub.as_pubsub();
    pubsub.psubscribe("__lease*").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut con = server.connect();
    run(&mut con, &["LEASE.ACQUIRE", "run-1", "w"]);
    run(&mut con, &["LEASE.SETDATA", "run-1:w:1", "1", "cp"]);
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let message = pubsub.get_message().expect("an event in time");
        let payload: String = message.get_payload().unwrap();
        seen.push((message.get_channel_name().to_string(), payload));
    }
    assert!(
        seen.contains(&("__lease__:run-1".into(), "data:1:w".into())),
        "{seen:?}"
    );
    assert!(
        seen.contains(&("__leaseevent__:data".into(), "1:run-1".into())),
        "{seen:?}"
    );
}

/// The data of runs r1 to r20.
fn all_data(con: &mut redis::Connection) -> Vec<Option<(String, i64, f64)>> {
    (1..=20).map(|i| getdata(con, &format!("r{i}"))).collect()
}

fn start_logged(dir: &Path) -> Server {
    Server::start_in(dir, &["--appendfsync", "always", "--lease-ttl", "600"])
        .expect("server starts")
}

#[test]
fn data_survives_restarts_kill9_and_a_rewrite() {
    let (_temp, dir) = data_dir();
    let mut server = start_logged(&dir);
    let mut con = server.connect();
    for i in 1..=20 {
        run(&mut con, &["LEASE.ACQUIRE", &format!("r{i}"), "w"]);
        let id = format!("r{i}:w:{i}");
        assert_eq!(
            int(&run(
                &mut con,
                &["LEASE.SETDATA", &id, &i.to_string(), &format!("v{i}")]
            )),
            1
        );
    }
    // One released (an orphan), one deleted, one overwritten.
    run(&mut con, &["LEASE.RELEASE", "r1:w:1", "1"]);
    run(&mut con, &["LEASE.DELDATA", "r2:w:2", "2"]);
    run(&mut con, &["LEASE.SETDATA", "r3:w:3", "3", "v3b"]);
    let before: Vec<_> = all_data(&mut con);
    drop(con);
    // kill -9 with appendfsync always: every acknowledged write is there.
    server.kill9();
    let mut server = start_logged(&dir);
    let mut con = server.connect();
    let after: Vec<_> = all_data(&mut con);
    assert_eq!(after, before);
    // A rewrite, then a clean restart, then another kill -9.
    assert_eq!(
        run(&mut con, &["BGREWRITEAOF"]),
        Value::SimpleString("Background append only file rewriting started".into())
    );
    wait_until(Duration::from_secs(30), || {
        let info = text(&run(&mut con, &["INFO", "persistence"]));
        if info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrites:1") {
            Ok(())
        } else {
            Err(info)
        }
    });
    drop(con);
    server.stop();
    let mut server = start_logged(&dir);
    let mut con = server.connect();
    let rewritten: Vec<_> = all_data(&mut con);
    assert_eq!(rewritten, before);
    // The orphan is still one: a new lease adopts it, with a higher token
    // (after a crash, tokens resume above the reserved ceiling).
    let taken = pairs(run(&mut con, &["LEASE.ACQUIRE", "r1", "w", "WITHDATA"]));
    assert_eq!(text(&field(&taken, "data")), "v1");
    assert_eq!(int(&field(&taken, "data_token")), 1);
    assert!(int(&field(&taken, "fencing_token")) > 20);
    drop(con);
    server.kill9();
    let _server = start_logged(&dir);
}
