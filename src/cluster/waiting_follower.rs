//! A follower's client's blocked acquire, waiting in the leader's queue
//! (`waiting.rs` has the queue): a task per client that holds the
//! conversation with the leader ([`super::leader_queue`]) and answers the
//! client.
//!
//! The task takes an offer only while its client waits (connected, not
//! unblocked, its timeout not run out), so until it has taken one no
//! grant can be on its way, and it may answer its client at once:
//! null when the timeout runs out, `CLIENT UNBLOCK`'s answer, `-TRYAGAIN`
//! when the conversation is lost or another node leads. It then drops the
//! conversation, which takes the waiter out of the leader's queue. Once
//! it has taken an offer, only the leader's answer says how it ended: a
//! lost conversation, or no answer within the write's patience, is
//! `-UNCERTAIN`; a grant its client is no longer there to receive is
//! released through the log.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use futures_util::future::BoxFuture;
use openraft::Raft;
use openraft::async_runtime::WatchReceiver;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use super::core::{ForwardFailure, Wake, local};
use super::leader_queue::{Blocker, FromLeader};
use super::state_machine::StateMachine;
use super::types::{Block, Blocked, NodeId, TypeConfig};
use super::waiting::QueueEvent;
use crate::core::Refusal;
use crate::core::waiters::{Granted, Waiter};
use crate::registry::Outcome;

const WAITING: u8 = 0;
/// It took an offer: the grant's outcome answers the client.
const TAKEN: u8 = 1;
const UNBLOCKED_TIMEOUT: u8 = 2;
const UNBLOCKED_ERROR: u8 = 3;
/// Answered (or the client left).
const DONE: u8 = 4;

/// A forwarded blocked acquire's state, shared with the follower's core
/// for `CLIENT UNBLOCK` and INFO's `blocked_clients`.
#[derive(Default)]
pub(super) struct Turn {
    state: AtomicU8,
    unblocked: Notify,
}

impl Turn {
    /// `CLIENT UNBLOCK`: true if the client still waited and had taken no
    /// offer (then it is answered null, or the error, at once).
    pub(super) fn unblock(&self, error: bool) -> bool {
        let to = if error {
            UNBLOCKED_ERROR
        } else {
            UNBLOCKED_TIMEOUT
        };
        let swapped = self
            .state
            .compare_exchange(WAITING, to, Ordering::AcqRel, Ordering::Acquire);
        if swapped.is_ok() {
            self.unblocked.notify_one();
        }
        swapped.is_ok()
    }

    /// Whether the client is still blocked (waiting, or granted and not
    /// yet told).
    pub(super) fn blocked(&self) -> bool {
        matches!(self.state.load(Ordering::Acquire), WAITING | TAKEN)
    }

    fn take(&self) -> Result<(), u8> {
        (self.state)
            .compare_exchange(WAITING, TAKEN, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| ())
    }

    /// Ends the wait unless `CLIENT UNBLOCK` ended it first.
    fn finish(&self) -> Result<(), u8> {
        (self.state)
            .compare_exchange(WAITING, DONE, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| ())
    }
}

/// Marks the turn done however the task ends.
struct Done(Arc<Turn>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.state.store(DONE, Ordering::Release);
    }
}

/// One client's blocked acquire, sent to the leader.
pub(super) struct WaitOnLeader {
    pub block: Blocker,
    pub leader: NodeId,
    /// Resolves when this node sees another leader ([`leader_moved`]).
    pub moved: BoxFuture<'static, ()>,
    pub waiter: Waiter,
    pub request: Block,
    pub turn: Arc<Turn>,
    /// How long a taken offer may wait for the leader's answer.
    pub patience: Duration,
    /// The core, to release a grant nobody received.
    pub wake: mpsc::UnboundedSender<Wake>,
}

impl WaitOnLeader {
    pub(super) async fn run(self) {
        let done = Done(self.turn.clone());
        let WaitOnLeader {
            block,
            leader,
            moved,
            mut waiter,
            request,
            turn,
            patience,
            wake,
        } = self;
        let deadline = waiter.deadline;
        let mut conversation = match block(leader, request).await {
            Ok(conversation) => conversation,
            Err(ForwardFailure::NotSent(why) | ForwardFailure::NoAnswer(why)) => {
                let why = format!("the leader (node {leader}) cannot be reached: {why}");
                return answer(&turn, waiter, Granted::Refused(Refusal::TryAgain(why)));
            }
        };
        let mut moved = moved;
        let far = Instant::now() + Duration::from_secs(86400 * 365);
        let timeout = tokio::time::sleep_until(deadline.unwrap_or(far));
        tokio::pin!(timeout);
        // Set once an offer is taken: how long the leader's answer may take.
        let answer_by = tokio::time::sleep_until(far);
        tokio::pin!(answer_by);
        let mut taken = false;
        loop {
            tokio::select! {
                said = conversation.recv() => match said {
                    Some(FromLeader::Offer(take)) => {
                        let late = deadline.is_some_and(|at| at <= Instant::now());
                        if waiter.reply.is_closed() || late {
                            // Declined by dropping the conversation.
                            break;
                        }
                        if turn.take().is_err() {
                            break;
                        }
                        let _ = take.send(());
                        taken = true;
                        answer_by.as_mut().reset(Instant::now() + patience);
                    }
                    Some(FromLeader::Answer(blocked)) => {
                        turn.state.store(DONE, Ordering::Release);
                        return deliver(waiter, granted(blocked), &wake);
                    }
                    None => {
                        let refusal = match taken {
                            true => Refusal::Uncertain(format!(
                                "the connection to the leader (node {leader}) was lost while \
                                 it granted the run"
                            )),
                            false => Refusal::TryAgain(format!(
                                "the connection to the leader (node {leader}) was lost"
                            )),
                        };
                        turn.state.store(DONE, Ordering::Release);
                        return deliver(waiter, Granted::Refused(refusal), &wake);
                    }
                },
                () = waiter.reply.closed(), if !taken => break,
                () = turn.unblocked.notified(), if !taken => break,
                () = &mut timeout, if !taken && deadline.is_some() => {
                    return answer(&turn, waiter, Granted::TimedOut);
                }
                () = &mut moved, if !taken => {
                    let why = format!(
                        "the cluster's leader (node {leader}) changed while this client was \
                         blocked; block again"
                    );
                    return answer(&turn, waiter, Granted::Refused(Refusal::TryAgain(why)));
                }
                () = &mut answer_by, if taken => {
                    let why = format!(
                        "no answer from the leader (node {leader}) within {} seconds of its offer",
                        patience.as_secs_f64()
                    );
                    turn.state.store(DONE, Ordering::Release);
                    return deliver(waiter, Granted::Refused(Refusal::Uncertain(why)), &wake);
                }
            }
        }
        // The client left, was unblocked, or its time ran out as its turn
        // came: no offer was taken, so nothing was granted.
        match turn.state.load(Ordering::Acquire) {
            UNBLOCKED_TIMEOUT => {
                let _ = waiter.reply.send(Granted::TimedOut);
            }
            UNBLOCKED_ERROR => {
                let _ = waiter.reply.send(Granted::Unblocked);
            }
            _ => answer(&turn, waiter, Granted::TimedOut),
        }
        drop(done);
    }
}

/// Answers the client unless `CLIENT UNBLOCK` did first.
fn answer(turn: &Turn, waiter: Waiter, granted: Granted) {
    match turn.finish() {
        Ok(()) => {
            let _ = waiter.reply.send(granted);
        }
        Err(UNBLOCKED_TIMEOUT) => {
            let _ = waiter.reply.send(Granted::TimedOut);
        }
        Err(UNBLOCKED_ERROR) => {
            let _ = waiter.reply.send(Granted::Unblocked);
        }
        Err(_) => {}
    }
}

/// The leader's answer to the client; a grant it is no longer there to
/// receive goes back.
fn deliver(waiter: Waiter, granted: Granted, wake: &mpsc::UnboundedSender<Wake>) {
    if let Err(Granted::Lease(lease, _)) = waiter.reply.send(granted) {
        let _ = wake.send(Wake::Queue(QueueEvent::GiveBack(lease)));
    }
}

/// The leader's answer as the single node's.
fn granted(blocked: Blocked) -> Granted {
    match blocked {
        Blocked::Outcome(Outcome::Acquired(Some(lease))) => Granted::Lease(lease, None),
        Blocked::Outcome(Outcome::AcquiredData(acquired)) => {
            let (lease, data) = *acquired;
            Granted::Lease(lease, Some(data))
        }
        Blocked::Outcome(Outcome::TokensExhausted) => Granted::TokensExhausted,
        Blocked::Outcome(other) => Granted::Refused(Refusal::Uncertain(format!(
            "unexpected answer to a blocked acquire: {other:?}"
        ))),
        Blocked::TimedOut => Granted::TimedOut,
        Blocked::Refused(refused) => Granted::Refused(local(&refused)),
    }
}

/// Resolves once this node sees another leader than `leader` (or none).
pub(super) async fn leader_moved(raft: Raft<TypeConfig, StateMachine>, leader: NodeId) {
    let mut metrics = raft.metrics();
    loop {
        if metrics.borrow_watched().current_leader != Some(leader) {
            return;
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}
