//! What an operator uses to look inside a running server: `LEASE.SCAN`,
//! `CLIENT KILL`, `MONITOR` and `SLOWLOG`, through the `redis` crate, raw
//! sockets and `redis-cli`.
//!
//! The one test that runs `redis-cli monitor` needs `redis-cli` (Debian:
//! `apt-get install redis-tools`) and is marked ignored, with that reason;
//! `cargo test -- --include-ignored` runs it. The rest need only the Rust
//! toolchain.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::binary::Server;
use common::client::{AsyncClient, acquire_all_cmd, error, text};
use common::inprocess::{InProcess, at_one_instant, settle};
use redis::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::time::advance;

/// Runs one full `LEASE.SCAN` iteration, calling `between` after each
/// call, and returns every run id it gave (duplicates kept).
fn scan_all(
    con: &mut redis::Connection,
    options: &[&str],
    mut between: impl FnMut(),
) -> Vec<String> {
    let mut cursor = "0".to_string();
    let mut all = Vec::new();
    loop {
        let (next, runs): (String, Vec<String>) = redis::cmd("LEASE.SCAN")
            .arg(&cursor)
            .arg(options)
            .query(con)
            .unwrap();
        all.extend(runs);
        between();
        if next == "0" {
            return all;
        }
        assert_ne!(next, cursor, "the cursor moves on");
        cursor = next;
    }
}

#[test]
fn lease_scan_returns_every_lease_held_throughout_exactly_once() {
    let server = Server::start();
    let mut con = server.connect();
    let runs = (0..1000).map(|i| format!("stable-{i}"));
    acquire_all_cmd(runs, "w", 0.0, 1e6)
        .query::<()>(&mut con)
        .unwrap();

    // Churn between calls: leases come and go in freed and new slots.
    let mut churn = server.connect();
    let mut step = 0;
    let seen = scan_all(&mut con, &["COUNT", "7"], || {
        step += 1;
        let run = format!("churn-{step}");
        let lease: HashMap<String, Value> = redis::cmd("LEASE.ACQUIRE")
            .arg(&run)
            .arg("w")
            .arg(0)
            .query(&mut churn)
            .unwrap();
        if step % 2 == 0 {
            let Value::BulkString(id) = &lease["lease_id"] else {
                panic!("{lease:?}")
            };
            let Value::Int(token) = lease["fencing_token"] else {
                panic!("{lease:?}")
            };
            let released: i64 = redis::cmd("LEASE.RELEASE")
                .arg(id)
                .arg(token)
                .query(&mut churn)
                .unwrap();
            assert_eq!(released, 1);
        }
    });
    let stable: Vec<&String> = seen.iter().filter(|r| r.starts_with("stable-")).collect();
    let distinct: HashSet<&&String> = stable.iter().collect();
    assert_eq!(stable.len(), 1000, "each stable lease exactly once");
    assert_eq!(distinct.len(), 1000);
}

#[test]
fn lease_scan_matches_counts_and_lists_expired_leases() {
    let server = Server::start_with(&["--lease-retention", "100"]);
    let mut con = server.connect();
    for (run, now) in [
        ("job-a", 0),
        ("job-b", 0),
        ("other", 0),
        ("", 0),
        ("old", 0),
    ] {
        let _: Value = redis::cmd("LEASE.ACQUIRE")
            .arg(run)
            .arg("w")
            .arg(now)
            .query(&mut con)
            .unwrap();
    }
    // Every lease has expired by 50, and is still held; by 150 "old" is
    // past retention, but the others were taken over at 120.
    let _: Value = redis::cmd("LEASE.GET")
        .arg("x")
        .arg(50)
        .query(&mut con)
        .unwrap();
    let mut all = scan_all(&mut con, &[], || {});
    all.sort();
    assert_eq!(all, ["", "job-a", "job-b", "old", "other"]);

    let mut jobs = scan_all(&mut con, &["MATCH", "job-*", "COUNT", "1000"], || {});
    jobs.sort();
    assert_eq!(jobs, ["job-a", "job-b"]);
    let mut every = scan_all(&mut con, &["MATCH", "*"], || {});
    every.sort();
    assert_eq!(
        every,
        ["", "job-a", "job-b", "old", "other"],
        "* matches the empty id"
    );

    for run in ["job-a", "job-b", "other", ""] {
        let _: Value = redis::cmd("LEASE.ACQUIRE")
            .arg(run)
            .arg("w2")
            .arg(120)
            .arg("TTL")
            .arg(1000)
            .query(&mut con)
            .unwrap();
    }
    let _: Value = redis::cmd("LEASE.GET")
        .arg("x")
        .arg(150)
        .query(&mut con)
        .unwrap();
    let mut left = scan_all(&mut con, &["COUNT", "1"], || {});
    left.sort();
    assert_eq!(
        left,
        ["", "job-a", "job-b", "other"],
        "past retention is gone"
    );

    // A cursor past the end finishes; the reply is two arrays in RESP3 too.
    let mut resp3 = server.connect_resp3();
    let reply: Value = redis::cmd("LEASE.SCAN")
        .arg("99999")
        .query(&mut resp3)
        .unwrap();
    assert_eq!(
        reply,
        Value::Array(vec![Value::BulkString(b"0".to_vec()), Value::Array(vec![])])
    );

    assert_eq!(error(&mut con, &["LEASE.SCAN", "-1"]), "ERR invalid cursor");
    assert_eq!(error(&mut con, &["LEASE.SCAN", "x"]), "ERR invalid cursor");
    assert_eq!(
        error(&mut con, &["LEASE.SCAN", "0", "COUNT", "0"]),
        "ERR syntax error"
    );
    assert_eq!(
        error(&mut con, &["LEASE.SCAN", "0", "COUNT", "ten"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        error(&mut con, &["LEASE.SCAN", "0", "MATCH"]),
        "ERR syntax error"
    );
    assert_eq!(
        error(&mut con, &["LEASE.SCAN", "0", "TYPE", "string"]),
        "ERR syntax error"
    );
    assert_eq!(
        error(&mut con, &["LEASE.SCAN"]),
        "ERR wrong number of arguments for 'lease.scan' command"
    );
}

/// A raw client that has said nothing yet, and its id.
fn victim(server: &Server) -> (TcpStream, i64) {
    let mut stream = server.raw();
    stream.write_all(b"CLIENT ID\r\n").unwrap();
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line).unwrap();
    let id = line.trim().trim_start_matches(':').parse().unwrap();
    (stream, id)
}

/// Whether the server has closed `stream` (reads end, writes may fail).
fn is_closed(stream: &mut TcpStream) -> bool {
    let _ = stream.write_all(b"PING\r\n");
    let mut line = String::new();
    matches!(
        BufReader::new(&*stream).read_line(&mut line),
        Ok(0) | Err(_)
    )
}

fn client_list(con: &mut redis::Connection) -> String {
    redis::cmd("CLIENT").arg("LIST").query(con).unwrap()
}

#[test]
fn client_kill_closes_the_clients_it_matches() {
    let server = Server::start();
    let mut admin = server.connect();

    let (mut by_id, id) = victim(&server);
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(id)
        .query(&mut admin)
        .unwrap();
    assert_eq!(killed, 1);
    assert!(is_closed(&mut by_id));
    assert!(!client_list(&mut admin).contains(&format!("id={id} ")));
    let again: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(id)
        .query(&mut admin)
        .unwrap();
    assert_eq!(again, 0);

    // The old form, by the address CLIENT LIST shows.
    let (mut by_addr, _) = victim(&server);
    let addr = by_addr.local_addr().unwrap().to_string();
    let ok: String = redis::cmd("CLIENT")
        .arg("KILL")
        .arg(&addr)
        .query(&mut admin)
        .unwrap();
    assert_eq!(ok, "OK");
    assert!(is_closed(&mut by_addr));
    assert_eq!(
        error(&mut admin, &["CLIENT", "KILL", &addr]),
        "ERR No such client"
    );

    // Filters combine; TYPE other than normal matches nobody.
    let (mut a, _) = victim(&server);
    let (mut b, b_id) = victim(&server);
    let none: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "pubsub"][..])
        .query(&mut admin)
        .unwrap();
    assert_eq!(none, 0);
    let none: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "USER", "default", "MAXAGE", "3600"][..])
        .query(&mut admin)
        .unwrap();
    assert_eq!(none, 0, "nobody is an hour old");
    let one: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal", "ID", &b_id.to_string()][..])
        .query(&mut admin)
        .unwrap();
    assert_eq!(one, 1);
    assert!(is_closed(&mut b));
    // Everyone else but me (SKIPME yes is the default).
    let all: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "USER", "default"][..])
        .query(&mut admin)
        .unwrap();
    assert_eq!(all, 1);
    assert!(is_closed(&mut a));
    let pong: String = redis::cmd("PING").query(&mut admin).unwrap();
    assert_eq!(pong, "PONG");

    for (args, expected) in [
        (
            &["CLIENT", "KILL", "ID", "0"][..],
            "ERR client-id should be greater than 0",
        ),
        (
            &["CLIENT", "KILL", "TYPE", "nobody"],
            "ERR Unknown client type 'nobody'",
        ),
        (
            &["CLIENT", "KILL", "USER", "alice"],
            "ERR No such user 'alice'",
        ),
        (&["CLIENT", "KILL", "SKIPME", "maybe"], "ERR syntax error"),
        (&["CLIENT", "KILL", "ID", "1", "ADDR"], "ERR syntax error"),
        (&["CLIENT", "KILL", "COLOR", "red"], "ERR syntax error"),
        (
            &["CLIENT", "KILL"],
            "ERR wrong number of arguments for 'client|kill' command",
        ),
    ] {
        assert_eq!(error(&mut admin, args), expected, "{args:?}");
    }
}

#[test]
fn client_kill_of_oneself_replies_then_closes() {
    let server = Server::start();
    let mut stream = server.raw();
    stream
        .write_all(b"CLIENT KILL SKIPME no\r\nPING\r\n")
        .unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, ":1\r\n");
    line.clear();
    assert_eq!(reader.read_line(&mut line).unwrap(), 0, "closed: {line:?}");
}

/// A raw connection in MONITOR mode, after `setup` (e.g. AUTH, HELLO).
async fn monitor(server: &InProcess, setup: &[u8]) -> Lines {
    let address = ("127.0.0.1", server.port);
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(setup).await.unwrap();
    stream.write_all(b"PING\r\n").await.unwrap();
    let mut reader = tokio::io::BufReader::new(stream);
    let mut line = String::new();
    while line != "+PONG\r\n" {
        line.clear();
        let read = at_one_instant(reader.read_line(&mut line)).await.unwrap();
        assert_ne!(read, 0, "closed before MONITOR");
    }
    reader.get_mut().write_all(b"MONITOR\r\n").await.unwrap();
    assert_eq!(read_line(&mut reader).await, "+OK\r\n");
    reader
}

type Lines = tokio::io::BufReader<tokio::net::TcpStream>;

/// The next line the server sent.
async fn read_line(reader: &mut Lines) -> String {
    let mut line = String::new();
    at_one_instant(reader.read_line(&mut line)).await.unwrap();
    line
}

/// The next monitor line, without the timestamp.
async fn next_line(reader: &mut Lines) -> String {
    let line = read_line(reader).await;
    let (stamp, rest) = line.split_once(' ').expect("a monitor line");
    let (secs, micros) = stamp[1..].split_once('.').expect("seconds.micros");
    assert!(stamp.starts_with('+'), "{line:?}");
    assert!(secs.parse::<u64>().is_ok() && micros.len() == 6, "{line:?}");
    rest.trim_end().to_string()
}

#[tokio::test]
async fn monitor_streams_commands_run_by_every_client() {
    let server = InProcess::start(&["--requirepass", "s3cret"]).await;
    let mut watcher = monitor(&server, b"AUTH s3cret\r\n").await;
    let mut resp3_watcher = monitor(&server, b"HELLO 3 AUTH default s3cret\r\n").await;

    let url = format!("redis://:s3cret@127.0.0.1:{}/?protocol=resp3", server.port);
    let mut con = AsyncClient::connect(&url).await;
    let Value::Int(me) = con.run(&["CLIENT", "ID"]).await else {
        panic!("CLIENT ID")
    };
    let list = text(&con.run(&["CLIENT", "LIST"]).await);
    let addr = list
        .lines()
        .find(|line| line.starts_with(&format!("id={me} ")))
        .and_then(|line| line.split(' ').find_map(|f| f.strip_prefix("addr=")))
        .unwrap()
        .to_string();
    assert!(
        list.lines().filter(|l| l.contains(" flags=O ")).count() == 2,
        "{list}"
    );

    let _: Value = redis::cmd("LEASE.ACQUIRE")
        .arg("run \"1\"\n")
        .arg(b"w\xff".as_slice())
        .arg(0)
        .query_async(&mut con.con)
        .await
        .unwrap();
    con.run(&["CONFIG", "GET", "port"]).await;
    con.error(&["PING", "a", "b"]).await;
    con.run(&["AUTH", "default", "s3cret"]).await;
    con.run(&["ECHO", "done"]).await;

    for watcher in [&mut watcher, &mut resp3_watcher] {
        let rest = loop_until(watcher, "\"ECHO\" \"done\"").await;
        assert!(
            rest.contains(&format!(
                "[0 {addr}] \"LEASE.ACQUIRE\" \"run \\\"1\\\"\\n\" \"w\\xff\" \"0\""
            )),
            "{rest:#?}"
        );
        assert!(
            rest.contains(&format!(
                "[0 {addr}] \"AUTH\" \"(redacted)\" \"(redacted)\""
            )),
            "{rest:#?}"
        );
        let text = rest.join("\n");
        assert!(!text.contains("s3cret"), "{text}");
        assert!(
            !text.contains("\"CONFIG\""),
            "admin commands are hidden: {text}"
        );
        assert!(
            !text.contains("\"a\" \"b\""),
            "wrong arity is not run: {text}"
        );
    }
}

/// A transaction shows as in Redis: MULTI, then its commands as EXEC
/// runs them, then EXEC.
#[tokio::test]
async fn monitor_shows_a_transaction_in_order() {
    let server = InProcess::start(&[]).await;
    let mut watcher = monitor(&server, b"").await;
    let mut con = server.client().await;
    con.run(&["MULTI"]).await;
    con.run(&["ECHO", "queued"]).await;
    con.run(&["LEASE.GET", "r"]).await;
    con.run(&["EXEC"]).await;
    con.run(&["ECHO", "done"]).await;
    let lines = loop_until(&mut watcher, "\"ECHO\" \"done\"").await;
    let commands: Vec<&str> = lines
        .iter()
        .map(|line| line.split_once("] ").expect("[db addr]").1)
        .skip_while(|command| *command != "\"MULTI\"")
        .collect();
    assert_eq!(
        commands,
        [
            "\"MULTI\"",
            "\"ECHO\" \"queued\"",
            "\"LEASE.GET\" \"r\"",
            "\"EXEC\"",
            "\"ECHO\" \"done\""
        ]
    );
}

/// Monitor lines until one ends with `last`, all of them.
async fn loop_until(reader: &mut Lines, last: &str) -> Vec<String> {
    let mut lines = Vec::new();
    loop {
        let line = next_line(reader).await;
        let done = line.ends_with(last);
        lines.push(line);
        if done {
            return lines;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn monitor_ends_with_reset_and_outlives_timeout() {
    let server = InProcess::start(&["--timeout", "1"]).await;
    let mut watcher = monitor(&server, b"").await;
    advance(Duration::from_millis(2500)).await;
    let mut con = server.client().await;
    con.run(&["ECHO", "still here"]).await;
    loop_until(&mut watcher, "\"ECHO\" \"still here\"").await;

    watcher.get_mut().write_all(b"RESET\r\n").await.unwrap();
    while read_line(&mut watcher).await != "+RESET\r\n" {}
    con.run(&["ECHO", "unseen"]).await;
    // A line that should not exist would be sent before the server has
    // nothing left to do: it would come before the PONG.
    settle().await;
    watcher.get_mut().write_all(b"PING\r\n").await.unwrap();
    let line = read_line(&mut watcher).await;
    assert_eq!(line, "+PONG\r\n", "no monitor line after RESET");
}

#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn redis_cli_monitor_prints_commands() {
    let server = Server::start();
    let mut cli = Command::new("redis-cli")
        .args(["-p", &server.port.to_string(), "monitor"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("redis-cli is installed (apt-get install redis-tools)");
    let mut output = BufReader::new(cli.stdout.take().unwrap());
    let mut line = String::new();
    output.read_line(&mut line).unwrap();
    assert_eq!(line, "OK\n");

    let mut con = server.connect();
    let deadline = Instant::now() + Duration::from_secs(20);
    let found = loop {
        let _: Value = redis::cmd("LEASE.GET")
            .arg("run-9")
            .arg(1)
            .query(&mut con)
            .unwrap();
        line.clear();
        output.read_line(&mut line).unwrap();
        if line.contains("\"LEASE.GET\" \"run-9\" \"1\"") || Instant::now() > deadline {
            break line.clone();
        }
    };
    let _ = cli.kill();
    let _ = cli.wait();
    assert!(found.contains("\"LEASE.GET\" \"run-9\" \"1\""), "{found:?}");
    assert!(found.contains(" [0 127.0.0.1:"), "{found:?}");
}

fn slowlog(con: &mut redis::Connection, count: &[i64]) -> Vec<Value> {
    redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(count)
        .query(con)
        .unwrap()
}

/// An entry's id, duration and arguments.
fn entry_parts(entry: &Value) -> (i64, i64, Vec<String>, String, String) {
    let Value::Array(fields) = entry else {
        panic!("{entry:?}")
    };
    assert_eq!(fields.len(), 6, "{entry:?}");
    let int = |v: &Value| match v {
        Value::Int(n) => *n,
        other => panic!("{other:?}"),
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("{other:?}"),
    };
    let Value::Array(args) = &fields[3] else {
        panic!("{entry:?}")
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        (now - int(&fields[1])).abs() < 600,
        "a Unix time: {entry:?}"
    );
    (
        int(&fields[0]),
        int(&fields[2]),
        args.iter().map(text).collect(),
        text(&fields[4]),
        text(&fields[5]),
    )
}

#[test]
fn slowlog_keeps_the_newest_slow_commands() {
    let server = Server::start_with(&[
        "--slowlog-log-slower-than",
        "0",
        "--slowlog-max-len",
        "4",
        "--requirepass",
        "pw",
    ]);
    let client = redis::Client::open(format!("redis://:pw@127.0.0.1:{}/", server.port)).unwrap();
    let mut con = client.get_connection().unwrap();
    let _: String = redis::cmd("SLOWLOG").arg("RESET").query(&mut con).unwrap();
    let _: String = redis::cmd("CLIENT")
        .arg(&["SETNAME", "ops"][..])
        .query(&mut con)
        .unwrap();
    let _: Value = redis::cmd("LEASE.ACQUIRE")
        .arg("r".repeat(200))
        .arg("w")
        .arg(0)
        .query(&mut con)
        .unwrap();
    let patterns: Vec<String> = (0..40).map(|i| format!("p{i}")).collect();
    let _: Value = redis::cmd("CONFIG")
        .arg("GET")
        .arg(&patterns)
        .query(&mut con)
        .unwrap();
    let _: String = redis::cmd("AUTH").arg("pw").query(&mut con).unwrap();

    let entries = slowlog(&mut con, &[]);
    assert_eq!(entries.len(), 4, "slowlog-max-len: {entries:?}");
    let parts: Vec<_> = entries.iter().map(entry_parts).collect();
    let ids: Vec<i64> = parts.iter().map(|p| p.0).collect();
    assert!(
        ids.windows(2).all(|w| w[0] == w[1] + 1),
        "newest first: {ids:?}"
    );
    let (_, micros, auth, peer, name) = &parts[0];
    assert!(*micros >= 0);
    assert_eq!(auth, &["AUTH", "(redacted)"]);
    assert_eq!(name, "ops");
    assert!(peer.starts_with("127.0.0.1:"), "{peer}");
    let config = &parts[1].2;
    assert_eq!(config.len(), 32);
    assert_eq!(config[..3], ["CONFIG", "GET", "p0"]);
    assert_eq!(config[31], "... (11 more arguments)");
    let acquire = &parts[2].2;
    assert_eq!(
        acquire[0], "LEASE.ACQUIRE",
        "lease commands are timed by the core"
    );
    assert_eq!(
        acquire[1],
        format!("{}... (72 more bytes)", "r".repeat(128))
    );
    assert_eq!(acquire[2..], ["w", "0"]);

    assert_eq!(slowlog(&mut con, &[1]).len(), 1);
    assert_eq!(slowlog(&mut con, &[-1]).len(), 4);
    let len: i64 = redis::cmd("SLOWLOG").arg("LEN").query(&mut con).unwrap();
    assert_eq!(len, 4);
    let _: String = redis::cmd("SLOWLOG").arg("RESET").query(&mut con).unwrap();
    let after = slowlog(&mut con, &[-1]);
    // SLOWLOG RESET itself ran after the reset: it is the one entry.
    assert_eq!(after.len(), 1, "{after:?}");
    let (id, _, args, _, _) = entry_parts(&after[0]);
    assert_eq!(args, ["SLOWLOG", "RESET"]);
    assert!(id > ids[0], "ids go on counting");
    assert_eq!(
        error(&mut con, &["SLOWLOG", "GET", "-2"]),
        "ERR count should be greater than or equal to -1"
    );
    assert_eq!(
        error(&mut con, &["SLOWLOG", "GET", "x"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        error(&mut con, &["SLOWLOG", "NOPE"]),
        "ERR unknown subcommand 'NOPE'. Try SLOWLOG HELP."
    );
}

#[test]
fn slowlog_can_be_turned_off() {
    // Whether a command under the default 10 ms is left out depends on
    // the machine; a negative threshold turns the log off whatever it is.
    let server = Server::start_with(&["--slowlog-log-slower-than", "-1"]);
    let mut con = server.connect();
    for i in 0..50 {
        let _: Value = redis::cmd("LEASE.ACQUIRE")
            .arg(format!("r{i}"))
            .arg("w")
            .query(&mut con)
            .unwrap();
    }
    let len: i64 = redis::cmd("SLOWLOG").arg("LEN").query(&mut con).unwrap();
    assert_eq!(len, 0);
}
