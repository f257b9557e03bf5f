//! What every connection, the core and the views share: the running
//! configuration, the client table, the counters, the clock, the slow log,
//! the monitor feed and the pub/sub subscriptions.
//!
//! This layer imports nothing above it (no connection, core, server, INFO
//! or metrics), so those can all depend on it without depending on each
//! other.

mod calls;
mod clients;
mod clock;
pub mod cluster;
pub mod cluster_stats;
mod stats;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::{ArcSwap, ArcSwapOption, Guard};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::monitor::Monitors;
use crate::pubsub::PubSub;
use crate::slowlog::SlowLog;
use cluster::ClusterStatus;
use cluster_stats::ClusterStats;

pub use calls::{CallStats, Counts, Tally};
pub use clients::{ClientEntry, ClientMeta, ClientTable};
pub use clock::Clock;
pub use stats::{Instantaneous, Metered, SAMPLE_INTERVAL, Stats, run_sampler};

#[derive(Debug)]
pub struct Shared {
    /// The running configuration: `CONFIG SET` swaps in a new one whole,
    /// and a reader sees either the old or the new, never half of each.
    config: ArcSwap<Config>,
    /// The addresses actually listened on (with the real port for `--port 0`).
    pub listen_addrs: Vec<SocketAddr>,
    /// The addresses listened on for TLS (`tls-port`).
    pub tls_listen_addrs: Vec<SocketAddr>,
    pub started: Instant,
    pub clients: ClientTable,
    pub stats: Stats,
    /// `INFO commandstats`, `errorstats` and `latencystats`.
    pub calls: CallStats,
    /// The connections in `MONITOR` mode, and the feed of commands to them.
    pub monitors: Monitors,
    /// Subscriptions to lease events.
    pub pubsub: PubSub,
    pub slowlog: SlowLog,
    /// Cancelled to shut the server down.
    pub shutdown: CancellationToken,
    /// The server's clock for lease commands without `now`.
    pub clock: Clock,
    /// What this node knows of its cluster, republished by the node as it
    /// changes; `None` for a single node. Swapped whole, so `ROLE` and
    /// `INFO` never see half of one status and half of the next.
    cluster: ArcSwapOption<ClusterStatus>,
    /// What this node's bus and Raft counted (elections, snapshots, bus
    /// errors); all zero for a single node, which shows none of them.
    pub cluster_stats: Arc<ClusterStats>,
    /// `CLUSTER ADDNODE|DELNODE`, once a cluster node has started.
    membership: std::sync::OnceLock<cluster::MembershipHook>,
}

impl Shared {
    pub fn new(
        config: Config,
        listen_addrs: Vec<SocketAddr>,
        tls_listen_addrs: Vec<SocketAddr>,
        clock: Clock,
    ) -> Shared {
        Shared {
            config: ArcSwap::from_pointee(config),
            listen_addrs,
            tls_listen_addrs,
            started: Instant::now(),
            clients: ClientTable::default(),
            stats: Stats::new(),
            calls: CallStats::default(),
            monitors: Monitors::default(),
            pubsub: PubSub::default(),
            slowlog: SlowLog::default(),
            shutdown: CancellationToken::new(),
            clock,
            cluster: ArcSwapOption::empty(),
            cluster_stats: Arc::default(),
            membership: std::sync::OnceLock::new(),
        }
    }

    /// The running configuration. Cheap (no lock, no reference count
    /// touched on the fast path): read it where a setting is needed rather
    /// than keeping a copy, so `CONFIG SET` takes effect at once.
    pub fn config(&self) -> Guard<Arc<Config>> {
        self.config.load()
    }

    /// Makes `config` the running configuration (`CONFIG SET`).
    pub fn set_config(&self, config: Config) {
        self.config.store(Arc::new(config));
    }

    /// The cluster status last published; `None` for a single node (or a
    /// node that has not published one yet).
    pub fn cluster(&self) -> Option<Arc<ClusterStatus>> {
        self.cluster.load_full()
    }

    /// Installs how `CLUSTER ADDNODE|DELNODE` are run (once, at start).
    pub fn set_membership(&self, hook: cluster::MembershipHook) {
        let _ = self.membership.set(hook);
    }

    /// How `CLUSTER ADDNODE|DELNODE` are run; `None` on a single node.
    pub fn membership(&self) -> Option<cluster::MembershipHook> {
        self.membership.get().cloned()
    }

    /// Publishes this node's cluster status (`None`: a single node).
    pub fn set_cluster(&self, status: Option<ClusterStatus>) {
        self.cluster.store(status.map(Arc::new));
    }

    /// Replaces the published status by `change` of it, done again if
    /// another publisher got in between: the node's status task and its
    /// clock guard each publish their part of one status.
    pub fn update_cluster(&self, change: impl Fn(Option<&ClusterStatus>) -> Option<ClusterStatus>) {
        self.cluster
            .rcu(|current| change(current.as_deref()).map(Arc::new));
    }
}
