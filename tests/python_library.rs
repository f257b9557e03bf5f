//! The Python client library (clients/python, the `leased` package) tested
//! with its own unittest suite (clients/python/tests) against the real
//! server: a shared server started here (LEASED_PORT), and the binary's
//! path (LEASED_BIN) for the tests that start and kill servers of their
//! own.
//!
//! It needs `python3` with redis-py 5 and the package installed (`pip
//! install ./clients/python`), so it is marked ignored: plain `cargo test`
//! lists it as ignored with that reason, and `cargo test --
//! --include-ignored` (which `.ci/run` runs, after installing the package)
//! runs it, failing if either is missing.

mod common;

use std::process::Command;

use common::binary::{BINARY, Server};
use common::child::run_bounded;

#[test]
#[ignore = "needs python3 with redis-py 5 and the leased package (pip install 'redis>=5,<6' ./clients/python); run with --include-ignored"]
fn the_python_library_passes_its_tests_against_the_server() {
    let server = Server::start();
    let tests = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/python/tests");
    let mut python = Command::new("python3");
    python
        .args(["-m", "unittest", "discover", "-v", "-s", tests, "-t", tests])
        .env("LEASED_PORT", server.port.to_string())
        .env("LEASED_BIN", BINARY);
    let (success, stdout, stderr) = run_bounded(&mut python, "python3");
    // The transcripts (the paused worker's, the lost leases'), for
    // `cargo test -- --nocapture`.
    println!("{stdout}\n{stderr}");
    assert!(
        success,
        "the Python library's tests failed (is it installed? pip install ./clients/python):\n{stdout}\n{stderr}"
    );
    assert!(stderr.contains("\nOK"), "{stderr}");
    assert!(
        !stderr.contains("skipped"),
        "no test may be skipped here:\n{stderr}"
    );
}
