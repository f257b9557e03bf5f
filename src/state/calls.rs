//! What `INFO commandstats`, `INFO errorstats` and `INFO latencystats`
//! show: per command, its calls, their time, and how many were refused
//! before running or failed; per error prefix (`ERR`, `NOAUTH`), how many
//! error replies; per command, its latency distribution.
//!
//! Counting stays cheap on the request path: a connection notes each
//! request's outcome in its own [`Tally`] (a vector it reuses, so no
//! allocation for a command that succeeds) and folds the tally into the
//! shared table under one lock per batch of requests, not per command.

use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex, MutexGuard};
use std::time::Duration;

use crate::command;
use crate::histogram::Histogram;

/// As in Redis: past this many distinct error prefixes, errorstats stops
/// taking new ones (until `CONFIG RESETSTAT`) and shows
/// `errorstat_ERRORSTATS_DISABLED` instead.
pub const MAX_ERROR_PREFIXES: usize = 128;
/// The percentiles `latencystats` shows, as Redis's default
/// `latency-tracking-info-percentiles`.
pub const PERCENTILES: [f64; 3] = [50.0, 99.0, 99.9];

/// The latency buckets' upper bounds, in microseconds: 20 a decade
/// (each about 12% above the one before), from 0.1 µs to 100 s.
static LATENCY_BOUNDS: LazyLock<Vec<f64>> = LazyLock::new(|| {
    (0..=180)
        .map(|step| {
            let bound = 10f64.powf(f64::from(step) / 20.0 - 1.0);
            // Three significant digits: bounds that read well in INFO.
            let scale = 10f64.powi(2 - bound.log10().floor() as i32);
            (bound * scale).round() / scale
        })
        .collect()
});

/// One command's figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Counts {
    pub calls: u64,
    /// The time its calls took, summed.
    pub took: Duration,
    /// Refused before running: wrong arity, NOAUTH, `maxmemory`, a
    /// command a subscriber or a transaction may not run.
    pub rejected: u64,
    /// Ran and replied with an error.
    pub failed: u64,
    /// Each call's time in microseconds.
    pub latency: Histogram,
}

impl Counts {
    fn new() -> Counts {
        Counts {
            calls: 0,
            took: Duration::ZERO,
            rejected: 0,
            failed: 0,
            latency: Histogram::new(LATENCY_BOUNDS.as_slice()),
        }
    }

    /// `calls=N,usec=N,usec_per_call=F,rejected_calls=N,failed_calls=N`.
    pub fn info_value(&self) -> String {
        let usec = self.took.as_micros();
        let per_call = match self.calls {
            0 => 0.0,
            // As Redis divides: the whole microseconds summed.
            calls => usec as f64 / calls as f64,
        };
        format!(
            "calls={},usec={usec},usec_per_call={per_call:.2},rejected_calls={},failed_calls={}",
            self.calls, self.rejected, self.failed
        )
    }

    /// `p50=F,p99=F,p99.9=F`, in microseconds.
    pub fn latency_value(&self) -> String {
        let values: Vec<String> = PERCENTILES
            .iter()
            .map(|&p| format!("p{p}={:.3}", self.latency.percentile(p)))
            .collect();
        values.join(",")
    }
}

/// How one request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Succeeded,
    Failed,
    Rejected,
}

/// One connection's record of a batch of requests, folded into the
/// shared [`CallStats`] at the batch's end.
#[derive(Debug, Default)]
pub struct Tally {
    calls: Vec<(usize, Outcome, Duration)>,
    errors: Vec<String>,
}

impl Tally {
    /// A command (by [`command::CommandName::id`]) that ran for `took`,
    /// and whether it replied with an error.
    pub fn ran(&mut self, id: usize, took: Duration, failed: bool) {
        let outcome = if failed {
            Outcome::Failed
        } else {
            Outcome::Succeeded
        };
        self.calls.push((id, outcome, took));
    }

    /// A command refused before it ran; `None` for an unknown one.
    pub fn rejected(&mut self, id: Option<usize>) {
        if let Some(id) = id {
            self.calls.push((id, Outcome::Rejected, Duration::ZERO));
        }
    }

    /// An error reply, counted under its prefix.
    pub fn error(&mut self, message: &str) {
        self.errors.push(error_prefix(message).to_owned());
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty() && self.errors.is_empty()
    }
}

/// The error's first word, as Redis counts it: what comes before the
/// first space within its first 32 bytes, or `ERR` when there is none.
pub fn error_prefix(message: &str) -> &str {
    let head = &message.as_bytes()[..message.len().min(32)];
    match head.iter().position(|&b| b == b' ') {
        Some(end) if end > 0 => &message[..end],
        _ => "ERR",
    }
}

/// The shared table.
#[derive(Debug, Default)]
pub struct CallStats {
    inner: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    /// By command id; empty until the first fold.
    commands: Vec<Counts>,
    errors: BTreeMap<String, u64>,
    /// Past [`MAX_ERROR_PREFIXES`] prefixes.
    errors_disabled: bool,
}

impl CallStats {
    /// Adds a connection's tally, and empties it (keeping its memory).
    pub fn fold(&self, tally: &mut Tally) {
        if tally.is_empty() {
            return;
        }
        let mut table = self.lock();
        if table.commands.is_empty() {
            table.commands = vec![Counts::new(); command::stat_count()];
        }
        for (id, outcome, took) in tally.calls.drain(..) {
            let counts = &mut table.commands[id];
            match outcome {
                Outcome::Rejected => counts.rejected += 1,
                Outcome::Succeeded | Outcome::Failed => {
                    counts.calls += 1;
                    counts.took += took;
                    counts.latency.observe(took.as_secs_f64() * 1e6);
                    counts.failed += u64::from(outcome == Outcome::Failed);
                }
            }
        }
        for prefix in tally.errors.drain(..) {
            table.count_error(prefix);
        }
    }

    /// `CONFIG RESETSTAT`: everything starts over, errorstats enabled
    /// again.
    pub fn reset(&self) {
        *self.lock() = Table::default();
    }

    /// The commands that were called or refused, by full name, in the
    /// table's order.
    pub fn commands(&self) -> Vec<(&'static str, Counts)> {
        let table = self.lock();
        let counted = |(_, counts): &(usize, &Counts)| {
            counts.calls > 0 || counts.rejected > 0 || counts.failed > 0
        };
        table
            .commands
            .iter()
            .enumerate()
            .filter(counted)
            .map(|(id, counts)| (command::stat_name(id), counts.clone()))
            .collect()
    }

    /// The error prefixes and their counts, in byte order (as Redis's
    /// radix tree lists them).
    pub fn errors(&self) -> Vec<(String, u64)> {
        let table = self.lock();
        table.errors.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // Plain numbers: a panic elsewhere cannot leave them inconsistent.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Table {
    fn count_error(&mut self, prefix: String) {
        if self.errors_disabled {
            return;
        }
        if let Some(count) = self.errors.get_mut(&prefix) {
            *count += 1;
            return;
        }
        if self.errors.len() >= MAX_ERROR_PREFIXES {
            tracing::warn!(
                "Errorstats stopped adding new errors because the number of errors reached \
                 the limit; this can be re-enabled via CONFIG RESETSTAT."
            );
            self.errors.clear();
            self.errors.insert("ERRORSTATS_DISABLED".to_owned(), 1);
            self.errors_disabled = true;
            return;
        }
        self.errors.insert(prefix, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_is_counted_under_its_first_word() {
        assert_eq!(error_prefix("ERR syntax error"), "ERR");
        assert_eq!(error_prefix("NOAUTH Authentication required."), "NOAUTH");
        assert_eq!(error_prefix("WRONGTYPE Operation"), "WRONGTYPE");
        assert_eq!(error_prefix("NOSPACE"), "ERR");
        assert_eq!(error_prefix(&"X".repeat(40)), "ERR");
    }

    #[test]
    fn outcomes_fold_into_the_command_counts() {
        let stats = CallStats::default();
        let id = 0;
        let mut tally = Tally::default();
        tally.ran(id, Duration::from_micros(3), false);
        tally.ran(id, Duration::from_micros(5), true);
        tally.rejected(Some(id));
        tally.rejected(None);
        tally.error("ERR one");
        tally.error("ERR two");
        tally.error("NOAUTH three");
        stats.fold(&mut tally);
        assert!(tally.is_empty());
        let commands = stats.commands();
        assert_eq!(commands.len(), 1);
        let (name, counts) = &commands[0];
        assert_eq!(*name, command::stat_name(id));
        assert_eq!(
            counts.info_value(),
            "calls=2,usec=8,usec_per_call=4.00,rejected_calls=1,failed_calls=1"
        );
        assert_eq!(counts.latency_value(), "p50=3.160,p99=5.010,p99.9=5.010");
        assert_eq!(
            stats.errors(),
            [("ERR".to_owned(), 2), ("NOAUTH".to_owned(), 1)]
        );
        stats.reset();
        assert!(stats.commands().is_empty() && stats.errors().is_empty());
    }

    #[test]
    fn errorstats_stop_at_128_prefixes_until_reset() {
        let stats = CallStats::default();
        let mut tally = Tally::default();
        for n in 0..MAX_ERROR_PREFIXES {
            tally.error(&format!("E{n} x"));
        }
        stats.fold(&mut tally);
        assert_eq!(stats.errors().len(), MAX_ERROR_PREFIXES);
        tally.error("NEW x");
        tally.error("E1 x");
        stats.fold(&mut tally);
        assert_eq!(stats.errors(), [("ERRORSTATS_DISABLED".to_owned(), 1)]);
        stats.reset();
        tally.error("NEW x");
        stats.fold(&mut tally);
        assert_eq!(stats.errors(), [("NEW".to_owned(), 1)]);
    }
}
