//! Measures how much a Raft snapshot holds up a cluster's clients.
//!
//!     cargo run --release --example snapshot_pause -- \
//!         --ports P1,P2,P3 --dirs DIR1,DIR2,DIR3 [options]
//!
//! Against a running three-node cluster (bench/snapshot_pause.sh starts
//! one), it loads `--leases` leases (1,400,000 by default, pipelined,
//! TTL one day) through the leader, then keeps probe connections to the
//! leader busy in a tight loop, one at a time each: `--probes` connections
//! acquiring fresh runs (each a log entry of its own, or nearly) and one
//! sending `PING` (answered by the connection alone). openraft's policy
//! builds a snapshot on every node every 5,000 entries, so the probes
//! bring one about: the program runs until the leader has saved a new
//! snapshot (its `raft/snapshot` file, under the node's `dir`, changed)
//! and `--after-ms` more, or `--timeout-s` passed.
//!
//! It prints per connection kind the latencies (p50, p99, max) over the
//! whole window, the slowest requests with when they were sent relative to
//! the leader's snapshot being saved, the requests refused (a leader that
//! lost its leadership answers `-TRYAGAIN` or `-UNCERTAIN`), and each
//! node's term and leader before and after: a changed term means an
//! election happened during the window.
//!
//! Options: `--leases N`, `--batch N` (commands per pipeline while
//! loading, 10000), `--probes N` (2), `--after-ms MS` (1000),
//! `--timeout-s S` (120), `--host HOST` (127.0.0.1).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use redis::{Client, Value};

#[path = "support/mod.rs"]
mod support;
use support::{Error, columns, connect, millis};

struct Options {
    host: String,
    ports: Vec<u16>,
    dirs: Vec<PathBuf>,
    leases: usize,
    batch: usize,
    probes: usize,
    after: Duration,
    timeout: Duration,
}

fn parse_options() -> Result<Options, Error> {
    let mut options = Options {
        host: "127.0.0.1".into(),
        ports: Vec::new(),
        dirs: Vec::new(),
        leases: 1_400_000,
        batch: 10_000,
        probes: 2,
        after: Duration::from_millis(1000),
        timeout: Duration::from_secs(120),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--host" => options.host = value()?,
            "--ports" => {
                options.ports = (value()?.split(',').map(str::parse)).collect::<Result<_, _>>()?
            }
            "--dirs" => options.dirs = value()?.split(',').map(PathBuf::from).collect(),
            "--leases" => options.leases = value()?.parse()?,
            "--batch" => options.batch = value()?.parse()?,
            "--probes" => options.probes = value()?.parse()?,
            "--after-ms" => options.after = Duration::from_millis(value()?.parse()?),
            "--timeout-s" => options.timeout = Duration::from_secs(value()?.parse()?),
            _ => return Err(format!("unknown option {flag} (see the top of the source)").into()),
        }
    }
    if options.ports.is_empty() || options.ports.len() != options.dirs.len() {
        return Err("--ports and --dirs name every node, in the same order".into());
    }
    if options.batch == 0 {
        return Err("--batch must be positive".into());
    }
    Ok(options)
}

/// One request: when it was sent (since the window began), how long its
/// reply took, and whether it was refused.
#[derive(Clone, Copy)]
struct Sample {
    sent: Duration,
    latency: Duration,
    refused: bool,
}

/// `CLUSTER INFO`'s term and leader id of the node on `con`.
async fn term_and_leader(con: &mut MultiplexedConnection) -> Result<(i64, i64), Error> {
    let text: String = redis::cmd("CLUSTER").arg("INFO").query_async(con).await?;
    let field = |name: &str| -> Result<i64, Error> {
        let line = (text.lines())
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .ok_or_else(|| format!("CLUSTER INFO has no {name}"))?;
        Ok(line.trim().parse()?)
    };
    Ok((field("cluster_term")?, field("cluster_leader_id")?))
}

/// The index (in `--ports`) of the node that says it leads.
async fn leader(clients: &[Client]) -> Result<usize, Error> {
    for _ in 0..100 {
        for (at, client) in clients.iter().enumerate() {
            let mut con = connect(client).await?;
            let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut con).await?;
            if matches!(role.first(), Some(Value::BulkString(name)) if name == b"master") {
                return Ok(at);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err("no node says it leads".into())
}

/// Acquires `count` runs named `{prefix}{i}`, `batch` per pipeline; counts
/// the acquires refused (during an election) instead of failing.
async fn load(
    con: &mut MultiplexedConnection,
    prefix: &str,
    count: usize,
    batch: usize,
) -> Result<usize, Error> {
    let mut refused = 0;
    let mut next = 0;
    while next < count {
        let end = (next + batch).min(count);
        let mut pipe = redis::pipe();
        for i in next..end {
            pipe.cmd("LEASE.ACQUIRE")
                .arg(format!("{prefix}{i}"))
                .arg("w")
                .arg("TTL")
                .arg(86_400);
        }
        match pipe.query_async::<Vec<Value>>(con).await {
            Ok(replies) => {
                refused += (replies.iter())
                    .filter(|reply| matches!(reply, Value::Nil | Value::ServerError(_)))
                    .count()
            }
            Err(error) if lost(&error) => return Err(error.into()),
            Err(_) => refused += end - next,
        }
        next = end;
    }
    Ok(refused)
}

/// Sends commands one at a time until `stop`, timing each.
async fn probe(
    mut con: MultiplexedConnection,
    acquire: Option<String>,
    epoch: Instant,
    stop: Arc<AtomicBool>,
) -> Result<Vec<Sample>, Error> {
    let mut samples = Vec::with_capacity(1 << 16);
    let mut i: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        let command = match &acquire {
            Some(prefix) => {
                let mut command = redis::cmd("LEASE.ACQUIRE");
                command.arg(format!("{prefix}{i}")).arg("w");
                command
            }
            None => redis::cmd("PING"),
        };
        let sent = Instant::now();
        let reply = command.query_async::<Value>(&mut con).await;
        samples.push(Sample {
            sent: sent - epoch,
            latency: sent.elapsed(),
            refused: refused(reply)?,
        });
        i += 1;
    }
    Ok(samples)
}

/// Whether a reply is a refusal (nil or an error: `-TRYAGAIN`,
/// `-UNCERTAIN`); fails if the connection is gone.
fn refused(reply: redis::RedisResult<Value>) -> Result<bool, Error> {
    match reply {
        Ok(reply) => Ok(matches!(reply, Value::Nil | Value::ServerError(_))),
        Err(error) if lost(&error) => Err(error.into()),
        Err(_) => Ok(true),
    }
}

fn lost(error: &redis::RedisError) -> bool {
    error.is_io_error() || error.is_connection_dropped() || error.is_connection_refusal()
}

/// `DBSIZE` through the log, tried again while it is refused.
async fn dbsize(con: &mut MultiplexedConnection) -> Result<i64, Error> {
    for _ in 0..30 {
        match redis::cmd("DBSIZE").query_async::<i64>(con).await {
            Ok(size) => return Ok(size),
            Err(error) if lost(&error) => return Err(error.into()),
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
    Err("DBSIZE refused for 30 s".into())
}

fn modified(dir: &std::path::Path) -> Option<SystemTime> {
    std::fs::metadata(dir.join("raft").join("snapshot"))
        .and_then(|meta| meta.modified())
        .ok()
}

fn report(label: &str, samples: &[Sample], span: Duration, saved: Option<Duration>) {
    let mut latencies: Vec<Duration> = samples.iter().map(|s| s.latency).collect();
    latencies.sort_unstable();
    let refused = samples.iter().filter(|s| s.refused).count();
    if latencies.is_empty() {
        println!("{label:<22} no requests");
        return;
    }
    println!("{label:<22} {} {refused:>8}", columns(&latencies, span));
    let mut slowest = samples.to_vec();
    slowest.sort_by_key(|s| std::cmp::Reverse(s.latency));
    let slowest: Vec<String> = (slowest.iter().take(3))
        .map(|s| match saved {
            Some(saved) => format!(
                "{:.1} ms sent {:+.0} ms from the save",
                millis(s.latency),
                millis(s.sent) - millis(saved)
            ),
            None => format!("{:.1} ms", millis(s.latency)),
        })
        .collect();
    println!("{:<22} slowest: {}", "", slowest.join("; "));
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Error> {
    let options = parse_options()?;
    let clients: Vec<Client> = (options.ports.iter())
        .map(|port| Client::open(format!("redis://{}:{port}/", options.host)))
        .collect::<Result<_, _>>()?;
    let first = leader(&clients).await?;
    let mut control = connect(&clients[first]).await?;

    let tag = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let prefix = format!("snap-{tag}-");
    let loading = Instant::now();
    let refused = load(&mut control, &prefix, options.leases, options.batch).await?;
    let loaded = loading.elapsed();
    println!(
        "loaded {} leases ({refused} refused) in {:.2} s through node {}",
        options.leases,
        loaded.as_secs_f64(),
        first + 1
    );
    // The nodes' snapshots of the load, if any are being built, are done.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let at = leader(&clients).await?;
    let mut con = connect(&clients[at]).await?;
    let leases = dbsize(&mut con).await?;
    let mut terms = Vec::new();
    for client in &clients {
        terms.push(term_and_leader(&mut connect(client).await?).await?);
    }
    let before = modified(&options.dirs[at]);

    let epoch = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for n in 0..options.probes {
        let con = connect(&clients[at]).await?;
        let acquire = Some(format!("{prefix}probe-{n}-"));
        let task = tokio::spawn(probe(con, acquire, epoch, stop.clone()));
        tasks.push(("LEASE.ACQUIRE", task));
    }
    let con = connect(&clients[at]).await?;
    tasks.push(("PING", tokio::spawn(probe(con, None, epoch, stop.clone()))));

    let saved = loop {
        if modified(&options.dirs[at]) != before {
            break Some(epoch.elapsed());
        }
        if epoch.elapsed() > options.timeout {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    tokio::time::sleep(options.after).await;
    stop.store(true, Ordering::Relaxed);
    let span = epoch.elapsed();
    let mut results: Vec<(&str, Vec<Sample>)> = Vec::new();
    for (label, task) in tasks {
        let samples = task.await??;
        match results.iter_mut().find(|(l, _)| *l == label) {
            Some((_, all)) => all.extend(samples),
            None => results.push((label, samples)),
        }
    }

    println!(
        "leases held: {leases}; leader: node {}; window {:.2} s; {}",
        at + 1,
        span.as_secs_f64(),
        match saved {
            Some(saved) => format!(
                "the leader saved a snapshot {:.2} s into it",
                saved.as_secs_f64()
            ),
            None => "the leader saved no snapshot in it".into(),
        }
    );
    println!(
        "{:<22} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}",
        "connection", "requests", "req/s", "p50 ms", "p99 ms", "max ms", "refused"
    );
    for (label, samples) in &results {
        report(label, samples, span, saved);
    }
    for (n, client) in clients.iter().enumerate() {
        let (term, leader) = term_and_leader(&mut connect(client).await?).await?;
        let (was_term, was_leader) = terms[n];
        println!(
            "node {}: term {was_term} -> {term}, leader {was_leader} -> {leader}",
            n + 1
        );
    }
    Ok(())
}
