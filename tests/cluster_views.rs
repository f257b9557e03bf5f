//! `ROLE` and `CLUSTER` through the `redis` crate, and the cluster
//! directives at start-up.
//!
//! The server does not start a cluster node yet, so every server here is a
//! single node: a master without replicas, which refuses `CLUSTER` as Redis
//! does without cluster support. The cluster's own views are rendered from
//! hand-made statuses in the unit tests of `src/cluster/views`.

mod common;

use common::binary::{Server, free_port, run_to_exit};
use common::client::{bulk_value, error, info_map, pairs, run, text};
use redis::Value;

const DISABLED: &str = "ERR This instance has cluster support disabled";

#[test]
fn a_single_node_is_a_master_without_replicas() {
    let server = Server::start();
    let expected = Value::Array(vec![
        bulk_value("master"),
        Value::Int(0),
        Value::Array(vec![]),
    ]);
    assert_eq!(run(&mut server.connect(), &["ROLE"]), expected);
    assert_eq!(run(&mut server.connect_resp3(), &["role"]), expected);
    let mut con = server.connect();
    assert_eq!(
        error(&mut con, &["ROLE", "x"]),
        "ERR wrong number of arguments for 'role' command"
    );
    // INFO as before.
    let replication = info_map(&run(&mut con, &["INFO", "replication"]));
    assert_eq!(replication["role"], "master");
    assert_eq!(replication["connected_slaves"], "0");
    assert_eq!(replication["master_repl_offset"], "0");
    assert!(!replication.contains_key("cluster_term"), "{replication:?}");
    let cluster = info_map(&run(&mut con, &["INFO", "cluster"]));
    assert_eq!(cluster["cluster_enabled"], "0");
}

#[test]
fn a_single_node_refuses_every_cluster_command() {
    let server = Server::start();
    let mut con = server.connect();
    for sub in ["INFO", "nodes", "slots", "MyId", "HELP"] {
        assert_eq!(error(&mut con, &["CLUSTER", sub]), DISABLED, "{sub}");
    }
    assert_eq!(
        error(&mut con, &["CLUSTER", "INFO", "extra"]),
        "ERR wrong number of arguments for 'cluster|info' command"
    );
    assert_eq!(
        error(&mut con, &["CLUSTER"]),
        "ERR wrong number of arguments for 'cluster' command"
    );
    // The connection goes on.
    assert_eq!(run(&mut con, &["PING"]), Value::SimpleString("PONG".into()));
}

#[test]
fn the_command_table_describes_role_and_cluster() {
    let server = Server::start();
    let mut con = server.connect();
    let Value::Array(infos) = run(&mut con, &["COMMAND", "INFO", "role", "cluster"]) else {
        panic!("COMMAND INFO is an array")
    };
    let Value::Array(role) = &infos[0] else {
        panic!("role is known: {infos:?}")
    };
    assert_eq!(text(&role[0]), "role");
    assert_eq!(role[1], Value::Int(1));
    let Value::Array(cluster) = &infos[1] else {
        panic!("cluster is known: {infos:?}")
    };
    assert_eq!(cluster[1], Value::Int(-2));
    let docs = pairs(run(&mut con, &["COMMAND", "DOCS", "cluster"]));
    let rendered = format!("{docs:?}");
    for sub in [
        "cluster|info",
        "cluster|nodes",
        "cluster|myid",
        "cluster|help",
    ] {
        assert!(rendered.contains(sub), "{sub} not in {rendered}");
    }
}

/// `--cluster-enabled yes` for node 1 of three on loopback, this one on
/// `port`. Its bus port is given (3), since a free port + 10000 may pass
/// 65535; nothing listens on the bus yet.
fn membership(port: u16) -> Vec<String> {
    let nodes = format!("1@127.0.0.1:{port}@3 2@127.0.0.1:1 3@127.0.0.1:2");
    ["--port", &port.to_string(), "--cluster-enabled", "yes"]
        .into_iter()
        .map(str::to_owned)
        .chain(["--cluster-node-id".into(), "1".into()])
        .chain(["--cluster-nodes".into(), nodes])
        .collect()
}

#[test]
fn cluster_directives_are_read_at_start_up_and_shown() {
    let port = free_port();
    let args = membership(port);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start_with(&args);
    let mut con = server.connect();
    let shown = pairs(run(&mut con, &["CONFIG", "GET", "cluster-n*"]));
    assert_eq!(
        shown,
        [
            (bulk_value("cluster-node-id"), bulk_value("1")),
            (
                bulk_value("cluster-nodes"),
                bulk_value(&format!("1@127.0.0.1:{port}@3 2@127.0.0.1:1 3@127.0.0.1:2"))
            ),
        ]
    );
    assert_eq!(
        error(&mut con, &["CONFIG", "SET", "cluster-secret", "x"]),
        "ERR CONFIG SET failed (possibly related to argument 'cluster-secret') - can't set \
         immutable config"
    );
}

#[test]
fn a_bad_membership_stops_the_start_with_its_reason() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("data");
    let port = free_port();
    let mut args = membership(port);
    args.extend(["--dir".into(), dir.to_str().unwrap().into()]);
    let remote = format!("1@10.0.0.1:{port}@3 2@10.0.0.2:6479");
    for (change, expected) in [
        (
            ["--cluster-node-id", "4"],
            "cluster-node-id 4 is not in cluster-nodes (its ids: 1, 2, 3)",
        ),
        (
            ["--cluster-nodes", remote.as_str()],
            "cluster-nodes names 10.0.0.1, which is not a loopback address: set \
             cluster-secret",
        ),
    ] {
        let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
        all.extend(change);
        let exited = run_to_exit(&all);
        let output = exited.output();
        assert!(!exited.status.success(), "{change:?}: {output}");
        assert!(output.contains(expected), "{change:?}: {output}");
    }
}
