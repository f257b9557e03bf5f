//! The bus's client side: openraft's network ([`Bus`] as the factory,
//! [`Peer`] per target), forwarding a follower's commands to the leader
//! ([`Bus::forward`]), asking it for a read index ([`Bus::read_index`])
//! and sending it membership changes ([`Bus::membership`]).
//!
//! Errors keep what openraft needs to know apart: no connection (or a
//! request that could not be written) is `Unreachable`, after which
//! openraft backs off; a deadline that passed is `Timeout`; a connection
//! lost while waiting for the answer is a `NetworkError`.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use openraft::alias::{SnapshotOf, VoteOf};
use openraft::error::{
    NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RPCTypes};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{BasicNode, OptionalSend, RaftNetworkFactory, RaftNetworkV2};

use tokio::sync::{mpsc, oneshot};

use super::frame::{MAX_FRAME, read_frame, write_frame};
use super::pool::{CallError, Conn, Pool};
use super::wire::{Kind, Request, Response};
use crate::cluster::leader_queue::{Conversation, FromLeader};
use crate::cluster::types::{Block, Forward, Forwarded, NodeId, ReadIndex, TypeConfig};
use crate::command::ClusterChange;
use crate::state::cluster_stats::ClusterStats;

/// How long dialling a peer and its handshake may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a forwarded command may wait for the leader's answer.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);

/// This node's end of the bus: openraft's network factory, and the way a
/// follower forwards commands to the leader. Cheap to clone; clones share
/// their connections.
#[derive(Clone)]
pub struct Bus {
    pool: Pool,
    forward_timeout: Duration,
    /// Where this node reaches each peer, by id, from its own
    /// configuration; a peer not listed is reached at the address the
    /// membership gives it.
    peers: Arc<HashMap<NodeId, String>>,
    /// The bus addresses of members the configuration does not list, as
    /// the membership in the log gives them ([`Bus::learn`]).
    learned: Arc<RwLock<HashMap<NodeId, String>>>,
}

impl Bus {
    /// The bus of node `me`, proving `secret` to peers that ask for it.
    pub fn new(me: NodeId, secret: Option<Bytes>) -> Bus {
        Bus {
            pool: Pool::new(me, secret, CONNECT_TIMEOUT),
            forward_timeout: FORWARD_TIMEOUT,
            peers: Arc::default(),
            learned: Arc::default(),
        }
    }

    /// The same bus, reaching each peer at the address this node's
    /// configuration gives it (the membership, the same on every node,
    /// names the nodes; how one node reaches another is its own affair:
    /// through a proxy, or another interface).
    pub fn with_peers(mut self, peers: HashMap<NodeId, String>) -> Bus {
        self.peers = Arc::new(peers);
        self
    }

    /// Where this node reaches `id`'s bus: where its configuration says,
    /// else where the membership said when last learned.
    pub fn peer_addr(&self, id: NodeId) -> Option<String> {
        if let Some(addr) = self.peers.get(&id) {
            return Some(addr.clone());
        }
        let learned = self.learned.read().expect("learned peers lock");
        learned.get(&id).cloned()
    }

    /// The bus addresses of the current members, from the membership:
    /// each replaces what was learned before (a member removed is
    /// forgotten); the configuration's own still come first.
    pub fn learn(&self, members: impl IntoIterator<Item = (NodeId, String)>) {
        let members = members.into_iter().collect();
        *self.learned.write().expect("learned peers lock") = members;
    }

    /// The same bus, connecting to its peers in TLS with `connector` (whose
    /// configuration holds the CA that signs the nodes' certificates, and
    /// this node's certificate if the peers ask for one).
    pub fn with_tls(mut self, connector: tokio_rustls::TlsConnector) -> Bus {
        self.pool = self.pool.with_tls(connector);
        self
    }

    /// The same bus, counting its errors and the snapshots it sends in
    /// `stats` (the server's, for the metrics).
    pub fn with_stats(mut self, stats: Arc<ClusterStats>) -> Bus {
        self.pool = self.pool.with_stats(stats);
        self
    }

    /// The same bus with another deadline for [`Bus::forward`].
    pub fn with_forward_timeout(mut self, timeout: Duration) -> Bus {
        self.forward_timeout = timeout;
        self
    }

    /// Sends a follower's clients' ops to the node at `addr` (the leader's
    /// bus address) and returns its answers, one per op.
    pub async fn forward(
        &self,
        addr: &str,
        request: Forward,
    ) -> Result<Vec<Forwarded>, ForwardError> {
        let request = Request::Forward(request);
        let called = self
            .pool
            .call(addr, Kind::Forward, None, &request, self.forward_timeout)
            .await;
        match called {
            Ok(Response::Forward(answers)) => Ok(answers),
            Ok(other) => Err(ForwardError::NoAnswer(unexpected(&other))),
            Err(CallError::NotSent(why)) => Err(ForwardError::NotSent(why)),
            Err(CallError::NoAnswer(why)) => Err(ForwardError::NoAnswer(why)),
            Err(CallError::TimedOut { sent: false }) => Err(ForwardError::NotSent(format!(
                "{addr}: not sent within {:?}",
                self.forward_timeout
            ))),
            Err(CallError::TimedOut { sent: true }) => Err(ForwardError::NoAnswer(format!(
                "{addr}: no answer within {:?}",
                self.forward_timeout
            ))),
        }
    }

    /// Asks the node at `addr` (the leader's bus address) for a read index.
    /// Every failure is alike to the caller: no read index, so no read
    /// happened and the reads may be sent again.
    pub async fn read_index(&self, addr: &str) -> Result<ReadIndex, String> {
        let called = (self.pool)
            .call(
                addr,
                Kind::Forward,
                None,
                &Request::ReadIndex,
                self.forward_timeout,
            )
            .await;
        match called {
            Ok(Response::ReadIndex(answer)) => answer,
            Ok(other) => Err(unexpected(&other)),
            Err(CallError::TimedOut { .. }) => Err(format!(
                "{addr}: no answer within {:?}",
                self.forward_timeout
            )),
            Err(CallError::NotSent(why) | CallError::NoAnswer(why)) => Err(why),
        }
    }

    /// Sends a follower's client's blocked acquire to the node at `addr`
    /// (the leader's bus address) to wait in its queue, on a connection of
    /// its own: resolves once it is sent, with the conversation (offers,
    /// then the answer; it ends if the connection is lost). Dropping the
    /// conversation closes the connection, which takes the waiter out of
    /// the queue. Only sending it has a deadline.
    pub async fn block(&self, addr: &str, block: Block) -> Result<Conversation, ForwardError> {
        let opened = self.pool.open(addr, Kind::Block);
        let mut conn = match tokio::time::timeout(self.forward_timeout, opened).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(CallError::NotSent(why) | CallError::NoAnswer(why))) => {
                return Err(ForwardError::NotSent(why));
            }
            Ok(Err(CallError::TimedOut { .. })) | Err(_) => {
                let why = format!("{addr}: no connection within {:?}", self.forward_timeout);
                return Err(ForwardError::NotSent(why));
            }
        };
        let request = Request::Block(block);
        let sent = tokio::time::timeout(self.forward_timeout, write_frame(&mut conn, &request));
        match sent.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(ForwardError::NotSent(format!("{addr}: {error}"))),
            Err(_) => return Err(ForwardError::NotSent(format!("{addr}: not sent in time"))),
        }
        let (to_follower, conversation) = mpsc::unbounded_channel();
        let (pool, addr) = (self.pool.clone(), addr.to_string());
        tokio::spawn(async move {
            // Kept for the next blocked acquire if it ended in good order.
            if let Some(conn) = converse(conn, to_follower).await {
                pool.put_idle(&addr, Kind::Block, conn);
            }
        });
        Ok(conversation)
    }

    /// `LEASE.WAITERS run` from the queue of the node at `addr`.
    pub async fn waiters(&self, addr: &str, run: Bytes) -> Result<Vec<Bytes>, ForwardError> {
        let request = Request::Waiters(run);
        let called = (self.pool)
            .call(addr, Kind::Forward, None, &request, self.forward_timeout)
            .await;
        match called {
            Ok(Response::Waiters(Ok(workers))) => Ok(workers),
            Ok(Response::Waiters(Err(refused))) => {
                Err(ForwardError::NoAnswer(format!("{refused:?}")))
            }
            Ok(other) => Err(ForwardError::NoAnswer(unexpected(&other))),
            Err(CallError::NotSent(why) | CallError::NoAnswer(why)) => {
                Err(ForwardError::NoAnswer(why))
            }
            Err(CallError::TimedOut { .. }) => Err(ForwardError::NoAnswer(format!(
                "{addr}: no answer within {:?}",
                self.forward_timeout
            ))),
        }
    }

    /// Sends a membership change (`CLUSTER ADDNODE|DELNODE`) to the node at
    /// `addr` (the leader's bus address), on a connection of its own, and
    /// returns how it ended there: `Ok` for `+OK`, else the error the
    /// client is to be answered. `timeout` is the change's own (a new node
    /// may take a minute to catch up), not a forward's.
    pub async fn membership(
        &self,
        addr: &str,
        change: ClusterChange,
        timeout: Duration,
    ) -> Result<Result<(), String>, ForwardError> {
        let request = Request::Membership(change);
        let called = (self.pool)
            .call(addr, Kind::Membership, None, &request, timeout)
            .await;
        match called {
            Ok(Response::Membership(answer)) => Ok(answer),
            Ok(other) => Err(ForwardError::NoAnswer(unexpected(&other))),
            Err(CallError::NotSent(why)) => Err(ForwardError::NotSent(why)),
            Err(CallError::NoAnswer(why)) => Err(ForwardError::NoAnswer(why)),
            Err(CallError::TimedOut { sent: false }) => Err(ForwardError::NotSent(format!(
                "{addr}: not sent within {timeout:?}"
            ))),
            Err(CallError::TimedOut { sent: true }) => Err(ForwardError::NoAnswer(format!(
                "{addr}: no answer within {timeout:?}"
            ))),
        }
    }

    /// Tells the node at `addr` that its removal was committed (best
    /// effort: a forward's deadline).
    pub async fn removed(&self, addr: &str) -> Result<(), String> {
        let called = (self.pool)
            .call(
                addr,
                Kind::Membership,
                None,
                &Request::Removed,
                self.forward_timeout,
            )
            .await;
        match called {
            Ok(Response::Membership(answer)) => answer,
            Ok(other) => Err(unexpected(&other)),
            Err(CallError::TimedOut { .. }) => Err(format!(
                "{addr}: no answer within {:?}",
                self.forward_timeout
            )),
            Err(CallError::NotSent(why) | CallError::NoAnswer(why)) => Err(why),
        }
    }

    /// What node `target`'s clock reads, asked over a connection of its
    /// own (a skew probe: the caller times the round trip).
    pub async fn time(&self, target: NodeId, timeout: Duration) -> Result<f64, String> {
        let Some(addr) = self.peer_addr(target) else {
            return Err(format!("node {target} is not a peer"));
        };
        let called = (self.pool)
            .call(&addr, Kind::Time, Some(target), &Request::Time, timeout)
            .await;
        match called {
            Ok(Response::Time { seconds }) => Ok(seconds),
            Ok(other) => Err(format!("{addr}: {}", unexpected(&other))),
            Err(CallError::TimedOut { .. }) => Err(format!("{addr}: no answer within {timeout:?}")),
            Err(CallError::NotSent(why) | CallError::NoAnswer(why)) => Err(why),
        }
    }

    #[cfg(test)]
    pub(super) fn idle(&self, addr: &str, kind: Kind) -> usize {
        self.pool.idle(addr, kind)
    }

    fn peer(&self, target: NodeId, node: &BasicNode, append: Kind) -> Peer {
        Peer {
            pool: self.pool.clone(),
            target,
            addr: self.peer_addr(target).unwrap_or_else(|| {
                // Not learned yet: the membership's entry itself, which
                // names the bus port after an '@' for an added node.
                let read = (node.addr.contains('@'))
                    .then(|| crate::cluster::members::address(target, node))
                    .flatten();
                read.map_or_else(|| node.addr.clone(), |read| read.bus_addr.to_string())
            }),
            append,
        }
    }
}

/// Why a forward got no answer, by what it means for the ops.
#[derive(Clone, Debug, PartialEq)]
pub enum ForwardError {
    /// The ops surely did not reach the leader: sending them again is
    /// safe (`-TRYAGAIN`).
    NotSent(String),
    /// The ops were sent and no answer came: they may or may not have
    /// run (`-UNCERTAIN`).
    NoAnswer(String),
}

impl fmt::Display for ForwardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ForwardError::NotSent(why) => write!(f, "not sent to the leader: {why}"),
            ForwardError::NoAnswer(why) => write!(f, "no answer from the leader: {why}"),
        }
    }
}

impl std::error::Error for ForwardError {}

/// A blocked acquire's conversation on its connection: the leader's
/// offers and answer go to the follower's task, its takes to the leader.
/// Ends with the answer (giving the connection back), or when the
/// connection is lost or the task drops its end (closing it).
async fn converse(mut conn: Conn, to_follower: mpsc::UnboundedSender<FromLeader>) -> Option<Conn> {
    loop {
        let said = tokio::select! {
            said = read_frame::<_, Response>(&mut conn, MAX_FRAME) => said,
            () = to_follower.closed() => return None,
        };
        match said {
            Ok(Response::Offer) => {
                let (take, mut taken) = oneshot::channel();
                if to_follower.send(FromLeader::Offer(take)).is_err() {
                    return None;
                }
                let took = tokio::select! {
                    took = &mut taken => took.is_ok(),
                    () = to_follower.closed() => false,
                };
                if !took || write_frame(&mut conn, &Request::Take).await.is_err() {
                    return None;
                }
            }
            Ok(Response::Block(answer)) => {
                let _ = to_follower.send(FromLeader::Answer(answer));
                return Some(conn);
            }
            Ok(other) => {
                tracing::warn!(
                    "bus: a blocked acquire's connection: {}",
                    unexpected(&other)
                );
                return None;
            }
            Err(_) => return None,
        }
    }
}

fn unexpected(response: &Response) -> String {
    format!("answered with the wrong kind of response: {response:?}")
}

impl RaftNetworkFactory<TypeConfig> for Bus {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        self.peer(target, node, Kind::Append)
    }

    /// Heartbeats are appends openraft sends from a client of their own:
    /// they ride the vote connection, so that a long append cannot hold
    /// one up past the followers' election timeout.
    async fn new_heartbeat_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        self.peer(target, node, Kind::Vote)
    }
}

/// This node's calls to one other node (openraft's network client).
pub struct Peer {
    pool: Pool,
    target: NodeId,
    addr: String,
    /// The connection appends go on: [`Kind::Vote`] for heartbeats.
    append: Kind,
}

impl Peer {
    /// Calls the target within `option`'s deadline.
    async fn call(
        &self,
        kind: Kind,
        action: RPCTypes,
        request: &Request,
        option: &RPCOption,
    ) -> Result<Response, RPCError<TypeConfig>> {
        let ttl = option.soft_ttl();
        let called = self
            .pool
            .call(&self.addr, kind, Some(self.target), request, ttl)
            .await;
        called.map_err(|error| match error {
            CallError::NotSent(why) => RPCError::Unreachable(Unreachable::from_string(why)),
            CallError::NoAnswer(why) => RPCError::Network(NetworkError::from_string(why)),
            CallError::TimedOut { .. } => RPCError::Timeout(Timeout {
                action,
                id: self.pool.me(),
                target: self.target,
                timeout: ttl,
            }),
        })
    }

    /// A response of the wrong variant: the peer is confused, and the
    /// connection it came on was already dropped or kept in good order.
    fn mismatch(&self, response: &Response) -> RPCError<TypeConfig> {
        RPCError::Network(NetworkError::from_string(format!(
            "node {}: {}",
            self.target,
            unexpected(response)
        )))
    }
}

/// A remote Raft's error. Its API errors cannot happen (`Infallible`), so
/// it is fatal: that Raft stopped, and openraft should back off from it
/// as from a node it cannot reach (its RPC error has no remote variant).
fn remote(target: NodeId, error: impl fmt::Display) -> Unreachable<TypeConfig> {
    Unreachable::from_string(format!("node {target}: {error}"))
}

impl RaftNetworkV2<TypeConfig> for Peer {
    type SnapshotData = Bytes;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let request = Request::Append(rpc);
        let response = self
            .call(self.append, RPCTypes::AppendEntries, &request, &option)
            .await?;
        match response {
            Response::Append(answered) => answered
                .map_err(|e: RaftError<TypeConfig>| RPCError::Unreachable(remote(self.target, e))),
            other => Err(self.mismatch(&other)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.ballot(Request::Vote(rpc), option).await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.ballot(Request::PreVote(rpc), option).await
    }

    /// The leader handing over to the target: on the vote connection, as
    /// the election it starts.
    async fn transfer_leader(
        &mut self,
        rpc: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        let request = Request::TransferLeader(rpc);
        let response = self
            .call(Kind::Vote, RPCTypes::TransferLeader, &request, &option)
            .await?;
        match response {
            Response::TransferLeader(answered) => {
                answered.map_err(|e| RPCError::Unreachable(remote(self.target, e)))
            }
            other => Err(self.mismatch(&other)),
        }
    }

    async fn full_snapshot(
        &mut self,
        vote: VoteOf<TypeConfig>,
        snapshot: SnapshotOf<TypeConfig, Bytes>,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let request = Request::Snapshot {
            vote,
            meta: snapshot.meta,
            data: snapshot.snapshot,
        };
        let call = self.call(Kind::Snapshot, RPCTypes::InstallSnapshot, &request, &option);
        let response = tokio::select! {
            response = call => response?,
            closed = cancel => return Err(StreamingError::Closed(closed)),
        };
        match response {
            Response::Snapshot(Ok(answer)) => {
                ClusterStats::count(&self.pool.stats().snapshots_sent);
                Ok(answer)
            }
            Response::Snapshot(Err(e)) => Err(StreamingError::Unreachable(remote(self.target, e))),
            other => Err(self.mismatch(&other).into()),
        }
    }
}

impl Peer {
    /// A vote or pre-vote, on the vote connection.
    async fn ballot(
        &self,
        request: Request,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let response = self
            .call(Kind::Vote, RPCTypes::Vote, &request, &option)
            .await?;
        match response {
            Response::Vote(answered) => {
                answered.map_err(|e| RPCError::Unreachable(remote(self.target, e)))
            }
            other => Err(self.mismatch(&other)),
        }
    }
}
