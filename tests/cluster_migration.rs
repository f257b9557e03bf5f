//! A single node's data directory made a cluster's first node
//! (`cluster-init-from-single yes`), and back: one surviving cluster
//! node's directory started as a single node (`cluster-recover-as-single
//! yes`). Real processes; leases, their data and history, and tokens kept.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::binary::{self, Server, free_port, run_command_to_exit};
use common::cluster::Cluster;
use redis::Value;

const BINARY: &str = env!("CARGO_BIN_EXE_leased");

fn query(con: &mut redis::Connection, words: &[&str]) -> redis::RedisResult<Value> {
    common::client::words(words).query(con)
}

/// A lease's (or a data map's) fields; `None` for null.
fn fields(con: &mut redis::Connection, words: &[&str]) -> Option<HashMap<String, Value>> {
    redis::cmd(words[0])
        .arg(&words[1..])
        .query(con)
        .unwrap_or_else(|e| panic!("{words:?}: {e}"))
}

fn int(value: &Value) -> i64 {
    match value {
        Value::Int(n) => *n,
        Value::BulkString(b) => String::from_utf8_lossy(b).parse().unwrap(),
        other => panic!("not a number: {other:?}"),
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("not a string: {other:?}"),
    }
}

/// `LEASE.ACQUIRE run worker TTL 600`: its token and lease id.
fn acquire(con: &mut redis::Connection, run: &str, worker: &str) -> (i64, String) {
    let lease = fields(con, &["LEASE.ACQUIRE", run, worker, "TTL", "600"]).expect("acquired");
    (int(&lease["fencing_token"]), text(&lease["lease_id"]))
}

/// The stored token ceiling of a data directory.
fn ceiling(dir: &Path) -> i64 {
    let line = std::fs::read_to_string(dir.join("token-ceiling")).unwrap();
    line.split(' ').nth(2).unwrap().trim().parse().unwrap()
}

/// The tokens of a run's `LEASE.HISTORY`, oldest first.
fn history(con: &mut redis::Connection, run: &str) -> Vec<i64> {
    let entries: Vec<HashMap<String, Value>> =
        redis::cmd("LEASE.HISTORY").arg(run).query(con).unwrap();
    let mut tokens: Vec<i64> = (entries.iter())
        .map(|entry| int(&entry["fencing_token"]))
        .collect();
    tokens.sort_unstable();
    tokens
}

/// Node `id` of a cluster on `dir`, its client port `port` and bus
/// `bus`, with `nodes` as `cluster-nodes` and `extra` arguments.
fn cluster_node(dir: &Path, id: u64, port: u16, nodes: &str, extra: &[&str]) -> Command {
    let mut command = binary::cluster_node(dir, id, port, nodes);
    command.args(extra);
    command
}

/// Waits until node `con` reaches answers `CLUSTER INFO` as a leader.
fn wait_leader(server: &Server) {
    binary::wait_until(Duration::from_secs(15), || {
        let info = server.cluster_info().unwrap_or_default();
        match info.get("cluster_role").map(String::as_str) {
            Some("leader") => Ok(()),
            other => Err(format!("role {other:?}")),
        }
    });
}

#[test]
fn a_single_nodes_dir_becomes_a_clusters_first_node_with_its_leases_and_tokens() {
    let (_temp, dir) = binary::data_dir();
    let mut single = Server::start_in(&dir, &[]).unwrap();
    let mut con = single.connect();
    let (kept_token, kept_id) = acquire(&mut con, "kept", "wa");
    query(
        &mut con,
        &[
            "LEASE.SETDATA",
            &kept_id,
            &kept_token.to_string(),
            "payload",
        ],
    )
    .unwrap();
    let (done_token, done_id) = acquire(&mut con, "done", "wb");
    query(
        &mut con,
        &["LEASE.RELEASE", &done_id, &done_token.to_string()],
    )
    .unwrap();
    let (last, _) = acquire(&mut con, "done", "wc");
    // A crash: the ceiling stays above the last token issued (tokens are
    // reserved in blocks), and the cluster must go on above it.
    single.kill9();
    let ceiling = ceiling(&dir);
    assert!(ceiling >= last, "ceiling {ceiling}, last token {last}");

    let (p1, b1) = (free_port(), free_port());
    let me = format!("1@127.0.0.1:{p1}@{b1}");
    // Without the directive the node refuses, rather than ignore them.
    let refused = run_command_to_exit(cluster_node(&dir, 1, p1, &me, &[]));
    assert!(!refused.status.success());
    assert!(
        refused.output().contains("cluster-init-from-single yes"),
        "{}",
        refused.output()
    );

    let init = ["--cluster-init-from-single", "yes"];
    let command = cluster_node(&dir, 1, p1, &me, &init);
    let first = Server::spawn_on_port(command, &dir, p1).unwrap();
    wait_leader(&first);
    let mut con = first.connect();
    let lease = fields(&mut con, &["LEASE.GET", "kept"]).expect("kept");
    assert_eq!(int(&lease["fencing_token"]), kept_token);
    assert_eq!(text(&lease["worker_id"]), "wa");
    let data = fields(&mut con, &["LEASE.GETDATA", "kept"]).expect("data kept");
    assert_eq!(text(&data["value"]), "payload");
    assert_eq!(history(&mut con, "done"), [done_token, last]);
    let (next, _) = acquire(&mut con, "new", "wd");
    assert_eq!(
        next,
        ceiling + 1,
        "the first cluster token follows the ceiling"
    );

    // Two nodes join; once the first is gone, they serve what it held.
    let mut joined = Vec::new();
    for id in [2, 3] {
        let (port, bus) = (free_port(), free_port());
        let nodes = format!("{me} {id}@127.0.0.1:{port}@{bus}");
        let node_dir = dir.with_file_name(format!("n{id}"));
        let command = cluster_node(&node_dir, id, port, &nodes, &["--cluster-join", "yes"]);
        joined.push(Server::spawn_on_port(command, &node_dir, port).unwrap());
        let address = format!("127.0.0.1:{port}@{bus}");
        let added = query(&mut con, &["CLUSTER", "ADDNODE", &id.to_string(), &address]);
        assert_eq!(added, Ok(Value::Okay), "ADDNODE {id}");
    }
    drop(first);
    let mut leading = None;
    binary::wait_until(Duration::from_secs(15), || {
        for server in &joined {
            if server
                .cluster_info()
                .unwrap_or_default()
                .get("cluster_role")
                .map(String::as_str)
                == Some("leader")
            {
                leading = Some(server.port);
                return Ok(());
            }
        }
        Err("no leader among the joined nodes".to_string())
    });
    let server = joined.iter().find(|s| Some(s.port) == leading).unwrap();
    let mut con = server.connect();
    let lease = fields(&mut con, &["LEASE.GET", "kept"]).expect("kept on the new nodes");
    assert_eq!(int(&lease["fencing_token"]), kept_token);
    let (after, _) = acquire(&mut con, "newer", "we");
    assert_eq!(after, next + 1);
}

#[test]
fn one_surviving_node_restarts_as_a_single_node_with_every_lease_and_token() {
    let mut cluster = Cluster::start(Path::new(BINARY), 3, &[]);
    let leader = cluster.leader(Duration::from_secs(10));
    let mut con = cluster.connect(leader);
    let (kept, _) = acquire(&mut con, "kept", "wa");
    let (released, id) = acquire(&mut con, "done", "wb");
    query(&mut con, &["LEASE.RELEASE", &id, &released.to_string()]).unwrap();
    let (last, _) = acquire(&mut con, "other", "wc");
    cluster.converged(Duration::from_secs(10));
    for i in 0..3 {
        cluster.kill9(i);
    }
    // Node 2 survives alone.
    let dir = cluster.nodes[1].dir.clone();
    let mut command = Command::new(BINARY);
    command.args(["--port", "0", "--dir"]).arg(&dir);
    let refused = run_command_to_exit(command);
    assert!(!refused.status.success());
    assert!(
        refused.output().contains("cluster-recover-as-single yes"),
        "{}",
        refused.output()
    );

    let single = Server::start_in(&dir, &["--cluster-recover-as-single", "yes"]).unwrap();
    assert!(dir.join("raft.recovered").is_dir());
    assert!(!dir.join("raft").exists());
    let mut con = single.connect();
    let lease = fields(&mut con, &["LEASE.GET", "kept"]).expect("kept");
    assert_eq!(int(&lease["fencing_token"]), kept);
    assert_eq!(history(&mut con, "done"), [released]);
    let (next, _) = acquire(&mut con, "new", "wd");
    assert!(next > last, "token {next} after {last}");
    drop(single);

    // An ordinary start from now on (the directive is no longer needed),
    // tokens still above.
    let single = Server::start_in(&dir, &[]).unwrap();
    let mut con = single.connect();
    assert!(fields(&mut con, &["LEASE.GET", "kept"]).is_some());
    let (again, _) = acquire(&mut con, "again", "we");
    assert!(again > next, "token {again} after {next}");
}
