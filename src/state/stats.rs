//! What the server counts about its clients, for `INFO` and the metrics
//! endpoint: counters, Redis's instantaneous rates, and the memory peak.
//! (The process's own figures, as the allocator and the kernel report
//! them, are read by [`crate::system`].)
//!
//! Counting stays off the request path's expensive side: a Relaxed atomic
//! add per accepted connection, per batch of requests and per socket read
//! or write, and no lock. Rates are sampled as Redis samples them: every
//! 100 ms the rate since the previous sample goes into a ring of 16, and
//! the instantaneous figure is the ring's average.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, MissedTickBehavior};

use super::Shared;
use crate::system::{self, Memory};

/// How often rates are sampled: `hz` in `INFO server`.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);
/// Samples between two readings of the memory peak: one a second.
const MEMORY_SAMPLE_TICKS: u64 = 10;
/// Samples averaged into an instantaneous rate, as in Redis.
const SAMPLES: usize = 16;

/// Counters for `INFO stats` and the metrics endpoint.
#[derive(Debug)]
pub struct Stats {
    pub total_connections_received: AtomicU64,
    pub total_commands_processed: AtomicU64,
    /// Connections refused because `maxclients` clients were connected.
    pub rejected_connections: AtomicU64,
    /// Bytes read from and written to clients (with TLS, the plaintext).
    pub net_input_bytes: AtomicU64,
    pub net_output_bytes: AtomicU64,
    /// The most memory allocated at any sample or `INFO`.
    peak_memory: AtomicU64,
    /// When the server started, by the wall clock.
    pub started: SystemTime,
    rates: Mutex<Rates>,
}

impl Stats {
    pub fn new() -> Stats {
        Stats {
            total_connections_received: AtomicU64::new(0),
            total_commands_processed: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            net_input_bytes: AtomicU64::new(0),
            net_output_bytes: AtomicU64::new(0),
            peak_memory: AtomicU64::new(0),
            started: SystemTime::now(),
            rates: Mutex::new(Rates::default()),
        }
    }

    /// Takes one sample of each rate, timed on tokio's clock like the
    /// sampler's ticks (so a server on paused time measures consistently).
    pub fn sample(&self) {
        let now = Instant::now();
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let mut rates = self.rates();
        rates.ops.add(now, read(&self.total_commands_processed));
        rates.input.add(now, read(&self.net_input_bytes));
        rates.output.add(now, read(&self.net_output_bytes));
    }

    /// Takes a sample of allocated memory for the peak. Reading jemalloc's
    /// statistics refreshes them all (about 0.1 ms on the thread that
    /// serves clients), so this runs once a second, not at every sample.
    pub fn sample_memory(&self) {
        self.peak(system::allocator_stats().allocated);
    }

    /// The rates averaged over the last samples.
    pub fn instantaneous(&self) -> Instantaneous {
        let rates = self.rates();
        Instantaneous {
            ops_per_sec: rates.ops.average(),
            input_bytes_per_sec: rates.input.average(),
            output_bytes_per_sec: rates.output.average(),
        }
    }

    /// The memory figures now, with the peak brought up to date.
    pub fn memory(&self) -> Memory {
        let allocator = system::allocator_stats();
        Memory {
            allocator,
            peak: self.peak(allocator.allocated),
            rss: system::resident_bytes(),
        }
    }

    /// `CONFIG RESETSTAT`: the counters, rates and memory peak start over,
    /// as Redis's do.
    pub fn reset(&self) {
        for counter in [
            &self.total_connections_received,
            &self.total_commands_processed,
            &self.rejected_connections,
            &self.net_input_bytes,
            &self.net_output_bytes,
            &self.peak_memory,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
        *self.rates() = Rates::default();
    }

    /// Raises the peak to `allocated` if it is higher; the peak after.
    fn peak(&self, allocated: u64) -> u64 {
        let before = self.peak_memory.fetch_max(allocated, Ordering::Relaxed);
        before.max(allocated)
    }

    fn rates(&self) -> std::sync::MutexGuard<'_, Rates> {
        // Plain numbers: a panic elsewhere cannot leave them inconsistent.
        self.rates
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Default for Stats {
    fn default() -> Stats {
        Stats::new()
    }
}

/// Per-second rates, as `INFO stats` shows them.
#[derive(Clone, Copy, Debug)]
pub struct Instantaneous {
    pub ops_per_sec: f64,
    pub input_bytes_per_sec: f64,
    pub output_bytes_per_sec: f64,
}

#[derive(Debug, Default)]
struct Rates {
    ops: Track,
    input: Track,
    output: Track,
}

/// One counter's recent rates.
#[derive(Debug, Default)]
struct Track {
    /// The previous sample: when, and the counter's value.
    last: Option<(Instant, u64)>,
    samples: [f64; SAMPLES],
    next: usize,
}

impl Track {
    fn add(&mut self, now: Instant, value: u64) {
        if let Some((then, before)) = self.last {
            let seconds = now.duration_since(then).as_secs_f64();
            if seconds > 0.0 {
                self.samples[self.next] = value.saturating_sub(before) as f64 / seconds;
                self.next = (self.next + 1) % SAMPLES;
            }
        }
        self.last = Some((now, value));
    }

    /// The mean of the ring, empty slots counting as 0 as in Redis, so a
    /// rate builds up over the first 1.6 seconds.
    fn average(&self) -> f64 {
        self.samples.iter().sum::<f64>() / SAMPLES as f64
    }
}

/// Samples the rates every [`SAMPLE_INTERVAL`], and the memory peak every
/// `MEMORY_SAMPLE_TICKS` of those, until shutdown.
pub async fn run_sampler(shared: Arc<Shared>) {
    let mut ticks = tokio::time::interval(SAMPLE_INTERVAL);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    for tick in 0u64.. {
        tokio::select! {
            _ = shared.shutdown.cancelled() => return,
            _ = ticks.tick() => shared.stats.sample(),
        }
        if tick % MEMORY_SAMPLE_TICKS == 0 {
            shared.stats.sample_memory();
        }
    }
}

/// A client's stream, adding the bytes that pass through it to
/// `net_input_bytes` and `net_output_bytes`. Everything else is the
/// wrapped stream's.
pub struct Metered<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> Metered<S> {
    pub fn new(inner: S, shared: &Arc<Shared>) -> Metered<S> {
        Metered {
            inner,
            shared: shared.clone(),
        }
    }

    fn count(counter: &AtomicU64, polled: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(bytes)) = polled {
            counter.fetch_add(*bytes as u64, Ordering::Relaxed);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if read > 0 {
            let counter = &this.shared.stats.net_input_bytes;
            counter.fetch_add(read as u64, Ordering::Relaxed);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        Self::count(&this.shared.stats.net_output_bytes, &polled);
        polled
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        Self::count(&this.shared.stats.net_output_bytes, &polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_the_mean_of_the_last_sixteen_samples() {
        let mut track = Track::default();
        let start = Instant::now();
        let tick = |n: u32| start + SAMPLE_INTERVAL * n;
        // 100 more every 100 ms: 1000 a second, reached once the ring is full.
        for n in 0..=4 {
            track.add(tick(n), 100 * u64::from(n));
        }
        assert!((track.average() - 4.0 * 1000.0 / 16.0).abs() < 1e-6);
        for n in 5..=40 {
            track.add(tick(n), 100 * u64::from(n));
        }
        assert!((track.average() - 1000.0).abs() < 1e-6);
        // Idle: the rate falls back to 0 as idle samples replace busy ones.
        for n in 41..=56 {
            track.add(tick(n), 4000);
        }
        assert_eq!(track.average(), 0.0);
    }
}
