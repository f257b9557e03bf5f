//! leased driven by redis-py 5 over RESP2 and RESP3 (the checks are in
//! tests/clients/redis_py_check.py). Needs `python3` with `redis>=5`.

mod common;

use std::process::Command;

use common::Server;

#[test]
fn redis_py_speaks_to_leased_in_both_protocols() {
    let server = Server::start();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/redis_py_check.py"
    );
    let output = Command::new("python3")
        .arg(script)
        .arg(server.port.to_string())
        .output()
        .expect("python3 is installed");
    assert!(
        output.status.success(),
        "redis-py check failed (is redis-py 5 installed? pip install 'redis>=5,<6'):\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("ok"));
}
