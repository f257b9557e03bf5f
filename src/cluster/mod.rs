//! Cluster mode's core: three (or more) nodes replicate one registry with
//! Raft (openraft), in process.
//!
//! Log entries are operations, not their effects: a leader stamps each
//! entry with its time ([`stamp`]), and every replica applies the entry's
//! [`crate::registry::Op`]s with the one deterministic
//! [`crate::registry::Registry::apply`] at that stamp ([`state_machine`]).
//! No replica reads a clock while applying, so all of them give the same
//! outcomes and reach the same state, fencing tokens included.
//!
//! The parts: the types ([`types`]); the state machine, its snapshots
//! (built a step at a time, [`snapshot_walk`]) and the log
//! ([`log_store`]), durable under a node's `dir/raft/` ([`disk`],
//! [`snapshot_file`]) or in memory; a node that writes through
//! its Raft ([`node`]) with the leader's stamps ([`stamp`]); the node bus
//! ([`bus`]: TCP between nodes for openraft's RPCs and forwarded
//! commands); the core task connections talk to ([`core`]), its reads,
//! served at a read index rather than through the log ([`reads`]), and
//! blocked acquires waiting in the leader's queue ([`leader_queue`]); the
//! start of
//! a node inside the server ([`start`]); a node whose clock is too far
//! from the others' refusing to lead ([`skew`], [`clock_guard`]); its
//! counts of elections and snapshots ([`recorder`]) and what its snapshot
//! file holds, for backups ([`saves`]); what ROLE, INFO and
//! CLUSTER show ([`status`], [`views`]); a follower's `-MOVED` with
//! `cluster-redirect moved` ([`redirect`]). docs/cluster.md
//! says what is built and what is not.

pub mod bus;
pub mod clock_guard;
pub mod core;
pub mod disk;
pub mod leader_queue;
pub mod log_store;
pub mod members;
pub mod membership;
pub mod migrate;
pub mod node;
pub mod reads;
pub mod recorder;
pub mod redirect;
pub mod saves;
pub mod serve;
pub mod skew;
pub mod snapshot_file;
pub mod snapshot_walk;
pub mod stamp;
pub mod start;
pub mod state_machine;
pub mod status;
pub mod types;
pub mod views;
mod waiting;
mod waiting_follower;

#[cfg(test)]
mod core_tests;
#[cfg(test)]
mod linearizable_tests;
#[cfg(test)]
mod migrate_tests;
#[cfg(test)]
mod network;
#[cfg(test)]
mod reads_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod waiting_follower_tests;
