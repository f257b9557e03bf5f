//! A worker that holds a lease on its run while it works (`redis` crate).
//!
//!     cargo run --example worker -- [PORT] [RUN]
//!
//! It acquires the run, heartbeats in the background at a third of the TTL,
//! stamps every write with its fencing token, stops writing the moment a
//! heartbeat fails, and releases the lease when done.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::Value;

const TTL_SECONDS: f64 = 3.0;

/// Stands in for the database the worker writes to: it refuses a write
/// whose fencing token is older than the newest it has seen.
#[derive(Default)]
struct Storage {
    newest_token: i64,
    rows: HashMap<String, u32>,
}

impl Storage {
    fn write(&mut self, key: &str, value: u32, token: i64) -> Result<(), String> {
        if token < self.newest_token {
            return Err(format!(
                "stale fencing token {token} < {}",
                self.newest_token
            ));
        }
        self.newest_token = token;
        self.rows.insert(key.to_string(), value);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let port = args.next().unwrap_or_else(|| "6479".into());
    let run = args.next().unwrap_or_else(|| "run-42".into());
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/?protocol=resp3"))?;
    let mut con = client.get_multiplexed_async_connection().await?;

    let lease: Option<HashMap<String, Value>> = redis::cmd("LEASE.ACQUIRE")
        .arg(&run)
        .arg("worker-rs")
        .arg("TTL")
        .arg(TTL_SECONDS)
        .query_async(&mut con)
        .await?;
    let Some(lease) = lease else {
        return Err(format!("{run} is held by another worker").into());
    };
    let lease_id: String = redis::from_redis_value(lease["lease_id"].clone())?;
    let token: i64 = redis::from_redis_value(lease["fencing_token"].clone())?;
    println!("acquired {lease_id} (token {token})");

    let lost = Arc::new(AtomicBool::new(false));
    let heartbeat = {
        let (mut con, lost, lease_id) = (con.clone(), lost.clone(), lease_id.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs_f64(TTL_SECONDS / 3.0)).await;
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
        })
    };

    let mut storage = Storage::default();
    let key = format!("{run}/checkpoint");
    for step in 0..5 {
        if lost.load(Ordering::SeqCst) {
            return Err("lease lost: stopped writing".into());
        }
        storage.write(&key, step, token)?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    heartbeat.abort();
    let released: i64 = redis::cmd("LEASE.RELEASE")
        .arg(&lease_id)
        .arg(token)
        .query_async(&mut con)
        .await?;
    println!(
        "done: checkpoint {}, released={released}",
        storage.rows[&key]
    );
    Ok(())
}
