//! What the measuring examples share: connections that wait as long as a
//! stall lasts, INFO fields, and latency samples with their percentiles.
//! Each example includes it with `#[path = "support/mod.rs"] mod support;`
//! and uses only part of it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Value};

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// A connection that waits for replies as long as it takes: the point is
/// to measure stalls, not to time out on them.
pub async fn connect(client: &Client) -> Result<MultiplexedConnection, Error> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(None);
    Ok(client
        .get_multiplexed_async_connection_with_config(&config)
        .await?)
}

/// The `key:value` lines of one INFO section.
pub async fn info(
    con: &mut MultiplexedConnection,
    section: &str,
) -> Result<HashMap<String, String>, Error> {
    let text: String = redis::cmd("INFO").arg(section).query_async(con).await?;
    Ok(text
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(key, value)| (key.to_string(), value.trim().to_string()))
        .collect())
}

pub fn field<'a>(info: &'a HashMap<String, String>, key: &str) -> Result<&'a str, Error> {
    info.get(key)
        .map(String::as_str)
        .ok_or_else(|| format!("INFO has no {key}").into())
}

pub fn number(info: &HashMap<String, String>, key: &str) -> Result<i64, Error> {
    Ok(field(info, key)?.parse()?)
}

/// When a request was sent (since the measurement began) and how long its
/// reply took.
#[derive(Clone, Copy)]
pub struct Sample {
    pub sent: Duration,
    pub latency: Duration,
}

impl Sample {
    pub fn done(&self) -> Duration {
        self.sent + self.latency
    }
}

/// Sends `command` in a loop until `stop`, one at a time, timing each.
/// `check` sees every reply and may reject it.
pub async fn probe_loop(
    mut con: MultiplexedConnection,
    mut command: impl FnMut(u64) -> redis::Cmd,
    check: impl Fn(&Value) -> Result<(), Error>,
    epoch: Instant,
    stop: Arc<AtomicBool>,
) -> Result<Vec<Sample>, Error> {
    let mut samples = Vec::with_capacity(1 << 16);
    let mut i: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        let command = command(i);
        let sent = Instant::now();
        let reply: Value = command.query_async(&mut con).await?;
        let latency = sent.elapsed();
        if let Value::ServerError(error) = &reply {
            return Err(format!("the server answered with an error: {error:?}").into());
        }
        check(&reply)?;
        samples.push(Sample {
            sent: sent - epoch,
            latency,
        });
        i += 1;
    }
    Ok(samples)
}

pub fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Nearest-rank percentile of sorted latencies.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn print_header() {
    println!(
        "{:<22} {:<8} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "connection", "window", "requests", "req/s", "p50 ms", "p99 ms", "max ms"
    );
}

/// One line of the table: the requests in a window of `span`.
pub fn summary(label: &str, window: &str, span: Duration, samples: impl Iterator<Item = Sample>) {
    let mut latencies: Vec<Duration> = samples.map(|s| s.latency).collect();
    if latencies.is_empty() {
        println!("{label:<22} {window:<8} {:>9}", 0);
        return;
    }
    latencies.sort_unstable();
    println!("{label:<22} {window:<8} {}", columns(&latencies, span));
}

/// The table's columns for `sorted` latencies (not empty) over `span`:
/// requests, per second, p50, p99 and max in ms.
pub fn columns(sorted: &[Duration], span: Duration) -> String {
    format!(
        "{:>9} {:>9.0} {:>9.3} {:>9.3} {:>9.3}",
        sorted.len(),
        sorted.len() as f64 / span.as_secs_f64(),
        millis(percentile(sorted, 50.0)),
        millis(percentile(sorted, 99.0)),
        millis(*sorted.last().expect("not empty")),
    )
}

/// Prints the requests of the `baseline` before `start`, and those in
/// flight at any moment from `start` to `end`.
pub fn before_and_during(
    label: &str,
    during: &str,
    samples: &[Sample],
    baseline: Duration,
    start: Duration,
    end: Duration,
) {
    let from = start.saturating_sub(baseline);
    summary(
        label,
        "before",
        baseline,
        samples
            .iter()
            .copied()
            .filter(|s| s.sent >= from && s.done() <= start),
    );
    summary(
        label,
        during,
        end - start,
        samples
            .iter()
            .copied()
            .filter(|s| s.sent < end && s.done() > start),
    );
}

/// Sends `count` commands, `batch` per pipeline, each added by `add(pipe,
/// i)`; fails on the first nil or error reply (a refused acquire).
pub async fn load(
    con: &mut MultiplexedConnection,
    count: usize,
    batch: usize,
    mut add: impl FnMut(&mut redis::Pipeline, usize),
) -> Result<(), Error> {
    let mut next = 0;
    while next < count {
        let end = (next + batch).min(count);
        let mut pipe = redis::pipe();
        for i in next..end {
            add(&mut pipe, i);
        }
        let replies: Vec<Value> = pipe.query_async(con).await?;
        if let Some(bad) = replies
            .iter()
            .position(|reply| matches!(reply, Value::Nil | Value::ServerError(_)))
        {
            return Err(format!("command {} was refused: {:?}", next + bad, replies[bad]).into());
        }
        next = end;
    }
    Ok(())
}
