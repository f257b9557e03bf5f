//! An in-process network for tests: every node's Raft in one table, RPCs
//! as direct calls, and links a test can cut (one way or both) to
//! partition the cluster or stop a node being heard.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use openraft::alias::{SnapshotOf, VoteOf};
use openraft::error::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{BasicNode, OptionalSend, Raft, RaftNetworkFactory, RaftNetworkV2};

use super::state_machine::StateMachine;
use super::types::{NodeId, TypeConfig};

/// The nodes, and the links that are cut.
#[derive(Default)]
pub struct Router {
    nodes: Mutex<HashMap<NodeId, Raft<TypeConfig, StateMachine>>>,
    /// `(from, to)`: requests from `from` do not reach `to`.
    cut: Mutex<HashSet<(NodeId, NodeId)>>,
    /// `(from, to)`: requests from `from` reach `to` this much later.
    delays: Mutex<HashMap<(NodeId, NodeId), std::time::Duration>>,
}

fn unreachable(from: NodeId, to: NodeId) -> Unreachable<TypeConfig> {
    Unreachable::new(&io::Error::other(format!("link {from} -> {to} is cut")))
}

impl Router {
    pub fn add(&self, id: NodeId, raft: Raft<TypeConfig, StateMachine>) {
        self.nodes.lock().unwrap().insert(id, raft);
    }

    /// Takes a node off the network for good (its Raft is dropped here).
    pub fn remove(&self, id: NodeId) -> Option<Raft<TypeConfig, StateMachine>> {
        self.nodes.lock().unwrap().remove(&id)
    }

    /// Cuts both directions between `a` and `b`.
    pub fn cut(&self, a: NodeId, b: NodeId) {
        let mut cut = self.cut.lock().unwrap();
        cut.insert((a, b));
        cut.insert((b, a));
    }

    /// Cuts `id` off from every other node.
    pub fn isolate(&self, id: NodeId) {
        let others: Vec<NodeId> = self.nodes.lock().unwrap().keys().copied().collect();
        for other in others.into_iter().filter(|&other| other != id) {
            self.cut(id, other);
        }
    }

    /// Mends every link, and takes their delays away.
    pub fn heal(&self) {
        self.cut.lock().unwrap().clear();
        self.delays.lock().unwrap().clear();
    }

    /// Delays both directions between `a` and `b`.
    pub fn delay(&self, a: NodeId, b: NodeId, by: std::time::Duration) {
        let mut delays = self.delays.lock().unwrap();
        delays.insert((a, b), by);
        delays.insert((b, a), by);
    }

    /// Waits out the delay of the link `from` -> `to`, if it has one.
    pub async fn wait(&self, from: NodeId, to: NodeId) {
        let delay = self.delays.lock().unwrap().get(&(from, to)).copied();
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
    }

    fn target(
        &self,
        from: NodeId,
        to: NodeId,
    ) -> Result<Raft<TypeConfig, StateMachine>, Unreachable<TypeConfig>> {
        if self.cut.lock().unwrap().contains(&(from, to)) {
            return Err(unreachable(from, to));
        }
        let nodes = self.nodes.lock().unwrap();
        nodes.get(&to).cloned().ok_or_else(|| unreachable(from, to))
    }

    /// Whether requests from `from` reach `to`.
    pub fn reachable(&self, from: NodeId, to: NodeId) -> bool {
        !self.cut.lock().unwrap().contains(&(from, to))
    }

    /// The reply is lost too if the link back was cut meanwhile.
    fn back(&self, from: NodeId, to: NodeId) -> Result<(), Unreachable<TypeConfig>> {
        match self.cut.lock().unwrap().contains(&(to, from)) {
            true => Err(unreachable(to, from)),
            false => Ok(()),
        }
    }
}

/// A node's view of the network: openraft's network factory.
#[derive(Clone)]
pub struct Links {
    pub from: NodeId,
    pub router: Arc<Router>,
}

/// One node's connection to another.
pub struct Link {
    from: NodeId,
    to: NodeId,
    router: Arc<Router>,
}

impl RaftNetworkFactory<TypeConfig> for Links {
    type Network = Link;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> Link {
        Link {
            from: self.from,
            to: target,
            router: self.router.clone(),
        }
    }
}

impl Link {
    fn lost<E: std::fmt::Display>(&self, error: E) -> Unreachable<TypeConfig> {
        Unreachable::new(&io::Error::other(error.to_string()))
    }
}

impl RaftNetworkV2<TypeConfig> for Link {
    type SnapshotData = Bytes;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.router.wait(self.from, self.to).await;
        let raft = self.router.target(self.from, self.to)?;
        let reply = raft
            .append_entries(rpc)
            .await
            .map_err(|error| self.lost(error))?;
        self.router.back(self.from, self.to)?;
        Ok(reply)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.router.wait(self.from, self.to).await;
        let raft = self.router.target(self.from, self.to)?;
        let reply = raft.vote(rpc).await.map_err(|error| self.lost(error))?;
        self.router.back(self.from, self.to)?;
        Ok(reply)
    }

    async fn full_snapshot(
        &mut self,
        vote: VoteOf<TypeConfig>,
        snapshot: SnapshotOf<TypeConfig, Bytes>,
        _cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        self.router.wait(self.from, self.to).await;
        let raft = self.router.target(self.from, self.to)?;
        let reply = raft
            .install_full_snapshot(vote, snapshot)
            .await
            .map_err(|error| self.lost(error))?;
        self.router.back(self.from, self.to)?;
        Ok(reply)
    }
}
