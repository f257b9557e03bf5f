//! Runtime configuration, as an operator uses it: `CONFIG SET` takes effect
//! at once (all of its pairs or none), shows in `CONFIG GET` and INFO, and
//! after `CONFIG REWRITE` survives a restart with the file's comments kept;
//! `CONFIG RESETSTAT` starts INFO's counters over. Through the `redis`
//! crate, against a server in the test's runtime or, where a restart or a
//! crash is part of the test, the real binary.

mod common;

use std::path::Path;

use common::binary::Server;
use common::inprocess::InProcess;
use common::raw::read_to_close;
use redis::Value;

#[tokio::test]
async fn config_set_is_all_or_nothing_with_redis_errors() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client().await;
    let failed = |name: &str, why: &str| {
        format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {why}")
    };
    for (pairs, error) in [
        (
            vec![("lease-ttl", "30"), ("port", "7000")],
            failed("port", "can't set immutable config"),
        ),
        (
            vec![("lease-ttl", "30"), ("maxclients", "0")],
            failed(
                "maxclients",
                "invalid maxclients (expected a positive integer)",
            ),
        ),
        (
            vec![("lease-ttl", "30"), ("lease-ttl", "31")],
            failed("lease-ttl", "duplicate parameter"),
        ),
        (
            vec![("lease-ttl", "30"), ("nosuch", "1")],
            "ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'".to_owned(),
        ),
        (
            vec![("dir", "/tmp"), ("bind", "0.0.0.0")],
            failed("dir", "can't set immutable config"),
        ),
    ] {
        assert_eq!(con.config_set(&pairs).await, Err(error), "{pairs:?}");
        // Nothing of it took effect.
        assert_eq!(con.config_get("lease-ttl").await, "10");
    }
    assert_eq!(
        con.error(&["CONFIG", "SET", "lease-ttl", "1", "loglevel"])
            .await,
        "ERR syntax error"
    );
    con.config_set(&[("lease-ttl", "30"), ("slowlog-max-len", "64")])
        .await
        .unwrap();
    assert_eq!(con.config_get("lease-ttl").await, "30");
    assert_eq!(con.config_get("slowlog-max-len").await, "64");
    assert_eq!(con.info("leases").await["lease_ttl"], "30");
}

#[tokio::test]
async fn a_new_lease_ttl_applies_to_later_acquires_only() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client().await;
    let before = con.acquire("before", "w", Some(0.0), None).await.unwrap();
    assert_eq!(before.expires_at, 10.0);
    con.config_set(&[("lease-ttl", "30")]).await.unwrap();
    let after = con.acquire("after", "w", Some(1.0), None).await.unwrap();
    assert_eq!(after.expires_at, 31.0);
    // The old lease keeps its TTL of 10 when it is extended.
    assert!(con.heartbeat(&before, Some(5.0)).await);
    assert_eq!(con.get("before", Some(5.0)).await.unwrap().expires_at, 15.0);
}

#[tokio::test]
async fn a_rotated_password_is_needed_by_new_clients_only() {
    let server = InProcess::start(&["--requirepass", "old"]).await;
    let with = |password: &str| format!("redis://:{password}@127.0.0.1:{}/", server.port);
    let mut admin = common::client::AsyncClient::connect(&with("old")).await;
    admin.config_set(&[("requirepass", "new")]).await.unwrap();
    assert_eq!(admin.config_get("requirepass").await, "new");
    // Still authenticated after the change.
    assert_eq!(
        admin.run(&["PING"]).await,
        Value::SimpleString("PONG".into())
    );
    let refused = redis::Client::open(with("old"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect_err("the old password is refused");
    assert_eq!(
        refused.kind(),
        redis::ErrorKind::AuthenticationFailed,
        "{refused}"
    );
    let mut fresh = common::client::AsyncClient::connect(&with("new")).await;
    assert_eq!(fresh.dbsize().await, 0);
    // And the password is off again: anyone connects.
    admin.config_set(&[("requirepass", "")]).await.unwrap();
    let mut open = server.client().await;
    assert_eq!(open.dbsize().await, 0);
}

#[tokio::test]
async fn raising_maxclients_lets_the_next_client_in() {
    let server = InProcess::start(&["--maxclients", "2"]).await;
    let mut first = server.client().await;
    let _second = server.client().await;
    let refused = raw_connect_and_read(server.port).await;
    assert_eq!(refused, b"-ERR max number of clients reached\r\n");
    first.config_set(&[("maxclients", "3")]).await.unwrap();
    assert_eq!(first.info("clients").await["maxclients"], "3");
    let mut third = server.client().await;
    assert_eq!(third.dbsize().await, 0);
    assert_eq!(raw_connect_and_read(server.port).await, refused);
}

/// Connects, reads until the server closes, and returns what it sent.
async fn raw_connect_and_read(port: u16) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let mut got = Vec::new();
    stream.read_to_end(&mut got).await.unwrap();
    got
}

#[tokio::test]
async fn the_slow_log_turned_on_for_a_while_redacts_the_password() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client().await;
    con.run(&["LEASE.ACQUIRE", "quick", "w", "0"]).await;
    assert_eq!(con.run(&["SLOWLOG", "LEN"]).await, Value::Int(0));
    con.config_set(&[("slowlog-log-slower-than", "0")])
        .await
        .unwrap();
    con.run(&["LEASE.ACQUIRE", "logged", "w", "0"]).await;
    con.config_set(&[("requirepass", "s3cret"), ("slowlog-log-slower-than", "-1")])
        .await
        .unwrap();
    con.run(&["LEASE.ACQUIRE", "not-logged", "w", "0"]).await;
    let entries = format!("{:?}", con.run(&["SLOWLOG", "GET", "-1"]).await);
    assert!(entries.contains("logged"), "{entries}");
    assert!(
        !entries.contains("not-logged") && !entries.contains("quick"),
        "{entries}"
    );
    assert!(
        entries.contains("(redacted)") && !entries.contains("s3cret"),
        "{entries}"
    );
}

#[tokio::test]
async fn config_resetstat_starts_the_counters_over() {
    let server = InProcess::start(&[]).await;
    let mut con = server.client().await;
    con.acquire("run", "w", Some(0.0), None).await.unwrap();
    con.acquire("run", "w", Some(1.0), None).await;
    let stats = con.info("stats").await;
    assert!(stats["total_commands_processed"].parse::<u64>().unwrap() > 2);
    assert_eq!(con.info("leases").await["acquire_failed"], "1");
    assert_eq!(con.run(&["CONFIG", "RESETSTAT"]).await, Value::Okay);
    let leases = con.info("leases").await;
    assert_eq!(leases["acquire_ok"], "0");
    assert_eq!(leases["acquire_failed"], "0");
    // State is not statistics.
    assert_eq!(leases["leases"], "1");
    assert_eq!(leases["last_fencing_token"], "1");
    let stats = con.info("stats").await;
    // The INFOs since, and this one.
    assert!(stats["total_commands_processed"].parse::<u64>().unwrap() <= 3);
    assert_eq!(stats["total_connections_received"], "0");
}

#[test]
fn appendfsync_always_set_at_run_time_loses_nothing_to_kill_9() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("data");
    let mut server = Server::start_in(&dir, &["--appendfsync", "no"]).unwrap();
    let mut con = server.typed();
    con.config_set(&[("appendfsync", "always")]).unwrap();
    assert_eq!(con.info("persistence")["aof_fsync"], "always");
    let lease = con.acquire("run", "w", Some(0.0), Some(1e6)).unwrap();
    server.kill9();
    let server = Server::start_in(&dir, &[]).unwrap();
    let mut con = server.typed();
    let got = con.get("run", Some(0.0)).expect("the acknowledged acquire");
    assert_eq!(got.fencing_token, lease.fencing_token);
}

#[test]
fn config_rewrite_keeps_the_files_comments_and_survives_a_restart() {
    let temp = tempfile::tempdir().unwrap();
    let conf = temp.path().join("leased.conf");
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/leased.conf");
    std::fs::copy(&shipped, &conf).unwrap();
    let dir = temp.path().join("data");
    let file = conf.to_str().unwrap();
    let args = [file, "--port", "0", "--dir", dir.to_str().unwrap()];
    let mut server = spawn(&args);
    let mut con = server.typed();
    con.config_set(&[
        ("lease-ttl", "30"),
        ("requirepass", "two words"),
        ("client-output-buffer-limit", "normal 1gb 256mb 30"),
    ])
    .unwrap();
    assert_eq!(con.run(&["CONFIG", "REWRITE"]), Value::Okay);
    server.stop();

    let before = std::fs::read_to_string(&shipped).unwrap();
    let after = std::fs::read_to_string(&conf).unwrap();
    let comments = |text: &str| -> Vec<String> {
        (text.lines())
            .filter(|line| line.starts_with('#'))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        comments(&after),
        comments(&before),
        "every comment kept, in order"
    );
    assert!(after.lines().any(|line| line == "lease-ttl 30"), "{after}");
    assert!(
        after
            .lines()
            .any(|line| line == "requirepass \"two words\""),
        "{after}"
    );
    assert_eq!(after.lines().count(), before.lines().count());

    // The --port and --dir overrides went into the file too, as in Redis;
    // a restart from the file alone has the changed settings.
    let server = spawn(&[file]);
    let url = format!("redis://:two%20words@127.0.0.1:{}/", server.port);
    let mut con =
        common::client::Client::new(redis::Client::open(url).unwrap().get_connection().unwrap());
    assert_eq!(con.config_get("lease-ttl"), "30");
    assert_eq!(
        con.config_get("client-output-buffer-limit"),
        "normal 1073741824 268435456 30 pubsub 33554432 8388608 60"
    );
    let mut stranger = server.raw();
    stranger.write_all(b"PING\r\n").unwrap();
    let refused = read_to_close_after_quit(&mut stranger);
    assert!(refused.starts_with(b"-NOAUTH"), "{refused:?}");
}

use std::io::Write;

/// Reads the reply to what was sent, then QUITs and reads to the close.
fn read_to_close_after_quit(stream: &mut std::net::TcpStream) -> Vec<u8> {
    stream.write_all(b"QUIT\r\n").unwrap();
    read_to_close(stream)
}

/// The binary with exactly `args` (the file's port may be 0).
fn spawn(args: &[&str]) -> Server {
    let mut command = std::process::Command::new(common::binary::BINARY);
    command.args(args);
    Server::spawn(command, Path::new("")).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn config_rewrite_without_a_file_says_so() {
    let server = Server::start();
    let mut con = server.typed();
    assert_eq!(
        con.error(&["CONFIG", "REWRITE"]),
        "ERR The server is running without a config file"
    );
}
