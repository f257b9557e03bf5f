//! What every integration test shares: the server (the spawned binary, or
//! one in the test's own runtime), one typed client, and raw-socket helpers.
//!
//! - [`binary`]: the real `leased` binary on a free port, for tests of the
//!   process itself (start-up, signals, crashes, logs) and of other
//!   programs driving it; bounded polls for what such a process does that
//!   no reply announces.
//! - [`inprocess`]: a server in the test's runtime whose clock follows
//!   tokio's, for tests that need time to pass (`tokio::time::advance`
//!   under paused time, no sleeping).
//! - [`client`]: the typed client, blocking and async, and the readers of
//!   its replies.
//! - [`raw`]: requests and replies as bytes.
//! - [`cluster`]: three spawned nodes whose bus links go through proxies
//!   ([`proxy`]), to kill, stop, partition or slow any of them.
//! - [`child`]: other programs a test runs (scripts of other clients),
//!   bounded in time and killed with the test.
//! - [`pki`]: a CA and certificates it signs, for TLS tests.
//!
//! Beside them, included by `#[path]` from tests/cluster.rs and
//! examples/nemesis.rs only (they are no modules of this one, so their
//! unit tests run once): `history.rs` (a history of client commands and
//! the lease checks over it), `recording.rs` (a client recording into it)
//! and `nemesis.rs` (faults at random while clients work).
//!
//! Every test binary compiles this module and uses part of it: an item
//! that some of them leave unused carries `#[allow(dead_code)]`.

pub mod binary;
pub mod child;
pub mod client;
pub mod cluster;
pub mod inprocess;
pub mod pki;
pub mod proxy;
pub mod raw;
