//! leased driven by the Node.js clients ioredis and node-redis (the checks
//! are in tests/clients/node_check.js).
//!
//! The test needs `node` and the clients installed in tests/clients
//! (`npm ci --prefix tests/clients`), so it is marked ignored: plain `cargo
//! test` lists it as ignored with that reason, and `cargo test --
//! --include-ignored` (which `.ci/run` runs, after installing both) runs
//! it, failing if either is missing.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::binary::Server;
use common::child::run_bounded;

/// tests/clients, with the Node clients installed in it.
fn node_clients() -> PathBuf {
    let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients");
    assert!(
        clients.join("node_modules/ioredis").exists(),
        "run `npm ci` in {} first",
        clients.display()
    );
    clients
}

/// Runs tests/clients/SCRIPT against a fresh server: whether it passed,
/// and what it printed.
fn run_script(script: &str) -> (bool, String, String) {
    let clients = node_clients();
    let server = Server::start();
    let mut node = Command::new("node");
    node.arg(clients.join(script)).arg(server.port.to_string());
    run_bounded(&mut node, "node")
}

#[test]
#[ignore = "needs node and its clients (npm ci --prefix tests/clients); run with --include-ignored"]
fn ioredis_and_node_redis_speak_to_leased() {
    let (success, stdout, stderr) = run_script("node_check.js");
    assert!(success, "node check failed:\n{stdout}\n{stderr}");
}

/// Lease events on a duplicated, pattern-subscribed connection and blocking
/// acquires on a connection of their own, with ioredis and node-redis (the
/// checks are in tests/clients/node_events.js, on a fresh server).
#[test]
#[ignore = "needs node and its clients (npm ci --prefix tests/clients); run with --include-ignored"]
fn ioredis_and_node_redis_see_lease_events_and_block() {
    let (success, stdout, stderr) = run_script("node_events.js");
    assert!(success, "node events check failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("ioredis events ok"), "{stdout}");
    assert!(stdout.contains("node-redis events ok"), "{stdout}");
}

/// ioredis' and node-redis' `multi()`, MULTI ... EXEC transactions (the
/// checks are in tests/clients/node_transactions.js, on a fresh server).
#[test]
#[ignore = "needs node and its clients (npm ci --prefix tests/clients); run with --include-ignored"]
fn ioredis_and_node_redis_multi_are_transactions() {
    let (success, stdout, stderr) = run_script("node_transactions.js");
    assert!(
        success,
        "node transactions check failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("ioredis transactions ok"), "{stdout}");
    assert!(stdout.contains("node-redis transactions ok"), "{stdout}");
}
