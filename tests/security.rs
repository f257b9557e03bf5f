//! Authentication (`requirepass`) and protected mode, through the `redis`
//! crate, raw RESP and redis-cli, against the real binary.
//!
//! The one test that runs `redis-cli` needs it installed (Debian: `apt-get
//! install redis-tools`) and is marked ignored, with that reason; `cargo
//! test -- --include-ignored` runs it. The rest need only the Rust
//! toolchain.

mod common;

use std::io::Write;
use std::process::Command;
use std::time::Duration;

use common::binary::{Server, run_to_exit, wait_until};
use common::client::{error, field, pairs, run, status};
use redis::Value;

const PASSWORD: &str = "s3cret pass";

fn with_password() -> Server {
    Server::start_with(&["--requirepass", PASSWORD])
}

#[test]
fn every_command_but_auth_hello_quit_and_reset_needs_auth() {
    let server = with_password();
    let mut con = server.connect();
    for words in [
        &["PING"][..],
        &["LEASE.ACQUIRE", "run", "w", "0"],
        &["LEASE.GET", "run"],
        &["CONFIG", "GET", "requirepass"],
        &["DBSIZE"],
        &["NOSUCHCOMMAND", "x"],
        &["SHUTDOWN"],
    ] {
        assert_eq!(
            error(&mut con, words),
            "NOAUTH Authentication required.",
            "{words:?}"
        );
    }
    // HELLO without AUTH is refused too, and says how to authenticate.
    let hello = error(&mut con, &["HELLO", "3"]);
    assert!(hello.starts_with("NOAUTH HELLO must be called"), "{hello}");

    assert_eq!(run(&mut con, &["AUTH", PASSWORD]), Value::Okay);
    assert_eq!(run(&mut con, &["PING"]), status("PONG"));
    assert_eq!(run(&mut con, &["DBSIZE"]), Value::Int(0));
    // Nothing ran before AUTH: the refused acquire took no lease.
    assert_eq!(run(&mut con, &["LEASE.GET", "run"]), Value::Nil);

    // RESET and QUIT work without authenticating (their `no_auth` flag);
    // RESET leaves the connection unauthenticated.
    let mut other = server.connect();
    assert_eq!(run(&mut other, &["RESET"]), status("RESET"));
    assert_eq!(
        error(&mut other, &["PING"]),
        "NOAUTH Authentication required."
    );
    assert_eq!(run(&mut other, &["QUIT"]), Value::Okay);
}

#[test]
fn wrong_passwords_and_users_get_wrongpass() {
    let server = with_password();
    let mut con = server.connect();
    let wrongpass = "WRONGPASS invalid username-password pair or user is disabled.";
    for words in [
        &["AUTH", "wrong"][..],
        &["AUTH", "s3cret pas"],
        &["AUTH", "s3cret pass!"],
        &["AUTH", ""],
        &["AUTH", "default", "wrong"],
        &["AUTH", "admin", PASSWORD],
        &["HELLO", "3", "AUTH", "default", "wrong"],
        &["HELLO", "3", "AUTH", "admin", PASSWORD],
    ] {
        assert_eq!(error(&mut con, words), wrongpass, "{words:?}");
    }
    // Still not in.
    assert_eq!(
        error(&mut con, &["PING"]),
        "NOAUTH Authentication required."
    );
    assert_eq!(run(&mut con, &["AUTH", "default", PASSWORD]), Value::Okay);
    assert_eq!(run(&mut con, &["PING"]), status("PONG"));
}

#[test]
fn hello_auth_logs_in_and_switches_protocol() {
    let server = with_password();
    let mut con = server.connect();
    let reply = run(&mut con, &["HELLO", "3", "AUTH", "default", PASSWORD]);
    assert_eq!(field(&pairs(reply), "proto"), Value::Int(3));
    let lease = run(&mut con, &["LEASE.ACQUIRE", "run", "w", "0"]);
    assert!(matches!(lease, Value::Map(_)), "{lease:?}");
}

#[test]
fn reset_logs_the_client_out() {
    let server = with_password();
    let mut con = server.connect();
    run(&mut con, &["AUTH", PASSWORD]);
    assert_eq!(run(&mut con, &["RESET"]), status("RESET"));
    assert_eq!(
        error(&mut con, &["PING"]),
        "NOAUTH Authentication required."
    );
}

#[test]
fn clients_authenticate_from_the_url_in_both_protocols() {
    let server = with_password();
    let password = "s3cret%20pass";
    for url in [
        format!("redis://:{password}@127.0.0.1:{}/", server.port),
        format!("redis://default:{password}@127.0.0.1:{}/", server.port),
        format!(
            "redis://:{password}@127.0.0.1:{}/?protocol=resp3",
            server.port
        ),
    ] {
        let mut con = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection()
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let token = common::client::acquire(&mut con, &format!("run-{url}"), "w", 0.0);
        assert!(token.is_some(), "{url}");
    }
    let wrong = format!("redis://:nope@127.0.0.1:{}/", server.port);
    let failed = redis::Client::open(wrong).unwrap().get_connection();
    assert!(failed.is_err());
}

#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn redis_cli_with_a_password() {
    let server = with_password();
    let port = server.port.to_string();
    let cli = |args: &[&str]| {
        let output = Command::new("redis-cli")
            .args(["-p", &port, "--no-auth-warning"])
            .args(args)
            .output()
            .expect("redis-cli runs");
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stderr));
        text.trim().to_owned()
    };
    assert_eq!(cli(&["PING"]), "NOAUTH Authentication required.");
    assert_eq!(cli(&["-a", PASSWORD, "PING"]), "PONG");
    assert_eq!(
        cli(&["--user", "default", "--pass", PASSWORD, "DBSIZE"]),
        "0"
    );
    assert!(cli(&["-a", "wrong", "PING"]).contains("WRONGPASS"));
}

#[test]
fn without_requirepass_auth_behaves_as_in_redis() {
    let server = Server::start();
    let mut con = server.connect();
    let reply = error(&mut con, &["AUTH", "anything"]);
    assert!(
        reply.starts_with("ERR AUTH <password> called without any password configured"),
        "{reply}"
    );
    // The default user has no password: any password of `default` is fine.
    assert_eq!(run(&mut con, &["AUTH", "default", "x"]), Value::Okay);
    assert_eq!(
        error(&mut con, &["AUTH", "admin", "x"]),
        "WRONGPASS invalid username-password pair or user is disabled."
    );
    assert_eq!(run(&mut con, &["PING"]), status("PONG"));
}

#[test]
fn protected_mode_refuses_open_addresses_without_a_password() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let exited = run_to_exit(&["--port", "0", "--dir", data, "--bind", "0.0.0.0"]);
    assert!(!exited.status.success());
    let output = exited.output();
    assert!(output.contains("Refusing to listen on 0.0.0.0"), "{output}");
    assert!(output.contains("requirepass"), "{output}");
    assert!(output.contains("protected-mode no"), "{output}");

    // Loopback only, or a password, or protection off: it starts (and is
    // reached over loopback).
    for args in [
        &["--bind", "127.0.0.1"][..],
        &["--bind", "0.0.0.0", "--requirepass", PASSWORD],
        &["--bind", "0.0.0.0", "--protected-mode", "no"],
    ] {
        let server = Server::start_with(args);
        let mut con = server.connect();
        if args.contains(&"--requirepass") {
            run(&mut con, &["AUTH", PASSWORD]);
        }
        assert_eq!(run(&mut con, &["PING"]), status("PONG"), "{args:?}");
        let mode = run(&mut con, &["CONFIG", "GET", "protected-mode"]);
        let expected = if args.contains(&"no") { "no" } else { "yes" };
        assert_eq!(
            mode,
            Value::Array(vec![
                common::client::bulk_value("protected-mode"),
                common::client::bulk_value(expected)
            ])
        );
    }
}

#[test]
fn maxclients_refuses_one_more_and_the_others_go_on() {
    let server = Server::start_with(&["--maxclients", "2"]);
    let mut first = server.connect();
    let mut second = server.connect();
    assert_eq!(run(&mut first, &["PING"]), status("PONG"));
    assert_eq!(run(&mut second, &["PING"]), status("PONG"));

    let mut third = server.raw();
    let refused = common::raw::read_to_close(&mut third);
    assert_eq!(refused, b"-ERR max number of clients reached\r\n");
    // The two connected clients are served as before.
    assert_eq!(
        common::client::acquire(&mut first, "run", "w", 0.0),
        Some(1)
    );
    let lease = common::client::lease_reply(&run(&mut second, &["LEASE.GET", "run", "0"]));
    assert_eq!(lease.fencing_token, 1);

    // Once a client leaves, there is room again.
    drop(second);
    let pong = wait_until(Duration::from_secs(10), || {
        let client = redis::Client::open(server.url()).unwrap();
        // Refused while the server has not yet seen the other leave. The
        // crate takes the refusal as the reply to its CLIENT SETINFO, which
        // it ignores, and may then see only the closed socket.
        let pong = client
            .get_connection()
            .and_then(|mut con| redis::cmd("PING").query::<Value>(&mut con));
        pong.map_err(|error| format!("no room after a client left: {error}"))
    });
    assert_eq!(pong, status("PONG"));
}

#[test]
fn unauthenticated_clients_get_redis_smaller_request_limits() {
    let server = with_password();
    for (header, reply) in [
        (
            &b"*11\r\n"[..],
            &b"-ERR Protocol error: unauthenticated multibulk length\r\n"[..],
        ),
        (
            b"*2\r\n$4\r\nAUTH\r\n$16385\r\n",
            b"-ERR Protocol error: unauthenticated bulk length\r\n",
        ),
    ] {
        let mut s = server.raw();
        s.write_all(header).unwrap();
        assert_eq!(
            common::raw::show(&common::raw::read_to_close(&mut s)),
            common::raw::show(reply)
        );
    }
    // In one write: a refused PING, AUTH, then an argument far over the
    // unauthenticated limit, which AUTH has lifted by the time it is read.
    let big = vec![b'b'; 100_000];
    let mut stream = common::raw::resp(&[b"PING"]);
    stream.extend(common::raw::resp(&[b"AUTH", PASSWORD.as_bytes()]));
    stream.extend(common::raw::resp(&[b"ECHO", &big]));
    let mut expected = b"-NOAUTH Authentication required.\r\n+OK\r\n$100000\r\n".to_vec();
    expected.extend(&big);
    expected.extend(b"\r\n");
    let mut s = server.raw();
    let got = common::raw::exchange(&mut s, &stream, expected.len());
    assert!(
        got == expected,
        "{}",
        common::raw::show(&got[..got.len().min(80)])
    );
    // Without requirepass there is no such limit.
    let open = Server::start();
    let mut s = open.raw();
    let got = common::raw::exchange(&mut s, &common::raw::resp(&[b"ECHO", &big]), 100_011);
    assert_eq!(got.len(), 100_011);
}
