//! leased driven by the Node.js clients ioredis and node-redis (the checks
//! are in tests/clients/node_check.js).
//!
//! The test needs `node` and the clients installed in tests/clients
//! (`npm ci --prefix tests/clients`), so it is marked ignored: plain `cargo
//! test` lists it as ignored with that reason, and `cargo test --
//! --include-ignored` (which `.ci/run` runs, after installing both) runs
//! it, failing if either is missing.

mod common;

use std::path::Path;
use std::process::Command;

use common::binary::Server;
use common::child::run_bounded;

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
    let (success, stdout, stderr) = run_bounded(&mut node, "node");
    assert!(success, "node events check failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("ioredis events ok"), "{stdout}");
    assert!(stdout.contains("node-redis events ok"), "{stdout}");
}
