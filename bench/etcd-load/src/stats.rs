//! Latencies of one operation over a phase, and the figures reported of
//! them.

use std::time::Duration;

/// Every successful request's latency, and the failures, of one operation.
#[derive(Default)]
pub struct Samples {
    nanos: Vec<u64>,
    pub errors: u64,
}

impl Samples {
    pub fn record(&mut self, latency: Duration) {
        self.nanos.push(latency.as_nanos() as u64);
    }

    pub fn merge(&mut self, other: Samples) {
        self.nanos.extend(other.nanos);
        self.errors += other.errors;
    }

    /// The figures, with `wall` the phase's duration (first request sent
    /// to last reply read).
    pub fn summary(mut self, wall: Duration) -> Summary {
        self.nanos.sort_unstable();
        let at = |q: f64| -> f64 {
            if self.nanos.is_empty() {
                return 0.0;
            }
            // Nearest rank: the smallest latency with at least q of all
            // at or below it.
            let rank = ((q * self.nanos.len() as f64).ceil() as usize).max(1);
            self.nanos[rank - 1] as f64 / 1e6
        };
        Summary {
            requests: self.nanos.len() as u64,
            errors: self.errors,
            seconds: wall.as_secs_f64(),
            per_second: self.nanos.len() as f64 / wall.as_secs_f64().max(1e-9),
            p50_ms: at(0.50),
            p99_ms: at(0.99),
            max_ms: at(1.0),
        }
    }
}

/// What a phase reports of one operation: successful requests, failures,
/// successful requests per second of wall time, latencies in ms.
pub struct Summary {
    pub requests: u64,
    pub errors: u64,
    pub seconds: f64,
    pub per_second: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

#[cfg(test)]
#[path = "stats_tests.rs"]
mod tests;
