//! The limits on what one client may send, hold or leave unread: each is
//! hit through a real socket or the `redis` crate, and another client is
//! served afterwards.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Server, error, read_to_close, resp, run, show};
use redis::Value;

/// A fresh client's PING, to show the server still serves others.
fn assert_serves_others(server: &Server) {
    let mut con = server.connect();
    assert_eq!(run(&mut con, &["PING"]), Value::SimpleString("PONG".into()));
}

#[test]
fn proto_max_bulk_len_refuses_a_longer_argument_at_its_header() {
    let server = Server::start_with(&["--proto-max-bulk-len", "1mb"]);
    let mut con = server.connect();
    let longest = vec![b'x'; 1 << 20];
    let echoed: Vec<u8> = redis::cmd("ECHO").arg(&longest).query(&mut con).unwrap();
    assert!(echoed == longest, "the 1 MiB echo differs");

    let mut s = server.raw();
    s.write_all(b"*2\r\n$4\r\nECHO\r\n$1048577\r\n").unwrap();
    assert_eq!(
        show(&read_to_close(&mut s)),
        "-ERR Protocol error: invalid bulk length\\r\\n"
    );
    assert_eq!(
        run(&mut con, &["CONFIG", "GET", "proto-max-bulk-len"]),
        Value::Array(vec![
            common::bulk_value("proto-max-bulk-len"),
            common::bulk_value("1048576"),
        ])
    );
    assert_serves_others(&server);
}

#[test]
fn run_and_worker_ids_longer_than_lease_max_id_len_are_refused() {
    let server = Server::start();
    let mut con = server.connect();
    let longest = "r".repeat(1024);
    let too_long = "r".repeat(1025);
    let value = run(&mut con, &["LEASE.ACQUIRE", &longest, &longest, "0"]);
    assert_eq!(common::lease_reply(&value).fencing_token, 1);
    for (words, what) in [
        (vec!["LEASE.ACQUIRE", &too_long, "w", "0"], "run"),
        (vec!["LEASE.ACQUIRE", "run", &too_long, "0"], "worker"),
        (vec!["LEASE.GET", &too_long], "run"),
        (vec!["LEASE.VALIDATE", &too_long, "x:y:1", "1"], "run"),
    ] {
        assert_eq!(
            error(&mut con, &words),
            format!("ERR {what} id is longer than 1024 bytes (lease-max-id-len)"),
            "{}",
            words[0]
        );
    }
    // The refused acquires took no token, and the connection is open.
    let value = run(&mut con, &["LEASE.ACQUIRE", "run", "w", "0"]);
    assert_eq!(common::lease_reply(&value).fencing_token, 2);

    let raised = Server::start_with(&["--lease-max-id-len", "2048"]);
    let mut con = raised.connect();
    let value = run(&mut con, &["LEASE.ACQUIRE", &"r".repeat(2048), "w", "0"]);
    assert_eq!(common::lease_reply(&value).fencing_token, 1);
}

#[test]
fn a_client_whose_unfinished_request_passes_the_query_buffer_limit_is_closed() {
    let server = Server::start_with(&["--client-query-buffer-limit", "1mb"]);
    let mut bystander = server.connect();
    let mut s = server.raw();
    // A 4 MiB argument, allowed by proto-max-bulk-len, of which a little
    // over 1 MiB is sent and the rest never comes.
    s.write_all(b"*2\r\n$4\r\nECHO\r\n$4194304\r\n").unwrap();
    s.write_all(&vec![b'x'; (1 << 20) + 1]).unwrap();
    assert_eq!(
        show(&read_to_close(&mut s)),
        "-ERR Protocol error: query buffer limit reached (client-query-buffer-limit)\\r\\n"
    );
    assert_eq!(
        run(&mut bystander, &["PING"]),
        Value::SimpleString("PONG".into())
    );
    assert_serves_others(&server);
}

#[test]
fn idle_clients_are_closed_after_timeout_and_busy_ones_are_not() {
    let server = Server::start_with(&["--timeout", "1"]);
    let mut idle = server.raw();
    // Half a request, then silence: the half frame does not keep it open.
    idle.write_all(b"*2\r\n$4\r\nECHO\r\n$5\r\nab").unwrap();
    let mut busy = server.connect();
    let started = Instant::now();
    for _ in 0..12 {
        assert_eq!(
            run(&mut busy, &["PING"]),
            Value::SimpleString("PONG".into())
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // Three seconds of PINGs 250 ms apart never left it idle for 1 s.
    let mut rest = Vec::new();
    let closed = idle.read_to_end(&mut rest);
    assert!(closed.is_ok() && rest.is_empty(), "{closed:?} {rest:?}");
    eprintln!(
        "idle client closed; busy client still served after {:?}",
        started.elapsed()
    );
    assert_serves_others(&server);
}

#[test]
fn timeout_zero_never_closes_an_idle_client() {
    let server = Server::start();
    let mut con = server.connect();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(run(&mut con, &["PING"]), Value::SimpleString("PONG".into()));
}

/// Pipelines 16 KiB ECHOs without reading a reply, `pause` apart, until
/// the server drops the connection; returns how many bytes went out.
fn pipeline_without_reading(server: &Server, pause: Duration) -> usize {
    let mut s: TcpStream = server.raw();
    s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    let request = resp(&[b"ECHO", &[b'e'; 16 * 1024]]);
    let mut sent = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(120) {
        match s.write_all(&request) {
            Ok(()) => sent += request.len(),
            Err(error) => {
                eprintln!("disconnected after {sent} bytes sent: {error}");
                return sent;
            }
        }
        std::thread::sleep(pause);
    }
    panic!("still connected after {sent} bytes of requests and no reads");
}

#[test]
fn a_client_that_never_reads_is_dropped_at_the_hard_output_limit() {
    let server = Server::start_with(&["--client-output-buffer-limit", "normal", "1mb", "0", "0"]);
    let mut bystander = server.connect();
    let sent = pipeline_without_reading(&server, Duration::ZERO);
    // Replies are as large as requests: beyond the 1 MiB limit only the
    // kernel's socket buffers can have taken some.
    assert!(sent < 64 << 20, "{sent} bytes sent before the disconnect");
    assert_eq!(
        run(&mut bystander, &["PING"]),
        Value::SimpleString("PONG".into())
    );
    assert!(
        server.log().contains("output buffer limits"),
        "{}",
        server.log()
    );
    assert_serves_others(&server);
}

#[test]
fn a_client_over_the_soft_output_limit_for_too_long_is_dropped() {
    let server = Server::start_with(&["--client-output-buffer-limit", "normal", "0", "1mb", "1"]);
    pipeline_without_reading(&server, Duration::from_millis(5));
    assert_serves_others(&server);
}

#[test]
fn limit_directives_are_validated_at_start_up() {
    for args in [
        &["--proto-max-bulk-len", "1000"][..],
        &["--client-query-buffer-limit", "lots"],
        &["--client-output-buffer-limit", "replica", "1mb", "0", "0"],
        &["--client-output-buffer-limit", "normal", "1mb"],
        &["--lease-max-id-len", "100"],
        &["--timeout", "-1"],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let output = std::process::Command::new(common::BINARY)
            .args(["--port", "0", "--dir"])
            .arg(dir.path())
            .args(args)
            .output()
            .unwrap();
        assert!(!output.status.success(), "{args:?} started");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(&args[0][2..]), "{args:?}: {stderr}");
    }
}
