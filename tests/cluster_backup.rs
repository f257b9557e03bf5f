//! Backups of a cluster: `BGSAVE` on a node builds its Raft snapshot, a
//! copy of `dir/raft/snapshot` is the backup, and a restore starts a
//! single node from it (`cluster-recover-as-single yes`) only above a
//! token floor the operator writes, so no token the old cluster issued
//! after the backup is issued again; a cluster is then formed from it
//! (`cluster-init-from-single yes`). Real processes and the `redis` crate.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::binary::{self, Server, free_port, run_command_to_exit};
use common::client::{Client, Lease, info_number, status, text};
use common::cluster::Cluster;
use redis::Value;

const BINARY: &str = env!("CARGO_BIN_EXE_leased");

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// `LEASE.ACQUIRE run worker TTL 600`.
fn acquire(client: &mut Client, run: &str, worker: &str) -> Lease {
    client
        .acquire(run, worker, None, Some(600.0))
        .expect("acquired")
}

/// The tokens of a run's `LEASE.HISTORY`, oldest first.
fn history(client: &mut Client, run: &str) -> Vec<i64> {
    let entries: Vec<HashMap<String, Value>> = redis::cmd("LEASE.HISTORY")
        .arg(run)
        .query(&mut client.con)
        .unwrap();
    let mut tokens: Vec<i64> = (entries.iter())
        .map(|entry| match &entry["fencing_token"] {
            Value::Int(token) => *token,
            other => panic!("a token: {other:?}"),
        })
        .collect();
    tokens.sort_unstable();
    tokens
}

/// Waits until no save is in progress and at least `saves` completed;
/// the node's `INFO persistence` then.
fn wait_saved(client: &mut Client, saves: u64) -> HashMap<String, String> {
    binary::wait_until(Duration::from_secs(20), || {
        let info = client.info("persistence");
        match (
            info_number(&info, "rdb_bgsave_in_progress"),
            info_number(&info, "rdb_saves"),
        ) {
            (0, done) if done >= saves => Ok(info),
            seen => Err(format!("in progress and saves {seen:?}: {info:?}")),
        }
    })
}

/// A single node on `dir` with `args`, run until it exits by itself.
fn single_to_exit(dir: &Path, args: &[&str]) -> binary::Exited {
    let mut command = Command::new(BINARY);
    command.args(["--port", "0", "--dir"]).arg(dir).args(args);
    run_command_to_exit(command)
}

/// A cluster of one node on `dir`, on fresh ports, with `args`.
fn cluster_of_one(dir: &Path, args: &[&str]) -> Command {
    let (port, bus) = (free_port(), free_port());
    let mut command = binary::cluster_node(dir, 1, port, &format!("1@127.0.0.1:{port}@{bus}"));
    command.args(args);
    command
}

#[test]
fn a_backup_taken_with_bgsave_restores_above_a_floor_and_never_reissues_a_token() {
    let mut cluster = Cluster::start(Path::new(BINARY), 3, &[]);
    let leader = cluster.leader(Duration::from_secs(10));
    let mut client = Client::new(cluster.connect(leader));
    let kept = acquire(&mut client, "kept", "wa");
    let lease_id = String::from_utf8(kept.lease_id.clone()).unwrap();
    let token = kept.fencing_token.to_string();
    client.run(&["LEASE.SETDATA", &lease_id, &token, "payload"]);
    let done = acquire(&mut client, "done", "wb");
    assert!(client.release(&done));
    let last_before = acquire(&mut client, "done", "wc").fencing_token;
    cluster.converged(Duration::from_secs(10));

    // The backup is taken on a follower: every node has its snapshot.
    let node = (leader + 1) % 3;
    let mut backup_client = Client::new(cluster.connect(node));
    let asked = unix_now();
    assert_eq!(
        backup_client.run(&["BGSAVE"]),
        status("Background saving started")
    );
    let info = wait_saved(&mut backup_client, 1);
    assert_eq!(info["rdb_last_bgsave_status"], "ok");
    assert_eq!(
        info_number(&info, "snapshot_last_fencing_token") as i64,
        last_before,
        "{info:?}"
    );
    assert!(info_number(&info, "snapshot_last_log_index") > 0);
    let lastsave = match backup_client.run(&["LASTSAVE"]) {
        Value::Int(at) => at as u64,
        other => panic!("LASTSAVE answered {other:?}"),
    };
    assert!(lastsave >= asked, "LASTSAVE {lastsave}, asked at {asked}");
    assert_eq!(info_number(&info, "rdb_last_save_time"), lastsave);
    let backup = tempfile::tempdir().unwrap();
    let copy = backup.path().join("snapshot");
    std::fs::copy(cluster.nodes[node].dir.join("raft/snapshot"), &copy).unwrap();
    let logged = cluster.log(node);
    assert!(
        logged.contains(&format!("a backup holding tokens up to {last_before})")),
        "{logged}"
    );

    // Tokens issued after the backup: in no file the restore sees.
    acquire(&mut client, "after", "wd");
    let last_issued = acquire(&mut client, "after2", "we").fencing_token;
    assert!(last_issued > last_before);
    for i in 0..3 {
        cluster.kill9(i);
    }

    // Restored into an empty dir: refused without a floor.
    let restore = tempfile::tempdir().unwrap();
    let dir = restore.path().join("data");
    std::fs::create_dir_all(dir.join("raft")).unwrap();
    std::fs::copy(&copy, dir.join("raft/snapshot")).unwrap();
    let recover = ["--cluster-recover-as-single", "yes"];
    let refused = single_to_exit(&dir, &recover);
    assert!(!refused.status.success());
    let ceiling = dir.join("token-ceiling");
    let told = format!("Write a floor into {}", ceiling.display());
    assert!(refused.output().contains(&told), "{}", refused.output());
    assert!(
        refused
            .output()
            .contains(&format!("fencing tokens up to {last_before}")),
        "{}",
        refused.output()
    );
    // A cluster node refuses a restored backup too.
    let as_node = run_command_to_exit(cluster_of_one(&dir, &[]));
    assert!(!as_node.status.success());
    assert!(
        as_node.output().contains("cluster-recover-as-single yes"),
        "{}",
        as_node.output()
    );

    // With a floor above every token the old cluster issued.
    let floor = last_issued + 1_000;
    std::fs::write(&ceiling, format!("{floor}\n")).unwrap();
    let mut single = Server::start_in(&dir, &recover).unwrap();
    let mut client = single.typed();
    let restored = client.get("kept", None).expect("the backup's lease");
    assert_eq!(restored.fencing_token, kept.fencing_token);
    assert_eq!(restored.worker_id, b"wa");
    let data: HashMap<String, Value> = redis::cmd("LEASE.GETDATA")
        .arg("kept")
        .query(&mut client.con)
        .unwrap();
    assert_eq!(text(&data["value"]), "payload");
    assert_eq!(
        history(&mut client, "done"),
        [done.fencing_token, last_before]
    );
    assert_eq!(client.get("after", None), None, "taken after the backup");
    assert_eq!(client.get("after2", None), None, "taken after the backup");
    let next = acquire(&mut client, "new", "wf").fencing_token;
    assert_eq!(next, floor + 1, "above the floor, so above {last_issued}");
    assert!(dir.join("raft.recovered").is_dir());
    single.stop();

    // A cluster again, from the single node.
    let init = ["--cluster-init-from-single", "yes"];
    let command = cluster_of_one(&dir, &init);
    let port: u16 = command
        .get_args()
        .nth(1)
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let first = Server::spawn_on_port(command, &dir, port).unwrap();
    binary::wait_until(Duration::from_secs(15), || {
        match first.cluster_info().unwrap_or_default().get("cluster_role") {
            Some(role) if role == "leader" => Ok(()),
            other => Err(format!("role {other:?}")),
        }
    });
    let mut client = first.typed();
    let lease = client.get("kept", None).expect("kept in the new cluster");
    assert_eq!(lease.fencing_token, kept.fencing_token);
    assert!(client.get("new", None).is_some());
    let after = acquire(&mut client, "newer", "wg").fencing_token;
    assert_eq!(after, next + 1);
}

#[test]
fn a_second_bgsave_while_one_is_wanted_or_building_is_refused_as_in_redis() {
    let cluster = Cluster::start(Path::new(BINARY), 3, &[]);
    let leader = cluster.leader(Duration::from_secs(10));
    let mut client = Client::new(cluster.connect(leader));
    acquire(&mut client, "run", "w");
    // One write, read in one go: the second arrives before the first's
    // build can have ended.
    let replies: Vec<redis::RedisResult<Value>> = redis::pipe()
        .cmd("BGSAVE")
        .cmd("BGSAVE")
        .ignore_errors()
        .query(&mut client.con)
        .unwrap();
    assert_eq!(
        replies[0].as_ref().unwrap(),
        &status("Background saving started")
    );
    let refused = replies[1].as_ref().unwrap_err();
    assert_eq!(
        common::client::error_line(refused),
        "ERR Background save already in progress"
    );
    let info = wait_saved(&mut client, 1);
    assert_eq!(info["rdb_last_bgsave_status"], "ok");
    // Once it is done, another may start.
    assert_eq!(client.run(&["BGSAVE"]), status("Background saving started"));
    wait_saved(&mut client, 2);
    assert_eq!(
        client.error(&["BGSAVE", "NOW"]),
        "ERR syntax error",
        "as Redis answers an unknown option"
    );
}

#[test]
fn a_single_node_refuses_bgsave_and_its_lastsave_is_its_start() {
    let server = Server::start();
    let mut client = server.typed();
    let refused = client.error(&["BGSAVE"]);
    assert!(
        refused.starts_with("ERR BGSAVE is for cluster mode"),
        "{refused}"
    );
    let info = client.info("persistence");
    let lastsave = match client.run(&["LASTSAVE"]) {
        Value::Int(at) => at as u64,
        other => panic!("LASTSAVE answered {other:?}"),
    };
    assert_eq!(lastsave, info_number(&info, "rdb_last_save_time"));
    assert!(lastsave <= unix_now() && lastsave + 60 > unix_now());
    assert_eq!(info_number(&info, "rdb_saves"), 0);
    assert!(!info.contains_key("snapshot_last_fencing_token"));
    // What redis-cli --rdb sends: accepted, and SYNC refused here without
    // closing the connection.
    assert_eq!(client.run(&["REPLCONF", "capa", "eof"]), Value::Okay);
    assert_eq!(client.run(&["REPLCONF", "rdb-only", "1"]), Value::Okay);
    assert_eq!(
        client.error(&["REPLCONF", "rdb-filter-only", "functions"]),
        "ERR Unrecognized REPLCONF option: rdb-filter-only"
    );
    let refused = client.error(&["SYNC"]);
    assert!(
        refused.starts_with("ERR SYNC is for cluster mode"),
        "{refused}"
    );
    client.ping();
}

/// A node's answer to `SYNC` on a raw connection, read to its end.
fn raw_sync(port: u16) -> Vec<u8> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(b"*1\r\n$4\r\nSYNC\r\n").unwrap();
    let mut answer = Vec::new();
    // To the end: the node closes the connection after the file.
    stream.read_to_end(&mut answer).unwrap();
    answer
}

#[test]
fn sync_sends_the_nodes_snapshot_file_whole_then_closes() {
    let cluster = Cluster::start(Path::new(BINARY), 3, &[]);
    let leader = cluster.leader(Duration::from_secs(10));
    let node = (leader + 2) % 3;
    let port = cluster.nodes[node].port;
    let before = String::from_utf8(raw_sync(port)).unwrap();
    assert!(
        before.starts_with("-ERR this node has no snapshot yet"),
        "{before}"
    );
    let mut client = Client::new(cluster.connect(leader));
    acquire(&mut client, "run", "w");
    cluster.converged(Duration::from_secs(10));
    let mut client = Client::new(cluster.connect(node));
    assert_eq!(client.run(&["BGSAVE"]), status("Background saving started"));
    wait_saved(&mut client, 1);
    let file = std::fs::read(cluster.nodes[node].dir.join("raft/snapshot")).unwrap();
    let mut expected = format!("${}\r\n", file.len()).into_bytes();
    expected.extend_from_slice(&file);
    assert_eq!(raw_sync(port), expected);
}

#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn redis_cli_rdb_pulls_a_backup_that_restores() {
    let cluster = Cluster::start(Path::new(BINARY), 3, &[]);
    let leader = cluster.leader(Duration::from_secs(10));
    let mut client = Client::new(cluster.connect(leader));
    let kept = acquire(&mut client, "kept", "wa");
    cluster.converged(Duration::from_secs(10));
    let mut client = Client::new(cluster.connect(leader));
    assert_eq!(client.run(&["BGSAVE"]), status("Background saving started"));
    let info = wait_saved(&mut client, 1);
    let backup = tempfile::tempdir().unwrap();
    let pulled = backup.path().join("snapshot");
    let output = Command::new("redis-cli")
        .args(["-p", &cluster.nodes[leader].port.to_string(), "--rdb"])
        .arg(&pulled)
        .output()
        .expect("redis-cli is installed (apt-get install redis-tools)");
    let said = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{said}");
    assert!(said.contains("Transfer finished with success"), "{said}");
    let file = std::fs::read(cluster.nodes[leader].dir.join("raft/snapshot")).unwrap();
    assert_eq!(std::fs::read(&pulled).unwrap(), file);

    // It restores as a copied file does.
    let restore = tempfile::tempdir().unwrap();
    let dir = restore.path().join("data");
    std::fs::create_dir_all(dir.join("raft")).unwrap();
    std::fs::copy(&pulled, dir.join("raft/snapshot")).unwrap();
    let floor = info_number(&info, "snapshot_last_fencing_token") + 1_000;
    std::fs::write(dir.join("token-ceiling"), format!("{floor}\n")).unwrap();
    let single = Server::start_in(&dir, &["--cluster-recover-as-single", "yes"]).unwrap();
    let mut client = single.typed();
    let lease = client.get("kept", None).expect("the pulled backup's lease");
    assert_eq!(lease.fencing_token, kept.fencing_token);
    let next = acquire(&mut client, "new", "wb").fencing_token;
    assert_eq!(next as u64, floor + 1);
}
