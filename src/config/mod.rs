//! Configuration: the directive table, the redis.conf-style file and the
//! `--directive value` overrides, `CONFIG GET`, `CONFIG SET` and `CONFIG
//! REWRITE`.
//!
//! One table, `DIRECTIVES`, drives all of them and `--help`, so the file,
//! the command line and the `CONFIG` commands cannot disagree about a
//! directive's name, default, syntax or whether it may change while the
//! server runs. Adding a directive is a field and a row.
//!
//! Everything here but `CONFIG REWRITE`'s file is pure: `CONFIG SET`
//! returns a new `Config` and the server decides what to do with it.
//!
//! The module is a leaf: it depends on nothing of the server (the number,
//! quoting and glob helpers aside), so any part of the server may read a
//! `Config` without pulling in the rest. One job per file:
//!
//! - `enums`: the small value types (log level, fsync policy, ...).
//! - `directives`: the table, and each directive's setter and printer.
//! - `source`: the file, the command line and `CONFIG GET`.
//! - `set`: `CONFIG SET`, all or nothing.
//! - `rewrite`: `CONFIG REWRITE`, the running values back into the file.
//! - `cluster`: the `cluster-nodes` entries and the checked cluster
//!   settings a node starts with.

mod cluster;
mod directives;
mod enums;
mod rewrite;
mod set;
mod source;
#[cfg(test)]
mod tests;

use std::fmt;
use std::io;
use std::net::IpAddr;
use std::path::PathBuf;

pub use cluster::{
    BUS_PORT_OFFSET, ClusterConfig, ClusterError, ClusterMember, ClusterNode,
    MIN_ELECTION_HEARTBEATS, parse_member,
};
pub use enums::{
    ClusterRedirect, FsyncPolicy, LogFormat, LogLevel, OutputLimit, OutputLimits, TlsAuthClients,
};
pub use rewrite::RewriteError;
pub use set::{SetError, is_sensitive};

/// The server's settings, after the file and the command line.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// TCP port; 0 picks a free one.
    pub port: u16,
    /// Addresses to listen on, already parsed so the server cannot be
    /// handed a name it would have to resolve or reject.
    pub bind: Vec<IpAddr>,
    /// The listen queue of each listener, as Redis's `tcp-backlog`: a burst
    /// of connections beyond it waits for the client to resend its SYN.
    pub tcp_backlog: u32,
    /// Port of the Prometheus endpoint on every `bind` address; 0: off.
    pub metrics_port: u16,
    /// Data directory: the token ceiling and the lock live here.
    pub dir: PathBuf,
    /// Default lease TTL in seconds.
    pub lease_ttl: f64,
    /// Seconds an expired lease stays releasable before it is reclaimed;
    /// 0 keeps expired leases forever.
    pub lease_retention: f64,
    /// The furthest, in seconds, an explicit `now` may be ahead of the
    /// server's wall clock; 0: no bound. One mistaken `now` (milliseconds
    /// sent as seconds) would otherwise expire every lease at once.
    pub lease_max_skew: f64,
    /// The lock delay of an acquire that gives no `LOCKDELAY`: seconds
    /// after a lease *expired* (not one released) during which its run
    /// cannot be acquired, for storage that cannot check fencing tokens.
    /// Never more than `lease_max_lock_delay`.
    pub lease_lock_delay: f64,
    /// The largest lock delay an acquire may ask for, in seconds.
    pub lease_max_lock_delay: f64,
    pub loglevel: LogLevel,
    /// Text or JSON lines.
    pub logformat: LogFormat,
    /// The file log lines are appended to; `None`: standard output.
    pub logfile: Option<PathBuf>,
    /// Whether changes go to the append-only log (leases survive restarts).
    pub appendonly: bool,
    /// The log's file name inside `dir`.
    pub appendfilename: String,
    /// When the log is fsynced.
    pub appendfsync: FsyncPolicy,
    /// Rewrite the log when it has grown by this percentage since the last
    /// rewrite (0: never automatically).
    pub auto_aof_rewrite_percentage: u64,
    /// ... and is at least this many bytes.
    pub auto_aof_rewrite_min_size: u64,
    /// Start with the good records before a corrupt one instead of refusing.
    pub aof_load_good_prefix: bool,
    /// Threads serving connections: 1 runs everything on one thread (the
    /// fastest on small machines), more a multi-thread runtime.
    pub io_threads: usize,
    /// Connections served at once; one more gets an error and is closed.
    pub maxclients: usize,
    /// The password of the `default` user; empty: no password.
    pub requirepass: String,
    /// Refuse to listen on a non-loopback address without a password.
    pub protected_mode: bool,
    /// Seconds a client may stay idle before it is closed; 0: forever.
    pub timeout: u64,
    /// Commands that run at least this many microseconds go to the slow
    /// log; 0 logs every command, a negative value none.
    pub slowlog_log_slower_than: i64,
    /// The most entries the slow log keeps.
    pub slowlog_max_len: usize,
    /// The longest bulk string (argument) a client may send.
    pub proto_max_bulk_len: usize,
    /// Bytes allocated above which acquires that would take a run are
    /// refused (`maxmemory`, Redis's noeviction); 0: no limit.
    pub maxmemory: u64,
    /// The most bytes of unfinished requests one client may have buffered.
    pub client_query_buffer_limit: usize,
    /// When a client that does not read its replies is disconnected, by
    /// class of client.
    pub client_output_buffer_limit: OutputLimits,
    /// The longest run or worker id a lease command accepts.
    pub lease_max_id_len: usize,
    /// The longest run data `LEASE.SETDATA` accepts, in bytes.
    pub lease_max_data_len: usize,
    /// Tenures `LEASE.HISTORY` keeps per run; 0 keeps none.
    pub lease_history_len: usize,
    /// TLS port on every `bind` address; 0: no TLS listener.
    pub tls_port: u16,
    /// The server's certificate chain and private key (PEM), needed with
    /// a `tls_port`.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    /// The CAs (PEM bundle) that client certificates must be signed by.
    pub tls_ca_cert_file: Option<PathBuf>,
    /// Whether TLS clients must present a certificate.
    pub tls_auth_clients: TlsAuthClients,
    /// Cluster mode: the node bus in mutual TLS, with `tls_cert_file` and
    /// `tls_key_file` as every node's certificate (server and client) and
    /// `tls_ca_cert_file` as the CA that signs them (`crate::tls::bus`).
    pub tls_cluster: bool,
    /// Cluster mode: this node is one of `cluster_nodes`, which replicate
    /// one registry. [`Config::cluster`] gives the checked settings.
    pub cluster_enabled: bool,
    /// This node's id among `cluster_nodes`; 0: none given.
    pub cluster_node_id: u64,
    /// Every node of the cluster, this one included, as written.
    pub cluster_nodes: Vec<ClusterNode>,
    /// This node's bus port; 0: the one `cluster_nodes` gives it (by
    /// default its client port + 10000).
    pub cluster_port: u16,
    /// The secret the nodes' bus requires of every peer; empty: none.
    pub cluster_secret: String,
    /// A node that joins a running cluster: it never forms one itself.
    pub cluster_join: bool,
    /// On a first start in cluster mode, form a one-node cluster from the
    /// single node's state in `dir`.
    pub cluster_init_from_single: bool,
    /// With cluster mode off: start from the Raft state in `dir`.
    pub cluster_recover_as_single: bool,
    /// Milliseconds a node's clock may differ from the majority's before
    /// it refuses to lead.
    pub cluster_max_clock_skew: u64,
    /// Milliseconds between the leader's heartbeats.
    pub cluster_heartbeat_interval: u64,
    /// The shortest election timeout, in milliseconds (the longest is
    /// twice it).
    pub cluster_election_timeout: u64,
    /// What a follower does with a client's write.
    pub cluster_redirect: ClusterRedirect,
    /// The configuration file read at start-up, if any.
    pub config_file: Option<PathBuf>,
}

/// Why a directive's arguments were refused. The messages name the
/// directive and what it expects, since they reach whoever wrote the line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DirectiveError {
    /// No directive has this name.
    Unknown { name: String },
    /// Too few or too many arguments; `expected` is "1" or "at least 1".
    Arity {
        name: &'static str,
        expected: &'static str,
        given: usize,
    },
    /// An argument the directive cannot take, and what it takes instead.
    Invalid {
        name: &'static str,
        expected: &'static str,
    },
    /// One of `bind`'s addresses is not a literal IP address.
    InvalidAddress { address: String },
    /// A quote opened and not closed, or closed in mid-argument.
    UnbalancedQuotes,
    /// An argument is not text.
    NotUtf8,
    /// `CONFIG SET` of a directive only the start-up may set.
    Immutable,
    /// `CONFIG SET` naming one directive twice.
    Duplicate,
    /// `lease-lock-delay` is greater than `lease-max-lock-delay`; both
    /// values as `CONFIG GET` prints them. Checked once the whole
    /// configuration is known, since either line may come first.
    LockDelayOverMax { lock_delay: String, max: String },
    /// The cluster directives do not fit together (or with `port`).
    /// Checked once the whole configuration is known, like the above.
    Cluster(ClusterError),
}

impl fmt::Display for DirectiveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DirectiveError::Unknown { name } => write!(f, "unknown directive '{name}'"),
            DirectiveError::Arity {
                name,
                expected,
                given,
            } => write!(
                f,
                "wrong number of arguments for '{name}' (expected {expected}, got {given})"
            ),
            DirectiveError::Invalid { name, expected } => {
                write!(f, "invalid {name} (expected {expected})")
            }
            DirectiveError::InvalidAddress { address } => write!(
                f,
                "invalid bind address '{address}' (expected an IPv4 or IPv6 address)"
            ),
            DirectiveError::UnbalancedQuotes => f.write_str("unbalanced quotes"),
            DirectiveError::NotUtf8 => f.write_str("an argument is not valid UTF-8"),
            // Redis's wording, after "CONFIG SET failed (...) - ".
            DirectiveError::Immutable => f.write_str("can't set immutable config"),
            DirectiveError::Duplicate => f.write_str("duplicate parameter"),
            DirectiveError::LockDelayOverMax { lock_delay, max } => write!(
                f,
                "lease-lock-delay ({lock_delay}) is greater than lease-max-lock-delay ({max}), \
                 the largest lock delay an acquire may ask for"
            ),
            DirectiveError::Cluster(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for DirectiveError {}

/// Why the configuration could not be loaded.
#[derive(Debug)]
pub enum ConfigError {
    /// From the command-line parser, including `--help` and `--version`,
    /// which `clap::Error::exit` prints and exits with the right code.
    Args(clap::Error),
    /// The configuration file could not be read.
    File { path: PathBuf, error: io::Error },
    /// A line of the file was refused; `source` names the file and
    /// `line_no` counts from 1.
    Line {
        source: String,
        line_no: usize,
        line: String,
        error: DirectiveError,
    },
    /// A `--directive value` was refused; `value` is its arguments joined
    /// by spaces.
    CommandLine {
        name: &'static str,
        value: String,
        error: DirectiveError,
    },
    /// Every line and option was taken, but together they break a rule
    /// between directives (`lease-lock-delay` above `lease-max-lock-delay`).
    Conflict { error: DirectiveError },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Args(e) => write!(f, "{e}"),
            ConfigError::File { path, error } => {
                write!(f, "can't open config file '{}': {error}", path.display())
            }
            ConfigError::Line {
                source,
                line_no,
                line,
                error,
            } => write!(f, "{source}:{line_no}: '{line}': {error}"),
            ConfigError::CommandLine { name, value, error } => {
                write!(f, "command line: '--{name} {value}': {error}")
            }
            ConfigError::Conflict { error } => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Args(e) => Some(e),
            ConfigError::File { error, .. } => Some(error),
            ConfigError::Line { error, .. }
            | ConfigError::CommandLine { error, .. }
            | ConfigError::Conflict { error } => Some(error),
        }
    }
}
