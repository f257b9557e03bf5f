//! The failover test: clients acquire while the leader is killed, and
//! each client's window until it is served again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Attempts, Client, Error, Op, Options, etcd, leased, phase};

/// Finds the leader and kills it at `at`; returns when, and which.
async fn kill_leader(options: &Options, at: Instant) -> Result<(Instant, usize), Error> {
    tokio::time::sleep_until(at.into()).await;
    let leader = if options.system == "etcd" {
        etcd::Etcd::leader(&options.endpoints).await?
    } else {
        leased::Leased::leader(&options.endpoints).await?
    };
    let killed = Instant::now();
    if options.trace {
        eprintln!(
            "{} ms: killing node {leader}",
            (killed - at).as_millis() + options.kill_after.as_millis()
        );
    }
    // SAFETY: kill(2) with a pid given on the command line and a constant
    // signal; no memory is shared.
    if unsafe { libc::kill(options.pids[leader], libc::SIGKILL) } != 0 {
        return Err(format!(
            "kill {}: {}",
            options.pids[leader],
            std::io::Error::last_os_error()
        )
        .into());
    }
    Ok((killed, leader))
}

/// A client's window: from the kill to the reply of its first successful
/// acquire sent after the kill and after its last failure (None if it had
/// none by the end).
fn window(attempts: &Attempts, killed: Instant) -> Option<Duration> {
    let last_failure = attempts
        .iter()
        .filter(|(_, _, ok)| !ok)
        .map(|&(_, answered, _)| answered)
        .max()
        .unwrap_or(killed)
        .max(killed);
    attempts
        .iter()
        .find(|&&(sent, _, ok)| ok && sent >= last_failure)
        .map(|&(_, answered, _)| answered - killed)
}

pub async fn run(clients: Vec<Client>, options: Arc<Options>) -> Result<(), Error> {
    // The leader is looked up at the kill, so the one killed is the
    // leader of the moment.
    let kill_at = Instant::now() + Duration::from_millis(100) + options.kill_after;
    let killer = {
        let options = options.clone();
        tokio::spawn(async move { kill_leader(&options, kill_at).await })
    };
    let (_, summary, attempts) = phase(clients, Op::Acquire, &options).await?;
    let (killed, leader) = killer.await??;
    let mut windows: Vec<Duration> = attempts.iter().filter_map(|a| window(a, killed)).collect();
    windows.sort();
    let unrecovered = attempts.len() - windows.len();
    let ms = |d: Option<&Duration>| d.map_or("-".to_owned(), |d| d.as_millis().to_string());
    println!(
        "{},failover,{},{},{},{},{},{},{},{}",
        options.system,
        options.clients,
        summary.requests,
        summary.errors,
        leader,
        ms(windows.first()),
        ms(windows.get(windows.len().saturating_sub(1) / 2)),
        ms(windows.last()),
        unrecovered
    );
    Ok(())
}

#[cfg(test)]
#[path = "failover_tests.rs"]
mod tests;
