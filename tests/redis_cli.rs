//! leased driven by `redis-cli`, as a user at a terminal would.
//!
//! Every test here needs `redis-cli` (Debian: `apt-get install
//! redis-tools`), so each is marked ignored: plain `cargo test` lists it as
//! ignored with that reason, and `cargo test -- --include-ignored` (which
//! `.ci/run` runs) runs it, failing if `redis-cli` is missing.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::binary::Server;

fn redis_cli(server: &Server, args: &[&str]) -> Output {
    Command::new("redis-cli")
        .args(["-p", &server.port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli is installed (apt-get install redis-tools)")
}

fn stdout(output: &Output) -> String {
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn one_shot_commands() {
    let server = Server::start();
    let out = stdout(&redis_cli(
        &server,
        &["LEASE.ACQUIRE", "run-1", "worker-a", "0"],
    ));
    assert_eq!(
        out,
        "run_id\nrun-1\nworker_id\nworker-a\nlease_id\nrun-1:worker-a:1\nfencing_token\n1\nexpires_at\n10\n"
    );
    let out = stdout(&redis_cli(
        &server,
        &["--no-raw", "LEASE.ACQUIRE", "run-1", "worker-b", "1"],
    ));
    assert_eq!(out, "(nil)\n");
    let out = stdout(&redis_cli(
        &server,
        &["--no-raw", "LEASE.HEARTBEAT", "run-1:worker-a:1", "1", "5"],
    ));
    assert_eq!(out, "(integer) 1\n");
    let out = stdout(&redis_cli(
        &server,
        &["--no-raw", "LEASE.HEARTBEAT", "run-1:worker-a:1", "x"],
    ));
    assert_eq!(out, "(error) ERR value is not an integer or out of range\n");
    // RESP3 (-3): a map, with expires_at as a double.
    let out = stdout(&redis_cli(
        &server,
        &["-3", "--no-raw", "LEASE.GET", "run-1", "6"],
    ));
    assert_eq!(
        out,
        "1# \"run_id\" => \"run-1\"\n\
         2# \"worker_id\" => \"worker-a\"\n\
         3# \"lease_id\" => \"run-1:worker-a:1\"\n\
         4# \"fencing_token\" => (integer) 1\n\
         5# \"expires_at\" => (double) 15\n\
         6# \"expired\" => (integer) 0\n"
    );
    let out = stdout(&redis_cli(&server, &["DBSIZE"]));
    assert_eq!(out, "1\n");
}

/// An interactive session in a pseudo-terminal: redis-cli fetches
/// `COMMAND DOCS` at start (and aborts if the reply is malformed), then
/// `help` shows what the server documented.
#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn interactive_session_reads_command_docs() {
    let server = Server::start();
    let script = format!("redis-cli -p {}", server.port);
    let mut child = Command::new("script")
        .args(["-q", "-c", &script, "/dev/null"])
        // A dumb terminal: no cursor queries, so plain input works.
        .env("TERM", "dumb")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script (util-linux) is installed");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"LEASE.ACQUIRE run-9 worker-z 0\nhelp LEASE.HEARTBEAT\nquit\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&output.stdout).replace('\r', "");
    assert!(output.status.success(), "{out}");
    assert!(out.contains("6) \"run-9:worker-z:1\""), "{out}");
    assert!(out.contains("LEASE.HEARTBEAT"), "{out}");
    assert!(out.contains("lease_id token [now]"), "{out}");
    assert!(
        out.contains("Extend a current, unexpired lease by its TTL"),
        "{out}"
    );
    assert!(!out.contains("Error"), "{out}");
}

#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn shutdown_from_redis_cli_stops_the_server_cleanly() {
    let mut server = Server::start();
    let _ = redis_cli(&server, &["SHUTDOWN"]);
    let status = server.wait(std::time::Duration::from_secs(10));
    assert!(status.success(), "{status}: {}", server.log());
}
