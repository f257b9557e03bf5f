//! Redis Cluster clients against a three-node cluster of real processes
//! (tests/common/cluster.rs), in both `cluster-redirect` modes: the
//! `redis` crate's cluster client, redis-py's `RedisCluster`
//! (tests/clients/redis_py_cluster.py), ioredis's `Cluster`
//! (tests/clients/ioredis_cluster.js) and `redis-cli -c`. Each acquires,
//! heartbeats and releases; then the leader is killed (`kill -9`) and,
//! with the client's own retries (and a loop of the test's own where the
//! client gives up during the election), a heartbeat of a lease taken
//! before the kill and a new acquire work against the new leader.
//!
//! The tests that need redis-py, node or redis-cli are ignored with what
//! they need, as in tests/python_client.rs, tests/node_client.rs and
//! tests/redis_cli.rs; `cargo test -- --include-ignored` (which `.ci/run`
//! runs) runs them.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::child::Killed;
use common::cluster::Cluster;
use redis::Value;

const BINARY: &str = env!("CARGO_BIN_EXE_leased");

/// How long the clients (and the tests' own loops) may take to find the
/// new leader after a kill: the election takes about 1 s.
const FAILOVER: Duration = Duration::from_secs(20);

fn cluster(mode: &str) -> Cluster {
    Cluster::start(Path::new(BINARY), 3, &["--cluster-redirect", mode])
}

/// The nodes' client ports, comma-separated, for the scripts.
fn ports(cluster: &Cluster) -> String {
    let ports: Vec<String> = (cluster.nodes.iter()).map(|n| n.port.to_string()).collect();
    ports.join(",")
}

fn call(con: &mut redis::Connection, words: &[&str]) -> redis::RedisResult<Value> {
    common::client::words(words).query(con)
}

/// The error a command gets, as the server worded it (code and detail).
fn error(con: &mut redis::Connection, words: &[&str]) -> String {
    match call(con, words) {
        Ok(value) => panic!("{words:?} answered {value:?}, not an error"),
        Err(error) => match (error.code(), error.detail()) {
            (Some(code), Some(detail)) => format!("{code} {detail}"),
            (Some(code), None) => code.to_owned(),
            _ => panic!("{words:?}: not a server error: {error}"),
        },
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(text) => text.clone(),
        Value::VerbatimString { text, .. } => text.clone(),
        Value::Int(n) => n.to_string(),
        other => panic!("not text: {other:?}"),
    }
}

/// A lease map's (or any flat key/value reply's) field.
fn field(value: &Value, name: &str) -> Value {
    let pairs: Vec<(Value, Value)> = match value {
        Value::Map(pairs) => pairs.clone(),
        Value::Array(items) => (items.chunks(2))
            .map(|pair| (pair[0].clone(), pair[1].clone()))
            .collect(),
        other => panic!("not a map: {other:?}"),
    };
    let found = pairs.into_iter().find(|(key, _)| text(key) == name);
    found.unwrap_or_else(|| panic!("no {name} in {value:?}")).1
}

fn token(lease: &Value) -> i64 {
    match field(lease, "fencing_token") {
        Value::Int(token) => token,
        other => panic!("token {other:?}"),
    }
}

/// A follower of `leader` (the first one in id order).
fn follower(leader: usize) -> usize {
    usize::from(leader == 0)
}

/// What a follower answers with `cluster-redirect moved`, and what any
/// node shows cluster clients: MOVED with the key's slot and the leader's
/// address; keyless commands answered; a transaction aborted; COMMAND's
/// key positions; CLUSTER SHARDS; `redis_mode:cluster`. With no leader
/// (two nodes of three killed), CLUSTERDOWN.
#[test]
fn a_follower_redirects_keyed_commands_to_the_leader() {
    let mut cluster = cluster("moved");
    let leader = cluster.leader(Duration::from_secs(10));
    let other = follower(leader);
    let moved = |slot: u16| format!("MOVED {slot} 127.0.0.1:{}", cluster.nodes[leader].port);
    let mut con = cluster.connect(other);
    // The slot of the first key: the run, or the lease id.
    let acquire = ["LEASE.ACQUIRE", "run-42", "w", "TTL", "30"];
    assert_eq!(error(&mut con, &acquire), moved(4178));
    let heartbeat = ["LEASE.HEARTBEAT", "run-42:w:1", "1"];
    assert_eq!(error(&mut con, &heartbeat), moved(16127));
    for words in [
        &["LEASE.ACQUIRE", "run-42", "w", "BLOCK", "100"][..],
        &["LEASE.GET", "run-42"],
        &["LEASE.WAITERS", "run-42"],
        &["HGETALL", "run-42"],
        // Checked before the arguments, as Redis does.
        &["LEASE.VALIDATE", "run-42", "x", "not-a-token"],
    ] {
        assert_eq!(error(&mut con, words), moved(4178), "{words:?}");
    }
    // Keyless commands are answered here.
    assert_eq!(
        call(&mut con, &["PING"]).unwrap(),
        Value::SimpleString("PONG".into())
    );
    let scan = call(&mut con, &["LEASE.SCAN", "0"]).unwrap();
    assert_eq!(
        scan,
        Value::Array(vec![Value::BulkString(b"0".to_vec()), Value::Array(vec![])])
    );
    // MULTI: the redirect is the queued command's reply, and EXEC aborts.
    assert_eq!(call(&mut con, &["MULTI"]).unwrap(), Value::Okay);
    assert_eq!(error(&mut con, &["LEASE.GET", "run-42"]), moved(4178));
    assert!(error(&mut con, &["EXEC"]).starts_with("EXECABORT"));
    // The leader runs them.
    let mut on_leader = cluster.connect(leader);
    let lease = call(&mut on_leader, &acquire).unwrap();
    assert_eq!(token(&lease), 1);
    let beat = call(&mut on_leader, &heartbeat).unwrap();
    assert_eq!(beat, Value::Int(1));

    // What cluster clients read, on any node.
    let info = text(&call(&mut con, &["INFO", "server"]).unwrap());
    assert!(info.contains("redis_mode:cluster\r\n"), "{info}");
    for (name, first) in [
        ("lease.acquire", 1),
        ("lease.heartbeat", 1),
        ("lease.scan", 0),
    ] {
        let Value::Array(entries) = call(&mut con, &["COMMAND", "INFO", name]).unwrap() else {
            panic!("COMMAND INFO {name}");
        };
        let Value::Array(entry) = &entries[0] else {
            panic!("{entries:?}")
        };
        let positions = [first, first, first.min(1)].map(Value::Int);
        assert_eq!(entry[3..6], positions, "{name}");
    }
    let shards = call(&mut con, &["CLUSTER", "SHARDS"]).unwrap();
    let Value::Array(shards) = shards else {
        panic!("{shards:?}")
    };
    assert_eq!(shards.len(), 1);
    let slots = field(&shards[0], "slots");
    assert_eq!(slots, Value::Array(vec![Value::Int(0), Value::Int(16383)]));
    let Value::Array(nodes) = field(&shards[0], "nodes") else {
        panic!("{shards:?}")
    };
    assert_eq!(nodes.len(), 3);
    let port = i64::from(cluster.nodes[leader].port);
    assert_eq!(field(&nodes[0], "port"), Value::Int(port));
    assert_eq!(text(&field(&nodes[0], "role")), "master");

    // Two nodes of three gone: the survivor knows no leader once it has
    // stood for election, and answers CLUSTERDOWN. A node stands for
    // election only once it has compared its clock with a majority's
    // (docs/cluster.md, "Clocks"): with two peers dead it never could, so
    // the kills wait for the survivor's verdict.
    let judged = Instant::now() + FAILOVER;
    while !cluster.log(other).contains("it may lead") {
        assert!(
            Instant::now() < judged,
            "no clock verdict on node {}",
            other + 1
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let third = (0..3).find(|&i| i != leader && i != other).unwrap();
    cluster.kill9(leader);
    cluster.kill9(third);
    let deadline = Instant::now() + FAILOVER;
    loop {
        let mut con = cluster.connect(other);
        let answer = error(&mut con, &["LEASE.GET", "run-42"]);
        if answer == "CLUSTERDOWN The cluster is down" {
            break;
        }
        assert!(answer.starts_with("MOVED "), "{answer}");
        assert!(Instant::now() < deadline, "still {answer}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `redis` crate's async cluster client: it reads `CLUSTER SLOTS`,
/// routes every lease command by its first argument, and on failover
/// refreshes the slots and retries (`-TRYAGAIN`, `-CLUSTERDOWN`, `-MOVED`
/// and lost connections) by itself.
async fn redis_crate_cluster_client(mode: &str) {
    let mut cluster = cluster(mode);
    let leader = cluster.leader(Duration::from_secs(10));
    let urls: Vec<String> = (0..3).map(|i| cluster.url(i)).collect();
    let client = redis::cluster::ClusterClientBuilder::new(urls)
        .retries(30)
        .min_retry_wait(50)
        .max_retry_wait(500)
        .connection_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut con = client.get_async_connection().await.unwrap();
    let a = query(&mut con, &["LEASE.ACQUIRE", "run-a", "w-a", "TTL", "30"]).await;
    let a_id = text(&field(&a.unwrap(), "lease_id"));
    let a_token = a_id.rsplit(':').next().unwrap().to_owned();
    let beat = query(&mut con, &["LEASE.HEARTBEAT", &a_id, &a_token]).await;
    assert_eq!(beat.unwrap(), Value::Int(1));
    let released = query(&mut con, &["LEASE.RELEASE", &a_id, &a_token]).await;
    assert_eq!(released.unwrap(), Value::Int(1));
    let b = query(&mut con, &["LEASE.ACQUIRE", "run-b", "w-b", "TTL", "30"]).await;
    let b = b.unwrap();
    let (b_id, b_token) = (text(&field(&b, "lease_id")), token(&b));

    cluster.kill9(leader);
    let killed = Instant::now();
    let b_token_text = b_token.to_string();
    let beat = query(&mut con, &["LEASE.HEARTBEAT", &b_id, &b_token_text]).await;
    assert_eq!(beat.unwrap(), Value::Int(1), "{mode}");
    let c = query(&mut con, &["LEASE.ACQUIRE", "run-c", "w-c", "TTL", "30"]).await;
    let c = c.unwrap();
    assert!(token(&c) > b_token, "{c:?}");
    println!(
        "{mode}: the redis crate served again {:?} after the kill",
        killed.elapsed()
    );
    let shown = query(&mut con, &["LEASE.GET", "run-b"]).await.unwrap();
    assert_eq!(text(&field(&shown, "lease_id")), b_id);
}

async fn query(
    con: &mut redis::cluster_async::ClusterConnection,
    words: &[&str],
) -> redis::RedisResult<Value> {
    common::client::words(words).query_async::<Value>(con).await
}

#[tokio::test]
async fn the_redis_crate_cluster_client_follows_the_leader_with_moved() {
    redis_crate_cluster_client("moved").await;
}

#[tokio::test]
async fn the_redis_crate_cluster_client_follows_the_leader_with_proxy() {
    redis_crate_cluster_client("proxy").await;
}

/// Runs a client script against `cluster` across a leader kill: the
/// script prints `killing` when it has acquired, heartbeated and released
/// and holds a lease, then waits for a line on its input; the leader is
/// killed, the line sent, and the script goes on against the new leader
/// and prints `ok` at its end. Returns what it printed.
fn across_failover(cluster: &mut Cluster, command: &mut Command, program: &str) -> String {
    let leader = cluster.leader(Duration::from_secs(10));
    let spawned = (command.stdin(Stdio::piped()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = Killed(spawned.unwrap_or_else(|e| panic!("cannot run {program}: {e}")));
    let (lines, read) = mpsc::channel();
    let stdout = child.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let stderr = child.0.stderr.take().unwrap();
    let errors = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let mut printed = String::new();
    let mut killed = false;
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Ok(line) = read.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        printed.push_str(&line);
        printed.push('\n');
        if line == "killing" && !killed {
            cluster.kill9(leader);
            killed = true;
            let stdin = child.0.stdin.as_mut().unwrap();
            stdin.write_all(b"killed\n").unwrap();
            stdin.flush().unwrap();
        }
    }
    let status = child.0.wait().unwrap();
    let errors = errors.join().unwrap();
    assert!(
        status.success() && killed && printed.lines().last() == Some("ok"),
        "{program} failed ({status}):\n{printed}\n{errors}"
    );
    printed
}

fn redis_py_cluster(mode: &str) {
    let mut cluster = cluster(mode);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/redis_py_cluster.py"
    );
    let mut python = Command::new("python3");
    python.arg(script).arg(ports(&cluster));
    let printed = across_failover(&mut cluster, &mut python, "python3 with redis-py 5");
    println!("{mode}:\n{printed}");
}

#[test]
#[ignore = "needs python3 with redis-py 5 (pip install 'redis>=5,<6'); run with --include-ignored"]
fn redis_py_cluster_follows_the_leader_with_moved() {
    redis_py_cluster("moved");
}

#[test]
#[ignore = "needs python3 with redis-py 5 (pip install 'redis>=5,<6'); run with --include-ignored"]
fn redis_py_cluster_follows_the_leader_with_proxy() {
    redis_py_cluster("proxy");
}

fn ioredis_cluster(mode: &str) {
    let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients");
    assert!(
        clients.join("node_modules/ioredis").exists(),
        "run `npm ci --prefix tests/clients` first"
    );
    let mut cluster = cluster(mode);
    let mut node = Command::new("node");
    node.arg(clients.join("ioredis_cluster.js"))
        .arg(ports(&cluster));
    let printed = across_failover(&mut cluster, &mut node, "node");
    println!("{mode}:\n{printed}");
}

#[test]
#[ignore = "needs node and its clients (npm ci --prefix tests/clients); run with --include-ignored"]
fn ioredis_cluster_follows_the_leader_with_moved() {
    ioredis_cluster("moved");
}

#[test]
#[ignore = "needs node and its clients (npm ci --prefix tests/clients); run with --include-ignored"]
fn ioredis_cluster_follows_the_leader_with_proxy() {
    ioredis_cluster("proxy");
}

/// `redis-cli -c -p <port> words...`: its output, without the trailing
/// newline, and whether it exited 0.
fn redis_cli(port: u16, words: &[&str]) -> (bool, String) {
    let output = Command::new("redis-cli")
        .args(["-c", "-p", &port.to_string()])
        .args(words)
        .output()
        .expect("redis-cli is installed (apt-get install redis-tools)");
    let text = String::from_utf8_lossy(&output.stdout)
        .trim_end()
        .to_owned();
    (output.status.success(), text)
}

/// `redis-cli -c` through `port` until it answers something other than
/// an error of the election (TRYAGAIN, CLUSTERDOWN, a MOVED to the dead
/// leader it cannot connect to), within [`FAILOVER`].
fn redis_cli_until_served(port: u16, words: &[&str]) -> String {
    let deadline = Instant::now() + FAILOVER;
    loop {
        let (success, text) = redis_cli(port, words);
        let election = [
            "TRYAGAIN",
            "CLUSTERDOWN",
            "Could not connect",
            "Connection refused",
        ];
        if success && !election.iter().any(|error| text.contains(error)) && !text.is_empty() {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{words:?} still answers {text:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The value after `name` in redis-cli's raw output of a lease map (one
/// line per key and value).
fn cli_field(output: &str, name: &str) -> String {
    let mut lines = output.lines();
    lines.find(|line| *line == name);
    lines
        .next()
        .unwrap_or_else(|| panic!("no {name} in {output:?}"))
        .to_owned()
}

/// `redis-cli -c`, always through a follower: it follows the MOVED (or
/// the follower proxies), before and after the leader is killed.
fn redis_cli_cluster(mode: &str) {
    let mut cluster = cluster(mode);
    let leader = cluster.leader(Duration::from_secs(10));
    let port = cluster.nodes[follower(leader)].port;
    let a = redis_cli_until_served(port, &["LEASE.ACQUIRE", "run-a", "w-a", "TTL", "30"]);
    let (a_id, a_token) = (cli_field(&a, "lease_id"), cli_field(&a, "fencing_token"));
    assert_eq!(
        redis_cli(port, &["LEASE.HEARTBEAT", &a_id, &a_token]),
        (true, "1".into())
    );
    assert_eq!(
        redis_cli(port, &["LEASE.RELEASE", &a_id, &a_token]),
        (true, "1".into())
    );
    let b = redis_cli_until_served(port, &["LEASE.ACQUIRE", "run-b", "w-b", "TTL", "30"]);
    let (b_id, b_token) = (cli_field(&b, "lease_id"), cli_field(&b, "fencing_token"));

    cluster.kill9(leader);
    let beat = redis_cli_until_served(port, &["LEASE.HEARTBEAT", &b_id, &b_token]);
    assert_eq!(beat, "1");
    let c = redis_cli_until_served(port, &["LEASE.ACQUIRE", "run-c", "w-c", "TTL", "30"]);
    let c_token: i64 = cli_field(&c, "fencing_token").parse().unwrap();
    assert!(c_token > b_token.parse().unwrap(), "{c}");
}

#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn redis_cli_c_follows_the_leader_with_moved() {
    redis_cli_cluster("moved");
}

#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn redis_cli_c_follows_the_leader_with_proxy() {
    redis_cli_cluster("proxy");
}
