//! leased driven by the Node.js clients ioredis and node-redis (the checks
//! are in tests/clients/node_check.js). Needs `node`, and `npm ci` run in
//! tests/clients (`.ci/run` does both).

mod common;

use std::path::Path;
use std::process::Command;

use common::Server;

#[test]
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
