//! A worker that holds a lease on its run while it works (the `leased-client`
//! crate, clients/rust, on the `redis` crate with tokio).
//!
//!     cargo run --example worker -- --port 6479 --run run-42 --db checkpoints.db [--wait 30]
//!     cargo run --example worker -- --nodes 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 ...
//!
//! With `--nodes` it talks to a cluster: commands go to the node that last
//! answered; a follower's `-MOVED` sends them to the leader it names, a
//! node that cannot be reached to the next one, and `-TRYAGAIN` or
//! `-CLUSTERDOWN` (an election) is retried (the library, clients/rust).
//!
//! It acquires the run (the library heartbeats it in the background at a
//! third of the TTL), and checkpoints its progress into a SQLite table,
//! each write stamped with its fencing token, and into leased, as the run's
//! data (`LEASE.SETDATA`). It acquires `WITHDATA`: a run that has a
//! checkpoint (a worker before it stopped, crashed or was stalled past its
//! TTL) is resumed at the step after it. It checks the lease before each
//! write and stops writing once it is lost (a heartbeat refused, its
//! deadline passed, or a `LEASE.SETDATA` refused), and releases the lease
//! when done. If the run is held by another worker it exits, or with
//! `--wait SECONDS` waits up to that long for it (a blocking
//! `LEASE.ACQUIRE ... BLOCK ms`): the server hands it the run the moment
//! the holder releases it or its lease expires, with the next fencing
//! token.
//! examples/worker.py is the same worker in Python, with the same options,
//! outputs, exit codes, table and checkpoint format: the two can share one
//! database file, and either resumes a run the other left.
//!
//! Exit codes: 0 finished (or nothing left to do), 3 the run is held by
//! another worker (with `--wait`: still held when the wait ran out), 4 lease
//! lost (a heartbeat or a `LEASE.SETDATA` failed, or the lease's deadline
//! passed; stopped writing), 5 a write
//! rejected by the storage (stale token), 1 any other error; 2 bad options.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use leased_client::{Error, Lease, LeaseOptions, Registry, RegistryOptions};
use rusqlite::{Connection, params};

const HELD: u8 = 3;
const LOST: u8 = 4;
const REJECTED: u8 = 5;

/// The longest `--wait`, about 31 years: its milliseconds and timeouts stay
/// far within what the server and the clients can count.
const MAX_WAIT: f64 = 1e9;

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
    /// A cluster's nodes, `host:port` separated by commas (instead of
    /// `--port`).
    #[arg(long, value_delimiter = ',', value_name = "HOST:PORT,...")]
    nodes: Vec<String>,
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
/// checkpoint in its data (read with the acquire).
fn first_step(lease: &Lease) -> Result<u32, String> {
    let Some(data) = lease.data() else {
        println!("no checkpoint: starting at step 0");
        return Ok(0);
    };
    let last = decode_checkpoint(data)?;
    let data_token = lease.data_token().unwrap_or_default();
    println!("resuming after checkpoint {last} (written with token {data_token})");
    Ok(last.saturating_add(1))
}

/// The lease on the run: at once, or, with `--wait`, when the server hands
/// it over (a blocking acquire, on a connection of its own whose timeout
/// outlasts the wait); None when it is held.
async fn acquire(registry: &Registry, options: &Options) -> Result<Option<Lease>, Error> {
    let lease = LeaseOptions::new().ttl(Duration::from_secs_f64(options.ttl));
    let (run, worker) = (&options.run, &options.worker);
    match registry.lease(run, worker, lease.clone()).await {
        Err(Error::RunHeld { .. }) => {}
        acquired => return acquired.map(Some),
    }
    let Some(wait) = options.wait else {
        return Ok(None);
    };
    println!("waiting up to {wait} s for {run}");
    let waiting = lease.wait(Duration::from_secs_f64(wait));
    match registry.lease(run, worker, waiting).await {
        Err(Error::RunHeld { .. }) => Ok(None),
        acquired => acquired.map(Some),
    }
}

/// Stops the whole process, heartbeat task included, as a long GC pause
/// would; `kill -CONT` resumes it, straight on to the write.
fn pause(step: u32) {
    println!("pausing before checkpoint {step} (SIGSTOP)");
    // SAFETY: raise has no preconditions; SIGSTOP cannot be caught.
    unsafe { libc::raise(libc::SIGSTOP) };
}

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let options = Options::parse();
    let db = Connection::open(&options.db)?;
    db.execute(SCHEMA, [])?;
    let registry = if options.nodes.is_empty() {
        let url = format!("redis://127.0.0.1:{}/?protocol=resp3", options.port);
        Registry::connect(&url).await?
    } else {
        let urls = (options.nodes.iter()).map(|node| format!("redis://{node}/?protocol=resp3"));
        // Long enough for an election (about 2 s) and then some.
        let patient = RegistryOptions {
            retry_for: Duration::from_secs(10),
            ..RegistryOptions::default()
        };
        Registry::connect_with(urls, patient).await?
    };
    let Some(mut lease) = acquire(&registry, &options).await? else {
        println!("{} is held by another worker", options.run);
        return Ok(ExitCode::from(HELD));
    };
    let token = lease.token();
    println!("acquired {} (token {token})", lease.lease_id());
    let first = first_step(&lease)?;
    // A run whose checkpoint is its last step (its data stays after the
    // release that ends it) has nothing left to do: the worker releases it.
    if options.steps > 0 && first >= options.steps {
        println!(
            "run already complete: nothing to do after checkpoint {}",
            first - 1
        );
    }

    for step in first..options.steps {
        if step > first {
            tokio::time::sleep(Duration::from_secs_f64(options.interval)).await; // the work
        }
        if lease.check().is_err() {
            // A heartbeat was refused, or the deadline passed.
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
        // Then the run's data, the hint the next holder resumes from (the
        // row comes first: a stop between the two makes the next redo a step).
        if lease.checkpoint(encode_checkpoint(step)).await.is_err() {
            println!("lease lost: checkpoint {step} is in the table, but leased refused it");
            return Ok(ExitCode::from(LOST));
        }
        println!("wrote checkpoint {step} (token {token})");
    }

    // The run's data stays (until lease-retention after this release, or a
    // LEASE.DELDATA): a worker that acquires the run again finds its last
    // step done, and does nothing.
    let released = u8::from(lease.release().await?);
    let written = options.steps.saturating_sub(first);
    println!("done: wrote {written} checkpoints (token {token}), released={released}");
    Ok(ExitCode::SUCCESS)
}
