//! leased driven by the Node.js clients ioredis and node-redis (the checks
//! are in tests/clients/node_check.js).
//!
//! The test needs `node` and the clients installed in tests/clients
//! (`npm ci --prefix tests/clients`), so it is marked ignored: plain `cargo
//! test` lists it as ignored with that reason, and `cargo test --
//! --include-ignored` (which `.ci/run` runs, after installing both) runs
//! it, failing if either is missing.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::binary::Server;

#[test]
#[ignore = "needs node and its clients (npm ci --prefix tests/clients); run with --include-ignored"]
fn ioredis_and_node_redis_speak_to_leased() {
    let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients");
    assert!(
        clients.join("node_modules/ioredis").exists(),
        "run `npm ci` in {} first",
        clients.display()
    );
    let server = Server::start();
    let output = Command::new("node")
        .arg(clients.join("node_check.js"))
        .arg(server.port.to_string())
        .output()
        .expect("node is installed");
    assert!(
        output.status.success(),
        "node check failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Lease events on a duplicated, pattern-subscribed connection and blocking
/// acquires on a connection of their own, with ioredis and node-redis (the
/// checks are in tests/clients/node_events.js, on a fresh server).
#[test]
#[ignore = "needs node and its clients (npm ci --prefix tests/clients); run with --include-ignored"]
fn ioredis_and_node_redis_see_lease_events_and_block() {
    let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients");
    assert!(
        clients.join("node_modules/ioredis").exists(),
        "run `npm ci` in {} first",
        clients.display()
    );
    let server = Server::start();
    let mut node = Command::new("node");
    node.arg(clients.join("node_events.js"))
        .arg(server.port.to_string());
    let (success, stdout, stderr) = run_bounded(&mut node);
    assert!(success, "node events check failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("ioredis events ok"), "{stdout}");
    assert!(stdout.contains("node-redis events ok"), "{stdout}");
}

/// A child process killed (and reaped) when dropped, if still running.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Runs `command` to its end: whether it succeeded, its stdout and stderr.
/// Fails the test if it runs longer than 60 s (a blocked acquire that is
/// never answered must fail the test, not hang it); polls every 10 ms, as
/// nothing wakes a thread when a child exits.
fn run_bounded(command: &mut Command) -> (bool, String, String) {
    let mut child = Killed(
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("node is installed"),
    );
    let stdout = read_all(child.0.stdout.take().unwrap());
    let stderr = read_all(child.0.stderr.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            drop(child);
            panic!(
                "still running after 60 s, killed:\n{}\n{}",
                stdout.join().unwrap(),
                stderr.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    (
        status.success(),
        stdout.join().unwrap(),
        stderr.join().unwrap(),
    )
}

/// Reads a pipe to its end on a thread of its own, so a full pipe never
/// stalls the child.
fn read_all(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    })
}
