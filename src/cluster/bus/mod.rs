//! The node bus: TCP between cluster nodes, carrying openraft's RPCs and
//! a follower's forwarded commands.
//!
//! Every message is a frame, `[u32 length][u32 CRC-32][postcard payload]`
//! ([`frame`]). A connection opens with a handshake ([`handshake`]) in
//! which the client says who it is and what the connection is for, and
//! proves `cluster-secret` by an HMAC of the server's nonce when the server
//! has one. Then it carries one kind of call ([`wire::Kind`]), one at a
//! time: appends, votes (and heartbeats), snapshots, forwards and
//! membership changes each have connections of their own, so none waits
//! behind another.
//!
//! With TLS ([`Bus::with_tls`], [`serve_tls`]) the bus handshake runs
//! inside it.
//!
//! A node makes its [`Bus`] first (it is openraft's network factory), then
//! its Raft with it, then [`serve`]s the bus with that Raft.

pub mod client;
pub mod frame;
pub mod handshake;
mod pool;
pub mod server;
pub mod wire;

pub use client::{Bus, ForwardError, Peer};
pub use server::{
    Admission, ForwardHandler, Handlers, MembershipCall, MembershipHandler, ReadIndexHandler,
    serve, serve_admitting, serve_tls,
};

#[cfg(test)]
mod membership_tests;
#[cfg(test)]
mod skew_tests;
#[cfg(test)]
mod stats_tests;
#[cfg(test)]
mod tests;
