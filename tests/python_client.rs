//! leased driven by redis-py 5 over RESP2 and RESP3 (the checks are in
//! tests/clients/redis_py_check.py).
//!
//! Every test here needs `python3` with redis-py 5 (`pip install
//! 'redis>=5,<6'`), so each is marked ignored: plain `cargo test` lists it
//! as ignored with that reason, and `cargo test -- --include-ignored`
//! (which `.ci/run` runs) runs it, failing if either is missing.

mod common;

use std::path::Path;
use std::process::Command;

use common::binary::Server;
use common::child::run_bounded;

#[test]
#[ignore = "needs python3 with redis-py 5 (pip install 'redis>=5,<6'); run with --include-ignored"]
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

/// redis-py with `password=`: it sends `AUTH` (RESP2) or `HELLO 3 AUTH`
/// (RESP3) on connect; a wrong or missing password is refused.
#[test]
#[ignore = "needs python3 with redis-py 5 (pip install 'redis>=5,<6'); run with --include-ignored"]
fn redis_py_authenticates_with_requirepass() {
    let server = Server::start_with(&["--requirepass", "py-secret"]);
    let script = r#"
import sys, redis
port = int(sys.argv[1])
for protocol in (2, 3):
    r = redis.Redis(port=port, password="py-secret", protocol=protocol)
    assert r.ping() is True
    lease = r.execute_command("LEASE.ACQUIRE", f"run-{protocol}", "w", 0)
    assert lease is not None, lease
    for password in ("wrong", None):
        try:
            redis.Redis(port=port, password=password, protocol=protocol).ping()
            raise SystemExit(f"password {password!r} was accepted")
        except redis.exceptions.AuthenticationError as error:
            print(protocol, type(error).__name__, error)
print("ok")
"#;
    let output = Command::new("python3")
        .args(["-c", script, &server.port.to_string()])
        .output()
        .expect("python3 is installed");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("ok"),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Lease events, blocking acquires, CLIENT UNBLOCK and subscribed mode,
/// through redis-py in `protocol` (the checks are in
/// tests/clients/redis_py_events.py, on a fresh server: it expects tokens
/// from 1).
fn redis_py_sees_events_and_blocks(protocol: &str) {
    let (success, stdout, stderr) = run_script("redis_py_events.py", &[protocol]);
    assert!(
        success && stdout.contains(&format!("RESP{protocol} ok")),
        "redis-py events check failed:\n{stdout}\n{stderr}"
    );
    for part in [
        "events ok",
        "blocking ok",
        "unblock ok",
        "subscribed mode ok",
    ] {
        assert!(stdout.contains(part), "{stdout}");
    }
}

#[test]
#[ignore = "needs python3 with redis-py 5 (pip install 'redis>=5,<6'); run with --include-ignored"]
fn redis_py_sees_lease_events_and_blocks_in_resp2() {
    redis_py_sees_events_and_blocks("2");
}

#[test]
#[ignore = "needs python3 with redis-py 5 (pip install 'redis>=5,<6'); run with --include-ignored"]
fn redis_py_sees_lease_events_and_blocks_in_resp3() {
    redis_py_sees_events_and_blocks("3");
}

/// Runs tests/clients/SCRIPT with python3 against a fresh server (its
/// port, then `args`): whether it passed, and what it printed.
fn run_script(script: &str, args: &[&str]) -> (bool, String, String) {
    let server = Server::start();
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(script);
    let mut python = Command::new("python3");
    python.arg(script).arg(server.port.to_string()).args(args);
    run_bounded(&mut python, "python3")
}

/// redis-py's default `pipeline()`, a MULTI ... EXEC transaction, in
/// RESP2 and RESP3 (the checks are in
/// tests/clients/redis_py_transactions.py).
#[test]
#[ignore = "needs python3 with redis-py 5 (pip install 'redis>=5,<6'); run with --include-ignored"]
fn redis_py_pipelines_are_transactions() {
    let (success, stdout, stderr) = run_script("redis_py_transactions.py", &[]);
    let both = stdout.contains("RESP2 transactions ok") && stdout.contains("RESP3 transactions ok");
    assert!(
        success && both,
        "redis-py transactions check failed:\n{stdout}\n{stderr}"
    );
}

/// The keyspace view through redis-py (tests/clients/redis_py_keyspace.py):
/// `scan_iter` over 10,000 runs returns each once, `hgetall` decodes, and
/// every write command is refused with the connection alive, in RESP2 and
/// RESP3.
#[test]
#[ignore = "needs python3 with redis-py 5 (pip install 'redis>=5,<6'); run with --include-ignored"]
fn redis_py_sees_the_runs_as_read_only_hashes() {
    let (success, stdout, stderr) = run_script("redis_py_keyspace.py", &[]);
    assert!(
        success && stdout.contains("RESP2 ok") && stdout.contains("RESP3 ok"),
        "redis-py keyspace check failed:\n{stdout}\n{stderr}"
    );
}
