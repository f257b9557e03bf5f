//! The bus's messages, in the order a connection sees them: the
//! handshake's four, then requests and their responses, one at a time.

use bytes::Bytes;
use openraft::alias::{SnapshotMetaOf, VoteOf};
use openraft::error::{Fatal, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};

use crate::cluster::types::{
    Block, Blocked, ClusterRefusal, Forward, Forwarded, NodeId, ReadIndex, TypeConfig,
};
use crate::command::ClusterChange;

/// The bus protocol's version: a server refuses a client that speaks
/// another.
pub const PROTOCOL: u32 = 1;

/// What a connection carries. Each kind has connections of its own, so a
/// snapshot being sent cannot hold up a vote, nor a long append a
/// heartbeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Kind {
    /// Log replication (`append_entries`).
    Append,
    /// Votes, pre-votes, the leader's heartbeats and its hand-overs
    /// (`transfer_leader`): small, and late ones start elections.
    Vote,
    /// Full snapshots.
    Snapshot,
    /// A follower's clients' commands, sent to the leader, and its
    /// requests for a read index.
    Forward,
    /// Clock probes: kept off the vote connection, so that a probe's round
    /// trip (its error bound) does not include a heartbeat's wait.
    Time,
    /// A follower's blocked acquire waiting in the leader's queue: one per
    /// connection, held for as long as the client waits (no forward
    /// deadline). Closing it takes the waiter out of the queue.
    Block,
    /// `CLUSTER ADDNODE|DELNODE` sent to the leader by another node: a
    /// change may take a minute (a new node catching up), far past a
    /// forward's deadline, so it has connections of its own.
    Membership,
}

impl Kind {
    pub fn as_byte(self) -> u8 {
        match self {
            Kind::Append => 1,
            Kind::Vote => 2,
            Kind::Snapshot => 3,
            Kind::Forward => 4,
            Kind::Time => 5,
            Kind::Block => 6,
            Kind::Membership => 7,
        }
    }
}

impl Request {
    /// Whether a connection of `kind` carries this request: each kind its
    /// own calls, and the vote connection the leader's heartbeats too
    /// (appends with no entries, though any append is let through).
    pub fn goes_on(&self, kind: Kind) -> bool {
        matches!(
            (kind, self),
            (Kind::Append | Kind::Vote, Request::Append(_))
                | (
                    Kind::Vote,
                    Request::Vote(_) | Request::PreVote(_) | Request::TransferLeader(_)
                )
                | (Kind::Snapshot, Request::Snapshot { .. })
                | (
                    Kind::Forward,
                    Request::Forward(_) | Request::ReadIndex | Request::Waiters(_)
                )
                | (Kind::Block, Request::Block(_) | Request::Take)
                | (Kind::Time, Request::Time)
                | (Kind::Membership, Request::Membership(_) | Request::Removed)
        )
    }
}

/// Client → server, first: who is calling, and for what.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub protocol: u32,
    pub from: NodeId,
    pub kind: Kind,
}

/// Server → client: who answers, and the nonce to prove the secret on
/// (`None`: this server has no secret and asks no proof).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Challenge {
    pub server: NodeId,
    pub nonce: Option<[u8; 32]>,
}

/// Client → server: the HMAC of the challenge, if one was asked and the
/// client has a secret.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Proof {
    pub mac: Option<[u8; 32]>,
}

/// Server → client, ending the handshake. After a refusal the server
/// closes the connection.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Verdict {
    Welcome,
    Refused(String),
}

/// A call, client → server.
#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<TypeConfig>),
    PreVote(VoteRequest<TypeConfig>),
    Snapshot {
        vote: VoteOf<TypeConfig>,
        meta: SnapshotMetaOf<TypeConfig>,
        data: Bytes,
    },
    TransferLeader(TransferLeaderRequest<TypeConfig>),
    Forward(Forward),
    /// What the node's clock reads (a peer's skew probe).
    Time,
    /// A read index, confirmed by a majority (asked of the leader by a
    /// follower that serves its clients' reads). New calls go after the
    /// others, so that those keep their encoding.
    ReadIndex,
    /// A blocked acquire, to wait in the leader's queue. The leader
    /// answers [`Response::Offer`] when the run is the waiter's turn (the
    /// client says [`Request::Take`], or closes the connection), then
    /// [`Response::Block`] once.
    Block(Block),
    /// The answer to an offer: the client still waits; grant it.
    Take,
    /// `LEASE.WAITERS run`, read from the leader's queue.
    Waiters(Bytes),
    /// A membership change for the leader to make.
    Membership(ClusterChange),
    /// The leader to a node whose removal it committed: the node may
    /// never receive the entry (the leader stops replicating to it once
    /// it appends it), so it is told. Answered `Membership(Ok(()))`.
    Removed,
}

/// The answer to a [`Request`], of the same variant; a remote Raft's
/// error travels back as it was returned.
#[derive(Debug, Serialize, Deserialize)]
pub enum Response {
    Append(Result<AppendEntriesResponse<TypeConfig>, RaftError<TypeConfig>>),
    Vote(Result<VoteResponse<TypeConfig>, RaftError<TypeConfig>>),
    Snapshot(Result<SnapshotResponse<TypeConfig>, Fatal<TypeConfig>>),
    TransferLeader(Result<TransferLeaderResponse<TypeConfig>, Fatal<TypeConfig>>),
    Forward(Vec<Forwarded>),
    /// Seconds since the Unix epoch by the answering node's wall clock.
    Time {
        seconds: f64,
    },
    /// The read index, or why this node gives none (it does not lead, or
    /// no majority confirmed that it does).
    ReadIndex(Result<ReadIndex, String>),
    /// The blocked acquire's turn came: the leader grants it only once
    /// the client answers [`Request::Take`].
    Offer,
    /// How a blocked acquire ended.
    Block(Blocked),
    Waiters(Result<Vec<Bytes>, ClusterRefusal>),
    /// How the membership change ended: done, or the error the client is
    /// answered (`ERR ...`).
    Membership(Result<(), String>),
}
