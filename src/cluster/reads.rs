//! Reads in cluster mode: linearizable, served at a read index, not
//! through the log.
//!
//! A connection's batch whose every command is a read (VALIDATE, GET,
//! GETDATA, HISTORY, SCAN and the keyspace view's reads) that this node
//! can answer without moving registry time is taken out of the core's
//! round ([`RoundReads::take`]) and served here: the node gets a **read
//! index** (openraft's `ReadPolicy::ReadIndex`, never `LeaseRead`: a
//! majority confirms, after the read arrived, that the leader still
//! leads, so no clock is trusted), waits until its own replica has
//! applied the log up to it, and evaluates the reads on that replica.
//! Every write acknowledged before the read arrived is in the log up to
//! the read index, so the read sees it; the read takes effect between its
//! arrival and its answer. That is linearizable, whichever node serves it.
//!
//! **One read index serves many reads**: the reads queued while a read
//! index is on its way all wait for the next one ([`READS_IN_FLIGHT`] at
//! once), as the writes of a round share one entry.
//!
//! **On a follower** the read index comes from the leader over the bus
//! (`super::bus`'s `ReadIndex` call; openraft's "follower read"), and the
//! reads are evaluated on the follower's own replica once it has applied
//! up to it: the leader only confirms its leadership and names a log
//! position, a few bytes each way, and the follower does the reading (the
//! answers, a SCAN's or a HISTORY's included, never cross the bus). A
//! follower never answers from what it had before: it waits for the
//! leader's read index, or answers `-TRYAGAIN`.
//!
//! **Time.** A read is evaluated at the replica's registry time once the
//! read index is applied: a committed time, so nothing a new leader could
//! contradict is ever seen (a lease reported expired stays expired). A
//! read without `now` could otherwise see time stand still while no entry
//! moves it: the leader's ticks keep registry time within about 200 ms of
//! its clock when idle (a tick is proposed once it lags 100 ms, checked
//! every 100 ms), and a read waits until registry time is at most
//! [`MAX_READ_LAG`] behind the leader's stamp taken with the read index
//! (`-TRYAGAIN` if it does not get there within the cluster's patience).
//! So a read without `now` answers as of a time no later than the
//! leader's clock and at most [`MAX_READ_LAG`] behind it. A read with an
//! explicit `now` above this node's registry time would move registry
//! time: it goes through the log as a write does (the core keeps it), as
//! does a read refused for a `now` too far ahead.
//!
//! **Fencing** stays safe: an acquire of a later token that was answered
//! before a VALIDATE arrived is in the log up to the VALIDATE's read index,
//! so the VALIDATE sees the run taken and answers 0. Ahead of time it
//! never looks: a lease is reported valid only while registry time, which
//! every acquire's expiry check uses, has not passed its expiry.
//!
//! **Transactions** stay atomic: a batch (all of a `MULTI`/`EXEC`'s
//! commands come in one) with any command that is not such a read goes
//! through the log whole, reads included; a batch of reads only is
//! evaluated here under one lock of the replica, at one registry time.
//!
//! A read that gets no read index (no leader, the leader unreachable or
//! no longer leading, no majority) or whose replica does not catch up in
//! time answers `-TRYAGAIN`: a read that was not answered changed nothing,
//! so it is always safe to send again.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use openraft::ReadPolicy;
use openraft::async_runtime::WatchReceiver;
use openraft::error::{LinearizableReadError, RaftError};
use openraft::raft::linearizable_read::{Linearizer, ReadLogId};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

use super::node::Node;
use super::types::{NodeId, ReadIndex};
use crate::core::{Answer, Batch, CommandStats, CoreAnswer, CoreCommand, Refusal};
use crate::registry::{Op, Registry};

/// How far registry time may lag the leader's stamp (seconds) when a read
/// without `now` is evaluated: above the lag an idle leader's ticks leave
/// (up to two tick periods, 200 ms, and the tick's commit), so reads
/// seldom wait for time to catch up.
pub const MAX_READ_LAG: f64 = 0.25;

/// Read indexes asked for at once. While they are on their way, reads
/// queue up and the next read index serves them all: one heartbeat round
/// for many reads, however many clients send them.
pub const READS_IN_FLIGHT: usize = 2;

/// The most batches served by one read index.
const MAX_DRAIN: usize = 1024;

/// Asks a node (the leader) for a read index: the bus, or a test's
/// network.
pub type ReadIndexAsker =
    Arc<dyn Fn(NodeId) -> BoxFuture<'static, Result<ReadIndex, String>> + Send + Sync>;

/// Confirms a read index on `node`, which must lead: a majority
/// acknowledges a heartbeat sent after this call (`ReadPolicy::ReadIndex`),
/// so an old leader cut off from the others gets none. The time is the
/// leader's stamp once confirmed.
pub async fn read_index(node: &Node) -> Result<ReadIndex, String> {
    match node.raft.get_read_linearizer(ReadPolicy::ReadIndex).await {
        Ok(linearizer) => Ok(ReadIndex {
            log_id: *linearizer.read_log_id().log_id(),
            time: node.stamp(),
        }),
        Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(_))) => {
            Err(format!("node {} is not the leader", node.id))
        }
        Err(RaftError::APIError(LinearizableReadError::QuorumNotEnough(error))) => Err(format!(
            "node {} could not confirm with a majority that it leads ({error})",
            node.id
        )),
        Err(RaftError::Fatal(error)) => {
            Err(format!("node {}'s Raft has stopped ({error})", node.id))
        }
    }
}

/// The bus server's handler of a follower's read-index call.
pub fn handler(node: Arc<Node>) -> super::bus::ReadIndexHandler {
    Arc::new(move || {
        let node = node.clone();
        Box::pin(async move { read_index(&node).await })
    })
}

/// Whether `op` is a read this node may serve at a read index when its
/// registry time is `time`: one that moves no time (no `now`, or one not
/// above registry time) and that the core would not refuse.
fn servable(op: &Op, time: f64, clock: f64, max_skew: f64) -> bool {
    match op {
        Op::Validate { now, .. } | Op::Get { now, .. } => {
            now.is_none_or(|now| now <= time && super::core::refusal(op, clock, max_skew).is_none())
        }
        Op::GetData { .. }
        | Op::History { .. }
        | Op::Scan { .. }
        | Op::DbSize
        | Op::Inspect { .. }
        | Op::RandomRun { .. } => true,
        Op::Acquire { .. }
        | Op::Heartbeat { .. }
        | Op::Release { .. }
        | Op::SetData { .. }
        | Op::DelData { .. }
        | Op::Reclaim { .. }
        | Op::AnnounceExpired => false,
    }
}

/// A batch of reads taken from the core, and where its answers go.
struct Reading {
    ops: Vec<Op>,
    reply: oneshot::Sender<Answer>,
    arrived: Instant,
}

/// The core's end of the read path.
pub(crate) struct Reads {
    node: Arc<Node>,
    queue: mpsc::UnboundedSender<Reading>,
}

impl Reads {
    /// Starts the task that serves reads on `node`, asking the leader with
    /// `ask` when this node does not lead. A read that is not served
    /// within `patience` is answered `-TRYAGAIN`.
    pub fn start(
        node: Arc<Node>,
        ask: ReadIndexAsker,
        stats: Arc<Mutex<CommandStats>>,
        patience: Duration,
    ) -> Reads {
        let (queue, queued) = mpsc::unbounded_channel();
        let reader = Arc::new(Reader {
            node: node.clone(),
            ask,
            stats,
            patience,
        });
        tokio::spawn(reader.run(queued));
        Reads { node, queue }
    }

    /// What a round needs to pick its reads: this replica's registry time
    /// (read once), this node's clock and `lease-max-skew`.
    pub(crate) fn round(&self, clock: f64, max_skew: f64) -> RoundReads {
        RoundReads {
            queue: self.queue.clone(),
            time: self.node.state.lock().registry.time(),
            clock,
            max_skew,
        }
    }
}

/// The reads of one round of the core.
pub(crate) struct RoundReads {
    queue: mpsc::UnboundedSender<Reading>,
    time: f64,
    clock: f64,
    max_skew: f64,
}

impl RoundReads {
    /// Takes `batch` if every command is a read served here; gives it back
    /// otherwise (it goes through the log whole, as a transaction must).
    pub(crate) fn take(&self, batch: Batch) -> Result<(), Batch> {
        let reads_only = !batch.commands.is_empty()
            && batch.commands.iter().all(|command| {
                matches!(command, CoreCommand::Op(op)
                    if servable(op, self.time, self.clock, self.max_skew))
            });
        if !reads_only {
            return Err(batch);
        }
        let ops = (batch.commands.into_iter())
            .map(|command| match command {
                CoreCommand::Op(op) => op,
                _ => unreachable!("checked above"),
            })
            .collect();
        let reading = Reading {
            ops,
            reply: batch.reply,
            arrived: Instant::now(),
        };
        // The task ends only with the core: a send cannot fail before.
        if let Err(unsent) = self.queue.send(reading) {
            refuse(unsent.0, &Refusal::ShuttingDown);
        }
        Ok(())
    }
}

/// The task that serves reads.
struct Reader {
    node: Arc<Node>,
    ask: ReadIndexAsker,
    stats: Arc<Mutex<CommandStats>>,
    patience: Duration,
}

impl Reader {
    /// Takes every queued read whenever a read index may be asked for,
    /// until the core is gone.
    async fn run(self: Arc<Reader>, mut queued: mpsc::UnboundedReceiver<Reading>) {
        let rounds = Arc::new(Semaphore::new(READS_IN_FLIGHT));
        let mut readings = Vec::new();
        loop {
            let permit = rounds.clone().acquire_owned().await;
            let permit = permit.expect("the semaphore is never closed");
            if queued.recv_many(&mut readings, MAX_DRAIN).await == 0 {
                return;
            }
            let round = std::mem::take(&mut readings);
            tokio::spawn(self.clone().serve(round, permit));
        }
    }

    /// One read index for `readings`, then their answers.
    async fn serve(self: Arc<Reader>, readings: Vec<Reading>, permit: OwnedSemaphorePermit) {
        let deadline = tokio::time::Instant::now() + self.patience;
        let answers = self.read(&readings, deadline).await;
        drop(permit);
        let mut stats = self.stats.lock().expect("stats lock");
        for (reading, answers) in readings.into_iter().zip(answers) {
            let answers = match answers {
                Ok(answers) => answers,
                Err(refused) => refusals(reading.ops.len(), &refused),
            };
            for (op, answer) in reading.ops.iter().zip(&answers) {
                if let CoreAnswer::Outcome(outcome) = answer {
                    stats.record_slot(CommandStats::slot(op), Some(outcome));
                }
            }
            let took = reading.arrived.elapsed();
            let count = answers.len();
            let _ = reading.reply.send(Answer {
                answers,
                took: vec![took; count],
                slow: Vec::new(),
            });
        }
    }

    /// Every reading's answers, or why none: a read index, this replica
    /// caught up with it, and time caught up with the leader's stamp.
    async fn read(
        &self,
        readings: &[Reading],
        deadline: tokio::time::Instant,
    ) -> Vec<Result<Vec<CoreAnswer>, Refusal>> {
        let refused = |refusal: Refusal| readings.iter().map(|_| Err(refusal.clone())).collect();
        let index = match tokio::time::timeout_at(deadline, self.read_index()).await {
            Ok(Ok(index)) => index,
            Ok(Err(refusal)) => return refused(refusal),
            Err(_) => return refused(self.late("no read index came")),
        };
        if let Err(refusal) = self.applied(&index, deadline).await {
            return refused(refusal);
        }
        self.evaluated(readings, index.time - MAX_READ_LAG, deadline)
            .await
            .unwrap_or_else(refused)
    }

    /// A read index: confirmed here if this node leads, else asked of the
    /// leader.
    async fn read_index(&self) -> Result<ReadIndex, Refusal> {
        let leader = self.node.raft.metrics().borrow_watched().current_leader;
        // Not added yet, or removed: such a node serves no read, and says
        // why.
        if let Some(why) = self.node.not_member() {
            return Err(Refusal::TryAgain(why));
        }
        // A leader handing its lead over gives no read index: the next
        // leader does, once known (the caller's deadline bounds the wait).
        let leader = match self.node.handing_over() {
            true => {
                let patience = tokio::time::Instant::now() + self.patience;
                self.node.next_leader(patience).await
            }
            false => leader,
        };
        match leader {
            None => Err(Refusal::TryAgain("the cluster has no leader now".into())),
            Some(leader) if leader == self.node.id => {
                read_index(&self.node).await.map_err(Refusal::TryAgain)
            }
            Some(leader) => (self.ask)(leader).await.map_err(|why| {
                Refusal::TryAgain(format!(
                    "the leader (node {leader}) gave no read index: {why}"
                ))
            }),
        }
    }

    /// Waits until this replica has applied the log up to `index`.
    async fn applied(
        &self,
        index: &ReadIndex,
        deadline: tokio::time::Instant,
    ) -> Result<(), Refusal> {
        let read_log_id = ReadLogId::from_log_id(index.log_id);
        let linearizer = Linearizer::new(self.node.id, read_log_id, None);
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let ready = linearizer.try_await_ready(&self.node.raft, Some(left));
        // A node told it was removed receives no more of the log: its
        // reads are refused at once, not at the deadline.
        let ready = tokio::select! {
            ready = ready => ready,
            why = self.node.until_removed() => return Err(Refusal::TryAgain(why)),
        };
        match ready {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(self.late(&format!(
                "this node did not apply the log up to the read index {}",
                index.log_id
            ))),
            Err(error) => Err(Refusal::TryAgain(format!(
                "this node's Raft has stopped ({error})"
            ))),
        }
    }

    /// Evaluates the readings on this replica once registry time is at
    /// least `floor`, waiting for entries (the leader's ticks) to move it
    /// there.
    async fn evaluated(
        &self,
        readings: &[Reading],
        floor: f64,
        deadline: tokio::time::Instant,
    ) -> Result<Vec<Result<Vec<CoreAnswer>, Refusal>>, Refusal> {
        // Subscribed before looking, so that an entry applied in between
        // still wakes the wait.
        let mut metrics = self.node.raft.metrics();
        loop {
            {
                let mut replica = self.node.state.lock();
                if replica.registry.time() >= floor {
                    let registry = &mut replica.registry;
                    return Ok(readings
                        .iter()
                        .map(|r| Ok(evaluate(registry, &r.ops)))
                        .collect());
                }
            }
            match tokio::time::timeout_at(deadline, metrics.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => {
                    return Err(Refusal::TryAgain("this node's Raft has stopped".into()));
                }
                Err(_) => {
                    return Err(self.late(
                        "registry time did not come within the read lag of the leader's clock",
                    ));
                }
            }
        }
    }

    fn late(&self, what: &str) -> Refusal {
        Refusal::TryAgain(format!(
            "{what} within {} seconds",
            self.patience.as_secs_f64()
        ))
    }
}

/// The answers of `ops` on `registry` at its registry time. Nothing
/// changes: `servable` let in only reads with no `now` above registry
/// time, which only grows.
fn evaluate(registry: &mut Registry, ops: &[Op]) -> Vec<CoreAnswer> {
    let time = registry.time();
    let answers = (ops.iter())
        .map(|op| match op.explicit_now().is_none_or(|now| now <= time) {
            true => CoreAnswer::Outcome(registry.apply(op, time)),
            false => CoreAnswer::Refused(Refusal::TryAgain(
                "registry time went back (a bug): the read was not served".into(),
            )),
        })
        .collect();
    debug_assert_eq!(
        registry.time().to_bits(),
        time.to_bits(),
        "a read moved time"
    );
    answers
}

/// Answers every read of `reading` with `refusal`.
fn refuse(reading: Reading, refusal: &Refusal) {
    let count = reading.ops.len();
    let _ = reading.reply.send(Answer {
        answers: refusals(count, refusal),
        took: vec![reading.arrived.elapsed(); count],
        slow: Vec::new(),
    });
}

fn refusals(count: usize, refusal: &Refusal) -> Vec<CoreAnswer> {
    (0..count)
        .map(|_| CoreAnswer::Refused(refusal.clone()))
        .collect()
}
