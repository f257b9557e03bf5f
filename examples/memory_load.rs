//! Loads leases into a server and reports what each costs in memory.
//!
//!     cargo run --release --example memory_load -- --port PORT [options]
//!
//! Against a fresh server, it reads `INFO memory`, loads `--leases` leases
//! (1,000,000 by default) in pipelines, waits until no log rewrite is under
//! way, reads `INFO memory` again and prints one CSV line:
//!
//!     target,ids,leases,used_memory_before,used_memory_after,
//!     bytes_per_lease_used,rss_before,rss_after,bytes_per_lease_rss
//!
//! Both leased and Redis report `used_memory` (what their allocator holds
//! for data) and `used_memory_rss` (the process's resident set, read from
//! /proc), so the two columns mean the same on both.
//!
//! Options:
//! - `--target leased` (default): `LEASE.ACQUIRE run worker TTL 86400`.
//! - `--target lua --sha SHA`: `EVALSHA SHA 0 ACQUIRE run worker TTL 86400`
//!   against a Redis with bench/lease.lua loaded.
//! - `--target set`: `SET run worker PX 86400000`, the plain Redis key.
//! - `--ids colon` (default): `run:000123` and `worker-23`;
//!   `--ids dash`: `run-0000124` and `worker-24`.
//! - `--leases N`, `--batch N` (10000 commands per pipeline),
//!   `--host HOST` (127.0.0.1).
//! - `--tenures K` (leased only): then, K times over, releases every
//!   lease and acquires its run again, so that each run keeps K past
//!   tenures (`LEASE.HISTORY`; K below `lease-history-len`), and prints a
//!   second CSV line: what the first round added per run (the run's
//!   entry and its first past tenure) and what each later past tenure
//!   added, as `history,ids,leases,tenures,bytes_first_per_run,`
//!   `bytes_per_later_tenure,run_history_entries`.

use std::time::Duration;

use redis::Client;
use redis::aio::MultiplexedConnection;

#[path = "support/mod.rs"]
mod support;
use support::{Error, connect, info, number};

#[derive(Clone, Copy, PartialEq)]
enum Target {
    Leased,
    Lua,
    Set,
}

#[derive(Clone, Copy)]
enum Ids {
    Colon,
    Dash,
}

struct Options {
    host: String,
    port: u16,
    target: Target,
    sha: String,
    ids: Ids,
    leases: usize,
    batch: usize,
    tenures: usize,
}

fn parse_options() -> Result<Options, Error> {
    let mut options = Options {
        host: "127.0.0.1".into(),
        port: 0,
        target: Target::Leased,
        sha: String::new(),
        ids: Ids::Colon,
        leases: 1_000_000,
        batch: 10_000,
        tenures: 0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--host" => options.host = value()?,
            "--port" => options.port = value()?.parse()?,
            "--sha" => options.sha = value()?,
            "--leases" => options.leases = value()?.parse()?,
            "--batch" => options.batch = value()?.parse()?,
            "--tenures" => options.tenures = value()?.parse()?,
            "--target" => {
                options.target = match value()?.as_str() {
                    "leased" => Target::Leased,
                    "lua" => Target::Lua,
                    "set" => Target::Set,
                    other => return Err(format!("unknown target {other}").into()),
                }
            }
            "--ids" => {
                options.ids = match value()?.as_str() {
                    "colon" => Ids::Colon,
                    "dash" => Ids::Dash,
                    other => return Err(format!("unknown id style {other}").into()),
                }
            }
            _ => return Err(format!("unknown option {flag} (see the top of the source)").into()),
        }
    }
    if options.port == 0 {
        return Err("--port PORT is required".into());
    }
    if options.target == Target::Lua && options.sha.is_empty() {
        return Err("--target lua needs --sha SHA of bench/lease.lua".into());
    }
    if options.tenures > 0 && options.target != Target::Leased {
        return Err("--tenures needs --target leased".into());
    }
    if options.batch == 0 {
        return Err("--batch must be positive".into());
    }
    Ok(options)
}

fn target_name(target: Target) -> &'static str {
    match target {
        Target::Leased => "leased",
        Target::Lua => "redis+lua",
        Target::Set => "redis SET PX",
    }
}

fn ids_name(ids: Ids) -> &'static str {
    match ids {
        Ids::Colon => "run:000123/worker-23",
        Ids::Dash => "run-0000124/worker-24",
    }
}

/// The run and worker ids of the `i`th lease.
fn ids(style: Ids, i: usize) -> (String, String) {
    match style {
        Ids::Colon => (format!("run:{i:06}"), format!("worker-{:02}", i % 100)),
        Ids::Dash => (
            format!("run-{:07}", i + 1),
            format!("worker-{:02}", (i + 1) % 100),
        ),
    }
}

fn acquire(options: &Options, pipe: &mut redis::Pipeline, i: usize) {
    let (run, worker) = ids(options.ids, i);
    match options.target {
        Target::Leased => {
            pipe.cmd("LEASE.ACQUIRE")
                .arg(run)
                .arg(worker)
                .arg("TTL")
                .arg(86_400);
        }
        Target::Lua => {
            pipe.cmd("EVALSHA")
                .arg(&options.sha)
                .arg(0)
                .arg("ACQUIRE")
                .arg(run)
                .arg(worker)
                .arg("TTL")
                .arg(86_400);
        }
        Target::Set => {
            pipe.cmd("SET")
                .arg(run)
                .arg(worker)
                .arg("PX")
                .arg(86_400_000);
        }
    }
}

/// Round `round` of `--tenures` for the `i`th run: releases its lease and
/// acquires the run again. The loader is the server's only client, so
/// the tokens are known: the `i`th acquire of round `r` (round 0 being the
/// first load) got token `r * leases + i + 1`.
fn retake(options: &Options, pipe: &mut redis::Pipeline, round: usize, i: usize) {
    let (run, worker) = ids(options.ids, i);
    let token = (round - 1) * options.leases + i + 1;
    pipe.cmd("LEASE.RELEASE")
        .arg(format!("{run}:{worker}:{token}"))
        .arg(token);
    acquire(options, pipe, i);
}

/// Memory after each round of `--tenures`, from `start` (the memory after
/// the first load); prints the history CSV line.
async fn measure_tenures(
    options: &Options,
    con: &mut MultiplexedConnection,
    start: i64,
) -> Result<(), Error> {
    let mut used = vec![start];
    for round in 1..=options.tenures {
        support::load(con, options.leases, options.batch / 2, |pipe, i| {
            retake(options, pipe, round, i)
        })
        .await?;
        wait_idle(con).await?;
        used.push(number(&info(con, "memory").await?, "used_memory")?);
    }
    let entries = number(&info(con, "memory").await?, "run_history_entries")?;
    let want = (options.leases * options.tenures) as i64;
    if entries != want {
        return Err(
            format!("{entries} past tenures kept, not {want}: was a release refused?").into(),
        );
    }
    let runs = options.leases as f64;
    let first = (used[1] - used[0]) as f64 / runs;
    let later = match options.tenures {
        1 => f64::NAN,
        k => (used[k] - used[1]) as f64 / (runs * (k - 1) as f64),
    };
    println!(
        "history,{},{},{},{first:.1},{later:.1},{entries}",
        ids_name(options.ids),
        options.leases,
        options.tenures,
    );
    Ok(())
}

/// Waits until no log rewrite is under way, so its buffers are not counted.
async fn wait_idle(con: &mut MultiplexedConnection) -> Result<(), Error> {
    loop {
        let persistence = info(con, "persistence").await?;
        if number(&persistence, "aof_rewrite_in_progress").unwrap_or(0) == 0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let options = parse_options()?;
    let client = Client::open(format!("redis://{}:{}/", options.host, options.port))?;
    let mut con = connect(&client).await?;

    wait_idle(&mut con).await?;
    let before = info(&mut con, "memory").await?;
    support::load(&mut con, options.leases, options.batch, |pipe, i| {
        acquire(&options, pipe, i)
    })
    .await?;
    wait_idle(&mut con).await?;
    // Let Redis finish any background work (its AOF rewrite child's exit).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = info(&mut con, "memory").await?;
    let held: i64 = redis::cmd("DBSIZE").query_async(&mut con).await?;

    let per_lease = |key: &str| -> Result<(i64, i64, f64), Error> {
        let (from, to) = (number(&before, key)?, number(&after, key)?);
        Ok((from, to, (to - from) as f64 / options.leases as f64))
    };
    let (used_from, used_to, used_each) = per_lease("used_memory")?;
    let (rss_from, rss_to, rss_each) = per_lease("used_memory_rss")?;
    println!(
        "{},{},{},{used_from},{used_to},{used_each:.1},{rss_from},{rss_to},{rss_each:.1}",
        target_name(options.target),
        ids_name(options.ids),
        options.leases,
    );
    eprintln!("keys held afterwards (DBSIZE): {held}");
    if options.tenures > 0 {
        measure_tenures(&options, &mut con, used_to).await?;
    }
    Ok(())
}
