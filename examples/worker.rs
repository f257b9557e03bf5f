//! A worker that holds a lease on its run while it works (`redis` crate, tokio).
//!
//!     cargo run --example worker -- --port 6479 --run run-42 --db checkpoints.db
//!
//! It acquires the run, heartbeats in the background at a third of the TTL,
//! and checkpoints its progress into a SQLite table, each write stamped with
//! its fencing token. It stops writing the moment a heartbeat fails, and
//! releases the lease when done. examples/worker.py is the same worker in
//! Python, with the same options, outputs, exit codes and table: the two can
//! share one database file.
//!
//! Exit codes: 0 finished, 3 the run is held by another worker, 4 lease lost
//! (stopped writing), 5 a write rejected by the storage (stale token), 1 any
//! other error.

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

    let lease: Option<HashMap<String, Value>> = redis::cmd("LEASE.ACQUIRE")
        .arg(&options.run)
        .arg(&options.worker)
        .arg("TTL")
        .arg(options.ttl)
        .query_async(&mut con)
        .await?;
    let Some(lease) = lease else {
        println!("{} is held by another worker", options.run);
        return Ok(ExitCode::from(HELD));
    };
    let lease_id: String = redis::from_redis_value(lease["lease_id"].clone())?;
    let token: i64 = redis::from_redis_value(lease["fencing_token"].clone())?;
    println!("acquired {lease_id} (token {token})");

    let lost = Arc::new(AtomicBool::new(false));
    let beats = tokio::spawn(heartbeat(
        con.clone(),
        lease_id.clone(),
        token,
        period,
        lost.clone(),
    ));

    for step in 0..options.steps {
        if step > 0 {
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
        println!("wrote checkpoint {step} (token {token})");
    }

    beats.abort();
    let released: i64 = redis::cmd("LEASE.RELEASE")
        .arg(&lease_id)
        .arg(token)
        .query_async(&mut con)
        .await?;
    println!(
        "done: wrote {} checkpoints (token {token}), released={released}",
        options.steps
    );
    Ok(ExitCode::SUCCESS)
}
