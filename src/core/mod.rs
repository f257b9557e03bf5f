//! The core: the single owner of the registry, the append-only log and the
//! token ceiling, a task of its own on the connections' runtime.
//!
//! Connections send it one batch per socket read (all the core's commands
//! of that read), so a pipelining client costs one message per read, not
//! one per command. The core drains every queued batch, applies them in
//! order with the registry's one deterministic [`Registry::apply`], writes
//! their changes to the log with one write (and with `appendfsync always`
//! one fsync), and only then answers them all: group commit. While it
//! waits on the disk (the fsync runs on the runtime's blocking pool),
//! connections go on reading, and their batches queue up and make the next
//! round larger.
//!
//! A batch is applied whole before the next one starts, and its changes go
//! out in its round's one write: that is what makes a transaction
//! (`MULTI` ... `EXEC`) atomic and durable together, as the connection
//! sends a transaction's commands within one batch.
//!
//! Answers are data ([`CoreAnswer`]): the connection words them for its
//! client, and INFO and the metrics endpoint render a [`CoreReport`], off
//! this task.
//!
//! A task rather than a thread, by measurement (docs/benchmarks.md): on
//! the default one-thread runtime a request reaches the core and its reply
//! comes back without waking another thread, which on two cores gave about
//! 60% more unpipelined acquires per second than a core thread of its own.
//!
//! Work that is not a client's request is scheduled by the core's timer:
//! reclaiming leases past retention and a log rewrite under way, a bounded
//! step at a time; and, as the server's clock passes a lease's expiry,
//! handing its run to the first blocked acquire waiting for it
//! (`handover`) and publishing `expired` (`publish`).
//!
//! The files: `task` (the loop, rounds of requests, background steps,
//! commits), `apply` (one command: refusals, the registry, the non-lease
//! commands), `handover` (blocked acquires and their queues, with
//! `waiters`), `publish` (lease events to subscribers), `tokens` (the token
//! ceiling), `report` (INFO's figures).

mod apply;
mod handover;
mod memory;
mod publish;
mod report;
mod task;
mod tokens;
pub(crate) mod waiters;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use crate::aof::{Log, LogOptions, OpenError, RewriteError, WriteError};
use crate::ceiling::{DataDir, DataDirError};
use crate::config::{Config, SetError};
use crate::registry::{Op, Outcome, Registry};
use crate::state::Shared;
use task::Core;
use tokens::Tokens;

pub(crate) use apply::run_config;
pub(crate) use publish::publish_applied;
pub use report::{CommandStats, CoreReport, SnapshotReport};
pub use tokens::{CeilingError, TOKEN_BLOCK};
pub use waiters::Granted;

/// Batches queued before connections wait for the core.
pub(crate) const QUEUE_DEPTH: usize = 1024;

/// What a connection asks of the core.
#[derive(Clone, Debug, PartialEq)]
pub enum CoreCommand {
    /// A lease command, or `DBSIZE`.
    Op(Op),
    /// `LEASE.ACQUIRE ... BLOCK`: the acquire (always on the server's
    /// clock), how long it may wait (`None`: forever), and the client, for
    /// `CLIENT UNBLOCK`.
    AcquireBlocking {
        op: Op,
        timeout: Option<Duration>,
        client_id: u64,
    },
    /// `LEASE.WAITERS run`.
    Waiters(Bytes),
    /// `CLIENT UNBLOCK id [TIMEOUT|ERROR]`, or a blocked client's
    /// connection closing: the client leaves the queue it waits in.
    Unblock { client_id: u64, error: bool },
    /// The figures INFO and the metrics endpoint render.
    Report,
    /// `BGREWRITEAOF`.
    RewriteLog,
    /// `BGSAVE`: a cluster node builds its Raft snapshot now.
    Save,
    /// `CONFIG SET name value ...`: the core applies the new settings it
    /// owns and makes the new configuration the running one.
    Configure(Vec<(Bytes, Bytes)>),
    /// `CONFIG RESETSTAT`: the core's command counts start over.
    ResetStats,
}

/// The core's answer to one [`CoreCommand`].
#[derive(Debug)]
pub enum CoreAnswer {
    Outcome(Outcome),
    /// The command was not applied.
    Refused(Refusal),
    Report(Box<CoreReport>),
    /// `BGREWRITEAOF`: started, or why not.
    Rewrite(Result<(), RewriteError>),
    /// `BGSAVE`: started, or why not.
    Save(Result<(), SaveRefused>),
    /// `CONFIG SET`: applied, or why not (then nothing changed).
    Configured(Result<(), SetError>),
    /// `CONFIG RESETSTAT` done.
    Reset,
    /// A blocked acquire joined its run's queue: its outcome comes here.
    Blocked(oneshot::Receiver<Granted>),
    /// `LEASE.WAITERS`: the workers waiting, in queue order.
    Workers(Vec<Bytes>),
}

/// Why `BGSAVE` started no snapshot.
#[derive(Clone, Debug, PartialEq)]
pub enum SaveRefused {
    /// One is being built.
    InProgress,
    /// A single node keeps no snapshots: its backup is its log.
    SingleNode,
}

/// Why a command was not applied.
#[derive(Clone, Debug, PartialEq)]
pub enum Refusal {
    /// The log cannot be written: changes are refused rather than
    /// acknowledged without being durable.
    Log(WriteError),
    /// The token ceiling cannot be written: acquires are refused.
    Ceiling(CeilingError),
    /// An explicit `now` more than `lease-max-skew` seconds ahead of the
    /// server's wall clock.
    FutureNow { max_skew: f64 },
    /// An acquire that would take a run while memory is above
    /// `maxmemory`.
    OutOfMemory,
    /// `BGREWRITEAOF` with `appendonly no`.
    NoLog,
    /// The core has stopped.
    ShuttingDown,
    /// Cluster mode: the command surely did not happen (no leader, or it
    /// was refused before it reached the log); sending it again is safe.
    TryAgain(String),
    /// Cluster mode: the command reached the log, or may have, and its
    /// fate is unknown (the leader changed, or stopped answering).
    Uncertain(String),
    /// Cluster mode: what the command asks is not available in a cluster.
    NotInCluster(&'static str),
}

/// The core's answers to a batch.
#[derive(Debug, Default)]
pub struct Answer {
    /// One answer per command, in order.
    pub answers: Vec<CoreAnswer>,
    /// How long each command took to run, in order: for `INFO
    /// commandstats` and `latencystats`.
    pub took: Vec<Duration>,
    /// The commands (by position in the batch) that ran at least
    /// `slowlog-log-slower-than`, and how long they took: the connection,
    /// which has their arguments, puts them in the slow log.
    pub slow: Vec<(usize, Duration)>,
}

/// The commands of one read, and where to send their answers.
pub(crate) struct Batch {
    pub(crate) commands: Vec<CoreCommand>,
    pub(crate) reply: oneshot::Sender<Answer>,
}

/// How connections reach the core. When the last handle is dropped the
/// core flushes the log, stores the ceiling and ends.
#[derive(Clone, Debug)]
pub struct CoreHandle {
    queue: mpsc::Sender<Batch>,
}

impl CoreHandle {
    /// A handle on the queue a core task (the single node's, or cluster
    /// mode's) reads batches from.
    pub(crate) fn new(queue: mpsc::Sender<Batch>) -> CoreHandle {
        CoreHandle { queue }
    }

    /// Runs `commands` in order and returns one answer for each.
    pub async fn call(&self, commands: Vec<CoreCommand>) -> Answer {
        let count = commands.len();
        let (reply, answer) = oneshot::channel();
        if self.queue.send(Batch { commands, reply }).await.is_ok()
            && let Ok(answer) = answer.await
        {
            return answer;
        }
        let stopped = || CoreAnswer::Refused(Refusal::ShuttingDown);
        Answer {
            answers: std::iter::repeat_with(stopped).take(count).collect(),
            took: vec![Duration::ZERO; count],
            slow: Vec::new(),
        }
    }

    /// The core's figures; `None` once it has stopped.
    pub async fn report(&self) -> Option<Box<CoreReport>> {
        match self.call(vec![CoreCommand::Report]).await.answers.pop() {
            Some(CoreAnswer::Report(report)) => Some(report),
            _ => None,
        }
    }
}

/// Why the core could not start.
#[derive(Debug)]
pub enum StartError {
    DataDir(DataDirError),
    Log(OpenError),
    Ceiling { dir: PathBuf, error: std::io::Error },
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::DataDir(error) => write!(f, "{error}"),
            StartError::Log(error) => write!(f, "{error}"),
            StartError::Ceiling { dir, error } => write!(
                f,
                "cannot write the token ceiling in '{}': {error}",
                dir.display()
            ),
        }
    }
}

impl std::error::Error for StartError {}

/// Loads the registry (from the token ceiling, then from the log if it is
/// on), reserves the first block of tokens, and spawns the core task on
/// the current runtime. The join handle resolves once the core has flushed
/// the log and stored the ceiling, after the last [`CoreHandle`] is
/// dropped.
pub fn start(
    data_dir: &DataDir,
    shared: Arc<Shared>,
) -> Result<(CoreHandle, JoinHandle<()>), StartError> {
    let config = shared.config();
    let last_token = data_dir.read_ceiling().map_err(StartError::DataDir)?;
    let (mut registry, log) = load(&config, data_dir, last_token).map_err(StartError::Log)?;
    registry.set_default_lock_delay(config.lease_lock_delay);
    warn_if_ahead(&registry, &config, shared.clock.now());
    warn_if_over_maxmemory(&config);
    let tokens =
        Tokens::start(data_dir.ceiling_writer(), registry.last_token()).map_err(|error| {
            StartError::Ceiling {
                dir: data_dir.path().to_path_buf(),
                error,
            }
        })?;
    registry.set_recording(log.is_some());
    let core = Core::new(registry, log, tokens, shared.clone());
    let (queue, batches) = mpsc::channel(QUEUE_DEPTH);
    let task = tokio::spawn(core.run(batches));
    let watcher = tokio::spawn(async move {
        if task.await.is_err() {
            // The registry's state is in doubt: stop, so a supervisor
            // restarts the server from its log, rather than answer every
            // request with an error.
            error!("The registry core failed; exiting");
            std::process::exit(70);
        }
    });
    Ok((CoreHandle { queue }, watcher))
}

/// The registry a single node would start with from `data_dir`: its
/// append-only log replayed if it has one (whatever `appendonly` says
/// now), its tokens above the stored ceiling. For a cluster's first node
/// made from a single node (`cluster-init-from-single`).
pub fn load_single(config: &Config, data_dir: &DataDir) -> Result<Registry, StartError> {
    let last_token = data_dir.read_ceiling().map_err(StartError::DataDir)?;
    let log_file = data_dir.path().join(&config.appendfilename);
    let config = Config {
        appendonly: log_file.exists(),
        ..config.clone()
    };
    let (registry, _log) = load(&config, data_dir, last_token).map_err(StartError::Log)?;
    Ok(registry)
}

/// Rebuilds the registry at start-up from the append-only log, if it is
/// on. Tokens resume above `last_token` (the stored ceiling) and above
/// every token in the log.
fn load(
    config: &Config,
    data_dir: &DataDir,
    last_token: u64,
) -> Result<(Registry, Option<Log>), OpenError> {
    let mut registry = Registry::new(config.lease_ttl, last_token);
    registry.set_retention(config.lease_retention);
    // Before the replay: a log's history is kept as far as this allows.
    registry.set_history_len(config.lease_history_len);
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
    let (log, recovery) = Log::open(options, |change| registry.replay(change))?;
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

/// Leases are never dropped to fit `maxmemory`: a log that holds more is
/// loaded whole, and the operator is told what that means.
fn warn_if_over_maxmemory(config: &Config) {
    let allocated = crate::system::allocator_stats().allocated;
    if config.maxmemory > 0 && allocated > config.maxmemory {
        warn!(
            "The leases loaded use {allocated} bytes, more than maxmemory ({} bytes). None \
             is dropped (the policy is noeviction): acquires that would take a run are \
             refused with OOM until releases and reclaims bring memory below the limit, \
             or maxmemory is raised (CONFIG SET maxmemory).",
            config.maxmemory
        );
    }
}

/// Registry time is never moved back; if the log brought it far ahead of
/// the wall clock (a `now` from before `lease-max-skew` existed, or a
/// clock set back), the operator should know what that means.
fn warn_if_ahead(registry: &Registry, config: &Config, wall: f64) {
    let ahead = registry.time() - wall;
    if config.lease_max_skew > 0.0 && ahead > config.lease_max_skew {
        warn!(
            "Registry time loaded from the log ({}) is {ahead:.3} seconds ahead of this \
             machine's clock, more than lease-max-skew ({} seconds). It never moves back: \
             until the clock catches up, commands without `now` are evaluated at registry \
             time, so leases taken without `now` last their TTL from it and no lease expires \
             by the clock. Check the machine's clock; if a client sent a wrong `now` before \
             lease-max-skew refused it, the registry stays ahead until the clock passes it.",
            registry.time(),
            config.lease_max_skew
        );
    }
}
