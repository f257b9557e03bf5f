//! One cluster node: its Raft, its state machine and its stamper. Writes
//! go through the leader, which stamps each entry with its time.

use std::sync::Arc;

use openraft::error::{ClientWriteError, Fatal, RaftError};
use openraft::network::NetSnapshot;
use openraft::{Config, Raft, RaftNetworkFactory};

use super::log_store::LogStore;
use super::stamp::{Clock, Stamper};
use super::state_machine::{MakeRegistry, StateMachine};
use super::types::{Batch, Command, NodeId, Tick, TypeConfig};
use crate::registry::{Op, Outcome};

pub type WriteError = RaftError<TypeConfig, ClientWriteError<TypeConfig>>;

pub struct Node {
    pub id: NodeId,
    pub raft: Raft<TypeConfig, StateMachine>,
    pub state: StateMachine,
    stamper: Stamper,
}

impl Node {
    /// Starts a node with an empty log and a registry from `make`.
    pub async fn start<N>(
        id: NodeId,
        config: Arc<Config>,
        network: N,
        make: MakeRegistry,
        clock: Clock,
    ) -> Result<Node, Fatal<TypeConfig>>
    where
        N: RaftNetworkFactory<TypeConfig>,
        N::Network: NetSnapshot<TypeConfig, SnapshotData = bytes::Bytes>,
    {
        let state = StateMachine::new(make);
        let raft = Raft::new(id, config, network, LogStore::default(), state.clone()).await?;
        Ok(Node {
            id,
            raft,
            state,
            stamper: Stamper::new(clock),
        })
    }

    /// The next stamp: never below this node's registry time.
    pub fn stamp(&self) -> f64 {
        let floor = self.state.lock().registry.time();
        self.stamper.stamp(floor)
    }

    /// Writes `ops` as one entry, if this node leads; returns the stamp
    /// and each op's outcome once the entry is applied here.
    ///
    /// Concurrent writes may reach the log out of stamp order: a replica
    /// then evaluates the later entry's lagging stamp at registry time, as
    /// every replica does, so outcomes stay the same everywhere.
    pub async fn write(&self, ops: Vec<Op>) -> Result<(f64, Vec<Outcome>), WriteError> {
        let time = self.stamp();
        let response = self
            .raft
            .client_write(Command::Batch(Batch { time, ops }))
            .await?;
        Ok((time, response.data))
    }

    /// Lets time pass on every replica: registry time to this leader's
    /// stamp, and up to `reclaim` leases past retention removed.
    pub async fn tick(&self, reclaim: usize) -> Result<(f64, Vec<Outcome>), WriteError> {
        let time = self.stamp();
        let response = self
            .raft
            .client_write(Command::Tick(Tick { time, reclaim }))
            .await?;
        Ok((time, response.data))
    }
}
