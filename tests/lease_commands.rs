//! The LEASE.* commands through the `redis` crate, over RESP2 and RESP3:
//! reply shapes, every rule of "Registry semantics", and every error.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::binary::Server;
use common::client::{Client, Lease, bulk_value, lease_reply, run};
use redis::Value;

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
fn walkthrough(con: &mut Client) {
    // Tokens are registry-wide and start at 1; a failed acquire issues none.
    let a = con.acquire("run-1", "worker-a", Some(0.0), None).unwrap();
    assert_eq!((a.fencing_token, a.expires_at), (1, 10.0));
    assert_eq!(con.acquire("run-1", "worker-a", Some(1.0), None), None);
    assert_eq!(con.acquire("run-1", "worker-b", Some(1.0), None), None);
    let b = con.acquire("run-2", "worker-b", Some(1.0), None).unwrap();
    assert_eq!(b.fencing_token, 2);

    // Heartbeat extends by the TTL from now, validate checks id and token.
    assert!(con.heartbeat(&a, Some(5.0)));
    assert!(con.validate("run-1", &a, Some(14.9)));
    let wrong_token = Lease {
        fencing_token: 2,
        ..a.clone()
    };
    assert!(!con.validate("run-1", &wrong_token, Some(14.9)));
    assert!(!con.validate("run-2", &a, Some(14.9)));
    assert!(!con.heartbeat(&wrong_token, Some(14.9)));
    let wrong_worker = Lease {
        lease_id: b"run-1:worker-b:1".to_vec(),
        ..a.clone()
    };
    assert!(!con.heartbeat(&wrong_worker, Some(14.9)));

    // Expiry is inclusive: at expires_at (15) the lease is expired.
    assert!(!con.validate("run-1", &a, Some(15.0)));
    assert!(!con.heartbeat(&a, Some(15.0)));
    let extended = Lease {
        expires_at: 15.0,
        ..a.clone()
    };
    let got = con.get("run-1", Some(15.0));
    assert_eq!(got, Some(extended.with_expired(true)));

    // Registry time never goes back: an older now cannot revive the lease.
    assert!(!con.heartbeat(&a, Some(3.0)));
    assert!(!con.validate("run-1", &a, Some(3.0)));
    // A lagging acquire gets registry time + ttl.
    let c = con.acquire("run-3", "worker-c", Some(3.0), None).unwrap();
    assert_eq!((c.fencing_token, c.expires_at), (3, 25.0));

    // An expired lease is still releasable until someone takes it over.
    assert!(con.release(&a));
    assert!(!con.release(&a));
    assert_eq!(con.get("run-1", Some(15.0)), None);

    // Takeover of an expired lease issues the next token; the old owner's
    // release then fails.
    let taken = con.acquire("run-2", "worker-z", Some(16.0), None).unwrap();
    assert_eq!(taken.fencing_token, 4);
    assert_eq!(taken.lease_id, b"run-2:worker-z:4");
    assert!(!con.release(&b));
    assert!(con.validate("run-2", &taken, Some(17.0)));

    // DBSIZE counts active and expired leases alike.
    assert_eq!(con.dbsize(), 2);
}

#[test]
fn registry_rules_hold_over_resp2() {
    let server = Server::start();
    walkthrough(&mut server.typed());
}

#[test]
fn registry_rules_hold_over_resp3() {
    let server = Server::start();
    walkthrough(&mut server.typed_resp3());
}

#[test]
fn ttl_option_sets_the_lease_ttl_and_its_heartbeats() {
    let server = Server::start_with(&["--lease-ttl", "30"]);
    let mut con = server.typed();
    let lease = con.acquire("default", "w", Some(100.0), None).unwrap();
    assert_eq!(lease.expires_at, 130.0);
    // The option's name in any case.
    let lease = lease_reply(&con.run(&["LEASE.ACQUIRE", "short", "w", "100", "ttl", "2.5"]));
    assert_eq!(lease.expires_at, 102.5);
    assert!(con.heartbeat(&lease, Some(101.0)));
    assert_eq!(con.get("short", Some(101.0)).unwrap().expires_at, 103.5);
    // TTL without now uses the server clock.
    let clocked = con.acquire("clocked", "w", None, Some(60.0)).unwrap();
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        (clocked.expires_at - (wall + 60.0)).abs() < 5.0,
        "{clocked:?}"
    );
}

#[test]
fn omitted_now_is_the_server_clock() {
    let server = Server::start();
    let mut con = server.typed_resp3();
    let before = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let lease = con.acquire("run", "w", None, None).unwrap();
    let after = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let expires = lease.expires_at;
    // Millisecond precision, within the window of the call.
    assert!(
        expires >= (before * 1000.0).floor() / 1000.0 + 10.0,
        "{expires} {before}"
    );
    assert!(expires <= after + 10.0, "{expires} {after}");
    assert_eq!((expires * 1000.0).fract(), 0.0);
    assert!(con.heartbeat(&lease, None));
    assert!(con.validate("run", &lease, None));
    assert_eq!(con.get("run", None).unwrap().expired, Some(0));
    // An explicit now far in the past is read as registry time (the clock).
    let late = con.acquire("other", "w", Some(0.0), None).unwrap();
    assert!(late.expires_at >= expires, "{late:?}");
}

#[test]
fn ids_with_colons_empty_ids_and_binary_ids() {
    let server = Server::start();
    let mut con = server.typed();
    let first = con.acquire("a:b", "c", Some(0.0), None).unwrap();
    let second = con.acquire("a", "b:c", Some(0.0), None).unwrap();
    assert_eq!(first.lease_id, b"a:b:c:1");
    assert_eq!(second.lease_id, b"a:b:c:2");
    // Each id with the other lease's token must not match.
    let crossed = Lease {
        fencing_token: 2,
        ..first.clone()
    };
    assert!(!con.heartbeat(&crossed, Some(1.0)));
    assert!(!con.validate("a", &first, Some(1.0)));
    assert!(!con.validate("a:b", &second, Some(1.0)));
    assert!(con.validate("a:b", &first, Some(1.0)));
    assert!(con.release(&second));
    assert_eq!(con.get("a:b", Some(1.0)).unwrap().worker_id, b"c");

    let empty = con.acquire("", "", Some(0.0), None).unwrap();
    assert_eq!(empty.lease_id, b"::3");
    assert!(con.validate("", &empty, Some(1.0)));

    // Binary-safe: bytes that are not UTF-8, CR and LF, a 1 KiB id.
    let run_id: &[u8] = b"\xff\x00\r\nrun";
    let reply: Value = redis::cmd("LEASE.ACQUIRE")
        .arg(run_id)
        .arg("w")
        .arg(0)
        .query(&mut con)
        .unwrap();
    let lease = lease_reply(&reply);
    assert_eq!(lease.run_id, run_id);
    let mut lease_id = run_id.to_vec();
    lease_id.extend_from_slice(b":w:4");
    assert_eq!(lease.lease_id, lease_id);
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
    let lease = con.acquire(&long, &worker, Some(0.0), None).unwrap();
    assert_eq!(lease.lease_id, format!("{long}:{worker}:5").as_bytes());
}

#[test]
fn errors_are_redis_worded_and_keep_the_connection() {
    let server = Server::start();
    for (round, mut con) in [server.typed(), server.typed_resp3()]
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
            assert_eq!(&con.error(words), expected, "{words:?}");
            con.ping();
        }
        // None of the failed acquires issued a token.
        let run_id = format!("after-errors-{round}");
        let lease = con.acquire(&run_id, "w", Some(0.0), None).unwrap();
        assert_eq!(lease.fencing_token, round as i64 + 1);
    }
}
