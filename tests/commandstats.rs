//! `INFO commandstats`, `INFO errorstats` and `INFO latencystats` in
//! Redis 7's formats, read with the `redis` crate from the real server
//! after a known mix of commands: what counts as a call, a rejected call
//! (refused before running: arity, NOAUTH, maxmemory) or a failed one
//! (ran and replied with an error); which error prefixes are counted;
//! which INFO arguments include the sections; and `CONFIG RESETSTAT`.

mod common;

use std::collections::BTreeMap;
use std::io::{BufReader, Write};

use common::binary::Server;
use common::raw::{read_frame, resp};
use redis::{Connection, RedisResult, Value};

fn run(con: &mut Connection, words: &[&str]) -> RedisResult<Value> {
    let mut cmd = redis::cmd(words[0]);
    for word in &words[1..] {
        cmd.arg(*word);
    }
    cmd.query(con)
}

fn ok(con: &mut Connection, words: &[&str]) -> Value {
    run(con, words).unwrap_or_else(|e| panic!("{words:?}: {e}"))
}

fn err(con: &mut Connection, words: &[&str]) -> String {
    match run(con, words) {
        Ok(value) => panic!("{words:?} answered {value:?}, not an error"),
        Err(error) => error.to_string(),
    }
}

/// The `name:value` lines of `INFO <section>` whose name starts with
/// `prefix`, prefix removed.
fn lines(con: &mut Connection, section: &str, prefix: &str) -> BTreeMap<String, String> {
    let text: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    text.split("\r\n")
        .filter_map(|line| line.strip_prefix(prefix))
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

/// `calls`, `rejected_calls` and `failed_calls` of each command.
fn counts(con: &mut Connection) -> BTreeMap<String, (u64, u64, u64)> {
    let stats = lines(con, "commandstats", "cmdstat_");
    stats
        .into_iter()
        .map(|(name, value)| {
            let fields = parse_fields(&value);
            let keys: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(
                keys,
                [
                    "calls",
                    "usec",
                    "usec_per_call",
                    "rejected_calls",
                    "failed_calls"
                ],
                "{name}: {value}"
            );
            let get = |key: &str| fields.iter().find(|(k, _)| k == key).unwrap().1;
            let calls = get("calls") as u64;
            let usec = get("usec");
            let per_call = get("usec_per_call");
            if calls > 0 {
                assert!(
                    (per_call - usec / calls as f64).abs() <= 0.005,
                    "{name}: {value}"
                );
            } else {
                assert_eq!((usec, per_call), (0.0, 0.0), "{name}: {value}");
            }
            let two_decimals = value.split(',').nth(2).unwrap();
            assert_eq!(two_decimals.split('.').nth(1).map(str::len), Some(2));
            let counts = (
                calls,
                get("rejected_calls") as u64,
                get("failed_calls") as u64,
            );
            (name, counts)
        })
        .collect()
}

fn parse_fields(value: &str) -> Vec<(String, f64)> {
    value
        .split(',')
        .map(|field| {
            let (key, number) = field.split_once('=').expect("key=value");
            (key.to_owned(), number.parse().expect("a number"))
        })
        .collect()
}

fn errors(con: &mut Connection) -> BTreeMap<String, String> {
    lines(con, "errorstats", "errorstat_")
}

fn errorstats(pairs: &[(&str, u64)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(name, count)| (name.to_string(), format!("count={count}")))
        .collect()
}

fn expected(rows: &[(&str, (u64, u64, u64))]) -> BTreeMap<String, (u64, u64, u64)> {
    rows.iter()
        .map(|(name, c)| (name.to_string(), *c))
        .collect()
}

/// One raw request on its own connection, and its reply's bytes.
fn raw_exchange(stream: &mut std::net::TcpStream, words: &[&[u8]]) -> Vec<u8> {
    stream.write_all(&resp(words)).unwrap();
    read_frame(&mut BufReader::new(&mut *stream)).unwrap()
}

#[test]
fn calls_rejections_failures_and_errors_are_counted_as_redis_counts_them() {
    let server = Server::start();
    let mut con = server.connect();
    // Whatever the client sent on connecting starts over.
    ok(&mut con, &["CONFIG", "RESETSTAT"]);
    ok(&mut con, &["LEASE.ACQUIRE", "run-1", "worker-a"]);
    ok(&mut con, &["LEASE.ACQUIRE", "run-2", "worker-a"]);
    // Ran and failed: its own argument check.
    let failed = err(&mut con, &["LEASE.HEARTBEAT", "run-1:worker-a:1", "two"]);
    assert!(failed.contains("not an integer"), "{failed}");
    // Refused before running: the arity.
    let arity = err(&mut con, &["LEASE.ACQUIRE"]);
    assert!(arity.contains("wrong number of arguments"), "{arity}");
    // Unknown: only in errorstats.
    err(&mut con, &["NOSUCHCOMMAND", "x"]);
    err(&mut con, &["CLIENT", "NOSUCHSUB"]);
    ok(&mut con, &["CLIENT", "LIST"]);
    ok(&mut con, &["CONFIG", "GET", "maxmemory"]);
    // NOAUTH: refused before running, on a client that has not
    // authenticated.
    ok(&mut con, &["CONFIG", "SET", "requirepass", "secret"]);
    let mut stranger = server.raw();
    let noauth = raw_exchange(&mut stranger, &[b"PING"]);
    assert!(noauth.starts_with(b"-NOAUTH "), "{noauth:?}");
    let authed = raw_exchange(&mut stranger, &[b"AUTH", b"secret"]);
    assert_eq!(authed, b"+OK\r\n");
    ok(&mut con, &["CONFIG", "SET", "requirepass", ""]);
    // OOM: an acquire refused for maxmemory is refused before it runs
    // (new runs are refused once the run table would have to grow).
    ok(&mut con, &["CONFIG", "SET", "maxmemory", "1"]);
    let mut granted = 0;
    let oom = loop {
        let name = format!("fill-{granted}");
        match run(&mut con, &["LEASE.ACQUIRE", &name, "worker-a"]) {
            Ok(_) => granted += 1,
            Err(error) => break error.to_string(),
        }
        assert!(granted < 1_000_000, "no OOM");
    };
    assert!(oom.contains("OOM"), "{oom}");
    ok(&mut con, &["CONFIG", "SET", "maxmemory", "0"]);

    assert_eq!(
        counts(&mut con),
        expected(&[
            ("auth", (1, 0, 0)),
            ("client|list", (1, 0, 0)),
            ("config|get", (1, 0, 0)),
            ("config|resetstat", (1, 0, 0)),
            ("config|set", (4, 0, 0)),
            ("lease.acquire", (2 + granted, 2, 0)),
            ("lease.heartbeat", (1, 0, 1)),
            ("ping", (0, 1, 0)),
        ])
    );
    assert_eq!(
        errors(&mut con),
        errorstats(&[("ERR", 4), ("NOAUTH", 1), ("OOM", 1)])
    );
    // INFO counts itself once it has answered, as in Redis.
    let after = counts(&mut con);
    assert_eq!(after["info"], (2, 0, 0));

    // Latency percentiles for every command that ran, none for one only
    // refused; each in microseconds with three decimals, in order.
    let latency = lines(&mut con, "latencystats", "latency_percentiles_usec_");
    let ran: Vec<&str> = latency.keys().map(String::as_str).collect();
    assert_eq!(
        ran,
        [
            "auth",
            "client|list",
            "config|get",
            "config|resetstat",
            "config|set",
            "info",
            "lease.acquire",
            "lease.heartbeat",
        ]
    );
    for (name, value) in &latency {
        let fields = parse_fields(value);
        let keys: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["p50", "p99", "p99.9"], "{name}: {value}");
        for field in value.split(',') {
            assert_eq!(
                field.split('.').next_back().map(str::len),
                Some(3),
                "{value}"
            );
        }
        let (p50, p99, p999) = (fields[0].1, fields[1].1, fields[2].1);
        assert!(p50 > 0.0 && p50 <= p99 && p99 <= p999, "{name}: {value}");
    }

    // CONFIG RESETSTAT clears all three; only itself is counted after.
    ok(&mut con, &["CONFIG", "RESETSTAT"]);
    assert_eq!(
        counts(&mut con),
        expected(&[("config|resetstat", (1, 0, 0))])
    );
    assert_eq!(errors(&mut con), BTreeMap::new());
    let latency = lines(&mut con, "latencystats", "latency_percentiles_usec_");
    let ran: Vec<&str> = latency.keys().map(String::as_str).collect();
    assert_eq!(ran, ["config|resetstat", "info"]);
}

#[test]
fn a_transaction_counts_each_command_it_runs_and_exec_itself() {
    let server = Server::start();
    let mut con = server.connect();
    ok(&mut con, &["CONFIG", "RESETSTAT"]);
    ok(&mut con, &["MULTI"]);
    ok(&mut con, &["LEASE.ACQUIRE", "run-1", "worker-a"]);
    ok(&mut con, &["LEASE.HEARTBEAT", "run-1:worker-a:1", "two"]);
    // The heartbeat's error is its element of EXEC's reply.
    let _ = run(&mut con, &["EXEC"]);
    // Refused while queuing: the command's rejected call, and EXEC's
    // EXECABORT a failed call of EXEC.
    ok(&mut con, &["MULTI"]);
    err(&mut con, &["LEASE.ACQUIRE"]);
    err(&mut con, &["NOSUCHCOMMAND"]);
    let aborted = err(&mut con, &["EXEC"]);
    assert!(aborted.contains("discarded"), "{aborted}");
    err(&mut con, &["EXEC"]);

    assert_eq!(
        counts(&mut con),
        expected(&[
            ("config|resetstat", (1, 0, 0)),
            ("exec", (3, 0, 2)),
            ("lease.acquire", (1, 1, 0)),
            ("lease.heartbeat", (1, 0, 1)),
            ("multi", (2, 0, 0)),
        ])
    );
    // The heartbeat's error inside EXEC, the arity, the unknown command,
    // EXEC without MULTI; and EXECABORT.
    assert_eq!(
        errors(&mut con),
        errorstats(&[("ERR", 4), ("EXECABORT", 1)])
    );
}

#[test]
fn default_info_has_errorstats_and_all_and_everything_have_all_three() {
    let server = Server::start();
    let mut con = server.connect();
    err(&mut con, &["NOSUCHCOMMAND"]);
    let headers = |con: &mut Connection, args: &[&str]| -> Vec<String> {
        let mut cmd = redis::cmd("INFO");
        for arg in args {
            cmd.arg(*arg);
        }
        let text: String = cmd.query(con).unwrap();
        let wanted = ["# Commandstats", "# Errorstats", "# Latencystats"];
        text.split("\r\n")
            .filter(|line| wanted.contains(line))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(headers(&mut con, &[]), ["# Errorstats"]);
    assert_eq!(headers(&mut con, &["default"]), ["# Errorstats"]);
    let all = ["# Commandstats", "# Errorstats", "# Latencystats"];
    assert_eq!(headers(&mut con, &["all"]), all);
    assert_eq!(headers(&mut con, &["everything"]), all);
    assert_eq!(headers(&mut con, &["commandstats"]), ["# Commandstats"]);
    let text: String = redis::cmd("INFO").query(&mut con).unwrap();
    assert!(text.contains("\r\nerrorstat_ERR:count=1\r\n"), "{text}");
    let text: String = redis::cmd("INFO")
        .arg("everything")
        .query(&mut con)
        .unwrap();
    assert!(text.contains("\r\ncmdstat_info:calls="), "{text}");
    assert!(
        text.contains("\r\nlatency_percentiles_usec_info:p50="),
        "{text}"
    );
}
