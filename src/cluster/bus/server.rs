//! The bus's server side: accepts peers, checks their handshake, and
//! answers their calls from this node's Raft (replication, votes,
//! snapshots) or its [`Handlers`] (a follower's clients' commands, and its
//! requests for a read index).
//!
//! One task per connection, one call at a time on it, answered in order.
//! A blocked acquire ([`wire::Kind::Block`](super::wire::Kind::Block)) is
//! a conversation: it holds its connection until it ends, and the
//! connection closing takes the waiter out of the queue.
//! Cancelling the shutdown token stops accepting and closes every
//! connection, calls in progress included.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use openraft::Raft;
use openraft::async_runtime::WatchReceiver;
use openraft::storage::Snapshot;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::frame::{FrameError, MAX_FRAME, read_frame, write_frame};
use super::handshake::{Refusal, admit};
use super::pool::frame_error;
use super::wire::{Request, Response};
use crate::cluster::clock_guard::Guard;
use crate::cluster::leader_queue::{FromLeader, QueueHandle};
use crate::cluster::state_machine::StateMachine;
use crate::cluster::types::{
    Block, Blocked, ClusterRefusal, Forward, Forwarded, NodeId, ReadIndex, TypeConfig,
};
use crate::command::ClusterChange;
use crate::state::cluster_stats::{BusError, ClusterStats};

/// Runs a follower's forwarded ops on this node (the leader) and answers
/// one [`Forwarded`] per op.
pub type ForwardHandler = Arc<dyn Fn(Forward) -> BoxFuture<'static, Vec<Forwarded>> + Send + Sync>;

/// Confirms a read index on this node (the leader), or says why not.
pub type ReadIndexHandler =
    Arc<dyn Fn() -> BoxFuture<'static, Result<ReadIndex, String>> + Send + Sync>;

/// What another node asks of this one about the membership.
#[derive(Clone, Debug, PartialEq)]
pub enum MembershipCall {
    /// A change (`CLUSTER ADDNODE|DELNODE`) for this node to make if it
    /// leads.
    Change(ClusterChange),
    /// The leader committed this node's removal.
    Removed,
}

/// Answers another node's [`MembershipCall`]: `Ok` for `+OK`, else the
/// error the client is answered.
pub type MembershipHandler =
    Arc<dyn Fn(MembershipCall) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// What answers a peer's calls that are not Raft's: followers' forwards,
/// their requests for a read index, their blocked acquires and
/// `LEASE.WAITERS` (the queue, if this node has one), and the membership
/// changes they send (if this node takes them).
#[derive(Clone)]
pub struct Handlers {
    pub forward: ForwardHandler,
    pub read_index: ReadIndexHandler,
    pub queue: Option<QueueHandle>,
    pub membership: Option<MembershipHandler>,
}

/// How long a peer has to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A refused peer is logged at most this often per address.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// What every connection's task needs.
struct Context {
    me: NodeId,
    raft: Raft<TypeConfig, StateMachine>,
    handlers: Handlers,
    /// This node's clock, for peers' probes, and whether it refuses to
    /// lead.
    guard: Guard,
    admission: Admission,
    warned: Warned,
}

/// Whom the server admits, and where it counts what it refuses.
#[derive(Clone, Default)]
pub struct Admission {
    /// The secret peers must prove, if any.
    pub secret: Option<Bytes>,
    /// TLS under the bus handshake, if set (which may require client
    /// certificates).
    pub tls: Option<TlsAcceptor>,
    /// Refused handshakes and broken connections are counted here, and
    /// the snapshot being installed noted.
    pub stats: Arc<ClusterStats>,
}

/// Serves the bus on `listener` until `shutdown` is cancelled; requires
/// peers to prove `secret` if there is one. Peers' clock probes read
/// `guard`'s clock.
pub async fn serve(
    listener: TcpListener,
    raft: Raft<TypeConfig, StateMachine>,
    handlers: Handlers,
    guard: Guard,
    secret: Option<Bytes>,
    shutdown: CancellationToken,
) {
    let admission = Admission {
        secret,
        ..Admission::default()
    };
    serve_admitting(listener, raft, handlers, guard, admission, shutdown).await
}

/// [`serve`] in TLS: every peer's connection goes through `acceptor`
/// (which may require client certificates) before the bus handshake.
pub async fn serve_tls(
    listener: TcpListener,
    raft: Raft<TypeConfig, StateMachine>,
    handlers: Handlers,
    guard: Guard,
    secret: Option<Bytes>,
    acceptor: TlsAcceptor,
    shutdown: CancellationToken,
) {
    let admission = Admission {
        secret,
        tls: Some(acceptor),
        ..Admission::default()
    };
    serve_admitting(listener, raft, handlers, guard, admission, shutdown).await
}

/// [`serve`], admitting peers as `admission` says.
pub async fn serve_admitting(
    listener: TcpListener,
    raft: Raft<TypeConfig, StateMachine>,
    handlers: Handlers,
    guard: Guard,
    admission: Admission,
    shutdown: CancellationToken,
) {
    let me = raft.metrics().borrow_watched().id;
    let context = Arc::new(Context {
        me,
        raft,
        handlers,
        guard,
        admission,
        warned: Warned::default(),
    });
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        while connections.try_join_next().is_some() {}
        match accepted {
            Ok((stream, peer)) => {
                connections.spawn(connection(stream, peer, context.clone()));
            }
            // Out of descriptors, mostly: the next accept may work.
            Err(error) => {
                tracing::warn!("bus: accept failed: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    // Dropping a task drops its socket: the peers see the node go.
    connections.shutdown().await;
}

/// One peer's connection: TLS if the server has it, then the session.
async fn connection(stream: TcpStream, peer: SocketAddr, context: Arc<Context>) {
    let _ = stream.set_nodelay(true);
    let Some(acceptor) = &context.admission.tls else {
        return session(stream, peer, &context).await;
    };
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => session(stream, peer, &context).await,
        Ok(Err(error)) => {
            context.admission.stats.bus_error(BusError::Tls);
            if context.warned.first_in_a_while(peer.ip()) {
                tracing::warn!("bus: TLS handshake with {peer} failed: {error}");
            }
        }
        Err(_) => {
            context.admission.stats.bus_error(BusError::Tls);
            tracing::debug!("bus: no TLS handshake from {peer} within {HANDSHAKE_TIMEOUT:?}")
        }
    }
}

/// The bus handshake, then the peer's calls until it closes.
async fn session<S>(mut stream: S, peer: SocketAddr, context: &Context)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let stats = &context.admission.stats;
    let secret = context.admission.secret.as_deref();
    let admitted =
        tokio::time::timeout(HANDSHAKE_TIMEOUT, admit(&mut stream, context.me, secret)).await;
    let hello = match admitted {
        Ok(Ok(hello)) => hello,
        Ok(Err(Refusal::Denied(reason))) => {
            stats.bus_error(BusError::Refused);
            if context.warned.first_in_a_while(peer.ip()) {
                tracing::warn!("bus: refused a peer from {peer}: {reason}");
            }
            return;
        }
        // A peer that closes before saying anything is no error of the
        // bus (a port check, say).
        Ok(Err(Refusal::Frame(FrameError::Closed))) => return,
        Ok(Err(Refusal::Frame(error))) => {
            stats.bus_error(frame_error(&error));
            tracing::debug!("bus: handshake with {peer} failed: {error}");
            return;
        }
        Err(_) => {
            stats.bus_error(BusError::Broken);
            tracing::debug!("bus: no handshake from {peer} within {HANDSHAKE_TIMEOUT:?}");
            return;
        }
    };
    let node = hello.from;
    tracing::debug!(
        "bus: node {node} connected from {peer} for {:?}",
        hello.kind
    );
    loop {
        let request: Request = match read_frame(&mut stream, MAX_FRAME).await {
            Ok(request) => request,
            Err(FrameError::Closed) => return,
            Err(error) => {
                stats.bus_error(frame_error(&error));
                tracing::warn!("bus: closing node {node}'s connection from {peer}: {error}");
                return;
            }
        };
        // A call on the wrong connection is a bug in the peer: better
        // seen than answered.
        if !request.goes_on(hello.kind) {
            tracing::warn!(
                "bus: closing node {node}'s {:?} connection from {peer}: it carried a call of \
                 another kind",
                hello.kind
            );
            return;
        }
        let request = match request {
            Request::Block(block) => match blocked(&mut stream, context, block).await {
                true => continue,
                false => return,
            },
            // Only ever an answer to an offer.
            Request::Take => {
                tracing::warn!("bus: closing node {node}'s connection from {peer}: a stray Take");
                return;
            }
            request => request,
        };
        let response = answer(context, request).await;
        if let Err(error) = write_frame(&mut stream, &response).await {
            stats.bus_error(BusError::Broken);
            tracing::debug!("bus: cannot answer node {node} at {peer}: {error}");
            return;
        }
    }
}

/// A call's answer, from this node's Raft or its handlers.
async fn answer(context: &Context, request: Request) -> Response {
    let raft = &context.raft;
    match request {
        Request::Append(rpc) => Response::Append(raft.append_entries(rpc).await),
        Request::Vote(rpc) => Response::Vote(raft.vote(rpc).await),
        Request::PreVote(rpc) => Response::Vote(raft.pre_vote(rpc).await),
        Request::Snapshot { vote, meta, data } => {
            // Told first: the node's snapshot changing to this one is
            // then counted as installed, not as built (cluster/recorder.rs).
            let index = meta.last_log_id.map_or(0, |id| id.index + 1);
            (context.admission.stats.installing).store(index, Ordering::Relaxed);
            let snapshot = Snapshot {
                meta,
                snapshot: data,
            };
            Response::Snapshot(raft.install_full_snapshot(vote, snapshot).await)
        }
        // A node that refuses to lead (its clock guard's verdict) declines
        // a hand-over to itself: the leader, which stopped its heartbeats
        // to hand over, is then replaced by an election this node does
        // not stand in. openraft has no refusal to answer with.
        Request::TransferLeader(rpc)
            if *rpc.to_node_id() == context.me && context.guard.refuses_to_lead() =>
        {
            tracing::info!(
                "Declined the lead {} offered: this node refuses to lead (its clock)",
                rpc.from_leader()
            );
            Response::TransferLeader(Ok(Ok(())))
        }
        Request::TransferLeader(rpc) => {
            Response::TransferLeader(raft.handle_transfer_leader(rpc).await)
        }
        Request::Forward(forward) => Response::Forward((context.handlers.forward)(forward).await),
        Request::ReadIndex => Response::ReadIndex((context.handlers.read_index)().await),
        Request::Waiters(run) => Response::Waiters(match &context.handlers.queue {
            Some(queue) => queue.waiters(run).await,
            None => Err(no_queue()),
        }),
        Request::Membership(change) => membership(context, MembershipCall::Change(change)).await,
        Request::Removed => membership(context, MembershipCall::Removed).await,
        Request::Block(_) | Request::Take => unreachable!("a conversation of its own"),
        Request::Time => Response::Time {
            seconds: context.guard.now(),
        },
    }
}

/// A membership call's answer, from this node's handler if it has one.
async fn membership(context: &Context, call: MembershipCall) -> Response {
    Response::Membership(match &context.handlers.membership {
        Some(membership) => membership(call).await,
        None => Err("ERR this node takes no membership changes over the bus".into()),
    })
}

/// A follower's blocked acquire, held until it ends: the queue's offers
/// and answer go to the follower, its takes come back. False if the
/// connection is to be closed (the follower left, or broke the protocol;
/// then the waiter leaves the queue, and an offer is declined).
async fn blocked<S>(stream: &mut S, context: &Context, block: Block) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let Some(queue) = &context.handlers.queue else {
        let answer = Response::Block(Blocked::Refused(no_queue()));
        return write_frame(stream, &answer).await.is_ok();
    };
    let mut conversation = queue.block(block);
    let mut byte = [0; 1];
    loop {
        // The follower says nothing until offered: any byte (or its end)
        // means it left.
        let said = tokio::select! {
            said = conversation.recv() => said,
            _ = stream.read(&mut byte) => return false,
        };
        match said {
            Some(FromLeader::Answer(answer)) => {
                return write_frame(stream, &Response::Block(answer)).await.is_ok();
            }
            Some(FromLeader::Offer(mut take)) => {
                if write_frame(stream, &Response::Offer).await.is_err() {
                    return false;
                }
                let took = tokio::select! {
                    took = read_frame::<_, Request>(stream, MAX_FRAME) => took,
                    // The queue stopped waiting for the take (the next
                    // waiter's turn): closing tells the follower, which
                    // answers `-TRYAGAIN` (`-UNCERTAIN` if its take crossed).
                    () = take.closed() => return false,
                };
                match took {
                    Ok(Request::Take) => {
                        let _ = take.send(());
                    }
                    _ => return false,
                }
            }
            None => return false,
        }
    }
}

fn no_queue() -> ClusterRefusal {
    ClusterRefusal::TryAgain("this node keeps no queue of blocked acquires".into())
}

/// When each address was last warned about, to warn once a minute at
/// most: a misconfigured peer retries all the time.
#[derive(Default)]
pub(super) struct Warned(Mutex<HashMap<IpAddr, Instant>>);

impl Warned {
    pub(super) fn first_in_a_while(&self, ip: IpAddr) -> bool {
        let now = Instant::now();
        let mut warned = self.0.lock().unwrap();
        warned.retain(|_, at| now.duration_since(*at) < WARN_EVERY);
        match warned.contains_key(&ip) {
            true => false,
            false => {
                warned.insert(ip, now);
                true
            }
        }
    }
}
