//! Measures how much a log rewrite (BGREWRITEAOF) holds up leased's clients.
//!
//!     cargo run --release --example rewrite_pause -- --port PORT [options]
//!
//! Against a running leased (start it with `--auto-aof-rewrite-percentage 0`
//! so that only this program starts rewrites), it loads `--leases` leases
//! (1,000,000 by default, pipelined), then keeps two probe connections busy
//! in a tight loop, one sending `LEASE.GET` (answered by the core thread,
//! which also drives the rewrite) and one sending `PING` (answered by the
//! connection alone), each recording every request's latency. With
//! `--acquirers N`, N more connections acquire fresh runs in a loop
//! meanwhile, so the rewrite also has changes to carry over. After a quiet
//! baseline it sends BGREWRITEAOF, polls `INFO persistence` until the
//! rewrite has finished, and prints, per connection kind, the latencies of
//! the requests before the rewrite and of those in flight during it
//! (p50, p99, max), the rewrite's duration, and the log size before and
//! after.
//!
//! Options: `--leases N`, `--batch N` (commands per pipeline while loading,
//! 10000), `--acquirers N` (0), `--baseline-ms MS` (1000), `--after-ms MS`
//! (500), `--host HOST` (127.0.0.1).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use redis::{Client, Value};

#[path = "support/mod.rs"]
mod support;
use support::{
    Error, Sample, before_and_during, connect, field, millis, number, print_header, probe_loop,
};

struct Options {
    host: String,
    port: u16,
    leases: usize,
    batch: usize,
    acquirers: usize,
    baseline: Duration,
    after: Duration,
}

fn parse_options() -> Result<Options, Error> {
    let mut options = Options {
        host: "127.0.0.1".into(),
        port: 0,
        leases: 1_000_000,
        batch: 10_000,
        acquirers: 0,
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
            "--acquirers" => options.acquirers = value()?.parse()?,
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

async fn persistence(con: &mut MultiplexedConnection) -> Result<HashMap<String, String>, Error> {
    support::info(con, "persistence").await
}

/// Waits until no rewrite is under way.
async fn wait_idle(con: &mut MultiplexedConnection) -> Result<HashMap<String, String>, Error> {
    loop {
        let info = persistence(con).await?;
        if number(&info, "aof_rewrite_in_progress")? == 0 {
            return Ok(info);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Acquires `count` runs named `{prefix}{i}`, `batch` per pipeline.
async fn load_runs(
    con: &mut MultiplexedConnection,
    prefix: &str,
    count: usize,
    batch: usize,
) -> Result<(), Error> {
    support::load(con, count, batch, |pipe, i| {
        pipe.cmd("LEASE.ACQUIRE")
            .arg(format!("{prefix}{i}"))
            .arg("w")
            .arg("TTL")
            .arg(86_400);
    })
    .await
}

/// What a client loop sends.
#[derive(Clone)]
enum Load {
    /// The same command again and again.
    Repeat(redis::Cmd),
    /// LEASE.ACQUIRE of a new run every time, named after this prefix.
    Acquire(String),
}

async fn client_loop(
    con: MultiplexedConnection,
    load: Load,
    epoch: Instant,
    stop: Arc<AtomicBool>,
) -> Result<Vec<Sample>, Error> {
    let acquiring = matches!(load, Load::Acquire(_));
    let command = move |i: u64| match &load {
        Load::Repeat(command) => command.clone(),
        Load::Acquire(prefix) => {
            let mut command = redis::cmd("LEASE.ACQUIRE");
            command.arg(format!("{prefix}{i}")).arg("w");
            command
        }
    };
    let check = move |reply: &Value| {
        if acquiring && *reply == Value::Nil {
            return Err("an acquire of a fresh run was refused".into());
        }
        Ok(())
    };
    probe_loop(con, command, check, epoch, stop).await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Error> {
    let options = parse_options()?;
    let client = Client::open(format!("redis://{}:{}/", options.host, options.port))?;
    let mut control = connect(&client).await?;

    let tag = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let prefix = format!("pause-{tag}-");
    let loading = Instant::now();
    load_runs(&mut control, &prefix, options.leases, options.batch).await?;
    let loaded = loading.elapsed();
    println!(
        "loaded {} leases in {:.2} s ({:.0} acquires/s, pipelines of {})",
        options.leases,
        loaded.as_secs_f64(),
        options.leases as f64 / loaded.as_secs_f64(),
        options.batch
    );

    wait_idle(&mut control).await?;
    let leases: i64 = redis::cmd("DBSIZE").query_async(&mut control).await?;

    let epoch = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let mut get = redis::cmd("LEASE.GET");
    get.arg(format!("{prefix}0"));
    let mut kinds = vec![
        ("LEASE.GET".to_string(), Load::Repeat(get)),
        ("PING".to_string(), Load::Repeat(redis::cmd("PING"))),
    ];
    for n in 0..options.acquirers {
        kinds.push((
            format!("LEASE.ACQUIRE x{}", options.acquirers),
            Load::Acquire(format!("{prefix}acquirer-{n}-")),
        ));
    }
    let mut tasks = Vec::new();
    for (label, load) in kinds {
        let con = connect(&client).await?;
        let task = tokio::spawn(client_loop(con, load, epoch, stop.clone()));
        tasks.push((label, task));
    }

    tokio::time::sleep(options.baseline).await;
    let before = persistence(&mut control).await?;
    let rewrites_before = number(&before, "aof_rewrites")?;
    let started = epoch.elapsed();
    let reply: String = redis::cmd("BGREWRITEAOF").query_async(&mut control).await?;
    let answered = epoch.elapsed();
    let after = loop {
        let info = persistence(&mut control).await?;
        if number(&info, "aof_rewrite_in_progress")? == 0
            && number(&info, "aof_rewrites")? > rewrites_before
        {
            break info;
        }
        if field(&info, "aof_last_bgrewrite_status")? != "ok" {
            return Err("the rewrite failed: see the server's log".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let finished = epoch.elapsed();
    tokio::time::sleep(options.after).await;
    stop.store(true, Ordering::Relaxed);

    let mut results = Vec::new();
    for (label, task) in tasks {
        results.push((label, task.await??));
    }

    println!(
        "leases held: {leases}; appendfsync {}; BGREWRITEAOF: {reply:?} after {:.3} ms",
        field(&after, "aof_fsync").unwrap_or("?"),
        millis(answered - started)
    );
    println!(
        "rewrite took {:.3} s (from BGREWRITEAOF until INFO showed it finished, polled every 5 ms; \
         aof_last_rewrite_time_sec {})",
        (finished - started).as_secs_f64(),
        field(&after, "aof_last_rewrite_time_sec")?
    );
    println!(
        "log size right before BGREWRITEAOF: {} bytes; right after the rewrite: {} bytes",
        field(&before, "aof_current_size")?,
        field(&after, "aof_current_size")?
    );
    print_header();
    // Merge the acquirers into one row.
    let mut merged: Vec<(String, Vec<Sample>)> = Vec::new();
    for (label, samples) in results {
        match merged.iter_mut().find(|(l, _)| *l == label) {
            Some((_, all)) => all.extend(samples),
            None => merged.push((label, samples)),
        }
    }
    for (label, samples) in &merged {
        before_and_during(
            label,
            "rewrite",
            samples,
            options.baseline,
            started,
            finished,
        );
    }
    Ok(())
}
