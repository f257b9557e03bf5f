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
//! This is the first slice: the types ([`types`]), the state machine and
//! its snapshots, an in-memory log ([`log_store`]) and a node that writes
//! through its Raft ([`node`]), and the node bus ([`bus`]): TCP between
//! nodes for openraft's RPCs and forwarded commands. Tests also use an
//! in-process router; the server does not use this module yet.
//! docs/cluster.md says what is built and what is not.

pub mod bus;
pub mod log_store;
pub mod node;
pub mod stamp;
pub mod state_machine;
pub mod status;
pub mod types;

#[cfg(test)]
mod network;
#[cfg(test)]
mod tests;
