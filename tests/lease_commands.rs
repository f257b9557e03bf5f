//! The LEASE.* commands through the `redis` crate, over RESP2 and RESP3:
//! reply shapes, every rule of "Registry semantics", and every error.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::{Server, bulk_value, error, field, pairs, run};
use redis::{Connection, Value};

fn int(con: &mut Connection, words: &[&str]) -> i64 {
    match run(con, words) {
        Value::Int(i) => i,
        other => panic!("{words:?} gave {other:?}"),
    }
}

fn token_of(lease: &[(Value, Value)]) -> i64 {
    match field(lease, "fencing_token") {
        Value::Int(token) => token,
        other => panic!("token {other:?}"),
    }
}

/// `expires_at` as a number: a RESP3 double or a RESP2 bulk string.
fn expiry_of(lease: &[(Value, Value)]) -> f64 {
    match field(lease, "expires_at") {
        Value::Double(d) => d,
        Value::BulkString(text) => String::from_utf8(text).unwrap().parse().unwrap(),
        other => panic!("expires_at {other:?}"),
    }
}

fn acquire(con: &mut Connection, words: &[&str]) -> Vec<(Value, Value)> {
    let mut all = vec!["LEASE.ACQUIRE"];
    all.extend_from_slice(words);
    pairs(run(con, &all))
}

fn ping(con: &mut Connection) {
    let reply: String = redis::cmd("PING").query(con).unwrap();
    assert_eq!(reply, "PONG");
}

#[test]
fn acquire_reply_is_a_flat_array_in_resp2() {
    let server = Server::start();
    let mut con = server.connect();
    assert_eq!(
        run(&mut con, &["LEASE.ACQUIRE", "run-1", "worker-a", "0"]),
        Value::Array(vec![
            bulk_value("run_id"),
            bulk_value("run-1"),
            bulk_value("worker_id"),
            bulk_value("worker-a"),
            bulk_value("lease_id"),
            bulk_value("run-1:worker-a:1"),
            bulk_value("fencing_token"),
            Value::Int(1),
            bulk_value("expires_at"),
            bulk_value("10"),
        ])
    );
    assert_eq!(
        run(&mut con, &["LEASE.GET", "run-1", "10.5"]),
        Value::Array(vec![
            bulk_value("run_id"),
            bulk_value("run-1"),
            bulk_value("worker_id"),
            bulk_value("worker-a"),
            bulk_value("lease_id"),
            bulk_value("run-1:worker-a:1"),
            bulk_value("fencing_token"),
            Value::Int(1),
            bulk_value("expires_at"),
            bulk_value("10"),
            bulk_value("expired"),
            Value::Int(1),
        ])
    );
    assert_eq!(run(&mut con, &["LEASE.GET", "nobody"]), Value::Nil);
}

#[test]
fn acquire_reply_is_an_ordered_map_in_resp3() {
    let server = Server::start();
    let mut con = server.connect_resp3();
    assert_eq!(
        run(
            &mut con,
            &["LEASE.ACQUIRE", "run-1", "worker-a", "0.25", "TTL", "10.5"]
        ),
        Value::Map(vec![
            (bulk_value("run_id"), bulk_value("run-1")),
            (bulk_value("worker_id"), bulk_value("worker-a")),
            (bulk_value("lease_id"), bulk_value("run-1:worker-a:1")),
            (bulk_value("fencing_token"), Value::Int(1)),
            (bulk_value("expires_at"), Value::Double(10.75)),
        ])
    );
    assert_eq!(
        run(&mut con, &["LEASE.GET", "run-1", "1"]),
        Value::Map(vec![
            (bulk_value("run_id"), bulk_value("run-1")),
            (bulk_value("worker_id"), bulk_value("worker-a")),
            (bulk_value("lease_id"), bulk_value("run-1:worker-a:1")),
            (bulk_value("fencing_token"), Value::Int(1)),
            (bulk_value("expires_at"), Value::Double(10.75)),
            (bulk_value("expired"), Value::Int(0)),
        ])
    );
    assert_eq!(
        run(&mut con, &["LEASE.ACQUIRE", "run-1", "worker-b", "2"]),
        Value::Nil
    );
    assert_eq!(run(&mut con, &["LEASE.GET", "nobody"]), Value::Nil);
}

/// The rules, walked through in order, in both protocols.
fn walkthrough(con: &mut Connection) {
    // Tokens are registry-wide and start at 1; a failed acquire issues none.
    let a = acquire(con, &["run-1", "worker-a", "0"]);
    assert_eq!(token_of(&a), 1);
    assert_eq!(expiry_of(&a), 10.0);
    assert_eq!(
        run(con, &["LEASE.ACQUIRE", "run-1", "worker-a", "1"]),
        Value::Nil
    );
    assert_eq!(
        run(con, &["LEASE.ACQUIRE", "run-1", "worker-b", "1"]),
        Value::Nil
    );
    let b = acquire(con, &["run-2", "worker-b", "1"]);
    assert_eq!(token_of(&b), 2);

    // Heartbeat extends by the TTL from now, validate checks id and token.
    assert_eq!(
        int(con, &["LEASE.HEARTBEAT", "run-1:worker-a:1", "1", "5"]),
        1
    );
    assert_eq!(
        int(
            con,
            &["LEASE.VALIDATE", "run-1", "run-1:worker-a:1", "1", "14.9"]
        ),
        1
    );
    assert_eq!(
        int(
            con,
            &["LEASE.VALIDATE", "run-1", "run-1:worker-a:1", "2", "14.9"]
        ),
        0
    );
    assert_eq!(
        int(
            con,
            &["LEASE.VALIDATE", "run-2", "run-1:worker-a:1", "1", "14.9"]
        ),
        0
    );
    assert_eq!(
        int(con, &["LEASE.HEARTBEAT", "run-1:worker-a:1", "2", "14.9"]),
        0
    );
    assert_eq!(
        int(con, &["LEASE.HEARTBEAT", "run-1:worker-b:1", "1", "14.9"]),
        0
    );

    // Expiry is inclusive: at expires_at (15) the lease is expired.
    assert_eq!(
        int(
            con,
            &["LEASE.VALIDATE", "run-1", "run-1:worker-a:1", "1", "15"]
        ),
        0
    );
    assert_eq!(
        int(con, &["LEASE.HEARTBEAT", "run-1:worker-a:1", "1", "15"]),
        0
    );
    assert_eq!(
        field(&pairs(run(con, &["LEASE.GET", "run-1", "15"])), "expired"),
        Value::Int(1)
    );

    // Registry time never goes back: an older now cannot revive the lease.
    assert_eq!(
        int(con, &["LEASE.HEARTBEAT", "run-1:worker-a:1", "1", "3"]),
        0
    );
    assert_eq!(
        int(
            con,
            &["LEASE.VALIDATE", "run-1", "run-1:worker-a:1", "1", "3"]
        ),
        0
    );
    // A lagging acquire gets registry time + ttl.
    let c = acquire(con, &["run-3", "worker-c", "3"]);
    assert_eq!((token_of(&c), expiry_of(&c)), (3, 25.0));

    // An expired lease is still releasable until someone takes it over.
    assert_eq!(int(con, &["LEASE.RELEASE", "run-1:worker-a:1", "1"]), 1);
    assert_eq!(int(con, &["LEASE.RELEASE", "run-1:worker-a:1", "1"]), 0);
    assert_eq!(run(con, &["LEASE.GET", "run-1", "15"]), Value::Nil);

    // Takeover of an expired lease issues the next token; the old owner's
    // release then fails.
    let taken = acquire(con, &["run-2", "worker-z", "16"]);
    assert_eq!(token_of(&taken), 4);
    assert_eq!(field(&taken, "lease_id"), bulk_value("run-2:worker-z:4"));
    assert_eq!(int(con, &["LEASE.RELEASE", "run-2:worker-b:2", "2"]), 0);
    assert_eq!(
        int(
            con,
            &["LEASE.VALIDATE", "run-2", "run-2:worker-z:4", "4", "17"]
        ),
        1
    );

    // DBSIZE counts active and expired leases alike.
    assert_eq!(int(con, &["DBSIZE"]), 2);
}

#[test]
fn registry_rules_hold_over_resp2() {
    let server = Server::start();
    walkthrough(&mut server.connect());
}

#[test]
fn registry_rules_hold_over_resp3() {
    let server = Server::start();
    walkthrough(&mut server.connect_resp3());
}

#[test]
fn ttl_option_sets_the_lease_ttl_and_its_heartbeats() {
    let server = Server::start_with(&["--lease-ttl", "30"]);
    let mut con = server.connect();
    assert_eq!(
        expiry_of(&acquire(&mut con, &["default", "w", "100"])),
        130.0
    );
    let lease = acquire(&mut con, &["short", "w", "100", "ttl", "2.5"]);
    assert_eq!(expiry_of(&lease), 102.5);
    assert_eq!(
        int(&mut con, &["LEASE.HEARTBEAT", "short:w:2", "2", "101"]),
        1
    );
    assert_eq!(
        expiry_of(&pairs(run(&mut con, &["LEASE.GET", "short", "101"]))),
        103.5
    );
    // TTL without now uses the server clock.
    let clocked = acquire(&mut con, &["clocked", "w", "TTL", "60"]);
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        (expiry_of(&clocked) - (wall + 60.0)).abs() < 5.0,
        "{clocked:?}"
    );
}

#[test]
fn omitted_now_is_the_server_clock() {
    let server = Server::start();
    let mut con = server.connect_resp3();
    let before = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let lease = acquire(&mut con, &["run", "w"]);
    let after = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let expires = expiry_of(&lease);
    // Millisecond precision, within the window of the call.
    assert!(
        expires >= (before * 1000.0).floor() / 1000.0 + 10.0,
        "{expires} {before}"
    );
    assert!(expires <= after + 10.0, "{expires} {after}");
    assert_eq!((expires * 1000.0).fract(), 0.0);
    assert_eq!(int(&mut con, &["LEASE.HEARTBEAT", "run:w:1", "1"]), 1);
    assert_eq!(int(&mut con, &["LEASE.VALIDATE", "run", "run:w:1", "1"]), 1);
    assert_eq!(
        field(&pairs(run(&mut con, &["LEASE.GET", "run"])), "expired"),
        Value::Int(0)
    );
    // An explicit now far in the past is read as registry time (the clock).
    let late = acquire(&mut con, &["other", "w", "0"]);
    assert!(expiry_of(&late) >= expires, "{late:?}");
}

#[test]
fn ids_with_colons_empty_ids_and_binary_ids() {
    let server = Server::start();
    let mut con = server.connect();
    let first = acquire(&mut con, &["a:b", "c", "0"]);
    let second = acquire(&mut con, &["a", "b:c", "0"]);
    assert_eq!(field(&first, "lease_id"), bulk_value("a:b:c:1"));
    assert_eq!(field(&second, "lease_id"), bulk_value("a:b:c:2"));
    // Each id with the other lease's token must not match.
    assert_eq!(int(&mut con, &["LEASE.HEARTBEAT", "a:b:c:1", "2", "1"]), 0);
    assert_eq!(
        int(&mut con, &["LEASE.VALIDATE", "a", "a:b:c:1", "1", "1"]),
        0
    );
    assert_eq!(
        int(&mut con, &["LEASE.VALIDATE", "a:b", "a:b:c:2", "2", "1"]),
        0
    );
    assert_eq!(
        int(&mut con, &["LEASE.VALIDATE", "a:b", "a:b:c:1", "1", "1"]),
        1
    );
    assert_eq!(int(&mut con, &["LEASE.RELEASE", "a:b:c:2", "2"]), 1);
    assert_eq!(
        field(
            &pairs(run(&mut con, &["LEASE.GET", "a:b", "1"])),
            "worker_id"
        ),
        bulk_value("c")
    );

    let empty = acquire(&mut con, &["", "", "0"]);
    assert_eq!(field(&empty, "lease_id"), bulk_value("::3"));
    assert_eq!(int(&mut con, &["LEASE.VALIDATE", "", "::3", "3", "1"]), 1);

    // Binary-safe: bytes that are not UTF-8, CR and LF, a 1 KiB id.
    let run_id: &[u8] = b"\xff\x00\r\nrun";
    let reply: Value = redis::cmd("LEASE.ACQUIRE")
        .arg(run_id)
        .arg("w")
        .arg(0)
        .query(&mut con)
        .unwrap();
    let lease = pairs(reply);
    assert_eq!(field(&lease, "run_id"), Value::BulkString(run_id.to_vec()));
    let mut lease_id = run_id.to_vec();
    lease_id.extend_from_slice(b":w:4");
    assert_eq!(
        field(&lease, "lease_id"),
        Value::BulkString(lease_id.clone())
    );
    let valid: i64 = redis::cmd("LEASE.VALIDATE")
        .arg(run_id)
        .arg(&lease_id)
        .arg(4)
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(valid, 1);
    let long = "r".repeat(1024);
    let worker = "w".repeat(1024);
    let lease = acquire(&mut con, &[&long, &worker, "0"]);
    assert_eq!(
        field(&lease, "lease_id"),
        bulk_value(&format!("{long}:{worker}:5"))
    );
}

#[test]
fn errors_are_redis_worded_and_keep_the_connection() {
    let server = Server::start();
    for (round, mut con) in [server.connect(), server.connect_resp3()]
        .into_iter()
        .enumerate()
    {
        let cases: &[(&[&str], &str)] = &[
            (
                &["LEASE.ACQUIRE", "run"],
                "ERR wrong number of arguments for 'lease.acquire' command",
            ),
            (
                &["LEASE.HEARTBEAT", "id"],
                "ERR wrong number of arguments for 'lease.heartbeat' command",
            ),
            (
                &["LEASE.HEARTBEAT", "id", "1", "2", "3"],
                "ERR wrong number of arguments for 'lease.heartbeat' command",
            ),
            (
                &["LEASE.VALIDATE", "run", "id"],
                "ERR wrong number of arguments for 'lease.validate' command",
            ),
            (
                &["LEASE.RELEASE", "id"],
                "ERR wrong number of arguments for 'lease.release' command",
            ),
            (
                &["LEASE.RELEASE", "id", "1", "2"],
                "ERR wrong number of arguments for 'lease.release' command",
            ),
            (
                &["LEASE.GET"],
                "ERR wrong number of arguments for 'lease.get' command",
            ),
            (
                &["LEASE.ACQUIRE", "r", "w", "soon"],
                "ERR value is not a valid float",
            ),
            (
                &["LEASE.ACQUIRE", "r", "w", "nan"],
                "ERR value is not a valid float",
            ),
            (
                &["LEASE.ACQUIRE", "r", "w", "inf"],
                "ERR value is not a valid float",
            ),
            (
                &["LEASE.ACQUIRE", "r", "w", " 1"],
                "ERR value is not a valid float",
            ),
            (
                &["LEASE.ACQUIRE", "r", "w", "1", "TTL", "x"],
                "ERR value is not a valid float",
            ),
            (
                &["LEASE.ACQUIRE", "r", "w", "1", "TTL", "1e999"],
                "ERR value is not a valid float",
            ),
            (
                &["LEASE.ACQUIRE", "r", "w", "1", "TTL", "0"],
                "ERR invalid expire time in 'lease.acquire' command",
            ),
            (
                &["LEASE.ACQUIRE", "r", "w", "1", "TTL", "-2"],
                "ERR invalid expire time in 'lease.acquire' command",
            ),
            (&["LEASE.ACQUIRE", "r", "w", "1", "TTL"], "ERR syntax error"),
            (
                &["LEASE.ACQUIRE", "r", "w", "1", "PX", "5"],
                "ERR syntax error",
            ),
            (
                &["LEASE.ACQUIRE", "r", "w", "1", "TTL", "5", "NX"],
                "ERR syntax error",
            ),
            (
                &["LEASE.HEARTBEAT", "id", "x"],
                "ERR value is not an integer or out of range",
            ),
            (
                &["LEASE.HEARTBEAT", "id", "1.0"],
                "ERR value is not an integer or out of range",
            ),
            (
                &["LEASE.HEARTBEAT", "id", "9223372036854775808"],
                "ERR value is not an integer or out of range",
            ),
            (
                &["LEASE.HEARTBEAT", "id", "0"],
                "ERR value is out of range, must be positive",
            ),
            (
                &["LEASE.RELEASE", "id", "-1"],
                "ERR value is out of range, must be positive",
            ),
            (
                &["LEASE.VALIDATE", "r", "id", "+1"],
                "ERR value is not an integer or out of range",
            ),
            (
                &["LEASE.VALIDATE", "r", "id", "1", "later"],
                "ERR value is not a valid float",
            ),
            (
                &["LEASE.HEARTBEAT", "id", "1", "later"],
                "ERR value is not a valid float",
            ),
            (
                &["LEASE.GET", "r", "later"],
                "ERR value is not a valid float",
            ),
            (
                &["LEASE.NOPE", "x"],
                "ERR unknown command 'LEASE.NOPE', with args beginning with: 'x' ",
            ),
        ];
        for (words, expected) in cases {
            assert_eq!(&error(&mut con, words), expected, "{words:?}");
            ping(&mut con);
        }
        // None of the failed acquires issued a token.
        let run_id = format!("after-errors-{round}");
        let lease = acquire(&mut con, &[&run_id, "w", "0"]);
        assert_eq!(token_of(&lease), round as i64 + 1);
    }
}
