//! leased driven by `redis-cli`, as a user at a terminal would.
//!
//! Every test here needs `redis-cli` (Debian: `apt-get install
//! redis-tools`), so each is marked ignored: plain `cargo test` lists it as
//! ignored with that reason, and `cargo test -- --include-ignored` (which
//! `.ci/run` runs) runs it, failing if `redis-cli` is missing.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::binary::Server;
use common::client::bulk_value;

fn redis_cli(server: &Server, args: &[&str]) -> Output {
    Command::new("redis-cli")
        .args(["-p", &server.port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli is installed (apt-get install redis-tools)")
}

fn stdout(output: &Output) -> String {
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn one_shot_commands() {
    let server = Server::start();
    let out = stdout(&redis_cli(
        &server,
        &["LEASE.ACQUIRE", "run-1", "worker-a", "0"],
    ));
    assert_eq!(
        out,
        "run_id\nrun-1\nworker_id\nworker-a\nlease_id\nrun-1:worker-a:1\nfencing_token\n1\nexpires_at\n10\n"
    );
    let out = stdout(&redis_cli(
        &server,
        &["--no-raw", "LEASE.ACQUIRE", "run-1", "worker-b", "1"],
    ));
    assert_eq!(out, "(nil)\n");
    let out = stdout(&redis_cli(
        &server,
        &["--no-raw", "LEASE.HEARTBEAT", "run-1:worker-a:1", "1", "5"],
    ));
    assert_eq!(out, "(integer) 1\n");
    let out = stdout(&redis_cli(
        &server,
        &["--no-raw", "LEASE.HEARTBEAT", "run-1:worker-a:1", "x"],
    ));
    assert_eq!(out, "(error) ERR value is not an integer or out of range\n");
    // RESP3 (-3): a map, with expires_at as a double.
    let out = stdout(&redis_cli(
        &server,
        &["-3", "--no-raw", "LEASE.GET", "run-1", "6"],
    ));
    assert_eq!(
        out,
        "1# \"run_id\" => \"run-1\"\n\
         2# \"worker_id\" => \"worker-a\"\n\
         3# \"lease_id\" => \"run-1:worker-a:1\"\n\
         4# \"fencing_token\" => (integer) 1\n\
         5# \"expires_at\" => (double) 15\n\
         6# \"expired\" => (integer) 0\n"
    );
    let out = stdout(&redis_cli(&server, &["DBSIZE"]));
    assert_eq!(out, "1\n");
}

/// `redis-cli info commandstats` (and `errorstats`, `latencystats`) as a
/// user reads them after a few commands: Redis 7's lines, one-shot
/// redis-cli runs each counted.
#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn info_commandstats_errorstats_latencystats() {
    let server = Server::start();
    stdout(&redis_cli(&server, &["CONFIG", "RESETSTAT"]));
    stdout(&redis_cli(&server, &["LEASE.ACQUIRE", "run-1", "worker-a"]));
    stdout(&redis_cli(
        &server,
        &["LEASE.HEARTBEAT", "run-1:worker-a:1", "x"],
    ));
    stdout(&redis_cli(&server, &["NOSUCHCOMMAND"]));
    let out = stdout(&redis_cli(&server, &["INFO", "commandstats"]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "# Commandstats", "{out}");
    let fields = |name: &str| -> Vec<String> {
        let prefix = format!("cmdstat_{name}:calls=");
        let line = lines.iter().find(|l| l.starts_with(&prefix));
        let line = line.unwrap_or_else(|| panic!("no cmdstat_{name} in {out}"));
        let counts = line.split(',').filter(|f| !f.starts_with("usec"));
        counts.map(str::to_owned).collect()
    };
    let acquire = [
        "cmdstat_lease.acquire:calls=1",
        "rejected_calls=0",
        "failed_calls=0",
    ];
    assert_eq!(fields("lease.acquire"), acquire);
    let heartbeat = [
        "cmdstat_lease.heartbeat:calls=1",
        "rejected_calls=0",
        "failed_calls=1",
    ];
    assert_eq!(fields("lease.heartbeat"), heartbeat);
    assert!(!out.contains("nosuchcommand"), "{out}");
    let out = stdout(&redis_cli(&server, &["INFO", "errorstats"]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines, ["# Errorstats", "errorstat_ERR:count=2"]);
    let out = stdout(&redis_cli(&server, &["INFO", "latencystats"]));
    assert!(
        out.contains("\nlatency_percentiles_usec_lease.acquire:p50="),
        "{out}"
    );
}

/// An interactive session in a pseudo-terminal: redis-cli fetches
/// `COMMAND DOCS` at start (and aborts if the reply is malformed), then
/// `help` shows what the server documented.
#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn interactive_session_reads_command_docs() {
    let server = Server::start();
    let script = format!("redis-cli -p {}", server.port);
    let mut child = Command::new("script")
        .args(["-q", "-c", &script, "/dev/null"])
        // A dumb terminal: no cursor queries, so plain input works.
        .env("TERM", "dumb")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script (util-linux) is installed");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"LEASE.ACQUIRE run-9 worker-z 0\nhelp LEASE.HEARTBEAT\nquit\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&output.stdout).replace('\r', "");
    assert!(output.status.success(), "{out}");
    assert!(out.contains("6) \"run-9:worker-z:1\""), "{out}");
    assert!(out.contains("LEASE.HEARTBEAT"), "{out}");
    assert!(out.contains("lease_id token [now]"), "{out}");
    assert!(
        out.contains("Extend a current, unexpired lease by its TTL"),
        "{out}"
    );
    assert!(!out.contains("Error"), "{out}");
}

#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn shutdown_from_redis_cli_stops_the_server_cleanly() {
    let mut server = Server::start();
    let _ = redis_cli(&server, &["SHUTDOWN"]);
    let status = server.wait(std::time::Duration::from_secs(10));
    assert!(status.success(), "{status}: {}", server.log());
}

/// Long enough for anything awaited here on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(30);

/// A redis-cli left running (`SUBSCRIBE`, `PSUBSCRIBE`, a blocked acquire),
/// its standard output read line by line as it comes, on a thread of its
/// own. Killed when dropped, if still running.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Running {
    fn start(server: &Server, args: &[&str]) -> Running {
        let mut child = Command::new("redis-cli")
            .args(["-p", &server.port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-cli is installed (apt-get install redis-tools)");
        let (tx, lines) = mpsc::channel();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Running { child, lines }
    }

    /// The next `expected.len()` lines, which must be `expected`.
    fn expect_lines(&self, expected: &[&str]) {
        let mut seen = Vec::new();
        for _ in expected {
            match self.lines.recv_timeout(PATIENCE) {
                Ok(line) => seen.push(line),
                Err(error) => panic!("{error} after {seen:?}, expecting {expected:?}"),
            }
        }
        assert_eq!(seen, expected);
    }

    /// All its output, once it has exited by itself (at most PATIENCE).
    fn finish(self) -> Vec<String> {
        let mut lines = Vec::new();
        let deadline = Instant::now() + PATIENCE;
        // The reading thread ends at the end of the pipe, when it exits.
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => lines.push(line),
                Err(mpsc::RecvTimeoutError::Disconnected) => return lines,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("redis-cli still running after {PATIENCE:?}: {lines:?}")
                }
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Two redis-cli subscribers, one to the run's channel and one to the
/// pattern of every run, see a lease acquired, expire on the server's
/// clock, and the run taken over by a blocked `LEASE.ACQUIRE` sent by a
/// third redis-cli; then released.
#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn redis_cli_subscribers_see_a_takeover_by_a_blocked_acquire() {
    let server = Server::start();
    let channel = "__lease__:run-x";
    let sub = Running::start(&server, &["SUBSCRIBE", channel]);
    sub.expect_lines(&["subscribe", channel, "1"]);
    let psub = Running::start(&server, &["PSUBSCRIBE", "__lease__:*"]);
    psub.expect_lines(&["psubscribe", "__lease__:*", "1"]);
    let mut con = server.typed();
    assert_eq!(
        con.run(&["PUBSUB", "NUMSUB", channel]),
        redis::Value::Array(vec![bulk_value(channel), redis::Value::Int(1)])
    );
    assert_eq!(con.run(&["PUBSUB", "NUMPAT"]), redis::Value::Int(1));

    // No `now`: the lease lives on the server's clock, whose passing its
    // expiry publishes `expired` and hands the run to the waiter.
    let first = con
        .acquire("run-x", "w1", None, Some(0.3))
        .expect("free run");
    assert_eq!(first.fencing_token, 1);
    let waiter = Running::start(&server, &["LEASE.ACQUIRE", "run-x", "w2", "BLOCK", "5000"]);
    let granted = waiter.finish();
    assert_eq!(
        granted[..8],
        [
            "run_id",
            "run-x",
            "worker_id",
            "w2",
            "lease_id",
            "run-x:w2:2",
            "fencing_token",
            "2"
        ],
        "{granted:?}"
    );
    let second = con.get("run-x", None).expect("w2's lease");
    assert_eq!(
        (second.worker_id.as_slice(), second.fencing_token),
        (&b"w2"[..], 2)
    );
    assert!(con.release(&second));

    let events = [
        "acquired:1:w1",
        "expired:1:w1",
        "acquired:2:w2",
        "released:2:w2",
    ];
    for data in events {
        // Without a terminal, redis-cli prints each element of a message
        // on a line of its own.
        sub.expect_lines(&["message", channel, data]);
        psub.expect_lines(&["pmessage", "__lease__:*", channel, data]);
    }
}

/// A blocked acquire that times out answers null: redis-cli prints it as an
/// empty line when its output is not a terminal (raw mode), as `(nil)`
/// with `--no-raw`. Errors in the BLOCK option come back as errors.
#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn a_blocked_acquire_from_redis_cli_times_out_with_null() {
    let server = Server::start();
    server
        .typed()
        .acquire("r", "holder", None, Some(30.0))
        .expect("free run");
    let started = Instant::now();
    let out = stdout(&redis_cli(
        &server,
        &["LEASE.ACQUIRE", "r", "w", "BLOCK", "200"],
    ));
    assert_eq!(out, "\n");
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
    let out = stdout(&redis_cli(
        &server,
        &["--no-raw", "LEASE.ACQUIRE", "r", "w", "BLOCK", "200"],
    ));
    assert_eq!(out, "(nil)\n");
    for (args, error) in [
        (
            &["LEASE.ACQUIRE", "r", "w", "5", "BLOCK", "100"][..],
            "ERR BLOCK cannot be given with now: a blocked acquire runs on the server's clock",
        ),
        (
            &["LEASE.ACQUIRE", "r", "w", "BLOCK", "-1", "TTL", "1"],
            "ERR timeout is negative",
        ),
        (
            &["LEASE.ACQUIRE", "r", "w", "BLOCK", "0.5", "TTL", "1"],
            "ERR timeout is not an integer or out of range",
        ),
    ] {
        let out = stdout(&redis_cli(&server, &[&["--no-raw"], args].concat()));
        assert_eq!(out, format!("(error) {error}\n"), "{args:?}");
    }
    // Nobody was queued, and no token was spent.
    assert_eq!(stdout(&redis_cli(&server, &["LEASE.WAITERS", "r"])), "\n");
    let lease = server.typed().get("r", None).expect("the holder's lease");
    assert_eq!(lease.fencing_token, 1);
}

/// Leases on `runs`, taken through redis-cli with a long TTL.
fn acquire_through_cli(server: &Server, runs: &[&str]) {
    for run in runs {
        stdout(&redis_cli(
            server,
            &["LEASE.ACQUIRE", run, "worker", "TTL", "600"],
        ));
    }
}

fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn scan_lists_exactly_the_runs_holding_leases() {
    let server = Server::start();
    acquire_through_cli(&server, &["run-1", "run-12", "run-2", "other"]);
    // A released lease is no key.
    stdout(&redis_cli(&server, &["LEASE.ACQUIRE", "gone", "w"]));
    stdout(&redis_cli(&server, &["LEASE.RELEASE", "gone:w:5", "5"]));
    let all = stdout(&redis_cli(&server, &["--scan"]));
    assert_eq!(sorted_lines(&all), ["other", "run-1", "run-12", "run-2"]);
    let ones = stdout(&redis_cli(&server, &["--scan", "--pattern", "run-1*"]));
    assert_eq!(sorted_lines(&ones), ["run-1", "run-12"]);
    let none = stdout(&redis_cli(&server, &["--scan", "--pattern", "gone*"]));
    assert_eq!(none, "");
}

#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn bigkeys_and_memkeys_report_the_leases_as_hashes() {
    let server = Server::start();
    acquire_through_cli(&server, &["run-1", "run-2", "run-3"]);
    let big = stdout(&redis_cli(&server, &["--bigkeys"]));
    assert!(big.contains("Sampled 3 keys in the keyspace!"), "{big}");
    assert!(big.contains("3 hashs with 18 fields"), "{big}");
    assert!(big.contains("has 6 fields"), "{big}");
    let mem = stdout(&redis_cli(&server, &["--memkeys"]));
    assert!(mem.contains("Sampled 3 keys in the keyspace!"), "{mem}");
    assert!(mem.contains("3 hashs with 240 bytes"), "{mem}");
    let sampled = stdout(&redis_cli(&server, &["--memkeys-samples", "5"]));
    assert!(sampled.contains("3 hashs with 240 bytes"), "{sampled}");
}

#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn type_ttl_and_hgetall_match_lease_get() {
    let server = Server::start();
    acquire_through_cli(&server, &["run-42"]);
    assert_eq!(stdout(&redis_cli(&server, &["TYPE", "run-42"])), "hash\n");
    assert_eq!(stdout(&redis_cli(&server, &["TYPE", "run-0"])), "none\n");
    let ttl: i64 = stdout(&redis_cli(&server, &["TTL", "run-42"]))
        .trim()
        .parse()
        .unwrap();
    assert!((595..=600).contains(&ttl), "{ttl}");
    assert_eq!(stdout(&redis_cli(&server, &["TTL", "run-0"])), "-2\n");
    // LEASE.GET and HGETALL print the same lines (the token is an integer
    // in one and a string in the other; redis-cli's raw output shows both
    // alike).
    let get = stdout(&redis_cli(&server, &["LEASE.GET", "run-42"]));
    let hgetall = stdout(&redis_cli(&server, &["HGETALL", "run-42"]));
    assert_eq!(hgetall, get);
    assert!(
        hgetall.starts_with("run_id\nrun-42\nworker_id\nworker\n"),
        "{hgetall}"
    );
    let typed = stdout(&redis_cli(
        &server,
        &["--no-raw", "HGET", "run-42", "fencing_token"],
    ));
    assert_eq!(typed, "\"1\"\n");
    let refused = stdout(&redis_cli(&server, &["--no-raw", "DEL", "run-42"]));
    assert_eq!(
        refused,
        "(error) ERR leases change only through LEASE.* commands: 'del' would bypass their fencing tokens\n"
    );
    assert_eq!(stdout(&redis_cli(&server, &["EXISTS", "run-42"])), "1\n");
}

/// `LEASE.HISTORY` as redis-cli prints it: nested flat arrays in RESP2,
/// maps with doubles in RESP3, `(nil)` for the open `ended_at`. Retention
/// 0 keeps the tenures at small explicit times, long expired on the
/// server's clock.
#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn lease_history_in_both_protocols() {
    let server = Server::start_with(&["--lease-retention", "0"]);
    let acquire = ["LEASE.ACQUIRE", "run-1", "worker-a", "0", "TTL", "10"];
    stdout(&redis_cli(&server, &acquire));
    let out = stdout(&redis_cli(
        &server,
        &["LEASE.HEARTBEAT", "run-1:worker-a:1", "1", "5"],
    ));
    assert_eq!(out, "1\n");
    let takeover = ["LEASE.ACQUIRE", "run-1", "worker-b", "20", "TTL", "10"];
    stdout(&redis_cli(&server, &takeover));
    let out = stdout(&redis_cli(&server, &["--no-raw", "LEASE.HISTORY", "run-1"]));
    let tenure = |n: &str, worker: &str, token: &str, times: [&str; 3], beats: &str| {
        let [acquired, expires, ended] = times;
        format!(
            "{n})  1) \"lease_id\"\n    2) \"run-1:{worker}:{token}\"\n    \
             3) \"worker_id\"\n    4) \"{worker}\"\n    \
             5) \"fencing_token\"\n    6) (integer) {token}\n    \
             7) \"acquired_at\"\n    8) \"{acquired}\"\n    \
             9) \"expires_at\"\n   10) \"{expires}\"\n   \
             11) \"ended_at\"\n   12) \"{ended}\"\n   \
             13) \"end\"\n   14) \"expired\"\n   \
             15) \"heartbeats\"\n   16) (integer) {beats}\n"
        )
    };
    let want = tenure("1", "worker-b", "2", ["20", "30", "30"], "0")
        + &tenure("2", "worker-a", "1", ["0", "15", "15"], "1");
    assert_eq!(out, want);
    let out = stdout(&redis_cli(
        &server,
        &["-3", "--no-raw", "LEASE.HISTORY", "run-1", "COUNT", "1"],
    ));
    assert_eq!(
        out,
        "1) 1# \"lease_id\" => \"run-1:worker-b:2\"\n   \
         2# \"worker_id\" => \"worker-b\"\n   \
         3# \"fencing_token\" => (integer) 2\n   \
         4# \"acquired_at\" => (double) 20\n   \
         5# \"expires_at\" => (double) 30\n   \
         6# \"ended_at\" => (double) 30\n   \
         7# \"end\" => \"expired\"\n   \
         8# \"heartbeats\" => (integer) 0\n"
    );
    let out = stdout(&redis_cli(
        &server,
        &["--no-raw", "LEASE.HISTORY", "run-1", "COUNT", "0"],
    ));
    assert_eq!(out, "(error) ERR value is out of range, must be positive\n");
    let out = stdout(&redis_cli(&server, &["--no-raw", "LEASE.HISTORY", "none"]));
    assert_eq!(out, "(empty array)\n");
    // A lease on the server's clock is active: its ended_at is nil.
    stdout(&redis_cli(
        &server,
        &["LEASE.ACQUIRE", "run-2", "w", "TTL", "100"],
    ));
    for protocol in ["-2", "-3"] {
        let out = stdout(&redis_cli(
            &server,
            &[protocol, "--no-raw", "LEASE.HISTORY", "run-2"],
        ));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), if protocol == "-2" { 16 } else { 8 }, "{out}");
        assert!(out.contains("\"run-2:w:3\""), "{out}");
        let (ended_at, end) = if protocol == "-2" {
            (lines[11], lines[13])
        } else {
            (lines[5], lines[6])
        };
        assert!(ended_at.ends_with("(nil)"), "{out}");
        assert!(end.ends_with("\"active\""), "{out}");
    }
}
