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
