//! The core task: receives batches, applies them, commits their changes,
//! answers; and between requests, when its timer says work is due, does a
//! bounded step of it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{error, info};

use super::report::{CommandStats, CoreReport};
use super::tokens::Tokens;
use super::{Answer, Batch, CoreAnswer, CoreCommand, Refusal};
use crate::aof::{Commit, Log, RewriteStep, WriteError};
use crate::config::SetError;
use crate::logging;
use crate::registry::{Change, Op, Registry};
use crate::slowlog::Stopwatch;
use crate::state::Shared;
use crate::system;

/// The most batches applied between two rounds of replies.
const MAX_DRAIN: usize = 512;
/// Leases reclaimed per step of background work: a count, not a time
/// budget, so that every replica of the registry does the same. At about
/// a microsecond each (more while an index resizes), a request waits at
/// most a fraction of a millisecond behind a step.
const RECLAIM_STEP: usize = 256;
/// How long the core waits before it looks again at a rewrite that is
/// waiting on its writer thread.
const REWRITE_NAP: Duration = Duration::from_millis(1);

pub(super) struct Core {
    registry: Registry,
    /// The append-only log; `None` with `appendonly no`.
    log: Option<Log>,
    tokens: Tokens,
    stats: CommandStats,
    shared: Arc<Shared>,
    /// While a rewrite waits on its writer thread, when to look again.
    rewrite_retry: Option<Instant>,
}

impl Core {
    pub(super) fn new(
        registry: Registry,
        log: Option<Log>,
        tokens: Tokens,
        shared: Arc<Shared>,
    ) -> Core {
        Core {
            registry,
            log,
            tokens,
            stats: CommandStats::default(),
            shared,
            rewrite_retry: None,
        }
    }

    /// Serves batches until every handle is gone, then flushes and ends.
    /// Between them the timer wakes the core for background work when it
    /// is due; the work then gets one bounded step per round, idle or busy,
    /// so that a stream of requests cannot starve it, nor it the requests.
    pub(super) async fn run(mut self, mut queue: mpsc::Receiver<Batch>) {
        let mut batches = Vec::with_capacity(MAX_DRAIN);
        let timer = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(timer);
        loop {
            let due = self.next_due();
            if let Some(when) = due {
                timer.as_mut().reset(when);
            }
            tokio::select! {
                biased;
                received = queue.recv_many(&mut batches, MAX_DRAIN) => {
                    if received == 0 {
                        break;
                    }
                    self.serve(&mut batches).await;
                }
                () = &mut timer, if due.is_some() => {}
            }
            if self.next_due().is_some_and(|when| when <= Instant::now()) {
                self.background_step().await;
                // On a one-thread runtime the connections get a turn only
                // when the core yields.
                tokio::task::yield_now().await;
            }
            self.free_retired();
        }
        self.finish().await;
    }

    /// When background work is next due: now while leases wait to be
    /// reclaimed or a rewrite has encoding to do, a little later while a
    /// rewrite waits on its writer, never while there is none. (Waiters and
    /// expiry events will add the next lease expiry here.)
    fn next_due(&self) -> Option<Instant> {
        if self.registry.reclaim_due() {
            return Some(Instant::now());
        }
        let rewriting = self.log.as_ref().is_some_and(Log::rewriting);
        rewriting.then(|| self.rewrite_retry.unwrap_or_else(Instant::now))
    }

    /// One bounded step of each kind of background work that is due.
    async fn background_step(&mut self) {
        if self.registry.reclaim_due() {
            self.reclaim().await;
        }
        let retry_due = self.rewrite_retry.is_none_or(|at| at <= Instant::now());
        if let Some(log) = &mut self.log
            && retry_due
        {
            self.rewrite_retry = match log.step_rewrite(&self.registry) {
                RewriteStep::Waiting => Some(Instant::now() + REWRITE_NAP),
                RewriteStep::Progress | RewriteStep::Idle => None,
            };
        }
    }

    /// Reclaims up to [`RECLAIM_STEP`] leases past retention and logs
    /// their removal.
    async fn reclaim(&mut self) {
        let op = Op::Reclaim { max: RECLAIM_STEP };
        let outcome = self.registry.apply(&op, self.shared.clock.now());
        self.stats.record(&op, Some(&outcome));
        self.free_retired();
        self.log_changes();
        if let Err(error) = self.commit(Commit::Background).await {
            // The removals stay queued in the log and are retried.
            error!("Logging reclaimed leases failed: {error}");
        }
    }

    /// Applies every drained batch, commits their changes, then answers
    /// them all.
    async fn serve(&mut self, batches: &mut Vec<Batch>) {
        self.tokens.poll();
        let clock = self.shared.clock.now();
        let config = self.shared.config();
        let (slower_than, max_skew) = (config.slowlog_log_slower_than, config.lease_max_skew);
        drop(config);
        let refusal = self.log.as_ref().and_then(Log::failure).map(Refusal::Log);
        let mut stopwatch = Stopwatch::start(slower_than);
        let mut answers = Vec::with_capacity(batches.len());
        for batch in batches.drain(..) {
            let mut answer = Answer {
                answers: Vec::with_capacity(batch.commands.len()),
                slow: Vec::new(),
            };
            // Answers of commands that changed leases: they are only true
            // once the change is in the log.
            let mut changed = Vec::new();
            for command in batch.commands {
                let done = match command {
                    CoreCommand::Op(op) => self.apply(&op, clock, max_skew, refusal.as_ref()),
                    other => self.execute(other),
                };
                if let Some(took) = stopwatch.as_mut().and_then(Stopwatch::lap) {
                    answer.slow.push((answer.answers.len(), took));
                }
                if self.log_changes() {
                    changed.push(answer.answers.len());
                }
                answer.answers.push(done);
            }
            answers.push((batch.reply, answer, changed));
        }
        if let Err(error) = self.commit(Commit::Replies).await {
            for (_, answer, changed) in &mut answers {
                for &index in changed.iter() {
                    answer.answers[index] = CoreAnswer::Refused(Refusal::Log(error.clone()));
                }
            }
        }
        for (reply, answer, _) in answers {
            // A client that went away no longer needs its answers.
            let _ = reply.send(answer);
        }
        self.tokens.reserve_ahead(self.registry.last_token());
        self.rewrite_when_grown();
    }

    /// Applies a client's lease command at `clock`, unless it must be
    /// refused.
    fn apply(
        &mut self,
        op: &Op,
        clock: f64,
        max_skew: f64,
        log_failure: Option<&Refusal>,
    ) -> CoreAnswer {
        if let Some(refusal) = self.refusal(op, clock, max_skew, log_failure) {
            self.stats.record(op, None);
            return CoreAnswer::Refused(refusal);
        }
        let outcome = self.registry.apply(op, clock);
        self.stats.record(op, Some(&outcome));
        CoreAnswer::Outcome(outcome)
    }

    /// Why `op` must not be applied, if it must not: a change while the log
    /// is failing, a `now` too far ahead of the clock, an acquire while the
    /// next token cannot be made durable.
    fn refusal(
        &mut self,
        op: &Op,
        clock: f64,
        max_skew: f64,
        log_failure: Option<&Refusal>,
    ) -> Option<Refusal> {
        if let Some(failure) = log_failure
            && op.changes_leases()
        {
            return Some(failure.clone());
        }
        if let Some(now) = op.explicit_now()
            && max_skew > 0.0
            && now > clock + max_skew
        {
            return Some(Refusal::FutureNow { max_skew });
        }
        if let Op::Acquire { .. } = op
            && let Err(error) = self.tokens.allow_next(self.registry.last_token())
        {
            return Some(Refusal::Ceiling(error));
        }
        None
    }

    /// The commands that are not lease commands.
    fn execute(&mut self, command: CoreCommand) -> CoreAnswer {
        match command {
            CoreCommand::Op(_) => unreachable!("lease commands are applied"),
            CoreCommand::Report => CoreAnswer::Report(Box::new(self.report())),
            CoreCommand::RewriteLog => match &mut self.log {
                None => CoreAnswer::Refused(Refusal::NoLog),
                Some(log) => CoreAnswer::Rewrite(log.start_rewrite(&self.registry)),
            },
            CoreCommand::Configure(pairs) => CoreAnswer::Configured(self.configure(&pairs)),
            CoreCommand::ResetStats => {
                self.stats = CommandStats::default();
                self.shared.stats.reset();
                CoreAnswer::Reset
            }
        }
    }

    fn report(&self) -> CoreReport {
        CoreReport {
            leases: self.registry.len(),
            expired: self.registry.expired_count(),
            last_token: self.registry.last_token(),
            token_ceiling: self.tokens.ceiling(),
            registry_time: self.registry.time(),
            lease_ttl: self.registry.default_ttl(),
            commands: self.stats.clone(),
            log: self.log.as_ref().map(Log::status),
        }
    }

    /// `CONFIG SET`: the new configuration, whole or not at all; the core
    /// applies what it owns (the registry's TTL and retention, the log's
    /// fsync and rewrite settings), then every reader sees the new one.
    fn configure(&mut self, pairs: &[(bytes::Bytes, bytes::Bytes)]) -> Result<(), SetError> {
        let old = self.shared.config();
        let pairs: Vec<(&[u8], &[u8])> = pairs.iter().map(|(n, v)| (&n[..], &v[..])).collect();
        let new = old.set(&pairs)?;
        self.registry.set_default_ttl(new.lease_ttl);
        self.registry.set_retention(new.lease_retention);
        if let Some(log) = &mut self.log {
            log.set_fsync(new.appendfsync);
            log.set_rewrite_thresholds(
                new.auto_aof_rewrite_percentage,
                new.auto_aof_rewrite_min_size,
            );
        }
        if new.loglevel != old.loglevel {
            logging::set_level(new.loglevel);
        }
        if new.maxclients > old.maxclients {
            system::raise_open_files_limit(new.maxclients);
        }
        drop(old);
        self.shared.set_config(new);
        Ok(())
    }

    /// Frees the index tables a resize replaced on a thread of its own:
    /// giving tens of megabytes back to the system takes milliseconds.
    fn free_retired(&mut self) {
        let retired = self.registry.take_retired();
        if !retired.is_empty() {
            // Should the thread not start, the closure and the tables in it
            // are dropped right here instead.
            let _ = std::thread::Builder::new()
                .name("leased-free".into())
                .spawn(move || drop(retired));
        }
    }

    /// Moves the registry's recorded changes into the log; true if any of
    /// them changed leases (not only registry time).
    fn log_changes(&mut self) -> bool {
        let Some(log) = &mut self.log else {
            return false;
        };
        let mut leases_changed = false;
        for change in self.registry.take_changes() {
            leases_changed |= !matches!(change, Change::Time(_));
            log.append(&change);
        }
        leases_changed
    }

    async fn commit(&mut self, commit: Commit) -> Result<(), WriteError> {
        match &mut self.log {
            Some(log) => log.commit(commit).await,
            None => Ok(()),
        }
    }

    fn rewrite_when_grown(&mut self) {
        if let Some(log) = &mut self.log
            && log.wants_rewrite()
            && let Err(error) = log.start_rewrite(&self.registry)
        {
            error!("Rewriting the append-only log: {error}");
        }
    }

    /// Flushes the log, then stores the last token issued as the ceiling,
    /// so a restart continues right after it.
    async fn finish(mut self) {
        if let Some(mut log) = self.log.take() {
            for change in self.registry.take_changes() {
                log.append(&change);
            }
            // Closing commits what is queued, then fsyncs.
            match log.close().await {
                Ok(()) => info!("Append-only log flushed"),
                Err(error) => error!("Flushing the append-only log at shutdown failed: {error}"),
            }
        }
        self.tokens.finish(self.registry.last_token());
    }
}
