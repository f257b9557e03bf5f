//! Configuration: the directive table, the redis.conf-style file and the
//! `--directive value` overrides, and `CONFIG GET`.
//!
//! One table, `DIRECTIVES`, drives all of them and `--help`, so the file,
//! the command line and `CONFIG GET` cannot disagree about a directive's
//! name, default or syntax. Adding a directive is a field and a row.
//!
//! The module is a leaf: it depends on nothing of the server (the number,
//! quoting and glob helpers aside), so any part of the server may read a
//! `Config` without pulling in the rest. One job per file:
//!
//! - `enums`: the small value types (log level, fsync policy, ...).
//! - `directives`: the table, and each directive's setter and printer.
//! - `source`: the file, the command line and `CONFIG GET`.

mod directives;
mod enums;
mod source;
#[cfg(test)]
mod tests;

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

pub use enums::{FsyncPolicy, LogFormat, LogLevel, OutputLimit, TlsAuthClients};

/// The server's settings, after the file and the command line.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// TCP port; 0 picks a free one.
    pub port: u16,
    /// Addresses to listen on, already parsed so the server cannot be
    /// handed a name it would have to resolve or reject.
    pub bind: Vec<IpAddr>,
    /// Port of the Prometheus endpoint on every `bind` address; 0: off.
    pub metrics_port: u16,
    /// Data directory: the token ceiling and the lock live here.
    pub dir: PathBuf,
    /// Default lease TTL in seconds.
    pub lease_ttl: f64,
    /// Seconds an expired lease stays releasable before it is reclaimed;
    /// 0 keeps expired leases forever.
    pub lease_retention: f64,
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
    /// The most bytes of unfinished requests one client may have buffered.
    pub client_query_buffer_limit: usize,
    /// When a client that does not read its replies is disconnected.
    pub client_output_buffer_limit: OutputLimit,
    /// The longest run or worker id a lease command accepts.
    pub lease_max_id_len: usize,
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
    /// The configuration file read at start-up, if any.
    pub config_file: Option<PathBuf>,
}

/// Why the configuration could not be loaded.
#[derive(Debug)]
pub enum ConfigError {
    /// From the command-line parser, including `--help` and `--version`,
    /// which `clap::Error::exit` prints and exits with the right code.
    Args(clap::Error),
    /// Anything else: the message names the directive (and file line).
    Invalid(String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Args(e) => write!(f, "{e}"),
            ConfigError::Invalid(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ConfigError {}
