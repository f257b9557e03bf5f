//! A worker that holds a lease on its run while it works (`redis` crate, tokio).
//!
//!     cargo run --example worker -- --port 6479 --run run-42 --db checkpoints.db [--wait 30]
//!
//! It acquires the run, heartbeats in the background at a third of the TTL,
//! and checkpoints its progress into a SQLite table, each write stamped with
//! its fencing token, and into leased, as the run's data (`LEASE.SETDATA`).
//! It acquires `WITHDATA`: a run that has a checkpoint (a worker before it
//! stopped, crashed or was stalled past its TTL) is resumed at the step after
//! it. It stops writing the moment a heartbeat or a `LEASE.SETDATA` fails,
//! and releases the lease when done. If the run is held by another worker it
//! exits, or with `--wait SECONDS` waits up to that long for it (a blocking
//! `LEASE.ACQUIRE ... BLOCK ms`): the server hands it the run the moment the
//! holder releases it or its lease expires, with the next fencing token.
//! examples/worker.py is the same worker in Python, with the same options,
//! outputs, exit codes, table and checkpoint format: the two can share one
//! database file, and either resumes a run the other left.
//!
//! Exit codes: 0 finished (or nothing left to do), 3 the run is held by
//! another worker (with `--wait`: still held when the wait ran out), 4 lease
//! lost (a heartbeat or a `LEASE.SETDATA` failed; stopped writing), 5 a write
//! rejected by the storage (stale token), 1 any other error; 2 bad options.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Parser;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};
use rusqlite::{Connection, params};

const HELD: u8 = 3;
const LOST: u8 = 4;
const REJECTED: u8 = 5;

/// How much longer than the server's answer to a blocked acquire may take
/// (the end of the block) the worker waits for it before it gives up.
const REPLY_MARGIN: Duration = Duration::from_secs(5);
/// The longest `--wait`, about 31 years: its milliseconds and timeouts stay
/// far within what the server and the clients can count.
const MAX_WAIT: f64 = 1e9;

/// A lease as the server sends it (RESP3: a map).
type LeaseMap = HashMap<String, Value>;

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS checkpoints (
    run TEXT PRIMARY KEY, step INTEGER NOT NULL, token INTEGER NOT NULL, worker TEXT NOT NULL)";

// The fencing check is made by the storage, in the same statement as the
// write. The worker cannot make it: it may be paused (GC, a suspended VM) or
// cut off between its last good heartbeat and the write, and does not know
// that its lease expired and the run has a new owner with a higher token.
// A write whose token is older than the row's changes no row.
const CHECKPOINT: &str =
    "INSERT INTO checkpoints (run, step, token, worker) VALUES (?1, ?2, ?3, ?4)
    ON CONFLICT (run) DO UPDATE
    SET step = excluded.step, token = excluded.token, worker = excluded.worker
    WHERE excluded.token >= checkpoints.token";

// The run's data in leased is the last checkpoint written: `step=N`, in
// ASCII, N the step's number (a decimal integer, 0 or more). The next holder
// starts at step N + 1. examples/worker.py writes and reads the same.
fn encode_checkpoint(step: u32) -> Vec<u8> {
    format!("step={step}").into_bytes()
}

/// The step of a `step=N` checkpoint.
fn decode_checkpoint(data: &[u8]) -> Result<u32, String> {
    data.strip_prefix(b"step=")
        .filter(|step| !step.is_empty() && step.iter().all(u8::is_ascii_digit))
        .and_then(|step| std::str::from_utf8(step).ok()?.parse().ok())
        .ok_or_else(|| {
            let data = String::from_utf8_lossy(data);
            format!("the run's data is not a checkpoint: {data:?}")
        })
}

/// A worker that holds a lease on its run while it works.
#[derive(Parser)]
struct Options {
    /// leased's port on 127.0.0.1.
    #[arg(long, default_value_t = 6479)]
    port: u16,
    /// The run to work on.
    #[arg(long, default_value = "run-42")]
    run: String,
    /// The SQLite database file.
    #[arg(long, default_value = "checkpoints.db")]
    db: PathBuf,
    /// This worker's id.
    #[arg(long, default_value = "worker-rs")]
    worker: String,
    /// Lease TTL in seconds.
    #[arg(long, default_value_t = 3.0)]
    ttl: f64,
    /// Checkpoints to write.
    #[arg(long, default_value_t = 5)]
    steps: u32,
    /// Seconds of work per step.
    #[arg(long, default_value_t = 0.2)]
    interval: f64,
    /// Demonstration: stop the whole process (SIGSTOP) just before checkpoint K.
    #[arg(long, value_name = "K")]
    pause_before_write: Option<u32>,
    /// When the run is held, wait up to SECONDS for it instead of exiting 3.
    #[arg(long, value_name = "SECONDS", value_parser = positive_seconds)]
    wait: Option<f64>,
}

/// A wait: more than 0 seconds, at most [`MAX_WAIT`].
fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds > 0.0 && seconds <= MAX_WAIT => Ok(seconds),
        _ => Err(format!("{text} is not a number of seconds in (0, 1e9]")),
    }
}

/// Writes the run's checkpoint; false if the storage rejected the token.
fn checkpoint(
    db: &Connection,
    run: &str,
    step: u32,
    token: i64,
    worker: &str,
) -> rusqlite::Result<bool> {
    Ok(db.execute(CHECKPOINT, params![run, step, token, worker])? == 1)
}

/// The step to start at: 0 on a run without data, else the one after the
/// checkpoint in its data (the lease map of an acquire `WITHDATA`).
fn first_step(lease: &LeaseMap) -> Result<u32, Box<dyn std::error::Error>> {
    let data: Option<Vec<u8>> = redis::from_redis_value(lease["data"].clone())?;
    let Some(data) = data else {
        println!("no checkpoint: starting at step 0");
        return Ok(0);
    };
    let last = decode_checkpoint(&data)?;
    let data_token: i64 = redis::from_redis_value(lease["data_token"].clone())?;
    println!("resuming after checkpoint {last} (written with token {data_token})");
    Ok(last.saturating_add(1))
}

/// Blocks until the server hands the run to this worker (its holder
/// released it, or its lease expired), or `wait` seconds pass: the lease, or
/// None.
async fn wait_for_run(
    client: &redis::Client,
    options: &Options,
    wait: f64,
) -> redis::RedisResult<Option<LeaseMap>> {
    println!("waiting up to {wait} s for {}", options.run);
    // A connection of its own, whose response timeout outlasts the wait.
    // The crate's default (half a second) or the heartbeat connection's
    // (a third of the TTL) would give up on the reply while the server
    // still holds the worker's place in the queue, and the run it may be
    // about to hand over would be lost. The heartbeat's connection keeps
    // its short timeout: there a slow reply must count as a failed
    // heartbeat.
    let timeout = Duration::from_secs_f64(wait) + REPLY_MARGIN;
    let config = AsyncConnectionConfig::new().set_response_timeout(Some(timeout));
    let mut waiting = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let block_ms = (wait * 1000.0).ceil() as u64;
    redis::cmd("LEASE.ACQUIRE")
        .arg(&options.run)
        .arg(&options.worker)
        .arg("TTL")
        .arg(options.ttl)
        .arg("BLOCK")
        .arg(block_ms)
        .arg("WITHDATA")
        .query_async(&mut waiting)
        .await
}

/// Stops the whole process, heartbeat task included, as a long GC pause
/// would; `kill -CONT` resumes it, straight on to the write.
fn pause(step: u32) {
    println!("pausing before checkpoint {step} (SIGSTOP)");
    // SAFETY: raise has no preconditions; SIGSTOP cannot be caught.
    unsafe { libc::raise(libc::SIGSTOP) };
}

/// Extends the lease every `period` until a heartbeat returns 0, fails or
/// times out; then sets `lost` and ends.
async fn heartbeat(
    mut con: MultiplexedConnection,
    lease_id: String,
    token: i64,
    period: Duration,
    lost: Arc<AtomicBool>,
) {
    loop {
        tokio::time::sleep(period).await;
        let extended: redis::RedisResult<i64> = redis::cmd("LEASE.HEARTBEAT")
            .arg(&lease_id)
            .arg(token)
            .query_async(&mut con)
            .await;
        if extended != Ok(1) {
            lost.store(true, Ordering::SeqCst);
            return;
        }
    }
}

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let options = Options::parse();
    let db = Connection::open(&options.db)?;
    db.execute(SCHEMA, [])?;
    let client = redis::Client::open(format!(
        "redis://127.0.0.1:{}/?protocol=resp3",
        options.port
    ))?;
    // A reply slower than the heartbeat period counts as a failed heartbeat.
    let period = Duration::from_secs_f64(options.ttl / 3.0);
    let config = AsyncConnectionConfig::new().set_response_timeout(Some(period));
    let mut con = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;

    let mut lease: Option<LeaseMap> = redis::cmd("LEASE.ACQUIRE")
        .arg(&options.run)
        .arg(&options.worker)
        .arg("TTL")
        .arg(options.ttl)
        .arg("WITHDATA")
        .query_async(&mut con)
        .await?;
    if lease.is_none()
        && let Some(wait) = options.wait
    {
        lease = wait_for_run(&client, &options, wait).await?;
    }
    let Some(lease) = lease else {
        println!("{} is held by another worker", options.run);
        return Ok(ExitCode::from(HELD));
    };
    let lease_id: String = redis::from_redis_value(lease["lease_id"].clone())?;
    let token: i64 = redis::from_redis_value(lease["fencing_token"].clone())?;
    println!("acquired {lease_id} (token {token})");
    let first = first_step(&lease)?;
    // A run whose checkpoint is its last step (its data stays after the
    // release that ends it) has nothing left to do: the worker releases it.
    if options.steps > 0 && first >= options.steps {
        println!(
            "run already complete: nothing to do after checkpoint {}",
            first - 1
        );
    }

    let lost = Arc::new(AtomicBool::new(false));
    let beats = tokio::spawn(heartbeat(
        con.clone(),
        lease_id.clone(),
        token,
        period,
        lost.clone(),
    ));

    for step in first..options.steps {
        if step > first {
            tokio::time::sleep(Duration::from_secs_f64(options.interval)).await; // the work
        }
        if lost.load(Ordering::SeqCst) {
            println!("lease lost: stopped writing before checkpoint {step}");
            return Ok(ExitCode::from(LOST));
        }
        if options.pause_before_write == Some(step) {
            pause(step);
        }
        if !checkpoint(&db, &options.run, step, token, &options.worker)? {
            println!("write rejected: checkpoint {step}'s token {token} is older than the table's");
            return Ok(ExitCode::from(REJECTED));
        }
        // Then the run's data, the hint the next holder resumes from. The
        // SQLite row comes first: it is the durable truth, fenced by the
        // token in the write itself. A worker that stops between the two
        // (a crash, or its lease lost) leaves the data a step behind the
        // row, and the next holder redoes that one step with its higher
        // token. The other order could leave data ahead of the row: a step
        // resumed after but never written.
        let stored: redis::RedisResult<i64> = redis::cmd("LEASE.SETDATA")
            .arg(&lease_id)
            .arg(token)
            .arg(encode_checkpoint(step))
            .query_async(&mut con)
            .await;
        if stored != Ok(1) {
            // An error or a timeout counts as a refusal: the lease may be gone.
            println!("lease lost: checkpoint {step} is in the table, but leased refused it");
            return Ok(ExitCode::from(LOST));
        }
        println!("wrote checkpoint {step} (token {token})");
    }

    beats.abort();
    let released: i64 = redis::cmd("LEASE.RELEASE")
        .arg(&lease_id)
        .arg(token)
        .query_async(&mut con)
        .await?;
    // The run's data stays (until lease-retention after this release, or a
    // LEASE.DELDATA): a worker that acquires the run again finds its last
    // step done, and does nothing.
    let written = options.steps.saturating_sub(first);
    println!("done: wrote {written} checkpoints (token {token}), released={released}");
    Ok(ExitCode::SUCCESS)
}
