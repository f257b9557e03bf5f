//! leased: a lease registry for long-running worker jobs that speaks the
//! Redis protocol.
//!
//! Data flows one way:
//!
//! ```text
//! socket -> request (decode) -> command (parse) -> core (registry apply) -> reply (encode) -> socket
//! ```
//!
//! The modules form layers, each importing only those below it (a test,
//! tests/layers.rs, checks that no import goes up or round in a circle):
//!
//! ```text
//! leaves   registry, request, reply, command, config, glob, number, splitargs,
//!          ceiling, aof, slowlog, monitor, pubsub, system, logging, warnings, tls,
//!          histogram
//! state    the running configuration, client table, counters, clock, the
//!          cluster's status
//! core     the task that owns the registry, the log and the token ceiling;
//!          cluster (the replicated registry: its core task, log, bus)
//! views    info, metrics
//! edges    connection, server
//! ```
//!
//! - [`config`]: the directive table, the redis.conf-style file, `--directive` overrides.
//! - [`warnings`]: settings that put leases at risk, warned about at start-up.
//! - [`logging`]: log levels, text or JSON lines, standard output or `logfile`.
//! - [`server`]: listeners, the client table, shutdown.
//! - [`connection`]: one client's session: read, parse, dispatch, write.
//! - [`tls`]: the TLS certificates and client-certificate policy for `tls-port`,
//!   and the node bus's mutual TLS (`tls-cluster`).
//! - [`request`]: strict decoding of RESP and inline requests, with limits.
//! - [`command`]: the command table and typed commands parsed from arguments.
//! - [`state`]: what connections, the core and the views share: the running
//!   configuration, the client table, counters, the clock.
//! - [`core`]: the one task that owns the registry and answers lease commands.
//! - [`registry`]: the pure lease state machine; its one deterministic
//!   `apply(op, clock)`.
//! - [`cluster`]: cluster mode: the registry replicated by Raft (openraft), its
//!   core task, durable log, node bus and views.
//! - [`ceiling`]: the durable fencing-token ceiling and the data-directory lock.
//! - [`reply`]: reply values and their RESP2/RESP3 encoding.
//! - [`info`]: the `INFO` text.
//! - [`monitor`]: the feed of commands to `MONITOR` clients.
//! - [`pubsub`]: channels and patterns, and the subscribers' queues of lease events.
//! - [`slowlog`]: the `SLOWLOG` of commands that ran long.
//! - [`system`]: the process's memory and CPU, the kernel, the open-files limit.
//! - [`metrics`]: the Prometheus endpoint (`metrics-port`), from the core's report.
//! - [`number`]: numbers in arguments, parsed as Redis parses them.
//! - [`splitargs`]: Redis's quoted-argument splitting, for inline requests and the config file.
//! - [`glob`]: Redis's glob patterns, for `CONFIG GET`.
//! - [`histogram`]: observations in fixed buckets (heartbeat slack, acquire waits).

pub mod aof;
pub mod ceiling;
pub mod cluster;
pub mod command;
pub mod config;
pub mod connection;
pub mod core;
pub mod glob;
pub mod histogram;
pub mod info;
pub mod logging;
pub mod metrics;
pub mod monitor;
pub mod number;
pub mod pubsub;
pub mod registry;
pub mod reply;
pub mod request;
pub mod server;
pub mod slowlog;
pub mod splitargs;
pub mod state;
pub mod system;
pub mod tls;
pub mod warnings;
