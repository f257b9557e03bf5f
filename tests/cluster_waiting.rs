//! Blocked acquires in a cluster of three real `leased` processes, through
//! the `redis` crate: clients blocked on different nodes wait in the
//! leader's one queue, are granted the run first come first served, and
//! hear `-TRYAGAIN` when the leader dies. Each blocked client has a
//! connection (and a thread) of its own.

mod common;

use std::path::Path;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::client::{Lease, lease_or_null, lease_reply};
use common::cluster::Cluster;
use redis::Value;

const BINARY: &str = env!("CARGO_BIN_EXE_leased");

fn call(con: &mut redis::Connection, words: &[&str]) -> redis::RedisResult<Value> {
    common::client::words(words).query(con)
}

/// `LEASE.ACQUIRE run worker TTL 30 BLOCK 20000` on node `node`, in a
/// thread of its own: its reply (or its error's code and text) when it
/// ends.
fn block(
    cluster: &Cluster,
    node: usize,
    run: &str,
    worker: &str,
) -> JoinHandle<Result<Value, String>> {
    let mut con = cluster
        .try_connect(node, Duration::from_secs(30))
        .expect("connect");
    let (run, worker) = (run.to_string(), worker.to_string());
    thread::spawn(move || {
        let words = [
            "LEASE.ACQUIRE",
            &run,
            &worker,
            "TTL",
            "30",
            "BLOCK",
            "20000",
        ];
        call(&mut con, &words)
            .map_err(|error| format!("{} ({error})", error.code().unwrap_or("no code")))
    })
}

/// `LEASE.WAITERS run` on node `node`.
fn waiters(cluster: &Cluster, node: usize, run: &str) -> Vec<String> {
    let mut con = cluster.connect(node);
    let workers: Vec<String> = redis::cmd("LEASE.WAITERS")
        .arg(run)
        .query(&mut con)
        .unwrap_or_else(|e| panic!("LEASE.WAITERS on node {}: {e}", node + 1));
    workers
}

/// Waits until node `node` reports `expected` waiting for `run`.
fn queue_is(cluster: &Cluster, node: usize, run: &str, expected: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = waiters(cluster, node, run);
        if seen == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {} shows {seen:?} waiting for {run}, not {expected:?}",
            node + 1
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// `LEASE.ACQUIRE run worker TTL 30` on node `node`, resent while the
/// cluster answers TRYAGAIN (a leader just elected): the lease or null.
fn acquire(cluster: &Cluster, node: usize, run: &str, worker: &str) -> Option<Lease> {
    let mut con = cluster.connect(node);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match call(&mut con, &["LEASE.ACQUIRE", run, worker, "TTL", "30"]) {
            Ok(reply) => return lease_or_null(&reply),
            Err(error) if error.code() == Some("TRYAGAIN") && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(50));
            }
            Err(error) => panic!("acquire on node {}: {error}", node + 1),
        }
    }
}

fn release(cluster: &Cluster, node: usize, lease: &Lease) {
    let mut con = cluster.connect(node);
    let lease_id = String::from_utf8(lease.lease_id.clone()).unwrap();
    let token = lease.fencing_token.to_string();
    let released = call(&mut con, &["LEASE.RELEASE", &lease_id, &token]).unwrap();
    assert_eq!(released, Value::Int(1));
}

/// The lease a blocked acquire was granted.
fn granted(waiting: JoinHandle<Result<Value, String>>) -> Lease {
    let reply = waiting.join().unwrap().expect("a lease");
    lease_reply(&reply)
}

#[test]
fn clients_blocked_on_different_nodes_are_granted_in_arrival_order() {
    let cluster = Cluster::start(Path::new(BINARY), 3, &[]);
    let leader = cluster.leader(Duration::from_secs(10));
    let (one, two) = ((leader + 1) % 3, (leader + 2) % 3);
    let mut held = acquire(&cluster, one, "job", "w0").expect("a free run");

    // Each blocks once the one before is in the leader's queue.
    let order = [(one, "w1"), (two, "w2"), (leader, "w3"), (two, "w4")];
    let mut blocked = Vec::new();
    let mut queued = Vec::new();
    for (node, worker) in order {
        blocked.push(block(&cluster, node, "job", worker));
        queued.push(worker);
        queue_is(&cluster, leader, "job", &queued);
    }
    for node in [one, two, leader] {
        queue_is(&cluster, node, "job", &queued);
        assert_eq!(acquire(&cluster, node, "job", "jumper"), None);
    }

    for (waiting, worker) in blocked.into_iter().zip(["w1", "w2", "w3", "w4"]) {
        release(&cluster, two, &held);
        let lease = granted(waiting);
        assert_eq!(lease.worker_id, worker.as_bytes());
        assert_eq!(lease.fencing_token, held.fencing_token + 1);
        held = lease;
    }
    queue_is(&cluster, one, "job", &[]);
}

#[test]
fn clients_blocked_on_a_killed_leader_and_its_followers_hear_try_again() {
    let mut cluster = Cluster::start(Path::new(BINARY), 3, &[]);
    let leader = cluster.leader(Duration::from_secs(10));
    let (one, two) = ((leader + 1) % 3, (leader + 2) % 3);
    acquire(&cluster, leader, "job", "w0").expect("a free run");
    let on_one = block(&cluster, one, "job", "w1");
    queue_is(&cluster, leader, "job", &["w1"]);
    let on_two = block(&cluster, two, "job", "w2");
    queue_is(&cluster, leader, "job", &["w1", "w2"]);

    cluster.kill9(leader);
    for waiting in [on_one, on_two] {
        let error = waiting.join().unwrap().expect_err("not granted");
        assert!(error.starts_with("TRYAGAIN "), "{error}");
    }
    // Blocking again works, on the new leader's queue.
    let new = cluster.leader_among(&[one, two], Duration::from_secs(10));
    let follower = if new == one { two } else { one };
    let again = block(&cluster, follower, "other", "w3");
    let lease = granted(again);
    assert_eq!(lease.worker_id, b"w3");
}
