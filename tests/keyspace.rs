//! The keyspace view through the `redis` crate: every run holding a lease
//! is a read-only key of type `hash`. Each read's replies (held runs,
//! missing keys, expired-but-retained leases, RESP3 where it differs),
//! wrong arity, and the write refusal leaving the connection usable. The
//! server runs in the test's runtime with paused time, so TTLs count down
//! through `tokio::time::advance`.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::client::{AsyncClient, acquire_cmd, bulk_value, status, text};
use common::inprocess::InProcess;
use redis::Value;
use tokio::time::advance;

const REFUSAL: &str = "would bypass their fencing tokens";

fn refusal(name: &str) -> String {
    format!("ERR leases change only through LEASE.* commands: '{name}' {REFUSAL}")
}

fn registry_time(info: &std::collections::HashMap<String, String>) -> String {
    info["registry_time"].clone()
}

fn int(value: &Value) -> i64 {
    match value {
        Value::Int(n) => *n,
        other => panic!("an integer, got {other:?}"),
    }
}

fn array(value: Value) -> Vec<Value> {
    match value {
        Value::Array(items) => items,
        other => panic!("an array, got {other:?}"),
    }
}

/// Bulk strings as text; panics on anything else (hash values are never
/// integers).
fn bulks(values: Vec<Value>) -> Vec<String> {
    values
        .into_iter()
        .map(|value| match value {
            Value::BulkString(bytes) => String::from_utf8(bytes).expect("UTF-8"),
            other => panic!("a bulk string, got {other:?}"),
        })
        .collect()
}

/// `LEASE.GET`'s RESP2 reply as (field, value) text pairs: integers in
/// decimal, the rest as sent.
async fn lease_get_fields(con: &mut AsyncClient, run: &str) -> Vec<(String, String)> {
    let items = array(con.run(&["LEASE.GET", run]).await);
    items
        .chunks(2)
        .map(|pair| {
            let value = match &pair[1] {
                Value::Int(n) => n.to_string(),
                other => text(other),
            };
            (text(&pair[0]), value)
        })
        .collect()
}

async fn hgetall_fields(con: &mut AsyncClient, run: &str) -> Vec<(String, String)> {
    let flat = bulks(array(con.run(&["HGETALL", run]).await));
    flat.chunks(2)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect()
}

/// A full `SCAN` iteration with these options: the run ids, in order.
async fn scan_all(con: &mut AsyncClient, options: &[&str]) -> Vec<String> {
    let mut cursor = "0".to_string();
    let mut runs = Vec::new();
    loop {
        let mut words = vec!["SCAN", &cursor];
        words.extend_from_slice(options);
        let mut reply = array(con.run(&words).await);
        assert_eq!(reply.len(), 2, "SCAN's two elements");
        runs.extend(bulks(array(reply.pop().unwrap())));
        cursor = text(&reply[0]);
        if cursor == "0" {
            return runs;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_ttl_family_counts_down_on_the_server_clock_and_reads_move_nothing() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client().await;
    con.acquire("run", "w", None, Some(10.0)).await.unwrap();
    let expires_at: f64 = lease_get_fields(&mut con, "run").await[4]
        .1
        .parse()
        .unwrap();
    let before = registry_time(&con.info("leases").await);

    assert_eq!(int(&con.run(&["PTTL", "run"]).await), 10_000);
    assert_eq!(int(&con.run(&["TTL", "run"]).await), 10);
    advance(Duration::from_millis(2_500)).await;
    assert_eq!(int(&con.run(&["PTTL", "run"]).await), 7_500);
    // 7.5 s rounds up, as Redis rounds: (ms + 500) / 1000.
    assert_eq!(int(&con.run(&["TTL", "run"]).await), 8);
    advance(Duration::from_millis(1_000)).await;
    assert_eq!(int(&con.run(&["TTL", "run"]).await), 7);
    let pexpiretime = (expires_at * 1000.0).round() as i64;
    assert_eq!(int(&con.run(&["PEXPIRETIME", "run"]).await), pexpiretime);
    assert_eq!(
        int(&con.run(&["EXPIRETIME", "run"]).await),
        (pexpiretime + 500) / 1000
    );
    assert_eq!(con.run(&["HGET", "run", "expired"]).await, bulk_value("0"));

    // Expired, still held (retention keeps it forever by default): a key
    // that will not expire on its own.
    advance(Duration::from_millis(6_500)).await;
    for ttl in ["TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME"] {
        assert_eq!(int(&con.run(&[ttl, "run"]).await), -1, "{ttl}");
        assert_eq!(int(&con.run(&[ttl, "missing"]).await), -2, "{ttl}");
    }
    assert_eq!(con.run(&["HGET", "run", "expired"]).await, bulk_value("1"));
    assert_eq!(con.run(&["TYPE", "run"]).await, status("hash"));
    assert_eq!(int(&con.run(&["EXISTS", "run"]).await), 1);
    assert_eq!(scan_all(&mut con, &[]).await, ["run"]);
    // No read wrote registry time.
    assert_eq!(registry_time(&con.info("leases").await), before);
    // A takeover ends it: the key is the new lease.
    con.acquire("run", "w2", None, Some(5.0)).await.unwrap();
    assert_eq!(int(&con.run(&["TTL", "run"]).await), 5);
    assert_eq!(
        con.run(&["HGET", "run", "worker_id"]).await,
        bulk_value("w2")
    );
}

#[tokio::test(start_paused = true)]
async fn a_lease_past_retention_is_no_key() {
    let server = InProcess::start(&["--lease-retention", "5"]).await;
    let mut con = server.client().await;
    con.acquire("run", "w", None, Some(1.0)).await.unwrap();
    advance(Duration::from_millis(3_000)).await;
    assert_eq!(int(&con.run(&["TTL", "run"]).await), -1);
    advance(Duration::from_millis(3_000)).await;
    // Retention runs on registry time, as LEASE.GET sees it: a write moves
    // it to the clock, past the lease's retention.
    con.acquire("other", "w", None, None).await.unwrap();
    assert_eq!(con.get("run", None).await, None);
    assert_eq!(con.run(&["TYPE", "run"]).await, status("none"));
    assert_eq!(int(&con.run(&["TTL", "run"]).await), -2);
    assert_eq!(int(&con.run(&["EXISTS", "run"]).await), 0);
    assert_eq!(scan_all(&mut con, &[]).await, ["other"]);
    assert_eq!(con.run(&["RANDOMKEY"]).await, bulk_value("other"));
}

#[tokio::test(start_paused = true)]
async fn hash_reads_give_lease_get_fields_as_bulk_strings() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client().await;
    con.acquire("run-1", "worker-a", None, Some(30.5))
        .await
        .unwrap();
    let expected = lease_get_fields(&mut con, "run-1").await;
    let names: Vec<&str> = expected.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "run_id",
            "worker_id",
            "lease_id",
            "fencing_token",
            "expires_at",
            "expired"
        ]
    );
    assert_eq!(hgetall_fields(&mut con, "run-1").await, expected);
    for (name, value) in &expected {
        assert_eq!(con.run(&["HGET", "run-1", name]).await, bulk_value(value));
        assert_eq!(int(&con.run(&["HEXISTS", "run-1", name]).await), 1);
    }
    assert_eq!(con.run(&["HGET", "run-1", "color"]).await, Value::Nil);
    assert_eq!(int(&con.run(&["HEXISTS", "run-1", "color"]).await), 0);
    assert_eq!(
        con.run(&["HMGET", "run-1", "worker_id", "color", "fencing_token"])
            .await,
        Value::Array(vec![bulk_value("worker-a"), Value::Nil, bulk_value("1")])
    );
    assert_eq!(int(&con.run(&["HLEN", "run-1"]).await), 6);
    assert_eq!(bulks(array(con.run(&["HKEYS", "run-1"]).await)), names);
    let values: Vec<&str> = expected.iter().map(|(_, value)| value.as_str()).collect();
    assert_eq!(bulks(array(con.run(&["HVALS", "run-1"]).await)), values);
    let flat: Vec<String> = expected
        .iter()
        .flat_map(|(name, value)| [name.clone(), value.clone()])
        .collect();
    let mut hscan = array(con.run(&["HSCAN", "run-1", "0"]).await);
    assert_eq!(bulks(array(hscan.pop().unwrap())), flat);
    assert_eq!(hscan, [bulk_value("0")]);
    let mut hscan = array(
        con.run(&[
            "HSCAN", "run-1", "0", "MATCH", "*_id", "COUNT", "1", "NOVALUES",
        ])
        .await,
    );
    assert_eq!(
        bulks(array(hscan.pop().unwrap())),
        ["run_id", "worker_id", "lease_id"]
    );
    assert_eq!(con.run(&["TYPE", "run-1"]).await, status("hash"));
    assert_eq!(
        int(&con.run(&["EXISTS", "run-1", "run-1", "run-9"]).await),
        2
    );
    assert_eq!(
        con.run(&["OBJECT", "ENCODING", "run-1"]).await,
        bulk_value("listpack")
    );
    // A 72-byte slot and 4 bytes in each of two indexes: the ids fit inline.
    assert_eq!(int(&con.run(&["MEMORY", "USAGE", "run-1"]).await), 80);
    assert_eq!(
        int(&con.run(&["MEMORY", "USAGE", "run-1", "SAMPLES", "0"]).await),
        80
    );
    // Long ids: a heap block of 4 + 70 + 8 bytes, and a value over 64 bytes.
    let long_run = "r".repeat(70);
    con.acquire(&long_run, "worker-b", None, None)
        .await
        .unwrap();
    assert_eq!(
        int(&con.run(&["MEMORY", "USAGE", &long_run]).await),
        72 + 4 + 78 + 8
    );
    assert_eq!(
        con.run(&["OBJECT", "ENCODING", &long_run]).await,
        bulk_value("hashtable")
    );
}

#[tokio::test(start_paused = true)]
async fn missing_keys_read_as_redis_reads_them() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client().await;
    let empty = Value::Array(Vec::new());
    assert_eq!(con.run(&["HGETALL", "nope"]).await, empty);
    assert_eq!(con.run(&["HGET", "nope", "run_id"]).await, Value::Nil);
    assert_eq!(
        con.run(&["HMGET", "nope", "run_id", "expired"]).await,
        Value::Array(vec![Value::Nil, Value::Nil])
    );
    assert_eq!(int(&con.run(&["HLEN", "nope"]).await), 0);
    assert_eq!(con.run(&["HKEYS", "nope"]).await, empty);
    assert_eq!(con.run(&["HVALS", "nope"]).await, empty);
    assert_eq!(int(&con.run(&["HEXISTS", "nope", "run_id"]).await), 0);
    assert_eq!(
        con.run(&["HSCAN", "nope", "0"]).await,
        Value::Array(vec![bulk_value("0"), empty.clone()])
    );
    assert_eq!(con.run(&["TYPE", "nope"]).await, status("none"));
    assert_eq!(int(&con.run(&["EXISTS", "nope", "nope"]).await), 0);
    assert_eq!(con.run(&["MEMORY", "USAGE", "nope"]).await, Value::Nil);
    assert_eq!(con.run(&["OBJECT", "ENCODING", "nope"]).await, Value::Nil);
    assert_eq!(con.run(&["RANDOMKEY"]).await, Value::Nil);
    assert_eq!(con.run(&["KEYS", "*"]).await, empty);
    assert_eq!(
        con.run(&["SCAN", "0"]).await,
        Value::Array(vec![bulk_value("0"), empty])
    );
}

#[tokio::test(start_paused = true)]
async fn resp3_gives_hgetall_as_a_map_and_the_rest_as_in_resp2() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client_resp3().await;
    con.acquire("run-1", "w", None, Some(10.0)).await.unwrap();
    let Value::Map(pairs) = con.run(&["HGETALL", "run-1"]).await else {
        panic!("HGETALL is a map in RESP3");
    };
    let names: Vec<String> = pairs.iter().map(|(name, _)| text(name)).collect();
    assert_eq!(names[..2], ["run_id", "worker_id"]);
    assert_eq!(pairs.len(), 6);
    assert!(
        pairs
            .iter()
            .all(|(_, value)| matches!(value, Value::BulkString(_))),
        "every value a bulk string: {pairs:?}"
    );
    assert_eq!(pairs[3].1, bulk_value("1"));
    assert_eq!(con.run(&["HGETALL", "nope"]).await, Value::Map(Vec::new()));
    assert_eq!(con.run(&["TYPE", "run-1"]).await, status("hash"));
    assert_eq!(int(&con.run(&["TTL", "run-1"]).await), 10);
    assert_eq!(
        con.run(&["SCAN", "0"]).await,
        Value::Array(vec![
            bulk_value("0"),
            Value::Array(vec![bulk_value("run-1")])
        ])
    );
}

#[tokio::test(start_paused = true)]
async fn scan_walks_the_leases_as_lease_scan_does() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client().await;
    let runs: Vec<String> = (0..50).map(|i| format!("run-{i}")).collect();
    let mut pipe = redis::pipe();
    for run in &runs {
        pipe.add_command(acquire_cmd(run, "w", None, None)).ignore();
    }
    let () = pipe.query_async(&mut con.con).await.unwrap();
    let all = scan_all(&mut con, &["COUNT", "7"]).await;
    assert_eq!(all.len(), 50, "each once: {all:?}");
    let set: BTreeSet<&String> = all.iter().collect();
    assert_eq!(set, runs.iter().collect());
    // The same cursors and ids as LEASE.SCAN's.
    for cursor in ["0", "7", "20"] {
        assert_eq!(
            con.run(&["SCAN", cursor, "COUNT", "5", "MATCH", "run-1*"])
                .await,
            con.run(&["LEASE.SCAN", cursor, "COUNT", "5", "MATCH", "run-1*"])
                .await
        );
    }
    let ones = scan_all(&mut con, &["MATCH", "run-1*", "TYPE", "HASH"]).await;
    assert_eq!(ones.len(), 11, "run-1 and run-10..19: {ones:?}");
    assert!(
        scan_all(&mut con, &["TYPE", "string", "COUNT", "3"])
            .await
            .is_empty()
    );
    let mut keys = bulks(array(con.run(&["KEYS", "run-1*"]).await));
    keys.sort();
    let mut expected = ones.clone();
    expected.sort();
    assert_eq!(keys, expected);
    assert_eq!(
        array(con.run(&["KEYS", "*"]).await).len() as i64,
        con.dbsize().await
    );
    for _ in 0..5 {
        let key = text(&con.run(&["RANDOMKEY"]).await);
        assert!(runs.contains(&key), "{key}");
    }
    assert_eq!(
        con.error(&["SCAN", "0", "TYPE", "vector"]).await,
        "ERR unknown type name 'vector'"
    );
    assert_eq!(con.error(&["SCAN", "-1"]).await, "ERR invalid cursor");
    assert_eq!(
        con.error(&["SCAN", "0", "COUNT", "0"]).await,
        "ERR syntax error"
    );
    assert_eq!(con.error(&["SCAN", "0", "COUNT"]).await, "ERR syntax error");
    assert_eq!(
        con.error(&["SCAN", "0", "COUNT", "x"]).await,
        "ERR value is not an integer or out of range"
    );
    // LEASE.SCAN takes no TYPE.
    assert_eq!(
        con.error(&["LEASE.SCAN", "0", "TYPE", "hash"]).await,
        "ERR syntax error"
    );
}

#[tokio::test(start_paused = true)]
async fn wrong_arity_and_bad_options_are_refused_as_redis_refuses_them() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client().await;
    con.acquire("run", "w", None, None).await.unwrap();
    for (words, name) in [
        (&["HGET", "run"][..], "hget"),
        (&["HGETALL"], "hgetall"),
        (&["HGETALL", "run", "more"], "hgetall"),
        (&["HMGET", "run"], "hmget"),
        (&["HLEN"], "hlen"),
        (&["HKEYS"], "hkeys"),
        (&["HVALS", "a", "b"], "hvals"),
        (&["HEXISTS", "run"], "hexists"),
        (&["HSCAN", "run"], "hscan"),
        (&["EXISTS"], "exists"),
        (&["TYPE"], "type"),
        (&["TTL", "a", "b"], "ttl"),
        (&["PTTL"], "pttl"),
        (&["EXPIRETIME"], "expiretime"),
        (&["PEXPIRETIME"], "pexpiretime"),
        (&["SCAN"], "scan"),
        (&["KEYS"], "keys"),
        (&["RANDOMKEY", "x"], "randomkey"),
        (&["MEMORY", "USAGE"], "memory|usage"),
        (&["OBJECT", "ENCODING"], "object|encoding"),
    ] {
        assert_eq!(
            con.error(words).await,
            format!("ERR wrong number of arguments for '{name}' command")
        );
    }
    assert_eq!(
        con.error(&["HSCAN", "run", "x"]).await,
        "ERR invalid cursor"
    );
    assert_eq!(
        con.error(&["HSCAN", "run", "0", "COUNT", "0"]).await,
        "ERR syntax error"
    );
    assert_eq!(
        con.error(&["HSCAN", "run", "0", "TYPE", "hash"]).await,
        "ERR syntax error"
    );
    assert_eq!(
        con.error(&["MEMORY", "USAGE", "run", "SAMPLES", "x"]).await,
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        con.error(&["MEMORY", "USAGE", "run", "SAMPLES", "-1"])
            .await,
        "ERR syntax error"
    );
    assert_eq!(
        con.error(&["MEMORY", "USAGE", "run", "SAMPLES"]).await,
        "ERR syntax error"
    );
    assert_eq!(
        con.error(&["OBJECT", "FREQ", "run"]).await,
        "ERR unknown subcommand 'FREQ'. Try OBJECT HELP."
    );
    assert_eq!(
        con.error(&["MEMORY", "DOCTOR"]).await,
        "ERR unknown subcommand 'DOCTOR'. Try MEMORY HELP."
    );
    for container in ["OBJECT", "MEMORY"] {
        let help = array(con.run(&[container, "HELP"]).await);
        assert!(text(&help[0]).starts_with(container), "{help:?}");
        assert_eq!(text(help.last().unwrap()), "    Print this help.");
    }
    con.ping().await;
}

#[tokio::test(start_paused = true)]
async fn writes_are_refused_with_one_error_and_change_nothing() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client().await;
    con.acquire("run", "w", None, None).await.unwrap();
    let before = lease_get_fields(&mut con, "run").await;
    for words in [
        &["SET", "run", "x"][..],
        &["set", "run", "x", "EX", "10"],
        &["SETNX", "run", "x"],
        &["SETEX", "run", "10", "x"],
        &["PSETEX", "run", "10", "x"],
        &["MSET", "run", "x"],
        &["MSETNX", "run", "x"],
        &["GETSET", "run", "x"],
        &["GETDEL", "run"],
        &["GETEX", "run", "PERSIST"],
        &["APPEND", "run", "x"],
        &["INCR", "run"],
        &["INCRBY", "run", "2"],
        &["INCRBYFLOAT", "run", "2.5"],
        &["DECR", "run"],
        &["DECRBY", "run", "2"],
        &["DEL", "run"],
        &["UNLINK", "run"],
        &["EXPIRE", "run", "100"],
        &["PEXPIRE", "run", "100"],
        &["EXPIREAT", "run", "100"],
        &["PEXPIREAT", "run", "100"],
        &["PERSIST", "run"],
        &["RENAME", "run", "other"],
        &["RENAMENX", "run", "other"],
        &["MOVE", "run", "1"],
        &["COPY", "run", "other"],
        &["HSET", "run", "worker_id", "me"],
        &["HSETNX", "run", "x", "y"],
        &["HMSET", "run", "worker_id", "me"],
        &["HDEL", "run", "worker_id"],
        &["HINCRBY", "run", "fencing_token", "1"],
        &["HINCRBYFLOAT", "run", "expires_at", "100"],
        &["LPUSH", "run", "x"],
        &["RPUSH", "run", "x"],
        &["LPOP", "run"],
        &["RPOP", "run"],
        &["SADD", "run", "x"],
        &["SREM", "run", "x"],
        &["ZADD", "run", "1", "x"],
        &["ZREM", "run", "x"],
        &["FLUSHALL"],
        &["FLUSHDB", "ASYNC"],
        &["SWAPDB", "0", "1"],
        &["RESTORE", "run", "0", "payload"],
    ] {
        assert_eq!(
            con.error(words).await,
            refusal(&words[0].to_ascii_lowercase()),
            "{words:?}"
        );
        // The connection goes on.
        con.ping().await;
    }
    assert_eq!(lease_get_fields(&mut con, "run").await, before);
    assert_eq!(con.dbsize().await, 1);
    assert_eq!(int(&con.run(&["HLEN", "run"]).await), 6);
    // Reads that are not part of the view stay unknown.
    assert_eq!(
        con.error(&["GET", "run"]).await,
        "ERR unknown command 'GET', with args beginning with: 'run' "
    );
}

#[tokio::test(start_paused = true)]
async fn keyspace_reads_run_in_a_transaction_and_a_write_aborts_one() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client().await;
    con.acquire("run", "w", None, Some(10.0)).await.unwrap();
    let queued = status("QUEUED");
    assert_eq!(con.run(&["MULTI"]).await, Value::Okay);
    assert_eq!(con.run(&["TYPE", "run"]).await, queued);
    assert_eq!(con.run(&["TTL", "run"]).await, queued);
    assert_eq!(con.run(&["HGET", "run", "worker_id"]).await, queued);
    assert_eq!(con.run(&["EXISTS", "run", "nope"]).await, queued);
    assert_eq!(
        con.run(&["EXEC"]).await,
        Value::Array(vec![
            status("hash"),
            Value::Int(10),
            bulk_value("w"),
            Value::Int(1)
        ])
    );
    assert_eq!(con.run(&["MULTI"]).await, Value::Okay);
    assert_eq!(
        con.error(&["HSET", "run", "worker_id", "me"]).await,
        refusal("hset")
    );
    assert_eq!(
        con.error(&["EXEC"]).await,
        "EXECABORT Transaction discarded because of previous errors."
    );
    assert_eq!(
        con.run(&["HGET", "run", "worker_id"]).await,
        bulk_value("w")
    );
}

/// `COMMAND INFO` gives the keyspace reads Redis's key positions, so a
/// cluster-aware client knows where their key is; so do the lease commands
/// that name a run or a lease (their first argument), not `LEASE.SCAN`.
#[tokio::test(start_paused = true)]
async fn command_info_names_where_the_key_is() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client().await;
    for (name, positions) in [
        ("hget", [1, 1, 1]),
        ("ttl", [1, 1, 1]),
        ("exists", [1, -1, 1]),
        ("hmget", [1, 1, 1]),
        ("memory|usage", [2, 2, 1]),
        ("object|encoding", [2, 2, 1]),
        ("scan", [0, 0, 0]),
        ("lease.acquire", [1, 1, 1]),
        ("lease.heartbeat", [1, 1, 1]),
        ("lease.scan", [0, 0, 0]),
    ] {
        let info = array(con.run(&["COMMAND", "INFO", name]).await);
        let entry = array(info[0].clone());
        let got = [int(&entry[3]), int(&entry[4]), int(&entry[5])];
        assert_eq!(got, positions, "{name}");
    }
}
