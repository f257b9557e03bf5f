//! INFO as Redis tooling reads it: every section in Redis 7's format and
//! order, parsed by the `redis` crate over RESP2 and RESP3, the fields that
//! redis_exporter, Datadog's check and `redis-cli --stat` read, and the
//! figures that move when they should.
//!
//! The two tests that run `redis-cli` (`info replication`, `--stat`) need
//! it installed (Debian: `apt-get install redis-tools`) and are marked
//! ignored, with that reason; `cargo test -- --include-ignored` runs them.
//! The rest need only the Rust toolchain.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::binary::{BINARY, Server, wait_until};
use common::client::{Client, Lease, acquire};
use common::inprocess::{InProcess, settle};
use common::raw::{read_frame, resp};
use redis::{Connection, ConnectionLike, InfoDict, Value};
use tokio::time::advance;

/// How long a poll waits for the server before the test fails.
const PATIENCE: Duration = Duration::from_secs(10);

/// Every section's header (`INFO all`, `INFO everything`): the default
/// ones with Commandstats and Latencystats, which Redis leaves out of
/// `default`.
const ALL_HEADERS: [&str; 13] = [
    "# Server",
    "# Clients",
    "# Memory",
    "# Persistence",
    "# Stats",
    "# Replication",
    "# CPU",
    "# Commandstats",
    "# Errorstats",
    "# Latencystats",
    "# Cluster",
    "# Keyspace",
    "# Leases",
];

/// The default sections' headers (bare `INFO`, `INFO default`): all but
/// the two Redis leaves out of `default`.
fn default_headers() -> Vec<&'static str> {
    let not_default = ["# Commandstats", "# Latencystats"];
    ALL_HEADERS
        .into_iter()
        .filter(|header| !not_default.contains(header))
        .collect()
}

fn info_text(con: &mut dyn ConnectionLike, sections: &[&str]) -> String {
    let mut cmd = redis::cmd("INFO");
    for section in sections {
        cmd.arg(*section);
    }
    cmd.query(con).expect("INFO")
}

fn info(con: &mut dyn ConnectionLike, sections: &[&str]) -> InfoDict {
    let mut cmd = redis::cmd("INFO");
    for section in sections {
        cmd.arg(*section);
    }
    cmd.query(con).expect("INFO")
}

/// A field that must be there and parse as `T`.
fn field<T: redis::FromRedisValue>(info: &InfoDict, name: &str) -> T {
    info.get(name)
        .unwrap_or_else(|| panic!("no parseable {name} in INFO: {:?}", info.find(&name)))
}

fn number(con: &mut dyn ConnectionLike, section: &str, name: &str) -> u64 {
    field(&info(con, &[section]), name)
}

fn headers(text: &str) -> Vec<&str> {
    text.split("\r\n").filter(|l| l.starts_with("# ")).collect()
}

fn is_hex_id(id: &str) -> bool {
    id.len() == 40
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[test]
fn every_section_in_redis_format_and_order() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(&mut con, "run", "worker", 0.0).expect("a free run");
    let default = info_text(&mut con, &[]);
    assert_eq!(headers(&default), default_headers(), "{default}");
    assert_eq!(
        headers(&info_text(&mut con, &["default"])),
        default_headers()
    );
    for name in ["all", "everything", "ALL"] {
        let text = info_text(&mut con, &[name]);
        assert_eq!(headers(&text), ALL_HEADERS, "INFO {name}");
    }
    let everything = info_text(&mut con, &["everything"]);
    // Sections are separated by one blank line; every other line is
    // name:value, and the text ends with the last line's CRLF.
    assert!(everything.ends_with("\r\n") && !everything.ends_with("\r\n\r\n"));
    let blocks: Vec<&str> = everything.trim_end().split("\r\n\r\n").collect();
    assert_eq!(blocks.len(), ALL_HEADERS.len());
    for (block, header) in blocks.iter().zip(ALL_HEADERS) {
        let mut lines = block.split("\r\n");
        assert_eq!(lines.next(), Some(header));
        for line in lines {
            let (name, _) = line.split_once(':').unwrap_or_else(|| panic!("{line:?}"));
            // Command names (`cmdstat_lease.acquire`, `cmdstat_config|get`)
            // keep their dots and bars, as in Redis.
            let word = |b: u8| b.is_ascii_alphanumeric() || b"_.|".contains(&b);
            assert!(!name.is_empty() && name.bytes().all(word), "{line:?}");
        }
    }
    assert_eq!(
        everything.matches('\n').count(),
        everything.matches("\r\n").count()
    );
}

#[test]
fn sections_by_name_in_any_case_several_at_once() {
    let server = Server::start();
    let mut con = server.connect();
    let replication = info_text(&mut con, &["Replication"]);
    assert!(replication.starts_with("# Replication\r\nrole:master\r\n"));
    assert_eq!(headers(&replication), ["# Replication"]);
    // Printed in Redis's order, whatever the order asked in.
    let three = info_text(&mut con, &["keyspace", "CPU", "server"]);
    assert_eq!(headers(&three), ["# Server", "# CPU", "# Keyspace"]);
    // Without leases, Keyspace is a bare header, as in Redis.
    assert!(three.ends_with("# Keyspace\r\n"), "{three}");
    let with_default = info_text(&mut con, &["nosuch", "default"]);
    assert_eq!(headers(&with_default), default_headers());
    assert_eq!(info_text(&mut con, &["nosuch"]), "");
}

#[test]
fn server_clients_memory_fields_parse() {
    let server = Server::start_with(&["--maxclients", "77"]);
    let mut con = server.connect();
    let all = info(&mut con, &[]);

    assert_eq!(field::<String>(&all, "redis_version"), "7.0.0");
    assert_eq!(field::<String>(&all, "redis_mode"), "standalone");
    assert_eq!(field::<u16>(&all, "tcp_port"), server.port);
    assert_eq!(field::<u32>(&all, "process_id"), server.pid());
    assert_eq!(field::<u32>(&all, "arch_bits"), usize::BITS);
    assert_eq!(field::<u32>(&all, "hz"), 10);
    assert!(!field::<String>(&all, "os").is_empty());
    let executable = field::<String>(&all, "executable");
    assert_eq!(
        std::fs::canonicalize(executable).unwrap(),
        std::fs::canonicalize(BINARY).unwrap()
    );
    assert_eq!(field::<String>(&all, "config_file"), "");
    field::<u64>(&all, "uptime_in_seconds");
    field::<u64>(&all, "server_time_usec");
    let run_id: String = field(&all, "run_id");
    assert!(is_hex_id(&run_id), "{run_id}");
    assert_eq!(
        field::<String>(&info(&mut con, &["server"]), "run_id"),
        run_id
    );

    assert_eq!(field::<u64>(&all, "connected_clients"), 1);
    assert_eq!(field::<u64>(&all, "blocked_clients"), 0);
    assert_eq!(field::<u64>(&all, "maxclients"), 77);
    field::<u64>(&all, "client_recent_max_input_buffer");

    let used: u64 = field(&all, "used_memory");
    let peak: u64 = field(&all, "used_memory_peak");
    assert!(used > 0 && peak >= used, "used {used}, peak {peak}");
    assert!(field::<u64>(&all, "used_memory_rss") > 0);
    assert_eq!(field::<u64>(&all, "maxmemory"), 0);
    assert_eq!(field::<String>(&all, "maxmemory_policy"), "noeviction");
    assert!(field::<f64>(&all, "mem_fragmentation_ratio") > 0.0);
    assert!(field::<String>(&all, "mem_allocator").starts_with("jemalloc-"));
    assert!(field::<String>(&all, "used_memory_human").ends_with(['B', 'K', 'M', 'G']));
    assert_eq!(field::<u64>(&all, "evicted_keys"), 0);
}

#[test]
fn persistence_replication_cpu_and_cluster_fields_parse() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(&mut con, "run", "worker", 0.0).expect("a free run");
    let all = info(&mut con, &[]);

    assert_eq!(field::<u32>(&all, "loading"), 0);
    assert_eq!(field::<u32>(&all, "rdb_bgsave_in_progress"), 0);
    assert_eq!(field::<u64>(&all, "rdb_changes_since_last_save"), 0);
    assert_eq!(field::<String>(&all, "rdb_last_bgsave_status"), "ok");
    assert_eq!(field::<i64>(&all, "rdb_last_bgsave_time_sec"), -1);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let last_save: u64 = field(&all, "rdb_last_save_time");
    assert!(last_save <= now && last_save + 3600 > now, "{last_save}");
    assert_eq!(field::<u32>(&all, "aof_enabled"), 1);
    assert_eq!(field::<String>(&all, "aof_last_write_status"), "ok");
    assert_eq!(field::<String>(&all, "aof_last_bgrewrite_status"), "ok");
    assert!(field::<u64>(&all, "aof_current_size") > 0);
    assert_eq!(field::<i64>(&all, "aof_last_rewrite_time_sec"), -1);

    assert_eq!(field::<String>(&all, "role"), "master");
    assert_eq!(field::<u64>(&all, "connected_slaves"), 0);
    assert_eq!(field::<u64>(&all, "master_repl_offset"), 0);
    let replid: String = field(&all, "master_replid");
    assert!(is_hex_id(&replid) && replid != field::<String>(&all, "run_id"));

    for name in [
        "used_cpu_sys",
        "used_cpu_user",
        "used_cpu_sys_children",
        "used_cpu_user_children",
    ] {
        let text: String = field(&all, name);
        let (_, micros) = text.split_once('.').expect("seconds.micros");
        assert_eq!(micros.len(), 6, "{name}:{text}");
        assert!(field::<f64>(&all, name) >= 0.0);
    }
    let cpu = field::<f64>(&all, "used_cpu_sys") + field::<f64>(&all, "used_cpu_user");
    assert!(cpu > 0.0, "the server has run, so it has used CPU");
    assert_eq!(field::<u32>(&all, "cluster_enabled"), 0);

    // Without the log, its fields say so, as Redis's do.
    let server = Server::start_with(&["--appendonly", "no"]);
    let mut con = server.connect();
    let persistence = info(&mut con, &["persistence"]);
    assert_eq!(field::<u32>(&persistence, "aof_enabled"), 0);
    assert_eq!(field::<u32>(&persistence, "aof_rewrite_in_progress"), 0);
    assert_eq!(field::<String>(&persistence, "aof_last_write_status"), "ok");
    assert!(!persistence.contains_key(&"aof_current_size"));
}

#[test]
fn resp3_carries_info_as_verbatim_text_that_parses_alike() {
    let server = Server::start();
    let mut con = server.connect_resp3();
    acquire(&mut con, "run", "worker", 0.0).expect("a free run");
    let reply: Value = redis::cmd("INFO").query(&mut con).unwrap();
    let Value::VerbatimString { text, .. } = &reply else {
        panic!("INFO in RESP3 gave {reply:?}");
    };
    assert_eq!(headers(text), default_headers());
    let parsed: InfoDict = redis::from_redis_value(reply).unwrap();
    assert_eq!(field::<String>(&parsed, "role"), "master");
    assert_eq!(
        field::<String>(&parsed, "db0"),
        "keys=1,expires=1,avg_ttl=0"
    );
    assert_eq!(field::<u64>(&parsed, "leases"), 1);
}

#[test]
fn keyspace_counts_leases_until_they_are_gone() {
    let server = Server::start();
    let mut con = server.connect();
    let keyspace = |con: &mut Connection| info_text(con, &["keyspace"]);
    assert_eq!(keyspace(&mut con), "# Keyspace\r\n");
    for run_id in ["a", "b", "c"] {
        acquire(&mut con, run_id, "worker", 0.0).expect("a free run");
    }
    assert_eq!(
        keyspace(&mut con),
        "# Keyspace\r\ndb0:keys=3,expires=3,avg_ttl=0\r\n"
    );
    let released: i64 = redis::cmd("LEASE.RELEASE")
        .arg("a:worker:1")
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(released, 1);
    assert!(keyspace(&mut con).contains("db0:keys=2,expires=2,"));
    for (lease_id, token) in [("b:worker:2", 2), ("c:worker:3", 3)] {
        let _: i64 = redis::cmd("LEASE.RELEASE")
            .arg(lease_id)
            .arg(token)
            .query(&mut con)
            .unwrap();
    }
    assert_eq!(keyspace(&mut con), "# Keyspace\r\n");
}

/// A raw client: sends a request and reads its reply's bytes.
struct Raw {
    stream: std::net::TcpStream,
    reader: BufReader<std::net::TcpStream>,
}

impl Raw {
    fn new(server: &Server) -> Raw {
        let stream = server.raw();
        let reader = BufReader::new(stream.try_clone().unwrap());
        Raw { stream, reader }
    }

    fn call(&mut self, request: &[u8]) -> Vec<u8> {
        self.stream.write_all(request).unwrap();
        read_frame(&mut self.reader).unwrap()
    }

    /// `INFO stats`, and the length of its reply.
    fn stats(&mut self) -> (InfoDict, usize) {
        let frame = self.call(&resp(&[b"INFO", b"stats"]));
        (InfoDict::new(&String::from_utf8_lossy(&frame)), frame.len())
    }
}

#[test]
fn commands_connections_and_bytes_are_counted_exactly() {
    let server = Server::start();
    let mut con = Raw::new(&server);
    let request = resp(&[b"INFO", b"stats"]);
    let (before, before_len) = con.stats();
    let ping = resp(&[b"PING"]);
    let pong = con.call(&ping);
    assert_eq!(pong, b"+PONG\r\n");
    let (after, _) = con.stats();

    let delta = |name: &str| field::<u64>(&after, name) - field::<u64>(&before, name);
    // The PING and the second INFO, which counts itself.
    assert_eq!(delta("total_commands_processed"), 2);
    assert_eq!(delta("total_connections_received"), 0);
    assert_eq!(
        delta("total_net_input_bytes"),
        (ping.len() + request.len()) as u64
    );
    // The first INFO's reply and the PONG were written before the second
    // INFO ran.
    assert_eq!(
        delta("total_net_output_bytes"),
        (before_len + pong.len()) as u64
    );

    // A new client counts once, and while it is connected.
    let mut other = server.connect();
    let _: String = redis::cmd("PING").query(&mut other).unwrap();
    let (now, _) = con.stats();
    assert_eq!(
        field::<u64>(&now, "total_connections_received"),
        field::<u64>(&after, "total_connections_received") + 1
    );
    let mut resp2 = server.connect();
    assert_eq!(number(&mut resp2, "clients", "connected_clients"), 3);
    drop(other);
    wait_until(PATIENCE, || {
        match number(&mut resp2, "clients", "connected_clients") {
            2 => Ok(()),
            n => Err(format!("the closed client is still counted: {n}")),
        }
    });
}

#[test]
fn lookups_are_keyspace_hits_and_misses() {
    let server = Server::start();
    let mut con = server.typed();
    let lease = con.acquire("run", "worker", Some(0.0), None).unwrap();
    let stats = |con: &mut Client| {
        let stats = info(con, &["stats"]);
        (
            field::<u64>(&stats, "keyspace_hits"),
            field::<u64>(&stats, "keyspace_misses"),
        )
    };
    assert_eq!(stats(&mut con), (0, 0));
    assert!(con.get("run", Some(1.0)).is_some());
    assert_eq!(con.get("nobody", Some(1.0)), None);
    assert_eq!(stats(&mut con), (1, 1));
    assert!(con.validate("run", &lease, Some(2.0)));
    assert!(con.heartbeat(&lease, Some(3.0)));
    let wrong_token = Lease {
        fencing_token: 9,
        ..lease.clone()
    };
    assert!(!con.heartbeat(&wrong_token, Some(3.0)));
    let validate = ["LEASE.VALIDATE", "x", "x:worker:1", "1", "3"];
    assert_eq!(con.run(&validate), Value::Int(0));
    assert_eq!(stats(&mut con), (3, 3));
    // Neither acquires nor releases are lookups.
    let other = con.acquire("other", "worker", Some(3.0), None).unwrap();
    assert!(con.release(&other));
    assert_eq!(stats(&mut con), (3, 3));
}

#[tokio::test(start_paused = true)]
async fn reclaimed_leases_are_expired_keys() {
    let server = InProcess::start(&["--lease-retention", "5"]).await;
    let mut con = server.client().await;
    con.acquire("abandoned", "worker", Some(0.0), None)
        .await
        .unwrap();
    con.acquire("kept", "worker", Some(12.0), None)
        .await
        .unwrap();
    assert_eq!(con.info("stats").await["expired_keys"], "0");
    // Registry time past 10 + 5: the reclaim takes the first.
    assert!(con.get("kept", Some(16.0)).await.is_some());
    settle().await;
    assert_eq!(con.info("stats").await["expired_keys"], "1");
    let all = con.info("default").await;
    assert_eq!(all["leases_reclaimed"], "1");
    assert_eq!(all["db0"], "keys=1,expires=1,avg_ttl=0");
}

#[test]
fn a_maxclients_refusal_is_a_rejected_connection() {
    let server = Server::start_with(&["--maxclients", "1"]);
    let mut con = server.connect();
    assert_eq!(number(&mut con, "stats", "rejected_connections"), 0);
    let mut refused = server.raw();
    assert_eq!(
        common::raw::read_to_close(&mut refused),
        b"-ERR max number of clients reached\r\n"
    );
    let stats = info(&mut con, &["stats"]);
    assert_eq!(field::<u64>(&stats, "rejected_connections"), 1);
    // As in Redis, a refused connection was never received.
    assert_eq!(field::<u64>(&stats, "total_connections_received"), 1);
}

/// Moves the server's clock on to its next sample of the rates (every
/// 100 ms, `hz` 10), and lets it take the sample.
async fn next_sample() {
    advance(Duration::from_millis(100)).await;
    settle().await;
}

/// The test moves the server's clock on instead of waiting for samples.
#[tokio::test(start_paused = true)]
async fn instantaneous_rates_follow_the_load() {
    let server = InProcess::start(&[]).await;
    let mut watcher = server.client().await;
    let mut load = server.client().await;
    let rates = |stats: &HashMap<String, String>| -> (u64, f64, f64) {
        let number = |name: &str| stats[name].clone();
        (
            number("instantaneous_ops_per_sec").parse().unwrap(),
            number("instantaneous_input_kbps").parse().unwrap(),
            number("instantaneous_output_kbps").parse().unwrap(),
        )
    };
    assert_eq!(rates(&watcher.info("stats").await), (0, 0.0, 0.0));
    // A pipeline of 100 PINGs between samples, for five samples.
    for _ in 0..5 {
        let mut pipe = redis::pipe();
        for _ in 0..100 {
            pipe.cmd("PING");
        }
        let _: Vec<String> = pipe.query_async(&mut load.con).await.unwrap();
        next_sample().await;
    }
    let (ops, input, output) = rates(&watcher.info("stats").await);
    // 501 commands (the first INFO and the PINGs) in five samples of 0.1 s,
    // averaged over the ring of 16: 5010 / 16 = 313 a second.
    assert_eq!(ops, 313, "{ops} {input} {output}");
    assert!(input > 0.0 && output > 0.0, "{input} {output}");
    // Idle again but for the INFO just above, which falls into the first
    // of these samples: the 16 averaged after them are all idle.
    for _ in 0..17 {
        next_sample().await;
    }
    let (ops, _, _) = rates(&watcher.info("stats").await);
    assert_eq!(ops, 0, "the rate stayed up");
}

#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn redis_cli_reads_info_replication() {
    let server = Server::start();
    let output = Command::new("redis-cli")
        .args(["-p", &server.port.to_string(), "info", "replication"])
        .output()
        .expect("redis-cli is installed (apt-get install redis-tools)");
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.starts_with("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"),
        "{text}"
    );
}

/// `redis-cli --stat` prints a line per interval from INFO: its keys
/// column is the lease count, its clients column the connected clients.
#[test]
#[ignore = "needs redis-cli (Debian: apt-get install redis-tools); run with --include-ignored"]
fn redis_cli_stat_shows_the_leases_as_keys() {
    let server = Server::start();
    let mut con = server.connect();
    for run_id in ["a", "b", "c", "d"] {
        acquire(&mut con, run_id, "worker", 0.0).expect("a free run");
    }
    // Line-buffered: redis-cli does not flush its output into a pipe.
    let mut child = Command::new("stdbuf")
        .args(["-oL", "redis-cli", "-p", &server.port.to_string()])
        .args(["--stat", "-i", "0.2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("stdbuf and redis-cli are installed");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    let row = loop {
        let Some(Ok(line)) = lines.next() else {
            let _ = child.kill();
            panic!("redis-cli --stat ended: {seen:?}");
        };
        if line.starts_with(|c: char| c.is_ascii_digit()) {
            break line;
        }
        seen.push(line);
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(seen.iter().any(|l| l.contains("keys")), "{seen:?}");
    let columns: Vec<&str> = row.split_whitespace().collect();
    // keys, mem, clients, blocked, requests (+delta), connections
    assert_eq!(columns[0], "4", "{row}");
    assert!(columns[1].ends_with(['B', 'K', 'M', 'G']), "{row}");
    assert_eq!(columns[2], "2", "{row}");
    assert_eq!(columns[3], "0", "{row}");
    columns[4].parse::<u64>().expect("requests");
}
