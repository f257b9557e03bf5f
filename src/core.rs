//! The core: the single owner of the registry and the append-only log, a
//! task of its own on the connections' runtime.
//!
//! Connections send it one [`Batch`] per socket read (all the lease
//! commands of that read), so a pipelining client costs one message per
//! read, not one per command. The core drains every queued batch, applies
//! them in order, writes their changes to the log with one write (and with
//! `appendfsync always` one fsync), and only then answers them all: group
//! commit. While it waits on the disk (the fsync runs on the runtime's
//! blocking pool), connections go on reading, and their batches queue up
//! and make the next round larger.
//!
//! A task rather than a thread, by measurement (docs/benchmarks.md): on
//! the default one-thread runtime a request reaches the core and its reply
//! comes back without waking another thread, which on two cores gave about
//! 60% more unpipelined acquires per second than a core thread of its own.
//!
//! The core also keeps fencing tokens durable: it never lets the registry
//! issue a token above the ceiling stored on disk, and raises that ceiling
//! a block at a time on a helper thread, ahead of need.

use std::io;
use std::sync::Arc;
use std::sync::mpsc::{self as std_mpsc, TryRecvError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tracing::{error, info};

use crate::aof::{Log, LogOptions, RewriteStep};
use crate::ceiling::CeilingWriter;
use crate::ceiling::DataDir;
use crate::command::LeaseCommand;
use crate::config::Config;
use crate::glob;
use crate::info;
use crate::registry::{Change, Lease, Registry, TokenError};
use crate::reply::{LeaseReply, Reply};
use crate::server::{Shared, wall_clock};
use crate::slowlog::Stopwatch;

/// Tokens reserved on disk per write of the ceiling. A crash skips at most
/// this many; a clean shutdown skips none.
pub const TOKEN_BLOCK: u64 = 100_000;
/// A new block is reserved in the background when fewer remain.
const LOW_WATER: u64 = TOKEN_BLOCK / 2;
/// After a failed ceiling write, acquires fail fast this long before the
/// next attempt, instead of each trying the disk again.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// Batches queued before connections wait for the core.
const QUEUE_DEPTH: usize = 1024;
/// The most batches applied between two rounds of replies.
const MAX_DRAIN: usize = 512;
/// Leases reclaimed at a time within a step between requests.
const RECLAIM_CHUNK: usize = 64;
/// How long one reclaiming step may run before the core looks at its queue
/// again. Bounded by time rather than count, since a lease costs more to
/// remove while an index is being resized: however many leases expire at
/// once, a request waits at most about this long behind the reclaiming.
const RECLAIM_BUDGET: Duration = Duration::from_micros(500);
/// How long the core waits for requests before it looks at a rewrite that
/// is waiting on its writer again.
const REWRITE_NAP: Duration = Duration::from_millis(1);

/// The lease commands of one read, and where to send their replies.
struct Batch {
    commands: Vec<LeaseCommand>,
    reply: oneshot::Sender<Answer>,
}

/// The core's answer to a batch.
#[derive(Debug, Default)]
pub struct Answer {
    /// One reply per command, in order.
    pub replies: Vec<Reply>,
    /// The commands (by position in the batch) that ran at least
    /// `slowlog-log-slower-than`, and how long they took: the connection,
    /// which has their arguments, puts them in the slow log.
    pub slow: Vec<(usize, Duration)>,
}

/// How connections reach the core. When the last handle is dropped the
/// core flushes the log, stores the ceiling and ends.
#[derive(Clone, Debug)]
pub struct CoreHandle {
    queue: mpsc::Sender<Batch>,
}

impl CoreHandle {
    /// Applies `commands` in order and returns one reply for each.
    pub async fn call(&self, commands: Vec<LeaseCommand>) -> Answer {
        let count = commands.len();
        let (reply, answer) = oneshot::channel();
        if self.queue.send(Batch { commands, reply }).await.is_ok()
            && let Ok(answer) = answer.await
        {
            return answer;
        }
        Answer {
            replies: vec![Reply::error("ERR the server is shutting down"); count],
            slow: Vec::new(),
        }
    }
}

pub struct Core {
    registry: Registry,
    /// The append-only log; `None` with `appendonly no`.
    log: Option<Log>,
    /// Registry time as last written to the log.
    logged_time: f64,
    ceiling: CeilingWriter,
    /// A ceiling write under way, answering with the ceiling it stored.
    reservation: Option<std_mpsc::Receiver<io::Result<u64>>>,
    /// The last failed ceiling write: when, and the error reply it gave.
    failure: Option<(Instant, String)>,
    stats: CommandStats,
    shared: Arc<Shared>,
}

/// Successes and failures of each lease command, for `INFO leases`: an
/// acquire fails when the run is held, a heartbeat, validate or release
/// when it answers 0, a get when the run has no lease, any of them on an
/// error.
#[derive(Debug, Default)]
pub struct CommandStats {
    /// `[succeeded, failed]` for each of [`CommandStats::NAMES`].
    pub counts: [[u64; 2]; 5],
    /// Lookups (heartbeat, validate, get) that found the lease they named,
    /// answering 1 or a lease, and those that did not, answering 0 or
    /// null: `keyspace_hits` and `keyspace_misses`. Errors are neither.
    pub hits: u64,
    pub misses: u64,
}

impl CommandStats {
    pub const NAMES: [&'static str; 5] = ["acquire", "heartbeat", "validate", "release", "get"];

    /// Where `command` is counted, if it is one of those.
    fn slot(command: &LeaseCommand) -> Option<usize> {
        Some(match command {
            LeaseCommand::Acquire { .. } => 0,
            LeaseCommand::Heartbeat { .. } => 1,
            LeaseCommand::Validate { .. } => 2,
            LeaseCommand::Release { .. } => 3,
            LeaseCommand::Get { .. } => 4,
            _ => return None,
        })
    }

    fn record(&mut self, slot: usize, reply: &Reply) {
        let ok = match reply {
            Reply::Int(flag) => *flag == 1,
            Reply::Lease(_) => true,
            _ => false,
        };
        self.counts[slot][usize::from(!ok)] += 1;
        let lookup = matches!(Self::NAMES[slot], "heartbeat" | "validate" | "get");
        let answered = matches!(reply, Reply::Int(_) | Reply::Lease(_) | Reply::Null);
        match (lookup && answered, ok) {
            (true, true) => self.hits += 1,
            (true, false) => self.misses += 1,
            (false, _) => {}
        }
    }
}

impl Core {
    /// Reserves the first block of tokens (so a data directory that cannot
    /// be written stops the start) and spawns the core task on the current
    /// runtime. The handle resolves once the core has flushed the log and
    /// stored the ceiling, after the last [`CoreHandle`] is dropped.
    pub fn start(
        mut registry: Registry,
        log: Option<Log>,
        ceiling: CeilingWriter,
        shared: Arc<Shared>,
    ) -> io::Result<(CoreHandle, JoinHandle<()>)> {
        let first = registry.last_token().saturating_add(TOKEN_BLOCK);
        ceiling.store(first)?;
        registry.set_token_ceiling(first);
        registry.set_recording(log.is_some());
        let core = Core {
            logged_time: registry.time(),
            registry,
            log,
            ceiling,
            reservation: None,
            failure: None,
            stats: CommandStats::default(),
            shared,
        };
        let (queue, batches) = mpsc::channel(QUEUE_DEPTH);
        let task = tokio::spawn(core.run(batches));
        let watcher = tokio::spawn(async move {
            if task.await.is_err() {
                // The registry's state is in doubt: stop, so a supervisor
                // restarts the server from its log, rather than answer
                // every request with an error.
                error!("The registry core failed; exiting");
                std::process::exit(70);
            }
        });
        Ok((CoreHandle { queue }, watcher))
    }

    async fn run(mut self, mut queue: mpsc::Receiver<Batch>) {
        let mut batches = Vec::with_capacity(MAX_DRAIN);
        while self.receive(&mut queue, &mut batches).await {
            self.serve(&mut batches).await;
            self.free_retired();
        }
        self.finish().await;
    }

    /// Waits for batches; while there is work between requests (reclaiming,
    /// a rewrite) does a step of it whenever none are queued. False once
    /// every handle is gone.
    async fn receive(
        &mut self,
        queue: &mut mpsc::Receiver<Batch>,
        batches: &mut Vec<Batch>,
    ) -> bool {
        loop {
            let step = self.background_step().await;
            if step == RewriteStep::Idle {
                return queue.recv_many(batches, MAX_DRAIN).await > 0;
            }
            match queue.try_recv() {
                Ok(batch) => {
                    batches.push(batch);
                    while batches.len() < MAX_DRAIN {
                        let Ok(batch) = queue.try_recv() else { break };
                        batches.push(batch);
                    }
                    return true;
                }
                Err(mpsc::error::TryRecvError::Disconnected) => return false,
                Err(mpsc::error::TryRecvError::Empty) if step == RewriteStep::Waiting => {
                    let waited =
                        tokio::time::timeout(REWRITE_NAP, queue.recv_many(batches, MAX_DRAIN));
                    match waited.await {
                        Ok(0) => return false,
                        Ok(_) => return true,
                        Err(_) => {}
                    }
                }
                // Let the connections run between two steps: on a
                // one-thread runtime they would not get a turn otherwise.
                Err(mpsc::error::TryRecvError::Empty) => tokio::task::yield_now().await,
            }
        }
    }

    /// One step of the work done between requests: reclaiming leases past
    /// retention, and a rewrite under way. `Idle` when there is none.
    async fn background_step(&mut self) -> RewriteStep {
        let swept = self.sweep().await;
        let rewrite = match &mut self.log {
            Some(log) => log.step_rewrite(&self.registry),
            None => RewriteStep::Idle,
        };
        match (swept, rewrite) {
            (true, _) => RewriteStep::Progress,
            (false, step) => step,
        }
    }

    /// Reclaims a bounded number of leases past retention and logs their
    /// removal; true if it did any.
    async fn sweep(&mut self) -> bool {
        if !self.registry.reclaim_due() {
            return false;
        }
        let started = Instant::now();
        let mut reclaimed = 0;
        loop {
            let done = self.registry.reclaim(RECLAIM_CHUNK);
            reclaimed += done;
            if done < RECLAIM_CHUNK || started.elapsed() >= RECLAIM_BUDGET {
                break;
            }
        }
        self.free_retired();
        self.log_changes();
        if let Err(error) = self.commit().await {
            // The removals stay queued in the log and are retried.
            error!("Logging reclaimed leases failed: {error}");
        }
        reclaimed > 0
    }

    /// Applies every drained batch, commits their changes, then answers
    /// them all.
    async fn serve(&mut self, batches: &mut Vec<Batch>) {
        self.poll_reservation();
        let clock = wall_clock();
        let refusal = self.log.as_ref().and_then(Log::refusal);
        let mut stopwatch = Stopwatch::start(&self.shared.config);
        let mut answers = Vec::with_capacity(batches.len());
        for batch in batches.drain(..) {
            let mut answer = Answer {
                replies: Vec::with_capacity(batch.commands.len()),
                slow: Vec::new(),
            };
            // Replies of commands that changed state: they are only true
            // once the change is in the log.
            let mut changed = Vec::new();
            for command in batch.commands {
                if let Some(refusal) = &refusal
                    && command.changes_state()
                {
                    answer.replies.push(Reply::error(refusal.clone()));
                    continue;
                }
                let counted = CommandStats::slot(&command);
                let reply = self.apply(command, clock);
                if let Some(slot) = counted {
                    self.stats.record(slot, &reply);
                }
                if let Some(took) = stopwatch.as_mut().and_then(Stopwatch::lap) {
                    answer.slow.push((answer.replies.len(), took));
                }
                if self.log_changes() {
                    changed.push(answer.replies.len());
                }
                answer.replies.push(reply);
            }
            answers.push((batch.reply, answer, changed));
        }
        if let Err(error) = self.commit().await {
            for (_, answer, changed) in &mut answers {
                for &index in changed.iter() {
                    answer.replies[index] = Reply::error(error.clone());
                }
            }
        }
        for (reply, answer, _) in answers {
            // A client that went away no longer needs its replies.
            let _ = reply.send(answer);
        }
        self.reserve_ahead();
        self.rewrite_when_grown();
    }

    fn apply(&mut self, command: LeaseCommand, clock: f64) -> Reply {
        let registry = &mut self.registry;
        match command {
            LeaseCommand::Acquire {
                run_id,
                worker_id,
                now,
                ttl,
            } => self.acquire(&run_id, &worker_id, now.unwrap_or(clock), ttl),
            LeaseCommand::Heartbeat {
                lease_id,
                token,
                now,
            } => flag(registry.heartbeat(&lease_id, token, now.unwrap_or(clock))),
            LeaseCommand::Validate {
                run_id,
                lease_id,
                token,
                now,
            } => flag(registry.validate(&run_id, &lease_id, token, now.unwrap_or(clock))),
            LeaseCommand::Release { lease_id, token } => flag(registry.release(&lease_id, token)),
            LeaseCommand::Get { run_id, now } => {
                match registry.get(&run_id, now.unwrap_or(clock)) {
                    Some((lease, expired)) => lease_reply(lease, Some(expired)),
                    None => Reply::Null,
                }
            }
            LeaseCommand::Scan {
                cursor,
                pattern,
                count,
            } => scan(registry, cursor, pattern.as_deref(), count),
            LeaseCommand::DbSize => Reply::Int(registry.len() as i64),
            LeaseCommand::Info { sections } => {
                let status = self.log.as_ref().map(Log::status);
                let text = info::render(
                    &sections,
                    &self.shared,
                    registry,
                    &self.stats,
                    status.as_ref(),
                );
                Reply::Verbatim(text.into())
            }
            LeaseCommand::RewriteLog => match &mut self.log {
                None => Reply::error("ERR the append-only log is disabled (appendonly no)"),
                Some(log) => match log.start_rewrite(registry) {
                    Ok(()) => Reply::Status("Background append only file rewriting started"),
                    Err(error) => Reply::error(error),
                },
            },
        }
    }

    fn acquire(&mut self, run_id: &[u8], worker_id: &[u8], now: f64, ttl: Option<f64>) -> Reply {
        loop {
            match self.registry.acquire(run_id, worker_id, now, ttl) {
                Ok(Some(lease)) => return lease_reply(lease, None),
                Ok(None) => return Reply::Null,
                Err(TokenError::Exhausted) => {
                    return Reply::error("ERR every fencing token up to 2^63-1 has been issued");
                }
                Err(TokenError::CeilingReached) => {
                    if let Err(reply) = self.raise_ceiling() {
                        return reply;
                    }
                }
            }
        }
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

    /// Moves the registry's recorded changes into the log; true if there
    /// were any.
    fn log_changes(&mut self) -> bool {
        let Some(log) = &mut self.log else {
            return false;
        };
        let mut any = false;
        for change in self.registry.take_changes() {
            log.append(&change);
            any = true;
        }
        any
    }

    /// Writes this round's changes, and registry time if it moved.
    async fn commit(&mut self) -> Result<(), String> {
        let Some(log) = &mut self.log else {
            return Ok(());
        };
        let time = self.registry.time();
        if time > self.logged_time {
            log.append(&Change::Time(time));
            self.logged_time = time;
        }
        log.commit().await
    }

    fn rewrite_when_grown(&mut self) {
        if let Some(log) = &mut self.log
            && log.wants_rewrite()
            && let Err(error) = log.start_rewrite(&self.registry)
        {
            error!("{error}");
        }
    }

    /// Waits until the ceiling allows at least one more token.
    fn raise_ceiling(&mut self) -> Result<(), Reply> {
        if let Some((when, reply)) = &self.failure
            && when.elapsed() < RETRY_AFTER
        {
            return Err(Reply::error(reply.clone()));
        }
        if self.reservation.is_none() {
            self.start_reservation();
        }
        if let Some(reservation) = self.reservation.take() {
            let done = reservation
                .recv()
                .unwrap_or_else(|_| Err(io::Error::other("the ceiling writer stopped")));
            self.reserved(done);
        }
        match &self.failure {
            Some((_, reply)) if self.registry.last_token() >= self.registry.token_ceiling() => {
                Err(Reply::error(reply.clone()))
            }
            _ => Ok(()),
        }
    }

    /// Takes the outcome of a ceiling write that finished meanwhile.
    fn poll_reservation(&mut self) {
        let Some(reservation) = &self.reservation else {
            return;
        };
        let done = match reservation.try_recv() {
            Err(TryRecvError::Empty) => return,
            Err(TryRecvError::Disconnected) => Err(io::Error::other("the ceiling writer stopped")),
            Ok(done) => done,
        };
        self.reservation = None;
        self.reserved(done);
    }

    /// Starts writing a new block in the background when few tokens remain.
    fn reserve_ahead(&mut self) {
        let remaining = self.registry.token_ceiling() - self.registry.last_token();
        let failed_recently = self
            .failure
            .as_ref()
            .is_some_and(|(when, _)| when.elapsed() < RETRY_AFTER);
        if remaining < LOW_WATER && self.reservation.is_none() && !failed_recently {
            self.start_reservation();
        }
    }

    fn start_reservation(&mut self) {
        let target = self.registry.last_token().saturating_add(TOKEN_BLOCK);
        let writer = self.ceiling.clone();
        let (done, reservation) = std_mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("leased-ceiling".into())
            .spawn(move || {
                let _ = done.send(writer.store(target).map(|()| target));
            });
        match spawned {
            Ok(_) => self.reservation = Some(reservation),
            Err(error) => self.reserved(Err(error)),
        }
    }

    fn reserved(&mut self, done: io::Result<u64>) {
        match done {
            Ok(ceiling) => {
                self.registry.set_token_ceiling(ceiling);
                self.failure = None;
            }
            Err(error) => {
                error!("Writing the token ceiling failed: {error}");
                let reply = format!(
                    "MISCONF Errors writing the fencing-token ceiling to disk ({error}); \
                     acquires are refused until it can be written"
                );
                self.failure = Some((Instant::now(), reply));
            }
        }
    }

    /// Flushes the log, then lowers the stored ceiling to the last token
    /// issued, so a restart continues right after it.
    async fn finish(mut self) {
        if let Some(mut log) = self.log.take() {
            let time = self.registry.time();
            if time > self.logged_time {
                log.append(&Change::Time(time));
            }
            // Closing commits what is queued, then fsyncs.
            match log.close().await {
                Ok(()) => info!("Append-only log flushed"),
                Err(error) => error!("Flushing the append-only log at shutdown failed: {error}"),
            }
        }
        if let Some(reservation) = self.reservation.take()
            && let Ok(done) = reservation.recv()
        {
            self.reserved(done);
        }
        let last = self.registry.last_token();
        match self.ceiling.store(last) {
            Ok(()) => info!("Token ceiling saved: the last fencing token issued is {last}"),
            Err(error) => error!("Saving the token ceiling failed: {error}"),
        }
    }
}

/// Rebuilds the registry at start-up: from the token ceiling, then from the
/// append-only log if it is on. Tokens resume above both.
pub fn load_state(config: &Config, data_dir: &DataDir) -> Result<(Registry, Option<Log>), String> {
    let ceiling = data_dir.read_ceiling().map_err(|e| e.to_string())?;
    let mut registry = Registry::new(config.lease_ttl, ceiling, ceiling);
    registry.set_retention(config.lease_retention);
    // Memory only: the start-up warnings (crate::warnings) say so.
    if !config.appendonly {
        return Ok((registry, None));
    }
    let options = LogOptions {
        dir: data_dir.path().to_path_buf(),
        file_name: config.appendfilename.clone(),
        policy: config.appendfsync,
        rewrite_percentage: config.auto_aof_rewrite_percentage,
        rewrite_min_size: config.auto_aof_rewrite_min_size,
        load_good_prefix: config.aof_load_good_prefix,
    };
    let started = Instant::now();
    let (log, recovery) = Log::open(options, |change| registry.apply(change))?;
    info!(
        "Loaded {} records from the append-only log {} in {:.3} seconds: {} leases, \
         last fencing token {}",
        recovery.records,
        log.path().display(),
        started.elapsed().as_secs_f64(),
        registry.len(),
        registry.last_token(),
    );
    Ok((registry, Some(log)))
}

/// `LEASE.SCAN`: `[next cursor, [run id ...]]`, as `SCAN` replies.
fn scan(registry: &Registry, cursor: u64, pattern: Option<&[u8]>, count: usize) -> Reply {
    let mut runs = Vec::new();
    let from = usize::try_from(cursor).unwrap_or(usize::MAX);
    let next = registry.scan(from, count, |run_id| {
        if pattern.is_none_or(|pattern| glob::matches(pattern, run_id, false)) {
            runs.push(Reply::Bulk(Bytes::copy_from_slice(run_id)));
        }
    });
    Reply::Array(vec![
        Reply::bulk(next.unwrap_or(0).to_string()),
        Reply::Array(runs),
    ])
}

fn flag(value: bool) -> Reply {
    Reply::Int(i64::from(value))
}

/// The lease map (see [`Reply::lease_map`]), encoded only when it is sent.
pub fn lease_reply(lease: Lease, expired: Option<bool>) -> Reply {
    Reply::Lease(Box::new(LeaseReply { lease, expired }))
}
