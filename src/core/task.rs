//! The core task: receives batches, applies them, commits their changes,
//! answers; and between requests, when its timer says work is due, does a
//! bounded step of it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{error, info};

use super::memory::MemoryReading;
use super::report::CommandStats;
use super::tokens::Tokens;
use super::waiters::{Granted, Waiter, Waiters};
use super::{Answer, Batch, CoreAnswer, CoreCommand, Refusal};
use crate::aof::{Commit, Log, RewriteStep, WriteError};
use crate::registry::{Change, Op, Registry};
use crate::slowlog::Stopwatch;
use crate::state::Shared;

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
    pub(super) registry: Registry,
    /// The append-only log; `None` with `appendonly no`.
    pub(super) log: Option<Log>,
    pub(super) tokens: Tokens,
    pub(super) stats: CommandStats,
    pub(super) shared: Arc<Shared>,
    /// While a rewrite waits on its writer thread, when to look again.
    rewrite_retry: Option<Instant>,
    /// Blocked acquires, per run.
    pub(super) waiters: Waiters,
    /// Runs handed to waiters, whose replies go out once the grants are
    /// committed to the log.
    pub(super) grants: Vec<(Waiter, Granted)>,
    /// When expiries were last announced (`publish`).
    pub(super) last_announce: Option<Instant>,
    /// The memory allocated, as last read for `maxmemory`.
    pub(super) memory: MemoryReading,
}

/// What every command of one round is applied with.
pub(super) struct Round {
    /// The server's clock, read once per round.
    pub clock: f64,
    pub max_skew: f64,
    /// `maxmemory`: 0, or the bytes above which acquires are refused.
    pub maxmemory: u64,
    /// Set while the log cannot be written: changes are refused.
    pub log_failure: Option<Refusal>,
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
            waiters: Waiters::default(),
            grants: Vec::new(),
            last_announce: None,
            memory: MemoryReading::default(),
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
        let shared = self.shared.clone();
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
                // Someone subscribed: expiries are announced from now on.
                () = shared.pubsub.started() => self.watch(self.shared.clock.now()),
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
    /// reclaimed, grants to be sent or a rewrite has encoding to do; when
    /// a waited-for run may be free, a waiter's timeout runs out or an
    /// expiry is to be announced; a little later while a rewrite waits on
    /// its writer; never while there is none.
    fn next_due(&self) -> Option<Instant> {
        if self.registry.reclaim_due() || !self.grants.is_empty() {
            return Some(Instant::now());
        }
        let rewriting = self.log.as_ref().is_some_and(Log::rewriting);
        let rewrite = rewriting.then(|| self.rewrite_retry.unwrap_or_else(Instant::now));
        let free = self.waiters.next_free().map(|at| self.instant_at(at));
        [
            rewrite,
            free,
            self.waiters.next_deadline(),
            self.next_announce(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The moment the server's clock (or registry time, if ahead) reaches
    /// `seconds`.
    pub(super) fn instant_at(&self, seconds: f64) -> Instant {
        if seconds <= self.registry.time() {
            return Instant::now();
        }
        self.shared.clock.when(seconds)
    }

    /// One bounded step of each kind of background work that is due.
    async fn background_step(&mut self) {
        let round = self.round();
        self.watch(round.clock);
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
        self.time_out_waiters();
        self.announce(&round);
        self.serve_waiters(&round);
        if !self.grants.is_empty() {
            self.log_changes();
            let committed = self.commit(Commit::Replies).await;
            self.send_grants(&committed);
        }
    }

    /// Reclaims up to [`RECLAIM_STEP`] leases past retention and logs
    /// their removal.
    async fn reclaim(&mut self) {
        let op = Op::Reclaim { max: RECLAIM_STEP };
        let outcome = self.registry.apply(&op, self.shared.clock.now());
        self.stats.record(&op, Some(&outcome));
        self.publish();
        self.free_retired();
        self.log_changes();
        if let Err(error) = self.commit(Commit::Background).await {
            // The removals stay queued in the log and are retried.
            error!("Logging reclaimed leases failed: {error}");
        }
    }

    /// The settings of a round, read once.
    fn round(&self) -> Round {
        let config = self.shared.config();
        Round {
            clock: self.shared.clock.now(),
            max_skew: config.lease_max_skew,
            maxmemory: config.maxmemory,
            log_failure: self.log.as_ref().and_then(Log::failure).map(Refusal::Log),
        }
    }

    /// Applies every drained batch, hands freed runs to their waiters,
    /// commits the changes, then answers them all.
    async fn serve(&mut self, batches: &mut Vec<Batch>) {
        self.tokens.poll();
        let round = self.round();
        self.watch(round.clock);
        let slower_than = self.shared.config().slowlog_log_slower_than;
        let mut stopwatch = Stopwatch::start(slower_than);
        let mut answers = Vec::with_capacity(batches.len());
        for batch in batches.drain(..) {
            let mut answer = Answer {
                answers: Vec::with_capacity(batch.commands.len()),
                took: Vec::with_capacity(batch.commands.len()),
                slow: Vec::new(),
            };
            // Answers of commands that changed leases: they are only true
            // once the change is in the log.
            let mut changed = Vec::new();
            for command in batch.commands {
                let done = match command {
                    CoreCommand::Op(op) => self.apply(&op, &round),
                    CoreCommand::AcquireBlocking {
                        op,
                        timeout,
                        client_id,
                    } => self.acquire_blocking(op, timeout, client_id, &round),
                    other => self.execute(other),
                };
                self.publish();
                let took = stopwatch.lap();
                if stopwatch.is_slow(took) {
                    answer.slow.push((answer.answers.len(), took));
                }
                answer.took.push(took);
                if self.log_changes() {
                    changed.push(answer.answers.len());
                }
                answer.answers.push(done);
            }
            answers.push((batch.reply, answer, changed));
        }
        self.serve_waiters(&round);
        self.log_changes();
        let committed = self.commit(Commit::Replies).await;
        if let Err(error) = &committed {
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
        self.send_grants(&committed);
        self.tokens.reserve_ahead(self.registry.last_token());
        self.rewrite_when_grown();
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
    pub(super) fn log_changes(&mut self) -> bool {
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
    /// so a restart continues right after it. Waiters still queued are
    /// dropped: their connections are closing with the server.
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
