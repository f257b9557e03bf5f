//! Cluster mode's core task: what the single node's core is to its
//! connections (the same [`CoreHandle`], the same batches and answers),
//! with the registry replicated.
//!
//! On the leader, each round of batches (every batch queued, and every
//! request forwarded by a follower) becomes **one** log entry: its lease
//! ops stamped with the leader's time. The entry is handed to Raft and the
//! core goes on to the next round while it commits, so many entries are in
//! flight at once and each fsync covers many commands (group commit). A
//! round's replies go out once its entry is applied here, with the
//! outcomes every replica computed.
//!
//! On a follower, a round's lease ops go to the leader over the bus as one
//! [`Forward`], and the leader's answers are relayed.
//!
//! A batch of reads only (VALIDATE, GET, ... with no `now` above registry
//! time) does not go into the entry: [`super::reads`] serves it at a read
//! index, on this node's replica, at a committed registry time (a read at
//! a time not yet in the log could report a lease expired that a new
//! leader, stamping from the log's time, would still let heartbeat). Any
//! other batch, a transaction's included, goes into the entry whole.
//!
//! Failover errors keep apart what a client may safely resend
//! ([`Refusal::TryAgain`]: refused before it reached a log) from what may
//! have happened ([`Refusal::Uncertain`]: appended, then leadership moved
//! or the cluster went silent).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use openraft::async_runtime::WatchReceiver;
use openraft::error::ClientWriteError;
use openraft::impls::ProgressResponder;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tracing::warn;

use super::leader_queue::LeaderQueue;
use super::node::Node;
use super::reads::{ReadIndexAsker, Reads};
use super::types::{ClusterRefusal, Command, Forward, Forwarded, NodeId, Tick};
use super::waiting::{QueueEvent, Remote};
use crate::config::{DirectiveError, SetError};
use crate::core::waiters::{Waiter, Waiters};
use crate::core::{
    Answer, Batch, CommandStats, CoreAnswer, CoreCommand, CoreReport, Refusal, SaveRefused,
    run_config,
};
use crate::registry::{Op, Outcome};
use crate::state::Shared;

/// The most batches (and forwarded requests) in one round, one entry.
const MAX_DRAIN: usize = 512;
/// Rounds sent to the log and not yet answered, at most. While that many
/// are on their way, requests queue up and the next round takes them all:
/// fewer, larger entries (one fsync and one append each, on every node)
/// instead of an entry for every few commands when clients do not
/// pipeline.
const ROUNDS_IN_FLIGHT: usize = 4;
/// Leases reclaimed per tick: a count, the same on every replica (about a
/// millisecond of applying on each).
const RECLAIM_STEP: usize = 1024;
/// Ticks proposed at once while leases wait to be reclaimed: 40,000
/// leases a second at most, so a registry under a sustained stream of
/// acquires does not grow without bound.
const RECLAIM_TICKS: usize = 4;
/// How often the leader lets time pass on every replica when no command
/// does (and looks for leases to reclaim).
const TICK_EVERY: Duration = Duration::from_millis(100);

/// Why a forward to the leader failed.
#[derive(Debug)]
pub enum ForwardFailure {
    /// It never left this node (no connection): safe to resend.
    NotSent(String),
    /// It was sent and no answer came back: its fate is unknown.
    NoAnswer(String),
}

/// Sends a forward to a node (the bus, or a test's network).
pub type Forwarder = Arc<
    dyn Fn(NodeId, Forward) -> BoxFuture<'static, Result<Vec<Forwarded>, ForwardFailure>>
        + Send
        + Sync,
>;

/// How a node reaches the leader: the bus, or a test's network.
pub struct ToLeader {
    /// Lease commands, as one forward a round.
    pub forward: Forwarder,
    /// A read index for reads served here.
    pub read_index: ReadIndexAsker,
    /// Blocked acquires and `LEASE.WAITERS`, in the leader's queue.
    pub queue: LeaderQueue,
}

/// A follower's forward, as the leader's bus server hands it to the core.
pub struct Forwarding {
    pub request: Forward,
    pub reply: oneshot::Sender<Vec<Forwarded>>,
}

/// The commands of one request and where its answers go.
enum Request {
    Local(Batch),
    Forwarded(Forwarding),
}

/// Where a request's answers go, once all of them are known.
enum ReplyTo {
    Local(oneshot::Sender<Answer>),
    Forwarded(oneshot::Sender<Vec<Forwarded>>),
}

/// One request of a round: its answers so far, and which of them wait
/// for the entry (by position in the round's ops).
struct Pending {
    reply: ReplyTo,
    answers: Vec<Option<CoreAnswer>>,
    /// `(position among the request's answers, position in the ops)`.
    waiting: Vec<(usize, usize)>,
    /// Answers that come from elsewhere (a follower's `LEASE.WAITERS`,
    /// from the leader), by position.
    later: Vec<(usize, BoxFuture<'static, CoreAnswer>)>,
}

/// What comes back to the core from the tasks that wait for entries.
pub(super) enum Wake {
    /// An acquire for a blocked client came back.
    Tried {
        run: Bytes,
        waiter: Waiter,
        outcome: Outcomes,
    },
    /// A round with releases was applied: runs may be free.
    Released,
    /// Blocked acquires in the leader's queue (`waiting`).
    Queue(QueueEvent),
}

pub struct ClusterCore {
    pub(super) node: Arc<Node>,
    forward: Forwarder,
    pub(super) shared: Arc<Shared>,
    /// Counted when outcomes arrive, on tasks of their own.
    stats: Arc<Mutex<CommandStats>>,
    /// How long a command may wait for its entry to be applied before it
    /// is answered `-UNCERTAIN`.
    pub(super) patience: Duration,
    /// This node's blocked acquires (`waiting`).
    pub(super) waiters: Waiters,
    /// Runs with an acquire for their head waiter on its way (or offered
    /// to a follower's waiter).
    pub(super) trying: HashSet<Bytes>,
    /// Followers' waiters in this leader's queue, and this follower's
    /// clients in the leader's.
    pub(super) remote: Remote,
    pub(super) wake: mpsc::UnboundedSender<Wake>,
    wakes: Option<mpsc::UnboundedReceiver<Wake>>,
    /// The leader last seen: when it changes, blocked clients are told.
    leader: Option<NodeId>,
    /// Where batches of reads go, to be served at a read index.
    reads: Reads,
}

impl ClusterCore {
    pub fn new(
        node: Arc<Node>,
        to_leader: ToLeader,
        shared: Arc<Shared>,
        patience: Duration,
    ) -> ClusterCore {
        let (wake, wakes) = mpsc::unbounded_channel();
        let stats = Arc::new(Mutex::new(CommandStats::default()));
        let ToLeader {
            forward,
            read_index,
            queue,
        } = to_leader;
        let reads = Reads::start(node.clone(), read_index, stats.clone(), patience);
        ClusterCore {
            node,
            forward,
            shared,
            stats,
            patience,
            waiters: Waiters::default(),
            trying: HashSet::new(),
            remote: Remote::new(queue),
            wake,
            wakes: Some(wakes),
            leader: None,
            reads,
        }
    }

    /// Where followers' blocked acquires and queue reads reach this core.
    pub fn queue_handle(&self) -> super::leader_queue::QueueHandle {
        super::leader_queue::QueueHandle {
            wake: self.wake.clone(),
        }
    }

    pub(super) fn stats(&self) -> MutexGuard<'_, CommandStats> {
        self.stats.lock().expect("stats lock")
    }

    /// Serves connections' batches and followers' forwards until every
    /// handle is gone.
    pub(crate) async fn run(
        mut self,
        mut queue: mpsc::Receiver<Batch>,
        mut forwards: mpsc::Receiver<Forwarding>,
    ) {
        let mut wakes = self.wakes.take().expect("the core runs once");
        let timeout = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(timeout);
        let mut batches = Vec::with_capacity(MAX_DRAIN);
        let mut forwarded = Vec::new();
        let mut ticks = tokio::time::interval(TICK_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let rounds = Arc::new(Semaphore::new(ROUNDS_IN_FLIGHT));
        let mut permit = None;
        loop {
            let deadline = self.waiters.next_deadline();
            if let Some(at) = deadline {
                timeout.as_mut().reset(at);
            }
            let ready = permit.is_some();
            tokio::select! {
                biased;
                acquired = rounds.clone().acquire_owned(), if !ready => {
                    permit = acquired.ok();
                    continue;
                }
                received = queue.recv_many(&mut batches, MAX_DRAIN), if ready => {
                    if received == 0 {
                        break;
                    }
                    while let Ok(forward) = forwards.try_recv() {
                        forwarded.push(forward);
                    }
                }
                received = forwards.recv_many(&mut forwarded, MAX_DRAIN), if ready => {
                    if received == 0 {
                        continue;
                    }
                    while let Ok(batch) = queue.try_recv() {
                        batches.push(batch);
                    }
                }
                _ = ticks.tick() => {
                    self.tick().await;
                    self.serve_waiters().await;
                    continue;
                }
                Some(wake) = wakes.recv() => {
                    self.woken(wake).await;
                    self.serve_waiters().await;
                    continue;
                }
                () = &mut timeout, if deadline.is_some() => {
                    self.serve_waiters().await;
                    continue;
                }
            }
            let requests = (batches.drain(..).map(Request::Local))
                .chain(forwarded.drain(..).map(Request::Forwarded))
                .collect();
            let permit = permit.take().expect("a round starts with its permit");
            self.round(requests, permit).await;
        }
    }

    /// One round: lease ops to the log (or to the leader), the rest
    /// answered here.
    async fn round(&mut self, requests: Vec<Request>, permit: OwnedSemaphorePermit) {
        let leading = self.node.raft.as_leader().is_ok();
        let started = Instant::now();
        let clock = self.shared.clock.now();
        let max_skew = self.shared.config().lease_max_skew;
        let reads = self.reads.round(clock, max_skew);
        let mut ops = Vec::new();
        let mut pending = Vec::with_capacity(requests.len());
        for request in requests {
            let (commands, reply) = match request {
                Request::Local(batch) => match reads.take(batch) {
                    Ok(()) => continue,
                    Err(batch) => (batch.commands, ReplyTo::Local(batch.reply)),
                },
                Request::Forwarded(forwarding) => {
                    if !leading {
                        let refused = not_leader(forwarding.request.ops.len());
                        let _ = forwarding.reply.send(refused);
                        continue;
                    }
                    let commands = forwarding.request.ops.into_iter().map(CoreCommand::Op);
                    (commands.collect(), ReplyTo::Forwarded(forwarding.reply))
                }
            };
            let mut request = Pending {
                reply,
                answers: Vec::with_capacity(commands.len()),
                waiting: Vec::new(),
                later: Vec::new(),
            };
            for command in commands {
                let answer = match command {
                    CoreCommand::Op(op) => match refusal(&op, clock, max_skew) {
                        Some(refused) => Some(CoreAnswer::Refused(refused)),
                        // The run goes to this node's blocked clients first.
                        None if self.waited_for(&op) => {
                            Some(CoreAnswer::Outcome(Outcome::Acquired(None)))
                        }
                        None => {
                            request.waiting.push((request.answers.len(), ops.len()));
                            ops.push(op);
                            None
                        }
                    },
                    CoreCommand::AcquireBlocking {
                        op,
                        timeout,
                        client_id,
                    } => match refusal(&op, clock, max_skew) {
                        Some(refused) => Some(CoreAnswer::Refused(refused)),
                        None => Some(self.acquire_blocking(op, timeout, client_id)),
                    },
                    // The queue is the leader's.
                    CoreCommand::Waiters(run) if !leading => {
                        let at = request.answers.len();
                        request.later.push((at, self.leader_waiters(run)));
                        None
                    }
                    other => Some(self.execute(other)),
                };
                request.answers.push(answer);
            }
            pending.push(request);
        }
        // The ops go into the log: what counting them needs is kept.
        let slots: Vec<Option<usize>> = ops.iter().map(CommandStats::slot).collect();
        let releases = ops.iter().any(|op| matches!(op, Op::Release { .. }));
        let outcomes = match ops.is_empty() {
            true => Box::pin(async { Ok(Vec::new()) }) as BoxFuture<'static, _>,
            false => self.submit(ops).await,
        };
        let stats = self.stats.clone();
        let wake = (releases && !self.waiters.is_empty()).then(|| self.wake.clone());
        tokio::spawn(async move {
            let outcomes = outcomes.await;
            // The next round may go to the log.
            drop(permit);
            for request in &mut pending {
                for (at, later) in request.later.drain(..) {
                    request.answers[at] = Some(later.await);
                }
            }
            if let Some(wake) = wake {
                let _ = wake.send(Wake::Released);
            }
            if let Ok(outcomes) = &outcomes {
                let mut stats = stats.lock().expect("stats lock");
                for (slot, outcome) in slots.into_iter().zip(outcomes) {
                    match outcome {
                        Forwarded::Outcome(outcome) => stats.record_slot(slot, Some(outcome)),
                        Forwarded::Refused(_) => stats.record_slot(slot, None),
                    }
                }
            }
            answer(pending, outcomes, started.elapsed());
        });
    }

    /// Sends `ops` to the log as one entry: proposed here if this node
    /// leads, forwarded to the leader otherwise.
    pub(super) async fn submit(&self, ops: Vec<Op>) -> BoxFuture<'static, Outcomes> {
        match self.node.raft.as_leader() {
            // Handing its lead over before its own removal, it takes no
            // writes: they go to the next leader once it is known.
            Ok(_) if self.node.handing_over() => self.relay_to_next(ops),
            Ok(_) => self.propose(ops).await,
            // Not added yet, or removed: this node serves no lease command.
            Err(_) => match self.node.not_member() {
                Some(why) => Box::pin(async move { Err(Refusal::TryAgain(why)) }),
                None => self.relay(ops),
            },
        }
    }

    /// Whether `op` is an acquire of a run clients wait for in this node's
    /// queue, or that is on its way to one of them.
    fn waited_for(&self, op: &Op) -> bool {
        matches!(op, Op::Acquire { run_id, .. }
            if self.waiters.has_waiters(run_id) || self.trying.contains(run_id))
    }

    /// Appends `ops` as one entry stamped with this leader's time; the
    /// future resolves with their outcomes once it is applied here.
    async fn propose(&self, ops: Vec<Op>) -> BoxFuture<'static, Outcomes> {
        let count = ops.len();
        let command = Command::Batch(super::types::Batch {
            time: self.node.stamp(),
            ops,
        });
        let (responder, applied) = ProgressResponder::complete_only();
        if let Err(error) = self
            .node
            .raft
            .client_write_ff(command, Some(responder))
            .await
        {
            let why = format!("this node's Raft has stopped ({error})");
            return Box::pin(async move { Err(Refusal::TryAgain(why)) });
        }
        let patience = self.patience;
        Box::pin(async move {
            let result = match tokio::time::timeout(patience, applied).await {
                Err(_) => return Err(silent(patience)),
                Ok(Err(_)) => {
                    return Err(Refusal::Uncertain(
                        "this node stopped before the command was known to commit".into(),
                    ));
                }
                Ok(Ok(result)) => result,
            };
            match result {
                Ok(response) => Ok(response.data.into_iter().map(Forwarded::Outcome).collect()),
                Err(ClientWriteError::ForwardToLeader(_)) => Err(Refusal::TryAgain(
                    "this node lost leadership before the command reached its log".into(),
                )),
                Err(error) => {
                    warn!("A write of {count} commands ended uncertain: {error}");
                    Err(Refusal::Uncertain(
                        "leadership changed before the command was known to commit".into(),
                    ))
                }
            }
        })
    }

    /// Sends `ops` to the leader as one forward; the future resolves with
    /// its answers.
    fn relay(&self, ops: Vec<Op>) -> BoxFuture<'static, Outcomes> {
        let leader = self.node.raft.metrics().borrow_watched().current_leader;
        let forward = self.forward.clone();
        let patience = self.patience;
        Box::pin(async move {
            let Some(leader) = leader else {
                return Err(Refusal::TryAgain("the cluster has no leader now".into()));
            };
            relay_to(forward, leader, ops, patience).await
        })
    }

    /// [`ClusterCore::relay`] once the leader this node hands its lead to
    /// is known (within the patience).
    fn relay_to_next(&self, ops: Vec<Op>) -> BoxFuture<'static, Outcomes> {
        let node = self.node.clone();
        let forward = self.forward.clone();
        let patience = self.patience;
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + patience;
            let Some(leader) = node.next_leader(deadline).await else {
                return Err(Refusal::TryAgain(format!(
                    "this node was handing its lead over and no next leader was known within \
                     {} seconds",
                    patience.as_secs()
                )));
            };
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            relay_to(forward, leader, ops, left).await
        })
    }

    /// On the leader, when registry time lags its clock by a tick or more
    /// (no command moved it) or leases wait to be reclaimed: an entry that
    /// lets time pass on every replica, so expiries are seen (and
    /// announced) everywhere without a command, and reclaims a bounded
    /// count of leases. A busy leader's commands move time themselves.
    async fn tick(&mut self) {
        let leader = self.node.raft.metrics().borrow_watched().current_leader;
        if leader != self.leader {
            if self.leader.is_some() {
                self.leader_changed();
            }
            self.leader = leader;
        }
        if self.node.raft.as_leader().is_err() {
            return;
        }
        let time = self.node.stamp();
        let (lagging, reclaim) = {
            let replica = self.node.state.lock();
            let lag = time - replica.registry.time();
            (
                lag >= TICK_EVERY.as_secs_f64(),
                replica.registry.reclaim_due(),
            )
        };
        let ticks = match (lagging, reclaim) {
            (_, true) => RECLAIM_TICKS,
            (true, false) => 1,
            (false, false) => return,
        };
        for _ in 0..ticks {
            let command = Command::Tick(Tick {
                time,
                reclaim: RECLAIM_STEP,
            });
            // Not waited for: the next tick looks again.
            if let Err(error) = self.node.raft.client_write_ff(command, None).await {
                warn!("Proposing a tick failed: {error}");
                return;
            }
        }
    }

    /// The commands that are not lease ops, answered by this node.
    fn execute(&mut self, command: CoreCommand) -> CoreAnswer {
        match command {
            CoreCommand::Op(_) | CoreCommand::AcquireBlocking { .. } => {
                unreachable!("lease ops go through the log")
            }
            CoreCommand::Waiters(run_id) => CoreAnswer::Workers(self.waiters.workers(&run_id)),
            CoreCommand::Unblock { client_id, error } => {
                CoreAnswer::Outcome(Outcome::Flag(self.unblock(client_id, error)))
            }
            CoreCommand::Report => CoreAnswer::Report(Box::new(self.report())),
            CoreCommand::RewriteLog => CoreAnswer::Refused(Refusal::NotInCluster(
                "BGREWRITEAOF (the Raft log is snapshotted)",
            )),
            CoreCommand::Save => CoreAnswer::Save(
                super::saves::bgsave(&self.node).map_err(|_| SaveRefused::InProgress),
            ),
            CoreCommand::Configure(pairs) => CoreAnswer::Configured(self.configure(&pairs)),
            CoreCommand::ResetStats => {
                *self.stats.lock().expect("stats lock") = CommandStats::default();
                self.node.state.lock().registry.reset_health();
                self.shared.stats.reset();
                self.shared.calls.reset();
                CoreAnswer::Reset
            }
        }
    }

    fn report(&self) -> CoreReport {
        let applied = self.node.state.last_applied_index();
        let snapshot = self.node.state.saves().report(applied);
        let replica = self.node.state.lock();
        let registry = &replica.registry;
        CoreReport {
            leases: registry.len(),
            expired: registry.expired_count(),
            last_token: registry.last_token(),
            // No ceiling in a cluster: tokens come from the replicated log.
            token_ceiling: registry.last_token(),
            registry_time: registry.time(),
            lease_ttl: registry.default_ttl(),
            blocked_clients: self.blocked_clients(),
            run_data: registry.data_count(),
            run_data_bytes: registry.data_memory(),
            history_entries: registry.history_entries(),
            history_bytes: registry.history_memory(),
            commands: self.stats.lock().expect("stats lock").clone(),
            health: registry.health().clone(),
            log: None,
            snapshot: Some(snapshot),
        }
    }

    /// `CONFIG SET`. The registry's settings are refused: every replica
    /// must apply entries with the same ones, so they are set in every
    /// node's file, not on one node.
    fn configure(&self, pairs: &[(bytes::Bytes, bytes::Bytes)]) -> Result<(), SetError> {
        let old = self.shared.config();
        let pairs: Vec<(&[u8], &[u8])> = pairs.iter().map(|(n, v)| (&n[..], &v[..])).collect();
        let new = old.set(&pairs)?;
        let replicated = [
            ("lease-ttl", new.lease_ttl != old.lease_ttl),
            (
                "lease-lock-delay",
                new.lease_lock_delay != old.lease_lock_delay,
            ),
            (
                "lease-retention",
                new.lease_retention != old.lease_retention,
            ),
            (
                "lease-history-len",
                new.lease_history_len != old.lease_history_len,
            ),
        ];
        if let Some((name, _)) = replicated.into_iter().find(|(_, changed)| *changed) {
            return Err(SetError::Failed {
                name: name.to_string(),
                error: DirectiveError::Immutable,
            });
        }
        run_config(&self.shared, &old, new);
        Ok(())
    }
}

pub(super) type Outcomes = Result<Vec<Forwarded>, Refusal>;

/// Sends `ops` to `leader` as one forward and waits `patience` at most
/// for its answers.
async fn relay_to(
    forward: Forwarder,
    leader: NodeId,
    ops: Vec<Op>,
    patience: Duration,
) -> Outcomes {
    let sent = forward(leader, Forward { ops });
    match tokio::time::timeout(patience, sent).await {
        Err(_) => Err(silent(patience)),
        Ok(Ok(answers)) => Ok(answers),
        Ok(Err(ForwardFailure::NotSent(why))) => Err(Refusal::TryAgain(format!(
            "the leader (node {leader}) cannot be reached: {why}"
        ))),
        Ok(Err(ForwardFailure::NoAnswer(why))) => Err(Refusal::Uncertain(format!(
            "the leader (node {leader}) did not answer: {why}"
        ))),
    }
}

/// Refusals decided before an op is proposed: an explicit `now` too far
/// ahead of this node's clock.
pub(super) fn refusal(op: &Op, clock: f64, max_skew: f64) -> Option<Refusal> {
    let now = op.explicit_now()?;
    (max_skew > 0.0 && now > clock + max_skew).then_some(Refusal::FutureNow { max_skew })
}

fn silent(patience: Duration) -> Refusal {
    Refusal::Uncertain(format!(
        "no answer from the cluster within {} seconds",
        patience.as_secs_f64()
    ))
}

fn not_leader(count: usize) -> Vec<Forwarded> {
    let refused = ClusterRefusal::TryAgain("the node forwarded to is no longer the leader".into());
    vec![Forwarded::Refused(refused); count]
}

/// Sends every request of a round its answers: the ones decided at once,
/// and the entry's outcomes (or its failure) for the rest.
fn answer(pending: Vec<Pending>, outcomes: Outcomes, took: Duration) {
    for request in pending {
        let mut answers = request.answers;
        for (at, op) in request.waiting {
            answers[at] = Some(match &outcomes {
                Ok(outcomes) => match outcomes.get(op) {
                    Some(Forwarded::Outcome(outcome)) => CoreAnswer::Outcome(outcome.clone()),
                    Some(Forwarded::Refused(refused)) => CoreAnswer::Refused(local(refused)),
                    None => CoreAnswer::Refused(Refusal::Uncertain(
                        "the leader's answer was cut short".into(),
                    )),
                },
                Err(refused) => CoreAnswer::Refused(refused.clone()),
            });
        }
        let answers: Vec<CoreAnswer> = answers.into_iter().map(|a| a.expect("answered")).collect();
        match request.reply {
            ReplyTo::Local(reply) => {
                let count = answers.len();
                let _ = reply.send(Answer {
                    answers,
                    took: vec![took; count],
                    slow: Vec::new(),
                });
            }
            ReplyTo::Forwarded(reply) => {
                let _ = reply.send(answers.into_iter().map(remote).collect());
            }
        }
    }
}

/// A leader's refusal as this node's.
pub(super) fn local(refused: &ClusterRefusal) -> Refusal {
    match refused {
        ClusterRefusal::TryAgain(why) => Refusal::TryAgain(why.clone()),
        ClusterRefusal::Uncertain(why) => Refusal::Uncertain(why.clone()),
        ClusterRefusal::FutureNow { max_skew } => Refusal::FutureNow {
            max_skew: *max_skew,
        },
        ClusterRefusal::OutOfMemory => Refusal::OutOfMemory,
    }
}

/// This leader's answer, for the follower that forwarded the op.
fn remote(answer: CoreAnswer) -> Forwarded {
    match answer {
        CoreAnswer::Outcome(outcome) => Forwarded::Outcome(outcome),
        CoreAnswer::Refused(refusal) => Forwarded::Refused(match refusal {
            Refusal::FutureNow { max_skew } => ClusterRefusal::FutureNow { max_skew },
            Refusal::OutOfMemory => ClusterRefusal::OutOfMemory,
            Refusal::TryAgain(why) => ClusterRefusal::TryAgain(why),
            Refusal::ShuttingDown => ClusterRefusal::TryAgain("the leader is shutting down".into()),
            other => ClusterRefusal::Uncertain(format!("{other:?}")),
        }),
        other => Forwarded::Refused(ClusterRefusal::Uncertain(format!(
            "unexpected answer {other:?}"
        ))),
    }
}
