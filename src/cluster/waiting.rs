//! Blocked acquires in a cluster (`LEASE.ACQUIRE ... BLOCK`): one queue
//! per run, on the leader, first come first served across all nodes.
//!
//! The leader's own clients join its queue directly; a follower sends its
//! client's blocked acquire to the leader ([`super::leader_queue`], a
//! conversation of its own on the node bus, exempt from the forward
//! deadline) and its task ([`super::waiting_follower`]) waits there for
//! the answer. The queue is the single node's ([`Waiters`]), so arrival
//! order, timeouts and skipping clients that left work as there. The
//! leader watches its replica for a waited-for run to be free (released,
//! or past its lease's `expires_at` plus lock delay by registry time,
//! which its ticks move) and then serves the head of the queue: its own
//! client's acquire goes straight into the log; a follower's client is
//! first *offered* the run, and the grant is proposed only once the
//! follower takes it (its client is still there). Until then nothing can
//! be granted, so a follower that loses its leader may answer `-TRYAGAIN`;
//! once it took the offer, only the grant's outcome (or `-UNCERTAIN`)
//! answers. A grant that reaches nobody (the client left meanwhile) is
//! released through the log, as the single node releases it.
//!
//! An ordinary acquire of a run with waiters gets null on every node: a
//! follower forwards it, and the leader answers null while the run is
//! queued for or being handed to a waiter. `LEASE.WAITERS` on a follower
//! reads the leader's queue over the bus (waiters are not in the log).
//! A node that does not lead keeps no queue: when it loses leadership it
//! answers its queue `-TRYAGAIN` (grants on their way end as their entry
//! does), and followers answer their clients blocked on the old leader
//! `-TRYAGAIN`; they may block again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use openraft::async_runtime::WatchReceiver;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::warn;

use super::core::{ClusterCore, Outcomes, Wake};
use super::leader_queue::{FromLeader, LeaderQueue};
use super::types::{Block, Blocked, ClusterRefusal, Forwarded};
use super::waiting_follower::{Turn, WaitOnLeader, leader_moved};
use crate::core::waiters::{Granted, Waiter};
use crate::core::{CoreAnswer, Refusal};
use crate::registry::{Lease, Op, Outcome};

/// How long a waiter whose acquire was refused with `-TRYAGAIN` (no
/// leader) waits before it tries again.
const RETRY: f64 = 0.1;
/// How long the leader waits for a follower to take an offer before the
/// next waiter's turn (the follower answers at once unless it is stuck).
const OFFER_PATIENCE: Duration = Duration::from_secs(1);
/// Client ids of followers' waiters in the leader's queue: apart from its
/// own clients' ids (which count up from 1).
const REMOTE: u64 = 1 << 63;

/// What followers, and the tasks of this node's blocked acquires, tell the
/// core about waiting.
pub(crate) enum QueueEvent {
    /// A follower's blocked acquire, to queue here.
    Block {
        block: Block,
        to_follower: mpsc::UnboundedSender<FromLeader>,
    },
    /// `LEASE.WAITERS`, asked by a follower.
    Waiters {
        run: Bytes,
        reply: oneshot::Sender<Result<Vec<Bytes>, ClusterRefusal>>,
    },
    /// A follower took (or did not take) the run offered to its waiter.
    Offered {
        run: Bytes,
        waiter: Waiter,
        taken: bool,
    },
    /// A grant nobody received: released through the log.
    GiveBack(Lease),
}

/// The cluster's part of waiting, beside the single node's queue.
pub(super) struct Remote {
    /// How this node, following, reaches the leader's queue.
    queue: LeaderQueue,
    /// On the leader: followers' waiters in the queue, by their client id.
    followers: HashMap<u64, mpsc::UnboundedSender<FromLeader>>,
    next_id: u64,
    /// On a follower: this node's clients waiting in the leader's queue.
    forwarded: HashMap<u64, Arc<Turn>>,
}

impl Remote {
    pub(super) fn new(queue: LeaderQueue) -> Remote {
        Remote {
            queue,
            followers: HashMap::new(),
            next_id: 0,
            forwarded: HashMap::new(),
        }
    }
}

impl ClusterCore {
    /// Queues a blocked acquire (here if this node leads, on the leader
    /// otherwise); its answer comes through the receiver.
    pub(super) fn acquire_blocking(
        &mut self,
        op: Op,
        timeout: Option<Duration>,
        client_id: u64,
    ) -> CoreAnswer {
        let (run_id, mut waiter, receiver) = Waiter::for_acquire(op, client_id);
        let deadline = timeout.map(|timeout| Instant::now() + timeout);
        if self.node.raft.as_leader().is_ok() {
            self.waiters.enqueue(run_id, waiter, deadline, None);
            // Served at once if the run is free.
            let _ = self.wake.send(Wake::Released);
            return CoreAnswer::Blocked(receiver);
        }
        let leader = self.node.raft.metrics().borrow_watched().current_leader;
        let Some(leader) = leader else {
            let why = "the cluster has no leader now".to_string();
            return CoreAnswer::Refused(Refusal::TryAgain(why));
        };
        let request = Block {
            op: waiter.acquire(run_id),
            timeout_ms: timeout.map(|timeout| timeout.as_millis() as u64),
        };
        waiter.deadline = deadline;
        let turn = Arc::new(Turn::default());
        let remote = &mut self.remote;
        remote.forwarded.retain(|_, turn| turn.blocked());
        remote.forwarded.insert(client_id, turn.clone());
        let task = WaitOnLeader {
            block: remote.queue.block.clone(),
            leader,
            moved: Box::pin(leader_moved(self.node.raft.clone(), leader)),
            waiter,
            request,
            turn,
            patience: self.patience,
            wake: self.wake.clone(),
        };
        tokio::spawn(task.run());
        CoreAnswer::Blocked(receiver)
    }

    /// Tries, for every run whose head waiter is not already trying and
    /// that this replica sees free, to take it for that waiter.
    pub(super) async fn serve_waiters(&mut self) {
        self.time_out_waiters();
        if self.waiters.is_empty() {
            return;
        }
        if self.node.raft.as_leader().is_err() {
            // Only a leader keeps a queue.
            return self.leader_changed();
        }
        let clock = self.shared.clock.now();
        let free: Vec<Bytes> = {
            let replica = self.node.state.lock();
            let now = clock.max(replica.registry.time());
            (self.waiters.runs().into_iter())
                .filter(|run| !self.trying.contains(run))
                .filter(|run| replica.registry.free_at(run).is_none_or(|at| at <= now))
                .collect()
        };
        for run in free {
            if self.waiters.front(&run).is_none() {
                continue;
            }
            let waiter = self.waiters.pop(&run).expect("the front waiter");
            match self.remote.followers.get(&waiter.client_id).cloned() {
                Some(follower) => self.offer(run, waiter, follower),
                None => self.try_for(run, waiter).await,
            }
        }
    }

    /// What came back to the core about waiting.
    pub(super) async fn woken(&mut self, wake: Wake) {
        match wake {
            Wake::Tried {
                run,
                waiter,
                outcome,
            } => self.tried(run, waiter, outcome).await,
            Wake::Released => {}
            Wake::Queue(QueueEvent::Block { block, to_follower }) => {
                self.queue_follower(block, to_follower)
            }
            Wake::Queue(QueueEvent::Waiters { run, reply }) => {
                let workers = match self.node.raft.as_leader() {
                    Ok(_) => Ok(self.waiters.workers(&run)),
                    Err(_) => Err(not_leading()),
                };
                let _ = reply.send(workers);
            }
            Wake::Queue(QueueEvent::Offered { run, waiter, taken }) => {
                self.offered(run, waiter, taken).await
            }
            Wake::Queue(QueueEvent::GiveBack(lease)) => self.give_back(lease).await,
        }
    }

    /// A follower's client joins the queue, as this node's clients do; a
    /// task relays its answer to the follower.
    fn queue_follower(&mut self, block: Block, to_follower: mpsc::UnboundedSender<FromLeader>) {
        if self.node.raft.as_leader().is_err() {
            let refused = Blocked::Refused(not_leading());
            let _ = to_follower.send(FromLeader::Answer(refused));
            return;
        }
        self.remote.next_id += 1;
        let client_id = REMOTE | self.remote.next_id;
        let (run, waiter, receiver) = Waiter::for_acquire(block.op, client_id);
        let deadline = (block.timeout_ms).map(|ms| Instant::now() + Duration::from_millis(ms));
        self.waiters.enqueue(run, waiter, deadline, None);
        self.remote.followers.insert(client_id, to_follower.clone());
        tokio::spawn(relay(receiver, to_follower, self.wake.clone()));
    }

    /// Offers `run` to a follower's waiter; its answer comes back as a
    /// wake, and meanwhile nobody else is served the run.
    fn offer(&mut self, run: Bytes, waiter: Waiter, follower: mpsc::UnboundedSender<FromLeader>) {
        self.trying.insert(run.clone());
        let (take, taken) = oneshot::channel();
        let _ = follower.send(FromLeader::Offer(take));
        let wake = self.wake.clone();
        tokio::spawn(async move {
            let taken = matches!(
                tokio::time::timeout(OFFER_PATIENCE, taken).await,
                Ok(Ok(()))
            );
            let offered = QueueEvent::Offered { run, waiter, taken };
            let _ = wake.send(Wake::Queue(offered));
        });
    }

    /// The follower took the run for its waiter (then the grant goes into
    /// the log), or it did not (the waiter is gone: the next one's turn).
    async fn offered(&mut self, run: Bytes, waiter: Waiter, taken: bool) {
        self.trying.remove(&run);
        if !taken {
            // Its follower left, or is stuck: if it is still there, it
            // hears `-TRYAGAIN` from the relay.
            self.remote.followers.remove(&waiter.client_id);
            return;
        }
        if self.node.raft.as_leader().is_err() {
            let why = "the leader lost leadership before granting the run; block again";
            let _ = (waiter.reply).send(Granted::Refused(Refusal::TryAgain(why.into())));
            return;
        }
        self.try_for(run, waiter).await;
    }

    /// Sends an acquire for `waiter`; the outcome comes back as a wake.
    async fn try_for(&mut self, run: Bytes, waiter: Waiter) {
        let op = waiter.acquire(run.clone());
        self.trying.insert(run.clone());
        let outcome = self.submit(vec![op]).await;
        let wake = self.wake.clone();
        tokio::spawn(async move {
            let outcome = outcome.await;
            let _ = wake.send(Wake::Tried {
                run,
                waiter,
                outcome,
            });
        });
    }

    /// What came of an attempt for a waiter: the run, a place kept at the
    /// head of the queue, or an error.
    async fn tried(&mut self, run: Bytes, waiter: Waiter, outcome: Outcomes) {
        self.trying.remove(&run);
        let leading = self.node.raft.as_leader().is_ok();
        let granted = match outcome.map(|mut answers| answers.pop()) {
            Ok(Some(Forwarded::Outcome(Outcome::Acquired(Some(lease))))) => {
                Granted::Lease(lease, None)
            }
            Ok(Some(Forwarded::Outcome(Outcome::AcquiredData(acquired)))) => {
                let (lease, data) = *acquired;
                Granted::Lease(lease, Some(data))
            }
            Ok(Some(Forwarded::Outcome(Outcome::TokensExhausted))) => Granted::TokensExhausted,
            Ok(Some(Forwarded::Outcome(Outcome::Acquired(None)))) if leading => {
                return self.wait_again(run, waiter, 0.0);
            }
            Err(Refusal::TryAgain(_)) if leading => return self.wait_again(run, waiter, RETRY),
            Ok(Some(Forwarded::Outcome(Outcome::Acquired(None)))) | Err(Refusal::TryAgain(_)) => {
                let why = "the cluster's leader changed while this client was blocked; block again";
                Granted::Refused(Refusal::TryAgain(why.into()))
            }
            Err(refusal) => Granted::Refused(refusal),
            Ok(other) => Granted::Refused(Refusal::Uncertain(format!(
                "unexpected answer to a blocked acquire: {other:?}"
            ))),
        };
        let taken = matches!(granted, Granted::Lease(..));
        if taken {
            self.stats().granted_after(waiter.since.elapsed());
        }
        self.remote.followers.remove(&waiter.client_id);
        if let Err(Granted::Lease(lease, _)) = waiter.reply.send(granted) {
            // The client left after the run was taken for it.
            self.give_back(lease).await;
        }
    }

    /// Releases, through the log, a lease granted to a client that left.
    async fn give_back(&mut self, lease: Lease) {
        let release = Op::Release {
            lease_id: lease.lease_id().into(),
            token: lease.fencing_token,
        };
        // Spawned: a forward is only sent when its future runs.
        tokio::spawn(self.submit(vec![release]).await);
    }

    /// Puts a waiter back at the head of its queue, to look again when the
    /// run may be free (`after` seconds from now at the earliest).
    fn wait_again(&mut self, run: Bytes, waiter: Waiter, after: f64) {
        let free_at = {
            let replica = self.node.state.lock();
            let now = self.shared.clock.now().max(replica.registry.time());
            replica
                .registry
                .free_at(&run)
                .unwrap_or(now)
                .max(now + after)
        };
        if let Some(waiter) = self.waiters.push_front(run, waiter, free_at) {
            self.stats().timed_out += 1;
            let _ = waiter.reply.send(Granted::TimedOut);
        }
    }

    /// Answers null to the waiters whose timeout has run out, and forgets
    /// followers' waiters that left.
    fn time_out_waiters(&mut self) {
        for waiter in self.waiters.timed_out(Instant::now()) {
            self.stats().timed_out += 1;
            let _ = waiter.reply.send(Granted::TimedOut);
        }
        let followers = &mut self.remote.followers;
        if !followers.is_empty() {
            followers.retain(|_, follower| !follower.is_closed());
        }
    }

    /// This node no longer leads (or the leader changed): every client
    /// blocked in its queue is told to block again.
    pub(super) fn leader_changed(&mut self) {
        let waiters = self.waiters.drain();
        if !waiters.is_empty() {
            warn!(
                "The leader changed: {} blocked clients are answered TRYAGAIN",
                waiters.len()
            );
        }
        for waiter in waiters {
            let why = "the cluster's leader changed while this client was blocked; block again";
            let _ = waiter
                .reply
                .send(Granted::Refused(Refusal::TryAgain(why.into())));
        }
        self.remote.followers.clear();
    }

    /// `CLIENT UNBLOCK`: the client leaves its queue with null (`TIMEOUT`)
    /// or an error (`ERROR`); false if it was not waiting (or the run is
    /// on its way to it).
    pub(super) fn unblock(&mut self, client_id: u64, error: bool) -> bool {
        if let Some(turn) = self.remote.forwarded.get(&client_id) {
            return turn.unblock(error);
        }
        let Some(waiter) = self.waiters.take_client(client_id) else {
            return false;
        };
        let answer = match error {
            true => Granted::Unblocked,
            false => Granted::TimedOut,
        };
        waiter.reply.send(answer).is_ok()
    }

    /// Clients blocked on this node, for INFO: in its queue, or waiting in
    /// the leader's.
    pub(super) fn blocked_clients(&self) -> usize {
        let forwarded = self.remote.forwarded.values();
        self.waiters.count() + forwarded.filter(|turn| turn.blocked()).count()
    }

    /// `LEASE.WAITERS run` on a follower: the leader's queue.
    pub(super) fn leader_waiters(&self, run: Bytes) -> BoxFuture<'static, CoreAnswer> {
        let leader = self.node.raft.metrics().borrow_watched().current_leader;
        let ask = self.remote.queue.waiters.clone();
        let patience = self.patience;
        Box::pin(async move {
            let Some(leader) = leader else {
                let why = "the cluster has no leader now".to_string();
                return CoreAnswer::Refused(Refusal::TryAgain(why));
            };
            let why = match tokio::time::timeout(patience, ask(leader, run)).await {
                Ok(Ok(workers)) => return CoreAnswer::Workers(workers),
                Ok(Err(failure)) => format!("{failure:?}"),
                Err(_) => format!("no answer within {} seconds", patience.as_secs_f64()),
            };
            let why = format!("the leader (node {leader}) did not say who waits: {why}");
            CoreAnswer::Refused(Refusal::TryAgain(why))
        })
    }
}

/// Relays a follower's waiter's answer; a grant the follower is no longer
/// there to receive goes back.
async fn relay(
    receiver: oneshot::Receiver<Granted>,
    to_follower: mpsc::UnboundedSender<FromLeader>,
    wake: mpsc::UnboundedSender<Wake>,
) {
    let granted = tokio::select! {
        granted = receiver => granted.ok(),
        // Gone: its waiter is skipped, or its grant given back.
        () = to_follower.closed() => return,
    };
    let blocked = match granted {
        Some(granted) => blocked(granted),
        // Dropped without an answer: its turn passed untaken.
        None => Blocked::Refused(ClusterRefusal::TryAgain(
            "the client did not take its turn in time; block again".into(),
        )),
    };
    if let Err(refused) = to_follower.send(FromLeader::Answer(blocked))
        && let FromLeader::Answer(Blocked::Outcome(outcome)) = refused.0
    {
        let lease = match outcome {
            Outcome::Acquired(Some(lease)) => Some(lease),
            Outcome::AcquiredData(acquired) => Some(acquired.0),
            _ => None,
        };
        if let Some(lease) = lease {
            let _ = wake.send(Wake::Queue(QueueEvent::GiveBack(lease)));
        }
    }
}

/// A waiter's answer, for its follower.
fn blocked(granted: Granted) -> Blocked {
    match granted {
        Granted::Lease(lease, None) => Blocked::Outcome(Outcome::Acquired(Some(lease))),
        Granted::Lease(lease, Some(data)) => {
            Blocked::Outcome(Outcome::AcquiredData(Box::new((lease, data))))
        }
        Granted::TimedOut | Granted::Unblocked => Blocked::TimedOut,
        Granted::TokensExhausted => Blocked::Outcome(Outcome::TokensExhausted),
        Granted::Refused(refusal) => Blocked::Refused(match refusal {
            Refusal::TryAgain(why) => ClusterRefusal::TryAgain(why),
            Refusal::FutureNow { max_skew } => ClusterRefusal::FutureNow { max_skew },
            Refusal::OutOfMemory => ClusterRefusal::OutOfMemory,
            Refusal::ShuttingDown => ClusterRefusal::TryAgain("the leader is shutting down".into()),
            Refusal::Uncertain(why) => ClusterRefusal::Uncertain(why),
            other => ClusterRefusal::Uncertain(format!("{other:?}")),
        }),
    }
}

fn not_leading() -> ClusterRefusal {
    ClusterRefusal::TryAgain("the node asked is no longer the leader".into())
}
