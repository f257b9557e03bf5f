//! `maxmemory` with Redis's noeviction policy, on the spawned binary (the
//! figure is its allocator's): fill to the limit and see OOM while
//! heartbeats, reads and releases go on; release some and acquire again;
//! restart over the limit with every lease kept and a warning.

mod common;

use redis::{Connection, RedisResult, Value};

use common::binary::{Server, data_dir};
use common::client::{info_map, info_number, lease_or_null, lease_reply};

const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";
const LIMIT: &str = "8mb";
const LIMIT_BYTES: u64 = 8 << 20;
/// What one pipeline of `fill`'s requests and their replies may hold
/// while the core reads the allocator's figure.
const IN_FLIGHT: u64 = 512 << 10;

/// Acquires `run-<i>` for `from..from + count`, one pipeline; each reply,
/// a lease or the server's error line.
fn acquire_range(con: &mut Connection, from: usize, count: usize) -> Vec<Result<Value, String>> {
    let mut pipe = redis::pipe();
    for i in from..from + count {
        pipe.cmd("LEASE.ACQUIRE")
            .arg(format!("run-{i:08}"))
            .arg("worker")
            .arg("TTL")
            .arg(100_000);
    }
    let replies: Vec<RedisResult<Value>> = pipe.ignore_errors().query(con).unwrap();
    let line =
        |e: redis::RedisError| format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or(""));
    replies
        .into_iter()
        .map(|reply| reply.map_err(line))
        .collect()
}

/// Acquires new runs until the first OOM; returns how many were granted.
fn fill(con: &mut Connection) -> usize {
    let mut granted = 0;
    loop {
        let replies = acquire_range(con, granted, 2_000);
        let refused = replies.iter().position(Result::is_err);
        granted += refused.unwrap_or(replies.len());
        if let Some(at) = refused {
            assert_eq!(replies[at].as_ref().unwrap_err(), OOM);
            // Once refused, every later acquire of a new run is too.
            assert!(replies[at..].iter().all(Result::is_err));
            return granted;
        }
        assert!(granted < 1_000_000, "no OOM after {granted} leases");
    }
}

fn info(con: &mut Connection, section: &str) -> std::collections::HashMap<String, String> {
    info_map(&redis::cmd("INFO").arg(section).query(con).unwrap())
}

fn run_lease(con: &mut Connection, i: usize) -> common::client::Lease {
    let reply: Value = redis::cmd("LEASE.GET")
        .arg(format!("run-{i:08}"))
        .query(con)
        .unwrap();
    lease_reply(&reply)
}

#[test]
fn above_maxmemory_new_runs_get_oom_and_everything_else_goes_on() {
    let (_temp, dir) = data_dir();
    let mut server = Server::start_in(&dir, &["--maxmemory", LIMIT]).unwrap();
    let mut con = server.connect();
    let memory = info(&mut con, "memory");
    assert_eq!(info_number(&memory, "maxmemory"), LIMIT_BYTES);
    assert_eq!(memory["maxmemory_human"], "8.00M");
    assert_eq!(memory["maxmemory_policy"], "noeviction");

    let granted = fill(&mut con);
    // The reading that refused counted the round's requests and replies
    // in flight (2,000 pipelined acquires: a few hundred KB), freed since:
    // what is left is the leases, at the limit give or take that much.
    let used = info_number(&info(&mut con, "memory"), "used_memory");
    assert!(used > LIMIT_BYTES - IN_FLIGHT, "refused at {used} bytes");
    let last_token = info_number(&info(&mut con, "leases"), "last_fencing_token");
    assert_eq!(last_token, granted as u64, "an OOM spends no token");

    // A held run answers null, as ever; heartbeats, reads and validations
    // of the leases held go on.
    let held = acquire_range(&mut con, 0, 1);
    assert_eq!(held[0], Ok(Value::Nil));
    let lease = run_lease(&mut con, 7);
    let beat: i64 = redis::cmd("LEASE.HEARTBEAT")
        .arg(&lease.lease_id)
        .arg(lease.fencing_token)
        .query(&mut con)
        .unwrap();
    assert_eq!(beat, 1);

    // Releases leave slots that new runs reuse without growing memory.
    let mut pipe = redis::pipe();
    for i in 0..500 {
        let lease = run_lease(&mut con, i);
        pipe.cmd("LEASE.RELEASE")
            .arg(lease.lease_id)
            .arg(lease.fencing_token);
    }
    let released: Vec<i64> = pipe.query(&mut con).unwrap();
    assert_eq!(released, vec![1; 500]);
    let again = acquire_range(&mut con, 10_000_000, 500);
    assert!(
        again
            .iter()
            .all(|reply| lease_or_null(reply.as_ref().unwrap()).is_some())
    );
    assert_eq!(fill_from(&mut con, 20_000_000), OOM);

    // Run data grows memory whatever the run: SETDATA gets OOM too, and
    // DELDATA goes on.
    let lease = run_lease(&mut con, 10_000_000);
    let set = redis::cmd("LEASE.SETDATA")
        .arg(&lease.lease_id)
        .arg(lease.fencing_token)
        .arg("checkpoint")
        .query::<Value>(&mut con)
        .expect_err("OOM");
    assert_eq!(common::client::error_line(&set), OOM);
    let deleted: i64 = redis::cmd("LEASE.DELDATA")
        .arg(&lease.lease_id)
        .arg(lease.fencing_token)
        .query(&mut con)
        .unwrap();
    assert_eq!(deleted, 0);

    // CONFIG SET maxmemory 0 lifts the limit at once.
    let ok: Value = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("0")
        .query(&mut con)
        .unwrap();
    assert_eq!(ok, Value::Okay);
    assert!(
        acquire_range(&mut con, 30_000_000, 100)
            .iter()
            .all(Result::is_ok)
    );
    server.stop();
}

/// Acquires new runs from `from` on until one is refused; its error.
fn fill_from(con: &mut Connection, from: usize) -> String {
    for batch in 0..1_000 {
        let replies = acquire_range(con, from + batch * 1_000, 1_000);
        if let Some(Err(error)) = replies.into_iter().find(Result::is_err) {
            return error;
        }
    }
    panic!("never refused");
}

#[test]
fn a_restart_over_the_limit_keeps_every_lease_and_says_so() {
    let (_temp, dir) = data_dir();
    let mut server = Server::start_in(&dir, &["--appendfsync", "always"]).unwrap();
    let mut con = server.connect();
    for from in (0..120_000).step_by(10_000) {
        assert!(
            acquire_range(&mut con, from, 10_000)
                .iter()
                .all(Result::is_ok)
        );
    }
    server.stop();

    let mut server = Server::start_in(&dir, &["--maxmemory", "4mb"]).unwrap();
    let log = server.log();
    assert!(
        log.contains("more than maxmemory (4194304 bytes). None is dropped"),
        "{log}"
    );
    let mut con = server.connect();
    let keys: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(keys, 120_000, "every lease is loaded");
    assert_eq!(fill_from(&mut con, 1_000_000), OOM);
    let lease = run_lease(&mut con, 42);
    let valid: i64 = redis::cmd("LEASE.VALIDATE")
        .arg("run-00000042")
        .arg(&lease.lease_id)
        .arg(lease.fencing_token)
        .query(&mut con)
        .unwrap();
    assert_eq!(valid, 1);
    server.stop();
}
