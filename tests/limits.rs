//! The limits on what one client may send, hold or leave unread: each is
//! hit through a real socket or the `redis` crate, and another client is
//! served afterwards. Limits that take time (`timeout`, the soft output
//! limit's seconds) are tested against a server in the test's runtime
//! whose clock the test moves on; the others against the real binary.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::binary::{Server, wait_until};
use common::client::bulk_value;
use common::inprocess::{InProcess, at_one_instant};
use common::raw::{read_to_close, resp, show};
use redis::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::advance;

/// A fresh client's PING, to show the server still serves others.
fn assert_serves_others(server: &Server) {
    server.typed().ping();
}

/// [`assert_serves_others`] for a server in the test's runtime.
async fn assert_in_process_serves_others(server: &InProcess) {
    server.client().await.ping().await;
}

#[test]
fn proto_max_bulk_len_refuses_a_longer_argument_at_its_header() {
    let server = Server::start_with(&["--proto-max-bulk-len", "1mb"]);
    let mut con = server.typed();
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
        con.run(&["CONFIG", "GET", "proto-max-bulk-len"]),
        Value::Array(vec![
            bulk_value("proto-max-bulk-len"),
            bulk_value("1048576"),
        ])
    );
    assert_serves_others(&server);
}

#[test]
fn run_and_worker_ids_longer_than_lease_max_id_len_are_refused() {
    let server = Server::start();
    let mut con = server.typed();
    let longest = "r".repeat(1024);
    let too_long = "r".repeat(1025);
    let lease = con.acquire(&longest, &longest, Some(0.0), None).unwrap();
    assert_eq!(lease.fencing_token, 1);
    for (words, what) in [
        (vec!["LEASE.ACQUIRE", &too_long, "w", "0"], "run"),
        (vec!["LEASE.ACQUIRE", "run", &too_long, "0"], "worker"),
        (vec!["LEASE.GET", &too_long], "run"),
        (vec!["LEASE.VALIDATE", &too_long, "x:y:1", "1"], "run"),
    ] {
        assert_eq!(
            con.error(&words),
            format!("ERR {what} id is longer than 1024 bytes (lease-max-id-len)"),
            "{}",
            words[0]
        );
    }
    // The refused acquires took no token, and the connection is open.
    let lease = con.acquire("run", "w", Some(0.0), None).unwrap();
    assert_eq!(lease.fencing_token, 2);

    let raised = Server::start_with(&["--lease-max-id-len", "2048"]);
    let mut con = raised.typed();
    let lease = con
        .acquire(&"r".repeat(2048), "w", Some(0.0), None)
        .unwrap();
    assert_eq!(lease.fencing_token, 1);
}

#[test]
fn a_client_whose_unfinished_request_passes_the_query_buffer_limit_is_closed() {
    let server = Server::start_with(&["--client-query-buffer-limit", "1mb"]);
    let mut bystander = server.typed();
    let mut s = server.raw();
    // A 4 MiB argument, allowed by proto-max-bulk-len, of which a little
    // over 1 MiB is sent and the rest never comes.
    s.write_all(b"*2\r\n$4\r\nECHO\r\n$4194304\r\n").unwrap();
    s.write_all(&vec![b'x'; (1 << 20) + 1]).unwrap();
    assert_eq!(
        show(&read_to_close(&mut s)),
        "-ERR Protocol error: query buffer limit reached (client-query-buffer-limit)\\r\\n"
    );
    bystander.ping();
    assert_serves_others(&server);
}

#[tokio::test(start_paused = true)]
async fn idle_clients_are_closed_after_timeout_and_busy_ones_are_not() {
    let server = InProcess::start(&["--timeout", "1"]).await;
    let mut idle = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .unwrap();
    // Half a request, then silence: the half frame does not keep it open.
    idle.write_all(b"*2\r\n$4\r\nECHO\r\n$5\r\nab")
        .await
        .unwrap();
    let mut busy = server.client().await;
    for _ in 0..12 {
        busy.ping().await;
        advance(Duration::from_millis(250)).await;
    }
    // Three seconds of PINGs 250 ms apart never left it idle for 1 s.
    let mut rest = Vec::new();
    let closed = at_one_instant(idle.read_to_end(&mut rest)).await;
    assert!(closed.is_ok() && rest.is_empty(), "{closed:?} {rest:?}");
    busy.ping().await;
    assert_in_process_serves_others(&server).await;
}

#[tokio::test(start_paused = true)]
async fn timeout_zero_never_closes_an_idle_client() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client().await;
    advance(Duration::from_secs(3600)).await;
    con.ping().await;
}

/// Pipelines 16 KiB ECHOs without reading a reply until the server drops
/// the connection; returns how many bytes went out.
fn pipeline_without_reading(server: &Server) -> usize {
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
    }
    panic!("still connected after {sent} bytes of requests and no reads");
}

/// [`pipeline_without_reading`] against a server in the test's runtime,
/// moving its clock on by `pause` between requests.
async fn pipeline_without_reading_in_process(server: &InProcess, pause: Duration) -> usize {
    let address = ("127.0.0.1", server.port);
    let mut s = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = resp(&[b"ECHO", &[b'e'; 16 * 1024]]);
    let mut sent = 0;
    let started = tokio::time::Instant::now();
    while started.elapsed() < Duration::from_secs(120) {
        match at_one_instant(s.write_all(&request)).await {
            Ok(()) => sent += request.len(),
            Err(error) => {
                eprintln!("disconnected after {sent} bytes sent: {error}");
                return sent;
            }
        }
        advance(pause).await;
    }
    panic!("still connected after {sent} bytes of requests and no reads");
}

#[test]
fn a_client_that_never_reads_is_dropped_at_the_hard_output_limit() {
    let server = Server::start_with(&["--client-output-buffer-limit", "normal", "1mb", "0", "0"]);
    let mut bystander = server.typed();
    let sent = pipeline_without_reading(&server);
    // Replies are as large as requests: beyond the 1 MiB limit only the
    // kernel's socket buffers can have taken some.
    assert!(sent < 64 << 20, "{sent} bytes sent before the disconnect");
    bystander.ping();
    // The log line comes through the harness's reader a moment later.
    wait_until(Duration::from_secs(10), || match server.log() {
        log if log.contains("output buffer limits") => Ok(()),
        log => Err(format!("no output buffer limits in:\n{log}")),
    });
    assert_serves_others(&server);
}

#[tokio::test(start_paused = true)]
async fn a_client_over_the_soft_output_limit_for_too_long_is_dropped() {
    let limit = ["--client-output-buffer-limit", "normal", "0", "1mb", "1"];
    let server = InProcess::start(&limit).await;
    let started = tokio::time::Instant::now();
    let sent = pipeline_without_reading_in_process(&server, Duration::from_millis(5)).await;
    // Dropped once past 1 MiB for a second, not at once.
    assert!(sent > 1 << 20, "{sent} bytes sent before the disconnect");
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_in_process_serves_others(&server).await;
}

#[test]
fn limit_directives_are_validated_at_start_up() {
    for args in [
        &["--proto-max-bulk-len", "1000"][..],
        &["--client-query-buffer-limit", "lots"],
        &["--client-output-buffer-limit", "master", "1mb", "0", "0"],
        &["--client-output-buffer-limit", "normal", "1mb"],
        &["--lease-max-id-len", "100"],
        &["--timeout", "-1"],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let output = std::process::Command::new(common::binary::BINARY)
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
