//! How a follower's blocked acquires reach the leader's queue, whatever
//! carries them (the node bus, or a test's network): the follower's end
//! ([`LeaderQueue`]) and the leader's ([`QueueHandle`]).
//!
//! A blocked acquire sent to the leader is a conversation, not a call: the
//! leader answers [`FromLeader::Offer`] when it is the waiter's turn and
//! grants the run only once the follower takes the offer (its client is
//! still there), then sends one [`FromLeader::Answer`]. So a grant is
//! never proposed for a client the follower knows to be gone, and a
//! follower that loses the conversation knows whether a grant may be on
//! its way (it took an offer: `-UNCERTAIN`) or surely is not (`-TRYAGAIN`).
//! Either side drops its end to leave: the follower's client left, or the
//! leader's queue is gone.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};

use super::core::{ForwardFailure, Wake};
use super::types::{Block, Blocked, ClusterRefusal, NodeId};
use super::waiting::QueueEvent;

/// What the leader says to a blocked acquire's follower.
#[derive(Debug)]
pub enum FromLeader {
    /// Its turn: send `()` to take the run (the grant is then proposed);
    /// drop it to let the next waiter have it.
    Offer(oneshot::Sender<()>),
    /// The end: the grant, a timeout, or a refusal.
    Answer(Blocked),
}

/// The follower's end of a blocked acquire: what the leader says, until
/// its answer (or until the conversation is lost: `None`).
pub type Conversation = mpsc::UnboundedReceiver<FromLeader>;

/// Starts a blocked acquire's conversation with node `to` (the leader):
/// resolves once the request has left, or with why it could not.
pub type Blocker = Arc<
    dyn Fn(NodeId, Block) -> BoxFuture<'static, Result<Conversation, ForwardFailure>> + Send + Sync,
>;

/// Reads `LEASE.WAITERS run` from node `to`'s queue.
pub type AskWaiters = Arc<
    dyn Fn(NodeId, Bytes) -> BoxFuture<'static, Result<Vec<Bytes>, ForwardFailure>> + Send + Sync,
>;

/// A follower's way to the leader's queue.
#[derive(Clone)]
pub struct LeaderQueue {
    pub block: Blocker,
    pub waiters: AskWaiters,
}

impl LeaderQueue {
    /// A node that cannot reach another's queue (tests of other things):
    /// its followers' blocked acquires are answered `-TRYAGAIN`.
    pub fn none() -> LeaderQueue {
        let unreachable = |to: NodeId| ForwardFailure::NotSent(format!("no way to node {to}"));
        LeaderQueue {
            block: Arc::new(move |to, _| Box::pin(async move { Err(unreachable(to)) })),
            waiters: Arc::new(move |to, _| Box::pin(async move { Err(unreachable(to)) })),
        }
    }
}

/// The leader's end: hands followers' blocked acquires and queue reads to
/// this node's core. Cheap to clone.
#[derive(Clone)]
pub struct QueueHandle {
    pub(super) wake: mpsc::UnboundedSender<Wake>,
}

impl QueueHandle {
    /// Queues a follower's blocked acquire here; the conversation's other
    /// end goes back to the follower.
    pub fn block(&self, block: Block) -> Conversation {
        let (to_follower, conversation) = mpsc::unbounded_channel();
        let event = QueueEvent::Block { block, to_follower };
        if let Err(refused) = self.wake.send(Wake::Queue(event)) {
            let Wake::Queue(QueueEvent::Block { to_follower, .. }) = refused.0 else {
                unreachable!("sent a block");
            };
            let why = ClusterRefusal::TryAgain("the node is shutting down".into());
            let _ = to_follower.send(FromLeader::Answer(Blocked::Refused(why)));
        }
        conversation
    }

    /// The workers waiting for `run` in this node's queue, in order (a
    /// refusal if this node does not lead).
    pub async fn waiters(&self, run: Bytes) -> Result<Vec<Bytes>, ClusterRefusal> {
        let (reply, answer) = oneshot::channel();
        let _ = self
            .wake
            .send(Wake::Queue(QueueEvent::Waiters { run, reply }));
        answer
            .await
            .unwrap_or_else(|_| Err(ClusterRefusal::TryAgain("the node is shutting down".into())))
    }
}
