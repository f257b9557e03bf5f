//! Measures how much reclaiming a mass of leases at once holds up clients.
//!
//!     cargo run --release --example expiry_stall -- --port PORT [options]
//!
//! Against a running leased (start it with a short `--lease-retention`,
//! e.g. 1, and `--auto-aof-rewrite-percentage 0` so that no rewrite runs
//! meanwhile), it loads `--leases` leases (1,000,000 by default) that all
//! expire at the same instant: each is acquired with the same explicit
//! `now` and TTL. Two probe connections loop all the while, recording
//! every latency: one sends `LEASE.GET` of a long-lived lease, answered by
//! the core thread (which also does the reclaiming), one sends `PING`,
//! answered by the connection alone. Their latencies while loading show
//! what the table's growth costs. After a quiet baseline, one
//! `LEASE.GET ... now` moves registry time past the leases' expiry plus
//! retention, so every one of them is due for reclaiming at that moment;
//! the program polls `INFO leases` until they are all gone and prints, per
//! probe, the latencies while loading, before and during the reclaiming
//! (p50, p99, max),
//! with `used_memory` before and after.
//!
//! Options: `--leases N`, `--batch N` (10000), `--ttl SECONDS` (60),
//! `--baseline-ms MS` (1000), `--after-ms MS` (500), `--host HOST`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use redis::{Client, Value};

#[path = "support/mod.rs"]
mod support;
use support::{
    Error, before_and_during, connect, info, millis, number, print_header, probe_loop, summary,
};

struct Options {
    host: String,
    port: u16,
    leases: usize,
    batch: usize,
    ttl: u64,
    baseline: Duration,
    after: Duration,
}

fn parse_options() -> Result<Options, Error> {
    let mut options = Options {
        host: "127.0.0.1".into(),
        port: 0,
        leases: 1_000_000,
        batch: 10_000,
        ttl: 60,
        baseline: Duration::from_millis(1000),
        after: Duration::from_millis(500),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--host" => options.host = value()?,
            "--port" => options.port = value()?.parse()?,
            "--leases" => options.leases = value()?.parse()?,
            "--batch" => options.batch = value()?.parse()?,
            "--ttl" => options.ttl = value()?.parse()?,
            "--baseline-ms" => options.baseline = Duration::from_millis(value()?.parse()?),
            "--after-ms" => options.after = Duration::from_millis(value()?.parse()?),
            _ => return Err(format!("unknown option {flag} (see the top of the source)").into()),
        }
    }
    if options.port == 0 {
        return Err("--port PORT is required: the port of a running leased".into());
    }
    if options.batch == 0 || options.leases == 0 {
        return Err("--leases and --batch must be positive".into());
    }
    Ok(options)
}

async fn retention(con: &mut MultiplexedConnection) -> Result<u64, Error> {
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("lease-retention")
        .query_async(con)
        .await?;
    let seconds: u64 = pair
        .get(1)
        .ok_or("no lease-retention in CONFIG GET")?
        .parse()?;
    if seconds == 0 {
        return Err("lease-retention is 0 (keep forever): nothing would be reclaimed".into());
    }
    Ok(seconds)
}

async fn leases(con: &mut MultiplexedConnection) -> Result<(i64, i64), Error> {
    let section = info(con, "leases").await?;
    Ok((
        number(&section, "leases")?,
        number(&section, "leases_reclaimed")?,
    ))
}

/// Loads the leases from a runtime of its own on its own thread: parsing
/// 10,000 replies at a time must not hold up the probes' runtime, or the
/// probes would measure the client.
fn load_apart(
    client: Client,
    prefix: String,
    now: u64,
    ttl: u64,
    leases: usize,
    batch: usize,
) -> Result<(), Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut con = connect(&client).await?;
        support::load(&mut con, leases, batch, |pipe, i| {
            pipe.cmd("LEASE.ACQUIRE")
                .arg(format!("{prefix}{i}"))
                .arg("w")
                .arg(now)
                .arg("TTL")
                .arg(ttl);
        })
        .await
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Error> {
    let options = parse_options()?;
    let client = Client::open(format!("redis://{}:{}/", options.host, options.port))?;
    let mut control = connect(&client).await?;
    let retention = retention(&mut control).await?;

    let start = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let prefix = format!("expiry-{start}-");
    let probe_run = format!("{prefix}probe");
    let ttl = options.ttl;
    support::load(&mut control, 1, 1, |pipe, _| {
        pipe.cmd("LEASE.ACQUIRE")
            .arg(&probe_run)
            .arg("probe")
            .arg(start)
            .arg("TTL")
            .arg(10 * 365 * 86_400);
    })
    .await?;
    let epoch = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    // With the loading's `now`: the server's clock would move registry
    // time on, and the leases loaded later would expire later.
    let mut get = redis::cmd("LEASE.GET");
    get.arg(&probe_run).arg(start);
    let probes = [("LEASE.GET", get), ("PING", redis::cmd("PING"))];
    let mut tasks = Vec::new();
    for (label, command) in probes {
        let con = connect(&client).await?;
        let check = |reply: &Value| match reply {
            Value::Nil => Err("the probe lease is gone".into()),
            _ => Ok(()),
        };
        let task = tokio::spawn(probe_loop(
            con,
            move |_| command.clone(),
            check,
            epoch,
            stop.clone(),
        ));
        tasks.push((label, task));
    }

    let load_started = epoch.elapsed();
    let loader = {
        let (client, prefix) = (client.clone(), prefix.clone());
        let (leases, batch) = (options.leases, options.batch);
        std::thread::spawn(move || load_apart(client, prefix, start, ttl, leases, batch))
    };
    tokio::task::spawn_blocking(move || loader.join())
        .await?
        .map_err(|_| "the loading thread panicked")??;
    let load_finished = epoch.elapsed();
    let loaded = load_finished - load_started;
    let (held, reclaimed_before) = leases(&mut control).await?;
    let memory_before = number(&info(&mut control, "memory").await?, "used_memory")?;
    println!(
        "loaded {} leases expiring at {} in {:.2} s; {held} leases held, used_memory {memory_before}",
        options.leases,
        start + ttl,
        loaded.as_secs_f64(),
    );

    tokio::time::sleep(options.baseline).await;
    // Past expiry plus retention, so every loaded lease is due at once.
    let due = start + ttl + retention + 1;
    let started = epoch.elapsed();
    let _: Value = redis::cmd("LEASE.GET")
        .arg(&probe_run)
        .arg(due)
        .query_async(&mut control)
        .await?;
    let reclaimed = loop {
        let (held, reclaimed) = leases(&mut control).await?;
        if held <= 1 {
            break reclaimed - reclaimed_before;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let finished = epoch.elapsed();
    tokio::time::sleep(options.after).await;
    stop.store(true, Ordering::Relaxed);
    let memory_after = number(&info(&mut control, "memory").await?, "used_memory")?;

    println!(
        "reclaimed {reclaimed} leases in {:.1} ms (INFO leases polled every 5 ms); \
         used_memory {memory_before} -> {memory_after}",
        millis(finished - started)
    );
    print_header();
    for (label, task) in tasks {
        let samples = task.await??;
        let load_window = samples
            .iter()
            .copied()
            .filter(|s| s.sent < load_finished && s.done() > load_started);
        summary(label, "load", loaded, load_window);
        before_and_during(
            label,
            "reclaim",
            &samples,
            options.baseline,
            started,
            finished,
        );
    }
    Ok(())
}
