//! The longest single operation of the registry itself, without a server:
//! what a client would wait behind when the lease table resizes.
//!
//!     cargo run --release --example table_stalls -- [--leases N]
//!
//! Grows a registry to `--leases` leases (2,000,000 by default, ids like
//! `run:0001234` / `w`) timing every acquire, then moves registry time past
//! their expiry plus retention and reclaims them all in the core's chunks
//! of 64, timing every chunk. Prints the slowest acquires and chunks with
//! the table size at the time, and the totals. Times are the thread's CPU
//! time (`CLOCK_THREAD_CPUTIME_ID`), so what other processes do to the
//! machine does not count; a resize done all at once stands out at tens
//! to hundreds of ms.

use std::time::{Duration, Instant};

use leased::registry::Registry;

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// CPU time this thread has used.
fn cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write to, and the clock id is
    // one Linux always has.
    let result = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(result, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// The `N` slowest of a series, each with the table size at the time.
struct Slowest {
    worst: Vec<(Duration, usize)>,
}

impl Slowest {
    const N: usize = 5;

    fn new() -> Slowest {
        Slowest { worst: Vec::new() }
    }

    fn record(&mut self, took: Duration, size: usize) {
        if self.worst.len() < Self::N || took > self.worst[Self::N - 1].0 {
            self.worst.push((took, size));
            self.worst.sort_by_key(|&(took, _)| std::cmp::Reverse(took));
            self.worst.truncate(Self::N);
        }
    }

    fn print(&self, what: &str) {
        for (took, size) in &self.worst {
            println!(
                "  {what} at {size:>9} leases: {:8.3} ms",
                took.as_secs_f64() * 1000.0
            );
        }
    }
}

fn main() {
    let mut leases: u32 = 2_000_000;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next()) {
            ("--leases", Some(value)) => leases = value.parse().expect("--leases N"),
            _ => panic!("usage: table_stalls [--leases N]"),
        }
    }
    let mut registry = Registry::new(10.0, 0);
    registry.set_retention(1.0);
    registry.set_recording(true);

    let mut slowest = Slowest::new();
    let started = Instant::now();
    for i in 0..leases {
        let run = format!("run:{i:07}");
        let before = cpu_time();
        let lease = registry.acquire(run.as_bytes(), b"w", 1000.0, Some(60.0));
        slowest.record(cpu_time() - before, i as usize);
        // The server frees replaced index tables on another thread.
        drop(registry.take_retired());
        assert!(matches!(lease, Ok(Some(_))), "acquire {i} failed");
        // The core drains the log's changes after every batch.
        if i % 64 == 0 {
            registry.take_changes().for_each(drop);
        }
    }
    println!(
        "{leases} acquires in {:.3} s; slowest:",
        started.elapsed().as_secs_f64()
    );
    slowest.print("acquire");

    registry.take_changes().for_each(drop);
    registry.advance_time(2000.0);
    let mut slowest = Slowest::new();
    let started = Instant::now();
    while registry.reclaim_due() {
        let size = registry.len();
        let before = cpu_time();
        registry.reclaim(64);
        registry.take_changes().for_each(drop);
        slowest.record(cpu_time() - before, size);
        drop(registry.take_retired());
    }
    println!(
        "{leases} reclaimed in {:.3} s, 64 at a time; slowest:",
        started.elapsed().as_secs_f64()
    );
    slowest.print("reclaim of 64");
}
